"""A how-to question lifts the agent's strategies over closer facts (real engine, no server)."""

from __future__ import annotations

import pytest
import recall_engine
from recall_engine import near, recall_scores, write

from memevo.sidecar.domain import NewMemory
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.intent import asks_how
from memevo.sidecar.retrieval.recall import PROCEDURE_BOOST
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture
FACT = memory_pb2.MEMORY_KIND_FACT
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY


@pytest.mark.parametrize(
    "text",
    [
        "How do I deploy billing?",
        "how should we handle an outage of the gateway",
        "How can I get Ximena to review a PR?",
        "What should I do when export-proxy goes down?",
        "What do I do about the flaky CI of billing?",
        "Not sure what to do when the disk fills up.",
        "What's the right way to roll out a new build of billing?",
        "Is there a recommended approach for schema changes?",
        "Show me the runbook for failover.",
        "What are the steps to rotate the keys?",
        "How to write the release notes?",
        "如何部署计费服务？",
        "服务挂了该怎么办",
        "发布的步骤是什么",
    ],
)
def test_questions_that_ask_for_a_procedure(text: str) -> None:
    assert asks_how(text)


@pytest.mark.parametrize(
    "text",
    [
        "Which version does billing run?",
        "How many times did Audrey hike?",
        "How much does the plan cost?",
        "How does Maria describe the camping trip?",
        "How did the migration go?",
        "What should I order for Zane at the team lunch?",
        "What's the best way to reach Nadia?",  # a preference, not a procedure
        "Who should I page if billing goes down?",
        "Show me how the graph looks",
        "计费服务的负责人是谁？",
        "",
    ],
)
def test_questions_that_ask_for_something_else(text: str) -> None:
    assert not asks_how(text)


def test_a_how_to_question_ranks_the_lesson_over_a_closer_fact(engine: Engine) -> None:
    """Neither text holds a query word, so only the question's wording differs between the two queries."""
    fact, lesson = write(
        engine,
        NewMemory(content="Runs v2.3 in eu-west-1.", vector=near(1, 0.2), kind=FACT),
        NewMemory(content="Canary at 5 %, then promote.", vector=near(2, 0.45), kind=STRATEGY),
    )
    plain = recall_scores(engine, "Should I deploy billing?")
    asked = recall_scores(engine, "How should I deploy billing?")
    assert plain[fact] > plain[lesson]
    assert asked[lesson] > asked[fact]
    # Two recalls apart, relevance has decayed a little (more on a loaded machine): 1e-3 is far below the boost.
    assert asked[fact] == pytest.approx(plain[fact], rel=1e-3)
    assert asked[lesson] == pytest.approx(plain[lesson] * PROCEDURE_BOOST, rel=1e-3)
