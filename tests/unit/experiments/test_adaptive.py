"""Self-tuning rules without a server: posteriors, Thompson shares, assignment, promotion, rollback, bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memevo.sidecar.experiments.adaptive import (
    AdaptiveRules,
    ArmCounts,
    adaptivity_problems,
    assignment_point,
    pick,
    probability_best,
    probability_better,
    promoted_policy,
    promotion_call,
    replay_allows,
    required_probability,
    rollback_call,
    snapshot_due,
    thompson_shares,
    tuning_bound_problems,
)
from memevo.sidecar.experiments.arms import arm_position
from memevo.sidecar.policy import default_policy
from memevo.v1 import policy_pb2


def monte_carlo_best(counts: list[ArmCounts], draws: int = 400_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    samples = np.stack([rng.beta(1 + c.successes, 1 + c.failures, draws) for c in counts])
    return np.bincount(samples.argmax(axis=0), minlength=len(counts)) / draws


@pytest.mark.parametrize(
    "counts",
    [
        [ArmCounts(50, 50, 100), ArmCounts(60, 40, 100)],
        [ArmCounts(3, 1, 4), ArmCounts(0, 0, 0), ArmCounts(10, 12, 22)],
        [ArmCounts(400, 600, 1000), ArmCounts(420, 580, 1000), ArmCounts(390, 610, 1000), ArmCounts(2, 2, 4)],
        [ArmCounts(5000.5, 4999.5, 10000), ArmCounts(5100, 4900, 10000)],
    ],
)
def test_probability_best_matches_sampling(counts: list[ArmCounts]) -> None:
    got = probability_best(counts)
    assert sum(got) == pytest.approx(1.0)
    assert got == pytest.approx(monte_carlo_best(counts).tolist(), abs=5e-3)


def test_probability_better_matches_the_normal_approximation_at_large_counts() -> None:
    arm, control = ArmCounts(50_500, 49_500, 100_000), ArmCounts(50_000, 50_000, 100_000)
    z = 0.005 / math.sqrt(2 * 0.25 / 100_000)
    assert probability_better(arm, control) == pytest.approx(0.5 * (1 + math.erf(z / math.sqrt(2))), abs=2e-3)
    assert probability_better(control, control) == pytest.approx(0.5, abs=1e-9)
    assert probability_better(ArmCounts(0, 0, 0), ArmCounts(0, 0, 0)) == pytest.approx(0.5, abs=1e-9)


def test_thompson_shares_keep_the_floor_and_sum_to_one() -> None:
    counts = [ArmCounts(900, 100, 1000), ArmCounts(100, 900, 1000), ArmCounts(120, 880, 1000)]
    shares = thompson_shares(counts, 0.05)
    assert sum(shares) == pytest.approx(1.0)
    assert min(shares) == pytest.approx(0.05)
    assert shares[0] == pytest.approx(0.9)
    # Without outcomes, an equal split.
    assert thompson_shares([ArmCounts(0, 0, 0)] * 4, 0.05) == pytest.approx([0.25] * 4)


def test_assignment_is_a_function_of_name_snapshot_and_id() -> None:
    assert assignment_point("e", 3, "r1") == assignment_point("e", 3, "r1")
    assert assignment_point("e", 3, "r1") != assignment_point("e", 4, "r1")
    points = np.array([assignment_point("e", 2, f"r{i}") for i in range(20_000)])
    assert points.min() >= 0.0
    assert points.max() < 1.0
    assert abs(points.mean() - 0.5) < 0.01
    shares = [0.1, 0.6, 0.3]
    picked = np.bincount([pick(p, shares) for p in points], minlength=3) / points.size
    assert picked == pytest.approx(shares, abs=0.015)


def test_snapshot_zero_assigns_like_the_fixed_split() -> None:
    for i in range(200):
        rid = f"r{i}"
        assert pick(assignment_point("exp", 0, rid), [1.0, 3.0]) == arm_position("exp", rid, [1.0, 4.0])


def test_snapshots_are_due_every_so_many_outcomes() -> None:
    assert not snapshot_due(19, 0, 20)
    assert snapshot_due(20, 0, 20)
    assert not snapshot_due(39, 1, 20)
    assert snapshot_due(45, 1, 20)


RULES = AdaptiveRules(thompson=True, promote_probability=0.99, min_outcomes=100, min_promotion_interval_s=60.0)


def test_promotion_needs_probability_outcomes_and_interval() -> None:
    control, better = ArmCounts(50, 50, 100), ArmCounts(75, 25, 100)
    call = promotion_call([control, better], RULES, now_s=1000.0, last_promotion_s=None)
    assert call is not None
    assert call.arm == 1
    assert call.probability_better > 0.99
    assert "0.99" in call.reason
    # Too soon after the last promotion.
    assert promotion_call([control, better], RULES, now_s=1000.0, last_promotion_s=950.0) is None
    assert promotion_call([control, better], RULES, now_s=1000.0, last_promotion_s=900.0) is not None
    # Too few outcomes on either side.
    assert promotion_call([ArmCounts(25, 25, 50), better], RULES, now_s=0.0, last_promotion_s=None) is None
    assert promotion_call([control, ArmCounts(60, 10, 70)], RULES, now_s=0.0, last_promotion_s=None) is None
    # Not sure enough.
    assert promotion_call([control, ArmCounts(56, 44, 100)], RULES, now_s=0.0, last_promotion_s=None) is None
    # Off.
    off = AdaptiveRules(thompson=True)
    assert promotion_call([control, better], off, now_s=0.0, last_promotion_s=None) is None


def test_promotion_picks_the_arm_most_likely_to_beat_the_control() -> None:
    counts = [ArmCounts(80, 20, 100), ArmCounts(50, 50, 100), ArmCounts(95, 5, 100)]
    rules = AdaptiveRules(promote_probability=0.99, min_outcomes=100, control=1)
    call = promotion_call(counts, rules, now_s=0.0, last_promotion_s=None)
    assert call is not None
    assert call.arm == 2
    # The control itself is never promoted, however good it looks.
    rules = AdaptiveRules(promote_probability=0.99, min_outcomes=100, control=2)
    assert promotion_call(counts, rules, now_s=0.0, last_promotion_s=None) is None


def test_rollback_below_the_controls_interval() -> None:
    rules = AdaptiveRules(min_outcomes=100)
    assert rollback_call(ArmCounts(30, 70, 100), 0.40, rules) is not None
    assert rollback_call(ArmCounts(45, 55, 100), 0.40, rules) is None
    assert rollback_call(ArmCounts(10, 89, 99), 0.40, rules) is None  # not enough outcomes yet


def test_replay_check() -> None:
    assert replay_allows(0.6, 0.5, 0.0)
    assert replay_allows(0.5, 0.5, 0.0)
    assert not replay_allows(0.49, 0.5, 0.0)
    assert replay_allows(0.49, 0.5, 0.02)
    assert replay_allows(math.nan, 0.5, 0.0)


def bounded_policy() -> policy_pb2.Policy:
    policy = default_policy()
    policy.tuning_bounds.add(parameter="beta", min=0.3, max=0.9)
    policy.tuning_bounds.add(parameter="soft_conflict_similarity", min=0.8, max=0.95)
    return policy


def test_tuning_bounds_are_validated() -> None:
    assert tuning_bound_problems(bounded_policy()) == []
    policy = bounded_policy()
    policy.tuning_bounds.add(parameter="beta", min=0.0, max=1.0)
    policy.tuning_bounds.add(parameter="name", min=0.0, max=1.0)
    policy.tuning_bounds.add(parameter="alpha", min=1.0, max=0.0)
    fields = [f for f, _ in tuning_bound_problems(policy)]
    assert fields == [
        "policy.tuning_bounds[2].parameter",
        "policy.tuning_bounds[3].parameter",
        "policy.tuning_bounds[4]",
    ]


def test_only_named_parameters_may_move_and_only_within_bounds() -> None:
    current = bounded_policy()
    arm = policy_pb2.Policy()
    arm.CopyFrom(current)
    arm.name = "arm"
    del arm.tuning_bounds[:]
    for entry in arm.kinds:
        entry.beta = 0.85
    assert adaptivity_problems(arm, current, ["beta"], "f") == []
    # Named, but outside the operator's bound.
    arm.kinds[0].beta = 0.95
    assert "outside the bound" in adaptivity_problems(arm, current, ["beta"], "f")[0][1]
    arm.kinds[0].beta = 0.85
    # A parameter the experiment does not name moved.
    arm.kinds[1].alpha += 0.1
    assert "does not name" in adaptivity_problems(arm, current, ["beta"], "f")[0][1]
    # A named parameter without an operator bound.
    assert "no bound" in adaptivity_problems(arm, current, ["beta", "alpha"], "f")[0][1]


def test_a_promotion_moves_only_the_named_parameters() -> None:
    current = bounded_policy()
    current.name = "operator"
    arm = policy_pb2.Policy()
    arm.CopyFrom(current)
    arm.name = "arm"
    del arm.tuning_bounds[:]
    arm.ClearField("consolidation")  # clients may leave it out: a promotion keeps the policy in force's
    for entry in arm.kinds:
        entry.beta = 0.85
    assert adaptivity_problems(arm, current, ["beta"], "f") == []
    promoted = promoted_policy(arm, current, ["beta"])
    assert promoted.name == "arm"
    assert {entry.beta for entry in promoted.kinds} == {0.85}
    assert promoted.consolidation == current.consolidation
    assert list(promoted.tuning_bounds) == list(current.tuning_bounds)
    assert [entry.alpha for entry in promoted.kinds] == [entry.alpha for entry in current.kinds]


def test_several_candidates_each_need_more_than_the_stated_probability() -> None:
    assert required_probability(0.99, 2) == pytest.approx(0.99)
    assert required_probability(0.99, 3) == pytest.approx(0.995)
    assert required_probability(0.99, 4) == pytest.approx(1 - 0.01 / 3)
    control, candidate = ArmCounts(100, 100, 200), ArmCounts(125, 75, 200)
    p = probability_better(candidate, control)
    assert 0.99 < p < 0.995
    rules = AdaptiveRules(promote_probability=0.99, min_outcomes=100)
    assert promotion_call([control, candidate], rules, now_s=0.0, last_promotion_s=None) is not None
    weak = ArmCounts(90, 110, 200)
    assert promotion_call([control, candidate, weak], rules, now_s=0.0, last_promotion_s=None) is None
