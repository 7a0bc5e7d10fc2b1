"""propose_transitions and count_transitions: equal to the NumPy reference, and the lifecycle rules of DESIGN §3."""

from __future__ import annotations

import itertools
from typing import Any

import naive
import numpy as np
import pytest
from kernel_columns import NOW, SIZES, lifecycle_columns

from memevo.kernels import params as kp
from memevo.kernels.lifecycle import (
    N_STATES,
    STATE_ACTIVE,
    STATE_ARCHIVED,
    STATE_CONSOLIDATED,
    STATE_EMPTY,
    STATE_EVICTED,
    STATE_OBSOLETE,
    count_transitions,
    propose_transitions,
)

PARAMS = kp.default_params()
ARCHIVE = PARAMS[kp.KIND_FACT, kp.ARCHIVE_BELOW]
REACTIVATE = PARAMS[kp.KIND_FACT, kp.REACTIVATE_ABOVE]
EVICT = PARAMS[kp.KIND_FACT, kp.EVICT_BELOW]
GRACE = PARAMS[kp.KIND_FACT, kp.EVICT_GRACE]
MIN_TIME = PARAMS[kp.KIND_FACT, kp.MIN_TIME_IN_STATE]


def _assert_equal_to_naive(columns: dict[str, Any], now: float, params: np.ndarray = PARAMS) -> None:
    state, below = propose_transitions(**columns, now=now, params=params)
    want_state, want_below = naive.propose_transitions(**columns, now=now, params=params)
    assert state.dtype == np.uint8
    assert below.dtype == np.float64
    np.testing.assert_array_equal(state, want_state)
    np.testing.assert_array_equal(below, want_below)  # NaN == NaN here


class Memory:
    """One memory swept again and again: applies each proposal as the engine would."""

    def __init__(self, state: int = STATE_ACTIVE, since: float = NOW, kind: int = kp.KIND_FACT) -> None:
        self.state = state
        self.since = since
        self.below = np.nan
        self.kind = kind
        self.moves: list[tuple[float, int, int]] = []

    def sweep(self, value: float, now: float, params: np.ndarray = PARAMS) -> int:
        state, below = propose_transitions(
            np.array([value], dtype=np.float32),
            np.array([self.state], dtype=np.uint8),
            np.array([self.kind], dtype=np.uint8),
            np.array([self.since]),
            np.array([self.below]),
            now,
            params,
        )
        if state[0] != self.state:
            self.moves.append((now, self.state, int(state[0])))
            self.state = int(state[0])
            self.since = now
        self.below = float(below[0])
        return self.state


# -- equal to the reference ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("edges", [False, True])
def test_equals_naive_on_random_columns(n: int, edges: bool) -> None:
    rng = np.random.default_rng(100 + n * 2 + edges)
    _assert_equal_to_naive(lifecycle_columns(rng, n, edges=edges), NOW)


@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_equals_naive_for_each_kind_with_its_own_thresholds(clock: kp.Clock) -> None:
    rng = np.random.default_rng(9)
    params = kp.default_params(clock)
    # Different thresholds and times per kind, so reading the wrong row would show.
    params[:, kp.ARCHIVE_BELOW] = np.linspace(0.1, 0.25, kp.N_KINDS)
    params[:, kp.EVICT_GRACE] *= np.linspace(0.1, 1.0, kp.N_KINDS)
    params[:, kp.MIN_TIME_IN_STATE] *= np.linspace(0.5, 3.0, kp.N_KINDS)
    assert kp.validate_params(params) == []
    now = 10_000.0 if clock == "turns" else NOW
    span = 3000.0 if clock == "turns" else 60 * 86400.0
    columns = lifecycle_columns(rng, 20_011, now=now, span=span)
    if clock == "turns":
        columns["state_since"] = now - np.floor(rng.exponential(20.0, 20_011))
    _assert_equal_to_naive(columns, now, params)


def test_every_rule_fires_on_the_random_columns() -> None:
    # Guards the comparison above against vacuous agreement (nothing ever moving).
    columns = lifecycle_columns(np.random.default_rng(1), 20_000)
    state, _ = propose_transitions(**columns, now=NOW, params=PARAMS)
    counts = count_transitions(columns["state"], state)
    assert counts[STATE_ACTIVE, STATE_ARCHIVED] > 0
    assert counts[STATE_ARCHIVED, STATE_ACTIVE] > 0
    assert counts[STATE_ACTIVE, STATE_EVICTED] > 0
    assert counts[STATE_ARCHIVED, STATE_EVICTED] > 0


# -- the rules ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [STATE_ACTIVE, STATE_ARCHIVED])
def test_a_value_inside_the_hysteresis_band_never_flips_state(start: int) -> None:
    memory = Memory(start, since=NOW - 1e9)
    for step, value in enumerate(np.linspace(ARCHIVE, REACTIVATE, 101)):
        assert memory.sweep(float(value), NOW + step * MIN_TIME) == start
    assert memory.moves == []


def test_thresholds_are_strict() -> None:
    assert Memory(STATE_ACTIVE, since=0.0).sweep(ARCHIVE, NOW) == STATE_ACTIVE
    assert Memory(STATE_ACTIVE, since=0.0).sweep(np.nextafter(np.float32(ARCHIVE), 0), NOW) == STATE_ARCHIVED
    assert Memory(STATE_ARCHIVED, since=0.0).sweep(REACTIVATE, NOW) == STATE_ARCHIVED
    assert Memory(STATE_ARCHIVED, since=0.0).sweep(np.nextafter(np.float32(REACTIVATE), 1), NOW) == STATE_ACTIVE


@pytest.mark.parametrize(
    ("start", "value", "moved"),
    [(STATE_ACTIVE, 0.1, STATE_ARCHIVED), (STATE_ARCHIVED, 0.9, STATE_ACTIVE)],
)
def test_minimum_time_in_state_blocks_a_flip_until_it_has_passed(start: int, value: float, moved: int) -> None:
    memory = Memory(start, since=NOW)
    assert memory.sweep(value, NOW) == start
    assert memory.sweep(value, NOW + MIN_TIME - 1.0) == start
    assert memory.sweep(value, NOW + MIN_TIME) == moved


def test_an_oscillating_value_moves_at_most_once_per_minimum_time() -> None:
    memory = Memory(STATE_ACTIVE, since=NOW)
    step = MIN_TIME / 60  # a sweep a minute, the value swinging across both thresholds every time
    sweeps = 600
    for i in range(sweeps):
        memory.sweep(0.1 if i % 2 == 0 else 0.5, NOW + i * step)
    assert len(memory.moves) <= sweeps * step / MIN_TIME + 1
    assert len(memory.moves) >= 5  # it does move, just not more often than allowed
    times = [when for when, _, _ in memory.moves]
    assert all(later - earlier >= MIN_TIME for earlier, later in itertools.pairwise(times))


def test_unknown_state_since_does_not_block_a_move() -> None:
    assert Memory(STATE_ACTIVE, since=np.nan).sweep(0.1, NOW) == STATE_ARCHIVED


def test_eviction_only_after_the_grace_period() -> None:
    memory = Memory(STATE_ACTIVE, since=NOW - 1e9)
    assert memory.sweep(0.01, NOW) == STATE_ARCHIVED  # below every threshold: archived first
    assert memory.below == NOW
    assert memory.sweep(0.01, NOW + GRACE / 2) == STATE_ARCHIVED
    assert memory.below == NOW  # the first time it fell below is kept
    assert memory.sweep(0.01, NOW + GRACE - 1.0) == STATE_ARCHIVED
    assert memory.sweep(0.01, NOW + GRACE) == STATE_EVICTED
    assert [(old, new) for _, old, new in memory.moves] == [
        (STATE_ACTIVE, STATE_ARCHIVED),
        (STATE_ARCHIVED, STATE_EVICTED),
    ]


def test_eviction_does_not_wait_for_the_minimum_time_in_state() -> None:
    memory = Memory(STATE_ARCHIVED, since=NOW)
    memory.below = NOW - GRACE
    assert memory.sweep(0.0, NOW) == STATE_EVICTED


def test_active_memory_below_the_low_threshold_is_evicted_after_grace_even_if_it_could_not_archive() -> None:
    params = kp.default_params()
    params[:, kp.MIN_TIME_IN_STATE] = 10 * GRACE
    memory = Memory(STATE_ACTIVE, since=NOW)
    assert memory.sweep(0.0, NOW, params) == STATE_ACTIVE
    assert memory.sweep(0.0, NOW + GRACE, params) == STATE_EVICTED


@pytest.mark.parametrize("recovered", [EVICT, 0.1, 0.9])
def test_below_since_resets_when_the_value_recovers(recovered: float) -> None:
    memory = Memory(STATE_ARCHIVED, since=NOW - 1e9)
    memory.sweep(0.01, NOW)
    assert memory.below == NOW
    memory.sweep(recovered, NOW + GRACE / 2)
    assert np.isnan(memory.below)
    # Falling again starts a new grace period.
    memory.sweep(0.01, NOW + GRACE * 0.75)
    assert memory.below == NOW + GRACE * 0.75
    assert memory.sweep(0.01, NOW + GRACE * 1.5) != STATE_EVICTED
    assert memory.sweep(0.01, NOW + GRACE * 1.75) == STATE_EVICTED


def test_zero_grace_evicts_on_the_first_sweep_below() -> None:
    params = kp.default_params()
    params[:, kp.EVICT_GRACE] = 0.0
    assert Memory(STATE_ACTIVE).sweep(0.0, NOW, params) == STATE_EVICTED


@pytest.mark.parametrize("state", [STATE_EMPTY, STATE_CONSOLIDATED, STATE_OBSOLETE, STATE_EVICTED, 6, 255])
def test_ungoverned_states_are_never_touched(state: int) -> None:
    n = 8
    values = np.array([0.0, 0.01, 0.1, 0.25, 0.5, 1.0, np.nan, -np.inf], dtype=np.float32)
    below = np.array([np.nan, NOW - 1e12, NOW, np.inf, -np.inf, np.nan, NOW - GRACE, 0.0])
    next_state, next_below = propose_transitions(
        values,
        np.full(n, state, dtype=np.uint8),
        np.full(n, kp.KIND_FACT, dtype=np.uint8),
        np.full(n, NOW - 1e12),
        below,
        NOW,
        PARAMS,
    )
    assert (next_state == state).all()
    np.testing.assert_array_equal(next_below, below)


def test_nan_value_keeps_state_and_below_since() -> None:
    memory = Memory(STATE_ACTIVE, since=NOW - 1e9)
    memory.below = NOW - GRACE * 2
    assert memory.sweep(np.nan, NOW) == STATE_ACTIVE
    assert memory.below == NOW - GRACE * 2


def test_non_finite_below_since_restarts_the_grace_period() -> None:
    for bad in (np.inf, -np.inf, np.nan):
        memory = Memory(STATE_ARCHIVED, since=NOW - 1e9)
        memory.below = bad
        assert memory.sweep(0.0, NOW) == STATE_ARCHIVED
        assert memory.below == NOW


# -- count_transitions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_count_transitions_equals_naive(n: int) -> None:
    rng = np.random.default_rng(n)
    old = rng.integers(0, N_STATES + 2, n).astype(np.uint8)
    new = rng.integers(0, N_STATES + 2, n).astype(np.uint8)
    counts = count_transitions(old, new)
    assert counts.shape == (N_STATES, N_STATES)
    assert counts.dtype == np.int64
    np.testing.assert_array_equal(counts, naive.count_transitions(old, new))
    assert counts.sum() == ((old < N_STATES) & (new < N_STATES)).sum()


def test_count_transitions_of_a_sweep() -> None:
    old = np.array([1, 1, 2, 2, 3, 1], dtype=np.uint8)
    new = np.array([1, 2, 1, 5, 3, 2], dtype=np.uint8)
    counts = count_transitions(old, new)
    assert counts[STATE_ACTIVE, STATE_ARCHIVED] == 2
    assert counts[STATE_ARCHIVED, STATE_ACTIVE] == 1
    assert counts[STATE_ARCHIVED, STATE_EVICTED] == 1
    assert counts[STATE_ACTIVE, STATE_ACTIVE] == 1
    assert counts[STATE_CONSOLIDATED, STATE_CONSOLIDATED] == 1
    assert counts.sum() == 6


# -- arguments --------------------------------------------------------------------------------------------------


def test_out_arrays_are_filled_and_returned() -> None:
    columns = lifecycle_columns(np.random.default_rng(2), 3000)
    fresh = propose_transitions(**columns, now=NOW, params=PARAMS)
    out = (np.zeros(3000, dtype=np.uint8), np.zeros(3000))
    returned = propose_transitions(**columns, now=NOW, params=PARAMS, out=out)
    assert returned is out
    np.testing.assert_array_equal(out[0], fresh[0])
    np.testing.assert_array_equal(out[1], fresh[1])


def test_read_only_columns_are_accepted() -> None:
    columns = lifecycle_columns(np.random.default_rng(4), 100)
    for column in columns.values():
        column.flags.writeable = False
    _assert_equal_to_naive(columns, NOW)


def _call(**changes: Any) -> Any:
    arguments: dict[str, Any] = {**lifecycle_columns(np.random.default_rng(0), 10), "now": NOW, "params": PARAMS}
    arguments.update(changes)
    return propose_transitions(**arguments)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"value": np.zeros(10)}, r"value must be float32.*np\.ascontiguousarray"),
        ({"state": np.zeros(10, dtype=np.int8)}, "state must be uint8"),
        ({"kind": np.zeros(9, dtype=np.uint8)}, "kind has 9 entries"),
        ({"state_since": np.zeros(10, dtype=np.float32)}, "state_since must be float64"),
        ({"below_since": np.zeros(20)[::2]}, "below_since must be C-contiguous"),
        ({"now": float("inf")}, "now must be finite"),
        ({"params": PARAMS[:, :5].copy()}, "shape"),
        ({"params": np.asfortranarray(PARAMS)}, "params must be C-contiguous"),
        ({"out": (np.zeros(10, dtype=np.uint8),)}, "out must be a"),
        ({"out": (np.zeros(10, dtype=np.uint8), np.zeros(10, dtype=np.float32))}, "out.1. must be float64"),
    ],
)
def test_bad_arguments_raise_value_error_saying_what_to_pass(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _call(**changes)


def test_out_overlapping_the_inputs_is_refused() -> None:
    columns = lifecycle_columns(np.random.default_rng(0), 10)
    with pytest.raises(ValueError, match="out overlaps state"):
        propose_transitions(**columns, now=NOW, params=PARAMS, out=(columns["state"], np.zeros(10)))


def test_count_transitions_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="new_state has 3 entries"):
        count_transitions(np.zeros(2, dtype=np.uint8), np.zeros(3, dtype=np.uint8))
    with pytest.raises(ValueError, match="old_state must be uint8"):
        count_transitions(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.uint8))
