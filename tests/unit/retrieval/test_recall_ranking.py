"""Recall ranking: the client's importance and strategies' outcome records, against a real engine (no server)."""

from __future__ import annotations

import numpy as np
import recall_engine
from recall_engine import DIMENSION, near, write

from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.recall import Recaller
from memevo.v1 import memory_pb2, memory_service_pb2

engine = recall_engine.engine  # the fixture


def _ranked(engine: Engine) -> list[int]:
    query_vector = np.zeros(DIMENSION, dtype=np.float32)
    query_vector[0] = 1.0
    query = RecallQuery(vector=query_vector, k=10)
    return [hit.memory.id for hit in Recaller(engine).recall(query)]


def test_importance_lifts_a_rated_memory_over_a_slightly_closer_passing_remark(engine: Engine) -> None:
    remark, fact = write(
        engine,
        NewMemory(content="remark naming the billing service", vector=near(1, 0.15), importance=2),
        NewMemory(
            content="billing service listens on port 8080",
            vector=near(2, 0.25),
            kind=memory_pb2.MEMORY_KIND_FACT,
            importance=8,
        ),
    )
    ranked = _ranked(engine)
    assert ranked.index(fact) < ranked.index(remark)


def test_importance_does_not_lift_a_far_match_over_a_close_one(engine: Engine) -> None:
    close, far = write(
        engine,
        NewMemory(content="close but unimportant", vector=near(1, 0.1), importance=1),
        NewMemory(content="important but far", vector=near(2, 1.2), importance=10),
    )
    assert _ranked(engine) == [close, far]


def test_unrated_memories_rank_by_match_alone(engine: Engine) -> None:
    farther, closer = write(
        engine,
        NewMemory(content="unrated and farther", vector=near(1, 0.3)),
        NewMemory(content="unrated and closer", vector=near(2, 0.1)),
    )
    assert _ranked(engine) == [closer, farther]


def _report(engine: Engine, memory_id: int, outcome: int, times: int) -> None:
    for _ in range(times):
        engine.report_outcome([memory_id], outcome=outcome, reward=None, retrieval_id="", note="")


def test_a_hard_tasks_only_strategy_is_not_ranked_under_a_log_line_for_its_failures(engine: Engine) -> None:
    strategy, log = write(
        engine,
        NewMemory(
            content="Playbook for deploying billing: canary first",
            vector=near(1, 0.3),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="deploy:billing",
            importance=5,
        ),
        NewMemory(content="Started deploying billing, ticket BIL-1", vector=near(2, 0.45), importance=5),
    )
    _report(engine, strategy, memory_service_pb2.OUTCOME_FAILURE, 6)
    assert _ranked(engine) == [strategy, log]


def _proven_and_failing_playbooks(engine: Engine, failing_task: str) -> tuple[int, int]:
    """A proven playbook for deploying search and a slightly closer one for ``failing_task`` that failed 6 times."""
    proven, failing = write(
        engine,
        NewMemory(
            content="Playbook for deploying search: blue-green",
            vector=near(1, 0.3),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="deploy:search",
            importance=5,
        ),
        NewMemory(
            content=f"Playbook for {failing_task}: by hand",
            vector=near(2, 0.25),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature=failing_task,
            importance=5,
        ),
    )
    _report(engine, proven, memory_service_pb2.OUTCOME_SUCCESS, 6)
    _report(engine, failing, memory_service_pb2.OUTCOME_FAILURE, 6)
    return proven, failing


def test_among_one_tasks_strategies_the_better_outcome_record_ranks_first(engine: Engine) -> None:
    proven, failing = _proven_and_failing_playbooks(engine, "deploy:search")
    assert _ranked(engine) == [proven, failing]


def test_between_tasks_the_closer_match_ranks_first_whatever_their_outcome_records(engine: Engine) -> None:
    # How often a task's strategies work says how hard the task is, not which task a question asks about.
    proven, failing = _proven_and_failing_playbooks(engine, "deploy:auth")
    assert _ranked(engine) == [failing, proven]
