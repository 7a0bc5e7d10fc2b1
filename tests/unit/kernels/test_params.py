"""The policy matrix: defaults per kind and clock, validation messages, and how the default policy plays out."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from memevo.kernels import params as kp
from memevo.kernels.lifecycle import STATE_ACTIVE, STATE_ARCHIVED, STATE_EVICTED, propose_transitions
from memevo.kernels.value import compute_scores

DAY = 86400.0
TIME_COLUMNS = [kp.HALF_LIFE, kp.EVICT_GRACE, kp.MIN_TIME_IN_STATE, kp.CONFIDENCE_DECAY_HALF_LIFE]

# -- defaults ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_defaults_are_valid_and_complete(clock: kp.Clock) -> None:
    params = kp.default_params(clock)
    assert params.shape == (kp.N_KINDS, kp.N_PARAMS)
    assert params.dtype == np.float64
    assert params.flags.c_contiguous
    assert np.isfinite(params).all()
    assert kp.validate_params(params) == []


def test_named_columns_cover_the_matrix_once() -> None:
    assert [getattr(kp, name.upper()) for name in kp.PARAM_NAMES] == list(range(kp.N_PARAMS))
    assert len(kp.PARAM_NAMES) == kp.N_PARAMS
    assert len(kp.KIND_NAMES) == kp.N_KINDS


def test_default_thresholds_and_times() -> None:
    wall, turns = kp.default_params("wall"), kp.default_params("turns")
    for params in (wall, turns):
        assert (params[:, kp.ARCHIVE_BELOW] == 0.2).all()
        assert (params[:, kp.REACTIVATE_ABOVE] == 0.3).all()
        assert (params[:, kp.EVICT_BELOW] == 0.05).all()
    assert (wall[:, kp.EVICT_GRACE] == 30 * DAY).all()
    assert (turns[:, kp.EVICT_GRACE] == 2000).all()
    assert (wall[:, kp.MIN_TIME_IN_STATE] == 3600).all()
    assert (turns[:, kp.MIN_TIME_IN_STATE] == 20).all()
    assert wall[kp.KIND_FACT, kp.HALF_LIFE] == 7 * DAY
    assert turns[kp.KIND_FACT, kp.HALF_LIFE] == 200


def test_the_clocks_differ_only_in_time_settings() -> None:
    wall, turns = kp.default_params("wall"), kp.default_params("turns")
    other = [column for column in range(kp.N_PARAMS) if column not in TIME_COLUMNS]
    np.testing.assert_array_equal(wall[:, other], turns[:, other])
    assert (wall[:, TIME_COLUMNS] > turns[:, TIME_COLUMNS]).all()


@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_kinds_differ_where_they_should(clock: kp.Clock) -> None:
    params = kp.default_params(clock)
    half_life = params[:, kp.HALF_LIFE]
    assert half_life[kp.KIND_EPISODE] < half_life[kp.KIND_FACT] <= half_life[kp.KIND_PREFERENCE]
    assert params[kp.KIND_STRATEGY, kp.W_FEEDBACK] > params[kp.KIND_FACT, kp.W_FEEDBACK]
    assert params[kp.KIND_STRATEGY, kp.W_FEEDBACK] > params[kp.KIND_STRATEGY, kp.W_CONFIDENCE]
    np.testing.assert_array_equal(params[kp.KIND_DEFAULT], params[kp.KIND_FACT])


def test_default_params_returns_a_fresh_array() -> None:
    first = kp.default_params()
    first[:] = -1
    assert kp.validate_params(kp.default_params()) == []


def test_unknown_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="clock must be 'wall' or 'turns'"):
        kp.default_params("seconds")  # type: ignore[arg-type]


def test_fastmath_keeps_nan_and_inf_semantics() -> None:
    assert "nnan" not in kp.FASTMATH
    assert "ninf" not in kp.FASTMATH


# -- validation ---------------------------------------------------------------------------------------------------


def _broken(kind: int, column: int, value: float) -> np.ndarray:
    params = kp.default_params()
    params[kind, column] = value
    return params


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (_broken(kp.KIND_FACT, kp.ALPHA, np.nan), "kind 1 (fact): alpha must be finite, not nan"),
        (_broken(kp.KIND_EPISODE, kp.HALF_LIFE, np.inf), "kind 3 (episode): half_life must be finite, not inf"),
        (_broken(kp.KIND_STRATEGY, kp.W_FEEDBACK, -0.1), "kind 4 (strategy): w_feedback must be >= 0, not -0.1"),
        (_broken(kp.KIND_DEFAULT, kp.ACCESS_WEIGHT, -1.0), "kind 0 (default): access_weight must be >= 0"),
        (_broken(kp.KIND_FACT, kp.EVICT_GRACE, -5.0), "evict_grace must be >= 0"),
        (_broken(kp.KIND_FACT, kp.MIN_TIME_IN_STATE, -1.0), "min_time_in_state must be >= 0"),
        (_broken(kp.KIND_FACT, kp.HALF_LIFE, 0.0), "half_life must be > 0, not 0.0"),
        (_broken(kp.KIND_FACT, kp.CONFIDENCE_DECAY_HALF_LIFE, -3.0), "confidence_decay_half_life must be > 0"),
        (_broken(kp.KIND_FACT, kp.CONFIDENCE_FLOOR, 1.5), r"confidence_floor must be in \[0, 1\]"),
        (_broken(kp.KIND_PREFERENCE, kp.EVICT_BELOW, 0.25), "evict_below <= archive_below <= reactivate_above"),
        (_broken(kp.KIND_PREFERENCE, kp.REACTIVATE_ABOVE, 0.1), "not 0.05 / 0.2 / 0.1"),
        (np.zeros((6, 15)), r"shape \(n_kinds >= 1, 16\), not \(6, 15\)"),
        (np.zeros((0, 16)), r"not \(0, 16\)"),
        (np.zeros(16), r"not \(16,\)"),
        (kp.default_params().astype(np.float32), "must be float64, not float32"),
        ([[0.0] * 16] * 6, "must be a numpy float64 array"),
    ],
)
def test_validate_params_names_the_problem(params: object, message: str) -> None:
    problems = kp.validate_params(params)
    assert problems, message
    assert any(message in problem or re.search(message, problem) for problem in problems), problems


def test_validate_params_reports_every_problem_and_handles_extra_rows() -> None:
    params = np.vstack([kp.default_params(), kp.default_params()[:1]])
    assert kp.validate_params(params) == []  # a 7th kind code is fine
    params[6, kp.BETA] = -1
    params[2, kp.HALF_LIFE] = np.nan
    problems = kp.validate_params(params)
    assert len(problems) == 2
    assert problems[0].startswith("kind 2 (preference)")
    assert problems[1].startswith("kind 6:")


def test_negative_zero_and_zero_weights_are_allowed() -> None:
    params = kp.default_params()
    params[:, [kp.ALPHA, kp.GAMMA, kp.DELTA, kp.EVICT_GRACE, kp.MIN_TIME_IN_STATE]] = 0.0
    params[0, kp.BETA] = -0.0
    assert kp.validate_params(params) == []


# -- the default policy over simulated time (DESIGN §3, issue 3 "must show") ---------------------------------------


@dataclass
class Scenario:
    """Columns of one memory swept under the default policy, and what an access schedule does to them."""

    kind: int
    confidence: float = 0.6
    importance: int = 0
    content_bytes: int = 200
    uniqueness: float = 0.5
    successes: float = 0.0
    failures: float = 0.0
    access_every: float = 0.0
    """Clock units between accesses; 0 = never used after creation."""


def _simulate(scenarios: list[Scenario], clock: kp.Clock, horizon: float, step: float) -> list[list[tuple[float, int]]]:
    """Sweep every ``step`` until ``horizon``; the moves (time, new state) of each scenario."""
    params = kp.default_params(clock)
    n = len(scenarios)

    def column(name: str, dtype: type[np.generic]) -> np.ndarray:
        return np.array([getattr(s, name) for s in scenarios], dtype=dtype)

    kind = column("kind", np.uint8)
    confidence = column("confidence", np.float32)
    successes = column("successes", np.float32)
    failures = column("failures", np.float32)
    importance = column("importance", np.uint8)
    content_bytes = column("content_bytes", np.uint32)
    uniqueness = column("uniqueness", np.float32)
    access_every = column("access_every", np.float64)
    stored_bytes = content_bytes + np.uint32(1536)  # plus a 384-d float32 vector
    created = np.zeros(n)
    last_access = np.full(n, np.nan)
    access_count = np.zeros(n, dtype=np.uint32)
    state = np.full(n, STATE_ACTIVE, dtype=np.uint8)
    state_since = np.zeros(n)
    below_since = np.full(n, np.nan)
    moves: list[list[tuple[float, int]]] = [[] for _ in range(n)]

    now = 0.0
    while now <= horizon:
        last_use = np.where(np.isnan(last_access), created, last_access)
        used = (access_every > 0) & (now - last_use >= access_every)
        last_access[used] = now
        access_count[used] += 1
        scores = compute_scores(
            confidence,
            successes,
            failures,
            np.zeros(n, dtype=np.float32),
            last_access,
            created,
            access_count,
            importance,
            content_bytes,
            uniqueness,
            stored_bytes,
            kind,
            now,
            kp.DEFAULT_COST_BUDGET_BYTES,
            params,
        )
        if now == 0.0:
            # A new memory starts ACTIVE and well inside it, whatever its kind.
            assert (scores.value > params[kind, kp.REACTIVATE_ABOVE]).all(), scores.value
        next_state, below_since = propose_transitions(scores.value, state, kind, state_since, below_since, now, params)
        for i in np.flatnonzero(next_state != state):
            moves[i].append((now, int(next_state[i])))
        state_since[next_state != state] = now
        state = next_state
        now += step
    return moves


PLAIN_KINDS = [kp.KIND_DEFAULT, kp.KIND_FACT, kp.KIND_PREFERENCE, kp.KIND_EPISODE, kp.KIND_ABSTRACTION]
# (horizon, sweep interval): long enough for the slowest kind (preferences) to be evicted.
CLOCKS = {"wall": (450 * DAY, DAY / 2), "turns": (16_000.0, 10.0)}


@pytest.mark.parametrize("clock", ["wall", "turns"])
def test_default_policy_archives_then_evicts_unused_memories_and_keeps_used_ones_active(clock: kp.Clock) -> None:
    """Issue 3's "must show", on the kernels alone: every memory starts ACTIVE; unused ones drift to ARCHIVED and,
    after the grace period, EVICTED; used ones never move; important ones and untried strategies stay ARCHIVED."""
    horizon, step = CLOCKS[clock]
    idle = [Scenario(kind) for kind in (kp.KIND_DEFAULT, kp.KIND_FACT, kp.KIND_PREFERENCE, kp.KIND_EPISODE)]
    # Short and redundant: evicted even under the abstraction's larger utility weight.
    idle_low_utility = [Scenario(kind, content_bytes=60, uniqueness=0.2) for kind in PLAIN_KINDS]
    # Used about once per half-life of its kind, successfully.
    half_lives = kp.default_params(clock)[:, kp.HALF_LIFE]
    used = [Scenario(kind, access_every=half_lives[kind], successes=1.0) for kind in range(kp.N_KINDS)]
    # Archived but kept: important and unique; an untried strategy; an ordinary abstraction.
    important = [
        Scenario(kp.KIND_FACT, importance=9, uniqueness=0.9),
        Scenario(kp.KIND_STRATEGY),
        Scenario(kp.KIND_STRATEGY, content_bytes=60, uniqueness=0.2),
        Scenario(kp.KIND_ABSTRACTION),
    ]
    failing_strategy = [Scenario(kp.KIND_STRATEGY, failures=5.0)]
    groups = [idle, idle_low_utility, used, important, failing_strategy]
    moves = _simulate([s for group in groups for s in group], clock, horizon, step)
    by_group = []
    for group in groups:
        by_group.append(moves[: len(group)])
        moves = moves[len(group) :]
    idle_moves, low_moves, used_moves, important_moves, failing_moves = by_group

    grace = kp.default_params(clock)[0, kp.EVICT_GRACE]
    for kind_moves in idle_moves + low_moves + failing_moves:
        states = [new for _, new in kind_moves]
        assert states == [STATE_ARCHIVED, STATE_EVICTED], kind_moves
        archived_at, evicted_at = kind_moves[0][0], kind_moves[1][0]
        assert evicted_at - archived_at >= grace
    for kind_moves in used_moves:
        assert kind_moves == [], kind_moves
    for kind_moves in important_moves:
        assert [new for _, new in kind_moves] == [STATE_ARCHIVED], kind_moves
