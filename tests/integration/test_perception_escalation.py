"""Escalation over gRPC: with a second judge (the chat endpoint in policy mode LLM), the pair judge only proposes.

The sidecar runs the shipped pair judge (``--judge local``) and a fake chat endpoint. A change said in prose is
doubted, not retired, until ``Govern`` puts the pair to the chat endpoint: REPLACES retires the older statement,
BOTH_HOLD clears the doubt. Each test works in a namespace of its own and queues exactly the answers it expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import FakeChat, fake_chat, memory, stub, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
DAY_S = 86_400


@dataclass
class Setup:
    service: Any
    chat: FakeChat


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with fake_chat() as chat:
        llm = ("--llm-url", chat.url, "--llm-model", "tiny-chat")
        process = start_sidecar(tmp_path_factory.mktemp("escalation-data"), *llm, embedder="local", judge="local")
        try:
            service = stub(process.unix_target)
            policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
            policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
            service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
            yield Setup(service, chat)
        finally:
            process.stop()


def write(service: Any, namespace: str, texts: list[str]) -> list[int]:
    ids = []
    for day, text in enumerate(texts):
        item = memory(text, kind=FACT, namespace=namespace, entity="person:ana",
                      valid_from=Timestamp(seconds=1_700_000_000 + day * DAY_S))  # fmt: skip
        ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
    return ids


def get(service: Any, ids: list[int]) -> list[memory_pb2.Memory]:
    return list(service.Get(memory_service_pb2.GetRequest(ids=ids)).memories)


def asked(chat: FakeChat, since: int) -> list[str]:
    """The user turns of the supersession prompts the chat endpoint received after the first ``since`` calls."""
    return [call["body"]["messages"][1]["content"] for call in chat.seen[since:]]


TEXTS = ["Ana works at Shopify as a product designer.", "Ana left Shopify last month; she has joined Canva."]


def test_the_chat_endpoint_confirms_a_change_the_pair_judge_proposed(setup: Setup) -> None:
    service, chat = setup.service, setup.chat
    since = len(chat.seen)
    chat.answers.put((200, "REPLACES"))
    old, new = write(service, "escalate-yes", TEXTS)
    # Off the write path, the pair judge doubts the older statement and retires nothing itself.
    wait_until(lambda: get(service, [old])[0].possibly_outdated_by == new, "the pair judge's doubt")
    assert get(service, [old])[0].state == ACTIVE
    service.Govern(memory_service_pb2.GovernRequest(namespace="escalate-yes"))
    (prompt,) = asked(chat, since)
    assert TEXTS[0] in prompt
    assert TEXTS[1] in prompt
    retired, newer = get(service, [old, new])
    assert (retired.state, retired.superseded_by) == (OBSOLETE, new)
    assert newer.state == ACTIVE
    restored = service.Restore(memory_service_pb2.RestoreRequest(memory_id=old, reason="the model was wrong"))
    assert (restored.memory.state, restored.memory.possibly_outdated_by) == (ACTIVE, 0)


def test_both_hold_from_the_chat_endpoint_clears_the_judges_doubt(setup: Setup) -> None:
    service, chat = setup.service, setup.chat
    since = len(chat.seen)
    chat.answers.put((200, "BOTH_HOLD"))
    old, new = write(service, "escalate-no", [t.replace("Ana", "Ben") for t in TEXTS])
    service.Govern(memory_service_pb2.GovernRequest(namespace="escalate-no"))
    prompts = asked(chat, since)  # the first test's pair, restored by its caller, is not asked about again
    assert len(prompts) == 1
    kept, newer = get(service, [old, new])
    assert (kept.state, kept.superseded_by, kept.possibly_outdated_by) == (ACTIVE, 0, 0)
    assert newer.state == ACTIVE
