"""How long requests wait while the index builder saves the graph: searches and a Python loop beside a save.

Usage (from the repository root)::

    python benchmarks/save_stall.py [--vectors 200000] [--saves 3] [--graph CACHE] [--json out/save_stall.json]

A ``VectorIndex`` holding ``--vectors`` random 384-d vectors in its graph (built once and kept in ``--graph``, a
usearch file, when given) is saved ``--saves`` times while two threads run: one searches it over and over
(k=10, as Recall does), one sleeps 1 ms in a loop (any request's Python: health, writes). For each save: its
seconds, the longest search that overlapped it and the longest gap of the sleeping loop, beside the median search
outside saves. To compare revisions, run it with each on ``PYTHONPATH`` (the ``memevo`` imported is the one
measured). Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import memevo  # noqa: E402
from benchmarks import machine as machine_info  # noqa: E402
from memevo.sidecar.config import IndexConfig  # noqa: E402
from memevo.sidecar.store.vector_index import INDEX_FILE, INDEX_META_FILE, VectorIndex  # noqa: E402

DIMENSION = 384


def _prepare(directory: Path, vectors: int, graph: Path | None, seed: int) -> None:
    """Put a saved graph of ``vectors`` random vectors (and its metadata) into ``directory``."""
    if graph is not None and graph.exists():
        shutil.copyfile(graph, directory / INDEX_FILE)
    else:
        index = VectorIndex(directory, DIMENSION, IndexConfig(build_threads=2, expansion_add=16))
        rows = np.random.default_rng(seed).standard_normal((vectors, DIMENSION)).astype(np.float32)
        index.bulk_build(np.arange(1, vectors + 1, dtype=np.int64), rows)
        index.save()
        if graph is not None:
            shutil.copyfile(directory / INDEX_FILE, graph)
    digest = hashlib.sha256((directory / INDEX_FILE).read_bytes()).hexdigest()
    meta = {"sequence": 0, "count": vectors, "dimension": DIMENSION, "saved_at": time.time(), "sha256": digest}
    (directory / INDEX_META_FILE).write_text(json.dumps(meta))


def run(vectors: int, saves: int, graph: Path | None, seed: int = 0) -> list[dict[str, float]]:
    """Save ``saves`` times beside a searching and a sleeping thread; per save its figures."""
    scratch = Path(tempfile.mkdtemp(prefix="memevo-save-stall-"))
    try:
        _prepare(scratch, vectors, graph, seed)
        index = VectorIndex(scratch, DIMENSION, IndexConfig())
        if not index.load():
            raise RuntimeError(f"graph not loaded: {index.load_problem}")
        queries = np.random.default_rng(seed + 1).standard_normal((64, DIMENSION)).astype(np.float32)
        stop = threading.Event()
        searches: list[tuple[float, float]] = []  # (start, end), perf_counter
        gaps: list[tuple[float, float]] = []

        def searcher() -> None:
            at = 0
            while not stop.is_set():
                started = time.perf_counter()
                index.search(queries[at % len(queries) : at % len(queries) + 1], 10)
                searches.append((started, time.perf_counter()))
                at += 1

        def sleeper() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps.append((last, now))
                last = now

        threads = [threading.Thread(target=searcher), threading.Thread(target=sleeper)]
        for thread in threads:
            thread.start()
        windows: list[tuple[float, float]] = []
        try:
            for _ in range(saves):
                time.sleep(1.0)
                started = time.perf_counter()
                index.save()
                windows.append((started, time.perf_counter()))
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()

        def overlaps(span: tuple[float, float], window: tuple[float, float]) -> bool:
            return span[0] < window[1] and span[1] > window[0]

        outside = [end - start for start, end in searches if not any(overlaps((start, end), w) for w in windows)]
        rows = []
        for window in windows:
            during = [end - start for start, end in searches if overlaps((start, end), window)]
            gap = [end - start for start, end in gaps if overlaps((start, end), window)]
            rows.append(
                {
                    "save_s": window[1] - window[0],
                    "longest_search_ms": 1000 * max(during, default=float("nan")),
                    "searches_during": float(len(during)),
                    "longest_gap_ms": 1000 * max(gap, default=float("nan")),
                    "search_ms_outside_median": 1000 * statistics.median(outside) if outside else float("nan"),
                }
            )
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--graph", type=Path, default=None, help="usearch file to reuse (built and kept if missing)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    load_at_start = machine_info.load_average()
    rows = run(args.vectors, args.saves, args.graph)
    print(f"memevo from {Path(memevo.__file__).parent}")
    print("| save s | longest search during it, ms | searches during it | longest 1 ms sleep, ms | search ms outside |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['save_s']:.3f} | {row['longest_search_ms']:.0f} | {row['searches_during']:.0f} "
            f"| {row['longest_gap_ms']:.0f} | {row['search_ms_outside_median']:.2f} |"
        )
    if args.json is not None:
        result: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "memevo": str(Path(memevo.__file__).parent),
            "vectors": args.vectors,
            "rows": rows,
            "machine": machine_info.machine(),
            "load_average": [load_at_start, machine_info.load_average()],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
