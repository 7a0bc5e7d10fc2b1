"""Search and snapshot cost of the fresh tail (vectors acknowledged but not yet in the ANN graph).

Usage (from the repository root)::

    python benchmarks/fresh_tail.py [--sizes 1e4,5e4,2e5] [--json out/fresh_tail.json]

An index with an empty graph and N tail vectors (384-d, written in chunks of
512 as the committer writes them; no builder running, so nothing leaves the
tail): the median time of ``VectorIndex.search`` for 20 neighbours over 50
queries, and of ``tail_snapshot`` right after one more write (what a recall
pays for its word-only candidates' vectors during a backlog). To compare with
another revision, run the same script with ``PYTHONPATH`` pointing at that
revision's ``src``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.throughput import machine, parse_sizes  # noqa: E402
from memevo.sidecar.config import IndexConfig  # noqa: E402
from memevo.sidecar.store.vector_index import VectorIndex, normalize_rows  # noqa: E402

DIMENSION = 384
WRITE_CHUNK = 512
QUERIES = 50


def measure(n: int, rng: np.random.Generator) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="memevo-tail-") as scratch:
        index = VectorIndex(Path(scratch), DIMENSION, IndexConfig())
        vectors = rng.normal(size=(n, DIMENSION)).astype(np.float32)
        for start in range(0, n, WRITE_CHUNK):
            stop = min(start + WRITE_CHUNK, n)
            index.add(np.arange(start + 1, stop + 1, dtype=np.int64), vectors[start:stop])
        queries = normalize_rows(rng.normal(size=(QUERIES, DIMENSION)).astype(np.float32))
        index.search(queries[:1], 20)
        searches = []
        for row in range(QUERIES):
            began = time.perf_counter()
            index.search(queries[row : row + 1], 20)
            searches.append(time.perf_counter() - began)
        snapshots = []
        for extra in range(20):
            index.add(np.asarray([n + 1 + extra], dtype=np.int64), vectors[:1])
            began = time.perf_counter()
            index.tail_snapshot()
            snapshots.append(time.perf_counter() - began)
    return {
        "tail_vectors": n,
        "search_p50_ms": round(statistics.median(searches) * 1e3, 3),
        "snapshot_after_write_p50_ms": round(statistics.median(snapshots) * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1e4,5e4,2e5"))
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = [measure(n, rng) for n in args.sizes]
    print("| tail vectors | search p50 ms | tail snapshot after a write, p50 ms |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row['tail_vectors']:,} | {row['search_p50_ms']} | {row['snapshot_after_write_p50_ms']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "fresh_tail", "machine": machine(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
