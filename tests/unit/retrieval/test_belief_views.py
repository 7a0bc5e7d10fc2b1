"""The beliefs views over a real engine: which memories count as an entity's current values, and in which order."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import recall_engine
from google.protobuf.timestamp_pb2 import Timestamp
from recall_engine import near, write

from memevo.sidecar.domain import NewMemory
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.beliefs import _ranked, beliefs, list_entities
from memevo.v1 import memory_pb2

engine = recall_engine.engine  # the fixture
FACT = memory_pb2.MEMORY_KIND_FACT


def _keyed(content: str, entity: str, attribute: str, value: str, *, when: float, namespace: str = "default") -> Any:
    fact = {"fact_attribute": attribute, "fact_value": value, "valid_from_s": when, "namespace": namespace}
    return NewMemory(content=content, vector=near(1, 0.1), kind=FACT, entity=entity, **fact)


def test_current_values_keyed_and_read_from_prose_by_attribute(engine: Engine) -> None:
    episode = memory_pb2.MEMORY_KIND_EPISODE
    trip = NewMemory(content="Ana flew to Porto.", vector=near(5, 3.0), kind=episode, entity="person:ana")
    change = NewMemory(content="These days Ana works at Canva.", vector=near(1, 0.12), kind=FACT, entity="person:ana")
    old, city, _, _, _ = write(
        engine,
        _keyed("Ana works at Shopify.", "person:ana", "employer", "Shopify", when=1_000),
        _keyed("Ana lives in Lisbon.", "person:ana", "city", "Lisbon", when=1_100),
        _keyed("Bo works at Shopify.", "person:bo", "employer", "Shopify", when=1_200),
        _keyed("Ana works at X.", "person:ana", "employer", "X", when=1_300, namespace="other"),
        trip,
    )
    [prose] = write(engine, dataclasses.replace(change, valid_from_s=2_000))
    answer = beliefs(engine, "default", "person:ana")
    assert [(b.attribute, b.memory.id, b.read_from_text, b.version_count) for b in answer.beliefs] == [
        ("city", city, False, 1),
        ("employer", prose, True, 2),
    ]
    assert answer.beliefs[1].value == "canva"
    assert old not in [m.id for b in answer.beliefs for m in b.also_current]
    assert answer.unattributed_count == 1
    assert not beliefs(engine, "default", "person:nobody").beliefs
    assert not beliefs(engine, "nowhere", "person:ana").beliefs

    listed = list_entities(engine, "default")
    assert [e.entity for e in listed.entities] == ["person:ana", "person:bo"]
    ana = listed.entities[0]
    assert (ana.memory_count, ana.current_count, ana.belief_count, ana.doubted_count) == (4, 3, 2, 0)
    assert [e.entity for e in list_entities(engine, "default", query="BO").entities] == ["person:bo"]
    cut = list_entities(engine, "default", limit=1)
    assert (cut.total_count, len(cut.entities)) == (2, 1)
    assert list_entities(engine, "other").total_count == 1


def test_a_forgotten_memory_is_no_belief_and_not_counted(engine: Engine) -> None:
    [city] = write(engine, _keyed("Ana lives in Lisbon.", "person:ana", "city", "Lisbon", when=1_000))
    engine.forget([city], reason="wrong", keep_history=False)
    assert not beliefs(engine, "default", "person:ana").beliefs
    assert not list_entities(engine, "default").entities


def _memory(memory_id: int, valid_from_s: int, doubted_by: int = 0) -> memory_pb2.Memory:
    return memory_pb2.Memory(id=memory_id, valid_from=Timestamp(seconds=valid_from_s), possibly_outdated_by=doubted_by)


def test_the_believed_value_is_the_one_no_other_current_value_doubts_then_the_newest() -> None:
    # 3 is the newest but 1 doubts it (a newer statement written with an older world time): 3 comes last.
    held = [_memory(2, 1_000), _memory(1, 500), _memory(3, 2_000, doubted_by=1)]
    assert [m.id for m in _ranked(held)] == [2, 1, 3]
    assert [m.id for m in _ranked(held[1:])] == [1, 3]
    # A doubter that is not among the current values leaves the order by time.
    assert [m.id for m in _ranked([_memory(4, 100, doubted_by=9), _memory(5, 50)])] == [4, 5]
    assert [m.id for m in _ranked([_memory(6, 100), _memory(7, 100)])] == [7, 6]  # same time: the later write


def test_as_of_an_instant_the_values_valid_then_whatever_their_state_now(engine: Engine) -> None:
    change = NewMemory(content="These days Ana works at Canva.", vector=near(1, 0.12), kind=FACT, entity="person:ana")
    shopify, lisbon = write(
        engine,
        _keyed("Ana works at Shopify.", "person:ana", "employer", "Shopify", when=1_000),
        _keyed("Ana lives in Lisbon.", "person:ana", "city", "Lisbon", when=1_100),
    )
    [porto] = write(engine, _keyed("Ana lives in Porto.", "person:ana", "city", "Porto", when=3_000))
    [canva] = write(engine, dataclasses.replace(change, valid_from_s=2_000))
    [pet] = write(engine, _keyed("Ana has a cat.", "person:ana", "pet", "cat", when=4_000))

    def held(as_of_s: float) -> list[tuple[str, str, int, bool, int]]:
        answer = beliefs(engine, "default", "person:ana", as_of_s=as_of_s)
        assert answer.as_of.seconds == int(as_of_s)
        return [(b.attribute, b.value, b.memory.id, b.read_from_text, b.version_count) for b in answer.beliefs]

    # Before the city was stated: only the employer, keyed, though OBSOLETE now.
    assert held(1_050) == [("employer", "Shopify", shopify, False, 2)]
    assert held(1_500) == [("city", "Lisbon", lisbon, False, 2), ("employer", "Shopify", shopify, False, 2)]
    # The prose statement took over at 2 000; the keyed Porto at 3 000; the cat is stated only at 4 000.
    assert held(2_500) == [("city", "Lisbon", lisbon, False, 2), ("employer", "canva", canva, True, 2)]
    assert held(3_500) == [("city", "Porto", porto, False, 2), ("employer", "canva", canva, True, 2)]
    assert held(4_000)[-1] == ("pet", "cat", pet, False, 1)  # valid from that instant on
    assert not beliefs(engine, "default", "person:ana", as_of_s=999).beliefs
    now = beliefs(engine, "default", "person:ana")
    assert [b.memory.id for b in now.beliefs] == [porto, canva, pet]
    assert now.as_of.seconds > 4_000  # the time of answering


def test_as_of_an_instant_a_doubt_by_a_later_statement_is_no_doubt(engine: Engine) -> None:
    # Worded apart and close (cosine 0.8), not one template: a soft conflict, which doubts and retires nothing
    # (the pair of tests/integration/test_beliefs.py).
    rng = np.random.default_rng(10)
    base = rng.standard_normal(8)
    other = rng.standard_normal(8)
    other -= other.dot(base) / base.dot(base) * base
    tilted = base / np.linalg.norm(base) * 0.8 + other / np.linalg.norm(other) * 0.6
    about: dict[str, Any] = {"kind": FACT, "entity": "user:ana-lee"}
    [older] = write(
        engine,
        NewMemory(
            content="Ana keeps her notes in a paper notebook",
            vector=base.astype(np.float32),
            fact_attribute="note_tool",
            fact_value="a paper notebook",
            valid_from_s=1_000,
            **about,
        ),
    )
    [newer] = write(
        engine,
        NewMemory(
            content="these days Ana writes everything down in Obsidian",
            vector=tilted.astype(np.float32),
            valid_from_s=2_000,
            **about,
        ),
    )
    [now] = beliefs(engine, "default", "user:ana-lee").beliefs
    assert (now.memory.id, list(now.possibly_outdated_by)) == (older, [newer]), "no longer a soft conflict"
    [then] = beliefs(engine, "default", "user:ana-lee", as_of_s=1_500).beliefs
    assert (then.memory.id, list(then.possibly_outdated_by)) == (older, [])
    [both] = beliefs(engine, "default", "user:ana-lee", as_of_s=2_500).beliefs  # both held: the doubt stood
    assert (both.memory.id, list(both.possibly_outdated_by)) == (older, [newer])
