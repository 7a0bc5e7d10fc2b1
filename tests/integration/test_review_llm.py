"""Soft conflicts judged by the chat endpoint in policy mode LLM, against a real sidecar and a fake endpoint.

A memory that a newer one may replace (``possibly_outdated_by``) is, with no
reviewer taking supersessions, put to the OpenAI-compatible endpoint of
``--llm-url`` at the next pass: "replaces" supersedes it, "both hold" clears
the doubt, and any other answer leaves it in doubt for a later try. With a
reviewer taking supersessions attached, the endpoint judges what the reviewer
left undecided at the deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import FakeChat, fake_chat, memory, pack, stub, unit, wait_until

from memevo.client import MemoryClient
from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2, review_pb2

pytestmark = pytest.mark.integration

DIM = 8
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE


@dataclass
class Setup:
    """A sidecar in consolidation mode LLM whose --llm-url is ``chat``."""

    service: Any
    chat: FakeChat
    sidecar: Sidecar


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with fake_chat() as chat:
        llm = ("--llm-url", chat.url, "--llm-model", "tiny-chat")
        sidecar = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", *llm, dimension=DIM)
        try:
            service = stub(sidecar.unix_target)
            policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
            policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
            service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
            yield Setup(service, chat, sidecar)
        finally:
            sidecar.stop()


def doubt(service: Any) -> tuple[int, int]:
    """An older and a newer statement about one entity, close but worded apart: the older is only doubted."""
    rng = np.random.default_rng(5)
    base = unit(rng.normal(size=DIM))
    other = rng.normal(size=DIM)
    other -= other.dot(base) * base
    tilted = unit(0.8 * base + 0.6 * unit(other))
    ids = []
    for text, vector, since in (
        ("Ana keeps her notes in a paper notebook", base, 1_000),
        ("These days Ana writes everything in Obsidian", tilted, 2_000),
    ):
        item = memory(text, pack(vector), kind=memory_pb2.MEMORY_KIND_FACT, entity="user:ana-lee")
        item.valid_from.CopyFrom(Timestamp(seconds=since))
        ids.append(int(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id))
    older, newer = ids
    assert get(service, older).possibly_outdated_by == newer
    return older, newer


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    return service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0]


def govern(service: Any) -> memory_service_pb2.ConsolidationStats:
    return service.Govern(memory_service_pb2.GovernRequest()).consolidation


def open_supersessions(service: Any) -> int:
    return int(service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_supersessions)


def reasons(service: Any, memory_id: int) -> list[str]:
    history = service.History(memory_service_pb2.HistoryRequest(memory_id=memory_id))
    return [e.reason for e in history.events if e.memory_id == memory_id]


def judged(setup: Setup, answer: str) -> tuple[int, int]:
    """A fresh doubt, put to the endpoint (which answers ``answer``) by the next pass: (older, newer)."""
    older, newer = doubt(setup.service)
    setup.chat.answers.put((200, answer))
    assert govern(setup.service).proposals_opened == 1
    assert len(setup.chat.seen) == 1
    return older, newer


def asked_once(setup: Setup) -> bool:
    """After the pass that asked: a new pass neither opens the proposal again nor asks the endpoint again."""
    return govern(setup.service).proposals_opened == 0 and len(setup.chat.seen) == 1


def test_an_answer_replaces_supersedes_the_doubted_memory(setup: Setup) -> None:
    service = setup.service
    older, newer = judged(setup, "REPLACES")
    retired = get(service, older)
    assert retired.state == OBSOLETE
    assert retired.superseded_by == newer
    assert any("policy: LLM" in r and "tiny-chat" in r for r in reasons(service, older)), reasons(service, older)
    assert older in get(service, newer).supersedes
    # The question the model was asked: both texts, the entity, the kinds and both world times, older first.
    request = setup.chat.seen[0]["body"]
    assert request["model"] == "tiny-chat"
    system, user = (m["content"] for m in request["messages"])
    assert all(word in system for word in ("REPLACES", "BOTH_HOLD"))
    assert user.index("paper notebook") < user.index("Obsidian")
    # valid_from 1000 s and 2000 s, to the minute
    assert all(part in user for part in ("user:ana-lee", "kind: fact", "1970-01-01 00:16 UTC", "1970-01-01 00:33 UTC"))
    assert asked_once(setup)
    assert open_supersessions(service) == 0


def test_an_answer_both_hold_clears_the_doubt(setup: Setup) -> None:
    service = setup.service
    older, newer = judged(setup, '{"answer": "BOTH_HOLD"}')
    kept = get(service, older)
    assert kept.state == ACTIVE
    assert kept.possibly_outdated_by == 0
    assert kept.superseded_by == 0
    assert any("policy: LLM" in r and "both hold" in r for r in reasons(service, older)), reasons(service, older)
    assert get(service, newer).state == ACTIVE
    assert asked_once(setup)
    assert open_supersessions(service) == 0


def test_an_unusable_answer_leaves_the_doubt_for_a_later_try(setup: Setup) -> None:
    service = setup.service
    older, newer = judged(setup, "Probably yes: REPLACES, I think.")
    kept = get(service, older)
    assert kept.state == ACTIVE
    assert kept.possibly_outdated_by == newer
    # The proposal stays open for the retry after a back-off; meanwhile it is neither duplicated nor asked again.
    assert open_supersessions(service) == 1
    assert asked_once(setup)
    assert get(service, older).possibly_outdated_by == newer


def test_a_reviewer_that_lets_the_deadline_pass_leaves_the_judgement_to_the_endpoint(setup: Setup) -> None:
    service, chat = setup.service, setup.chat
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.consolidation.review_timeout_s = 0.5
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    older, newer = doubt(service)
    offered: list[review_pb2.Proposal] = []
    with MemoryClient(setup.sidecar.unix_target) as client:
        kinds = [review_pb2.PROPOSAL_KIND_SUPERSEDE]
        with client.reviewer("silent", kinds=kinds, timeout_s=60) as session:

            def read() -> None:
                offered.extend(session.proposals())  # never decides

            threading.Thread(target=read, daemon=True).start()
            wait_until(lambda: reviewers(service) == 1, "the reviewer")
            assert govern(service).proposals_opened == 1
            assert chat.seen == []  # the reviewer has it first
            chat.answers.put((200, "replaces"))
            wait_until(lambda: get(service, older).state == OBSOLETE, "the policy's decision at the deadline")
            wait_until(lambda: bool(offered) and offered[0].id in session.settled, "the reviewer told it is settled")
    assert [m.id for m in offered[0].memories] == [older, newer]
    assert get(service, older).superseded_by == newer
    assert len(chat.seen) == 1


def reviewers(service: Any) -> int:
    return int(service.GetStats(memory_service_pb2.GetStatsRequest()).review.reviewers)
