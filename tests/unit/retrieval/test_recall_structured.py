"""Recall ranking with structured evidence: fields named by the query, task signatures, kinds (real engine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import recall_engine
from recall_engine import DIMENSION, near, write

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.perception.feedback import probability_better
from memevo.sidecar.retrieval.lexical import tokenize
from memevo.sidecar.retrieval.recall import (
    EPISODE_FACTOR,
    REPLACED_LESSON_FACTOR,
    Recaller,
    beat_probabilities,
    names_field,
    prefer_newer_lessons,
    rank_factors,
    share_task_match,
)
from memevo.sidecar.store.columns import NO_CODE
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture
FACT = memory_pb2.MEMORY_KIND_FACT
EPISODE = memory_pb2.MEMORY_KIND_EPISODE
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY


def _ranked(engine: Engine, text: str) -> list[int]:
    query = RecallQuery(vector=near(1, 0.0), text=text, k=10)
    return [hit.memory.id for hit in Recaller(engine).recall(query)]


def test_a_fact_whose_attribute_the_query_names_outranks_a_closer_remark_about_the_entity(engine: Engine) -> None:
    remark, fact = write(
        engine,
        NewMemory(content="Bianca was out sick today.", vector=near(1, 0.2), entity="user:bianca"),
        NewMemory(
            content="Don't ping Bianca outside 9:00-17:00.",
            vector=near(2, 0.75),
            kind=FACT,
            entity="user:bianca",
            fact_attribute="working_hours",
            fact_value="9:00-17:00",
        ),
    )
    assert _ranked(engine, "What are Bianca's working hours?") == [fact, remark]


def test_the_field_a_query_names_decides_between_two_facts_that_both_say_the_word(engine: Engine) -> None:
    """Same kind and entity, both texts say "port": the fact declared to be about the port wins."""
    region, port = write(
        engine,
        NewMemory(
            content="billing answers on port 443 only inside eu-west-1.",
            vector=near(1, 0.05),
            kind=FACT,
            entity="service:billing",
            fact_attribute="region",
            fact_value="eu-west-1",
        ),
        NewMemory(
            content="billing moved to port 8443.",
            vector=near(2, 0.7),
            kind=FACT,
            entity="service:billing",
            fact_attribute="port",
            fact_value="8443",
        ),
    )
    assert _ranked(engine, "Which port does billing listen on?") == [port, region]


def test_a_strategy_for_the_task_outranks_a_closer_log_line_of_that_task(engine: Engine) -> None:
    log, strategy = write(
        engine,
        NewMemory(
            content="Started getting a code review from Ximena; notes are in XIM-8271.",
            vector=near(1, 0.2),
            entity="user:ximena",
        ),
        NewMemory(
            content="Playbook: book a 20-minute walkthrough before the pull request.",
            vector=near(2, 0.75),
            kind=STRATEGY,
            entity="user:ximena",
            task_signature="code_review:ximena",
        ),
    )
    assert _ranked(engine, "How should I ask Ximena for a code review?") == [strategy, log]


def test_a_fact_outranks_an_episode_about_the_same_entity_that_is_as_close(engine: Engine) -> None:
    """Nothing in the query names a field: the episode's slight cosine lead loses to the kind prior."""
    episode, fact = write(
        engine,
        NewMemory(content="Bianca was out sick today.", vector=near(1, 0.1), entity="user:bianca"),
        NewMemory(
            content="Bianca sits by the window.",
            vector=near(2, 0.2),
            kind=FACT,
            entity="user:bianca",
            fact_attribute="desk",
            fact_value="window",
        ),
    )
    assert _ranked(engine, "Tell me about Bianca") == [fact, episode]


def test_versions_of_a_task_are_ordered_by_evidence_not_by_wording(engine: Engine) -> None:
    """The older version is worded closer to the query; the agent rated the newer lesson as more important."""
    older, newer = write(
        engine,
        NewMemory(
            content="Strategy for deploying billing: copy the image by hand.",
            vector=near(1, 0.1),
            kind=STRATEGY,
            task_signature="deploy:billing",
            importance=3,
        ),
        NewMemory(
            content="Playbook: canary at 5 %, then promote.",
            vector=near(2, 0.9),
            kind=STRATEGY,
            task_signature="deploy:billing",
            importance=9,
        ),
    )
    assert _ranked(engine, "How should I deploy billing?")[:2] == [newer, older]


def test_an_unrelated_closer_strategy_keeps_its_own_match(engine: Engine) -> None:
    """Sharing is within one signature: another task's strategy is not lifted by a close one."""
    close, far_other = write(
        engine,
        NewMemory(content="Playbook A", vector=near(1, 0.1), kind=STRATEGY, task_signature="a", importance=3),
        NewMemory(content="Playbook B", vector=near(2, 0.9), kind=STRATEGY, task_signature="b", importance=9),
    )
    assert _ranked(engine, "")[:2] == [close, far_other]


def test_the_columns_hold_signature_and_fields_and_survive_a_restart(tmp_path: Path) -> None:
    config = SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION)
    engine = Engine(config)
    strategy, fact, plain = write(
        engine,
        NewMemory(content="s", vector=near(1, 0.1), kind=STRATEGY, task_signature="deploy:x", entity="service:x"),
        NewMemory(
            content="f", vector=near(2, 0.1), kind=FACT, entity="service:x", fact_attribute="port", fact_value="80"
        ),
        NewMemory(content="p", vector=near(3, 0.1)),
    )

    def described(engine: Engine) -> list[tuple[str, str]]:
        columns = engine.columns
        out = []
        for memory_id in (strategy, fact, plain):
            signature, fields = int(columns.signature[memory_id]), int(columns.fields[memory_id])
            out.append(
                (
                    columns.signatures.string(signature) if signature != NO_CODE else "",
                    columns.field_sets.string(fields) if fields != NO_CODE else "",
                )
            )
        return out

    before = described(engine)
    assert before[0] == ("deploy:x", "service:x\x1f\x1fdeploy:x")
    assert before[1] == ("", "service:x\x1fport\x1f")
    assert before[2] == ("", "")
    engine.close()
    reopened = Engine(config)
    try:
        assert described(reopened) == before
    finally:
        reopened.close()


def test_possessives_are_not_words() -> None:
    assert tokenize("What's Bianca's role? It’s Jana’s call.") == ["bianca", "role", "jana", "call"]
    assert tokenize("The 's' key; Paris's cafés") == ["s", "key", "pari", "cafés"]  # "pari": Paris, stemmed


def test_a_query_word_names_a_field_word_by_a_shared_stem() -> None:
    assert names_field("leads", frozenset({"lead"}))
    assert names_field("repo", frozenset({"repository"}))
    assert names_field("port", frozenset({"port"}))
    assert not names_field("own", frozenset({"owner"}))  # too short to match on a prefix
    assert not names_field("rep", frozenset({"repository"}))
    assert names_field("editor", frozenset({"edit"}))
    assert not names_field("editor", frozenset({"language"}))


def test_task_match_is_shared_within_a_signature_only() -> None:
    match = np.asarray([0.9, 0.4, 0.7, 0.2, 0.5])
    signature = np.asarray([3, 3, NO_CODE, 5, NO_CODE], dtype=np.int32)
    assert share_task_match(match, signature).tolist() == [0.9, 0.9, 0.7, 0.2, 0.5]
    assert share_task_match(match, np.full(5, NO_CODE, dtype=np.int32)).tolist() == match.tolist()


@pytest.mark.parametrize(
    ("record_a", "record_b"),
    [((13, 14), (1, 3)), ((20, 2), (0, 0)), ((20, 2), (0, 2)), ((5, 5), (6, 1)), ((0, 0), (0, 0)), ((3, 0), (0, 3))],
)
def test_recall_judges_which_strategy_is_better_as_demotion_does(
    record_a: tuple[int, int], record_b: tuple[int, int]
) -> None:
    a = memory_pb2.Memory(id=1, successes=record_a[0], failures=record_a[1])
    b = memory_pb2.Memory(id=2, successes=record_b[0], failures=record_b[1])
    alpha = 1.0 + np.asarray([record_a[0], record_b[0]], dtype=np.float64)
    beta = 1.0 + np.asarray([record_a[1], record_b[1]], dtype=np.float64)
    beats = beat_probabilities(alpha, beta)
    assert beats[0, 1] == pytest.approx(probability_better(a, b), abs=0.03)
    assert beats[0, 1] + beats[1, 0] == pytest.approx(1.0)


def test_the_newest_lesson_of_a_task_leads_unless_another_reliably_beats_it() -> None:
    match = np.asarray([0.9, 0.9, 0.9, 0.5, 0.4])
    ids = np.asarray([10, 20, 30, 40, 50])
    signature = np.asarray([3, 3, 3, NO_CODE, 7], dtype=np.int32)
    untried = prefer_newer_lessons(
        match, ids, signature, np.asarray([6.0, 3, 0, 0, 0]), np.asarray([5.0, 3, 1, 0, 0]), 0.95
    )
    assert untried.tolist() == pytest.approx([0.9 * REPLACED_LESSON_FACTOR] * 2 + [0.9, 0.5, 0.4])
    # The newest failed five times: the middle one (3 of 6) now beats it reliably and leads.
    failed = prefer_newer_lessons(
        match, ids, signature, np.asarray([6.0, 3, 0, 0, 0]), np.asarray([5.0, 3, 5, 0, 0]), 0.95
    )
    assert failed.tolist() == pytest.approx([0.9 * REPLACED_LESSON_FACTOR, 0.9, 0.9 * REPLACED_LESSON_FACTOR, 0.5, 0.4])
    # Untried, an older lesson keeps its match (its trust ranks it): the newer one answers no outcome of it.
    untried_older = prefer_newer_lessons(match, ids, signature, np.zeros(5), np.asarray([0.0, 0, 1, 0, 0]), 0.95)
    assert untried_older.tolist() == pytest.approx([0.9, 0.9, 0.9, 0.5, 0.4])
    # A strategy alone in its task keeps its match.
    alone = prefer_newer_lessons(
        match, ids, np.asarray([3, NO_CODE, NO_CODE, NO_CODE, 7], dtype=np.int32), *[np.zeros(5)] * 2, 0.95
    )
    assert alone.tolist() == match.tolist()


def test_an_episode_keeps_a_share_of_the_score_and_a_store_of_episodes_ranks_as_before() -> None:
    ones = np.ones(3)
    kinds = np.asarray([EPISODE, FACT, EPISODE])
    factor = rank_factors(
        ones,
        ones,
        np.zeros(3),
        np.zeros(3, dtype=np.uint8),
        kinds,
        np.zeros(3, dtype=bool),
        np.zeros(3, dtype=np.int32),
    )
    assert factor[0] == pytest.approx(EPISODE_FACTOR * factor[1])
    assert factor[0] == factor[2]


def test_each_tasks_best_strategy_counts_as_fully_accurate_and_keeps_its_lead_within_the_task() -> None:
    # Task 3 usually fails (its best lesson is at 0.3), task 5 usually works: which task the question asks about
    # is for the match to say, so both tasks' best strategies rank alike; within task 3 the better one still leads.
    accuracy = np.asarray([0.3, 0.2, 0.9, 0.4, 0.5, 0.6])
    kinds = np.asarray([STRATEGY, STRATEGY, STRATEGY, FACT, STRATEGY, STRATEGY])
    signature = np.asarray([3, 3, 5, NO_CODE, NO_CODE, NO_CODE], dtype=np.int32)
    ones = np.ones(6)
    factor = rank_factors(
        accuracy, ones, np.zeros(6), np.zeros(6, dtype=np.uint8), kinds, np.zeros(6, dtype=bool), signature
    )
    assert factor[0] == pytest.approx(factor[2])
    assert factor[1] < factor[0]
    # Strategies without a task are shifted together: the better of them counts as 1, the other keeps its deficit.
    assert factor[5] == pytest.approx(factor[2])
    assert factor[4] < factor[5]
    # A fact's accuracy is its own.
    fact_alone = rank_factors(
        accuracy[3:4],
        ones[:1],
        np.zeros(1),
        np.zeros(1, dtype=np.uint8),
        kinds[3:4],
        np.zeros(1, dtype=bool),
        signature[3:4],
    )
    assert factor[3] == pytest.approx(fact_alone[0])
