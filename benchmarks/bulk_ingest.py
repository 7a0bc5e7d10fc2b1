"""Bulk load of client vectors: how fast writes are acknowledged, how often back-pressure refuses them, and when
every vector is in the graph.

Usage (from the repository root)::

    python benchmarks/bulk_ingest.py [--n 1000000] [--batch 1000] [--json out/bulk_ingest.json]

A real ``memevo serve`` (``--embedder none``, the default ``--max-fresh-tail``
unless ``--max-fresh-tail`` is given) on a unix socket. One client writes
``--n`` unit Gaussian vectors (``--dimension``, default 384) with
``RememberBatch`` of ``--batch`` as fast as it can; a refusal with
RESOURCE_EXHAUSTED (the fresh tail is full) is counted, the client waits
``--backoff-s`` and sends the same batch again. A sampler reads ``GetStats``
every second: the graph's size and the fresh tail's, from which the builder's
insert rate while writes run and after the last acknowledgement. Reported:
acknowledged/s, back-offs and the time spent in them, seconds from the first
write to the last acknowledgement and to an empty fresh tail (every vector in
the graph: fully searchable by the graph).

To compare with another revision, run the same script with ``PYTHONPATH``
pointing at that revision's ``src``. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import machine as machine_info  # noqa: E402

STARTUP_TIMEOUT_S = 600.0
SAMPLE_S = 1.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    import grpc

    from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

    scratch = Path(tempfile.mkdtemp(prefix="memevo-bulk-", dir=args.scratch))
    socket_dir = Path(tempfile.mkdtemp(prefix="bulk-"))  # a socket's path is limited to ~100 bytes
    ready = scratch / "ready.json"
    log_path = scratch / "serve.log"
    command = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(scratch / "data"),
        "--listen", f"unix://{socket_dir / 'memevo.sock'}", "--embedder", "none",
        "--dimension", str(args.dimension), "--ready-file", str(ready),
    ]  # fmt: skip
    if args.max_fresh_tail:
        command += ["--max-fresh-tail", str(args.max_fresh_tail)]
    command += args.serve_arg
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memevo serve did not start: {log_path.read_text()}")
            time.sleep(0.05)
        channel = grpc.insecure_channel(f"unix://{socket_dir / 'memevo.sock'}")
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        rng = np.random.default_rng(args.seed)
        samples: list[tuple[float, int, int, int]] = []
        """(seconds since the first write, acknowledged, graph, tail)."""
        acknowledged = 0
        done = threading.Event()
        began = time.perf_counter()

        def sample() -> None:
            while not done.is_set():
                index = stub.GetStats(memory_service_pb2.GetStatsRequest(), timeout=60).index
                samples.append(
                    (time.perf_counter() - began, acknowledged, int(index.indexed_count), int(index.fresh_tail_count))
                )
                done.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        backoffs = 0
        backoff_s = 0.0
        for start in range(0, args.n, args.batch):
            rows = min(args.batch, args.n - start)
            block = rng.standard_normal((rows, args.dimension), dtype=np.float32)
            request = memory_service_pb2.RememberBatchRequest(
                memories=[
                    memory_pb2.MemoryInput(
                        content=f"note {start + j}",
                        vector=vector.astype("<f4").tobytes(),
                        kind=memory_pb2.MEMORY_KIND_EPISODE,
                    )
                    for j, vector in enumerate(block)
                ]
            )
            while True:
                try:
                    stub.RememberBatch(request, timeout=600)
                    break
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    backoffs += 1
                    backoff_s += args.backoff_s
                    time.sleep(args.backoff_s)
            acknowledged += rows
        acknowledged_s = time.perf_counter() - began
        deadline = time.monotonic() + args.index_timeout_s
        while True:
            index = stub.GetStats(memory_service_pb2.GetStatsRequest(), timeout=60).index
            if index.fresh_tail_count == 0 and index.indexed_count >= args.n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fresh tail not empty after {args.index_timeout_s} s: {index}")
            time.sleep(0.2)
        searchable_s = time.perf_counter() - began
        done.set()
        sampler.join()
        channel.close()
    finally:
        process.terminate()
        process.wait(timeout=300)
        shutil.rmtree(socket_dir, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    during = [s for s in samples if s[0] <= acknowledged_s]
    after = [s for s in samples if s[0] > acknowledged_s]
    return {
        "n": args.n,
        "batch": args.batch,
        "acknowledged_s": round(acknowledged_s, 1),
        "acknowledged_per_s": round(args.n / acknowledged_s),
        "backoffs": backoffs,
        "backoff_s": round(backoff_s, 1),
        "searchable_s": round(searchable_s, 1),
        "graph_inserts_per_s_while_writing": _rate(during),
        "graph_inserts_per_s_after": _rate(after),
        "peak_tail": max((s[3] for s in samples), default=0),
        "samples": samples if args.samples else [],
    }


def _rate(samples: list[tuple[float, int, int, int]]) -> int:
    """Graph inserts per second between the first and last of ``samples`` (0 with fewer than two)."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return 0
    return round((samples[-1][2] - samples[0][2]) / (samples[-1][0] - samples[0][0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--batch", type=int, default=1_000, help="memories per RememberBatch")
    parser.add_argument("--backoff-s", type=float, default=0.5, help="wait after a RESOURCE_EXHAUSTED")
    parser.add_argument("--max-fresh-tail", type=int, default=0, help="passed to serve (0: its default)")
    parser.add_argument("--index-timeout-s", type=float, default=7_200.0)
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="passed to serve (repeat; e.g. --serve-arg=--workers=4)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", type=Path, default=None, help="parent of the data directory")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--samples", action="store_true", help="include the per-second samples in --json")
    parser.add_argument("--json", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    result = run(args)
    result["machine"] = machine_info.machine(n=args.n, batch=args.batch, serve_args=args.serve_arg)
    result["started"] = started.isoformat(timespec="seconds")
    summary = {key: value for key, value in result.items() if key != "samples"}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
