"""The index builder's insert rate on a backlog against usearch's own batch add, in process.

Usage (from the repository root)::

    python benchmarks/bulk_load.py [--n 50000] [--rounds 3] [--threads 2] [--write-rate 3500 --python-us 100]
        [--bulk-threads N] [--bulk-call-s S] [--json out/bulk_load.json]

``--n`` unit Gaussian vectors (``--dimension``, default 384), the same in
every cell, into an empty graph of the sidecar's configuration
(``IndexConfig()``: cosine, f16, M 16, expansion_add 128). Cells, interleaved
round by round:

- ``usearch 1 thread`` / ``usearch N threads``: one ``Index.add(keys, vectors,
  threads=...)`` of the whole batch, the ceiling a builder can approach;
- ``builder``: ``VectorIndex.add`` of the vectors as writes deliver them
  (chunks of ``--write-chunk``), then the background builder started, timed
  until the fresh tail is empty (every vector in the graph). The builder runs
  with the configured settings, so on another revision (``PYTHONPATH``) it
  measures that revision's builder.

With ``--write-rate`` the builder cell starts with half the vectors in the
fresh tail and a writer thread streams the other half at that rate while the
builder works, spending ``--python-us`` of pure Python (holding the
interpreter lock, as the gRPC write path does) per vector: the builder's rate
under a concurrent write stream, as issue 41 item 7 asks, without RocksDB or
gRPC. The writer stands in for the sidecar's write path only by its use of the
interpreter lock and a core.

While a builder cell runs, a probe thread searches the index (k=10, one query
at a time, as a Recall does) and reports the p50/p99 of those searches: the
price recall pays for the builder's batch size. Reported per cell: the median
vectors/s over the rounds, each round's figure, and the ratio to ``usearch N
threads`` of the same round. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from usearch.index import Index

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import machine as machine_info  # noqa: E402
from memevo.sidecar.config import IndexConfig  # noqa: E402
from memevo.sidecar.store.vector_index import VectorIndex  # noqa: E402

PROBE_PAUSE_S = 0.02
"""Pause between two probe searches (a recall now and then, not a search loop taking a core)."""


def unit_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dimension), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def usearch_cell(vectors: np.ndarray, threads: int) -> dict[str, Any]:
    config = IndexConfig()
    graph = Index(
        ndim=vectors.shape[1],
        metric="cos",
        dtype=config.dtype,
        connectivity=config.connectivity,
        expansion_add=config.expansion_add,
        expansion_search=config.expansion_search,
    )
    keys = np.arange(vectors.shape[0], dtype=np.uint64)
    began = time.perf_counter()
    graph.add(keys, vectors, threads=threads)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "per_s": vectors.shape[0] / seconds}


def spin_python(seconds: float) -> None:
    """Hold the interpreter lock in Python bytecode for about ``seconds`` (a request's conversion work)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def builder_cell(
    vectors: np.ndarray, write_chunk: int, scratch: Path, write_rate: float, python_us: float, config: IndexConfig
) -> dict[str, Any]:
    index = VectorIndex(scratch, vectors.shape[1], config)
    ids = np.arange(1, vectors.shape[0] + 1, dtype=np.int64)
    preloaded = ids.size // 2 if write_rate > 0 else ids.size
    for start in range(0, preloaded, write_chunk):
        end = min(start + write_chunk, preloaded)
        index.add(ids[start:end], vectors[start:end])
    streamed_s: list[float] = []

    def write() -> None:
        began = time.perf_counter()
        for start in range(preloaded, ids.size, write_chunk):
            end = min(start + write_chunk, ids.size)
            spin_python((end - start) * python_us / 1e6)
            index.add(ids[start:end], vectors[start:end])
            ahead = began + (end - preloaded) / write_rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        streamed_s.append(time.perf_counter() - began)

    queries = unit_vectors(64, vectors.shape[1], seed=12345)
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        turn = 0
        while not done.is_set():
            query = queries[turn % len(queries)][None, :]
            began = time.perf_counter()
            index.search(query, 10, with_tail=False)
            latencies.append(time.perf_counter() - began)
            turn += 1
            done.wait(PROBE_PAUSE_S)

    began = time.perf_counter()
    index.start(lambda: 0)
    prober = threading.Thread(target=probe, name="bulk-load-probe", daemon=True)
    prober.start()
    writer = threading.Thread(target=write, name="bulk-load-writer", daemon=True)
    if preloaded < ids.size:
        writer.start()
    while writer.is_alive():
        time.sleep(0.01)
    graph_while_writing = index.graph_count
    writes_s = time.perf_counter() - began
    while index.tail_count:
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    done.set()
    prober.join()
    index.close(save=False)
    ms = sorted(1000 * x for x in latencies)
    return {
        "seconds": seconds,
        "per_s": vectors.shape[0] / seconds,
        "graph": index.graph_count,
        "writes_s": streamed_s[0] if streamed_s else None,
        "per_s_while_writing": graph_while_writing / writes_s if streamed_s else None,
        "repaired": getattr(index, "repaired", 0),
        "searches": len(ms),
        "search_p50_ms": statistics.median(ms) if ms else None,
        "search_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    vectors = unit_vectors(args.n, args.dimension, args.seed)
    overrides: dict[str, Any] = {}
    if args.bulk_threads is not None:
        overrides["bulk_threads"] = args.bulk_threads
    if args.bulk_call_s is not None:  # a revision before issue 41 item 7 has no such setting: leave it out there
        overrides["bulk_call_s"] = args.bulk_call_s
    config = IndexConfig(**overrides)
    cells = ["usearch 1 thread", f"usearch {args.threads} threads", "builder"]
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        row: dict[str, Any] = {"round": number + 1, "load_average": machine_info.load_average()}
        for cell in cells:
            if cell == "builder":
                with tempfile.TemporaryDirectory(prefix="memevo-bulk-load-") as scratch:
                    row[cell] = builder_cell(
                        vectors, args.write_chunk, Path(scratch), args.write_rate, args.python_us, config
                    )
            else:
                row[cell] = usearch_cell(vectors, 1 if cell == "usearch 1 thread" else args.threads)
            print(f"round {number + 1} {cell}: {row[cell]['per_s']:,.0f}/s", file=sys.stderr, flush=True)
        rounds.append(row)
    reference = f"usearch {args.threads} threads"
    summary: dict[str, Any] = {}
    for cell in cells:
        rates = [row[cell]["per_s"] for row in rounds]
        ratios = [row[cell]["per_s"] / row[reference]["per_s"] for row in rounds]
        summary[cell] = {
            "median_per_s": statistics.median(rates),
            "per_s": rates,
            "median_ratio": statistics.median(ratios),
        }
        if cell == "builder":
            summary[cell]["search_p50_ms"] = statistics.median(row[cell]["search_p50_ms"] or 0.0 for row in rounds)
            summary[cell]["search_p99_ms"] = statistics.median(row[cell]["search_p99_ms"] or 0.0 for row in rounds)
            summary[cell]["repaired"] = [row[cell]["repaired"] for row in rounds]
            if args.write_rate > 0:
                summary[cell]["per_s_while_writing"] = [row[cell]["per_s_while_writing"] for row in rounds]
    return {
        "benchmark": "bulk_load",
        "started": args.started,
        "n": args.n,
        "dimension": args.dimension,
        "write_rate": args.write_rate,
        "index_overrides": overrides,
        "python_us": args.python_us,
        "rounds": rounds,
        "summary": summary,
        "machine": machine_info.machine(),
    }


def print_table(result: dict[str, Any], threads: int) -> None:
    reference = f"usearch {threads} threads"
    settings = result["index_overrides"] or "as configured"
    print(f"{result['n']:,} unit Gaussian {result['dimension']}-d vectors into an empty graph; builder settings "
          f"{settings}; load at the end {result['machine']['load_average']}")  # fmt: skip
    print(f"| cell | median vectors/s | per round | median ratio to {reference} | probe search p50 / p99 |")
    print("|---|---|---|---|---|")
    for cell, figures in result["summary"].items():
        rounds = ", ".join(f"{rate:,.0f}" for rate in figures["per_s"])
        probe = "—"
        if "search_p50_ms" in figures:
            probe = f"{figures['search_p50_ms']:.2f} / {figures['search_p99_ms']:.2f} ms"
        print(f"| {cell} | {figures['median_per_s']:,.0f} | {rounds} | {figures['median_ratio']:.2f} | {probe} |")
    builder = result["summary"]["builder"]
    if builder.get("per_s_while_writing"):
        while_writing = ", ".join(f"{rate:,.0f}" for rate in builder["per_s_while_writing"])
        print(f"builder while {result['write_rate']:,.0f}/s writes streamed ({result['python_us']:.0f} us of Python "
              f"each): graph grew {while_writing} vectors/s; repaired {builder['repaired']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50_000, help="vectors per cell (default: %(default)s)")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every cell, interleaved (default: %(default)s)"
    )
    parser.add_argument("--threads", type=int, default=2, help="usearch threads of the reference cell")
    parser.add_argument("--write-chunk", type=int, default=1000, help="vectors per write into the fresh tail")
    parser.add_argument("--write-rate", type=float, default=0.0, help="stream half the vectors at this rate (0: none)")
    parser.add_argument("--python-us", type=float, default=100.0, help="pure Python per streamed vector, microseconds")
    parser.add_argument(
        "--bulk-threads", type=int, default=None, help="IndexConfig.bulk_threads (default: as configured)"
    )
    parser.add_argument(
        "--bulk-call-s", type=float, default=None, help="IndexConfig.bulk_call_s (default: as configured)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()
    args.started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result = run(args)
    print_table(result, args.threads)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
