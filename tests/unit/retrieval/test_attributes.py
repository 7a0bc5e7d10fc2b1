"""Attribute names as vectors: phrasing, caching, failures, and the ranking evidence they give (real engine)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import recall_engine

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.errors import Unavailable
from memevo.sidecar.retrieval.attributes import (
    EXAMPLES,
    EXAMPLES_MIN_ENTITIES,
    REFRESH_GROWTH,
    REFRESH_GROWTH_PARTIAL,
    AttributeExamples,
    AttributeMatrices,
    AttributeMeanings,
    attribute_phrase,
)
from memevo.sidecar.retrieval.recall import (
    ATTRIBUTE_MISMATCH_WEIGHT,
    ATTRIBUTE_WEIGHT,
    KNOWN_REFRESH_GROWTH,
    READING_MIN_ATTRIBUTES,
    Recaller,
    _meaning_gaps,
    _with_attribute_evidence,
)
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture


@pytest.mark.parametrize(
    ("attribute", "phrase"),
    [
        ("working_hours", "working hours"),
        ("rateLimit", "rate limit"),
        ("HTTPPort", "http port"),
        ("user.contact", "user contact"),
        ("on-call", "on call"),
        ("v2_endpoint", "v2 endpoint"),
        ("饮食", "饮食"),
        (" _ ", ""),
    ],
)
def test_an_attribute_name_reads_as_words(attribute: str, phrase: str) -> None:
    assert attribute_phrase(attribute) == phrase
    assert attribute_phrase(attribute, "") == phrase


@pytest.mark.parametrize(
    ("attribute", "entity_type", "phrase"),
    [
        ("tracker", "project", "the project's tracker"),
        ("working_hours", "user", "the user's working hours"),
        ("rateLimit", "api_service", "the api service's rate limit"),
        (" _ ", "user", ""),
    ],
)
def test_an_attribute_said_of_an_entity_type(attribute: str, entity_type: str, phrase: str) -> None:
    assert attribute_phrase(attribute, entity_type) == phrase


class _Embedder:
    """Deterministic vectors per phrase; counts calls; can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        if self.fail:
            raise Unavailable("embedder down")
        rows = [np.random.default_rng(sum(map(ord, t))).normal(size=4) for t in texts]
        return np.asarray(rows, dtype=np.float32) * 3.0  # not unit: the cache normalises


def _unit(text: str) -> npt.NDArray[np.float32]:
    vector = np.random.default_rng(sum(map(ord, text))).normal(size=4).astype(np.float32)
    return vector / np.linalg.norm(vector)


def test_similarities_are_cosines_and_each_name_is_embedded_once() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed)
    query = _unit("diet") * 2.0 + _unit("location") * 0.5
    expected = [
        float(_unit("diet") @ (query / np.linalg.norm(query))),
        float(_unit("location") @ (query / np.linalg.norm(query))),
    ]
    first = meanings.similarities(["diet", "location", "", "diet"], query)
    assert first[[0, 1, 3]] == pytest.approx([expected[0], expected[1], expected[0]], rel=1e-5)
    assert np.isnan(first[2])
    meanings.similarities(["location", "diet"], query)
    assert embed.calls == [["diet", "location"]]


def test_a_name_said_of_an_entity_type_is_embedded_and_kept_apart_from_the_bare_name() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed)
    query = _unit("the user's diet")
    said = meanings.similarities(["diet", "diet", ""], query, ["user", "", "user"])
    assert said[0] == pytest.approx(1.0, rel=1e-5)
    assert said[1] == pytest.approx(float(_unit("diet") @ query), rel=1e-5)
    assert np.isnan(said[2])
    meanings.similarities(["diet"], query, ["user"])
    assert embed.calls == [["the user's diet", "diet"]]


def test_a_failed_embedding_is_no_evidence_and_is_tried_again() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed)
    embed.fail = True
    assert np.isnan(meanings.similarities(["diet"], _unit("diet"))).all()
    embed.fail = False
    assert meanings.similarities(["diet"], _unit("diet"))[0] == pytest.approx(1.0, rel=1e-5)
    assert len(embed.calls) == 2


def test_the_cache_keeps_the_most_recently_used_names() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed, capacity=2)
    query = _unit("a")
    meanings.similarities(["a", "b"], query)
    meanings.similarities(["a"], query)  # a is now the most recent
    meanings.similarities(["c"], query)  # evicts b
    meanings.similarities(["a", "c"], query)
    assert embed.calls == [["a", "b"], ["c"]]
    meanings.similarities(["b"], query)
    assert embed.calls[-1] == ["b"]


def test_a_zero_query_vector_gives_no_evidence() -> None:
    meanings = AttributeMeanings(_Embedder())
    assert np.isnan(meanings.similarities(["diet"], np.zeros(4, dtype=np.float32))).all()


@pytest.fixture(scope="module")
def text_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("attributes")
    engine = Engine(SidecarConfig(data_dir=path, embedder=EmbedderConfig(kind="local")))
    yield engine
    engine.close()


def _facts_alike(engine: Engine, entity: str, text: str, values: dict[str, str]) -> list[int]:
    """One fact per attribute -> value, all with the same vector and the same words but the value; their ids."""
    vector = np.zeros(engine.dimension, dtype=np.float32)
    vector[0] = 1.0
    items = [
        NewMemory(
            content=text.format(value=value),
            vector=vector,
            kind=memory_pb2.MEMORY_KIND_FACT,
            entity=entity,
            fact_attribute=attribute,
            fact_value=value,
        )
        for attribute, value in values.items()
    ]
    return [w.memory.id for w in engine.remember(items)]


def test_the_attribute_a_question_paraphrases_decides_between_two_facts_alike(text_engine: Engine) -> None:
    """Same vector, same words but the value: only the meaning of the attribute's name tells them apart."""
    location, diet = _facts_alike(
        text_engine, "user:zane-cohen", "Zane Cohen said: {value}.", {"location": "Lisbon", "diet": "halal"}
    )
    question = "What should I order for Zane at the team lunch?"
    query = RecallQuery(vector=text_engine.embed([question])[0], text=question, k=2)
    hits = Recaller(text_engine).recall(query)
    assert [h.memory.id for h in hits] == [diet, location]
    meanings = AttributeMeanings(text_engine.embed).similarities(["diet", "location"], query.vector)
    assert meanings[0] > meanings[1] > 0
    gap = hits[0].score - hits[1].score
    assert gap > 0.5 * ATTRIBUTE_WEIGHT * (meanings[0] - meanings[1])


def test_the_attribute_said_of_the_entitys_type_decides_where_the_bare_names_mislead(text_engine: Engine) -> None:
    """Bare, "stakeholder" is nearer "How is Project Orca going?" than "status"; said of a project, "status" is."""
    status, stakeholder = _facts_alike(
        text_engine, "project:orca", "Orca update: {value}.", {"status": "blocked", "stakeholder": "Initech"}
    )
    question = "How is Project Orca going?"
    query = RecallQuery(vector=text_engine.embed([question])[0], text=question, k=2)
    bare = AttributeMeanings(text_engine.embed).similarities(["status", "stakeholder"], query.vector)
    assert bare[0] < bare[1]
    assert [h.memory.id for h in Recaller(text_engine).recall(query)] == [status, stakeholder]


class _Sampler:
    """Stands for recall's draw of a namespace's facts: fixed vectors per attribute; records each draw."""

    def __init__(self, vectors: dict[str, npt.NDArray[np.float32]]) -> None:
        self.vectors = vectors
        self.draws: list[tuple[int, str]] = []

    def __call__(self, namespace: int, attribute: str) -> npt.NDArray[np.float32]:
        self.draws.append((namespace, attribute))
        return self.vectors.get(attribute, np.zeros((0, 4), dtype=np.float32))


def test_examples_are_the_mean_direction_of_an_attributes_facts() -> None:
    location = np.stack([_unit("lisbon"), _unit("athens"), _unit("oslo")])
    examples = AttributeExamples(_Sampler({"location": location}))
    query = _unit("where") * 5.0  # not unit: the query is normalised
    mean = location.sum(axis=0) / np.linalg.norm(location.sum(axis=0))
    found = examples.similarities(0, 10, ["location", "diet", ""], query)
    assert found[0] == pytest.approx(float(mean @ _unit("where")), rel=1e-5)
    assert np.isnan(found[1:]).all()  # no fact of that attribute; no attribute
    assert np.isnan(examples.similarities(0, 10, ["location"], np.zeros(4, dtype=np.float32))).all()


def test_examples_are_drawn_again_only_as_the_namespace_grows() -> None:
    full = np.tile(_unit("x"), (EXAMPLES, 1))
    sampler = _Sampler({"location": full, "diet": full[:2]})
    examples = AttributeExamples(sampler)
    query = _unit("q")
    for size in (100, int(100 * REFRESH_GROWTH) - 1):
        examples.similarities(0, size, ["location", "diet"], query)
    assert sampler.draws == [(0, "location"), (0, "diet"), (0, "diet")]  # diet's sample was partial
    assert int(100 * REFRESH_GROWTH_PARTIAL) < int(100 * REFRESH_GROWTH) - 1
    examples.similarities(0, int(100 * REFRESH_GROWTH), ["location"], query)
    assert sampler.draws[-1] == (0, "location")
    examples.similarities(1, 100, ["location"], query)  # another namespace is drawn for itself
    assert sampler.draws[-1] == (1, "location")


def _matrices(fail: bool = False) -> tuple[AttributeMatrices, _Embedder, _Sampler]:
    embed = _Embedder()
    embed.fail = fail
    full = np.stack([_unit(f"lisbon {i}") for i in range(EXAMPLES)])
    sampler = _Sampler({"location": full, "diet": np.stack([_unit("vegan"), _unit("halal")])})
    return AttributeMatrices(AttributeMeanings(embed), AttributeExamples(sampler), 4), embed, sampler


def test_a_matrix_gives_the_cosines_the_caches_give() -> None:
    matrices, embed, sampler = _matrices()
    query = _unit("where") * 3.0
    unit = query / np.linalg.norm(query)
    directions = matrices.get(0, 100, "user", ("location", "diet"), ["editor"])
    assert directions.attributes[:2] == ("location", "diet")
    got = directions.cosines(unit)[:, [directions.index[a] for a in ("location", "diet", "editor")]]
    names = AttributeMeanings(_Embedder())
    examples = AttributeExamples(_Sampler(sampler.vectors))
    attributes = ["location", "diet", "editor"]
    np.testing.assert_allclose(got[0], names.similarities(attributes, query), rtol=1e-5)
    np.testing.assert_allclose(got[1], names.similarities(attributes, query, ["user"] * 3), rtol=1e-5)
    np.testing.assert_allclose(got[2], examples.similarities(0, 100, attributes, query), rtol=1e-5)
    assert np.isnan(got[2, 2])  # no editor facts: no examples, as the cache says
    said = ["the user's location", "the user's diet", "the user's editor"]
    assert embed.calls == [attributes + said]  # one embedding run for the bare names and the said ones


def test_a_matrix_is_kept_until_one_of_its_means_is_drawn_again() -> None:
    matrices, embed, sampler = _matrices()
    first = matrices.get(0, 100, "user", ("location", "diet"))
    # Its own draws changed the namespace's version: made once more, from the caches, without drawing.
    second = matrices.get(0, 100, "user", ("location", "diet"))
    assert matrices.get(0, 100, "user", ("location", "diet")) is second is not first
    assert len(sampler.draws) == 2
    assert len(embed.calls) == 1
    assert second.examples_until == 100 * REFRESH_GROWTH_PARTIAL  # diet's two facts are a partial sample
    assert matrices.get(0, int(100 * REFRESH_GROWTH_PARTIAL) - 1, "user", ("location", "diet")) is second
    matrices.get(0, int(100 * REFRESH_GROWTH_PARTIAL), "user", ("location", "diet"))
    assert sampler.draws[2:] == [(0, "diet")]  # only the mean that was due is drawn again
    assert len(embed.calls) == 1  # names never change


def test_a_mean_drawn_again_elsewhere_makes_the_matrix_again() -> None:
    matrices, _, sampler = _matrices()
    examples = AttributeExamples(sampler)
    matrices = AttributeMatrices(matrices.meanings, examples, 4)
    matrices.get(0, 100, "user", ("diet",))
    kept = matrices.get(0, 100, "user", ("diet",))
    sampler.vectors["diet"] = np.stack([_unit("kosher")] * 3)
    examples.mean(0, 200, "diet")  # another type's matrix (or another recall) draws diet again
    remade = matrices.get(0, 150, "user", ("diet",))
    assert remade is not kept
    assert remade.block(2)[0][0] == pytest.approx(_unit("kosher"), rel=1e-5)
    examples.mean(1, 100, "diet")  # another namespace's draw changes nothing here
    assert matrices.get(0, 150, "user", ("diet",)) is remade


def test_a_matrix_without_names_is_made_again_until_the_embedder_answers() -> None:
    matrices, embed, _ = _matrices(fail=True)
    failed = matrices.get(0, 100, "user", ("location",))
    failed = matrices.get(0, 100, "user", ("location",))  # the first one's draw changed the version
    assert not failed.complete
    assert np.isnan(failed.cosines(_unit("where"))[:2]).all()
    assert not np.isnan(failed.cosines(_unit("where"))[2]).any()  # examples need no embedder
    embed.fail = False
    answered = matrices.get(0, 100, "user", ("location",))
    assert answered.complete
    assert not np.isnan(answered.cosines(_unit("where"))).any()
    assert matrices.get(0, 100, "user", ("location",)) is answered


def test_other_attributes_join_a_matrix_until_the_known_ones_change() -> None:
    matrices, _, _ = _matrices()
    matrices.get(0, 100, "user", ("location",), ["diet"])
    kept = matrices.get(0, 100, "user", ("location",), ["diet"])
    assert kept.attributes == ("location", "diet")
    assert matrices.get(0, 100, "user", ("location",)) is kept  # diet stays, though no candidate holds it now
    grown = matrices.get(0, 100, "user", ("location",), ["editor"])
    assert grown.attributes == ("location", "diet", "editor")
    assert matrices.get(0, 100, "user", ("location", "editor")).attributes == ("location", "editor")
    assert matrices.get(0, 100, "project", ("location",)).attributes == ("location",)  # per type


def test_matrices_kept_are_bounded() -> None:
    sampler = _Sampler({})
    matrices = AttributeMatrices(None, AttributeExamples(sampler), 4, capacity=2)
    first = matrices.get(0, 10, "user", ("diet",))
    first = matrices.get(0, 10, "user", ("diet",))
    matrices.get(0, 10, "project", ("lead",))
    matrices.get(0, 10, "team", ("lead",))  # the oldest, user's, goes
    assert matrices.get(0, 10, "user", ("diet",)) is not first
    assert np.isnan(first.cosines(_unit("x"))).all()  # no names, no facts


def _fact(engine: Engine, entity: str, attribute: str, text: str, vector: npt.NDArray[np.float32], **kw: str) -> int:
    item = NewMemory(
        content=text,
        vector=vector,
        kind=memory_pb2.MEMORY_KIND_FACT,
        entity=entity,
        fact_attribute=attribute,
        fact_value=text.split()[-1].rstrip("."),
        **kw,  # type: ignore[arg-type]
    )
    return engine.remember([item])[0].memory.id


def _olga(engine: Engine, others: int) -> tuple[int, int]:
    """Olga's location and editor facts (the editor one closer to the query and naming her in full), after
    location and editor facts of ``others`` other people: location ones close to where-questions, editor ones not."""
    for person in ("ana", "ben", "caro", "dev")[:others]:
        _fact(engine, f"user:{person}", "location", f"{person} works from Oslo.", recall_engine.near(1, 0.3))
        _fact(engine, f"user:{person}", "editor", f"{person} uses Vim.", recall_engine.near(5, 1.5))
    location = _fact(engine, "user:olga-lopez", "location", "Olga works from Athens.", recall_engine.near(2, 0.8))
    editor = _fact(engine, "user:olga-lopez", "editor", "Olga Lopez moved to Kate.", recall_engine.near(3, 0.6))
    return location, editor


def _order(engine: Engine, question: str, *ids: int) -> list[int]:
    hits = Recaller(engine).recall(RecallQuery(vector=recall_engine.near(1, 0.0), text=question, k=20))
    ranked = [hit.memory.id for hit in hits]
    return sorted(ids, key=ranked.index)


def test_what_an_attributes_facts_say_decides_between_one_persons_facts(engine: Engine) -> None:
    """No embedder, so no names: the location facts of three other people are what says "based" means location."""
    location, editor = _olga(engine, others=EXAMPLES_MIN_ENTITIES)
    assert _order(engine, "Where is Olga Lopez based?", location, editor) == [location, editor]


def test_one_or_two_peoples_facts_are_not_an_attributes_meaning(engine: Engine) -> None:
    """With her and one other person's facts only, the closer fact that names her in full wins, as without examples."""
    location, editor = _olga(engine, others=EXAMPLES_MIN_ENTITIES - 2)
    assert _order(engine, "Where is Olga Lopez based?", location, editor) == [editor, location]


def test_examples_are_the_namespaces_live_facts(engine: Engine) -> None:
    near = recall_engine.near
    ids = {
        person: _fact(engine, f"user:{person}", "location", f"{person} works from Oslo.", near(i + 1, 0.5))
        for i, person in enumerate(("ana", "ben", "caro", "dev"))
    }
    _fact(engine, "user:eve", "location", "eve works from Rome.", recall_engine.near(6, 0.5), namespace="other")
    _fact(engine, "user:fay", "editor", "fay uses Vim.", recall_engine.near(7, 0.5))
    engine.forget([ids["dev"]], reason="test", keep_history=False)
    recaller = Recaller(engine)
    namespace = engine.columns.namespaces.lookup("default")
    drawn = recaller._attribute_sample(namespace, "location")
    expected = np.stack([recall_engine.near(i + 1, 0.5) for i in range(3)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.sort(drawn, axis=0), np.sort(expected, axis=0), atol=1e-3)  # the graph holds float16
    assert recaller._attribute_sample(namespace, "editor").shape == (0, recall_engine.DIMENSION)  # one person
    assert recaller._attribute_sample(namespace, "diet").shape == (0, recall_engine.DIMENSION)


def _projects(engine: Engine, count: int) -> None:
    """Lead, budget and status facts of ``count`` projects other than Raven: lead ones close to the query (axis 0)."""
    for number in range(count):
        entity = f"project:p{number}"
        _fact(engine, entity, "lead", f"p{number} is led by Ana.", recall_engine.near(1, 0.3))
        _fact(engine, entity, "budget", f"p{number} has a budget of 2M.", recall_engine.near(5, 1.5))
        _fact(engine, entity, "status", f"p{number} is blocked.", recall_engine.near(6, 1.5))


def _raven(engine: Engine) -> tuple[int, int]:
    """Raven's budget, keyed and the nearer to the query, and its lead said in a sentence without a key."""
    budget = _fact(engine, "project:raven", "budget", "Project Raven budget: 5M.", recall_engine.near(2, 0.5))
    lead = recall_engine.write(
        engine,
        NewMemory(content="Project Raven is led by Nina.", vector=recall_engine.near(1, 0.7), entity="project:raven"),
    )[0]
    return budget, lead


def _raven_first(engine: Engine) -> list[int]:
    query = RecallQuery(vector=recall_engine.near(1, 0.0), text="Who leads Project Raven?", k=5, entity="project:raven")
    return [hit.memory.id for hit in Recaller(engine).recall(query)]


def test_a_fact_of_another_attribute_loses_to_a_sentence_that_reads_as_the_asked_one(engine: Engine) -> None:
    """No Raven memory holds the lead by key, yet the namespace knows what a project's lead looks like: the budget
    fact is judged against that attribute, and the unkeyed sentence reads as it."""
    _projects(engine, EXAMPLES_MIN_ENTITIES)
    budget, lead = _raven(engine)
    assert _raven_first(engine) == [lead, budget]


def test_a_strategy_is_not_read_as_an_attribute(engine: Engine) -> None:
    """A lesson about an entity's task fills no slot of it, however near an attribute's facts it lies."""
    _projects(engine, EXAMPLES_MIN_ENTITIES)
    _, lead = _raven(engine)
    lesson = recall_engine.write(
        engine,
        NewMemory(
            content="To brief Raven's lead, send a one-page summary.",
            vector=recall_engine.near(1, 0.7),
            entity="project:raven",
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature="brief-lead",
        ),
    )[0]
    recaller = Recaller(engine)
    query = RecallQuery(vector=recall_engine.near(1, 0.0), text="Who leads Project Raven?", k=5)
    ids = np.asarray([lead, lesson], dtype=np.int64)
    namespace = engine.columns.namespaces.lookup("default")
    named, gap = recaller._attribute_evidence(query, namespace, ids, np.ones(2), 40)
    assert gap[0] == 0.0  # the sentence reads as the lead, the attribute asked for
    assert np.isnan(gap[1])
    assert np.isnan(named).all()  # a reading never lifts


def test_without_enough_attributes_known_a_sentence_is_not_read(engine: Engine) -> None:
    """With examples of too few attributes (and no embedder for names), nothing is read and nothing known says the
    question asks for another attribute than the budget: the nearer budget fact stays first."""
    for number in range(EXAMPLES_MIN_ENTITIES):
        _fact(engine, f"project:p{number}", "budget", f"p{number} has a budget of 2M.", recall_engine.near(5, 1.5))
    assert READING_MIN_ATTRIBUTES > 1
    budget, lead = _raven(engine)
    assert _raven_first(engine) == [budget, lead]


def test_before_examples_a_sentence_is_read_by_the_attributes_names(engine: Engine) -> None:
    """One other project's facts are no examples (fewer than three entities); the names said of a project are
    enough to read Raven's unkeyed sentence as its lead (names here: fixed directions, the query's among them)."""
    directions = {"lead": recall_engine.near(1, 0.3), "budget": recall_engine.near(5, 1.5)}
    directions["status"] = recall_engine.near(6, 1.5)

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([directions[text.split()[-1]] for text in texts])  # "lead" or "the project's lead"

    _projects(engine, 1)
    budget, lead = _raven(engine)
    recaller = Recaller(engine)
    recaller._meanings = AttributeMeanings(embed)
    query = RecallQuery(vector=recall_engine.near(1, 0.0), text="Who leads Project Raven?", k=5, entity="project:raven")
    assert [hit.memory.id for hit in recaller.recall(query)] == [lead, budget]
    recaller._meanings = None  # no names, no examples: nothing is read, and the nearer budget fact leads
    assert [hit.memory.id for hit in recaller.recall(query)] == [budget, lead]


def test_a_statement_is_read_once_per_reading(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory's vector never changes: its reading is kept until the namespace's reading of its type is made again."""
    _projects(engine, EXAMPLES_MIN_ENTITIES)
    _, lead = _raven(engine)
    recaller = Recaller(engine)
    read: list[list[int]] = []
    unit_vectors = recaller._unit_vectors

    def counted(ids: npt.NDArray[np.int64], **kw: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32]:
        if lead in ids:  # not the draws of the projects' examples
            read.append(ids.tolist())
        return unit_vectors(ids, **kw)

    monkeypatch.setattr(recaller, "_unit_vectors", counted)
    query = RecallQuery(vector=recall_engine.near(1, 0.0), text="Who leads Project Raven?", k=5)
    namespace = engine.columns.namespaces.lookup("default")
    ids = np.asarray([lead], dtype=np.int64)
    for _ in range(2):
        assert recaller._attribute_evidence(query, namespace, ids, np.ones(1), 40)[1][0] == 0.0
    assert read == [[lead]]
    for number in range(int(engine.columns.namespace_count(namespace) * (KNOWN_REFRESH_GROWTH - 1)) + 1):
        recall_engine.write(engine, NewMemory(content=f"remark {number}", vector=recall_engine.near(4, 1.0)))
    assert recaller._attribute_evidence(query, namespace, ids, np.ones(1), 40)[1][0] == 0.0
    assert read == [[lead], [lead]]  # the namespace grew: a new reading reads it again


def test_entity_types_are_looked_up_once_per_entity(engine: Engine) -> None:
    recaller = Recaller(engine)
    codes = engine.columns.entities
    user, project, plain = codes.code("user:ana"), codes.code("project:raven"), codes.code("ana")
    entities = np.asarray([user, -1, project, plain, user], dtype=np.int32)
    kinds = recaller._type_codes(entities)
    assert [recaller._type_names[k] for k in kinds] == ["user", "", "project", "", "user"]
    many = [codes.code(f"team:t{number}") for number in range(2_000)]  # past the table's first size
    kinds = recaller._type_codes(np.asarray([many[-1], user, -1], dtype=np.int32))
    assert [recaller._type_names[k] for k in kinds] == ["team", "user", ""]


def test_known_attributes_are_the_namespaces_own_and_rescanned_as_it_grows(engine: Engine) -> None:
    recaller = Recaller(engine)
    for number in range(6):
        recall_engine.write(engine, NewMemory(content=f"remark {number}", vector=recall_engine.near(4, 1.0)))
    _fact(engine, "project:p0", "lead", "p0 is led by Ana.", recall_engine.near(1, 0.3))
    _fact(engine, "user:ana", "diet", "Ana eats vegan.", recall_engine.near(2, 0.3))
    _fact(engine, "project:q0", "deadline", "q0 is due in May.", recall_engine.near(3, 0.3), namespace="other")
    namespace = engine.columns.namespaces.lookup("default")
    size = engine.columns.namespace_count(namespace)
    assert recaller._known_attributes(namespace, size) == {"project": ("lead",), "user": ("diet",)}
    _fact(engine, "project:p1", "budget", "p1 has a budget of 2M.", recall_engine.near(5, 1.5))
    grown = engine.columns.namespace_count(namespace)
    assert grown < size * KNOWN_REFRESH_GROWTH
    assert recaller._known_attributes(namespace, grown) == {"project": ("lead",), "user": ("diet",)}  # kept
    assert recaller._known_attributes(namespace, int(size * KNOWN_REFRESH_GROWTH) + 1)["project"] == (
        "lead",
        "budget",
    )


def test_a_fact_loses_match_by_how_much_less_its_attribute_means_than_the_best_candidates() -> None:
    match = np.array([0.5, 0.6, 0.4, 0.3])
    named = np.array([0.3, np.nan, 0.1, np.nan])  # the second has no name reading (no embedder meanwhile)
    gap = np.array([0.0, 0.2, 0.4, np.nan])  # the last is no fact: left alone
    got = _with_attribute_evidence(match, named, gap)
    expected = [
        0.5 + ATTRIBUTE_WEIGHT * 0.3,
        0.6 * (1.0 - ATTRIBUTE_MISMATCH_WEIGHT * 0.2),
        (0.4 + ATTRIBUTE_WEIGHT * 0.1) * (1.0 - ATTRIBUTE_MISMATCH_WEIGHT * 0.4),
        0.3,
    ]
    assert got == pytest.approx(expected)
    nothing = np.full(4, np.nan)
    assert _with_attribute_evidence(match, nothing, nothing) == pytest.approx(match)


def test_meaning_gaps_compare_each_reading_on_its_own_scale() -> None:
    names = np.array([0.30, 0.20, 0.10, np.nan])
    complete = np.array([0.60, 0.40, 0.50, np.nan])
    # Both readings for every attribute: the gap to the best mean, as with one reading of the mean.
    mean = (names + complete) / 2
    assert _meaning_gaps(names, complete)[:3] == pytest.approx(np.nanmax(mean) - mean[:3])
    assert np.isnan(_meaning_gaps(names, complete)[3])
    # The third has no examples: its name (0.2 below the best name) judges it, not a mean with no examples in it.
    partial = np.array([0.60, 0.40, np.nan, np.nan])
    gaps = _meaning_gaps(names, partial)
    assert gaps[:3] == pytest.approx([0.0, 0.15, 0.2])
    # Negative cosines count as 0; no reading at all is NaN.
    assert _meaning_gaps(np.array([-0.3, 0.2])) == pytest.approx([0.2, 0.0])
    assert np.isnan(_meaning_gaps(np.full(2, np.nan), np.full(2, np.nan))).all()
