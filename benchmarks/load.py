"""Load test: concurrent agents mixing remember, recall, build context and report outcome against a 100k store.

Usage (from the repository root)::

    python benchmarks/load.py --cache /var/tmp/memevo-bench [--clients 64] [--seconds 60] [--json out.json]

The store (``--store-n`` memories, 384-d client vectors, four namespaces; see
``reopen.py``) is built once under ``--cache`` and copied to a temporary
directory for each run, so every run starts from the same state. A real
``memevo serve`` process serves the copy on a unix socket, with governance
sweeps every ``--sweep-interval-s`` seconds (and its event-driven sweeps) and
``--workers`` gRPC threads (default 8: calls beyond them wait in gRPC's queue,
which holds no thread and no GIL; with one worker per client the 64 threads
convoy on the GIL and a recall, which releases and retakes it many times,
waits far longer than a health check — see RESULTS.md).

Clients: ``--processes`` client processes (default 4) each run
``clients / processes`` threads; every thread is one agent with its own
channel, calling back to back (closed loop, no think time) an operation drawn
from the mix: recall 35 %, build context 15 %, remember 20 %, report outcome
(of the thread's last retrieval) 15 %, and ``noop`` 15 % — a
``grpc.health.v1`` Check, which does no work in the sidecar: its latency is the
floor gRPC, the socket, Python and the shared cores impose at this concurrency.
After ``--warmup-s`` (not recorded) every call for ``--seconds`` is timed on
the client. Reported per RPC: calls/s, p50/p99/p99.9 latency and errors, plus
the target check (0 errors, recall p99 ≤ 2× noop p99). Not a test: nothing
asserts on time.

Stream pressure (``--streams N``, or ``--stream-pressure`` for twice the
sidecar's worker count): before the agents start, one more client process
opens N long-lived streams, each on its own channel — half ``Watch`` (reading
every change event) and half ``Review`` (a hello, then idle, as a reviewer
waiting for proposals) — and holds them open through the whole run. Without
room for unary calls beside them the agents' calls and health checks would
time out; the figure to check is 0 errors on every unary call and health, with
every stream still open at the end (reported: streams opened, refused, ended
early, events the watches read).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.reopen import NAMESPACES, WORDS, build_store, machine, serve_args

MIX = (("recall", 35), ("build_context", 15), ("remember", 20), ("report_outcome", 15), ("noop", 15))
STARTUP_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 30.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


def _agent(
    target: str, dimension: int, seed: int, start_at: float, record_from: float, stop_at: float, out: dict[str, Any]
) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

    rng = random.Random(seed)
    vectors = np.random.default_rng(seed)
    channel = grpc.insecure_channel(target)
    service = memory_service_pb2_grpc.MemoryServiceStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    names = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    last_retrieval = ""
    turn = 0

    def vector() -> bytes:
        return vectors.standard_normal(dimension).astype("<f4").tobytes()

    while time.time() < start_at:
        time.sleep(0.01)
    while True:
        now = time.time()
        if now >= stop_at:
            break
        op = rng.choices(names, weights)[0]
        if op == "report_outcome" and not last_retrieval:
            op = "recall"
        namespace = rng.choice(NAMESPACES)
        turn += 1
        began = time.perf_counter()
        try:
            if op == "recall":
                response = service.Recall(
                    memory_service_pb2.RecallRequest(
                        query_vector=vector(),
                        k=10,
                        filter=memory_service_pb2.RecallFilter(namespace=namespace),
                        turn=turn,
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
                last_retrieval = response.retrieval_id
            elif op == "build_context":
                context = service.BuildContext(
                    memory_service_pb2.BuildContextRequest(
                        query_vector=vector(),
                        token_budget=500,
                        filter=memory_service_pb2.RecallFilter(namespace=namespace),
                        turn=turn,
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
                last_retrieval = context.retrieval_id
            elif op == "remember":
                words = " ".join(rng.choice(WORDS) for _ in range(8))
                service.Remember(
                    memory_service_pb2.RememberRequest(
                        memory=memory_pb2.MemoryInput(
                            content=f"agent {seed} turn {turn}: {words}", vector=vector(), namespace=namespace
                        ),
                        turn=turn,
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
            elif op == "report_outcome":
                service.ReportOutcome(
                    memory_service_pb2.ReportOutcomeRequest(
                        retrieval_id=last_retrieval,
                        outcome=rng.choice((memory_service_pb2.OUTCOME_SUCCESS, memory_service_pb2.OUTCOME_FAILURE)),
                        turn=turn,
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
                last_retrieval = ""
            else:
                health.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
            code = ""
        except grpc.RpcError as error:
            code = error.code().name if error.code() is not None else "UNKNOWN"
        elapsed = time.perf_counter() - began
        if now >= record_from:
            if code:
                errors[op][code] += 1
            else:
                latencies[op].append(elapsed)
    channel.close()
    out["latencies"] = dict(latencies)
    out["errors"] = {op: dict(codes) for op, codes in errors.items()}


def _hold_streams(target: str, count: int, stop_at: float, queue: Any) -> None:
    """Open ``count`` streams (half Watch, half Review), hold them until ``stop_at``, report how they fared."""
    import queue as queues

    import grpc

    from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc

    lock = threading.Lock()
    report: dict[str, Any] = {"streams": count, "opened": 0, "refused": 0, "ended_early": 0, "events": 0, "codes": {}}
    stopping = threading.Event()
    channels = []
    calls: list[Any] = []
    closers: list[Any] = []

    def note_end(error: BaseException | None) -> None:
        with lock:
            if stopping.is_set():
                return
            code = error.code().name if isinstance(error, grpc.RpcError) and error.code() is not None else "ENDED"
            report["codes"][code] = report["codes"].get(code, 0) + 1
            report["refused" if code == "RESOURCE_EXHAUSTED" else "ended_early"] += 1

    def read(call: Any, counts_events: bool) -> None:
        error: BaseException | None = None
        try:
            for _ in call:
                if counts_events:
                    with lock:
                        report["events"] += 1
        except grpc.RpcError as failed:
            error = failed
        note_end(error)

    for position in range(count):
        channel = grpc.insecure_channel(target)
        channels.append(channel)
        service = memory_service_pb2_grpc.MemoryServiceStub(channel)
        call: Any
        if position % 2 == 0:
            call = service.Watch(memory_service_pb2.WatchRequest())
        else:
            requests: queues.SimpleQueue[Any] = queues.SimpleQueue()
            hello = memory_service_pb2.ReviewerHello(reviewer=f"load-reviewer-{position}")
            requests.put(memory_service_pb2.ReviewRequest(hello=hello))
            call = service.Review(iter(requests.get, None))
            closers.append(requests)
        calls.append(call)
        threading.Thread(target=read, args=(call, position % 2 == 0), daemon=True).start()
    with lock:
        report["opened"] = count
    while time.time() < stop_at:
        time.sleep(0.1)
    stopping.set()
    for requests in closers:
        requests.put(None)
    for call in calls:
        call.cancel()
    for channel in channels:
        channel.close()
    queue.put(report)


def _client_process(
    target: str, dimension: int, threads: int, first_seed: int, times: tuple[float, float, float], queue: Any
) -> None:
    start_at, record_from, stop_at = times
    results: list[dict[str, Any]] = [{} for _ in range(threads)]
    workers = [
        threading.Thread(
            target=_agent, args=(target, dimension, first_seed + i, start_at, record_from, stop_at, results[i])
        )
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.put(results)


def run(args: argparse.Namespace, data: Path, log: Any) -> dict[str, Any]:
    """One load run against a fresh copy of ``data``; returns the figures."""
    work = Path(tempfile.mkdtemp(prefix="memevo-load-"))
    copy = work / "data"
    log(f"copying the {args.store_n}-memory store")
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("complete", "written", "LOCK"))
    socket_path, ready = work / "memevo.sock", work / "ready.json"
    command = serve_args(
        copy, socket_path, ready, args.dimension,
        "--workers", str(args.workers), "--sweep-interval-s", str(args.sweep_interval_s),
    )  # fmt: skip
    log_path = work / "serve.log"
    with log_path.open("wb") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memevo serve did not start:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.1)
        target = f"unix://{socket_path}"
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        per_process = [args.clients // args.processes + (1 if i < args.clients % args.processes else 0)
                       for i in range(args.processes)]  # fmt: skip
        start_at = time.time() + 5.0  # every process is up and connected before the clock starts
        times = (start_at, start_at + args.warmup_s, start_at + args.warmup_s + args.seconds)
        processes = []
        streams_queue = context.Queue()
        if args.streams:
            holder = context.Process(
                target=_hold_streams, args=(target, args.streams, times[2], streams_queue), daemon=True
            )
            holder.start()
            processes.append(holder)
            log(f"{args.streams} streams (half Watch, half Review) held open through the run")
        seed = 0
        for threads in per_process:
            process = context.Process(
                target=_client_process, args=(target, args.dimension, threads, seed, times, queue), daemon=True
            )
            process.start()
            processes.append(process)
            seed += threads
        log(f"{args.clients} clients in {args.processes} processes; {args.warmup_s} s warm-up, {args.seconds} s run")
        load_before = os.getloadavg()
        agents: list[dict[str, Any]] = []
        for _ in per_process:
            agents.extend(queue.get(timeout=args.warmup_s + args.seconds + 600))
        streams = streams_queue.get(timeout=600) if args.streams else None
        for process in processes:
            process.join(timeout=60)
        load_after = os.getloadavg()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        serve_log = log_path.read_text(errors="replace")
        shutil.rmtree(work, ignore_errors=True)
    if "Traceback" in serve_log:
        log("the sidecar logged a traceback:\n" + serve_log[-4000:])
    rows = []
    total_errors = 0
    for op, _ in MIX:
        values = [v for agent in agents for v in agent.get("latencies", {}).get(op, [])]
        codes: dict[str, int] = defaultdict(int)
        for agent in agents:
            for code, count in agent.get("errors", {}).get(op, {}).items():
                codes[code] += count
        failed = sum(codes.values())
        total_errors += failed
        rows.append(
            {
                "rpc": op,
                "calls": len(values) + failed,
                "calls_per_s": round((len(values) + failed) / args.seconds, 1),
                "p50_ms": round(percentile(values, 50) * 1e3, 3),
                "p99_ms": round(percentile(values, 99) * 1e3, 3),
                "p999_ms": round(percentile(values, 99.9) * 1e3, 3),
                "errors": failed,
                "error_codes": dict(codes),
            }
        )
    return {
        "errors": total_errors,
        "rpcs": rows,
        "streams": streams,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True, help="directory keeping the built store")
    parser.add_argument("--store-n", type=int, default=100_000, help="memories in the store")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--clients", type=int, default=64, help="concurrent agents (threads across processes)")
    parser.add_argument("--processes", type=int, default=4, help="client processes the agents are spread over")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="seconds of load before measuring")
    parser.add_argument("--workers", type=int, default=8, help="gRPC worker threads of the sidecar")
    parser.add_argument("--sweep-interval-s", type=float, default=1.0, help="governance sweep interval of the sidecar")
    parser.add_argument("--streams", type=int, default=0, help="Watch/Review streams held open during the run")
    parser.add_argument(
        "--stream-pressure", action="store_true", help="hold open twice as many streams as the sidecar has workers"
    )
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.processes = max(1, min(args.processes, args.clients))
    if args.stream_pressure:
        args.streams = 2 * args.workers

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    args.cache.mkdir(parents=True, exist_ok=True)
    data = build_store(args.cache, args.store_n, dimension=args.dimension, log=log)
    result = run(args, data, log)
    print(f"{'rpc':<15} {'calls':>8} {'calls/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'p99.9 ms':>9} {'errors':>7}")
    for row in result["rpcs"]:
        print(
            f"{row['rpc']:<15} {row['calls']:>8} {row['calls_per_s']:>9.1f} {row['p50_ms']:>9.2f} "
            f"{row['p99_ms']:>9.2f} {row['p999_ms']:>9.2f} {row['errors']:>7}"
        )
    by_rpc = {row["rpc"]: row for row in result["rpcs"]}
    ratio = by_rpc["recall"]["p99_ms"] / by_rpc["noop"]["p99_ms"] if by_rpc["noop"]["p99_ms"] else float("nan")
    met = result["errors"] == 0 and ratio <= 2.0
    print(
        f"errors {result['errors']}; recall p99 / noop p99 = {ratio:.2f} (target ≤ 2.0): {'met' if met else 'missed'}"
    )
    streams = result["streams"]
    if streams is not None:
        print(
            f"streams held: {streams['opened']} opened, {streams['refused']} refused, {streams['ended_early']} ended "
            f"early {streams['codes']}; the watches read {streams['events']} events"
        )
    print(f"load average before/after: {result['load_average_before']} / {result['load_average_after']}")
    if args.json is not None:
        result.update(
            {
                "recall_p99_over_noop_p99": round(ratio, 3),
                "target_met": met,
                "clients": args.clients,
                "client_processes": args.processes,
                "seconds": args.seconds,
                "store_n": args.store_n,
                "workers": args.workers,
                "streams_held": args.streams,
                "sweep_interval_s": args.sweep_interval_s,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
