"""Expected answer types: the shape of a fact's value, the shapes a question can want, and their use in recall."""

from __future__ import annotations

import numpy as np
import pytest
import recall_engine
from recall_engine import fact, recall_scores

from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.answer_type import ValueType, expected_types, value_type
from memevo.sidecar.retrieval.recall import VALUE_TYPE_MISMATCH_WEIGHT, _value_type_factor

engine = recall_engine.engine  # the fixture
SCHEDULER = "service:scheduler"
T = ValueType


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("", T.NONE),
        ("   ", T.NONE),
        ("https://billing.internal.example.dev/api/v2", T.URL),
        ("git.example.dev/observability/opal-app", T.URL),
        ("see grpc://10.0.0.7:9000", T.URL),
        ("ana.lopez@example.com", T.EMAIL),
        ("2026-09-10", T.DATE),
        ("February 20, 2026", T.DATE),
        ("1 February, 2023", T.DATE),
        ("May 2023", T.DATE),
        ("12/31/2025", T.DATE),
        ("2019", T.DATE),
        ("Q3 2026", T.DATE),
        ("2023年5月", T.DATE),
        ("16-Mar-20", T.DATE),
        ("2019–20", T.DATE),  # a year anywhere, once the value is not an amount
        ("Beijing 2008", T.DATE),
        ("1500 users", T.QUANTITY),
        ("$2000", T.QUANTITY),
        ("25th", T.OTHER),  # a place in an order: "Where did Poland finish?"
        ("7:30-15:30", T.TIME),
        ("flexible hours with core time 13:00-16:00", T.TIME),
        ("9am", T.TIME),
        ("下午3点", T.TIME),
        ("$238,000", T.QUANTITY),
        ("20%", T.QUANTITY),
        ("3 replicas", T.QUANTITY),
        ("Esther Wang", T.OTHER),
        ("the Risk team", T.OTHER),
        ("Lagos (WAT)", T.OTHER),
        ("MongoDB 7", T.OTHER),
        ("eu-west-1", T.OTHER),
        ("may help", T.OTHER),
        ("GitHub Projects board #365", T.OTHER),
    ],
)
def test_value_shapes(value: str, shape: ValueType) -> None:
    assert value_type(value) is shape


NAMED = {T.OTHER, T.EMAIL}
TEMPORAL = {T.DATE, T.TIME}


@pytest.mark.parametrize(
    ("question", "wanted"),
    [
        ("Who should I page if the scheduler goes down?", NAMED),
        ("Whose laptop is this?", NAMED),
        ("When is Project Quill due?", TEMPORAL),
        ("What time does the standup start?", TEMPORAL),
        ("Which base URL does chat-proxy use?", {T.URL}),
        ("Where do I call the audit scheduler? I need its URL.", {T.URL}),
        ("What is the email address of Ann?", {T.EMAIL}),
        ("Where is William based?", {T.OTHER, T.URL}),
        ("How many replicas does it run?", {T.QUANTITY, T.DATE, T.OTHER}),
        ("Who owns the URL?", NAMED),  # "who" decides before a word naming an address
        ("What did Bob say when he left?", None),  # the first wh-word decides: "what" names no shape
        ("How do I deploy it when it breaks?", None),
        ("What is Onyx aiming for right now?", None),
        ("Tell me about Onyx.", None),
        ("How is Project Glacier doing?", {T.OTHER}),  # a state, in words: not its due date or budget
        ("How's the migration coming along?", {T.OTHER}),
        ("What's the status of the website?", {T.OTHER}),  # the state decides before a word naming an address
        ("When is the status review?", TEMPORAL),
        ("How are you?", None),
        ("项目进展怎么样？", {T.OTHER}),
        ("谁负责这个服务？", NAMED),
        ("这个项目什么时候到期？", TEMPORAL),
        ("他在哪里工作？", {T.OTHER, T.URL}),
        ("这个服务用什么数据库？", None),
    ],
)
def test_what_a_question_wants(question: str, wanted: set[ValueType] | None) -> None:
    expected = expected_types(question)
    assert (set(expected) if expected is not None else None) == wanted


def test_a_who_question_prefers_the_fact_naming_someone_over_a_closer_address(engine: Engine) -> None:
    """Neither text holds a query word but the entity's: the vectors favour the URL, the question's shape does not."""
    url = fact(
        engine, "At https://sched.dev.", entity=SCHEDULER, attribute="url", value="https://sched.dev", axis=1, tilt=0.0
    )
    person = fact(
        engine,
        "Esther Wang carries the pager.",
        entity=SCHEDULER,
        attribute="oncall",
        value="Esther Wang",
        axis=2,
        tilt=0.4,
    )
    plain = recall_scores(engine, "Scheduler down: what now?")
    assert plain[url] > plain[person]
    asked = recall_scores(engine, "Who should I page, the scheduler is down?")
    assert asked[person] > asked[url]
    assert columns_shape(engine, url) == T.URL
    assert columns_shape(engine, person) == T.OTHER


def test_a_question_after_a_state_prefers_the_fact_told_in_words_over_a_closer_date(engine: Engine) -> None:
    due = fact(engine, "Glacier is due on March 1.", entity="project:glacier", attribute="deadline", value="March 1",
               axis=1, tilt=0.0)  # fmt: skip
    state = fact(engine, "Glacier: blocked on the vendor.", entity="project:glacier", attribute="status",
                 value="blocked on the vendor", axis=2, tilt=0.4)  # fmt: skip
    plain = recall_scores(engine, "Glacier?")
    assert plain[due] > plain[state]
    asked = recall_scores(engine, "How is Glacier doing?")
    assert asked[state] > asked[due]


def columns_shape(engine: Engine, memory_id: int) -> ValueType:
    return ValueType(int(engine.columns.value_type[memory_id]))


def test_the_factor_judges_only_facts_and_only_when_a_candidate_fits() -> None:
    # The factor itself, not two recall scores (those also differ by the relevance decay between recalls).
    assert _value_type_factor("Who is on call?", np.zeros(0, dtype=np.uint8)).size == 0
    codes = np.asarray([T.URL, T.OTHER, T.NONE, T.DATE], dtype=np.uint8)
    lose = 1.0 - VALUE_TYPE_MISMATCH_WEIGHT
    assert _value_type_factor("Who is on call?", codes).tolist() == pytest.approx([lose, 1.0, 1.0, lose])
    assert _value_type_factor("When is it due?", codes).tolist() == pytest.approx([lose, lose, 1.0, 1.0])
    assert _value_type_factor("What is it?", codes).tolist() == [1.0] * 4
    # No candidate holds a date or a time: nothing is judged, an episode (NONE) keeps its place among facts.
    no_date = np.asarray([T.URL, T.OTHER, T.NONE], dtype=np.uint8)
    assert _value_type_factor("When did Alice join?", no_date).tolist() == [1.0] * 3
