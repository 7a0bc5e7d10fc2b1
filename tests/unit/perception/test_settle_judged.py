"""Settling the pair judge's verdicts: retire when sure, doubt when unsure, or only propose when a second judge
decides; one doubt per statement, named by the likeliest replacement judged so far."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.perception.conflicts import JUDGE_ASK, JUDGE_DOUBT, JUDGE_SURE
from memevo.v1 import memory_pb2

DIMENSION = 8
DAY_S = 86_400.0
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))
    try:
        yield engine
    finally:
        engine.close()


def statements(engine: Engine, count: int) -> list[int]:
    """``count`` unrelated statements about one entity, a day apart in world time (the rules settle nothing)."""
    vectors = np.eye(DIMENSION, dtype=np.float32)[:count]
    items = [
        NewMemory(
            content=f"statement {i}",
            vector=vectors[i],
            kind=memory_pb2.MEMORY_KIND_FACT,
            entity="person:ana",
            valid_from_s=1e9 + i * DAY_S,
        )
        for i in range(count)
    ]
    return [written.memory.id for written in engine.remember(items)]


Verdict = tuple[int, int, float]
"""(newer id, older id, P(REPLACES))."""


def settle(engine: Engine, verdicts: list[Verdict], *, escalates: bool) -> dict[int, tuple[int, int, int]]:
    engine.store.apply(functools.partial(engine._settle_judged, verdicts=verdicts, escalates=escalates))
    found, _ = engine.get(list(range(1, engine.store.next_id)))
    return {m.id: (m.state, m.superseded_by, m.possibly_outdated_by) for m in found}


def test_the_local_judge_retires_when_sure_and_doubts_when_unsure(engine: Engine) -> None:
    old, doubted, newer = statements(engine, 3)
    states = settle(engine, [(newer, old, JUDGE_SURE), (newer, doubted, JUDGE_DOUBT)], escalates=False)
    assert states[old] == (OBSOLETE, newer, 0)
    assert states[doubted] == (ACTIVE, 0, newer)
    assert settle(engine, [(newer, doubted, JUDGE_DOUBT - 0.01)], escalates=False)[doubted] == (ACTIVE, 0, newer)


def test_with_a_second_judge_the_local_one_only_proposes(engine: Engine) -> None:
    old, unsure, newer = statements(engine, 3)
    states = settle(engine, [(newer, old, 0.99), (newer, unsure, JUDGE_ASK - 0.01)], escalates=True)
    assert states[old] == (ACTIVE, 0, newer)  # doubted for the reviewer, not retired
    assert states[unsure] == (ACTIVE, 0, 0)


def test_a_likelier_replacement_takes_the_doubt_over_and_a_less_likely_one_does_not(engine: Engine) -> None:
    old, distractor, change, later = statements(engine, 4)
    assert settle(engine, [(distractor, old, 0.6)], escalates=True)[old] == (ACTIVE, 0, distractor)
    assert settle(engine, [(change, old, 0.8)], escalates=True)[old] == (ACTIVE, 0, change)
    assert settle(engine, [(later, old, 0.7)], escalates=True)[old] == (ACTIVE, 0, change)


def test_a_statement_written_late_is_the_one_doubted(engine: Engine) -> None:
    earlier, later = statements(engine, 2)
    # The judge reads the newest write as "newer"; here that write is the older in world time.
    states = settle(engine, [(earlier, later, 0.8)], escalates=True)
    assert states[earlier] == (ACTIVE, 0, later)
    assert states[later] == (ACTIVE, 0, 0)
