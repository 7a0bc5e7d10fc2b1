"""The candidates stage of the pair judge: which older statements a write hands the judge.

An engine without a judge thread, whose perception queues into a queue the test reads: a statement about an entity
offers that entity's nearest current statements (at most JUDGE_CANDIDATES, however far their vectors), never
another entity's and never an episode; a statement about no entity offers its word matches about none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.perception.conflicts import JUDGE_CANDIDATES
from memevo.sidecar.perception.judging import JudgeQueue
from memevo.v1 import memory_pb2

DIMENSION = 16
DAY_S = 86_400.0
FACT = memory_pb2.MEMORY_KIND_FACT
EPISODE = memory_pb2.MEMORY_KIND_EPISODE


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))
    engine.perceiver.judgements = JudgeQueue()
    try:
        yield engine
    finally:
        engine.close()


def write(engine: Engine, content: str, seed: int, *, entity: str = "", kind: int = FACT, day: int = 0) -> int:
    vector = np.random.default_rng(seed).standard_normal(DIMENSION).astype(np.float32)  # mutual cosines near 0
    item = NewMemory(content=content, vector=vector, kind=kind, entity=entity, valid_from_s=1e9 + day * DAY_S)
    return engine.remember([item])[0].memory.id


def queued(engine: Engine) -> dict[int, set[int]]:
    """What was handed to the judge since the last call: newer id -> older ids."""
    assert engine.perceiver.judgements is not None
    taken = engine.perceiver.judgements.take(10_000)
    engine.perceiver.judgements.done(taken)
    return {item.newer: set(item.older) for item in taken}


def test_an_entitys_statements_are_candidates_however_far_and_no_one_elses(engine: Engine) -> None:
    texts = ("Ana lives in Lisbon with two cats.", "Ana is allergic to peanuts.", "Ana plays the cello on Sundays.")
    mine = [write(engine, text, i, entity="person:ana", day=i) for i, text in enumerate(texts)]
    write(engine, "Ben note about his week", 10, entity="person:ben", day=3)
    write(engine, "Ana met a friend for coffee", 11, entity="person:ana", kind=EPISODE, day=4)
    queued(engine)
    newer = write(engine, "Ana changed jobs this month", 12, entity="person:ana", day=5)
    assert queued(engine) == {newer: set(mine)}


def test_at_most_the_nearest_few_of_an_entity_are_judged(engine: Engine) -> None:
    texts = (
        "Ana plays the cello on Sundays.",
        "Ana is allergic to peanuts.",
        "Ana learnt chess from her grandfather.",
        "Ana sails a small dinghy in summer.",
        "Ana writes her side projects in Rust.",
        "Ana has season tickets for the opera.",
        "Ana keeps a bonsai on her desk.",
    )
    assert len(texts) > JUDGE_CANDIDATES
    for i, text in enumerate(texts):
        write(engine, text, i, entity="person:ana", day=i)
    queued(engine)
    newer = write(engine, "Ana has a new fact to state", 99, entity="person:ana", day=20)
    (older,) = queued(engine).values()
    assert len(older) == JUDGE_CANDIDATES
    assert newer not in older


def test_a_statement_about_no_entity_offers_its_word_matches_about_none(engine: Engine) -> None:
    java = write(engine, "User wants code examples in Java.", 1, day=0)
    write(engine, "Ana wants code examples in Go.", 2, entity="person:ana", day=1)
    write(engine, "The office plants need water on Fridays.", 3, day=2)
    queued(engine)
    kotlin = write(engine, "Switch my code examples to Kotlin please.", 4, day=3)
    assert queued(engine) == {kotlin: {java}}


def test_an_episode_offers_nothing(engine: Engine) -> None:
    write(engine, "Ana lives in Lisbon", 1, entity="person:ana", day=0)
    queued(engine)
    write(engine, "Ana flew to Lisbon for a conference", 2, entity="person:ana", kind=EPISODE, day=1)
    assert queued(engine) == {}
