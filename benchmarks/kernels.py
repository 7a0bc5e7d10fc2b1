"""Measure the evaluation kernels: compute_scores + propose_transitions over 1M and 10M memories.

Usage (from the repository root)::

    python benchmarks/kernels.py [--sizes 1e6,1e7] [--repeats 7] [--json out/kernels.json]

For each size it builds realistic random hot columns, then times, side by
side in one run, the median of ``--repeats`` runs after a warm-up of:

- numba sweep: compute_scores + propose_transitions writing into reused
  output arrays (what a daemon that keeps its buffers does);
- numba, fresh outputs: the same with outputs allocated per call;
- numpy sweep: the plain-NumPy reference in tests/naive.py;
- floor: a kernel that only reads every input column once and writes every
  output once (no arithmetic to speak of): the memory-bandwidth floor of
  this column layout on this machine.

It also checks that the two implementations agree. Prints a table and, with
``--json``, writes every figure with the machine and versions. Not a test:
nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba import prange

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # tests/naive.py, the NumPy reference

try:
    import memevo.kernels.params as kp
except ImportError:
    # Not installed: use the source tree (src/memevo links to kernels/).
    sys.path.insert(0, str(REPO_ROOT / "src"))
    import memevo.kernels.params as kp

from memevo.kernels.lifecycle import (  # noqa: E402
    STATE_ACTIVE,
    STATE_ARCHIVED,
    STATE_CONSOLIDATED,
    STATE_OBSOLETE,
    propose_transitions,
)
from memevo.kernels.value import Scores, compute_scores  # noqa: E402
from tests import naive  # noqa: E402 (needs the path above)

sys.path.insert(0, str(REPO_ROOT))
from benchmarks import machine as machine_info  # noqa: E402

NOW = 1.75e9
DAY = 86400.0


def realistic_columns(n: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Score and lifecycle inputs of ``n`` memories that look like a long-running agent's store."""
    rng = np.random.default_rng(seed)
    created = NOW - rng.exponential(120 * DAY, n)
    accessed = rng.random(n) < 0.6
    last_access = np.where(accessed, created + rng.random(n) * (NOW - created), np.nan)
    content_bytes = np.minimum(rng.lognormal(5.5, 1.0, n), 20000).astype(np.uint32)
    importance = np.where(rng.random(n) < 0.3, rng.integers(1, 11, n), 0).astype(np.uint8)
    score_inputs = {
        "confidence": rng.choice(np.array([0.9, 0.8, 0.6, 0.7], dtype=np.float32), n)
        + rng.normal(0, 0.05, n).astype(np.float32),
        "successes": rng.poisson(0.5, n).astype(np.float32),
        "failures": rng.poisson(0.2, n).astype(np.float32),
        "inconsistency": np.where(rng.random(n) < 0.05, rng.random(n), 0.0).astype(np.float32),
        "last_access": last_access,
        "created": created,
        "access_count": np.where(accessed, rng.geometric(0.15, n), 0).astype(np.uint32),
        "importance": importance,
        "content_bytes": content_bytes,
        "uniqueness": rng.beta(2.0, 2.0, n).astype(np.float32),
        "stored_bytes": (content_bytes + 1536 + 128).astype(np.uint32),  # text + 384-d vector + record overhead
        "kind": rng.choice(np.arange(6, dtype=np.uint8), n, p=[0.05, 0.25, 0.1, 0.45, 0.1, 0.05]),
    }
    state = rng.choice(
        np.array([STATE_ACTIVE, STATE_ARCHIVED, STATE_CONSOLIDATED, STATE_OBSOLETE], dtype=np.uint8),
        n,
        p=[0.7, 0.2, 0.05, 0.05],
    )
    lifecycle_inputs = {
        "state": state,
        "kind": score_inputs["kind"],
        "state_since": NOW - rng.exponential(10 * DAY, n),
        "below_since": np.where(rng.random(n) < 0.05, NOW - rng.random(n) * 30 * DAY, np.nan),
    }
    return score_inputs, lifecycle_inputs


@numba.njit(nogil=True, parallel=True, cache=True)
def _touch(
    f32a: np.ndarray,
    f32b: np.ndarray,
    f32c: np.ndarray,
    f32d: np.ndarray,
    f32e: np.ndarray,
    f64a: np.ndarray,
    f64b: np.ndarray,
    u32a: np.ndarray,
    u32b: np.ndarray,
    u32c: np.ndarray,
    u8a: np.ndarray,
    u8b: np.ndarray,
    u8c: np.ndarray,
    f64c: np.ndarray,
    f64d: np.ndarray,
    out_f32: np.ndarray,
    out_u8: np.ndarray,
    out_f64: np.ndarray,
) -> None:
    # Read every input byte of a sweep once and write every output byte once (5 float32 scores
    # stand in as one float32 written five times over: same bytes).
    n = f32a.shape[0]
    chunk = kp.CHUNK
    for c in prange((n + chunk - 1) // chunk):
        # Unsigned bounds, as in the kernels: no negative-index wraparound, so loads stay contiguous.
        for i in range(np.uint64(c * chunk), np.uint64(min(c * chunk + chunk, n))):
            a = f32a[i] + f32b[i] + f32c[i] + f32d[i] + f32e[i]
            b = f64a[i] + f64b[i] + f64c[i] + f64d[i]
            m = u32a[i] + u32b[i] + u32c[i]
            out_f32[i, 0] = a
            out_f32[i, 1] = a
            out_f32[i, 2] = b
            out_f32[i, 3] = m
            out_f32[i, 4] = a
            out_u8[i] = u8a[i] + u8b[i] + u8c[i]
            out_f64[i] = b


def timings_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and minimum wall time of ``fn`` in ms over ``repeats`` runs after one warm-up run.

    The minimum is what the machine can do when nothing else runs; the median is what a caller sees.
    """
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3, min(samples) * 1e3


def measure(n: int, repeats: int, numpy_repeats: int, seed: int) -> dict[str, Any]:
    """Every figure for one size."""
    scores_in, life_in = realistic_columns(n, seed)
    params = kp.default_params("wall")
    budget = kp.DEFAULT_COST_BUDGET_BYTES
    out = Scores(*(np.empty(n, dtype=np.float32) for _ in Scores._fields))
    next_state = np.empty(n, dtype=np.uint8)
    next_below = np.empty(n, dtype=np.float64)

    def numba_scores() -> None:
        compute_scores(**scores_in, now=NOW, cost_budget_bytes=budget, params=params, out=out)

    def numba_transitions() -> None:
        propose_transitions(out.value, **life_in, now=NOW, params=params, out=(next_state, next_below))

    def numba_sweep() -> None:
        numba_scores()
        numba_transitions()

    def numba_sweep_fresh() -> None:
        fresh = compute_scores(**scores_in, now=NOW, cost_budget_bytes=budget, params=params)
        propose_transitions(fresh.value, **life_in, now=NOW, params=params)

    def numpy_sweep() -> tuple[Any, Any]:
        reference = naive.compute_scores(**scores_in, now=NOW, cost_budget_bytes=budget, params=params)
        return reference, naive.propose_transitions(
            reference.value.astype(np.float32), **life_in, now=NOW, params=params
        )

    touch_f32 = np.empty((n, 5), dtype=np.float32)
    touch_u8 = np.empty(n, dtype=np.uint8)
    touch_f64 = np.empty(n, dtype=np.float64)

    def floor() -> None:
        s = scores_in
        _touch(
            s["confidence"],
            s["successes"],
            s["failures"],
            s["inconsistency"],
            s["uniqueness"],
            s["last_access"],
            s["created"],
            s["access_count"],
            s["content_bytes"],
            s["stored_bytes"],
            s["importance"],
            s["kind"],
            life_in["state"],
            life_in["state_since"],
            life_in["below_since"],
            touch_f32,
            touch_u8,
            touch_f64,
        )

    result: dict[str, Any] = {"n": n}
    figures: list[tuple[str, Callable[[], object], int]] = [
        ("numba", numba_sweep, repeats),
        ("scores", numba_scores, repeats),
        ("transitions", numba_transitions, repeats),
        ("numba_fresh_outputs", numba_sweep_fresh, repeats),
        ("floor", floor, repeats),
        ("numpy", numpy_sweep, numpy_repeats),
    ]
    for name, fn, count in figures:
        result[f"{name}_ms_median"], result[f"{name}_ms_min"] = timings_ms(fn, count)
    result["ratio"] = result["numpy_ms_median"] / result["numba_ms_median"]
    result["items_per_s"] = n / (result["numba_ms_median"] / 1e3)
    inputs = sum(a.itemsize for a in scores_in.values()) + sum(
        a.itemsize for k, a in life_in.items() if k != "kind"
    )  # kind is shared by both kernels
    outputs = 5 * 4 + 1 + 8
    # value is written by one kernel and read back by the next.
    result["bytes_per_memory"] = {"inputs": inputs, "outputs": outputs, "moved_per_sweep": inputs + outputs + 4}

    # Agreement: the same sweep, both ways.
    numba_sweep()
    reference, (want_state, _) = numpy_sweep()
    result["max_abs_value_diff"] = float(np.max(np.abs(out.value - reference.value), initial=0.0))
    result["state_mismatches"] = int(np.count_nonzero(next_state != want_state))
    result["transitions"] = int(np.count_nonzero(next_state != life_in["state"]))
    return result


def machine() -> dict[str, Any]:
    """Where the figures were measured."""
    return machine_info.machine(
        ("numpy", "numba", "llvmlite"),
        numba_threads=numba.get_num_threads(),
        numba_threading_layer=_threading_layer(),
    )


def _threading_layer() -> str | None:
    try:
        return str(numba.threading_layer())  # type: ignore[attr-defined]  # public, not in numba's __all__
    except ValueError:  # no parallel kernel has run yet
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="memory counts, comma-separated (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per numba figure; the median is reported")
    parser.add_argument("--numpy-repeats", type=int, default=7, help="timed runs per NumPy figure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    sizes = [int(float(size)) for size in args.sizes.split(",") if size.strip()]

    load_before = os.getloadavg()[0]
    results = [measure(n, args.repeats, args.numpy_repeats, args.seed) for n in sizes]
    report = {
        "benchmark": "kernels: compute_scores + propose_transitions",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(["python", "benchmarks/kernels.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "repeats": {"numba": args.repeats, "numpy": args.numpy_repeats},
        # Other processes on the machine slow every figure; a 1-minute load near the core count means low figures.
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "results": results,
    }
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


def print_table(report: dict[str, Any]) -> None:
    """The figures as a fixed-width table."""
    m = report["machine"]
    print(f"machine   {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}")
    print(f"numba     {m['numba_threads']} threads ({m['numba_threading_layer']} layer)")
    print(f"versions  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}")
    load = report["load_average_1m"]
    print(f"load      1-minute load average {load['before']} before, {load['after']} after the run")
    print()
    header = (
        f"{'n':>11} {'numba ms':>9} {'(min)':>6} {'numpy ms':>9} {'ratio':>6} {'Mitems/s':>9} "
        f"{'scores':>7} {'transit':>7} {'fresh out':>9} {'floor ms':>8} {'(min)':>6} {'B/item':>6} {'max|dV|':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in report["results"]:
        print(
            f"{r['n']:>11,} {r['numba_ms_median']:>9.1f} {r['numba_ms_min']:>6.1f} {r['numpy_ms_median']:>9.1f} "
            f"{r['ratio']:>5.1f}x {r['items_per_s'] / 1e6:>9.0f} {r['scores_ms_median']:>7.1f} "
            f"{r['transitions_ms_median']:>7.1f} {r['numba_fresh_outputs_ms_median']:>9.1f} "
            f"{r['floor_ms_median']:>8.1f} {r['floor_ms_min']:>6.1f} "
            f"{r['bytes_per_memory']['moved_per_sweep']:>6} {r['max_abs_value_diff']:>8.1e}"
        )
    print()
    print("numba = compute_scores + propose_transitions into reused outputs; fresh out = outputs allocated per call;")
    print("floor = one read of every input and one write of every output (memory bandwidth);")
    print("ms figures are medians of the repeats, (min) the fastest repeat; ratio = numpy / numba medians.")


if __name__ == "__main__":
    raise SystemExit(main())
