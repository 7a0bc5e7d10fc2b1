"""Recall never ranks a doubted memory above the newer memory that doubts it; a reranker orders the best few."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import recall_engine
from recall_engine import DIMENSION, near, write

from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval import recall as recall_module
from memevo.sidecar.retrieval.recall import Recaller
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture


def _ranked(engine: Engine, text: str = "", k: int = 10) -> list[int]:
    query_vector = np.zeros(DIMENSION, dtype=np.float32)
    query_vector[0] = 1.0
    return [hit.memory.id for hit in Recaller(engine).recall(RecallQuery(vector=query_vector, text=text, k=k))]


def _fact(content: str, vector: np.ndarray, entity: str) -> NewMemory:
    return NewMemory(content=content, vector=vector, kind=memory_pb2.MEMORY_KIND_FACT, entity=entity)


def test_a_doubted_memory_ranks_after_its_doubter_however_near_the_question(engine: Engine) -> None:
    # The older statement is the question's own direction, rated important and worded as the question is; the
    # newer one is unsure of itself: by the formula alone, the older (halved by its doubt) still ranks first.
    older, newer = write(
        engine,
        NewMemory(content="Kai lives in Lyon.", vector=near(1, 0.0), kind=memory_pb2.MEMORY_KIND_FACT,
                  entity="person:kai", importance=10),
        NewMemory(content="Kai is in Oslo these days.", vector=near(2, 0.8), kind=memory_pb2.MEMORY_KIND_FACT,
                  entity="person:kai", importance=1, confidence=0.3),
    )  # fmt: skip
    assert engine.columns.doubted[older]
    assert not engine.columns.doubted[newer]
    ranked = _ranked(engine, "where does Kai live, Lyon")
    assert ranked.index(newer) < ranked.index(older)


def test_a_chain_of_doubts_ranks_newest_first(engine: Engine) -> None:
    first, second, third = write(
        engine,
        _fact("Kai lives in Lyon.", near(1, 0.0), "person:kai"),
        _fact("Kai moved to Oslo.", near(2, 0.6), "person:kai"),
        _fact("Kai is in Porto now.", near(3, 1.0), "person:kai"),
    )
    if not engine.columns.doubted[second]:  # perception may doubt the first by the third instead
        assert engine.columns.doubted[first]
    ranked = _ranked(engine)
    for older in (first, second):
        if engine.columns.doubted[older]:
            assert ranked.index(older) > min(ranked.index(second), ranked.index(third))
    assert ranked.index(third) < ranked.index(first)


def test_undoubted_memories_keep_the_formula_order(engine: Engine) -> None:
    close, far = write(
        engine,
        _fact("Kai lives in Lyon.", near(1, 0.1), "person:kai"),
        _fact("Ana works at Canva.", near(2, 0.9), "person:ana"),
    )
    assert not engine.columns.doubted[close]
    assert _ranked(engine) == [close, far]


class _Holding:
    """A reranker that deems a statement an answer when it is one of ``answers``."""

    def __init__(self, *answers: str) -> None:
        self.answers = answers

    def relevance(self, questions: Sequence[str], statements: Sequence[str]) -> list[float]:
        return [0.9 if s in self.answers else 0.1 for s in statements]


def test_a_reranker_moves_answers_ahead_and_keeps_the_order_otherwise(engine: Engine) -> None:
    depth = recall_module.RERANK_DEPTH
    count = depth + 3
    ids = write(engine, *(NewMemory(content=f"note {i}", vector=near(1, 0.05 * (i + 1))) for i in range(count)))
    plain = _ranked(engine, "when is the key rotated", k=count)
    assert plain == ids  # nearest first: the formula's order
    # Two answers inside the depth the reranker reads (not first), one beyond it, which it never sees.
    engine.reranker = _Holding("note 3", "note 5", f"note {depth + 1}")  # type: ignore[assignment]
    reranked = _ranked(engine, "when is the key rotated", k=count)
    assert reranked[:2] == [ids[3], ids[5]]
    assert reranked[2:depth] == [m for m in ids[:depth] if m not in (ids[3], ids[5])]
    assert reranked[depth:] == ids[depth:]


def test_newest_first_among_answers_skips_events_and_other_attributes(engine: Engine) -> None:
    # Every statement is deemed an answer about Emre. Newest in world time: the event, then a fact keyed to
    # another attribute, then an unkeyed fact, then the role. Neither the event (it states no lasting value) nor the
    # diet fact (its key says it is not the role's newer version) may come first by being newer; the unkeyed one may.
    texts = ("Emre is now the SRE lead.", "Emre is pescatarian.", "Emre reacted with :tada: in #general.",
             "Emre runs the platform team these days.")  # fmt: skip
    role, diet, event, unkeyed = write(
        engine,
        NewMemory(content=texts[0], vector=near(1, 0.0), kind=memory_pb2.MEMORY_KIND_FACT, entity="person:emre",
                  fact_attribute="role", fact_value="SRE lead", valid_from_s=1_700_000_000),
        NewMemory(content=texts[1], vector=near(2, 1.0), kind=memory_pb2.MEMORY_KIND_FACT, entity="person:emre",
                  fact_attribute="diet", fact_value="pescatarian", valid_from_s=1_700_250_000),
        NewMemory(content=texts[2], vector=near(3, 1.2), entity="person:emre", valid_from_s=1_700_300_000),
        NewMemory(content=texts[3], vector=near(4, 1.5), kind=memory_pb2.MEMORY_KIND_FACT, entity="person:emre",
                  valid_from_s=1_700_200_000),
    )  # fmt: skip
    assert _ranked(engine, "what does Emre do here") == [role, diet, unkeyed, event]  # the formula's order
    engine.reranker = _Holding(*texts)  # type: ignore[assignment]
    ranked = _ranked(engine, "what does Emre do here")
    assert ranked[0] == unkeyed


class _Judging:
    """A pair judge that says a newer statement replaces an older one when the pair is one of ``replacing``."""

    def __init__(self, *replacing: tuple[str, str]) -> None:
        self.replacing = replacing
        self.asked: list[tuple[str, str]] = []

    def replaces(self, older: Sequence[str], newer: Sequence[str]) -> list[float]:
        self.asked.extend(zip(older, newer, strict=True))
        return [0.9 if pair in self.replacing else 0.1 for pair in zip(older, newer, strict=True)]


def test_answers_about_no_entity_are_newest_first_only_where_the_judge_says_the_newer_replaces(engine: Engine) -> None:
    # Three answers about no entity, the oldest nearest the question. Being answers to one question does not make
    # them one subject's versions: only the one the judge says replaces the best comes before it.
    texts = ("The Game of Thrones season ends on May 19.", "The Big Bang Theory season ends on May 16.",
             "Game of Thrones moved its finale to May 26.")  # fmt: skip
    best, other, replacing = write(
        engine,
        *(NewMemory(content=text, vector=near(i + 1, 0.2 * i), kind=memory_pb2.MEMORY_KIND_FACT,
                    valid_from_s=1_700_000_000 + 100_000 * i) for i, text in enumerate(texts)),
    )  # fmt: skip
    question = "when does the game of thrones season end"
    assert _ranked(engine, question)[:3] == [best, other, replacing]
    engine.reranker = _Holding(*texts)  # type: ignore[assignment]
    engine.recall_judge = _Judging()  # type: ignore[assignment]
    assert _ranked(engine, question)[:3] == [best, other, replacing]
    assert sorted(engine.recall_judge.asked) == sorted((texts[0], later) for later in texts[1:])  # type: ignore[attr-defined]
    engine.recall_judge = _Judging((texts[0], texts[2]))  # type: ignore[assignment]
    assert _ranked(engine, question)[:3] == [replacing, other, best]


def test_answers_about_one_entity_are_newest_first_without_asking_the_judge(engine: Engine) -> None:
    older, newer = write(
        engine,
        NewMemory(content="Kai lives in Lyon.", vector=near(1, 0.0), kind=memory_pb2.MEMORY_KIND_FACT,
                  entity="person:kai", valid_from_s=1_700_000_000),
        NewMemory(content="Kai is in Oslo these days.", vector=near(2, 0.4), kind=memory_pb2.MEMORY_KIND_FACT,
                  entity="person:kai", valid_from_s=1_700_100_000),
    )  # fmt: skip
    engine.reranker = _Holding("Kai lives in Lyon.", "Kai is in Oslo these days.")  # type: ignore[assignment]
    engine.recall_judge = _Judging()  # type: ignore[assignment]
    assert _ranked(engine, "where does Kai live")[:2] == [newer, older]
    assert engine.recall_judge.asked == []  # type: ignore[attr-defined]


class _Scoring(_Holding):
    """A reranker that gives each of its answers its own P(answers)."""

    def __init__(self, **relevance: float) -> None:
        super().__init__(*relevance)
        self.p = relevance

    def relevance(self, questions: Sequence[str], statements: Sequence[str]) -> list[float]:
        return [self.p.get(s, 0.1) for s in statements]


def test_a_newer_event_comes_first_where_the_judge_says_it_replaces_the_fact_and_it_answers_no_worse(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Agents store many changes as events ("Noor emailed: Lumo Labs moved up"); the fact they replace is nearer the
    # question. A remark about the same entity is newer too, and replaces nothing.
    texts = ("Lumo Labs is on the Starter plan.", "Noor emailed: Lumo Labs moved up to the Scale plan today.",
             "Lumo Labs' team reacted with :tada: to the release notes.")  # fmt: skip
    fact, change, remark = write(
        engine,
        NewMemory(content=texts[0], vector=near(1, 0.0), kind=memory_pb2.MEMORY_KIND_FACT,
                  entity="customer:lumo-labs", valid_from_s=1_700_000_000),
        NewMemory(content=texts[1], vector=near(2, 0.5), kind=memory_pb2.MEMORY_KIND_EPISODE,
                  entity="customer:lumo-labs", valid_from_s=1_700_100_000),
        NewMemory(content=texts[2], vector=near(3, 0.9), kind=memory_pb2.MEMORY_KIND_EPISODE,
                  entity="customer:lumo-labs", valid_from_s=1_700_200_000),
    )  # fmt: skip
    question = "which plan is Lumo Labs on"
    engine.reranker = _Holding(*texts)  # type: ignore[assignment]
    engine.recall_judge = _Judging()  # type: ignore[assignment]
    assert _ranked(engine, question)[:3] == [fact, change, remark]
    assert sorted(engine.recall_judge.asked) == sorted((texts[0], later) for later in texts[1:])  # type: ignore[attr-defined]
    engine.recall_judge = _Judging((texts[0], texts[1]))  # type: ignore[assignment]
    assert _ranked(engine, question)[:3] == [change, fact, remark]
    # Both models misreading a remark as the fact's newer version is not enough when it answers worse than the fact.
    engine.recall_judge = _Judging((texts[0], texts[1]), (texts[0], texts[2]))  # type: ignore[assignment]
    engine.reranker = _Scoring(**{texts[0]: 0.97, texts[1]: 0.98, texts[2]: 0.6})  # type: ignore[assignment]
    assert _ranked(engine, question)[:3] == [change, fact, remark]
    assert (texts[0], texts[2]) not in engine.recall_judge.asked  # type: ignore[attr-defined]
    monkeypatch.setattr(recall_module, "EPISODES_BY_JUDGE", False)
    assert _ranked(engine, question)[:3] == [fact, change, remark]
