"""Online experiments against a real sidecar: arms rank retrievals, outcomes aggregate per arm, promotion.

Two arms split retrievals by a hash of the retrieval id. Arm "trusting" scores
with the default accuracy weights; arm "blind" with zero confidence and
feedback weights (accuracy 0), so the scores a retrieval returns show which
policy ranked it. The agent here succeeds with the trusting arm's retrievals
and mostly fails with the blind arm's: GetStats must show the trusting arm
ahead with non-overlapping Wilson intervals, keep the counts over a restart,
and promoting it must install its policy and end the experiment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import stub

from memevo.client import (
    ChangeEventType,
    Experiment,
    ExperimentArm,
    ExperimentDecisionKind,
    InvalidArgumentError,
    KindPolicy,
    MemoryClient,
    NotFoundError,
    Outcome,
    Policy,
)
from memevo.v1 import memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

RETRIEVALS = 60
DIMENSION = 8


def _arms() -> Experiment:
    trusting = Policy(name="trusting", kinds=(KindPolicy(confidence_weight=0.8, feedback_weight=0.2),))
    blind = Policy(name="blind", kinds=(KindPolicy(confidence_weight=0.0, feedback_weight=0.0),))
    return Experiment(
        name="trust-test",
        arms=(ExperimentArm(name="trusting", policy=trusting), ExperimentArm(name="blind", policy=blind)),
    )


def _run_traffic(client: MemoryClient) -> dict[str, list[float]]:
    """RETRIEVALS recalls; success for the trusting arm, 1 in 4 for the blind one. Returns accuracies per arm."""
    rng = np.random.default_rng(3)
    for i in range(8):
        client.remember(f"note {i}", vector=rng.standard_normal(DIMENSION).astype(np.float32), namespace="exp")
    accuracies: dict[str, list[float]] = {"trusting": [], "blind": []}
    blind_seen = 0
    for _ in range(RETRIEVALS):
        result = client.recall(vector=rng.standard_normal(DIMENSION).astype(np.float32), k=3, namespace="exp")
        assert result.arm in accuracies
        accuracies[result.arm] += [m.memory.scores.accuracy for m in result]
        if result.arm == "trusting":
            outcome = Outcome.SUCCESS
        else:
            blind_seen += 1
            outcome = Outcome.SUCCESS if blind_seen % 4 == 0 else Outcome.FAILURE
        client.report_outcome(result.retrieval_id, outcome)
    return accuracies


def test_the_arm_whose_retrievals_succeed_leads_in_stats(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
    try:
        with MemoryClient(sidecar.unix_target) as client:
            assert client.stats().experiment is None
            running = client.set_experiment(_arms())
            assert [a.name for a in running.arms] == ["trusting", "blind"]
            accuracies = _run_traffic(client)
            # Each arm's policy scored its own retrievals: the blind arm sees accuracy 0.
            assert accuracies["trusting"]
            assert accuracies["blind"]
            assert min(accuracies["trusting"]) > 0.0
            assert max(accuracies["blind"]) == 0.0
            stats = client.stats().experiment
            assert stats is not None
            trusting, blind = stats.arm("trusting"), stats.arm("blind")
            assert trusting.retrieval_count + blind.retrieval_count == RETRIEVALS
            assert trusting.outcome_count == trusting.retrieval_count
            assert blind.outcome_count == blind.retrieval_count
            # The hash splits evenly: neither arm is starved.
            assert min(trusting.retrieval_count, blind.retrieval_count) >= RETRIEVALS // 4
            assert trusting.success_rate == 1.0
            assert blind.success_rate == pytest.approx(blind.successes / blind.outcome_count)
            assert blind.success_rate < 0.35
            assert trusting.success_low > blind.success_high  # Wilson intervals apart
            assert trusting.success_low <= trusting.success_rate <= trusting.success_high
            assert blind.success_low <= blind.success_rate <= blind.success_high
        assert sidecar.stop() == 0
        sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
        with MemoryClient(sidecar.unix_target) as client:
            after = client.stats().experiment
            assert after is not None
            # Outcome counts are durable; they survive the restart.
            assert after.arm("trusting").successes == trusting.successes
            assert after.arm("blind").failures == blind.failures
            promoted = client.promote_arm("trusting")
            assert promoted.policy.name == "trusting"
            assert promoted.final_stats.arm("trusting").successes == trusting.successes
            assert client.get_policy().name == "trusting"
            assert client.stats().experiment is None
            assert client.recall(vector=np.ones(DIMENSION, dtype=np.float32), namespace="exp").arm == ""
            with pytest.raises(NotFoundError):
                client.promote_arm("trusting")
            # The promotion by hand is on the change log as a decision, with the evidence it was made on.
            with client.watch(0, types=[ChangeEventType.EXPERIMENT_DECISION], timeout_s=5.0) as stream:
                decision = next(iter(stream))
                stream.cancel()
            assert decision.detail == "trusting"
            assert decision.experiment_decision is not None
            assert decision.experiment_decision.kind == ExperimentDecisionKind.PROMOTED
            assert decision.experiment_decision.reason == "promoted by PromoteArm"
            assert decision.experiment_decision.arm_stats is not None
            assert decision.experiment_decision.arm_stats.successes == trusting.successes
            assert decision.experiment_decision.previous_policy.name != "trusting"
    finally:
        sidecar.stop()


@pytest.mark.parametrize(
    ("arms", "field"),
    [
        ([("a", 1.0)], "experiment.arms"),
        ([("a", 1.0), ("a", 1.0)], "experiment.arms[1].name"),
        ([("a", 1.0), ("", 1.0)], "experiment.arms[1].name"),
        ([("a", -1.0), ("b", 1.0)], "experiment.arms[0].weight"),
        ([("a", float("nan")), ("b", 1.0)], "experiment.arms[0].weight"),
    ],
)
def test_a_bad_experiment_is_rejected_naming_the_field(
    shared_sidecar: Sidecar, arms: list[tuple[str, float]], field: str
) -> None:
    from helpers import status_details

    service = stub(shared_sidecar.unix_target)
    experiment = policy_pb2.Experiment(name="bad")
    for name, weight in arms:
        experiment.arms.add(name=name, weight=weight, policy=policy_pb2.Policy(name=name or "x"))
    with pytest.raises(Exception) as caught:  # noqa: PT011 - a grpc.RpcError, inspected below
        service.SetExperiment(memory_service_pb2.SetExperimentRequest(experiment=experiment))
    error = caught.value
    assert error.code().name == "INVALID_ARGUMENT"  # type: ignore[attr-defined]
    fields, _ = status_details(error)  # type: ignore[arg-type]
    assert field in fields
    assert not service.GetStats(memory_service_pb2.GetStatsRequest()).HasField("experiment")


def test_an_arm_with_an_invalid_policy_names_the_policy_field(shared_sidecar: Sidecar) -> None:
    with MemoryClient(shared_sidecar.unix_target) as client:
        bad = Policy(name="bad", kinds=(KindPolicy(archive_below=0.5, reactivate_above=0.1),))
        experiment = Experiment(arms=(ExperimentArm(name="ok", policy=Policy()), ExperimentArm(name="bad", policy=bad)))
        with pytest.raises(InvalidArgumentError) as caught:
            client.set_experiment(experiment)
        assert any(f.startswith("experiment.arms[1].policy.kinds[0]") for f, _ in caught.value.field_violations)
        assert client.stats().experiment is None
