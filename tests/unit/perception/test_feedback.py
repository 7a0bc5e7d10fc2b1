"""perception.feedback's pure functions: outcome weights, confidence, strategy demotion, retrieval records."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memevo.sidecar.perception.feedback import (
    FAILURE_LOSS,
    SUCCESS_GAIN,
    apply_outcome,
    is_finite_reward,
    outcome_weights,
    pack_retrieval,
    probability_better,
    strategy_changes,
    unpack_retrieval,
)
from memevo.v1 import memory_pb2, memory_service_pb2

SUCCESS = memory_service_pb2.OUTCOME_SUCCESS
FAILURE = memory_service_pb2.OUTCOME_FAILURE
PARTIAL = memory_service_pb2.OUTCOME_PARTIAL
LEVEL = 0.95
MC_TOLERANCE = 0.015
"""20,000 posterior draws: the estimate's standard error is at most 0.0036."""


def strategy(memory_id: int, successes: float = 0.0, failures: float = 0.0, demoted_by: int = 0) -> memory_pb2.Memory:
    return memory_pb2.Memory(
        id=memory_id,
        kind=memory_pb2.MEMORY_KIND_STRATEGY,
        successes=successes,
        failures=failures,
        demoted_by=demoted_by,
        confidence=0.6,
    )


def exact_probability_better(a: memory_pb2.Memory, b: memory_pb2.Memory) -> float:
    """P(p_a > p_b) for Beta(1 + s, 1 + f) posteriors with integer counts, in closed form (Evan Miller)."""
    alpha_a, beta_a = 1 + int(a.successes), 1 + int(a.failures)
    alpha_b, beta_b = 1 + int(b.successes), 1 + int(b.failures)

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    total = 0.0
    for i in range(alpha_a):
        total += math.exp(
            log_beta(alpha_b + i, beta_b + beta_a)
            - math.log(beta_a + i)
            - log_beta(1 + i, beta_a)
            - log_beta(alpha_b, beta_b)
        )
    return total


# ---- outcome_weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "reward", "expected"),
    [
        (SUCCESS, None, (1.0, 0.0)),
        (FAILURE, None, (0.0, 1.0)),
        (PARTIAL, None, (0.5, 0.5)),
        (SUCCESS, 0.25, (0.25, 0.0)),
        (SUCCESS, -0.75, (0.0, 0.75)),
        (FAILURE, 1.0, (1.0, 0.0)),  # the reward, when given, decides
        (PARTIAL, -1.0, (0.0, 1.0)),
        (SUCCESS, 0.0, (0.0, 0.0)),
    ],
)
def test_outcome_weights(outcome: int, reward: float | None, expected: tuple[float, float]) -> None:
    assert outcome_weights(outcome, reward) == expected


@given(st.floats(min_value=-1.0, max_value=1.0))
def test_reward_weights_are_one_sided_and_bounded(reward: float) -> None:
    success, failure = outcome_weights(SUCCESS, reward)
    assert 0.0 <= success <= 1.0
    assert 0.0 <= failure <= 1.0
    assert success == 0.0 or failure == 0.0
    assert success - failure == pytest.approx(reward)


@pytest.mark.parametrize(
    ("reward", "ok"),
    [(0.0, True), (1.0, True), (-1.0, True), (1.0000001, False), (-2.0, False), (math.nan, False), (math.inf, False)],
)
def test_is_finite_reward(reward: float, ok: bool) -> None:
    assert is_finite_reward(reward) is ok


# ---- apply_outcome ------------------------------------------------------------------------------


def test_success_moves_confidence_toward_one() -> None:
    record = memory_pb2.Memory(confidence=0.6)
    apply_outcome(record, 1.0, 0.0)
    assert record.confidence == pytest.approx(0.6 + 0.4 * SUCCESS_GAIN)
    assert (record.successes, record.failures) == (1.0, 0.0)


def test_failure_removes_a_share_of_confidence() -> None:
    record = memory_pb2.Memory(confidence=0.6)
    apply_outcome(record, 0.0, 1.0)
    assert record.confidence == pytest.approx(0.6 * (1 - FAILURE_LOSS))
    assert (record.successes, record.failures) == (0.0, 1.0)


def test_no_weight_changes_nothing() -> None:
    record = memory_pb2.Memory(confidence=0.42, successes=2.0, failures=1.0)
    apply_outcome(record, 0.0, 0.0)
    assert record.confidence == pytest.approx(0.42)
    assert (record.successes, record.failures) == (2.0, 1.0)


def test_records_accumulate() -> None:
    record = memory_pb2.Memory(confidence=0.5)
    for success, failure in [(1.0, 0.0), (0.5, 0.5), (0.0, 1.0), (0.25, 0.0)]:
        apply_outcome(record, success, failure)
    assert record.successes == pytest.approx(1.75)
    assert record.failures == pytest.approx(1.5)


@given(st.floats(min_value=0.35, max_value=1.0))
def test_failure_lowers_more_than_success_raises_at_trusted_confidence(confidence: float) -> None:
    # Every starting confidence the default policy gives (0.6 to 0.9) is in this range.
    up, down = memory_pb2.Memory(confidence=confidence), memory_pb2.Memory(confidence=confidence)
    apply_outcome(up, 1.0, 0.0)
    apply_outcome(down, 0.0, 1.0)
    assert confidence - down.confidence > up.confidence - confidence - 1e-6


@given(
    st.floats(min_value=0.0, max_value=1.0),
    st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)), max_size=30),
)
def test_confidence_stays_in_unit_interval(confidence: float, outcomes: list[tuple[float, float]]) -> None:
    record = memory_pb2.Memory(confidence=confidence)
    for success, failure in outcomes:
        apply_outcome(record, success, failure)
        assert 0.0 <= record.confidence <= 1.0


@given(st.integers(min_value=1, max_value=50))
def test_repeated_failure_never_reaches_zero_and_success_never_exceeds_one(times: int) -> None:
    low, high = memory_pb2.Memory(confidence=0.6), memory_pb2.Memory(confidence=0.6)
    for _ in range(times):
        apply_outcome(low, 0.0, 1.0)
        apply_outcome(high, 1.0, 0.0)
    assert 0.0 < low.confidence < 0.6
    assert 0.6 < high.confidence <= 1.0


# ---- probability_better -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((0, 0), (0, 0)),
        ((3, 0), (0, 3)),
        ((2, 2), (0, 2)),
        ((5, 1), (3, 3)),
        ((10, 2), (8, 4)),
        ((0, 4), (4, 0)),
        ((1, 0), (0, 0)),
    ],
)
def test_probability_better_matches_the_closed_form(a: tuple[int, int], b: tuple[int, int]) -> None:
    first, second = strategy(2, *a), strategy(1, *b)
    assert probability_better(first, second) == pytest.approx(exact_probability_better(first, second), abs=MC_TOLERANCE)


def test_probability_better_is_deterministic_and_complementary() -> None:
    a, b = strategy(7, 4, 1), strategy(3, 2, 3)
    assert probability_better(a, b) == probability_better(a, b)
    assert probability_better(a, b) + probability_better(b, a) == pytest.approx(1.0, abs=2 * MC_TOLERANCE)


def test_probability_better_grows_with_successes() -> None:
    baseline = strategy(1, 2, 2)
    values = [probability_better(strategy(2, s, 2), baseline) for s in range(0, 8, 2)]
    assert values == sorted(values)
    assert values[0] < 0.5 < values[-1]


# ---- strategy_changes ---------------------------------------------------------------------------


def test_no_strategies_or_one_strategy_changes_nothing() -> None:
    assert strategy_changes([], LEVEL) == []
    assert strategy_changes([strategy(1, 0, 10)], LEVEL) == []


def test_reliably_better_newer_strategy_demotes_the_older() -> None:
    older, newer = strategy(1, 0, 3), strategy(2, 3, 0)
    changes = strategy_changes([newer, older], LEVEL)  # input order does not matter
    assert len(changes) == 1
    assert changes[0].record is older
    assert changes[0].demoted_by == newer.id
    assert changes[0].probability >= LEVEL


def test_weak_evidence_demotes_nothing() -> None:
    assert strategy_changes([strategy(1, 0, 1), strategy(2, 1, 0)], LEVEL) == []


def test_an_older_strategy_never_demotes_a_newer_one() -> None:
    older, newer = strategy(1, 10, 0), strategy(2, 0, 10)
    assert strategy_changes([older, newer], LEVEL) == []


def test_an_existing_demotion_is_not_repeated() -> None:
    older, newer = strategy(1, 0, 3, demoted_by=2), strategy(2, 3, 0)
    assert strategy_changes([older, newer], LEVEL) == []


def test_demotion_is_restored_only_when_the_evidence_has_turned() -> None:
    newer = strategy(2, 4, 4)
    ambiguous = strategy(1, 4, 4, demoted_by=2)
    assert strategy_changes([ambiguous, newer], LEVEL) == [], "no flapping on a tie"
    turned = strategy(1, 16, 4, demoted_by=2)
    changes = strategy_changes([turned, strategy(2, 4, 16)], LEVEL)
    assert len(changes) == 1
    assert changes[0].record is turned
    assert changes[0].demoted_by == 0
    assert changes[0].probability < 1 - LEVEL


def test_demoter_gone_restores() -> None:
    orphan = strategy(1, 0, 5, demoted_by=9)
    changes = strategy_changes([orphan, strategy(2, 0, 0)], LEVEL)
    assert [(c.record.id, c.demoted_by) for c in changes] == [(1, 0)]


def test_the_newest_strategy_that_beats_an_older_one_demotes_it() -> None:
    oldest, middle, newest = strategy(1, 0, 6), strategy(2, 6, 0), strategy(3, 6, 0)
    changes = {c.record.id: c.demoted_by for c in strategy_changes([oldest, middle, newest], LEVEL)}
    assert changes == {1: 3}


def test_demotion_moves_to_a_newer_better_strategy() -> None:
    oldest = strategy(1, 0, 6, demoted_by=2)
    changes = strategy_changes([oldest, strategy(2, 6, 0), strategy(3, 6, 0)], LEVEL)
    assert [(c.record.id, c.demoted_by) for c in changes] == [(1, 3)]


def test_level_decides() -> None:
    older, newer = strategy(1, 0, 2), strategy(2, 2, 0)
    probability = probability_better(newer, older)
    assert 0.9 < probability < 0.99
    assert strategy_changes([older, newer], 0.99) == []
    assert [c.demoted_by for c in strategy_changes([older, newer], 0.9)] == [2]


# ---- retrieval records --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "recorded_at_s", "turn"),
    [
        ([], 0.0, None),
        ([1], 1_700_000_000.123456, 0),
        ([5, 3, 9, 1], 1_796_029_999.5, 42),
        ([2**64 - 1, 1, 2**63], -1.5, 2**62),
        (list(range(1, 1001)), 1e9, None),
    ],
)
def test_retrieval_round_trip(ids: list[int], recorded_at_s: float, turn: int | None) -> None:
    raw = pack_retrieval(iter(ids), recorded_at_s, turn)
    assert unpack_retrieval(raw) == (recorded_at_s, turn, ids)


def test_retrieval_record_size() -> None:
    assert len(pack_retrieval([1, 2, 3], 0.0, None)) == 16 + 3 * 8


@given(
    st.lists(st.integers(min_value=1, max_value=2**64 - 1), max_size=200),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none() | st.integers(min_value=0, max_value=2**63 - 1),
)
def test_retrieval_round_trip_any(ids: list[int], recorded_at_s: float, turn: int | None) -> None:
    assert unpack_retrieval(pack_retrieval(ids, recorded_at_s, turn)) == (recorded_at_s, turn, ids)
