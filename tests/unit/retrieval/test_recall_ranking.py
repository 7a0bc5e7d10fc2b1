"""Recall ranking: the client's importance and strategies' outcome records, against a real engine (no server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.recall import Recaller
from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 8


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))
    yield engine
    engine.close()


def _near(axis: int, amount: float) -> npt.NDArray[np.float32]:
    """The query direction (axis 0) tilted towards ``axis`` (> 0): cosine to the query is 1 / sqrt(1 + amount**2)."""
    vector = np.zeros(DIMENSION, dtype=np.float32)
    vector[0] = 1.0
    vector[axis] = amount
    return vector


def _write(engine: Engine, *items: NewMemory) -> list[int]:
    return [w.memory.id for w in engine.remember(list(items))]


def _ranked(engine: Engine) -> list[int]:
    query_vector = np.zeros(DIMENSION, dtype=np.float32)
    query_vector[0] = 1.0
    query = RecallQuery(vector=query_vector, k=10)
    return [hit.memory.id for hit in Recaller(engine).recall(query)]


def test_importance_lifts_a_rated_memory_over_a_slightly_closer_passing_remark(engine: Engine) -> None:
    remark, fact = _write(
        engine,
        NewMemory(content="remark naming the billing service", vector=_near(1, 0.15), importance=2),
        NewMemory(
            content="billing service listens on port 8080",
            vector=_near(2, 0.25),
            kind=memory_pb2.MEMORY_KIND_FACT,
            importance=8,
        ),
    )
    ranked = _ranked(engine)
    assert ranked.index(fact) < ranked.index(remark)


def test_importance_does_not_lift_a_far_match_over_a_close_one(engine: Engine) -> None:
    close, far = _write(
        engine,
        NewMemory(content="close but unimportant", vector=_near(1, 0.1), importance=1),
        NewMemory(content="important but far", vector=_near(2, 1.2), importance=10),
    )
    assert _ranked(engine) == [close, far]


def test_unrated_memories_rank_by_match_alone(engine: Engine) -> None:
    farther, closer = _write(
        engine,
        NewMemory(content="unrated and farther", vector=_near(1, 0.3)),
        NewMemory(content="unrated and closer", vector=_near(2, 0.1)),
    )
    assert _ranked(engine) == [closer, farther]


def _report(engine: Engine, memory_id: int, outcome: int, times: int) -> None:
    for _ in range(times):
        engine.report_outcome([memory_id], outcome=outcome, reward=None, retrieval_id="", note="")


def test_a_hard_tasks_only_strategy_is_not_ranked_under_a_log_line_for_its_failures(engine: Engine) -> None:
    strategy, log = _write(
        engine,
        NewMemory(
            content="Playbook for deploying billing: canary first",
            vector=_near(1, 0.3),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="deploy:billing",
            importance=5,
        ),
        NewMemory(content="Started deploying billing, ticket BIL-1", vector=_near(2, 0.45), importance=5),
    )
    _report(engine, strategy, memory_service_pb2.OUTCOME_FAILURE, 6)
    assert _ranked(engine) == [strategy, log]


def test_among_strategies_the_better_outcome_record_still_ranks_first(engine: Engine) -> None:
    proven, failing = _write(
        engine,
        NewMemory(
            content="Playbook for deploying search: blue-green",
            vector=_near(1, 0.3),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="deploy:search",
            importance=5,
        ),
        NewMemory(
            content="Playbook for deploying auth: by hand",
            vector=_near(2, 0.25),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="deploy:auth",
            importance=5,
        ),
    )
    _report(engine, proven, memory_service_pb2.OUTCOME_SUCCESS, 6)
    _report(engine, failing, memory_service_pb2.OUTCOME_FAILURE, 6)
    assert _ranked(engine) == [proven, failing]
