"""Experiment arms without a server: Wilson intervals, hash assignment, validation."""

from __future__ import annotations

import math

import pytest

from memevo.sidecar.experiments.arms import arm_position, validate_experiment, wilson_interval
from memevo.sidecar.policy import default_policy
from memevo.v1 import policy_pb2


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (5, 10, 0.2366, 0.7634),  # the textbook values for 5 of 10 at 95%
        (10, 10, 0.7225, 1.0),
        (0, 10, 0.0, 0.2775),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_interval_matches_the_formula(successes: float, trials: float, low: float, high: float) -> None:
    got = wilson_interval(successes, trials)
    assert got == pytest.approx((low, high), abs=1e-4)
    assert got[0] <= successes / trials <= got[1]


def test_wilson_interval_without_trials_is_everything() -> None:
    assert wilson_interval(0.0, 0.0) == (0.0, 1.0)


def test_assignment_is_stable_and_follows_the_weights() -> None:
    cumulative = [1.0, 4.0]  # arm 0 weight 1, arm 1 weight 3
    ids = [f"{i:012x}{i * 7919:012x}" for i in range(8000)]
    arms = [arm_position("exp", rid, cumulative) for rid in ids]
    assert arms == [arm_position("exp", rid, cumulative) for rid in ids]
    share = arms.count(1) / len(arms)
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / len(arms))
    # Another experiment name reshuffles the assignment.
    other = [arm_position("other", rid, cumulative) for rid in ids]
    assert other != arms


def _experiment(*arms: tuple[str, float]) -> policy_pb2.Experiment:
    experiment = policy_pb2.Experiment(name="e")
    for name, weight in arms:
        experiment.arms.add(name=name, weight=weight, policy=default_policy())
    return experiment


def test_validation_accepts_a_good_experiment_and_an_empty_one() -> None:
    assert validate_experiment(_experiment(("a", 0.0), ("b", 2.0))) == []
    assert validate_experiment(policy_pb2.Experiment()) == []


def test_validation_names_every_bad_field() -> None:
    too_many = _experiment(*((f"a{i}", 1.0) for i in range(17)))
    assert [f for f, _ in validate_experiment(too_many)] == ["experiment.arms"]
    missing_policy = policy_pb2.Experiment(
        arms=[policy_pb2.ExperimentArm(name="a"), policy_pb2.ExperimentArm(name="b")]
    )
    assert [f for f, _ in validate_experiment(missing_policy)] == [
        "experiment.arms[0].policy",
        "experiment.arms[1].policy",
    ]
    long_name = _experiment(("a" * 65, 1.0), ("b", math.inf))
    assert [f for f, _ in validate_experiment(long_name)] == ["experiment.arms[0].name", "experiment.arms[1].weight"]
