"""``History`` of a fact key over gRPC: the versions written in prose are there beside the keyed ones (issue 40).

A plain-text statement perception read as the key's (entity, attribute) is a version, and so is a statement
linked to a version by supersession when nothing was inferred for it (an explicit ``Supersede``, a judge's
retirement). Memories of another attribute, another entity or another namespace are not. Each test works in its
own namespace of one shared sidecar; vectors are near one direction so that only the texts decide, except where a
statement must be read as nothing (then its vector points elsewhere).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Sidecar
from helpers import Writer, stub

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
SUPERSEDED = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def test_a_prose_change_is_a_version_of_the_key_it_retired(service: Any) -> None:
    w = Writer(service, "history-prose", seed=1)
    old = w.keyed("Ana works at Shopify.", 1_000, "person:ana", "employer", "Shopify")
    w.keyed("Ana lives in Lisbon.", 1_100, "person:ana", "city", "Lisbon")  # another attribute
    w.keyed("Bo works at Shopify.", 1_200, "person:bo", "employer", "Shopify")  # another entity
    Writer(service, "history-prose-other", seed=1).keyed("Ana works at Shopify.", 1_300, "person:ana", "employer", "X")
    new = w.remember("Ana's employer is Canva now.", 2_000, entity="person:ana")
    assert new.outcome == SUPERSEDED, "perception no longer reads this change: pick a wording it reads"
    assert new.memory.inferred.attribute == "employer"

    history = w.history("person:ana", "employer")
    # Before issue 40 only the keyed version came back: the current value, written in prose, was missing.
    assert [v.id for v in history.versions] == [old.memory.id, new.memory.id]
    retired, current = history.versions
    assert (retired.state, retired.superseded_by, retired.valid_to.seconds) == (OBSOLETE, new.memory.id, 2_000)
    assert current.state == ACTIVE
    assert not current.HasField("valid_to")
    assert list(current.supersedes) == [old.memory.id]
    assert current.content == "Ana's employer is Canva now."
    superseded = [e for e in history.events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert [e.memory_id for e in superseded] == [old.memory.id]
    assert "inferred" in superseded[0].reason
    created = {e.memory_id for e in history.events if e.type == events_pb2.CHANGE_EVENT_TYPE_CREATED}
    assert created == {old.memory.id, new.memory.id}

    # Restored, the keyed version is current again; the prose statement still states the key, so it stays.
    service.Restore(memory_service_pb2.RestoreRequest(memory_id=old.memory.id, reason="misread"))
    after = w.history("person:ana", "employer")
    assert [(v.id, v.state) for v in after.versions] == [(old.memory.id, ACTIVE), (new.memory.id, ACTIVE)]
    assert any(e.memory_id == old.memory.id and e.reason == "restored: misread" for e in after.events)


def test_statements_that_retired_a_version_are_in_its_history_when_nothing_was_inferred(service: Any) -> None:
    w = Writer(service, "history-links", seed=2)
    old = w.keyed("Ana works at Shopify.", 1_000, "person:ana", "employer", "Shopify")
    # Read as nothing (no entity, a vector near no statement): only the supersessions below link it to the key.
    offer = w.remember("Signed the contract with Canva yesterday.", 2_000, vector=w.elsewhere())
    later = w.remember("Moved on from the Canva contract to a startup.", 3_000, vector=w.elsewhere())
    assert not offer.memory.inferred.attribute
    assert not later.memory.inferred.attribute
    assert w.history("person:ana", "employer").versions[-1].id == old.memory.id

    service.Supersede(memory_service_pb2.SupersedeRequest(old_id=old.memory.id, new_id=offer.memory.id))
    service.Supersede(memory_service_pb2.SupersedeRequest(old_id=offer.memory.id, new_id=later.memory.id))
    history = w.history("person:ana", "employer")
    assert [v.id for v in history.versions] == [old.memory.id, offer.memory.id, later.memory.id]
    assert [v.state for v in history.versions] == [OBSOLETE, OBSOLETE, ACTIVE]
    assert [v.superseded_by for v in history.versions] == [offer.memory.id, later.memory.id, 0]
    superseded = [e.memory_id for e in history.events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert superseded == [old.memory.id, offer.memory.id]

    # The lineage of the keyed version and the key's history agree.
    lineage = service.History(memory_service_pb2.HistoryRequest(memory_id=old.memory.id)).versions
    assert [v.id for v in lineage] == [v.id for v in history.versions]


def test_a_key_nothing_states_has_no_history_and_other_slots_stay_out(service: Any) -> None:
    w = Writer(service, "history-apart", seed=3)
    w.keyed("Ana lives in Lisbon.", 1_000, "person:ana", "city", "Lisbon")
    w.keyed("Bo works at Shopify.", 1_100, "person:bo", "employer", "Shopify")
    assert list(w.history("person:ana", "employer").versions) == []
    assert list(w.history("person:nobody", "employer").versions) == []
    assert [v.content for v in w.history("person:bo", "employer").versions] == ["Bo works at Shopify."]
