"""The reranker over gRPC: a text Recall puts the statement that answers first, not the asked entity's other ones.

The sidecar embeds every text and runs the shipped reranker (``--rerank local``) beside one without it, on the
same memories. Sentence vectors put a short statement about the asked person's other attribute nearest the
question; the reranker reads question and statement together. (Texts written for this test, not taken from the
benchmarks the reranker was trained or measured on.) A doubted statement ranks after the newer one that
doubts it in both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import memory, stub

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

FACT = memory_pb2.MEMORY_KIND_FACT
DAY_S = 86_400
NAMESPACE = "rerank"
# (text, entity): what an agent wrote over a few days; the questions below ask about one attribute each.
WRITTEN = [
    ("Priya has a border collie named Pepper; she takes him running before work.", "person:priya"),
    ("Priya left Atlassian in March. These days she designs onboarding flows at Canva and says the commute is "
     "half as long and the team is small.", "person:priya"),
    ("Priya grew up in Porto and still visits her parents there every summer.", "person:priya"),
    ("Tomas works at Atlassian on the Jira mobile team.", "person:tomas"),
    ("Gregory is on Pacific time and doesn't take calls before 9am.", "person:gregory"),
    ("Gregory asked us to stop emailing him, he is drowning in his inbox: Slack DMs only from now on, even for "
     "small things.", "person:gregory"),
]  # fmt: skip
QUESTIONS = [
    ("Who is Priya employed by these days?", 1),
    ("What's the best way to reach Gregory about something that isn't urgent?", 5),
]
UNNAMED = "unnamed"
# Statements about no entity, a day apart: the reranker takes the other show's date for an answer too, and it is the
# newest. No entity is no known subject: only the newer statement the pair judge says replaces the first comes first.
WRITTEN_UNNAMED = [
    "when does the next season of the crown come out? November 2023",
    "The Crown's next season was pushed back: it now comes out in March 2024.",
    "when does the next season of stranger things come out? July 2025",
]

EVENTS = "events"
# What an agent logged about one person: a fact, then the change and a remark as events (most agents log changes as
# events). The newer event comes first only where the pair judge says it replaces the fact and it answers as well.
WRITTEN_EVENTS = [
    ("Ana lives in Toronto with her partner.", FACT),
    ("Ana relocated to Vancouver in March.", memory_pb2.MEMORY_KIND_EPISODE),
    ("Ana reacted with :tada: to the launch post in #general.", memory_pb2.MEMORY_KIND_EPISODE),
]


def _serve(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Iterator[tuple[Any, list[int]]]:
    process = start_sidecar(tmp_path_factory.mktemp(name), *args, embedder="local")
    try:
        service = stub(process.unix_target)
        ids = []
        for day, (text, entity) in enumerate(WRITTEN):
            item = memory(text, kind=FACT, namespace=NAMESPACE, entity=entity,
                          valid_from=Timestamp(seconds=1_700_000_000 + day * DAY_S))  # fmt: skip
            ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
        for day, text in enumerate(WRITTEN_UNNAMED):
            item = memory(text, kind=FACT, namespace=UNNAMED, valid_from=Timestamp(seconds=1_700_000_000 + day * DAY_S))
            ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
        for day, (text, kind) in enumerate(WRITTEN_EVENTS):
            item = memory(text, kind=kind, namespace=EVENTS, entity="person:ana",
                          valid_from=Timestamp(seconds=1_700_000_000 + day * DAY_S))  # fmt: skip
            ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
        yield service, ids
    finally:
        process.stop()


@pytest.fixture(scope="module")
def reranked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[int]]]:
    yield from _serve(tmp_path_factory, "rerank-data", "--rerank", "local")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[int]]]:
    yield from _serve(tmp_path_factory, "plain-data")


def _first(service: Any, question: str, namespace: str = NAMESPACE) -> list[int]:
    request = memory_service_pb2.RecallRequest(
        query=question, k=3, filter=memory_service_pb2.RecallFilter(namespace=namespace)
    )
    return [hit.memory.id for hit in service.Recall(request).memories]


@pytest.mark.parametrize(("question", "answer"), QUESTIONS)
def test_the_statement_that_answers_comes_first(reranked: tuple[Any, list[int]], question: str, answer: int) -> None:
    service, ids = reranked
    assert _first(service, question)[0] == ids[answer]


def test_without_the_reranker_the_nearest_wording_wins_at_least_once(plain: tuple[Any, list[int]]) -> None:
    # What the reranker is for: the formula alone ranks another statement of the person first for some question.
    service, ids = plain
    firsts = [_first(service, question)[0] for question, _ in QUESTIONS]
    assert firsts != [ids[answer] for _, answer in QUESTIONS]


def test_of_answers_about_no_entity_the_newer_version_comes_first_not_the_newest(
    reranked: tuple[Any, list[int]],
) -> None:
    service, ids = reranked
    old, pushed_back, other_show = ids[len(WRITTEN) : len(WRITTEN) + len(WRITTEN_UNNAMED)]
    ranked = _first(service, "when does the next season of the crown come out", UNNAMED)
    assert ranked[0] == pushed_back
    assert ranked.index(other_show) > ranked.index(old)


def test_a_change_logged_as_an_event_comes_before_the_fact_it_replaces_and_a_remark_does_not(
    reranked: tuple[Any, list[int]], plain: tuple[Any, list[int]]
) -> None:
    fact, moved, remark = reranked[1][-len(WRITTEN_EVENTS) :]
    ranked = _first(reranked[0], "Where does Ana live?", EVENTS)
    assert ranked[:2] == [moved, fact]
    assert remark not in ranked[:2]
    fact, moved, _ = plain[1][-len(WRITTEN_EVENTS) :]
    assert _first(plain[0], "Where does Ana live?", EVENTS)[0] == fact  # the formula alone: the fact is nearest
