"""Automatic decisions of an in-process sidecar: held by the replay check, promoted, rolled back, on the log.

The counts are set directly and the review is run synchronously (the sidecar
runs it on a background thread after every ``snapshot_outcomes`` outcomes);
the replay check is replaced by fixed objectives so that each branch is taken
for certain. The test over the wire (tests/integration/test_self_tuning.py)
runs the real replay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import GovernanceConfig, SidecarConfig
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.experiments.arms import Experiments, _Counts
from memevo.v1 import events_pb2, memory_service_pb2, policy_pb2

KIND = policy_pb2.ExperimentDecisionKind


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    config = SidecarConfig(
        data_dir=tmp_path / "data",
        dimension=8,
        embedder=EmbedderConfig(kind="none"),
        governance=GovernanceConfig(sweep_interval_s=0, checkpoint_interval_s=0),
    )
    opened = Engine(config)
    policy = policy_pb2.Policy()
    policy.CopyFrom(opened.policy)
    policy.name = "operator"
    policy.tuning_bounds.add(parameter="beta", min=0.3, max=0.9)
    opened.update_policy(policy)
    yield opened
    opened.close()


def start(engine: Engine) -> None:
    candidate = policy_pb2.Policy()
    candidate.CopyFrom(engine.policy)
    for entry in candidate.kinds:
        entry.beta = 0.85
    experiment = policy_pb2.Experiment(name="unit")
    experiment.arms.add(name="control", policy=engine.policy)
    experiment.arms.add(name="candidate", policy=candidate)
    experiment.adaptive.CopyFrom(
        policy_pb2.AdaptiveSettings(
            allocation=policy_pb2.ALLOCATION_MODE_THOMPSON,
            promote_probability=0.95,
            min_outcomes=20,
            snapshot_outcomes=10,
            min_promotion_interval_s=1e-9,
            tunable_parameters=["beta"],
        )
    )
    engine.experiments.set(experiment)


def give(experiments: Experiments, **counts: tuple[int, float]) -> None:
    running = experiments._running
    assert running is not None
    for name, (outcomes, successes) in counts.items():
        running.counts[name] = _Counts(outcomes, outcomes, successes, outcomes - successes)


def decisions_on_the_log(engine: Engine) -> list[events_pb2.ChangeEvent]:
    stop = threading.Event()
    found = []
    last = engine.store.last_sequence
    for event in engine.events(0, stop):
        if event.type == events_pb2.CHANGE_EVENT_TYPE_EXPERIMENT_DECISION:
            found.append(event)
        if event.sequence >= last:
            stop.set()
    return found


def test_held_then_promoted_then_rolled_back(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    start(engine)
    experiments = engine.experiments
    give(experiments, control=(40, 12.0), candidate=(40, 36.0))

    # The posterior calls for the candidate, the replay says it is worse: held, nothing changes.
    monkeypatch.setattr(experiments, "_replay_check", lambda candidate, current: (0.40, 0.50, 12))
    experiments.review()
    stats = experiments.snapshot()
    assert stats is not None
    assert [d.kind for d in stats.decisions] == [KIND.EXPERIMENT_DECISION_KIND_HELD]
    assert "replay objective 0.4000" in stats.decisions[0].reason
    assert stats.phase == policy_pb2.EXPERIMENT_PHASE_RUNNING
    assert engine.policy.name == "operator"
    # Not asked again before min_outcomes more outcomes.
    monkeypatch.setattr(experiments, "_replay_check", lambda candidate, current: (0.60, 0.50, 12))
    experiments.review()
    assert len(experiments.snapshot().decisions) == 1  # type: ignore[union-attr]

    # Enough new outcomes and a replay no worse: promoted, with its evidence.
    give(experiments, control=(60, 18.0), candidate=(60, 54.0))
    experiments.review()
    stats = experiments.snapshot()
    assert stats is not None
    promoted = stats.decisions[-1]
    assert promoted.kind == KIND.EXPERIMENT_DECISION_KIND_PROMOTED
    assert promoted.probability_better > 0.95
    assert promoted.arm_stats.outcome_count == 60
    assert promoted.control_stats.success_rate == pytest.approx(0.3)
    assert promoted.replay_candidate_objective == pytest.approx(0.60)
    assert promoted.previous_policy.name == "operator"
    assert stats.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING
    assert engine.policy.name == "candidate"
    assert {k.beta for k in engine.policy.kinds} == {0.85}
    assert [b.parameter for b in engine.policy.tuning_bounds] == ["beta"]
    assert experiments.assign("any").name == "candidate"  # type: ignore[union-attr]

    # The promoted policy does worse than the control's interval: rolled back to the operator's policy.
    running = experiments._running
    assert running is not None
    running.adaptive.promoted_counts = _Counts(25, 25, 2.0, 23.0)
    experiments.review()
    stats = experiments.snapshot()
    assert stats is not None
    rolled = stats.decisions[-1]
    assert rolled.kind == KIND.EXPERIMENT_DECISION_KIND_ROLLED_BACK
    assert rolled.promoted_stats.outcome_count == 25
    assert rolled.previous_policy.name == "candidate"
    assert stats.phase == policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK
    assert engine.policy.name == "operator"
    assert experiments.assign("any") is None

    logged = decisions_on_the_log(engine)
    assert [e.experiment_decision.kind for e in logged] == [
        KIND.EXPERIMENT_DECISION_KIND_HELD,
        KIND.EXPERIMENT_DECISION_KIND_PROMOTED,
        KIND.EXPERIMENT_DECISION_KIND_ROLLED_BACK,
    ]
    assert [e.detail for e in logged] == ["candidate"] * 3


def test_a_failing_replay_check_holds_the_promotion(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    start(engine)
    experiments = engine.experiments
    give(experiments, control=(40, 12.0), candidate=(40, 36.0))

    def broken(candidate: policy_pb2.Policy, current: policy_pb2.Policy) -> tuple[float, float, int]:
        raise OSError("disk full")

    monkeypatch.setattr(experiments, "_replay_check", broken)
    experiments.review()
    stats = experiments.snapshot()
    assert stats is not None
    assert stats.decisions[-1].kind == KIND.EXPERIMENT_DECISION_KIND_HELD
    assert "OSError: disk full" in stats.decisions[-1].reason
    assert engine.policy.name == "operator"


def test_the_policy_changed_since_the_experiment_started_holds_the_promotion(engine: Engine) -> None:
    start(engine)
    changed = policy_pb2.Policy()
    changed.CopyFrom(engine.policy)
    del changed.tuning_bounds[:]
    engine.update_policy(changed)
    give(engine.experiments, control=(40, 12.0), candidate=(40, 36.0))
    engine.experiments.review()
    stats = engine.experiments.snapshot()
    assert stats is not None
    assert stats.decisions[-1].kind == KIND.EXPERIMENT_DECISION_KIND_HELD
    assert "no bound" in stats.decisions[-1].reason


def test_without_captured_traffic_the_replay_check_allows(engine: Engine) -> None:
    start(engine)
    give(engine.experiments, control=(40, 12.0), candidate=(40, 36.0))
    engine.experiments.review()
    stats = engine.experiments.snapshot()
    assert stats is not None
    promoted = stats.decisions[-1]
    assert promoted.kind == KIND.EXPERIMENT_DECISION_KIND_PROMOTED
    assert promoted.replay_retrievals == 0


def test_an_arm_drawn_before_a_promotion_is_not_counted_as_the_promoted_policy(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promotion publishing while a Recall draws its arm: the draw and its generation must belong together."""
    from memevo.sidecar.domain import RecallQuery
    from memevo.sidecar.experiments import arms
    from memevo.sidecar.experiments.adaptive import pick as draw

    start(engine)
    experiments = engine.experiments
    give(experiments, control=(40, 12.0), candidate=(40, 36.0))
    monkeypatch.setattr(experiments, "_replay_check", lambda candidate, current: (0.60, 0.50, 12))

    def racing_pick(point: float, shares: list[float]) -> int:
        # The review's promotion runs on another thread while the running split is drawn, as it can in the sidecar.
        promotion = threading.Thread(target=experiments.review)
        promotion.start()
        promotion.join(timeout=1.0)
        return draw(point, shares)

    monkeypatch.setattr(arms, "pick", racing_pick)
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    with arms.observed_retrieval(engine, RecallQuery(vector=vector)) as observed:
        observed.returned_ids = []
    monkeypatch.setattr(arms, "pick", draw)
    deadline = time.monotonic() + 10
    while experiments.snapshot().phase != policy_pb2.EXPERIMENT_PHASE_WATCHING:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the promotion never published"
        time.sleep(0.01)

    assert engine.retrieval(observed.retrieval_id) == []  # written, as ReportOutcome first checks
    engine.report_outcome(
        [], outcome=memory_service_pb2.OUTCOME_SUCCESS, reward=None, retrieval_id=observed.retrieval_id, note=""
    )
    running = experiments._running
    assert running is not None
    assert running.adaptive.promoted_counts.outcomes == 0


def _promote(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> policy_pb2.ExperimentDecision:
    """The candidate promoted automatically (replay allowing), the experiment watching it."""
    start(engine)
    give(engine.experiments, control=(40, 12.0), candidate=(40, 36.0))
    monkeypatch.setattr(engine.experiments, "_replay_check", lambda candidate, current: (0.60, 0.50, 12))
    engine.experiments.review()
    stats = engine.experiments.snapshot()
    assert stats is not None
    assert stats.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING
    assert engine.policy.name == "candidate"
    return stats.decisions[-1]


def _ranked_value(engine: Engine, memory_id: int) -> tuple[float, str]:
    """The value a Recall's ranking gives ``memory_id`` now, and the arm the retrieval was labelled with."""
    from memevo.sidecar.domain import RecallQuery
    from memevo.sidecar.experiments import arms

    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    with arms.observed_retrieval(engine, RecallQuery(vector=vector)) as observed:
        value = float(engine.score_rows(np.array([memory_id])).value[0])
        observed.returned_ids = []
    return value, observed.arm


def _wait_for_phase(engine: Engine, phase: int) -> policy_pb2.ExperimentStats:
    deadline = time.monotonic() + 10
    while True:
        stats = engine.experiments.snapshot()
        assert stats is not None
        if stats.phase == phase:
            return stats
        assert time.monotonic() < deadline, f"phase {stats.phase}, not {phase}"
        time.sleep(0.01)


def test_update_policy_with_the_replaced_policy_undoes_a_promotion(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the decision's previous_policy promises: the operator's UpdatePolicy with it takes effect at once."""
    from memevo.sidecar.domain import NewMemory

    memory_id = engine.remember([NewMemory(content="x", vector=np.ones(8, dtype=np.float32) / np.sqrt(8))])[0].memory.id
    operator_value = float(engine.score_rows(np.array([memory_id])).value[0])
    promoted = _promote(engine, monkeypatch)
    promoted_value, arm = _ranked_value(engine, memory_id)
    assert arm == "candidate"
    assert promoted_value != pytest.approx(operator_value)  # beta moves the value: the check below can tell

    engine.update_policy(promoted.previous_policy)
    value, arm = _ranked_value(engine, memory_id)
    assert value == pytest.approx(operator_value)  # ranked by the policy in force, not the promoted arm's
    assert arm == ""  # and not counted as the promoted policy's

    stats = _wait_for_phase(engine, policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK)
    ended = stats.decisions[-1]
    assert ended.kind == KIND.EXPERIMENT_DECISION_KIND_ROLLED_BACK
    assert "replaced by UpdatePolicy ('operator')" in ended.reason
    assert engine.policy.name == "operator"
    assert [e.experiment_decision.kind for e in decisions_on_the_log(engine)] == [
        KIND.EXPERIMENT_DECISION_KIND_PROMOTED,
        KIND.EXPERIMENT_DECISION_KIND_ROLLED_BACK,
    ]


def test_a_watch_never_overwrites_the_operators_policy(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy the operator set while the promotion was watched stays, even when the promoted one did badly."""
    _promote(engine, monkeypatch)
    third = policy_pb2.Policy()
    third.CopyFrom(engine.policy)
    third.name = "third"
    for entry in third.kinds:
        entry.beta = 0.5
    engine.update_policy(third)
    running = engine.experiments._running
    assert running is not None
    running.adaptive.promoted_counts = _Counts(25, 25, 2.0, 23.0)  # the rollback rule would fire
    engine.experiments.review()
    stats = engine.experiments.snapshot()
    assert stats is not None
    assert stats.phase == policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK
    assert "replaced by UpdatePolicy ('third')" in stats.decisions[-1].reason
    assert engine.policy.name == "third"


def test_a_watch_survives_a_restart_while_its_policy_is_in_force(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _promote(engine, monkeypatch)
    config = engine.config
    engine.close()
    reopened = Engine(config)
    try:
        arm = reopened.experiments.assign("any")
        assert arm is not None
        assert arm.name == "candidate"
        reopened.experiments.review()
        stats = reopened.experiments.snapshot()
        assert stats is not None
        assert stats.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING
        assert reopened.policy.name == "candidate"
    finally:
        reopened.close()


def test_the_interval_between_promotions_holds_across_experiments_and_a_restart(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """min_promotion_interval_s counts from the last automatic promotion, whichever experiment made it."""
    _promote(engine, monkeypatch)
    config = engine.config
    engine.close()
    engine = Engine(config)
    try:
        engine.experiments.set(policy_pb2.Experiment())  # the operator ends the watched experiment
        candidate = policy_pb2.Policy()
        candidate.CopyFrom(engine.policy)
        for entry in candidate.kinds:
            entry.beta = 0.4
        experiment = policy_pb2.Experiment(name="next")
        experiment.arms.add(name="control", policy=engine.policy)
        experiment.arms.add(name="lower", policy=candidate)
        experiment.adaptive.CopyFrom(
            policy_pb2.AdaptiveSettings(
                promote_probability=0.95,
                min_outcomes=20,
                min_promotion_interval_s=3600.0,
                tunable_parameters=["beta"],
            )
        )
        engine.experiments.set(experiment)
        give(engine.experiments, control=(40, 12.0), lower=(40, 36.0))
        monkeypatch.setattr(engine.experiments, "_replay_check", lambda candidate, current: (0.60, 0.50, 12))
        engine.experiments.review()
        stats = engine.experiments.snapshot()
        assert stats is not None
        assert list(stats.decisions) == []  # the posterior calls for it, the interval does not allow it yet
        assert stats.phase == policy_pb2.EXPERIMENT_PHASE_RUNNING
        assert engine.policy.name == "candidate"
    finally:
        engine.close()
