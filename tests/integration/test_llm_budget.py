"""The chat endpoint's budget over gRPC: in policy mode LLM it judges at most 20 doubts, plus
``--llm-judgements-per-write`` for each memory written since the start; a doubt past the budget stays a doubt.

Doubts come from the rules alone (two facts of one entity with near vectors, ``--embedder none``), so the test
needs no model. The fake chat endpoint answers BOTH_HOLD to every pair it is asked about (one a call, or a batch
of up to ``LLM_JUDGE_BATCH_PAIRS`` in one call), which clears each doubt it judges. The budget counts pairs, not
calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import chat_endpoint, memory, pack, stub

from memevo.sidecar.governance import prompts
from memevo.sidecar.governance.review import LLM_JUDGE_BATCH_PAIRS
from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

FACT = memory_pb2.MEMORY_KIND_FACT
BURST = 20
DAY_S = 86_400


@dataclass
class BothHold:
    """A chat endpoint that answers BOTH_HOLD to every pair; counts calls and pairs."""

    url: str = ""
    calls: int = 0
    pairs: int = 0


@pytest.fixture
def chat() -> Iterator[BothHold]:
    endpoint = BothHold()

    def reply(request: dict[str, Any]) -> tuple[int, str]:
        system, user = (m["content"] for m in request["body"]["messages"])
        count = sum(line.startswith("- text: ") for line in user.splitlines()) // 2
        endpoint.calls += 1
        endpoint.pairs += count
        if system == prompts.SUPERSEDE_BATCH_SYSTEM:
            return 200, json.dumps({str(n): "BOTH_HOLD" for n in range(1, count + 1)})
        return 200, "BOTH_HOLD"

    with chat_endpoint(reply, "both-hold") as url:
        endpoint.url = url
        yield endpoint


def _calls(pairs: int) -> int:
    """Calls for ``pairs`` judged in one pass: batches of LLM_JUDGE_BATCH_PAIRS."""
    return -(-pairs // LLM_JUDGE_BATCH_PAIRS)


def _start(tmp_path: Any, chat: BothHold, per_write: str) -> Any:
    llm = ("--llm-url", chat.url, "--llm-model", "tiny-chat", "--llm-judgements-per-write", per_write)
    return start_sidecar(tmp_path, *llm, "--sweep-interval-s", "0")


def _llm_mode(service: Any) -> None:
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))


def _doubts(service: Any, count: int, rng: np.random.Generator) -> list[int]:
    """``count`` doubted facts: for each entity an older fact and a newer one near it; the older ids."""
    older = []
    for n in range(count):
        base = rng.standard_normal(8)
        ids = []
        for day, text in enumerate((f"Kai{n} lives in Lyon.", f"Kai{n} is in Oslo now.")):
            when = Timestamp(seconds=1_700_000_000 + day * DAY_S)
            vector = pack(base + 0.2 * rng.standard_normal(8))
            item = memory(text, vector, kind=FACT, entity=f"person:kai{n}", valid_from=when)
            ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
        older.append(ids[0])
    return older


def _still_doubted(service: Any, ids: list[int]) -> int:
    memories = service.Get(memory_service_pb2.GetRequest(ids=ids)).memories
    return sum(1 for m in memories if m.possibly_outdated_by)


def test_a_budget_of_none_per_write_judges_the_first_twenty_only(tmp_path: Any, chat: BothHold) -> None:
    process = _start(tmp_path, chat, "0")
    try:
        service = stub(process.unix_target)
        _llm_mode(service)
        older = _doubts(service, BURST + 10, np.random.default_rng(1))
        doubted = _still_doubted(service, older)
        assert doubted > BURST
        service.Govern(memory_service_pb2.GovernRequest())
        assert (chat.pairs, chat.calls) == (BURST, _calls(BURST))
        assert _still_doubted(service, older) == doubted - BURST
        service.Govern(memory_service_pb2.GovernRequest())
        assert chat.pairs == BURST  # nothing earned since
    finally:
        process.stop()


def test_each_write_earns_its_share_of_a_call(tmp_path: Any, chat: BothHold) -> None:
    process = _start(tmp_path, chat, "0.1")
    try:
        service = stub(process.unix_target)
        _llm_mode(service)
        older = _doubts(service, 40, np.random.default_rng(2))  # 80 writes earn 8 calls beyond the first 20
        doubted = _still_doubted(service, older)
        assert doubted > BURST + 8
        service.Govern(memory_service_pb2.GovernRequest())
        assert (chat.pairs, chat.calls) == (BURST + 8, _calls(BURST + 8))
        assert _still_doubted(service, older) == doubted - BURST - 8
    finally:
        process.stop()
