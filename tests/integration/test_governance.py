"""Governance over gRPC: the lifecycle moves with the agent's turns, Govern and GetStats report it.

The sidecars here run in agent-turn mode with short half-lives, so "simulated
time" is just a turn counter the test advances; scheduled sweeps are off and
every sweep is an explicit Govern.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sidecar, start_sidecar
from helpers import counts, pack, stub, vectors, watch_events

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
EVICTED = memory_pb2.MEMORY_STATE_EVICTED
MIN_TURNS = 3


def turn_policy(service: Any) -> policy_pb2.Policy:
    """The current policy switched to agent turns, with decay and grace measured in a few turns."""
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.time_mode = policy_pb2.TIME_MODE_AGENT_TURNS
    for kind in policy.kinds:
        kind.decay_half_life_turns = 4.0
        kind.confidence_decay_half_life_turns = 6.0
        kind.min_time_in_state_turns = float(MIN_TURNS)
        kind.evict_grace_turns = 8.0
    return policy


@pytest.fixture
def governed(tmp_path: Path) -> Iterator[Sidecar]:
    sidecar = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", "--checkpoint-interval-s", "0.2")
    service = stub(sidecar.unix_target)
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=turn_policy(service)))
    yield sidecar
    sidecar.stop()


def remember(service: Any, text: str, vector: bytes, turn: int) -> int:
    request = memory_service_pb2.RememberRequest(
        memory=memory_pb2.MemoryInput(content=text, vector=vector, kind=memory_pb2.MEMORY_KIND_FACT), turn=turn
    )
    return int(service.Remember(request).result.memory.id)


def state_of(service: Any, memory_id: int) -> int:
    found = service.Get(memory_service_pb2.GetRequest(ids=[memory_id]))
    return int(found.memories[0].state) if found.memories else EVICTED


def govern(service: Any, turn: int, **fields: Any) -> memory_service_pb2.SweepStats:
    return service.Govern(memory_service_pb2.GovernRequest(turn=turn, **fields)).sweep


def use(service: Any, vector: bytes, turn: int) -> None:
    found = service.Recall(memory_service_pb2.RecallRequest(query_vector=vector, k=1, turn=turn))
    service.ReportOutcome(
        memory_service_pb2.ReportOutcomeRequest(
            retrieval_id=found.retrieval_id, outcome=memory_service_pb2.OUTCOME_SUCCESS, turn=turn
        )
    )


def test_unused_memory_drifts_to_eviction_while_a_used_one_stays_active(governed: Sidecar) -> None:
    service = stub(governed.unix_target)
    idle_vector, used_vector = (pack(v) for v in vectors(2, seed=3))
    idle = remember(service, "the old build server was at 10.0.0.7", idle_vector, turn=1)
    used = remember(service, "deploys go through the release branch", used_vector, turn=1)
    first = govern(service, 1)
    assert first.evaluated_count == 2
    assert state_of(service, idle) == ACTIVE, "a new memory starts ACTIVE"
    seen = [ACTIVE]
    for turn in range(2, 60):
        use(service, used_vector, turn)
        govern(service, turn)
        state = state_of(service, idle)
        if state != seen[-1]:
            seen.append(state)
        if state == EVICTED:
            break
    assert seen == [ACTIVE, ARCHIVED, EVICTED], seen
    assert state_of(service, used) == ACTIVE
    events = [e for e in watch_events(service, counts(service)[0], after_sequence=0) if e.memory_id == idle]
    lifecycle = [(e.type, e.from_state, e.to_state) for e in events if e.type != events_pb2.CHANGE_EVENT_TYPE_CREATED]
    assert lifecycle == [
        (events_pb2.CHANGE_EVENT_TYPE_STATE_CHANGED, ACTIVE, ARCHIVED),
        (events_pb2.CHANGE_EVENT_TYPE_EVICTED, ARCHIVED, EVICTED),
    ], "one change event per transition"
    assert service.Recall(memory_service_pb2.RecallRequest(query_vector=idle_vector, k=5)).memories[0].memory.id == used


def test_an_idle_agent_does_not_decay_in_turn_mode(governed: Sidecar) -> None:
    service = stub(governed.unix_target)
    memory_id = remember(service, "the VPN needs the hardware token", pack(vectors(1, seed=4)[0]), turn=5)
    before = service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0].scores.value
    for _ in range(5):
        sweep = govern(service, 5)  # the agent is asleep: its turn does not move
        assert not sweep.transitions
    after = service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0].scores.value
    assert after == pytest.approx(before, abs=1e-6)
    assert state_of(service, memory_id) == ACTIVE


def test_reactivation_waits_for_the_minimum_time_in_state(governed: Sidecar) -> None:
    service = stub(governed.unix_target)
    vector = pack(vectors(1, seed=5)[0])
    memory_id = remember(service, "the staging cluster is called kestrel", vector, turn=1)
    turn = 1
    while state_of(service, memory_id) != ARCHIVED:
        turn += 1
        assert turn < 40, "never archived"
        govern(service, turn)
    archived_at = turn
    # Used again at once: its value jumps above the reactivation threshold, but it has to wait.
    changes: list[int] = []
    previous = ARCHIVED
    for turn in range(archived_at + 1, archived_at + 2 * MIN_TURNS + 2):
        service.Recall(memory_service_pb2.RecallRequest(query_vector=vector, k=1, turn=turn, include_archived=True))
        govern(service, turn)
        state = state_of(service, memory_id)
        if state != previous:
            changes.append(turn)
            previous = state
    assert changes, "it never came back although it is used every turn"
    assert changes[0] - archived_at >= MIN_TURNS
    assert len(changes) == 1, "at most one transition per minimum time in state"
    assert previous == ACTIVE


def test_dry_run_changes_nothing_and_stats_report_sweeps(governed: Sidecar) -> None:
    service = stub(governed.unix_target)
    memory_id = remember(service, "the office closes at 18:00", pack(vectors(1, seed=6)[0]), turn=1)
    before = counts(service)
    sweep = govern(service, 30, dry_run=True)
    assert any(t.to_state == ARCHIVED for t in sweep.transitions), "the dry run reports what it would do"
    assert counts(service) == before
    assert state_of(service, memory_id) == ACTIVE
    stats = service.GetStats(memory_service_pb2.GetStatsRequest())
    assert stats.recent_sweeps[0].trigger.endswith("(dry run)")
    assert stats.recent_sweeps[0].evaluated_count == 1
    real = govern(service, 30)
    assert [(t.from_state, t.to_state, t.count) for t in real.transitions] == [(ACTIVE, ARCHIVED, 1)]
    stats = service.GetStats(memory_service_pb2.GetStatsRequest())
    assert [(c.state, c.count) for c in stats.counts] == [(ARCHIVED, 1)]


def test_states_and_values_survive_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sidecar = start_sidecar(data, "--sweep-interval-s", "0", "--checkpoint-interval-s", "0.2")
    service = stub(sidecar.unix_target)
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=turn_policy(service)))
    rows = vectors(4, seed=7)
    ids = [remember(service, f"fact number {i}", pack(rows[i]), turn=1) for i in range(4)]
    for turn in range(2, 12):
        use(service, pack(rows[0]), turn)
        govern(service, turn)
    before = service.Get(memory_service_pb2.GetRequest(ids=ids)).memories
    assert {m.state for m in before} == {ACTIVE, ARCHIVED}
    import time

    time.sleep(1.0)  # more than one checkpoint interval
    sidecar.kill()
    restarted = start_sidecar(data, "--sweep-interval-s", "0")
    try:
        service = stub(restarted.unix_target)
        after = service.Get(memory_service_pb2.GetRequest(ids=ids)).memories
        assert [m.state for m in after] == [m.state for m in before]
        assert [m.access_count for m in after] == [m.access_count for m in before]
        for old, new in zip(before, after, strict=True):
            assert new.scores.value == pytest.approx(old.scores.value, abs=1e-5)
        policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
        assert policy.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS
    finally:
        restarted.stop()
