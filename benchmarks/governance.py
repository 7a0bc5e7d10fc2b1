"""Measure the governance sweep (kernels/sweep.py) at 1e5, 1e6 and 1e7 memories, side by side with NumPy and Python.

Usage (from the repository root)::

    python benchmarks/governance.py [--sizes 1e5,1e6,1e7] [--repeats 11] [--json out/governance.json]
                                    [--recall-seconds 10] [--recall-memories 200000]

Per size: realistic anchored terms (``derive_terms`` of random raw columns)
and lifecycle offsets, then the median of ``--repeats`` runs (after a
warm-up) of

- numba: ``sweep``, value + next state + near flag of every memory written
  (output buffers reused, ``below`` updated in place): the issue's "full
  sweep";
- numba in place: ``sweep_in_place``, what a scheduled sweep runs (only
  changed ``below``/``near`` entries are written, moves counted per chunk);
- numpy: the reference ``tests/naive.py::sweep`` on the same terms (3 runs
  at >= 5e6);
- python: a plain per-item loop of the same formula, timed on a sample of
  ``--python-sample`` items and scaled per item (it would take minutes at 1e7).

bytes_per_memory is the sum of the itemsizes of the hot columns the sweep
and recall scan (``HOT_COLUMNS`` of sidecar/store/columns.py).

Then the contention check, against a real in-process sidecar (Engine,
Recaller and servicer, no gRPC) holding ``--recall-memories`` memories of
dimension 8 built here: ``servicer.Recall`` (k 10) paced at 1,000 calls/s
from one thread, p50/p99 latency quiet, then while the daemon's full sweep
(``Govern`` path) of that store runs back to back on another thread, then
while full ``sweep`` kernels of the largest size run back to back (a worst
case), then with one such kernel every ``sweep_interval_s`` (what the daemon
runs for a 10M store's active memories). The achieved call rate is
reported. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.inprocess import InProcessContext  # noqa: E402
from memevo.kernels import params as kp  # noqa: E402
from memevo.kernels.params import CHUNK  # noqa: E402
from memevo.kernels.sweep import (  # noqa: E402
    SweepResult,
    derive_terms,
    sweep,
    sweep_coefficients,
    sweep_in_place,
)
from memevo.sidecar.store.columns import ALL_BYTES_PER_MEMORY, HOT_BYTES_PER_MEMORY  # noqa: E402
from tests import naive  # noqa: E402

DAY = 86400.0
BUDGET = 1048576.0


NOW_OFFSET = 2 * DAY
"""The sweep's now, as an offset from the terms' anchor (the daemon re-anchors every few days)."""


def columns(n: int, seed: int) -> dict[str, Any]:
    """Sweep inputs of ``n`` memories shaped like a long-running agent's store, anchored at 0 (now = NOW_OFFSET)."""
    rng = np.random.default_rng(seed)
    created = NOW_OFFSET - rng.exponential(120 * DAY, n)
    touched = np.where(rng.random(n) < 0.6, created + (NOW_OFFSET - created) * rng.random(n), created)
    kind = rng.integers(1, kp.N_KINDS, n).astype(np.uint8)
    terms = derive_terms(
        kind,
        np.clip(rng.normal(0.75, 0.1, n), 0, 1).astype(np.float32),
        np.where(rng.random(n) < 0.05, rng.random(n), 0.0).astype(np.float32),
        rng.poisson(0.5, n).astype(np.float32),
        rng.poisson(0.2, n).astype(np.float32),
        (rng.geometric(0.1, n) - 1).astype(np.uint32),
        np.where(rng.random(n) < 0.3, rng.integers(1, 11, n), 0).astype(np.uint8),
        np.minimum(rng.lognormal(5.5, 1.0, n), 20000).astype(np.uint32),
        np.full(n, np.nan, dtype=np.float32),
        rng.integers(400, 6000, n).astype(np.uint32),
        touched,
        anchor=0.0,
        params=kp.default_params(),
        cost_budget_bytes=BUDGET,
        latest=NOW_OFFSET,
    )
    state = rng.choice(np.array([1, 1, 1, 2, 2, 2, 2, 3, 4], dtype=np.uint8), n)
    return {
        "state": state,
        "kind": kind,
        **terms._asdict(),
        "since": (NOW_OFFSET - rng.exponential(20 * DAY, n)).astype(np.float32),
        "below": np.where(rng.random(n) < 0.1, NOW_OFFSET - rng.random(n) * 20 * DAY, np.nan).astype(np.float32),
    }


def python_sweep(cols: dict[str, np.ndarray], params: np.ndarray, now: float) -> list[tuple[float, int]]:
    """The same formula, one item at a time in plain Python (value and next state), per-kind factors hoisted."""
    out = []
    rows = [list(r) for r in params]
    factors = [(2.0 ** (-now / r[kp.HALF_LIFE]), 2.0 ** (-now / r[kp.CONFIDENCE_DECAY_HALF_LIFE])) for r in rows]
    data = [cols[k].tolist() for k in ("state", "kind", "acc_base", "conf_term", "rel_term", "static")]
    data += [cols[k].tolist() for k in ("since", "below")]
    for s, k, acc_base, conf_term, rel_term, static, since, below in zip(*data, strict=True):
        k = k if k < len(rows) else 0
        p = rows[k]
        f, g = factors[k]
        acc = min(max(acc_base + conf_term * g, 0.0), 1.0)
        v = p[kp.ALPHA] * acc + p[kp.BETA] * min(rel_term * f, 1.0) + static
        nxt = s
        if s in (1, 2):
            below = (below if math.isfinite(below) else now) if v < p[kp.EVICT_BELOW] else math.nan
            if math.isfinite(below) and now - below >= p[kp.EVICT_GRACE]:
                nxt = 5
            elif not now - since < p[kp.MIN_TIME_IN_STATE]:
                if s == 1 and v < p[kp.ARCHIVE_BELOW]:
                    nxt = 2
                elif s == 2 and v > p[kp.REACTIVATE_ABOVE]:
                    nxt = 1
        out.append((v, nxt))
    return out


def median_ms(run: Callable[[], Any], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(n: int, repeats: int, python_sample: int) -> dict[str, Any]:
    params = kp.default_params()
    cols = columns(n, seed=n)
    want = naive.sweep(**cols, now=NOW_OFFSET, params=params, margin=0.05)
    got = sweep(**cols, coef=sweep_coefficients(params, NOW_OFFSET), margin=0.05)
    n_chunks = (n + CHUNK - 1) // CHUNK
    out = SweepResult(
        np.empty(n, np.float32),
        np.empty(n, np.uint8),
        cols["below"],
        np.empty(n, np.uint8),
        np.zeros((n_chunks, 3), np.int64),
    )
    near = np.zeros(n, np.uint8)
    counts = np.zeros((n_chunks, 3), np.int64)
    load = os.getloadavg()[0]
    # The coefficient table (one exp2 per kind) is built in every timed run, as the daemon does per sweep.
    numba_ms = median_ms(
        lambda: sweep(**cols, coef=sweep_coefficients(params, NOW_OFFSET), margin=0.05, out=out), repeats
    )
    in_place_ms = median_ms(
        lambda: sweep_in_place(
            **cols, near=near, coef=sweep_coefficients(params, NOW_OFFSET), margin=0.05, counts=counts
        ),
        repeats,
    )
    numpy_ms = median_ms(
        lambda: naive.sweep(**cols, now=NOW_OFFSET, params=params, margin=0.05), 3 if n >= 5_000_000 else repeats
    )
    sample = {k: v[: min(n, python_sample)] for k, v in cols.items()}
    m = sample["state"].shape[0]
    python_ms = median_ms(lambda: python_sweep(sample, params, NOW_OFFSET), 3) * n / m
    relative = np.abs(got.value - want[0]) / np.maximum(np.abs(want[0]), 1e-3)
    return {
        "n": n,
        "sweep_ms_median": round(numba_ms, 3),
        "items_per_s": round(n / numba_ms * 1e3),
        "in_place_ms_median": round(in_place_ms, 3),
        "numpy_ms_median": round(numpy_ms, 2),
        "python_ms_scaled": round(python_ms, 1),
        "python_sample": m,
        "numpy_ratio": round(numpy_ms / numba_ms, 1),
        "python_ratio": round(python_ms / numba_ms, 1),
        "bytes_per_memory": HOT_BYTES_PER_MEMORY,
        "max_abs_value_diff_vs_numpy": float(np.max(np.abs(got.value - want[0]))) if n else 0.0,
        "max_rel_value_diff_vs_numpy": float(relative.max()) if n else 0.0,
        "state_mismatches_vs_numpy": int(np.count_nonzero(got.next_state != want[1])),
        "load_average_at_start": round(load, 2),
    }


def build_sidecar(n: int, data_dir: Path, log: Callable[[str], None]) -> Any:
    """A started in-process sidecar (no listener, 8-d vectors, no scheduled sweeps) holding ``n`` memories."""
    from memevo.sidecar.config import GovernanceConfig, SidecarConfig
    from memevo.sidecar.embedding.base import EmbedderConfig
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_pb2, memory_service_pb2

    config = SidecarConfig(
        data_dir=data_dir,
        listen=(),
        dimension=RECALL_DIMENSION,
        embedder=EmbedderConfig(kind="none"),
        governance=GovernanceConfig(sweep_interval_s=0.0),
    )
    sidecar = Sidecar(config)
    sidecar.start()
    rng = np.random.default_rng(3)
    context = InProcessContext()
    started = time.perf_counter()
    done = 0
    engine = sidecar.engine
    while done < n:
        size = min(2000, n - done)
        while engine.index.tail_count + size > engine.limits.max_fresh_tail:
            time.sleep(0.2)  # the graph is the slow step: let the builder catch up
        vectors = rng.normal(size=(size, RECALL_DIMENSION)).astype("<f4")
        memories = [
            memory_pb2.MemoryInput(
                content=f"memory {done + i} about topic {i % 97}",
                vector=vectors[i].tobytes(),
                kind=memory_pb2.MEMORY_KIND_EPISODE,
            )
            for i in range(size)
        ]
        sidecar.servicer.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), context)
        done += size
        if done % 100_000 < size:
            log(f"  stored {done:,}/{n:,} ({time.perf_counter() - started:.0f} s)")
    while engine.index.tail_count:
        time.sleep(0.5)
    log(f"  built {n:,} memories in {time.perf_counter() - started:.0f} s")
    return sidecar


RECALL_DIMENSION = 8


def recall_contention(n_memories: int, n_sweep: int, seconds: float, log: Callable[[str], None]) -> dict[str, Any]:
    """Recall p50/p99 at 1,000/s paced: quiet, with back-to-back daemon sweeps, with back-to-back 1e7 kernels."""
    from memevo.sidecar.config import GovernanceConfig
    from memevo.v1 import memory_service_pb2

    scratch = Path(tempfile.mkdtemp(prefix="memevo-governance-bench-"))
    try:
        log(f"building an in-process sidecar of {n_memories:,} memories (dimension {RECALL_DIMENSION})")
        sidecar = build_sidecar(n_memories, scratch / "data", log)
        try:
            rng = np.random.default_rng(1)
            queries = [
                memory_service_pb2.RecallRequest(
                    query_vector=rng.normal(size=RECALL_DIMENSION).astype("<f4").tobytes(), k=10
                )
                for _ in range(1000)
            ]
            context = InProcessContext()
            servicer = sidecar.servicer
            for q in queries[:50]:
                servicer.Recall(q, context)

            def paced(duration: float) -> tuple[list[float], float]:
                latencies = []
                start = time.perf_counter()
                i = 0
                while time.perf_counter() - start < duration:
                    due = start + i / 1000.0
                    delay = due - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    t0 = time.perf_counter()
                    servicer.Recall(queries[i % len(queries)], context)
                    latencies.append((time.perf_counter() - t0) * 1e3)
                    i += 1
                return latencies, i / (time.perf_counter() - start)

            def under(load: Callable[[], Any] | None, wake: threading.Event | None = None) -> dict[str, Any]:
                stop = threading.Event()
                runs = [0]

                def loop() -> None:
                    assert load is not None
                    while not stop.is_set():
                        load()
                        runs[0] += 1

                thread = threading.Thread(target=loop, daemon=True)
                if load is not None:
                    thread.start()
                latencies, rate = paced(seconds)
                stop.set()
                if wake is not None:
                    wake.set()
                if load is not None:
                    thread.join()
                values = np.asarray(latencies)
                return {
                    "calls": len(latencies),
                    "rate_per_s": round(rate, 1),
                    "p50_ms": round(float(np.percentile(values, 50)), 3),
                    "p99_ms": round(float(np.percentile(values, 99)), 3),
                    "sweeps_during": runs[0],
                    "load_average": round(os.getloadavg()[0], 2),
                }

            cols = columns(n_sweep, seed=2)
            params = kp.default_params()
            log("  recall quiet")
            quiet = under(None)
            log("  recall with daemon full sweeps of the store")
            daemon = under(lambda: sidecar.daemon.sweep("request"))
            log(f"  recall with {n_sweep:,}-memory sweep kernels")
            # As the daemon runs them: on every core but one (GovernanceConfig.sweep_threads).
            threads = max(1, (os.cpu_count() or 1) - 1)

            def big_sweep() -> None:
                numba.set_num_threads(threads)
                sweep(**cols, coef=sweep_coefficients(params, NOW_OFFSET), margin=0.05)

            big = under(big_sweep)
            # What the daemon produces at that size: a sweep of the active memories every sweep_interval_s
            # (near-threshold and archived tiers are smaller or rarer), not sweeps back to back.
            interval = GovernanceConfig().sweep_interval_s
            log(f"  recall with a {n_sweep:,}-memory sweep kernel every {interval:g} s")
            quit_waiting = threading.Event()

            def scheduled_sweep() -> None:
                big_sweep()
                quit_waiting.wait(interval)

            scheduled = under(scheduled_sweep, quit_waiting)
            kernel_ms = statistics.median(s.kernel_ms for s in sidecar.daemon.recent)
        finally:
            sidecar.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "memories": n_memories,
        "dimension": RECALL_DIMENSION,
        "big_sweep_n": n_sweep,
        "quiet": quiet,
        "daemon_sweeps": daemon,
        "daemon_sweep_kernel_ms_median": round(kernel_ms, 2),
        "big_sweeps": big,
        "scheduled_big_sweeps": scheduled,
        "scheduled_interval_s": interval,
        "p99_ratio_daemon": round(daemon["p99_ms"] / quiet["p99_ms"], 2),
        "p99_ratio_big": round(big["p99_ms"] / quiet["p99_ms"], 2),
        "p99_ratio_scheduled": round(scheduled["p99_ms"] / quiet["p99_ms"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="1e5,1e6,1e7")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--python-sample", type=int, default=100_000)
    parser.add_argument("--recall-seconds", type=float, default=10.0, help="0 skips the contention check")
    parser.add_argument("--recall-memories", type=int, default=200_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    load_before = os.getloadavg()
    results = []
    for n in sizes:
        log(f"sweep of {n:,} (load {os.getloadavg()[0]:.2f})")
        results.append(measure(n, args.repeats, args.python_sample))
    print(
        f"load average before: {load_before[0]:.2f}; hot columns {HOT_BYTES_PER_MEMORY} B/memory "
        f"(all per-memory columns: {ALL_BYTES_PER_MEMORY} B)"
    )
    print(
        "| memories | sweep ms | items/s | in-place ms | NumPy ms | × NumPy | Python ms (scaled) | × Python "
        "| bytes/memory | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['n']:,} | {r['sweep_ms_median']:.1f} | {r['items_per_s'] / 1e6:.0f} M "
            f"| {r['in_place_ms_median']:.1f} | {r['numpy_ms_median']:,.0f} | {r['numpy_ratio']:.0f}× "
            f"| {r['python_ms_scaled']:,.0f} "
            f"| {r['python_ratio']:,.0f}× | {r['bytes_per_memory']} | {r['load_average_at_start']:.1f} |"
        )
    for r in results:
        print(
            f"{r['n']:,}: value vs NumPy max abs {r['max_abs_value_diff_vs_numpy']:.2e}, "
            f"max rel {r['max_rel_value_diff_vs_numpy']:.2e}, state mismatches {r['state_mismatches_vs_numpy']}"
        )
    contention = None
    if args.recall_seconds > 0 and sizes:
        contention = recall_contention(args.recall_memories, max(sizes), args.recall_seconds, log)
        q, d, b = contention["quiet"], contention["daemon_sweeps"], contention["big_sweeps"]
        print(f"recall (in-process servicer, {contention['memories']:,} memories, 8-d, k 10) paced at 1,000/s:")
        print("| condition | achieved calls/s | p50 ms | p99 ms | p99 ratio | sweeps during | load |")
        print("|---|---|---|---|---|---|---|")
        for name, row, ratio in (
            ("quiet", q, 1.0),
            (
                f"daemon full sweeps ({contention['daemon_sweep_kernel_ms_median']:.1f} ms kernel)",
                d,
                contention["p99_ratio_daemon"],
            ),
            (f"{contention['big_sweep_n']:,}-memory sweep kernels back to back", b, contention["p99_ratio_big"]),
            (
                f"a {contention['big_sweep_n']:,}-memory sweep every {contention['scheduled_interval_s']:g} s",
                contention["scheduled_big_sweeps"],
                contention["p99_ratio_scheduled"],
            ),
        ):
            print(
                f"| {name} | {row['rate_per_s']:,.0f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {ratio:.2f}× "
                f"| {row['sweeps_during']} | {row['load_average']:.1f} |"
            )
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        versions = {p: importlib.metadata.version(p) for p in ("numba", "numpy", "llvmlite", "usearch")}
        payload = {
            "benchmark": "governance sweep",
            "results": results,
            "recall_contention": contention,
            "load_average": [load_before[0], load_after[0]],
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), **versions},
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
