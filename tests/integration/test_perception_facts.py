"""Hard conflicts over gRPC: a newer fact value supersedes, a late older one is back-dated, a restatement confirms.

The running example is issue 4's: "user A prefers dark mode" (world time
t=10 s), then "user A prefers light mode" (t=100 s), both with the fact key
(entity "user:a", attribute "ui_mode"). Each test works in its own namespace
of one shared sidecar, so tests do not see each other's memories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import counts, memory, pack, stub, vectors

from memevo.sidecar.retrieval.hints import HINT_AS_OF, HINT_CURRENT
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
PREFERENCE = memory_pb2.MEMORY_KIND_PREFERENCE
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED
CONFIRMED = memory_service_pb2.WRITE_OUTCOME_CONFIRMED
SUPERSEDED_PREVIOUS = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
BACKDATED = memory_service_pb2.WRITE_OUTCOME_BACKDATED
ENTITY = "user:a"
ATTRIBUTE = "ui_mode"
DISTRACTORS = 4


def world(seconds: int) -> Timestamp:
    """A world time ``seconds`` after the epoch."""
    return Timestamp(seconds=seconds)


def _vectors() -> dict[str, bytes]:
    """Vectors of the ui-mode statements: near each other, far from the distractors."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal(8)
    return {
        name: pack(base + 0.25 * rng.standard_normal(8))
        for name in ("dark", "light", "sepia", "night", "dark again", "blue")
    }


VECTORS = _vectors()


@dataclass
class Chain:
    """The ids of the dark/light example in one namespace."""

    namespace: str
    dark: int
    light: int


def write(
    service: Any,
    namespace: str,
    content: str,
    vector: bytes,
    *,
    value: str | None = None,
    at: int | None = None,
    attribute: str = ATTRIBUTE,
    kind: int = PREFERENCE,
    **fields: Any,
) -> memory_service_pb2.WriteResult:
    """Remember one memory about user A; with ``value``, it carries the fact (attribute, value)."""
    if value is not None:
        fields["fact"] = memory_pb2.Fact(attribute=attribute, value=value)
    if at is not None:
        fields["valid_from"] = world(at)
    item = memory(content, vector, namespace=namespace, entity=ENTITY, kind=kind, **fields)
    return service.Remember(memory_service_pb2.RememberRequest(memory=item)).result


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    response = service.Get(memory_service_pb2.GetRequest(ids=[memory_id]))
    assert list(response.missing_ids) == [], f"memory {memory_id} is missing"
    return response.memories[0]


def recall(
    service: Any, namespace: str, query: bytes, *, as_of: int | None = None, **fields: Any
) -> memory_service_pb2.RecallResponse:
    request = memory_service_pb2.RecallRequest(
        query_vector=query, k=20, filter=memory_service_pb2.RecallFilter(namespace=namespace), **fields
    )
    if as_of is not None:
        request.as_of.CopyFrom(world(as_of))
    return service.Recall(request)


def history(service: Any, namespace: str, attribute: str = ATTRIBUTE) -> memory_service_pb2.HistoryResponse:
    key = memory_service_pb2.FactKey(namespace=namespace, entity=ENTITY, attribute=attribute)
    return service.History(memory_service_pb2.HistoryRequest(fact_key=key))


def interval(record: memory_pb2.Memory) -> tuple[int, int | None]:
    """(valid_from, valid_to) in whole seconds; valid_to None while still true."""
    return record.valid_from.seconds, (record.valid_to.seconds if record.HasField("valid_to") else None)


def assert_links_two_way(versions: list[memory_pb2.Memory]) -> None:
    """Every superseded_by link has its supersedes back-link and vice versa."""
    by_id = {v.id: v for v in versions}
    for version in versions:
        if version.superseded_by:
            successor = by_id[version.superseded_by]
            assert version.id in successor.supersedes, (
                f"memory {version.id} says superseded_by={version.superseded_by}, "
                f"but that one's supersedes is {list(successor.supersedes)}"
            )
        for older_id in version.supersedes:
            older = by_id[older_id]
            assert older.superseded_by == version.id, (
                f"memory {version.id} says it supersedes {older_id}, "
                f"but that one's superseded_by is {older.superseded_by}"
            )


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def dark_then_light(service: Any, namespace: str) -> Chain:
    """The issue's example in ``namespace``, plus a few unrelated memories so 'first' means something."""
    for i, row in enumerate(vectors(DISTRACTORS, seed=40)):
        service.Remember(
            memory_service_pb2.RememberRequest(
                memory=memory(f"unrelated note {i}", pack(row), namespace=namespace, kind=FACT)
            )
        )
    dark = write(service, namespace, "user A prefers dark mode", VECTORS["dark"], value="dark", at=10)
    assert dark.outcome == CREATED
    light = write(service, namespace, "user A prefers light mode", VECTORS["light"], value="light", at=100)
    assert light.outcome == SUPERSEDED_PREVIOUS, memory_service_pb2.WriteOutcome.Name(light.outcome)
    return Chain(namespace, dark.memory.id, light.memory.id)


# ---- a newer value supersedes ----------------------------------------------------------------


def test_newer_value_supersedes_and_both_records_link(service: Any) -> None:
    chain = dark_then_light(service, "facts-supersede")
    dark, light = get(service, chain.dark), get(service, chain.light)
    assert dark.state == OBSOLETE
    assert dark.superseded_by == chain.light
    assert interval(dark) == (10, 100), "the old value's validity ends where the new one begins"
    assert light.state == ACTIVE
    assert list(light.supersedes) == [chain.dark]
    assert interval(light) == (100, None)


def test_write_result_names_the_memories_the_write_changed(service: Any) -> None:
    namespace = "facts-affected"
    dark = write(service, namespace, "user A prefers dark mode", VECTORS["dark"], value="dark", at=10)
    assert list(dark.affected_ids) == []
    light = write(service, namespace, "user A prefers light mode", VECTORS["light"], value="light", at=100)
    assert list(light.affected_ids) == [dark.memory.id], "the superseded memory is reported (proto: affected_ids)"
    between = write(service, namespace, "user A preferred sepia mode", VECTORS["sepia"], value="sepia", at=50)
    assert dark.memory.id in between.affected_ids, "the late fact closed dark's validity"


def test_standard_recall_returns_the_new_value_first_and_never_the_old(service: Any) -> None:
    chain = dark_then_light(service, "facts-recall")
    # Even a query that is exactly the old statement's vector must not bring it back.
    for query in (VECTORS["dark"], VECTORS["light"]):
        response = recall(service, chain.namespace, query)
        ids = [m.memory.id for m in response.memories]
        assert ids[0] == chain.light, ids
        assert chain.dark not in ids
        assert response.memories[0].hint == HINT_CURRENT
        assert len(ids) == 1 + DISTRACTORS


def test_recall_as_of_returns_the_value_valid_then(service: Any) -> None:
    chain = dark_then_light(service, "facts-as-of")
    response = recall(service, chain.namespace, VECTORS["light"], as_of=50)
    assert [m.memory.id for m in response.memories] == [chain.dark], "only dark was true at t=50"
    assert response.memories[0].hint == HINT_AS_OF
    assert response.memories[0].memory.state == OBSOLETE
    # At t=100 the new value has taken over (validity intervals are half-open: [from, to)).
    at_change = recall(service, chain.namespace, VECTORS["dark"], as_of=100)
    assert [m.memory.id for m in at_change.memories] == [chain.light]
    assert at_change.memories[0].hint == HINT_CURRENT
    # Before anything was true, nothing is returned.
    assert list(recall(service, chain.namespace, VECTORS["dark"], as_of=5).memories) == []


def test_history_by_fact_key_shows_versions_oldest_first_with_intervals_and_events(service: Any) -> None:
    chain = dark_then_light(service, "facts-history")
    again = write(
        service, chain.namespace, "user A prefers dark mode again", VECTORS["dark again"], value="dark", at=200
    )
    assert again.outcome == SUPERSEDED_PREVIOUS, "an old value stated anew at a later time becomes current again"
    response = history(service, chain.namespace)
    versions = list(response.versions)
    assert [v.id for v in versions] == [chain.dark, chain.light, again.memory.id]
    assert [interval(v) for v in versions] == [(10, 100), (100, 200), (200, None)]
    assert [v.state for v in versions] == [OBSOLETE, OBSOLETE, ACTIVE]
    assert [v.fact.value for v in versions] == ["dark", "light", "dark"]
    assert versions[1].superseded_by == again.memory.id
    assert list(versions[2].supersedes) == [chain.light]
    assert_links_two_way(versions)

    events = list(response.events)
    sequences = [e.sequence for e in events]
    assert sequences == sorted(sequences), "events come in change-log order"
    assert len(set(sequences)) == len(sequences)
    created = {e.memory_id for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_CREATED}
    assert created == {chain.dark, chain.light, again.memory.id}
    superseded = [e for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert [e.memory_id for e in superseded] == [chain.dark, chain.light]
    for event, successor in zip(superseded, (chain.light, again.memory.id), strict=True):
        assert event.from_state == ACTIVE
        assert event.to_state == OBSOLETE
        assert str(successor) in event.reason, event.reason
        assert successor in event.related_ids
        assert event.namespace == chain.namespace


def test_history_of_an_unknown_fact_key_is_empty(service: Any) -> None:
    response = history(service, "facts-history-none", attribute="never_written")
    assert list(response.versions) == []
    assert list(response.events) == []


# ---- late-arriving older values ----------------------------------------------------------------


def test_late_older_fact_is_backdated_and_never_current(service: Any) -> None:
    chain = dark_then_light(service, "facts-backdate")
    late = write(service, chain.namespace, "user A preferred night mode", VECTORS["night"], value="night", at=5)
    assert late.outcome == BACKDATED, memory_service_pb2.WriteOutcome.Name(late.outcome)
    assert late.memory.state == OBSOLETE
    assert interval(late.memory) == (5, 10), "closed by the next version (dark, t=10)"
    assert late.memory.superseded_by == chain.dark

    stored = get(service, late.memory.id)
    assert stored.state == OBSOLETE
    assert interval(stored) == (5, 10)
    for query in (VECTORS["night"], VECTORS["light"]):
        ids = [m.memory.id for m in recall(service, chain.namespace, query).memories]
        assert late.memory.id not in ids
        assert ids[0] == chain.light
    # The current value is untouched: light, still open-ended, and restating it confirms it.
    light = get(service, chain.light)
    assert light.state == ACTIVE
    assert interval(light) == (100, None)
    restated = write(service, chain.namespace, "user A prefers light mode", VECTORS["light"], value="light", at=150)
    assert restated.outcome == CONFIRMED
    assert restated.memory.id == chain.light
    # As of t=7 the late fact is what was true.
    as_of = recall(service, chain.namespace, VECTORS["dark"], as_of=7)
    assert [m.memory.id for m in as_of.memories] == [late.memory.id]
    assert as_of.memories[0].hint == HINT_AS_OF

    versions = list(history(service, chain.namespace).versions)
    assert [v.id for v in versions] == [late.memory.id, chain.dark, chain.light]
    assert [interval(v) for v in versions] == [(5, 10), (10, 100), (100, None)]
    created = [e for e in history(service, chain.namespace).events if e.type == events_pb2.CHANGE_EVENT_TYPE_CREATED]
    late_created = next(e for e in created if e.memory_id == late.memory.id)
    assert late_created.to_state == OBSOLETE, "the late fact is stored as history from the start"


def test_late_fact_between_two_versions_relinks_the_chain(service: Any) -> None:
    chain = dark_then_light(service, "facts-between")
    between = write(service, chain.namespace, "user A preferred sepia mode", VECTORS["sepia"], value="sepia", at=50)
    assert between.outcome == BACKDATED
    assert between.memory.state == OBSOLETE
    assert interval(between.memory) == (50, 100)
    assert between.memory.superseded_by == chain.light
    assert list(between.memory.supersedes) == [chain.dark]

    dark = get(service, chain.dark)
    assert interval(dark) == (10, 50), "the older version now ends where the late one begins"
    assert dark.superseded_by == between.memory.id
    assert dark.state == OBSOLETE

    assert [m.memory.id for m in recall(service, chain.namespace, VECTORS["dark"], as_of=60).memories] == [
        between.memory.id
    ]
    assert [m.memory.id for m in recall(service, chain.namespace, VECTORS["dark"], as_of=20).memories] == [chain.dark]
    assert [m.memory.id for m in recall(service, chain.namespace, VECTORS["dark"], as_of=100).memories] == [chain.light]
    current = [m.memory.id for m in recall(service, chain.namespace, VECTORS["sepia"]).memories]
    assert between.memory.id not in current
    assert current[0] == chain.light

    versions = list(history(service, chain.namespace).versions)
    assert [v.id for v in versions] == [chain.dark, between.memory.id, chain.light]
    assert [interval(v) for v in versions] == [(10, 50), (50, 100), (100, None)]
    assert_links_two_way(versions)


def test_a_late_value_from_before_a_restatement_of_the_current_one_stays_history(service: Any) -> None:
    """Light from t=100, restated at t=150; sepia "since t=120" arrives after that: light was said to hold at 150."""
    chain = dark_then_light(service, "facts-late-after-restated")
    restated = write(service, chain.namespace, "user A still likes light mode", VECTORS["light"], value="light", at=150)
    assert restated.outcome == CONFIRMED
    earlier = write(service, chain.namespace, "user A liked light mode", VECTORS["light"], value="light", at=140)
    assert earlier.outcome == CONFIRMED
    assert get(service, chain.light).confirmed_valid_at.seconds == 150, "an older restatement does not move it back"

    late = write(service, chain.namespace, "user A switched to sepia mode", VECTORS["sepia"], value="sepia", at=120)
    assert late.outcome == BACKDATED, memory_service_pb2.WriteOutcome.Name(late.outcome)
    assert late.memory.state == OBSOLETE
    assert interval(late.memory) == (120, 150), "closed where light was confirmed"
    assert late.memory.superseded_by == chain.light
    light = get(service, chain.light)
    assert light.state == ACTIVE
    assert interval(light) == (100, None)
    current = [m.memory.id for m in recall(service, chain.namespace, VECTORS["sepia"]).memories]
    assert current[0] == chain.light
    assert late.memory.id not in current
    then = recall(service, chain.namespace, VECTORS["sepia"], as_of=130).memories
    assert late.memory.id in [m.memory.id for m in then]
    versions = list(history(service, chain.namespace).versions)
    assert [v.id for v in versions] == [chain.dark, chain.light, late.memory.id]
    assert_links_two_way(versions)

    # A value from the confirmation's time on is news: it supersedes.
    blue = write(service, chain.namespace, "user A prefers blue mode now", VECTORS["blue"], value="blue", at=150)
    assert blue.outcome == SUPERSEDED_PREVIOUS
    assert_links_two_way(list(history(service, chain.namespace).versions))


def test_backdated_fact_appears_in_the_lineage_of_its_successor(service: Any) -> None:
    chain = dark_then_light(service, "facts-lineage-late")
    late = write(service, chain.namespace, "user A preferred night mode", VECTORS["night"], value="night", at=5)
    assert late.outcome == BACKDATED
    lineage = service.History(memory_service_pb2.HistoryRequest(memory_id=chain.dark))
    ids = [v.id for v in lineage.versions]
    assert late.memory.id in ids, (
        f"memory {late.memory.id} was superseded by {chain.dark}, but the lineage of {chain.dark} is {ids}"
    )
    assert ids == [late.memory.id, chain.dark, chain.light]


# ---- restatements confirm -----------------------------------------------------------------------


def test_restated_value_confirms_instead_of_duplicating(service: Any) -> None:
    chain = dark_then_light(service, "facts-restate")
    before_record = get(service, chain.light)
    before_counts = counts(service)
    restated = write(service, chain.namespace, "User A prefers LIGHT mode!", VECTORS["light"], value="Light!", at=120)
    assert restated.outcome == CONFIRMED, memory_service_pb2.WriteOutcome.Name(restated.outcome)
    assert restated.memory.id == chain.light
    after_record = get(service, chain.light)
    assert after_record.confidence > before_record.confidence
    assert after_record.access_count == before_record.access_count + 1
    assert after_record.state == ACTIVE
    assert interval(after_record) == (100, None), "a restatement does not move the validity"
    last_sequence, total = counts(service)
    assert total == before_counts[1], "no new memory"
    assert last_sequence > before_counts[0], "the confirmation is a change-log event"
    assert [v.id for v in history(service, chain.namespace).versions] == [chain.dark, chain.light]


def test_restating_an_old_value_at_its_own_time_confirms_the_history_entry(service: Any) -> None:
    chain = dark_then_light(service, "facts-restate-old")
    total = counts(service)[1]
    restated = write(service, chain.namespace, "user A preferred dark mode", VECTORS["dark"], value="DARK", at=10)
    assert restated.outcome == CONFIRMED
    assert restated.memory.id == chain.dark
    assert get(service, chain.dark).state == OBSOLETE, "confirming history does not make it current"
    assert counts(service)[1] == total


# ---- equal world time ---------------------------------------------------------------------------


def test_equal_world_time_higher_confidence_supersedes_lower_backdates(service: Any) -> None:
    namespace = "facts-equal-time"
    first = write(
        service,
        namespace,
        "user A's colour is blue",
        VECTORS["blue"],
        value="blue",
        at=300,
        attribute="colour",
        confidence=0.5,
    )
    assert first.outcome == CREATED
    trusted = write(
        service,
        namespace,
        "user A's colour is green",
        VECTORS["blue"],
        value="green",
        at=300,
        attribute="colour",
        confidence=0.9,
    )
    assert trusted.outcome == SUPERSEDED_PREVIOUS, memory_service_pb2.WriteOutcome.Name(trusted.outcome)
    blue = get(service, first.memory.id)
    assert blue.state == OBSOLETE
    assert blue.superseded_by == trusted.memory.id
    assert interval(blue) == (300, 300)

    doubtful = write(
        service,
        namespace,
        "user A's colour is red",
        VECTORS["blue"],
        value="red",
        at=300,
        attribute="colour",
        confidence=0.2,
    )
    assert doubtful.outcome == BACKDATED, memory_service_pb2.WriteOutcome.Name(doubtful.outcome)
    assert doubtful.memory.state == OBSOLETE
    green = get(service, trusted.memory.id)
    assert green.state == ACTIVE
    assert not green.HasField("valid_to")
    ids = [m.memory.id for m in recall(service, namespace, VECTORS["blue"]).memories]
    assert ids == [trusted.memory.id]
    # The less trusted value lost to the current one, so the current one is what closes it.
    assert doubtful.memory.superseded_by == trusted.memory.id, (
        f"back-dated 'red' is linked to {doubtful.memory.superseded_by}; the value that won is {trusted.memory.id}"
    )


def test_facts_of_other_entities_and_attributes_do_not_interfere(service: Any) -> None:
    chain = dark_then_light(service, "facts-isolated")
    other_entity = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory(
                "user B prefers dark mode",
                VECTORS["dark"],
                namespace=chain.namespace,
                entity="user:b",
                kind=PREFERENCE,
                fact=memory_pb2.Fact(attribute=ATTRIBUTE, value="dark"),
                valid_from=world(500),
            )
        )
    ).result
    assert other_entity.outcome == CREATED
    other_attribute = write(
        service,
        chain.namespace,
        "user A uses a large font",
        VECTORS["light"],
        value="large",
        at=500,
        attribute="font_size",
    )
    assert other_attribute.outcome == CREATED
    assert get(service, chain.light).state == ACTIVE
    other_namespace = write(
        service, "facts-isolated-2", "user A prefers dark mode", VECTORS["dark"], value="dark", at=500
    )
    assert other_namespace.outcome == CREATED
    assert get(service, chain.light).state == ACTIVE
