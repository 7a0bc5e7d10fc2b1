"""A question that names an entity prefers memories about it over closer ones about another of its type."""

from __future__ import annotations

import numpy as np
import pytest
import recall_engine
from recall_engine import fact, near, recall_scores, write

from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.lexical import tokenize
from memevo.sidecar.retrieval.recall import ENTITY_MISMATCH_WEIGHT, Recaller
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture
FACT = memory_pb2.MEMORY_KIND_FACT


def _contact(engine: Engine, content: str, entity: str, tilt: float, axis: int) -> int:
    value = content.rsplit(" ", 1)[-1]
    return fact(engine, content, entity=entity, attribute="contact", value=value, axis=axis, tilt=tilt)


def test_the_named_person_wins_over_a_namesake_whose_memory_is_worded_like_the_question(engine: Engine) -> None:
    other = _contact(engine, "The best way to reach Nadia Dubois is a Loom video.", "user:nadia-dubois", 0.1, 1)
    named = _contact(engine, "Nadia Yilmaz prefers a phone call.", "user:nadia-yilmaz", 0.3, 2)
    without_name = recall_scores(engine, "What's the best way to reach Nadia?")
    assert without_name[other] > without_name[named]  # the question alone cannot tell them apart
    scores = recall_scores(engine, "What's the best way to reach Nadia Yilmaz?")
    assert max(scores, key=scores.__getitem__) == named


def test_the_named_service_wins_over_one_that_shares_a_word_of_its_name(engine: Engine) -> None:
    """ "the warehouse store" half-names warehouse-indexer too: a memory worded like the question must not win by it."""
    other = fact(
        engine,
        "Production now runs v2.8.2 of warehouse-indexer.",
        entity="service:warehouse-indexer",
        attribute="version",
        value="v2.8.2",
        axis=1,
        tilt=0.1,
    )
    named = fact(
        engine,
        "Rolled the warehouse-store service forward to v3.0.6.",
        entity="service:warehouse-store",
        attribute="version",
        value="v3.0.6",
        axis=2,
        tilt=1.0,
    )
    plain = recall_scores(engine, "Which version is running in production?")
    assert plain[other] > 1.2 * plain[named]  # much closer by cosine, and by words
    scores = recall_scores(engine, "Which version of the warehouse store is running in production?")
    assert max(scores, key=scores.__getitem__) == named


def test_a_memory_about_an_entity_of_another_type_keeps_its_match(engine: Engine) -> None:
    """ "What does Bianca lead?" may be answered by the project's memory: about something else, not someone else."""
    person = _contact(engine, "Bianca Rossi prefers email.", "user:bianca-rossi", 0.4, 1)
    [project] = write(
        engine,
        NewMemory(content="Kestrel is led by Bianca Rossi.", vector=near(2, 0.1), kind=FACT, entity="project:kestrel"),
    )
    [namesake] = write(
        engine,
        NewMemory(content="Leads: Bianca Conti.", vector=near(3, 0.1), kind=FACT, entity="user:bianca-conti"),
    )
    plain = recall_scores(engine, "Which project does she lead?")
    named = recall_scores(engine, "Which project does Bianca Rossi lead?")
    # The project's memory is not scaled by the entity evidence; the namesake is.
    assert named[project] / plain[project] > named[namesake] / plain[namesake]
    assert max(named, key=named.__getitem__) == project
    assert person in named


def test_a_memory_of_an_unnamed_entity_loses_the_weight_times_the_best_share(engine: Engine) -> None:
    """Nothing of Omar's memory matches either question by words, so only the entity factor moves its score."""
    _contact(engine, "Prefers a phone call.", "user:nadia-yilmaz", 0.2, 1)
    unnamed = _contact(engine, "Signal, always.", "user:omar-haddad", 0.3, 2)
    plain = recall_scores(engine, "Any news there?")
    named = recall_scores(engine, "Any news from Nadia Yilmaz?")
    # Two recalls apart, relevance has decayed a little (more on a loaded machine): 1e-3 is far below the weight.
    assert named[unnamed] == pytest.approx(plain[unnamed] * (1.0 - ENTITY_MISMATCH_WEIGHT), rel=1e-3)


def test_no_entity_named_leaves_every_match_alone(engine: Engine) -> None:
    # The entity factor itself, not two recall scores: those also differ by the relevance decay between the
    # two writes, which grows with the machine's load.
    first = _contact(engine, "Prefers a phone call.", "user:nadia-yilmaz", 0.2, 1)
    second = _contact(engine, "Prefers a phone call!", "user:omar-haddad", 0.2, 2)
    codes = engine.columns.entity[np.asarray([first, second])]
    recaller = Recaller(engine)
    # "omar" is half of Omar Haddad's name (both words held by one memory: equal idf); Nadia's memory loses
    # the weight times that half.
    half = 1.0 - ENTITY_MISMATCH_WEIGHT * 0.5
    for question, expected in (("Who prefers a phone call?", [1.0, 1.0]), ("Does Omar prefer a call?", [half, 1.0])):
        query = RecallQuery(vector=near(1, 0.0), text=question, k=10)
        factor = recaller._entity_factor(query, list(dict.fromkeys(tokenize(question))), codes)
        assert factor.tolist() == pytest.approx(expected)
