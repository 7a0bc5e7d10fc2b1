"""compute_scores: equal to the NumPy reference, the documented edge rules, decay behaviour, argument checks."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import naive
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_columns import NOW, SIZES, score_columns

from memevo.kernels import _wrappers, value
from memevo.kernels import params as kp
from memevo.kernels.value import Scores, compute_scores

BUDGET = 1048576.0
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _both(columns: dict[str, Any], now: float = NOW, params: np.ndarray | None = None) -> tuple[Scores, Any]:
    params = kp.default_params() if params is None else params
    got = compute_scores(**columns, now=now, cost_budget_bytes=BUDGET, params=params)
    want = naive.compute_scores(**columns, now=now, cost_budget_bytes=BUDGET, params=params)
    return got, want


def _assert_equal_to_naive(got: Scores, want: Any) -> None:
    for name in Scores._fields:
        g = getattr(got, name)
        assert g.dtype == np.float32, name
        np.testing.assert_allclose(g, getattr(want, name), err_msg=name, **TOLERANCE)


def _one(**overrides: Any) -> dict[str, Any]:
    """Columns of a single ordinary memory, with ``overrides`` (scalars) applied."""
    row: dict[str, Any] = {
        "confidence": (0.8, np.float32),
        "successes": (0.0, np.float32),
        "failures": (0.0, np.float32),
        "inconsistency": (0.0, np.float32),
        "last_access": (NOW, np.float64),
        "created": (NOW - 10.0, np.float64),
        "access_count": (0, np.uint32),
        "importance": (0, np.uint8),
        "content_bytes": (200, np.uint32),
        "uniqueness": (0.5, np.float32),
        "stored_bytes": (2000, np.uint32),
        "kind": (kp.KIND_FACT, np.uint8),
    }
    columns = {}
    for name, (default, dtype) in row.items():
        columns[name] = np.array([overrides.pop(name, default)], dtype=dtype)
    assert not overrides, f"unknown columns {overrides}"
    return columns


def _score(now: float = NOW, params: np.ndarray | None = None, **overrides: Any) -> dict[str, float]:
    params = kp.default_params() if params is None else params
    scores = compute_scores(**_one(**overrides), now=now, cost_budget_bytes=BUDGET, params=params)
    return {name: float(getattr(scores, name)[0]) for name in Scores._fields}


# -- equal to the reference ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("edges", [False, True])
def test_equals_naive_on_random_columns(n: int, edges: bool) -> None:
    rng = np.random.default_rng(n * 2 + edges)
    got, want = _both(score_columns(rng, n, edges=edges))
    assert all(getattr(got, name).shape == (n,) for name in Scores._fields)
    _assert_equal_to_naive(got, want)


@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_equals_naive_with_turn_clock_and_random_policy(clock: kp.Clock) -> None:
    rng = np.random.default_rng(7)
    params = kp.default_params(clock)
    # Perturb every weight and rate so a swapped column would show.
    params *= rng.uniform(0.5, 2.0, params.shape)
    params[:, kp.CONFIDENCE_FLOOR] = rng.uniform(0, 1, params.shape[0])
    thresholds = [kp.EVICT_BELOW, kp.ARCHIVE_BELOW, kp.REACTIVATE_ABOVE]
    params[:, thresholds] = np.sort(params[:, thresholds], axis=1)
    assert kp.validate_params(params) == []
    now = 5000.0 if clock == "turns" else NOW
    columns = score_columns(rng, 4099, now=now)
    if clock == "turns":
        columns["created"] = np.floor(rng.uniform(0, now, 4099))
        columns["last_access"] = np.where(rng.random(4099) < 0.5, np.nan, np.floor(rng.uniform(0, now, 4099)))
    _assert_equal_to_naive(*_both(columns, now=now, params=params))


def test_every_kind_uses_its_own_row_and_unknown_kinds_use_row_zero() -> None:
    params = kp.default_params()
    for kind in range(kp.N_KINDS):
        params[kind, kp.HALF_LIFE] = 1000.0 * (kind + 1)
    kinds = np.array([0, 1, 2, 3, 4, 5, 6, 200, 255], dtype=np.uint8)
    n = kinds.size
    columns = {name: np.repeat(column, n) for name, column in _one(last_access=NOW - 1000.0).items()}
    columns["kind"] = kinds
    got, want = _both(columns, params=params)
    _assert_equal_to_naive(got, want)
    expected = [2 ** (-1000.0 / (1000.0 * (k + 1))) for k in (0, 1, 2, 3, 4, 5, 0, 0, 0)]
    np.testing.assert_allclose(got.relevance, expected, **TOLERANCE)


finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=300, deadline=None)
@given(
    confidence=finite_or_not,
    successes=finite_or_not,
    failures=finite_or_not,
    inconsistency=finite_or_not,
    uniqueness=finite_or_not,
    last_access=st.floats(allow_nan=True, allow_infinity=True),
    created=st.floats(allow_nan=True, allow_infinity=True),
    access_count=st.integers(0, 2**32 - 1),
    importance=st.integers(0, 255),
    content_bytes=st.integers(0, 2**32 - 1),
    stored_bytes=st.integers(0, 2**32 - 1),
    kind=st.integers(0, 255),
    now=st.floats(-1e15, 1e15),
)
def test_any_single_memory_gives_finite_scores_equal_to_naive(now: float, **row: Any) -> None:
    columns = _one(**row)
    got, want = _both(columns, now=now)
    for name in Scores._fields:
        assert np.isfinite(getattr(got, name)).all(), (name, row)
    _assert_equal_to_naive(got, want)


# -- the documented rules --------------------------------------------------------------------------------------


def test_value_is_the_weighted_sum_of_its_terms() -> None:
    rng = np.random.default_rng(3)
    columns = score_columns(rng, 999, edges=False)
    params = kp.default_params()
    got = compute_scores(**columns, now=NOW, cost_budget_bytes=BUDGET, params=params)
    row = params[np.where(columns["kind"] < kp.N_KINDS, columns["kind"], 0)]
    expected = (
        row[:, kp.ALPHA] * got.accuracy
        + row[:, kp.BETA] * got.relevance
        + row[:, kp.GAMMA] * got.utility
        - row[:, kp.DELTA] * got.cost
    )
    np.testing.assert_allclose(got.value, expected, **TOLERANCE)


@pytest.mark.parametrize("kind", range(kp.N_KINDS))
@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_relevance_halves_after_one_half_life(kind: int, clock: kp.Clock) -> None:
    params = kp.default_params(clock)
    half_life = params[kind, kp.HALF_LIFE]
    now = 1e6 if clock == "turns" else NOW
    fresh = _score(now=now, params=params, kind=kind, last_access=now)
    later = _score(now=now + half_life, params=params, kind=kind, last_access=now)
    much_later = _score(now=now + 3 * half_life, params=params, kind=kind, last_access=now)
    assert fresh["relevance"] == pytest.approx(1.0, abs=1e-6)
    assert later["relevance"] == pytest.approx(0.5, abs=1e-6)
    assert much_later["relevance"] == pytest.approx(0.125, abs=1e-6)


def test_access_count_raises_relevance_by_eta_log1p() -> None:
    params = kp.default_params()
    eta = params[kp.KIND_FACT, kp.ACCESS_WEIGHT]
    for count in (0, 1, 9, 1000, 2**32 - 1):
        got = _score(access_count=count)["relevance"]
        assert got == pytest.approx(1.0 + eta * math.log1p(count), rel=1e-6), count


def test_confidence_decays_toward_the_floor_and_never_below_it() -> None:
    params = kp.default_params()
    for kind in range(kp.N_KINDS):
        params[kind, kp.W_CONFIDENCE] = 1.0
        params[kind, kp.W_FEEDBACK] = 0.0
    floor = params[kp.KIND_FACT, kp.CONFIDENCE_FLOOR]
    half_life = params[kp.KIND_FACT, kp.CONFIDENCE_DECAY_HALF_LIFE]
    start = NOW - half_life
    assert _score(params=params, confidence=0.8, last_access=start)["accuracy"] == pytest.approx(
        floor + (0.8 - floor) / 2, abs=1e-6
    )
    assert _score(params=params, confidence=0.8, last_access=NOW - 1e12)["accuracy"] == pytest.approx(floor, abs=1e-6)
    # Already below the floor: decay does not raise it.
    assert _score(params=params, confidence=floor / 2, last_access=start)["accuracy"] == pytest.approx(
        floor / 2, abs=1e-6
    )


def test_idle_agent_in_turn_mode_does_not_decay() -> None:
    params = kp.default_params("turns")
    turn = 4321.0
    eta = params[kp.KIND_EPISODE, kp.ACCESS_WEIGHT]
    first = _score(now=turn, params=params, kind=kp.KIND_EPISODE, last_access=turn, created=100.0, access_count=3)
    # The agent sleeps: wall time passes, the turn counter does not, and a sweep sees the same now.
    for _ in range(3):
        again = _score(now=turn, params=params, kind=kp.KIND_EPISODE, last_access=turn, created=100.0, access_count=3)
        assert again == first
    assert first["relevance"] == pytest.approx(1.0 + eta * math.log1p(3), rel=1e-6)
    no_decay = params[kp.KIND_EPISODE, kp.W_CONFIDENCE] * 0.8 + params[kp.KIND_EPISODE, kp.W_FEEDBACK] * 0.5
    assert first["accuracy"] == pytest.approx(no_decay, abs=1e-6)
    # One more turn does decay.
    assert _score(now=turn + 1, params=params, kind=kp.KIND_EPISODE, last_access=turn)["relevance"] < 1.0


def test_never_accessed_memory_decays_from_creation() -> None:
    params = kp.default_params()
    half_life = params[kp.KIND_FACT, kp.HALF_LIFE]
    got = _score(last_access=np.nan, created=NOW - half_life)
    assert got["relevance"] == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize(
    ("last_access", "created"),
    [
        (np.nan, np.nan),
        (np.inf, np.nan),
        (np.nan, np.inf),
        (np.nan, -np.inf),
        (-np.inf, np.nan),
        (NOW + 1e6, NOW),  # accessed "in the future" (clock skew)
        (np.nan, NOW + 1e6),
    ],
)
def test_unusable_times_mean_no_decay(last_access: float, created: float) -> None:
    got = _score(last_access=last_access, created=created)
    assert got["relevance"] == pytest.approx(1.0, abs=1e-6)
    assert all(math.isfinite(value) for value in got.values())


def test_very_large_gap_and_zero_counts() -> None:
    params = kp.default_params()
    got = _score(last_access=NOW - 1e12, access_count=0, successes=0.0, failures=0.0)
    assert got["relevance"] == pytest.approx(0.0, abs=1e-30)
    floor = params[kp.KIND_FACT, kp.CONFIDENCE_FLOOR]
    expected = params[kp.KIND_FACT, kp.W_CONFIDENCE] * floor + params[kp.KIND_FACT, kp.W_FEEDBACK] * 0.5
    assert got["accuracy"] == pytest.approx(expected, abs=1e-6)
    assert all(math.isfinite(value) for value in got.values())


def test_nan_confidence_counts_as_zero() -> None:
    assert _score(confidence=np.nan)["accuracy"] == pytest.approx(_score(confidence=0.0)["accuracy"], abs=1e-7)


def test_nan_or_cancelling_feedback_counts_as_no_feedback() -> None:
    neutral = _score()["accuracy"]
    for successes, failures in ((np.nan, 0.0), (0.0, np.nan), (np.nan, np.nan), (np.inf, np.inf)):
        assert _score(successes=successes, failures=failures)["accuracy"] == pytest.approx(neutral, abs=1e-7)


def test_feedback_moves_accuracy_through_a_sigmoid() -> None:
    params = kp.default_params()
    w_f = params[kp.KIND_STRATEGY, kp.W_FEEDBACK]
    base = _score(kind=kp.KIND_STRATEGY)["accuracy"]
    good = _score(kind=kp.KIND_STRATEGY, successes=3.0, failures=1.0)["accuracy"]
    assert good - base == pytest.approx(w_f * (1 / (1 + math.exp(-2.0)) - 0.5), abs=1e-6)
    assert _score(kind=kp.KIND_STRATEGY, successes=0.0, failures=50.0)["accuracy"] < base


def test_accuracy_is_clipped_to_unit_interval() -> None:
    params = kp.default_params()
    params[:, kp.W_CONFIDENCE] = 5.0
    assert _score(params=params, confidence=1.0)["accuracy"] == 1.0
    assert _score(inconsistency=1.0, confidence=0.0)["accuracy"] == 0.0
    # Inconsistency beyond 1 is clipped to 1, NaN counts as 0.
    assert _score(inconsistency=7.0)["accuracy"] == _score(inconsistency=1.0)["accuracy"]
    assert _score(inconsistency=np.nan)["accuracy"] == _score(inconsistency=0.0)["accuracy"]


@pytest.mark.parametrize("importance", range(1, 11))
def test_importance_sets_density(importance: int) -> None:
    got = _score(importance=importance, uniqueness=1.0)
    assert got["utility"] == pytest.approx(importance / 10, abs=1e-6)


@pytest.mark.parametrize("importance", [0, 11, 255])
def test_missing_or_out_of_range_importance_uses_the_length_proxy(importance: int) -> None:
    for length in (0, 1, 200, 1999):
        got = _score(importance=importance, content_bytes=length, uniqueness=1.0)
        assert got["utility"] == pytest.approx(math.log1p(length) / math.log1p(kp.LENGTH_PROXY_BYTES), abs=1e-6)
    assert _score(importance=importance, content_bytes=2000, uniqueness=1.0)["utility"] == pytest.approx(1.0)
    assert _score(importance=importance, content_bytes=2**32 - 1, uniqueness=1.0)["utility"] == 1.0


def test_uniqueness_scales_utility_and_nan_counts_as_unmeasured() -> None:
    assert _score(importance=10, uniqueness=0.25)["utility"] == pytest.approx(0.25)
    assert _score(importance=10, uniqueness=np.nan)["utility"] == pytest.approx(kp.UNMEASURED_UNIQUENESS)
    assert _score(importance=10, uniqueness=-1.0)["utility"] == 0.0
    assert _score(importance=10, uniqueness=2.0)["utility"] == 1.0


def test_cost_is_stored_bytes_over_budget() -> None:
    assert _score(stored_bytes=0)["cost"] == 0.0
    assert _score(stored_bytes=524288)["cost"] == pytest.approx(0.5)
    assert _score(stored_bytes=2**32 - 1)["cost"] == pytest.approx((2**32 - 1) / BUDGET)


# -- arguments --------------------------------------------------------------------------------------------------


def test_out_arrays_are_filled_and_returned() -> None:
    rng = np.random.default_rng(11)
    columns = score_columns(rng, 2048)
    params = kp.default_params()
    fresh = compute_scores(**columns, now=NOW, cost_budget_bytes=BUDGET, params=params)
    out = Scores(*(np.full(2048, np.nan, dtype=np.float32) for _ in Scores._fields))
    returned = compute_scores(**columns, now=NOW, cost_budget_bytes=BUDGET, params=params, out=out)
    assert returned is out
    for name in Scores._fields:
        np.testing.assert_array_equal(getattr(out, name), getattr(fresh, name))


def test_concurrent_calls_from_threads_give_the_reference_results() -> None:
    # gRPC threads and the governance daemon may call kernels at once.
    inputs = [score_columns(np.random.default_rng(seed), 20_000 + seed) for seed in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda columns: _both(columns), inputs))
    for got, want in results:
        _assert_equal_to_naive(got, want)


@pytest.mark.parametrize("n", [1, 100_000])
def test_calls_leave_the_callers_thread_count_alone(n: int) -> None:
    before = numba.get_num_threads()
    _both(score_columns(np.random.default_rng(n), n))
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("n", [1, 20, kp.CHUNK])
def test_calls_of_one_chunk_do_not_wait_for_a_running_launch(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write or recall scoring a few rows must not queue behind a sweep holding the launch lock,
    # even on a threading layer that is not known to be thread-safe.
    monkeypatch.setattr(_wrappers, "_threadsafe", False)
    columns = score_columns(np.random.default_rng(n), n)
    with _wrappers._LAUNCH_LOCK, ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_both, columns)
        got, want = future.result(timeout=120)
    _assert_equal_to_naive(got, want)


def test_serial_and_parallel_builds_are_cached_apart() -> None:
    # Numba keys its on-disk cache by function name and line, not by the parallel option: sharing an
    # entry, the serial build loaded the parallel code, which then ran on every core for one row.
    parallel, serial = value._compute_scores, value._compute_scores_serial
    assert parallel.targetoptions.get("parallel")
    assert not serial.targetoptions.get("parallel")
    assert parallel._cache._cache_file._index_name != serial._cache._cache_file._index_name


def test_read_only_columns_are_accepted() -> None:
    columns = score_columns(np.random.default_rng(5), 100)
    for column in columns.values():
        column.flags.writeable = False
    _assert_equal_to_naive(*_both(columns))


def _call(**changes: Any) -> Scores:
    columns: dict[str, Any] = score_columns(np.random.default_rng(0), 10, edges=False)
    arguments: dict[str, Any] = {**columns, "now": NOW, "cost_budget_bytes": BUDGET, "params": kp.default_params()}
    arguments.update(changes)
    return compute_scores(**arguments)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"confidence": np.zeros(10, dtype=np.float64)}, r"confidence must be float32.*np\.ascontiguousarray"),
        ({"last_access": np.zeros(10, dtype=np.float32)}, "last_access must be float64"),
        ({"access_count": np.zeros(10, dtype=np.int64)}, "access_count must be uint32"),
        ({"kind": np.zeros(10, dtype=np.int32)}, "kind must be uint8"),
        ({"created": np.zeros(11)}, "created has 11 entries but the first column has 10"),
        ({"importance": np.zeros((10, 1), dtype=np.uint8)}, "importance must be 1-D"),
        ({"uniqueness": np.zeros(20, dtype=np.float32)[::2]}, "uniqueness must be C-contiguous"),
        ({"successes": [0.0] * 10}, "successes must be a numpy array"),
        ({"now": float("nan")}, "now must be finite"),
        ({"now": "soon"}, "now must be a finite number"),
        ({"cost_budget_bytes": 0.0}, "cost_budget_bytes must be > 0"),
        ({"cost_budget_bytes": float("inf")}, "cost_budget_bytes must be finite"),
        ({"params": np.zeros((6, 3))}, r"shape \(n_kinds >= 1, 16\)"),
        ({"params": kp.default_params().astype(np.float32)}, "float64"),
        ({"params": kp.default_params()[:, ::-1].copy()}, "thresholds must satisfy"),
        ({"out": (1, 2, 3, 4, 5)}, "out must be a Scores"),
        ({"out": Scores(*(np.empty(9, dtype=np.float32) for _ in range(5)))}, "out.accuracy has 9 entries"),
    ],
)
def test_bad_arguments_raise_value_error_saying_what_to_pass(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _call(**changes)


def test_read_only_or_overlapping_out_is_refused() -> None:
    read_only = Scores(*(np.empty(10, dtype=np.float32) for _ in range(5)))
    read_only.cost.flags.writeable = False
    with pytest.raises(ValueError, match=r"out\.cost is read-only"):
        _call(out=read_only)
    columns = score_columns(np.random.default_rng(0), 10, edges=False)
    overlapping = Scores(columns["confidence"], *(np.empty(10, dtype=np.float32) for _ in range(4)))
    with pytest.raises(ValueError, match=r"out\.accuracy overlaps an input column"):
        compute_scores(**columns, now=NOW, cost_budget_bytes=BUDGET, params=kp.default_params(), out=overlapping)
    shared = np.empty(10, dtype=np.float32)
    twice = Scores(shared, *(np.empty(10, dtype=np.float32) for _ in range(3)), shared)
    with pytest.raises(ValueError, match=r"out\.value overlaps an input column or another output"):
        compute_scores(**columns, now=NOW, cost_budget_bytes=BUDGET, params=kp.default_params(), out=twice)


@pytest.mark.parametrize("n", [1, 40, kp.HOLD_GIL_ROWS])
def test_few_rows_keep_the_interpreter_lock_and_score_as_the_serial_build(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A recall's pool is scored by the build without nogil (releasing the lock for microseconds cost more than
    # the work): it must give the serial build's numbers bit for bit, and not share its cache entry.
    held: Any = value._compute_scores_held
    serial: Any = value._compute_scores_serial
    assert not held.targetoptions.get("nogil")
    assert serial.targetoptions.get("nogil")
    assert held._cache._cache_file._index_name != serial._cache._cache_file._index_name
    columns = score_columns(np.random.default_rng(n), n)
    got, want = _both(columns)
    _assert_equal_to_naive(got, want)
    monkeypatch.setattr(value, "HOLD_GIL_ROWS", 0)
    released, _ = _both(columns)
    for name in Scores._fields:
        np.testing.assert_array_equal(getattr(got, name), getattr(released, name), err_msg=name)
