"""Consolidation and agent-in-the-loop review over gRPC, against a real sidecar process.

Scheduled sweeps are off (``--sweep-interval-s 0``): every cluster pass is an
explicit Govern, so each test decides when groups are looked for. Deadlines
are still decided by the sidecar's own review worker, once a second.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import bad_fields, fake_chat, pack, stub, unit, wait_until

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2, review_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
EVICTED = memory_pb2.MEMORY_STATE_EVICTED
DIM = 8
GROUP = 20
AGENT = memory_service_pb2.RecallFilter(namespace="agent")


def near_duplicates(count: int, seed: int, spread: float = 0.02) -> np.ndarray:
    """``count`` unit vectors around one random direction (pairwise cosine well above 0.95)."""
    rng = np.random.default_rng(seed)
    centre = unit(rng.normal(size=DIM))
    return np.stack([unit(centre + spread * rng.normal(size=DIM)) for _ in range(count)])


def remember_strategies(
    service: Any, vectors: np.ndarray, signature: str, namespace: str = "agent", text: str = "To deploy"
) -> list[int]:
    items = [
        memory_pb2.MemoryInput(
            content=f"{text} ({signature}), run the migration first, then restart the workers (attempt {i}).",
            vector=pack(v),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature=signature,
            namespace=namespace,
        )
        for i, v in enumerate(vectors)
    ]
    response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items))
    return [int(r.memory.id) for r in response.results]


def succeed(service: Any, ids: list[int]) -> None:
    for memory_id in ids:
        service.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(
                used_memory_ids=[memory_id], outcome=memory_service_pb2.OUTCOME_SUCCESS
            )
        )


def states(service: Any, ids: list[int]) -> list[int]:
    found = {m.id: m.state for m in service.Get(memory_service_pb2.GetRequest(ids=ids)).memories}
    return [found.get(i, EVICTED) for i in ids]


def govern(service: Any) -> memory_service_pb2.GovernResponse:
    return service.Govern(memory_service_pb2.GovernRequest())


def set_consolidation(service: Any, **fields: Any) -> None:
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    for name, value in fields.items():
        setattr(policy.consolidation, name, value)
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))


class Reviewer:
    """A Review stream driven by the test: send() decisions, next() proposals and settlements."""

    def __init__(self, service: Any, name: str, kinds: tuple[int, ...] = ()) -> None:
        self._requests: queue.Queue[memory_service_pb2.ReviewRequest | None] = queue.Queue()
        self._requests.put(
            memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer=name, kinds=kinds))
        )
        self.call = service.Review(self._iterate(), timeout=120)
        self.received: queue.Queue[memory_service_pb2.ReviewResponse | BaseException] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _iterate(self) -> Iterator[memory_service_pb2.ReviewRequest]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self.call:
                self.received.put(response)
        except BaseException as error:
            self.received.put(error)

    def next(self, timeout_s: float = 30.0) -> memory_service_pb2.ReviewResponse:
        item = self.received.get(timeout=timeout_s)
        if isinstance(item, BaseException):
            raise item
        return item

    def proposal(self, timeout_s: float = 30.0) -> review_pb2.Proposal:
        while True:
            response = self.next(timeout_s)
            if response.WhichOneof("message") == "proposal":
                return response.proposal

    def decide(self, proposal_id: str, verdict: int, **fields: Any) -> None:
        decision = review_pb2.Decision(proposal_id=proposal_id, verdict=verdict, **fields)  # type: ignore[arg-type]
        self._requests.put(memory_service_pb2.ReviewRequest(decision=decision))

    def send_raw(self, request: memory_service_pb2.ReviewRequest) -> None:
        self._requests.put(request)

    def disconnect(self) -> None:
        self.call.cancel()
        self._requests.put(None)


def drain(reviewer: Reviewer) -> None:
    """Read the stream until it ends (its error is raised)."""
    while True:
        reviewer.next()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", dimension=DIM)
    yield process
    process.stop()


def test_twenty_successful_strategies_become_one_reviewed_abstraction_and_come_back(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    members = remember_strategies(service, near_duplicates(GROUP, seed=1), "deploy-service")
    succeed(service, members)
    loner = remember_strategies(service, near_duplicates(1, seed=99), "deploy-service", text="Elsewhere")[0]
    reviewer = Reviewer(service, "planner-llm")
    wait_until(
        lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 1, "reviewer attached"
    )

    passed = govern(service).consolidation
    assert passed.groups_found == 1
    assert passed.proposals_opened == 1
    proposal = reviewer.proposal()
    assert proposal.kind == review_pb2.PROPOSAL_KIND_CONSOLIDATE
    assert sorted(m.id for m in proposal.memories) == sorted(members)
    assert loner not in {m.id for m in proposal.memories}
    assert all(m.successes == 1 for m in proposal.memories)  # members travel with their statistics
    assert proposal.suggested_text in {m.content for m in proposal.memories}
    assert "20" in proposal.reason
    assert "deploy-service" in proposal.reason
    # A second pass proposes nothing new while the group is open.
    assert govern(service).consolidation.proposals_opened == 0

    text = "Deploys succeed when migrations run before the workers restart."
    reviewer.decide(proposal.id, review_pb2.VERDICT_ACCEPT, abstraction_text=text, note="merged by the planner")
    assert reviewer.next().settled_proposal_id == proposal.id
    wait_until(lambda: states(service, members) == [CONSOLIDATED] * GROUP, "members consolidated")

    query = pack(near_duplicates(1, seed=1)[0])
    recalled = service.Recall(memory_service_pb2.RecallRequest(query_vector=query, k=10, filter=AGENT)).memories
    abstraction = recalled[0].memory
    assert abstraction.kind == memory_pb2.MEMORY_KIND_ABSTRACTION
    assert abstraction.content == text
    assert sorted(abstraction.members) == sorted(members)
    assert abstraction.successes == GROUP
    assert abstraction.metadata["proposal_id"] == proposal.id
    assert recalled[0].hint == "pattern distilled from 20 successful experiences"
    assert not {r.memory.id for r in recalled} & set(members)

    history = service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=query, k=30, mode=memory_service_pb2.RECALL_MODE_HISTORY, filter=AGENT
        )
    ).memories
    in_history = {r.memory.id: r for r in history}
    assert set(members) <= set(in_history)
    assert in_history[members[0]].memory.consolidated_into == abstraction.id
    assert in_history[members[0]].hint == f"absorbed into pattern memory {abstraction.id}"
    lineage = service.History(memory_service_pb2.HistoryRequest(memory_id=members[0])).versions
    assert abstraction.id in {m.id for m in lineage}

    restored = service.Unconsolidate(
        memory_service_pb2.UnconsolidateRequest(abstraction_id=abstraction.id, request_id="undo-1")
    )
    assert sorted(restored.restored_ids) == sorted(members)
    again = service.Unconsolidate(
        memory_service_pb2.UnconsolidateRequest(abstraction_id=abstraction.id, request_id="undo-1")
    )
    assert sorted(again.restored_ids) == sorted(members)  # a retried request gets the first answer
    assert states(service, members) == [ACTIVE] * GROUP
    assert states(service, [abstraction.id]) == [OBSOLETE]
    recalled = service.Recall(memory_service_pb2.RecallRequest(query_vector=query, k=GROUP, filter=AGENT)).memories
    assert {r.memory.id for r in recalled} >= set(members[:5])
    assert abstraction.id not in {r.memory.id for r in recalled}
    reviewer.disconnect()

    events = service.History(memory_service_pb2.HistoryRequest(memory_id=abstraction.id)).events
    types = [e.type for e in events if e.memory_id == abstraction.id]
    assert events_pb2.CHANGE_EVENT_TYPE_CONSOLIDATED in types
    assert events_pb2.CHANGE_EVENT_TYPE_UNCONSOLIDATED in types


def test_a_reviewer_that_disconnects_leaves_nothing_applied_and_the_next_one_gets_the_proposal(
    sidecar: Sidecar,
) -> None:
    service = stub(sidecar.unix_target)
    members = remember_strategies(service, near_duplicates(6, seed=2), "triage")
    first = Reviewer(service, "first")
    wait_until(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 1, "attached")
    govern(service)
    proposal = first.proposal()
    first.disconnect()
    wait_until(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 0, "detached")
    assert states(service, members) == [ACTIVE] * 6
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 1

    second = Reviewer(service, "second")
    offered = second.proposal()
    assert offered.id == proposal.id
    second.decide(offered.id, review_pb2.VERDICT_MODIFY, memory_ids=members[:3], abstraction_text="Triage by severity.")
    assert second.next().settled_proposal_id == offered.id
    assert states(service, members) == [CONSOLIDATED] * 3 + [ACTIVE] * 3
    # A late decision on a settled proposal changes nothing and is answered with the settlement.
    second.decide(offered.id, review_pb2.VERDICT_REJECT)
    assert second.next().settled_proposal_id == offered.id
    assert states(service, members) == [CONSOLIDATED] * 3 + [ACTIVE] * 3
    second.disconnect()


def test_at_the_deadline_the_policy_decides_extractively(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    set_consolidation(service, without_reviewer=policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE, review_timeout_s=1.0)
    members = remember_strategies(service, near_duplicates(5, seed=3), "retry")
    reviewer = Reviewer(service, "slow")
    wait_until(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 1, "attached")
    govern(service)
    proposal = reviewer.proposal()
    reviewer.disconnect()
    wait_until(lambda: states(service, members) == [CONSOLIDATED] * 5, "policy consolidation at the deadline")
    abstraction_id = service.Get(memory_service_pb2.GetRequest(ids=[members[0]])).memories[0].consolidated_into
    abstraction = service.Get(memory_service_pb2.GetRequest(ids=[abstraction_id])).memories[0]
    assert abstraction.content == proposal.suggested_text
    assert abstraction.metadata["consolidated_by"] == "policy: extractive"


def test_without_a_reviewer_wait_keeps_members_and_extractive_consolidates_at_once(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    waiting = remember_strategies(service, near_duplicates(5, seed=4), "wait")
    assert govern(service).consolidation.proposals_opened == 1
    assert states(service, waiting) == [ACTIVE] * 5

    set_consolidation(service, without_reviewer=policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE)
    members = remember_strategies(service, near_duplicates(5, seed=5), "extract")
    passed = govern(service).consolidation
    assert passed.consolidated_count == 1
    assert passed.proposals_opened == 0
    assert states(service, members) == [CONSOLIDATED] * 5
    # Memories with a fact key are governed by supersession, never consolidated.
    keyed = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(
            memories=[
                memory_pb2.MemoryInput(
                    content=f"The deploy target of service {i} is stable.",
                    vector=pack(v),
                    kind=memory_pb2.MEMORY_KIND_EPISODE,
                    entity="deploys",
                    fact=memory_pb2.Fact(attribute=f"target_{i}", value="stable"),
                )
                for i, v in enumerate(near_duplicates(5, seed=6))
            ]
        )
    )
    keyed_ids = [int(r.memory.id) for r in keyed.results]
    assert govern(service).consolidation.groups_found == 0
    assert states(service, keyed_ids) == [ACTIVE] * 5


def test_policy_llm_mode_uses_the_chat_endpoint_and_a_failure_leaves_members_untouched(tmp_path: Path) -> None:
    with fake_chat() as chat:
        llm = ("--llm-url", chat.url, "--llm-model", "tiny-chat")
        sidecar = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", *llm, dimension=DIM)
        try:
            service = stub(sidecar.unix_target)
            set_consolidation(service, without_reviewer=policy_pb2.CONSOLIDATION_MODE_LLM)
            failing = remember_strategies(service, near_duplicates(5, seed=7), "llm-fails")
            chat.answers.put((500, "overloaded"))
            passed = govern(service).consolidation
            assert passed.proposals_opened == 1
            assert passed.consolidated_count == 0
            assert states(service, failing) == [ACTIVE] * 5
            assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 1

            members = remember_strategies(service, near_duplicates(5, seed=8), "llm-works")
            chat.answers.put((200, "Always run the migration before restarting workers."))
            passed = govern(service).consolidation
            assert passed.consolidated_count == 1
            assert states(service, members) == [CONSOLIDATED] * 5
            abstraction_id = service.Get(memory_service_pb2.GetRequest(ids=[members[0]])).memories[0].consolidated_into
            abstraction = service.Get(memory_service_pb2.GetRequest(ids=[abstraction_id])).memories[0]
            assert abstraction.content == "Always run the migration before restarting workers."
            request = chat.seen[-1]
            assert request["path"] == "/v1/chat/completions"
            assert request["body"]["model"] == "tiny-chat"
            assert "llm-works" in request["body"]["messages"][1]["content"]
        finally:
            sidecar.stop()


def test_llm_mode_without_an_endpoint_is_refused(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
    with pytest.raises(grpc.RpcError) as info:
        service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "policy.consolidation.without_reviewer" in bad_fields(info.value)
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_WAIT
    policy.consolidation.min_group_size = 1
    policy.consolidation.similarity = 1.5
    with pytest.raises(grpc.RpcError) as info:
        service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    assert {"policy.consolidation.min_group_size", "policy.consolidation.similarity"} <= set(bad_fields(info.value))


def test_evictions_above_the_floor_wait_for_the_reviewer(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    for kind in policy.kinds:  # every memory is below every threshold at once, no grace, no minimum time
        kind.evict_below = kind.archive_below = 0.99
        kind.reactivate_above = 1.0
        kind.evict_grace_s = kind.min_time_in_state_s = 0.0
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    ids = [
        int(
            service.Remember(
                memory_service_pb2.RememberRequest(memory=memory_pb2.MemoryInput(content=f"note {i}", vector=pack(v)))
            ).result.memory.id
        )
        for i, v in enumerate(near_duplicates(3, seed=10, spread=1.0))
    ]
    reviewer = Reviewer(service, "janitor", kinds=(review_pb2.PROPOSAL_KIND_EVICT,))
    wait_until(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 1, "attached")
    govern(service)  # the first sweep starts the grace period
    govern(service)
    proposal = reviewer.proposal()
    assert proposal.kind == review_pb2.PROPOSAL_KIND_EVICT
    assert sorted(m.id for m in proposal.memories) == sorted(ids)
    assert all(m.scores.value > 0.01 for m in proposal.memories)
    assert EVICTED not in states(service, ids)
    govern(service)  # held, not proposed twice
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_evictions == 1

    reviewer.decide(proposal.id, review_pb2.VERDICT_MODIFY, memory_ids=[ids[0]])
    assert reviewer.next().settled_proposal_id == proposal.id
    assert states(service, ids)[0] == EVICTED
    assert EVICTED not in states(service, ids[1:])
    reviewer.disconnect()


def test_bad_review_input_gets_invalid_argument(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    bad_first = iter([memory_service_pb2.ReviewRequest(decision=review_pb2.Decision(proposal_id="x"))])
    with pytest.raises(grpc.RpcError) as info:
        list(service.Review(bad_first, timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello" in bad_fields(info.value)

    unnamed = iter([memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(kinds=[99]))])
    with pytest.raises(grpc.RpcError) as info:
        list(service.Review(unnamed, timeout=10))
    assert {"hello.reviewer", "hello.kinds[0]"} <= set(bad_fields(info.value))

    members = remember_strategies(service, near_duplicates(5, seed=11), "bad-input")
    reviewer = Reviewer(service, "sloppy")
    wait_until(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers == 1, "attached")
    govern(service)
    proposal = reviewer.proposal()
    reviewer.decide(proposal.id, review_pb2.VERDICT_MODIFY, memory_ids=[members[0], 10**9])
    with pytest.raises(grpc.RpcError) as info:
        drain(reviewer)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "decision.memory_ids" in bad_fields(info.value)
    assert states(service, members) == [ACTIVE] * 5  # nothing applied; the proposal is still open
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 1


def test_unconsolidate_errors(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    with pytest.raises(grpc.RpcError) as info:
        service.Unconsolidate(memory_service_pb2.UnconsolidateRequest())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "abstraction_id" in bad_fields(info.value)
    with pytest.raises(grpc.RpcError) as info:
        service.Unconsolidate(memory_service_pb2.UnconsolidateRequest(abstraction_id=12345))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    plain = remember_strategies(service, near_duplicates(1, seed=12), "plain")[0]
    with pytest.raises(grpc.RpcError) as info:
        service.Unconsolidate(memory_service_pb2.UnconsolidateRequest(abstraction_id=plain))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not an abstraction" in (info.value.details() or "")


def test_open_proposals_survive_a_crash(tmp_path: Path) -> None:
    sidecar = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", dimension=DIM)
    service = stub(sidecar.unix_target)
    members = remember_strategies(service, near_duplicates(5, seed=13), "crash")
    assert govern(service).consolidation.proposals_opened == 1
    sidecar.kill()
    sidecar = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", dimension=DIM)
    try:
        service = stub(sidecar.unix_target)
        assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 1
        reviewer = Reviewer(service, "after-restart")
        proposal = reviewer.proposal()
        assert sorted(m.id for m in proposal.memories) == sorted(members)
        assert govern(service).consolidation.proposals_opened == 0  # the watermark survived too
        reviewer.decide(proposal.id, review_pb2.VERDICT_REJECT)
        assert reviewer.next().settled_proposal_id == proposal.id
        assert states(service, members) == [ACTIVE] * 5
        reviewer.disconnect()
        time.sleep(0.2)
    finally:
        sidecar.stop()
