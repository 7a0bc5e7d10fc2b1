"""Self-tuning experiments against a real sidecar: traffic shifts, an arm is promoted, then rolled back.

The operator bounds "beta" in the policy; the experiment's control arm is the
policy in force and its candidate differs only in beta (inside the bound). The
simulated agent succeeds 90 % of the time with the candidate's retrievals and
30 % with the control's. Thompson allocation must move traffic to the
candidate, the posterior rule must promote it (after the replay check), and
once the promoted policy's outcomes turn bad (a planted regression: every
outcome after the promotion fails) the previous policy must come back. Both
decisions must be change-log events carrying their evidence.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import start_sidecar

from memevo.client import (
    AdaptiveSettings,
    AllocationMode,
    ChangeEventType,
    Experiment,
    ExperimentArm,
    ExperimentDecisionKind,
    ExperimentPhase,
    InvalidArgumentError,
    MemoryClient,
    Outcome,
    ParameterBound,
    Policy,
)

pytestmark = pytest.mark.integration

DIMENSION = 8
SUCCESS = {"control": 0.3, "candidate": 0.9}


def _settings(**overrides: object) -> AdaptiveSettings:
    base = AdaptiveSettings(
        allocation=AllocationMode.THOMPSON,
        floor_share=0.1,
        snapshot_outcomes=10,
        promote_probability=0.95,
        min_outcomes=15,
        min_promotion_interval_s=0.001,
        tunable_parameters=("beta",),
        # The toy store's replay objective says little; the check must run (replay_retrievals > 0), not decide.
        replay_tolerance=2.0,
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def _wait_for_phase(client: MemoryClient, phase: ExperimentPhase, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        stats = client.stats().experiment
        if stats is not None and stats.phase == phase:
            return
        time.sleep(0.05)
    raise AssertionError(f"experiment never reached {phase}: {client.stats().experiment}")


def _arms(client: MemoryClient, rng: np.random.Generator) -> tuple[Policy, Policy, tuple[ExperimentArm, ...]]:
    """A few memories, the operator's bound on beta, and the arms: (bounded policy, policy in force, arms)."""
    for i in range(8):
        client.remember(f"note {i}", vector=rng.standard_normal(DIMENSION).astype(np.float32), namespace="t")
    bounded = dataclasses.replace(
        client.get_policy(),
        name="operator",
        tuning_bounds=(ParameterBound(parameter="beta", min=0.3, max=0.9),),
    )
    client.update_policy(bounded)
    current = client.get_policy()
    candidate = dataclasses.replace(
        current, name="candidate", kinds=tuple(dataclasses.replace(k, beta=0.85) for k in current.kinds)
    )
    arms = (
        ExperimentArm(name="control", policy=dataclasses.replace(current, name="control")),
        ExperimentArm(name="candidate", policy=candidate),
    )
    return bounded, current, arms


def test_adaptive_experiment_shifts_promotes_and_rolls_back(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
    rng = np.random.default_rng(11)
    try:
        with MemoryClient(sidecar.unix_target) as client:
            bounded, current, arms = _arms(client, rng)
            candidate = arms[1].policy

            # Limited adaptivity: a parameter the experiment does not name may not move, nor one outside its bound.
            sneaky = dataclasses.replace(
                candidate, kinds=tuple(dataclasses.replace(k, alpha=0.5) for k in candidate.kinds)
            )
            outside = dataclasses.replace(
                current, kinds=tuple(dataclasses.replace(k, beta=0.95) for k in current.kinds)
            )
            for policy in (sneaky, outside):
                bad = Experiment(
                    name="bad", arms=(arms[0], ExperimentArm(name="x", policy=policy)), adaptive=_settings()
                )
                with pytest.raises(InvalidArgumentError) as caught:
                    client.set_experiment(bad)
                assert any(f == "experiment.arms[1].policy" for f, _ in caught.value.field_violations)

            client.set_experiment(Experiment(name="self-tuning", arms=arms, adaptive=_settings()))
            shares: list[float] = []
            for _ in range(400):
                result = client.recall(vector=rng.standard_normal(DIMENSION).astype(np.float32), k=3, namespace="t")
                # The review promotes on a background thread: a retrieval made once it published was ranked by
                # the promoted policy, and the planted regression says such outcomes fail. Checked after the
                # recall, so a retrieval made before the promotion keeps its arm's success rate.
                stats = client.stats().experiment
                assert stats is not None
                promoted_already = stats.phase != ExperimentPhase.RUNNING
                ok = not promoted_already and (rng.random() < SUCCESS[result.arm] if result.arm in SUCCESS else False)
                client.report_outcome(result.retrieval_id, Outcome.SUCCESS if ok else Outcome.FAILURE)
                stats = client.stats().experiment
                assert stats is not None
                if stats.phase == ExperimentPhase.RUNNING and not promoted_already:
                    shares.append(stats.arm("candidate").share)
                else:
                    break
            _wait_for_phase(client, ExperimentPhase.WATCHING)
            # Traffic moved: the candidate's Thompson share rose well above an even split before the promotion.
            assert shares[0] == pytest.approx(0.5)
            assert max(shares) > 0.75

            stats = client.stats().experiment
            assert stats is not None
            assert stats.allocation == AllocationMode.THOMPSON
            assert stats.promoted_arm == "candidate"
            assert stats.snapshot >= 2
            promoted = stats.decisions[-1]
            assert promoted.kind == ExperimentDecisionKind.PROMOTED
            assert promoted.arm == "candidate"
            assert promoted.control_arm == "control"
            assert promoted.probability_better >= 0.95
            assert promoted.arm_stats is not None
            assert promoted.control_stats is not None
            assert promoted.arm_stats.outcome_count >= 15
            assert promoted.control_stats.outcome_count >= 15
            assert promoted.replay_retrievals > 0
            assert promoted.previous_policy.name == "operator"
            policy = client.get_policy()
            assert policy.name == "candidate"
            assert {k.beta for k in policy.kinds} == {0.85}
            assert policy.tuning_bounds == bounded.tuning_bounds  # the operator's bounds survive a promotion

            # The planted regression: every outcome under the promoted policy now fails.
            for _ in range(200):
                result = client.recall(vector=rng.standard_normal(DIMENSION).astype(np.float32), k=3, namespace="t")
                if result.arm == "":
                    break
                assert result.arm == "candidate"
                client.report_outcome(result.retrieval_id, Outcome.FAILURE)
                stats = client.stats().experiment
                assert stats is not None
                if stats.phase == ExperimentPhase.ROLLED_BACK:
                    break
            _wait_for_phase(client, ExperimentPhase.ROLLED_BACK)
            stats = client.stats().experiment
            assert stats is not None
            rolled = stats.decisions[-1]
            assert rolled.kind == ExperimentDecisionKind.ROLLED_BACK
            assert rolled.promoted_stats is not None
            assert rolled.promoted_stats.outcome_count >= 15
            assert rolled.promoted_stats.success_rate == 0.0
            assert rolled.previous_policy.name == "candidate"
            restored = client.get_policy()
            assert restored.name == "operator"
            assert {k.beta for k in restored.kinds} == {k.beta for k in current.kinds}
            assert client.recall(vector=np.ones(DIMENSION, dtype=np.float32), namespace="t").arm == ""

            # Both decisions are in the change log with their evidence.
            events = []
            with client.watch(0, types=[ChangeEventType.EXPERIMENT_DECISION], timeout_s=5.0) as stream:
                for event in stream:
                    events.append(event)
                    if len(events) == 2:
                        stream.cancel()
            kinds = [e.experiment_decision.kind for e in events if e.experiment_decision is not None]
            assert kinds == [ExperimentDecisionKind.PROMOTED, ExperimentDecisionKind.ROLLED_BACK]
            assert events[0].detail == "candidate"
        # Decisions and phase survive a restart.
        assert sidecar.stop() == 0
        sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
        with MemoryClient(sidecar.unix_target) as client:
            after = client.stats().experiment
            assert after is not None
            assert after.phase == ExperimentPhase.ROLLED_BACK
            assert [d.kind for d in after.decisions] == [
                ExperimentDecisionKind.PROMOTED,
                ExperimentDecisionKind.ROLLED_BACK,
            ]
    finally:
        sidecar.stop()


def test_update_policy_with_the_replaced_policy_undoes_an_automatic_promotion(data_dir: Path) -> None:
    """The operator's undo: UpdatePolicy with the PROMOTED decision's previous_policy, then Recall uses it."""
    sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
    rng = np.random.default_rng(12)
    try:
        with MemoryClient(sidecar.unix_target) as client:
            _, current, arms = _arms(client, rng)
            client.set_experiment(Experiment(name="undo", arms=arms, adaptive=_settings()))
            for _ in range(400):
                result = client.recall(vector=rng.standard_normal(DIMENSION).astype(np.float32), k=3, namespace="t")
                ok = rng.random() < SUCCESS.get(result.arm, 0.0)
                client.report_outcome(result.retrieval_id, Outcome.SUCCESS if ok else Outcome.FAILURE)
                stats = client.stats().experiment
                assert stats is not None
                if stats.phase != ExperimentPhase.RUNNING:
                    break
            _wait_for_phase(client, ExperimentPhase.WATCHING)
            stats = client.stats().experiment
            assert stats is not None
            promoted = stats.decisions[-1]
            assert promoted.kind == ExperimentDecisionKind.PROMOTED
            assert client.get_policy().name == "candidate"
            query = rng.standard_normal(DIMENSION).astype(np.float32)
            assert client.recall(vector=query, k=3, namespace="t").arm == "candidate"

            client.update_policy(promoted.previous_policy)
            # From the next Recall on, the policy in force ranks: no arm, nothing counted as the promoted policy's.
            assert client.recall(vector=query, k=3, namespace="t").arm == ""
            _wait_for_phase(client, ExperimentPhase.ROLLED_BACK)
            stats = client.stats().experiment
            assert stats is not None
            ended = stats.decisions[-1]
            assert ended.kind == ExperimentDecisionKind.ROLLED_BACK
            assert "replaced by UpdatePolicy ('operator')" in ended.reason
            restored = client.get_policy()
            assert restored.name == "operator"
            assert {k.beta for k in restored.kinds} == {k.beta for k in current.kinds}
            kinds = []
            with client.watch(0, types=[ChangeEventType.EXPERIMENT_DECISION], timeout_s=5.0) as stream:
                for event in stream:
                    assert event.experiment_decision is not None
                    kinds.append(event.experiment_decision.kind)
                    if len(kinds) == 2:
                        stream.cancel()
            assert kinds == [ExperimentDecisionKind.PROMOTED, ExperimentDecisionKind.ROLLED_BACK]
    finally:
        sidecar.stop()
