"""The chat endpoint's supersession judgements over gRPC: batched, strictly read, cached, counted.

Doubts come from the rules alone (two facts of one entity with near vectors, ``--embedder none``), so the tests
need no model; the sidecar runs in policy mode LLM, and ``Govern`` puts the waiting doubts to the chat endpoint. The
endpoint here answers from the pairs it reads in the prompt (not from a queue), so each test can tell which verdict
went to which pair; the Prometheus endpoint's counters are read after.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import chat_endpoint, memory, pack, stub

from memevo.sidecar.governance import prompts
from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

FACT = memory_pb2.MEMORY_KIND_FACT
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
DAY_S = 86_400
TEXT_LINE = "- text: "

Verdicts = Callable[[list[tuple[str, str]], bool], tuple[int, str]]
"""(the pairs of texts a call asks about, whether it is a batch) -> (HTTP status, the answer's text)."""


@dataclass
class Chat:
    """A chat endpoint answering with ``verdicts``; ``calls`` holds each call's pairs and whether it was a batch."""

    verdicts: Verdicts
    url: str = ""
    calls: list[tuple[list[tuple[str, str]], bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def chat(verdicts: Verdicts) -> Iterator[Chat]:
    endpoint = Chat(verdicts)

    def reply(request: dict[str, Any]) -> tuple[int, str]:
        system, user = (m["content"] for m in request["body"]["messages"])
        assert system in (prompts.SUPERSEDE_SYSTEM, prompts.SUPERSEDE_BATCH_SYSTEM)
        texts = [line[len(TEXT_LINE) :] for line in user.splitlines() if line.startswith(TEXT_LINE)]
        pairs = list(zip(texts[0::2], texts[1::2], strict=True))
        batch = system == prompts.SUPERSEDE_BATCH_SYSTEM
        with endpoint.lock:
            endpoint.calls.append((pairs, batch))
        return endpoint.verdicts(pairs, batch)

    with chat_endpoint(reply, "llm-batch-chat") as url:
        endpoint.url = url
        yield endpoint


def replaces(older: str) -> bool:
    """The scripted truth of these tests: a change of city replaces, an added language does not."""
    return "lives in" in older


def word(older: str) -> str:
    return "REPLACES" if replaces(older) else "BOTH_HOLD"


def right(pairs: list[tuple[str, str]], batch: bool) -> tuple[int, str]:
    """Every verdict right, in the form the prompt asks for."""
    if not batch:
        return 200, word(pairs[0][0])
    return 200, json.dumps({str(n): word(older) for n, (older, _) in enumerate(pairs, start=1)})


def start(tmp_path: Path, endpoint: Chat) -> tuple[Sidecar, Any]:
    llm = ("--llm-url", endpoint.url, "--llm-model", "tiny-chat", "--metrics-listen", "127.0.0.1:0")
    process = start_sidecar(tmp_path, *llm, "--sweep-interval-s", "0")
    service = stub(process.unix_target)
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    return process, service


def doubts(service: Any, names: list[str], namespace: str = "", seed: int = 0) -> dict[str, tuple[int, int]]:
    """For each name an older fact and a newer one near it, doubted by the rules: {name: (older id, newer id)}.

    Even-numbered names move (the newer fact replaces), odd ones add a language (both hold)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, name in enumerate(names):
        base = rng.standard_normal(8)
        texts = (
            (f"{name} lives in Lyon.", f"{name} is in Oslo now.")
            if n % 2 == 0
            else (f"{name} speaks French.", f"{name} speaks Dutch as well.")
        )
        ids = []
        for day, text in enumerate(texts):
            when = Timestamp(seconds=1_700_000_000 + day * DAY_S)
            item = memory(
                text,
                pack(base + 0.2 * rng.standard_normal(8)),
                kind=FACT,
                entity=f"person:{name.lower()}",
                namespace=namespace,
                valid_from=when,
            )
            ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
        out[name] = (ids[0], ids[1])
    older = [pair[0] for pair in out.values()]
    memories = service.Get(memory_service_pb2.GetRequest(ids=older)).memories
    assert all(m.possibly_outdated_by for m in memories), "the rules did not doubt every older fact"
    return out


def settled(service: Any, pairs: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int, int]]:
    """Each name's older fact: (state, superseded_by, possibly_outdated_by)."""
    ids = [older for older, _ in pairs.values()]
    memories = {m.id: m for m in service.Get(memory_service_pb2.GetRequest(ids=ids)).memories}
    return {
        name: (memories[o].state, memories[o].superseded_by, memories[o].possibly_outdated_by)
        for name, (o, _) in pairs.items()
    }


def as_judged(pairs: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int, int]]:
    """What ``settled`` reads once every pair got its right verdict."""
    return {
        name: (OBSOLETE, newer, 0) if n % 2 == 0 else (ACTIVE, 0, 0)
        for n, (name, (_, newer)) in enumerate(pairs.items())
    }


def counters(process: Sidecar) -> dict[str, float]:
    """The chat endpoint's judgement counters on the Prometheus endpoint, by name without the common prefix."""
    ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
    with urllib.request.urlopen(f"http://{ready['metrics']}/metrics", timeout=10) as response:
        text = response.read().decode()
    prefix = "memevo_llm_judge_"
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, value = line.split(" ")
            out[name.removeprefix(prefix)] = float(value)
    return out


NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli"]


def test_waiting_pairs_are_judged_in_one_call_each_verdict_to_its_pair(tmp_path: Path) -> None:
    with chat(right) as endpoint:
        process, service = start(tmp_path, endpoint)
        try:
            pairs = doubts(service, NAMES)
            service.Govern(memory_service_pb2.GovernRequest())
            assert len(endpoint.calls) == 1
            asked, batch = endpoint.calls[0]
            assert batch
            assert sorted(asked) == sorted(
                [(f"{n} lives in Lyon.", f"{n} is in Oslo now.") for n in NAMES[0::2]]
                + [(f"{n} speaks French.", f"{n} speaks Dutch as well.") for n in NAMES[1::2]]
            )
            assert settled(service, pairs) == as_judged(pairs)
            assert counters(process) == {
                "calls_total": 1,
                "pairs_asked_total": len(NAMES),
                "pairs_total": len(NAMES),
                "cache_hits_total": 0,
                "failures_total": 0,
                "deferred_total": 0,
            }
        finally:
            process.stop()


def test_a_partial_batch_answer_is_never_guessed_the_rest_asked_one_by_one(tmp_path: Path) -> None:
    def partial(pairs: list[tuple[str, str]], batch: bool) -> tuple[int, str]:
        if batch:  # pair 1 answered, pair 2 with a word that is not a verdict, the others left out
            return 200, json.dumps({"1": word(pairs[0][0]), "2": "PROBABLY_REPLACES"})
        return right(pairs, batch)

    with chat(partial) as endpoint:
        process, service = start(tmp_path, endpoint)
        try:
            pairs = doubts(service, NAMES)
            service.Govern(memory_service_pb2.GovernRequest())
            (first, batch), *singles = endpoint.calls
            assert batch
            assert len(first) == len(NAMES)
            assert singles == [([pair], False) for pair in first[1:]]
            assert settled(service, pairs) == as_judged(pairs)
            assert counters(process) == {
                "calls_total": len(NAMES),
                "pairs_asked_total": 2 * len(NAMES) - 1,
                "pairs_total": len(NAMES),
                "cache_hits_total": 0,
                "failures_total": 1,
                "deferred_total": 0,
            }
        finally:
            process.stop()


def test_an_unreadable_batch_answer_and_a_failing_endpoint_leave_every_doubt(tmp_path: Path) -> None:
    def broken(pairs: list[tuple[str, str]], batch: bool) -> tuple[int, str]:
        if batch:  # numbered 2.. past the last pair: any verdict may belong to any pair
            return 200, json.dumps({str(n + 2): "REPLACES" for n in range(len(pairs))})
        return 503, "overloaded"

    with chat(broken) as endpoint:
        process, service = start(tmp_path, endpoint)
        try:
            pairs = doubts(service, NAMES)
            service.Govern(memory_service_pb2.GovernRequest())
            assert [batch for _, batch in endpoint.calls] == [True, False]  # then judging pauses
            assert settled(service, pairs) == {
                name: (ACTIVE, 0, newer) for name, (_, newer) in pairs.items()
            }  # nothing retired, nothing cleared: every doubt stays for a later try
            found = counters(process)
            assert (found["calls_total"], found["pairs_total"], found["failures_total"]) == (2, 0, 2)
        finally:
            process.stop()


def test_the_same_pair_of_statements_is_not_asked_twice(tmp_path: Path) -> None:
    with chat(right) as endpoint:
        process, service = start(tmp_path, endpoint)
        try:
            first = doubts(service, ["Ana"], namespace="team-a", seed=1)
            service.Govern(memory_service_pb2.GovernRequest())
            assert len(endpoint.calls) == 1
            # The same change written again in another namespace: settled by the verdict given before.
            again = doubts(service, ["Ana"], namespace="team-b", seed=2)
            service.Govern(memory_service_pb2.GovernRequest())
            assert len(endpoint.calls) == 1
            assert settled(service, first) == as_judged(first)
            assert settled(service, again) == as_judged(again)
            found = counters(process)
            assert (found["calls_total"], found["pairs_asked_total"], found["cache_hits_total"]) == (1, 1, 1)
        finally:
            process.stop()
