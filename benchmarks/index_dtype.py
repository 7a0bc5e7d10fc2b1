"""Compare the HNSW graph's scalar types (f32, f16, i8): build rate, search time and recall against exact search.

Usage (from the repository root)::

    python benchmarks/index_dtype.py [--n 30000] [--dimension 384] [--queries 500] [--repeats 5] [--json PATH]

The same clustered unit vectors (200 centres plus noise, like embeddings of
topical text) go into one usearch graph per scalar type, with the sidecar's
graph settings (``IndexConfig``: connectivity, expansion, cosine metric);
each graph is built with one thread, as the sidecar's builder does. Search
asks for 20 neighbours, as a k-10 recall does, one query at a time; recall@10
compares the first ten with exact (float64) cosine search. Search times are
medians over ``--repeats`` passes of all queries. It picks
``IndexConfig.dtype``; not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.machine import machine  # noqa: E402

DTYPES = ("f32", "f16", "i8")
SEARCH_COUNT = 20
CENTRES = 200
NOISE = 0.6


def clustered(rng: np.random.Generator, centres: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float32]:
    """``n`` unit vectors around random centres."""
    rows = centres[rng.integers(0, centres.shape[0], n)] + NOISE * rng.normal(size=(n, centres.shape[1]))
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


def measure(
    dtype: str, vectors: npt.NDArray[np.float32], queries: npt.NDArray[np.float32], truth: Any, repeats: int
) -> dict[str, Any]:
    from usearch.index import Index

    from memevo.sidecar.config import IndexConfig

    config = IndexConfig()
    index = Index(
        ndim=vectors.shape[1],
        metric="cos",
        dtype=dtype,
        connectivity=config.connectivity,
        expansion_add=config.expansion_add,
        expansion_search=config.expansion_search,
    )
    started = time.perf_counter()
    index.add(np.arange(vectors.shape[0], dtype=np.uint64), vectors, threads=1)
    build_s = time.perf_counter() - started
    passes = []
    found = []
    for _ in range(repeats):
        started = time.perf_counter()
        found = [index.search(q, SEARCH_COUNT) for q in queries]
        passes.append((time.perf_counter() - started) / len(queries))
    recall = float(
        np.mean([len(set(f.keys[:10].tolist()) & set(t.tolist())) / 10 for f, t in zip(found, truth, strict=True)])
    )
    return {
        "dtype": dtype,
        "n": int(vectors.shape[0]),
        "dimension": int(vectors.shape[1]),
        "build_per_s": round(vectors.shape[0] / build_s),
        "search_ms_median": round(statistics.median(passes) * 1e3, 4),
        "recall_at_10": round(recall, 4),
        "memory_bytes": int(index.memory_usage),
        "kernel": str(index.hardware_acceleration),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    centres = rng.normal(size=(CENTRES, args.dimension))
    vectors = clustered(rng, centres, args.n)
    queries = clustered(rng, centres, args.queries)
    truth = np.argsort(-(queries.astype(np.float64) @ vectors.astype(np.float64).T), axis=1)[:, :10]
    rows = []
    for dtype in args.dtypes.split(","):
        rows.append(measure(dtype, vectors, queries, truth, args.repeats))
        print(f"  {dtype}: {rows[-1]}", flush=True)
    base = rows[0]
    print(f"\nHNSW scalar types, {args.n:,} x {args.dimension}-d clustered unit vectors, 1 build thread")
    print("| dtype | builds/s | × first | search ms (k 20) | × first | recall@10 | graph MiB | kernel |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['dtype']} | {row['build_per_s']:,} | {row['build_per_s'] / base['build_per_s']:.2f} "
            f"| {row['search_ms_median']:.3f} | {base['search_ms_median'] / row['search_ms_median']:.2f} "
            f"| {row['recall_at_10']:.3f} | {row['memory_bytes'] / 2**20:.0f} | {row['kernel']} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
