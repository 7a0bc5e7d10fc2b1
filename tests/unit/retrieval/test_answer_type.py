"""Expected answer types: the shape of a fact's value, the shapes a question can want, and their use in recall."""

from __future__ import annotations

import numpy as np
import pytest
import recall_engine
from recall_engine import fact, near, recall_scores, write

from memevo.sidecar.domain import NewMemory
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.answer_type import ValueType, expected_types, tells_time, value_type
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


def test_the_factor_judges_facts_against_facts_and_only_when_a_candidate_fits() -> None:
    # The factor itself, not two recall scores (those also differ by the relevance decay between recalls).
    none = np.zeros(0, dtype=np.bool_)
    assert _value_type_factor("Who is on call?", np.zeros(0, dtype=np.uint8), none).size == 0
    codes = np.asarray([T.URL, T.OTHER, T.NONE, T.DATE], dtype=np.uint8)
    undated = np.zeros(4, dtype=np.bool_)
    lose = 1.0 - VALUE_TYPE_MISMATCH_WEIGHT
    assert _value_type_factor("Who is on call?", codes, undated).tolist() == pytest.approx([lose, 1.0, 1.0, lose])
    assert _value_type_factor("When is it due?", codes, undated).tolist() == pytest.approx([lose, lose, 1.0, 1.0])
    assert _value_type_factor("What is it?", codes, undated).tolist() == [1.0] * 4
    # No candidate holds a date or a time: nothing is judged, an episode (NONE) keeps its place among facts.
    no_date = np.asarray([T.URL, T.OTHER, T.NONE], dtype=np.uint8)
    assert _value_type_factor("When did Alice join?", no_date, np.zeros(3, dtype=np.bool_)).tolist() == [1.0] * 3


def test_a_when_question_judges_memories_without_a_value_by_whether_their_text_tells_a_time() -> None:
    lose = 1.0 - VALUE_TYPE_MISMATCH_WEIGHT
    shapes = np.asarray([T.NONE, T.NONE, T.OTHER, T.NONE], dtype=np.uint8)
    dated = np.asarray([True, False, False, False])
    # Episodes against episodes only: the fact (OTHER) is judged by its value, and no candidate's value is a date.
    assert _value_type_factor("When did Ana visit Lisbon?", shapes, dated).tolist() == pytest.approx(
        [1.0, lose, 1.0, lose]
    )
    # Only a "when" question asks for a time; and without a dated episode none is judged.
    assert _value_type_factor("Who visited Lisbon?", shapes, dated).tolist() == [1.0] * 4
    assert _value_type_factor("Where did Ana go?", shapes, dated).tolist() == [1.0] * 4
    assert _value_type_factor("When did Ana visit Lisbon?", shapes, np.zeros(4, dtype=np.bool_)).tolist() == [1.0] * 4
    # A fact's date value and an episode's dated text each fit in their own group.
    mixed = np.asarray([T.DATE, T.OTHER, T.NONE, T.NONE], dtype=np.uint8)
    assert _value_type_factor("什么时候去的里斯本？", mixed, np.asarray([False, False, True, False])).tolist() == (
        pytest.approx([1.0, lose, 1.0, lose])
    )


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("We got back from Lisbon yesterday.", True),
        ("I went to a support group two weeks ago!", True),
        ("Last Saturday we painted the fence.", True),
        ("We are moving next month.", True),
        ("The launch slipped to 12 March.", True),
        ("She joined in 2019.", True),
        ("Stand-up is at 9:30.", True),
        ("See you this weekend?", True),
        ("我昨天去了图书馆。", True),
        ("会议定在3月5日。", True),
        ("I love painting sunsets.", False),
        ("May I ask what you think?", False),  # a month's name alone is not a date
        ("The cluster has 2 nodes and 64 GB.", False),
        ("Budget: $2019.50", False),
        ("", False),
    ],
)
def test_whether_a_text_tells_a_time(text: str, told: bool) -> None:
    assert tells_time(text) is told


def test_a_when_question_prefers_the_episode_that_dates_the_event_over_a_closer_one(engine: Engine) -> None:
    """Neither text holds a query word; the vectors favour the undated episode, the question's shape the dated one."""
    undated = NewMemory(content="Ana loved the tiles and the trams.", vector=near(1, 0.0))
    dated = NewMemory(content="Ana was back from her trip yesterday.", vector=near(2, 0.4))
    undated_id, dated_id = write(engine, undated, dated)
    plain = recall_scores(engine, "Ana and Lisbon?")
    assert plain[undated_id] > plain[dated_id]
    asked = recall_scores(engine, "When did Ana go to Lisbon?")
    assert asked[dated_id] > asked[undated_id]
    assert bool(engine.columns.tells_time[dated_id])
    assert not bool(engine.columns.tells_time[undated_id])
