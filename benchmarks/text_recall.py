"""Recall by query text through gRPC with 1 and 8 callers: each query embedded alone (before) against shared runs.

Usage (from the repository root)::

    python benchmarks/text_recall.py [--n 100000] [--seconds 10] [--repeats 3] [--json out/text_recall.json]

Two ``memevo serve`` processes (bundled local embedder) serve working copies
of the same cached store (``benchmarks/throughput.py``'s: LoCoMo turns on
clustered 384-d vectors, same ``--cache``): "alone" with
``--query-embed-batch 0 --query-embed-cache 0`` — every recall embeds its own
query on its own call, as before issue 28 — and "shared" with the defaults
(concurrent recalls share model runs; a cache of recent queries). Callers are
threads of this process on their own channels over the unix socket, calling
``Recall(query=text, k=10)`` back to back for ``--seconds``; every query text
is distinct (a LoCoMo question with a serial number), so the cache never hits
and the figure is the batching's alone. The cells (variant x callers) are
interleaved and repeated ``--repeats`` times; calls/s and p50/p99 are
medians over the repeats. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.throughput import (  # noqa: E402
    Corpus,
    cpu_s,
    ensure_store,
    machine,
    percentile,
    served,
    working_copy,
)

VARIANTS: dict[str, tuple[str, ...]] = {
    "alone": ("--query-embed-batch", "0", "--query-embed-cache", "0"),
    "shared": (),
    "shared-1t": ("--embed-threads", "1"),
}
"""``--variants`` picks among them; "shared-1t" is "shared" with one onnxruntime thread a model run (issue 43)."""
CALLERS = (1, 8)
WARMUP_S = 2.0


def embed_counters(metrics: str) -> tuple[float, float]:
    """(query texts embedded, model runs) from the sidecar's metrics endpoint at ``metrics`` (host:port)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    found = {}
    for line in lines:
        name, _, value = line.partition(" ")
        if name in ("memevo_query_embed_texts_total", "memevo_query_embed_batch_size_count"):
            found[name] = float(value)
    return found["memevo_query_embed_texts_total"], found["memevo_query_embed_batch_size_count"]


def run_cell(
    server: dict[str, Any], callers: int, seconds: float, texts: Callable[[int, int], str]
) -> dict[str, float]:
    """``callers`` threads recalling by text for ``seconds``: calls/s, p50 and p99 ms, errors, the sidecar's CPU
    ms per call (what the calls cost whatever share of the shared cores the sidecar got) and texts per model run."""
    import grpc

    from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc

    latencies: list[list[float]] = [[] for _ in range(callers)]
    errors = [0] * callers
    barrier = threading.Barrier(callers + 1)
    stop_at = [0.0]

    def caller(index: int) -> None:
        with grpc.insecure_channel(server["unix"]) as channel:
            stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
            barrier.wait()
            serial = 0
            while (now := time.perf_counter()) < stop_at[0]:
                request = memory_service_pb2.RecallRequest(query=texts(index, serial), k=10)
                serial += 1
                try:
                    stub.Recall(request, timeout=60)
                except grpc.RpcError:
                    errors[index] += 1
                    continue
                latencies[index].append(time.perf_counter() - now)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.perf_counter() + seconds
    cpu_before, embedded_before = cpu_s(server["pid"]), embed_counters(server["metrics"])
    began = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    cpu_used, embedded = cpu_s(server["pid"]) - cpu_before, embed_counters(server["metrics"])
    every = [x for per in latencies for x in per]
    runs = embedded[1] - embedded_before[1]
    return {
        "calls_per_s": len(every) / elapsed,
        "cpu_ms_per_call": cpu_used / max(len(every), 1) * 1e3,
        "texts_per_run": (embedded[0] - embedded_before[0]) / runs if runs else float("nan"),
        "p50_ms": percentile(every, 50) * 1e3,
        "p99_ms": percentile(every, 99) * 1e3,
        "errors": float(sum(errors)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories in the store")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per cell")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the cells; medians reported")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memevo-bench", help="store cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--variants", default="alone,shared", help=f"comma-separated, of {', '.join(VARIANTS)} (default: %(default)s)"
    )
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    corpus = Corpus(seed=args.seed)
    source = ensure_store(args.cache, args.n, corpus, log)
    rng = np.random.default_rng(args.seed)
    questions = [corpus.query_text(rng, int(c)) for c in rng.integers(0, 64, 2_000)]
    cell_serial = [0]

    def texts(caller: int, serial: int) -> str:
        # Distinct in every cell, caller and call: no query is ever seen twice, by either sidecar.
        return f"{questions[(serial * 8 + caller) % len(questions)]} (#{cell_serial[0]}.{caller}.{serial})"

    scratch = Path(tempfile.mkdtemp(prefix="memevo-text-recall-"))
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(v, c): [] for v in variants for c in CALLERS}
    loads: list[float] = []
    try:
        with contextlib.ExitStack() as stack:
            targets: dict[str, dict[str, Any]] = {}
            for variant, extra in variants.items():
                data = scratch / variant / "data"
                working_copy(source, data)
                run_dir = Path(tempfile.mkdtemp(prefix="tr-"))
                stack.callback(shutil.rmtree, run_dir, True)
                extra = ("--embedder", "local", "--metrics-listen", "127.0.0.1:0", *extra)
                info = stack.enter_context(served(data, run_dir, scratch / f"{variant}.log", extra))
                info["metrics"] = json.loads((run_dir / "ready.json").read_text())["metrics"]
                targets[variant] = info
                log(f"{variant}: serving {args.n:,} memories at {info['unix']}")
            for target in targets.values():  # warm both up: model, caches, first-call costs
                run_cell(target, 8, WARMUP_S, texts)
                cell_serial[0] += 1
            for repeat in range(args.repeats):
                loads.append(round(os.getloadavg()[0], 2))
                for callers in CALLERS:
                    for variant, target in targets.items():
                        cell = run_cell(target, callers, args.seconds, texts)
                        cell_serial[0] += 1
                        runs[(variant, callers)].append(cell)
                        log(
                            f"  run {repeat + 1}: {variant} x {callers}: {cell['calls_per_s']:.1f} calls/s, "
                            f"p50 {cell['p50_ms']:.1f} ms, {cell['cpu_ms_per_call']:.1f} CPU ms a call, "
                            f"{cell['texts_per_run']:.1f} texts a run (load {loads[-1]})"
                        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows: list[dict[str, Any]] = []
    for (variant, callers), cells in runs.items():
        rows.append(
            {
                "variant": variant,
                "callers": callers,
                **{key: round(statistics.median(c[key] for c in cells), 2) for key in cells[0]},
                "calls_per_s_runs": [round(c["calls_per_s"], 1) for c in cells],
            }
        )
    by = {(r["variant"], r["callers"]): r for r in rows}
    ratios: dict[str, float] = {}
    for one, other in (("shared", "alone"), ("shared-1t", "shared")):
        if one in variants and other in variants:
            for c in CALLERS:
                ratios[f"{one}/{other} calls/s at {c} callers"] = round(
                    by[(one, c)]["calls_per_s"] / by[(other, c)]["calls_per_s"], 2
                )
                ratios[f"{other}/{one} sidecar CPU per call at {c} callers"] = round(
                    by[(other, c)]["cpu_ms_per_call"] / by[(one, c)]["cpu_ms_per_call"], 2
                )
    result: dict[str, Any] = {
        "benchmark": "text_recall",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "n_memories": args.n,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "load_average": loads,
        "rows": rows,
        "ratios": ratios,
        "target": "shared x 8 callers >= 2x alone x 8 callers (issue 28)",
        "target_met": ratios.get("shared/alone calls/s at 8 callers", 0.0) >= 2.0,
    }
    print(
        f"\nRecall by text over the unix socket, {args.n:,} memories, medians of {args.repeats} x {args.seconds:g} s\n"
    )
    print(
        "| query embedding | callers | calls/s | p50 ms | p99 ms | sidecar CPU ms / call | texts / model run "
        "| errors | calls/s per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["callers"], r["variant"])):
        print(
            f"| {r['variant']} | {r['callers']} | {r['calls_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['cpu_ms_per_call']:.2f} | {r['texts_per_run']:.2f} | {r['errors']:.0f} "
            f"| {', '.join(map(str, r['calls_per_s_runs']))} |"
        )
    print()
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
