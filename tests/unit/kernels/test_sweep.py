"""kernels/sweep.py: the fused sweep equals its NumPy reference and the raw two-kernel pipeline; derive; checks."""

from __future__ import annotations

from typing import Any

import naive
import numpy as np
import pytest
from kernel_columns import NOW, SIZES, score_columns

from memevo.kernels import params as kp
from memevo.kernels.lifecycle import N_STATES, STATE_ACTIVE, STATE_ARCHIVED, STATE_EVICTED
from memevo.kernels.sweep import (
    COUNT_EVALUATED,
    COUNT_MOVED,
    SweepResult,
    derive,
    derive_one,
    sweep,
    sweep_coefficients,
    sweep_rows,
)

BUDGET = 1048576.0
MARGIN = 0.05
# float32 arithmetic and exp2 polynomial against float64 NumPy: 1e-5 absolute on values of order 1.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def sweep_columns(rng: np.random.Generator, n: int, *, edges: bool = True) -> dict[str, Any]:
    """Compact columns of ``n`` memories; times are whole seconds (exact in float32) before now = 0."""
    day = 86400.0
    value_like = rng.choice(np.array([0.0, 0.05, 0.2, 0.3, 0.8], dtype=np.float32), n)
    columns: dict[str, Any] = {
        "state": rng.integers(0, N_STATES, n).astype(np.uint8),
        "kind": rng.integers(0, kp.N_KINDS + 2, n).astype(np.uint8),
        "confidence": rng.random(n, dtype=np.float32),
        "inconsistency": (rng.random(n, dtype=np.float32) * (rng.random(n) < 0.2)).astype(np.float32),
        "feedback": rng.random(n, dtype=np.float32),
        "log_count": np.log1p(rng.geometric(0.2, n) - 1).astype(np.float32),
        "utility": (rng.random(n, dtype=np.float32) * 0.5 + value_like * 0).astype(np.float32),
        "stored_bytes": rng.integers(0, 8000, n).astype(np.uint32),
        "touched": -np.floor(rng.exponential(20 * day, n)).astype(np.float32),
        "state_since": -np.floor(rng.exponential(2 * 3600.0, n)).astype(np.float32),
        "below": np.where(rng.random(n) < 0.4, -np.floor(rng.random(n) * 60 * day), np.nan).astype(np.float32),
    }
    if edges and n:
        for name, specials in (
            ("confidence", (np.nan, np.inf, -np.inf, -0.5, 1.5)),
            ("inconsistency", (np.nan, np.inf, 2.0)),
            ("touched", (np.nan, np.inf, -np.inf, 0.0, 10.0, -1e12, -3.0e38)),
            ("state_since", (np.nan, 0.0, 5.0, -np.inf)),
            ("below", (np.nan, 0.0, 5.0, -1e12)),
        ):
            where = rng.random(n) < 0.05
            columns[name][where] = rng.choice(np.array(specials, dtype=np.float32), int(where.sum()))
        columns["state"][rng.random(n) < 0.01] = 255
        columns["kind"][rng.random(n) < 0.01] = 255
    return columns


def _compare(columns: dict[str, Any], got: SweepResult, now: float, params: np.ndarray) -> None:
    value, next_state, next_below, near = naive.sweep(
        **columns, now=now, params=params, cost_budget_bytes=BUDGET, margin=MARGIN
    )
    np.testing.assert_allclose(got.value, value, **TOLERANCE)
    # A value within float32 rounding of a threshold may fall either side: compare states away from those.
    rows = params[np.where(columns["kind"] < params.shape[0], columns["kind"], 0)]
    thresholds = rows[:, [kp.EVICT_BELOW, kp.ARCHIVE_BELOW, kp.REACTIVATE_ABOVE]]
    edges = np.concatenate([thresholds, thresholds + MARGIN, thresholds - MARGIN], axis=1)
    clear = np.abs(value[:, None] - edges).min(axis=1) > 1e-4
    np.testing.assert_array_equal(got.next_state[clear], next_state[clear])
    np.testing.assert_array_equal(got.next_below[clear], next_below[clear].astype(np.float32))
    np.testing.assert_array_equal(got.near[clear], near[clear])
    assert got.counts[:, COUNT_EVALUATED].sum() == np.count_nonzero(columns["state"])
    assert got.counts[:, COUNT_MOVED].sum() == np.count_nonzero(got.next_state != columns["state"])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("edges", [False, True])
def test_sweep_equals_naive(n: int, edges: bool) -> None:
    rng = np.random.default_rng(100 + n * 2 + edges)
    columns = sweep_columns(rng, n, edges=edges)
    params = kp.default_params()
    got = sweep(**columns, now=0.0, coef=sweep_coefficients(params, BUDGET), margin=MARGIN)
    assert got.value.shape == (n,)
    _compare(columns, got, 0.0, params)


def test_sweep_equals_naive_with_turn_clock() -> None:
    rng = np.random.default_rng(7)
    columns = sweep_columns(rng, 5000)
    for name in ("touched", "state_since", "below"):
        columns[name] = np.floor(columns[name] / 86400.0 * 20).astype(np.float32)  # a few hundred turns back
    params = kp.default_params("turns")
    got = sweep(**columns, now=0.0, coef=sweep_coefficients(params, BUDGET), margin=MARGIN)
    _compare(columns, got, 0.0, params)


def test_rows_equal_the_whole_sweep_at_those_rows() -> None:
    rng = np.random.default_rng(3)
    columns = sweep_columns(rng, 40_000)
    coef = sweep_coefficients(kp.default_params(), BUDGET)
    whole = sweep(**columns, now=0.0, coef=coef, margin=MARGIN)
    rows = np.sort(rng.choice(40_000, 20_000, replace=False)).astype(np.int64)
    part = sweep_rows(rows, **columns, now=0.0, coef=coef, margin=MARGIN)
    np.testing.assert_array_equal(part.value, whole.value[rows])
    np.testing.assert_array_equal(part.next_state, whole.next_state[rows])
    np.testing.assert_array_equal(part.next_below, whole.next_below[rows])
    np.testing.assert_array_equal(part.near, whole.near[rows])
    empty = sweep_rows(np.zeros(0, dtype=np.int64), **columns, now=0.0, coef=coef)
    assert empty.value.shape == (0,)


def test_below_may_be_updated_in_place() -> None:
    rng = np.random.default_rng(4)
    columns = sweep_columns(rng, 20_000)
    coef = sweep_coefficients(kp.default_params(), BUDGET)
    expected = sweep(**columns, now=0.0, coef=coef).next_below
    n = 20_000
    out = SweepResult(
        np.empty(n, np.float32),
        np.empty(n, np.uint8),
        columns["below"],
        np.empty(n, np.uint8),
        np.zeros((2, 3), np.int64),
    )
    sweep(**columns, now=0.0, coef=coef, out=out)
    np.testing.assert_array_equal(columns["below"], expected)
    with pytest.raises(ValueError, match="overlaps input touched"):
        sweep(**columns, now=0.0, coef=coef, out=out._replace(value=columns["touched"]))


def test_compact_pipeline_equals_the_raw_kernels_formula() -> None:
    """derive + float32 offsets + sweep give the value of naive.compute_scores on the raw float64 columns."""
    rng = np.random.default_rng(11)
    raw = score_columns(rng, 20_000, edges=False)
    params = kp.default_params()
    want = naive.compute_scores(**raw, now=NOW, cost_budget_bytes=BUDGET, params=params)
    cache = derive(
        raw["successes"],
        raw["failures"],
        raw["access_count"],
        raw["importance"],
        raw["content_bytes"],
        raw["uniqueness"],
    )
    reference = np.where(np.isfinite(raw["last_access"]), raw["last_access"], raw["created"])
    n = raw["kind"].shape[0]
    got = sweep(
        np.full(n, STATE_ACTIVE, np.uint8),
        raw["kind"],
        raw["confidence"],
        raw["inconsistency"],
        *cache,
        raw["stored_bytes"],
        (reference - NOW).astype(np.float32),  # the epoch is now
        np.full(n, np.nan, np.float32),
        np.full(n, np.nan, np.float32),
        0.0,
        sweep_coefficients(params, BUDGET),
    )
    np.testing.assert_allclose(got.value, want.value, **TOLERANCE)


def test_derive_equals_naive_and_derive_one() -> None:
    rng = np.random.default_rng(5)
    raw = score_columns(rng, 3000, edges=True)
    args = (raw["successes"], raw["failures"], raw["access_count"], raw["importance"], raw["content_bytes"])
    args = (*args, raw["uniqueness"])
    got = derive(*args)
    want = naive.derive(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    for i in range(0, 3000, 7):
        one = derive_one(*(float(a[i]) if a.dtype.kind == "f" else int(a[i]) for a in args))
        np.testing.assert_allclose(one, [got[0][i], got[1][i], got[2][i]], rtol=1e-6, atol=1e-7)
    empty = derive(*(a[:0] for a in args))
    assert empty.feedback.shape == (0,)


def test_edge_rules_zero_counts_huge_gaps_and_nan() -> None:
    params = kp.default_params()
    coef = sweep_coefficients(params, BUDGET)

    def one(**overrides: Any) -> SweepResult:
        row: dict[str, Any] = {
            "state": (STATE_ACTIVE, np.uint8),
            "kind": (kp.KIND_FACT, np.uint8),
            "confidence": (0.8, np.float32),
            "inconsistency": (0.0, np.float32),
            "feedback": (0.5, np.float32),
            "log_count": (0.0, np.float32),
            "utility": (0.3, np.float32),
            "stored_bytes": (1000, np.uint32),
            "touched": (0.0, np.float32),
            "state_since": (-1e7, np.float32),
            "below": (np.nan, np.float32),
        }
        arrays = {name: np.array([overrides.pop(name, d)], dtype=t) for name, (d, t) in row.items()}
        return sweep(**arrays, now=0.0, coef=coef, margin=MARGIN)

    fresh = one()
    assert fresh.next_state[0] == STATE_ACTIVE
    assert fresh.near[0] == 0
    # Untouched for 1e9 s: relevance and confidence decay fully; archived, grace starts now.
    old = one(touched=-1e9)
    assert old.next_state[0] == STATE_ARCHIVED
    assert old.next_below[0] == 0.0
    # A NaN or future time means no decay.
    assert one(touched=np.nan).value[0] == pytest.approx(fresh.value[0], abs=1e-6)
    assert one(touched=50.0).value[0] == pytest.approx(fresh.value[0], abs=1e-6)
    # Grace over: evicted, and no longer near.
    gone = one(touched=-1e9, below=-1e9)
    assert gone.next_state[0] == STATE_EVICTED
    assert gone.near[0] == 0
    # A NaN confidence counts as 0; a huge stored size only lowers the value.
    assert one(confidence=np.nan).value[0] < fresh.value[0]
    assert one(stored_bytes=2**32 - 1).value[0] < fresh.value[0]


def test_bad_arguments_say_what_to_pass() -> None:
    rng = np.random.default_rng(6)
    columns = sweep_columns(rng, 10)
    coef = sweep_coefficients(kp.default_params(), BUDGET)
    with pytest.raises(ValueError, match="touched must be float32"):
        sweep(**{**columns, "touched": columns["touched"].astype(np.float64)}, now=0.0, coef=coef)
    with pytest.raises(ValueError, match="now must be finite"):
        sweep(**columns, now=float("nan"), coef=coef)
    with pytest.raises(ValueError, match="coef must be"):
        sweep(**columns, now=0.0, coef=np.zeros((6, 3), np.uint64))
    with pytest.raises(ValueError, match="margin must be >= 0"):
        sweep(**columns, now=0.0, coef=coef, margin=-1.0)
    with pytest.raises(ValueError, match="rows must lie in"):
        sweep_rows(np.array([10], dtype=np.int64), **columns, now=0.0, coef=coef)
    with pytest.raises(ValueError, match="cost_budget_bytes must be > 0"):
        sweep_coefficients(kp.default_params(), 0.0)
