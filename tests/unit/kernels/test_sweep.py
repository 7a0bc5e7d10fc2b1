"""kernels/sweep.py: anchored terms and the fused sweep equal their NumPy references and the raw value formula."""

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
    COUNT_NEAR,
    SweepResult,
    Terms,
    derive_terms,
    max_elapsed,
    sweep,
    sweep_coefficients,
    sweep_in_place,
    sweep_rows,
)

BUDGET = 1048576.0
MARGIN = 0.05
DAY = 86400.0
# float32 terms, factors and multiply-adds against float64 NumPy: values are of order 1, so 1e-5 relative and
# 1e-6 absolute (for values near 0). The measured error is a few 1e-7.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
RAW_NAMES = ("kind", "confidence", "inconsistency", "successes", "failures", "access_count", "importance")
RAW_NAMES = (*RAW_NAMES, "content_bytes", "uniqueness", "stored_bytes")


def touched_of(raw: dict[str, Any]) -> np.ndarray:
    """The decay reference time of compute_scores: last access, else creation."""
    return np.where(np.isfinite(raw["last_access"]), raw["last_access"], raw["created"])


def sweep_columns(rng: np.random.Generator, n: int, *, edges: bool = True, params: np.ndarray | None = None) -> dict:
    """Terms (derived from random raw columns, anchor = NOW) and lifecycle offsets of ``n`` memories."""
    params = kp.default_params() if params is None else params
    raw = score_columns(rng, n, edges=edges)
    terms = derive_terms(
        *(raw[name] for name in RAW_NAMES),
        touched_of(raw),
        anchor=NOW,
        params=params,
        cost_budget_bytes=BUDGET,
        latest=NOW,
    )
    columns: dict[str, Any] = {
        "state": rng.integers(0, N_STATES, n).astype(np.uint8),
        "kind": raw["kind"],
        **terms._asdict(),
        "since": -np.floor(rng.exponential(2 * 3600.0, n)).astype(np.float32),
        "below": np.where(rng.random(n) < 0.4, -np.floor(rng.random(n) * 60 * DAY), np.nan).astype(np.float32),
    }
    if edges and n:
        for name, specials in (("since", (np.nan, 0.0, 5.0, -np.inf, 1e12)), ("below", (np.nan, 0.0, 5.0, -1e12))):
            where = rng.random(n) < 0.05
            columns[name][where] = rng.choice(np.array(specials, dtype=np.float32), int(where.sum()))
        columns["state"][rng.random(n) < 0.01] = 255
    return columns


def _compare(columns: dict[str, Any], got: SweepResult, now: float, params: np.ndarray) -> None:
    value, next_state, next_below, near = naive.sweep(**columns, now=now, params=params, margin=MARGIN)
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
    assert got.counts[:, COUNT_NEAR].sum() == np.count_nonzero(got.near)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("edges", [False, True])
def test_sweep_equals_naive(n: int, edges: bool) -> None:
    rng = np.random.default_rng(100 + n * 2 + edges)
    columns = sweep_columns(rng, n, edges=edges)
    params = kp.default_params()
    for now in (0.0, 3600.0, 40 * DAY):
        got = sweep(**columns, coef=sweep_coefficients(params, now), margin=MARGIN)
        assert got.value.shape == (n,)
        _compare(columns, got, now, params)


def test_sweep_equals_naive_with_turn_clock() -> None:
    rng = np.random.default_rng(7)
    params = kp.default_params("turns")
    raw = score_columns(rng, 5000, now=1000.0, edges=True)
    for name in ("last_access", "created"):
        raw[name] = np.floor(np.clip(raw[name], -1e6, 1000.0) / 1e7 * 1000.0) + 900.0  # whole turns
    terms = derive_terms(
        *(raw[name] for name in RAW_NAMES), touched_of(raw), anchor=990.0, params=params, cost_budget_bytes=BUDGET
    )
    columns = sweep_columns(rng, 5000, params=params)
    columns.update(kind=raw["kind"], **terms._asdict())
    got = sweep(**columns, coef=sweep_coefficients(params, 10.0), margin=MARGIN)
    _compare(columns, got, 10.0, params)


@pytest.mark.parametrize("anchor_days", [0.0, 3.0, 30.0, 99.0])
@pytest.mark.parametrize("edges", [False, True])
def test_terms_and_sweep_give_the_raw_formula_of_compute_scores(anchor_days: float, edges: bool) -> None:
    """derive_terms at any anchor + a sweep at now equal naive.compute_scores on the raw float64 columns."""
    rng = np.random.default_rng(11 + int(anchor_days) + edges)
    raw = score_columns(rng, 20_000, edges=edges)
    params = kp.default_params()
    want = naive.compute_scores(**raw, now=NOW, cost_budget_bytes=BUDGET, params=params)
    anchor = NOW - anchor_days * DAY
    terms = derive_terms(
        *(raw[name] for name in RAW_NAMES),
        touched_of(raw),
        anchor=anchor,
        params=params,
        cost_budget_bytes=BUDGET,
        latest=NOW,  # score_columns puts a few times after NOW: they count as NOW, as compute_scores does
    )
    n = raw["kind"].shape[0]
    nan = np.full(n, np.nan, np.float32)
    state = np.full(n, STATE_ACTIVE, np.uint8)
    got = sweep(state, raw["kind"], *terms, nan, nan, sweep_coefficients(params, NOW - anchor))
    np.testing.assert_allclose(got.value, want.value, **TOLERANCE)


def test_derive_terms_equals_naive_over_all_rows_and_some() -> None:
    rng = np.random.default_rng(5)
    raw = score_columns(rng, 3000, edges=True)
    params = kp.default_params()
    args = tuple(raw[name] for name in RAW_NAMES)
    touched = touched_of(raw)
    got = derive_terms(*args, touched, anchor=NOW - DAY, params=params, cost_budget_bytes=BUDGET, latest=NOW)
    want = naive.derive_terms(*args, touched, NOW - DAY, params, BUDGET, latest=NOW)
    for name, g, w in zip(Terms._fields, got, want, strict=True):
        np.testing.assert_allclose(g, w.astype(np.float32), rtol=1e-6, atol=1e-7, err_msg=name)
    # Rows: only those slots change, to the same values.
    out = Terms(*(np.full(3000, -7.0, np.float32) for _ in Terms._fields))
    rows = np.sort(rng.choice(3000, 300, replace=False)).astype(np.int64)
    derive_terms(
        *args,
        touched[rows],
        anchor=NOW - DAY,
        params=params,
        cost_budget_bytes=BUDGET,
        latest=NOW,
        rows=rows,
        out=out,
    )
    others = np.setdiff1d(np.arange(3000), rows)
    for g, o in zip(got, out, strict=True):
        np.testing.assert_array_equal(o[rows], g[rows])
        assert (o[others] == -7.0).all()
    empty = derive_terms(*(a[:0] for a in args), touched[:0], anchor=0.0, params=params, cost_budget_bytes=BUDGET)
    assert empty.acc_base.shape == (0,)


def test_rows_equal_the_whole_sweep_at_those_rows() -> None:
    rng = np.random.default_rng(3)
    columns = sweep_columns(rng, 40_000)
    coef = sweep_coefficients(kp.default_params(), 2 * DAY)
    whole = sweep(**columns, coef=coef, margin=MARGIN)
    rows = np.sort(rng.choice(40_000, 20_000, replace=False)).astype(np.int64)
    part = sweep_rows(rows, **columns, coef=coef, margin=MARGIN)
    np.testing.assert_array_equal(part.value, whole.value[rows])
    np.testing.assert_array_equal(part.next_state, whole.next_state[rows])
    np.testing.assert_array_equal(part.next_below, whole.next_below[rows])
    np.testing.assert_array_equal(part.near, whole.near[rows])
    empty = sweep_rows(np.zeros(0, dtype=np.int64), **columns, coef=coef)
    assert empty.value.shape == (0,)


@pytest.mark.parametrize("n", [0, 1, 7, (1 << 14) * 3 + 5])
def test_in_place_sweep_updates_below_and_near_as_the_full_sweep_and_is_idempotent(n: int) -> None:
    rng = np.random.default_rng(4 + n)
    columns = sweep_columns(rng, n)
    coef = sweep_coefficients(kp.default_params(), 5 * DAY)
    full = sweep(**columns, coef=coef, margin=MARGIN)
    near = rng.integers(0, 2, n).astype(np.uint8)
    counts = sweep_in_place(**columns, near=near, coef=coef, margin=MARGIN)
    np.testing.assert_array_equal(columns["below"], full.next_below)
    np.testing.assert_array_equal(near, full.near)
    np.testing.assert_array_equal(counts, full.counts)
    # A second pass over the updated below proposes the same states (the daemon re-runs moved chunks).
    again = sweep(**columns, coef=coef, margin=MARGIN)
    np.testing.assert_array_equal(again.next_state, full.next_state)
    np.testing.assert_array_equal(again.value, full.value)


def test_full_sweep_may_update_below_in_place() -> None:
    rng = np.random.default_rng(14)
    n = 20_000
    columns = sweep_columns(rng, n)
    coef = sweep_coefficients(kp.default_params(), 0.0)
    expected = sweep(**columns, coef=coef).next_below
    out = SweepResult(
        np.empty(n, np.float32),
        np.empty(n, np.uint8),
        columns["below"],
        np.empty(n, np.uint8),
        np.zeros((2, 3), np.int64),
    )
    sweep(**columns, coef=coef, out=out)
    np.testing.assert_array_equal(columns["below"], expected)
    with pytest.raises(ValueError, match="overlaps input rel_term"):
        sweep(**columns, coef=coef, out=out._replace(value=columns["rel_term"]))


def test_moving_the_anchor_keeps_the_value() -> None:
    """Terms anchored 20 days ago swept at now equal terms anchored at now swept at 0 (a rebase changes nothing)."""
    rng = np.random.default_rng(12)
    raw = score_columns(rng, 5000, edges=True)
    params = kp.default_params()
    args = (*(raw[name] for name in RAW_NAMES), touched_of(raw))
    old = derive_terms(*args, anchor=NOW - 20 * DAY, params=params, cost_budget_bytes=BUDGET, latest=NOW)
    new = derive_terms(*args, anchor=NOW, params=params, cost_budget_bytes=BUDGET, latest=NOW)
    n = 5000
    lifecycle = (np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32))
    state = np.full(n, STATE_ACTIVE, np.uint8)
    a = sweep(state, raw["kind"], *old, *lifecycle, sweep_coefficients(params, 20 * DAY)).value
    b = sweep(state, raw["kind"], *new, *lifecycle, sweep_coefficients(params, 0.0)).value
    np.testing.assert_allclose(a, b, **TOLERANCE)


def test_edge_rules_zero_counts_huge_gaps_nan_and_future_times() -> None:
    params = kp.default_params()

    def one(now: float = 0.0, latest: float = np.inf, **overrides: Any) -> SweepResult:
        raw: dict[str, Any] = {
            "kind": (kp.KIND_FACT, np.uint8),
            "confidence": (0.8, np.float32),
            "inconsistency": (0.0, np.float32),
            "successes": (0.0, np.float32),
            "failures": (0.0, np.float32),
            "access_count": (0, np.uint32),
            "importance": (3, np.uint8),
            "content_bytes": (100, np.uint32),
            "uniqueness": (1.0, np.float32),
            "stored_bytes": (1000, np.uint32),
            "touched": (0.0, np.float64),
        }
        arrays = {name: np.array([overrides.pop(name, d)], dtype=t) for name, (d, t) in raw.items()}
        terms = derive_terms(**arrays, anchor=0.0, params=params, cost_budget_bytes=BUDGET, latest=latest)
        lifecycle = {
            name: np.array([overrides.pop(name, d)], np.float32) for name, d in (("since", -1e7), ("below", np.nan))
        }
        state = np.array([overrides.pop("state", STATE_ACTIVE)], np.uint8)
        assert not overrides
        return sweep(state, arrays["kind"], *terms, **lifecycle, coef=sweep_coefficients(params, now), margin=MARGIN)

    fresh = one()
    assert fresh.next_state[0] == STATE_ACTIVE
    assert fresh.near[0] == 0
    # Never accessed (count 0): log1p(0) = 0 adds nothing; more uses add relevance.
    assert one(access_count=5).value[0] > fresh.value[0]
    # Untouched for 1e9 s (a term that underflows to 0): relevance and confidence fully decayed; archived.
    old = one(touched=-1e9)
    assert old.next_state[0] == STATE_ARCHIVED
    assert old.next_below[0] == 0.0
    # The same gap reached by sweeping far from the anchor: as far as the coefficients allow.
    limit = max_elapsed(params)
    assert one(now=limit).value[0] == pytest.approx(one(touched=-limit).value[0], abs=1e-6)
    # A NaN or infinite time means no decay, at any now.
    later = 60 * 86400.0
    for t in (np.nan, np.inf, -np.inf):
        assert one(touched=t, now=later).value[0] == pytest.approx(fresh.value[0], abs=1e-6)
    # A time after the refresh's latest counts as latest: no decay at latest, decay after it.
    assert one(touched=50.0, latest=0.0).value[0] == pytest.approx(fresh.value[0], abs=1e-6)
    assert one(touched=50.0, latest=0.0, now=later).value[0] == pytest.approx(one(now=later).value[0], abs=1e-6)
    # A time just after the sweep's now (a concurrent refresh): relevance is capped at fresh, confidence is off
    # by 2**(50 s / its 30-day half-life), 1e-5 relative.
    assert one(touched=50.0).value[0] == pytest.approx(fresh.value[0], rel=2e-5)
    # Grace over: evicted, and no longer near.
    gone = one(touched=-1e9, below=-1e9)
    assert gone.next_state[0] == STATE_EVICTED
    assert gone.near[0] == 0
    # NaN confidence counts as 0, NaN uniqueness as unmeasured; a huge stored size only lowers the value.
    assert one(confidence=np.nan).value[0] < fresh.value[0]
    assert one(uniqueness=np.nan).value[0] == pytest.approx(fresh.value[0], abs=1e-6)
    assert one(stored_bytes=2**32 - 1).value[0] < fresh.value[0]
    assert np.isfinite(one(successes=np.inf, failures=np.inf, touched=-1e300).value[0])


def test_bad_arguments_say_what_to_pass() -> None:
    rng = np.random.default_rng(6)
    columns = sweep_columns(rng, 10)
    params = kp.default_params()
    coef = sweep_coefficients(params, 0.0)
    with pytest.raises(ValueError, match="since must be float32"):
        sweep(**{**columns, "since": columns["since"].astype(np.float64)}, coef=coef)
    with pytest.raises(ValueError, match="now must be finite"):
        sweep_coefficients(params, float("nan"))
    with pytest.raises(ValueError, match="rebase the terms"):
        sweep_coefficients(params, -1.0)
    with pytest.raises(ValueError, match="rebase the terms"):
        sweep_coefficients(params, max_elapsed(params) * 1.01)
    with pytest.raises(ValueError, match="coef must be"):
        sweep(**columns, coef=np.zeros((6, 3), np.uint64))
    with pytest.raises(ValueError, match="margin must be >= 0"):
        sweep(**columns, coef=coef, margin=-1.0)
    with pytest.raises(ValueError, match="rows must lie in"):
        sweep_rows(np.array([10], dtype=np.int64), **columns, coef=coef)
    with pytest.raises(ValueError, match="near overlaps"):
        sweep_in_place(**columns, near=columns["state"], coef=coef)
    raw = score_columns(rng, 10)
    args = tuple(raw[name] for name in RAW_NAMES)
    with pytest.raises(ValueError, match="cost_budget_bytes must be > 0"):
        derive_terms(*args, touched_of(raw), anchor=0.0, params=params, cost_budget_bytes=0.0)
    with pytest.raises(ValueError, match="out is required with rows"):
        derive_terms(
            *args, touched_of(raw)[:1], anchor=0.0, params=params, cost_budget_bytes=1.0, rows=np.zeros(1, np.int64)
        )
    with pytest.raises(ValueError, match="touched must be float64"):
        derive_terms(*args, touched_of(raw).astype(np.float32), anchor=0.0, params=params, cost_budget_bytes=1.0)


@pytest.mark.parametrize("check", [True, False])
def test_few_rows_derive_as_the_build_that_releases_the_lock(check: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Up to HOLD_GIL_ROWS rows (a recall's access refresh) run the build without nogil: same numbers bit for bit,
    # and a cache entry of its own (numba keys its cache by name and line, not by nogil).
    from memevo.kernels import sweep as sweep_module

    held: Any = sweep_module._derive_rows_held
    released: Any = sweep_module._derive_rows
    assert not held.targetoptions.get("nogil")
    assert released.targetoptions.get("nogil")
    assert held._cache._cache_file._index_name != released._cache._cache_file._index_name
    rng = np.random.default_rng(11)
    raw = score_columns(rng, 500, edges=True)
    args: tuple[Any, ...] = tuple(raw[name] for name in RAW_NAMES)
    rows = np.sort(rng.choice(500, 10, replace=False)).astype(np.int64)
    touched = touched_of(raw)[rows]
    outs = []
    for bound in (kp.HOLD_GIL_ROWS, 0):
        monkeypatch.setattr(sweep_module, "HOLD_GIL_ROWS", bound)
        out = Terms(*(np.full(500, -7.0, np.float32) for _ in Terms._fields))
        derive_terms(  # type: ignore[misc]  # mypy reads *args as filling the keywords
            *args,
            touched,  # type: ignore[arg-type]
            anchor=NOW - DAY,
            params=kp.default_params(),
            cost_budget_bytes=BUDGET,
            latest=NOW,
            rows=rows,
            out=out,
            check=check,
        )
        outs.append(out)
    for name, a, b in zip(Terms._fields, *outs, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert (a[rows] != -7.0).all()
