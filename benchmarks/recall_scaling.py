"""How far vector Recall over gRPC scales from 1 to 8 callers, against the least such a recall can be in this stack.

Usage (from the repository root)::

    python benchmarks/recall_scaling.py [--size 1e5] [--repeats 5] [--cache DIR] [--json out/recall_scaling.json]

Issue 28 asks for vector recall with 8 callers at >= 1.7x one caller's calls/s
(both cores used). On 2 cores the answer depends on how much of a call holds
the interpreter lock, in memevo's code and in grpcio's, so this script serves
the same store (``benchmarks/throughput.py``'s cached one, same ``--cache``)
twice, side by side in one run:

- ``memevo``: ``memevo serve`` on a working copy, as in ``throughput.py``;
- ``floor``: a grpcio server (the same synchronous server and thread pool
  memevo uses) whose ``MemoryService.Recall`` does only what no recall can
  skip: decode the query vector, one usearch search of the saved graph, one
  rocksdict multi-get of the k records, parse them and build the response
  (similarity and a hint per memory). No ranking, validation, access
  statistics, retrieval log or interceptors.

Both are driven by ``throughput.py``'s client pool (2 spawned processes,
raw stubs, requests prepared untimed), k 10, query vector only. Within each
repeat the servers and caller counts take turns, so a change of load on a
shared machine falls on all cells alike. Reported per server: calls/s,
p50, the server process's CPU ms per call (every thread) and the 8 / 1
ratio per repeat and its median. The floor's ratio is the ceiling this
stack (CPython, grpcio's server, usearch, rocksdict) gives on the machine;
memevo's distance below it is what recall's own per-call Python costs.
Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, cast

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.throughput import (  # noqa: E402
    Cell,
    Corpus,
    ensure_store,
    machine,
    parse_sizes,
    run_cell,
    served,
    working_copy,
)

CALLERS = (1, 8)
TARGET_RATIO = 1.7
"""Issue 28: 8 callers' vector-recall calls/s over one caller's."""
SERVERS = ("memevo", "floor")
FLOOR_WORKERS = 16
STARTUP_TIMEOUT_S = 600.0


def floor_server(data_dir: str, address: str, ready_path: str) -> None:
    """Serve the floor's Recall on ``address`` until killed; touch ``ready_path`` once listening."""
    import grpc
    import rocksdict
    from usearch.index import Index

    from memevo.v1 import memory_service_pb2

    index = Index.restore(str(Path(data_dir) / "index.usearch"))
    if index is None:
        raise RuntimeError(f"no usearch index in {data_dir}")
    db = rocksdict.Rdict(
        str(Path(data_dir) / "rocksdb"),
        rocksdict.Options(raw_mode=True),
        column_families={name: rocksdict.Options(raw_mode=True) for name in ("memories", "vectors")},
        access_type=rocksdict.AccessType.read_only(),
    )
    records = db.get_column_family("memories")

    def recall(request: Any, context: Any) -> Any:
        vector = np.frombuffer(request.query_vector, dtype="<f4")
        found = index.search(vector, request.k)
        raws: list[Any] = cast(Any, records).get([int(key).to_bytes(8, "big") for key in found.keys])
        response = memory_service_pb2.RecallResponse(retrieval_id="floor")
        for raw, distance in zip(raws, found.distances, strict=True):
            if raw is None:
                continue
            item = response.memories.add()
            item.memory.ParseFromString(bytes(raw))
            item.similarity = 1.0 - float(distance)
            item.hint = "current"
        return response

    handler = grpc.method_handlers_generic_handler(
        "memevo.v1.MemoryService",
        {
            "Recall": grpc.unary_unary_rpc_method_handler(
                recall,
                request_deserializer=memory_service_pb2.RecallRequest.FromString,
                response_serializer=memory_service_pb2.RecallResponse.SerializeToString,
            )
        },
    )

    server = grpc.server(futures.ThreadPoolExecutor(FLOOR_WORKERS))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(address)
    server.start()
    Path(ready_path).touch()
    server.wait_for_termination()


@contextlib.contextmanager
def floor_served(source: Path, run_dir: Path) -> Iterator[dict[str, Any]]:
    """The floor server on a unix socket in ``run_dir``, reading ``source`` read-only; yields {unix, pid}."""
    address = f"unix://{run_dir / 'floor.sock'}"
    ready = run_dir / "floor.ready"
    process = multiprocessing.get_context("spawn").Process(
        target=floor_server, args=(str(source), address, str(ready)), daemon=True
    )
    process.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists():
            if not process.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the floor server did not start")
            time.sleep(0.1)
        assert process.pid is not None
        yield {"unix": address, "pid": process.pid}
    finally:
        process.kill()
        process.join()


def summarise(runs: dict[tuple[str, int], list[dict[str, float]]]) -> list[dict[str, Any]]:
    """One row per server and caller count (medians), with the 8 / 1 ratios per repeat on the 8-caller row."""
    rows: list[dict[str, Any]] = []
    for server in SERVERS:
        ones = runs[(server, 1)]
        for callers in CALLERS:
            cells = runs[(server, callers)]
            row: dict[str, Any] = {
                "server": server,
                "callers": callers,
                "calls_per_s_runs": [round(c["calls_per_s"], 1) for c in cells],
                **{
                    key: round(statistics.median(c[key] for c in cells), 3)
                    for key in ("calls_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_call")
                },
            }
            if callers != 1:
                ratios = [c["calls_per_s"] / o["calls_per_s"] for c, o in zip(cells, ones, strict=True)]
                row["ratio_runs"] = [round(r, 2) for r in ratios]
                row["ratio_median"] = round(statistics.median(ratios), 2)
            rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=lambda s: parse_sizes(s)[0], default=100_000, help="store size")
    parser.add_argument("--duration-s", type=float, default=4.0, help="seconds per timed cell")
    parser.add_argument("--repeats", type=int, default=5, help="turns of every cell; medians are reported")
    parser.add_argument("--client-processes", type=int, default=2, help="client processes (threads split over them)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memevo-bench", help="store cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    corpus = Corpus(seed=args.seed)
    source = ensure_store(args.cache, args.size, corpus, log)
    results: dict[str, Any] = {
        "benchmark": "recall_scaling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "n_memories": args.size,
        "load_average": [],
    }
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(s, c): [] for s in SERVERS for c in CALLERS}
    scratch = Path(tempfile.mkdtemp(prefix="memevo-recall-scaling-"))
    try:
        working_copy(source, scratch / "data")
        with (
            multiprocessing.get_context("spawn").Pool(args.client_processes) as pool,
            served(scratch / "data", scratch, scratch / "serve.log") as memevo,
            floor_served(source, scratch) as floor,
        ):
            targets = {"memevo": memevo, "floor": floor}
            for repeat in range(args.repeats):
                results["load_average"].append(round(os.getloadavg()[0], 2))
                for server in SERVERS if repeat % 2 == 0 else SERVERS[::-1]:
                    target = targets[server]

                    def cell_of(threads: int, address: str = target["unix"]) -> Cell:
                        return Cell("vrecall", address, threads, args.duration_s, args.seed)

                    for callers in CALLERS:
                        cell = run_cell(pool, cell_of, callers, args.client_processes, target["pid"])
                        runs[(server, callers)].append(cell)
                        log(
                            f"  run {repeat + 1}/{args.repeats} {server} x{callers}: {cell['calls_per_s']:,.0f} "
                            f"calls/s, server CPU {cell['server_cpu_ms_per_call']:.2f} ms a call "
                            f"(load {os.getloadavg()[0]:.1f})"
                        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = summarise(runs)
    results["rows"] = rows
    memevo_ratio = next(r["ratio_median"] for r in rows if r["server"] == "memevo" and "ratio_median" in r)
    results["target"] = {"ratio": TARGET_RATIO, "memevo": memevo_ratio, "met": memevo_ratio >= TARGET_RATIO}
    print(
        f"\nVector Recall over the unix socket at {args.size:,} memories, 1 and 8 callers "
        f"(medians of {args.repeats} x {args.duration_s} s; machine: {results['machine']['cores']} cores)\n"
    )
    print("| server | callers | calls/s | p50 ms | p99 ms | server CPU ms / call | 8 / 1 (median) | 8 / 1 per repeat |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['ratio_median']:.2f}" if "ratio_median" in r else ""
        per = ", ".join(f"{x:.2f}" for x in r.get("ratio_runs", []))
        print(
            f"| {r['server']} | {r['callers']} | {r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['server_cpu_ms_per_call']:.2f} | {ratio} | {per} |"
        )
    print(f"\ntarget: memevo 8 / 1 >= {TARGET_RATIO}: {'met' if results['target']['met'] else 'missed'}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
