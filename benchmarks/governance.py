"""Measure the governance sweep (kernels/sweep.py) at 1e5, 1e6 and 1e7 memories, side by side with NumPy and Python.

Usage (from the repository root)::

    python benchmarks/governance.py [--sizes 1e5,1e6,1e7] [--repeats 11] [--json out/governance.json]
                                    [--recall-seconds 10]

Per size: realistic compact hot columns, then the median of ``--repeats``
runs (after a warm-up) of

- numba: ``sweep`` (value + next state + near flag of every memory, output
  buffers reused, ``below`` updated in place, as the daemon runs it);
- numpy: the reference ``tests/naive.py::sweep`` (3 runs at 1e7);
- python: a plain per-item loop of the same formulas, timed on a sample of
  ``--python-sample`` items and scaled per item (it would take minutes at 1e7).

bytes_per_memory is the sum of the itemsizes of the hot columns the sweep
and recall scan (``HOT_COLUMNS`` of sidecar/store/columns.py).

Then the contention check: an in-process recall proxy (exact cosine top-10
over ``--recall-vectors`` 16-d vectors plus the state/namespace filter over
the hot columns, i.e. the CPU work of a recall without gRPC) paced at 1,000
per second on one thread, p99 latency without and then with sweeps of the
largest size running back to back on another thread. Not a test: nothing
here asserts on time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

import naive  # noqa: E402

from memevo.kernels import params as kp  # noqa: E402
from memevo.kernels.params import CHUNK  # noqa: E402
from memevo.kernels.sweep import SweepResult, derive, sweep, sweep_coefficients  # noqa: E402
from memevo.sidecar.store.columns import ALL_BYTES_PER_MEMORY, HOT_BYTES_PER_MEMORY  # noqa: E402

DAY = 86400.0
BUDGET = 1048576.0


def columns(n: int, seed: int) -> dict[str, np.ndarray]:
    """Compact sweep inputs of ``n`` memories shaped like a long-running agent's store (now = offset 0)."""
    rng = np.random.default_rng(seed)
    created = -rng.exponential(120 * DAY, n)
    touched = np.where(rng.random(n) < 0.6, created * rng.random(n), created)
    cache = derive(
        rng.poisson(0.5, n).astype(np.float32),
        rng.poisson(0.2, n).astype(np.float32),
        (rng.geometric(0.1, n) - 1).astype(np.uint32),
        np.where(rng.random(n) < 0.3, rng.integers(1, 11, n), 0).astype(np.uint8),
        np.minimum(rng.lognormal(5.5, 1.0, n), 20000).astype(np.uint32),
        np.full(n, np.nan, dtype=np.float32),
    )
    state = rng.choice(np.array([1, 1, 1, 2, 2, 2, 2, 3, 4], dtype=np.uint8), n)
    return {
        "state": state,
        "kind": rng.integers(1, kp.N_KINDS, n).astype(np.uint8),
        "confidence": np.clip(rng.normal(0.75, 0.1, n), 0, 1).astype(np.float32),
        "inconsistency": np.where(rng.random(n) < 0.05, rng.random(n), 0.0).astype(np.float32),
        "feedback": cache.feedback,
        "log_count": cache.log_count,
        "utility": cache.utility,
        "stored_bytes": rng.integers(400, 6000, n).astype(np.uint32),
        "touched": touched.astype(np.float32),
        "state_since": (-rng.exponential(20 * DAY, n)).astype(np.float32),
        "below": np.where(rng.random(n) < 0.1, -rng.random(n) * 20 * DAY, np.nan).astype(np.float32),
    }


def python_sweep(cols: dict[str, np.ndarray], params: np.ndarray, now: float) -> list[tuple[float, int]]:
    """The same formulas, one item at a time in plain Python (value and next state)."""
    out = []
    rows = [list(r) for r in params]
    data = [cols[k].tolist() for k in ("state", "kind", "confidence", "inconsistency", "feedback", "log_count")]
    data += [cols[k].tolist() for k in ("utility", "stored_bytes", "touched", "state_since", "below")]
    for s, k, c, inc, fb, lc, util, stored, t, since, below in zip(*data, strict=True):
        p = rows[k if k < len(rows) else 0]
        dt = now - t if math.isfinite(t) and now - t > 0 else 0.0
        c = 0.0 if c != c else min(max(c, 0.0), 1.0)
        floor = p[kp.CONFIDENCE_FLOOR]
        if c > floor:
            c = floor + (c - floor) * 2.0 ** (-dt / p[kp.CONFIDENCE_DECAY_HALF_LIFE])
        acc = min(max(p[kp.W_CONFIDENCE] * c + p[kp.W_FEEDBACK] * fb - p[kp.W_INCONSISTENCY] * inc, 0.0), 1.0)
        rel = 2.0 ** (-dt / p[kp.HALF_LIFE]) + p[kp.ACCESS_WEIGHT] * lc
        v = p[kp.ALPHA] * acc + p[kp.BETA] * rel + p[kp.GAMMA] * util - p[kp.DELTA] * stored / BUDGET
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


def median_ms(run: Any, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(n: int, repeats: int, python_sample: int) -> dict[str, Any]:
    params = kp.default_params()
    coef = sweep_coefficients(params, BUDGET)
    cols = columns(n, seed=n)
    out = SweepResult(
        np.empty(n, np.float32),
        np.empty(n, np.uint8),
        cols["below"],
        np.empty(n, np.uint8),
        np.zeros(((n + CHUNK - 1) // CHUNK, 3), np.int64),
    )
    numba_ms = median_ms(lambda: sweep(**cols, now=0.0, coef=coef, margin=0.05, out=out), repeats)
    numpy_ms = median_ms(
        lambda: naive.sweep(**cols, now=0.0, params=params, cost_budget_bytes=BUDGET, margin=0.05),
        3 if n >= 5_000_000 else repeats,
    )
    sample = {k: v[: min(n, python_sample)] for k, v in cols.items()}
    m = sample["state"].shape[0]
    python_ms = median_ms(lambda: python_sweep(sample, params, 0.0), 3) * n / m
    got = sweep(**cols, now=0.0, coef=coef, margin=0.05)
    want = naive.sweep(**cols, now=0.0, params=params, cost_budget_bytes=BUDGET, margin=0.05)
    return {
        "n": n,
        "sweep_ms_median": round(numba_ms, 3),
        "items_per_s": round(n / numba_ms * 1e3),
        "numpy_ms_median": round(numpy_ms, 2),
        "python_ms_scaled": round(python_ms, 1),
        "python_sample": m,
        "numpy_ratio": round(numpy_ms / numba_ms, 1),
        "python_ratio": round(python_ms / numba_ms, 1),
        "bytes_per_memory": HOT_BYTES_PER_MEMORY,
        "max_value_diff_vs_numpy": float(np.max(np.abs(got.value - want[0]))) if n else 0.0,
        "state_mismatches_vs_numpy": int(np.count_nonzero(got.next_state != want[1])),
    }


def recall_p99(n_sweep: int, n_vectors: int, seconds: float) -> dict[str, Any]:
    """p50/p99 of a paced 1,000/s recall proxy, without and with back-to-back sweeps of ``n_sweep`` memories."""
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(n_vectors, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cols = columns(n_sweep, seed=2)
    namespace = rng.integers(0, 4, n_sweep).astype(np.int32)
    coef = sweep_coefficients(kp.default_params(), BUDGET)

    def recall_once() -> None:
        query = vectors[rng.integers(n_vectors)]
        sims = vectors @ query
        top = np.argpartition(-sims, 40)[:40]
        keep = (cols["state"][top] == 1) & (namespace[top] == 0)
        _ = top[keep][np.argsort(-sims[top[keep]])][:10]

    def paced(duration: float) -> list[float]:
        latencies = []
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < duration:
            due = start + i / 1000.0
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            recall_once()
            latencies.append((time.perf_counter() - t0) * 1e3)
            i += 1
        return latencies

    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(np.asarray(values), q))

    quiet = paced(seconds)
    stop = threading.Event()
    sweeps = [0]

    def sweeper() -> None:
        while not stop.is_set():
            sweep(**cols, now=0.0, coef=coef, margin=0.05)
            sweeps[0] += 1

    thread = threading.Thread(target=sweeper, daemon=True)
    thread.start()
    busy = paced(seconds)
    stop.set()
    thread.join()
    return {
        "sweep_n": n_sweep,
        "recall_vectors": n_vectors,
        "recalls": [len(quiet), len(busy)],
        "p50_ms": [round(pct(quiet, 50), 3), round(pct(busy, 50), 3)],
        "p99_ms": [round(pct(quiet, 99), 3), round(pct(busy, 99), 3)],
        "p99_ratio": round(pct(busy, 99) / pct(quiet, 99), 2),
        "sweeps_during": sweeps[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e5,1e6,1e7")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--python-sample", type=int, default=100_000)
    parser.add_argument("--recall-seconds", type=float, default=10.0, help="0 skips the contention check")
    parser.add_argument("--recall-vectors", type=int, default=200_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    load_before = os.getloadavg()
    results = [measure(n, args.repeats, args.python_sample) for n in sizes]
    print(
        f"load average before: {load_before[0]:.2f}; hot columns {HOT_BYTES_PER_MEMORY} B/memory "
        f"(all per-memory columns: {ALL_BYTES_PER_MEMORY} B)"
    )
    print("| memories | sweep ms | items/s | NumPy ms | × NumPy | Python ms (scaled) | × Python | bytes/memory |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['n']:,} | {r['sweep_ms_median']:.1f} | {r['items_per_s'] / 1e6:.0f} M | {r['numpy_ms_median']:,.0f} "
            f"| {r['numpy_ratio']:.0f}× | {r['python_ms_scaled']:,.0f} | {r['python_ratio']:,.0f}× "
            f"| {r['bytes_per_memory']} |"
        )
    contention = None
    if args.recall_seconds > 0 and sizes:
        contention = recall_p99(max(sizes), args.recall_vectors, args.recall_seconds)
        print(
            f"recall proxy at 1,000/s: p99 {contention['p99_ms'][0]:.2f} ms quiet, {contention['p99_ms'][1]:.2f} ms "
            f"with back-to-back sweeps of {contention['sweep_n']:,} ({contention['sweeps_during']} sweeps): "
            f"{contention['p99_ratio']}×"
        )
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        versions = {p: importlib.metadata.version(p) for p in ("numba", "numpy", "llvmlite")}
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
