"""``ListEntities`` and ``Beliefs`` over gRPC and the Python client: what the agent believes now (issue 42, item 1).

An entity's beliefs are each attribute's current value, whether it was written with a fact key or read from a
plain-text statement, each with the memory that holds it and the fact key whose History tells its life. Each test
works in its own namespace of one shared sidecar; vectors are near one direction so that only the texts decide,
except for statements that must be read as nothing (their vectors point elsewhere).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import Writer, bad_fields, memory, pack, status_details, stub

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
FACT = memory_pb2.MEMORY_KIND_FACT
EPISODE = memory_pb2.MEMORY_KIND_EPISODE
SUPERSEDED = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def test_an_entitys_beliefs_include_a_value_read_from_prose(service: Any) -> None:
    w = Writer(service, "beliefs-prose", seed=1)
    old = w.keyed("Ana works at Shopify.", 1_000, "person:ana", "employer", "Shopify")
    city = w.keyed(
        "Ana lives in Lisbon.", 1_100, "person:ana", "city", "Lisbon", source=memory_pb2.MEMORY_SOURCE_TOOL_RESULT
    )
    w.keyed("Bo works at Shopify.", 1_200, "person:bo", "employer", "Shopify")  # another entity
    Writer(service, "beliefs-prose-other", seed=1).keyed("Ana works at X.", 1_300, "person:ana", "employer", "X")
    new = w.remember("These days Ana works at Canva.", 2_000, entity="person:ana")
    assert new.outcome == SUPERSEDED, "perception no longer reads this change: pick a wording it reads"
    trip = w.remember(
        "Ana flew to Porto for a workshop.", 2_100, vector=w.elsewhere(), entity="person:ana", kind=EPISODE
    )
    assert not trip.memory.inferred.attribute

    answer = w.beliefs("person:ana")
    assert answer.entity == "person:ana"
    assert [b.attribute for b in answer.beliefs] == ["city", "employer"]
    keyed, read = answer.beliefs
    assert (keyed.value, keyed.read_from_text, keyed.memory.id) == ("Lisbon", False, city.memory.id)
    assert keyed.memory.source == memory_pb2.MEMORY_SOURCE_TOOL_RESULT
    assert keyed.memory.valid_from.seconds == 1_100  # when it became true
    assert 0 < keyed.memory.confidence <= 1
    assert keyed.version_count == 1
    # The value written in prose is the current one, not the keyed value it retired.
    assert (read.memory.id, read.read_from_text, read.memory.state) == (new.memory.id, True, ACTIVE)
    assert read.value.lower() == "canva"
    assert read.memory.inferred.attribute == "employer"
    assert (read.version_count, list(read.possibly_outdated_by), list(read.also_current)) == (2, [], [])
    assert (read.history_key.namespace, read.history_key.entity, read.history_key.attribute) == (
        "beliefs-prose",
        "person:ana",
        "employer",
    )
    history = service.History(memory_service_pb2.HistoryRequest(fact_key=read.history_key))
    assert [v.id for v in history.versions] == [old.memory.id, new.memory.id]
    assert answer.unattributed_count == 1  # the trip: an episode about Ana with no attribute
    assert answer.last_changed_at.seconds > 0
    assert not w.beliefs("person:nobody").beliefs  # unknown: empty, not an error


def test_a_doubted_value_carries_its_open_doubt(service: Any, shared_sidecar: Sidecar) -> None:
    from memevo.client import MemoryClient

    ns = "beliefs-doubt"
    rng = np.random.default_rng(10)
    base = rng.standard_normal(8)
    # Worded apart and close (cosine 0.8), not one template: a soft conflict, which doubts and retires nothing.
    other = rng.standard_normal(8)
    other -= other.dot(base) / base.dot(base) * base
    tilted = base / np.linalg.norm(base) * 0.8 + other / np.linalg.norm(other) * 0.6
    about = {"namespace": ns, "kind": FACT, "entity": "user:ana-lee"}
    fact = memory_pb2.Fact(attribute="note_tool", value="a paper notebook")
    older = memory("Ana keeps her notes in a paper notebook", pack(base), fact=fact, **about)
    newer = memory("these days Ana writes everything down in Obsidian", pack(tilted), **about)
    old_id, new_id = (
        service.Remember(memory_service_pb2.RememberRequest(memory=m)).result.memory.id for m in (older, newer)
    )
    stored = service.Get(memory_service_pb2.GetRequest(ids=[old_id])).memories[0]
    assert (stored.state, stored.possibly_outdated_by) == (ACTIVE, new_id), (
        "no longer a soft conflict: pick another pair"
    )

    request = memory_service_pb2.BeliefsRequest(namespace=ns, entity="user:ana-lee")
    (belief,) = service.Beliefs(request).beliefs
    assert (belief.attribute, belief.value, belief.memory.id) == ("note_tool", "a paper notebook", old_id)
    assert list(belief.possibly_outdated_by) == [new_id]
    # As of the instant the older one became true, the newer one did not hold yet: no doubt then.
    request.as_of.CopyFrom(stored.valid_from)
    (then,) = service.Beliefs(request).beliefs
    assert (then.memory.id, list(then.possibly_outdated_by)) == (old_id, [])
    (summary,) = service.ListEntities(memory_service_pb2.ListEntitiesRequest(namespace=ns)).entities
    assert (summary.current_count, summary.belief_count, summary.doubted_count) == (2, 1, 1)

    with MemoryClient(shared_sidecar.unix_target) as client:
        (read,) = client.beliefs("user:ana-lee", namespace=ns).beliefs
        assert (read.possibly_outdated_by, read.memory.possibly_outdated_by) == ((new_id,), new_id)
        client.restore(old_id, reason="both hold")  # the doubt settled: no longer open
        assert client.beliefs("user:ana-lee", namespace=ns).beliefs[0].possibly_outdated_by == ()


def test_entities_of_a_namespace_with_counts_search_and_limit(service: Any, shared_sidecar: Sidecar) -> None:
    from memevo.client import MemoryClient, MemoryState

    w = Writer(service, "beliefs-entities", seed=3)
    w.keyed("Bo works at Shopify.", 1_000, "person:bo", "employer", "Shopify")
    w.keyed("Ana works at Shopify.", 1_100, "person:ana", "employer", "Shopify")
    w.keyed("Ana works at Canva.", 1_200, "person:ana", "employer", "Canva")  # retires the Shopify one
    w.keyed("Ana lives in Lisbon.", 1_300, "person:ana", "city", "Lisbon")
    w.remember("Ana flew to Porto.", 1_400, vector=w.elsewhere(), entity="person:ana", kind=EPISODE)
    w.remember("No entity here.", 1_500, vector=w.elsewhere(), kind=EPISODE)

    listed = w.entities()
    assert listed.total_count == 2
    assert [e.entity for e in listed.entities] == ["person:ana", "person:bo"]  # latest change first
    ana, bo = listed.entities
    assert (ana.memory_count, ana.current_count, ana.belief_count, ana.doubted_count) == (4, 3, 2, 0)
    assert (bo.memory_count, bo.current_count, bo.belief_count) == (1, 1, 1)
    assert ana.last_changed_at.ToNanoseconds() >= bo.last_changed_at.ToNanoseconds() > 0
    assert [e.entity for e in w.entities(query="BO").entities] == ["person:bo"]
    cut = w.entities(limit=1)
    assert (cut.total_count, [e.entity for e in cut.entities]) == (2, ["person:ana"])
    assert not Writer(service, "beliefs-nothing-here", seed=4).entities().entities

    with MemoryClient(shared_sidecar.unix_target) as client:
        entities = client.list_entities("beliefs-entities", query="ana")
        assert (entities.total_count, entities.entities[0].belief_count) == (1, 2)
        assert entities.entities[0].last_changed_at is not None
        beliefs = client.beliefs("person:ana", namespace="beliefs-entities")
        assert [(b.attribute, b.value, b.read_from_text) for b in beliefs.beliefs] == [
            ("city", "Lisbon", False),
            ("employer", "Canva", False),
        ]
        employer = beliefs.beliefs[1]
        assert employer.memory.state == MemoryState.ACTIVE
        versions = client.history(employer.history_key).versions
        assert [v.fact.value for v in versions if v.fact] == ["Shopify", "Canva"]

    async def asynchronously() -> tuple[int, list[str]]:
        from memevo.client import AsyncMemoryClient

        async with AsyncMemoryClient(shared_sidecar.unix_target) as client:
            listed = await client.list_entities("beliefs-entities", limit=1)
            beliefs = await client.beliefs("person:bo", namespace="beliefs-entities")
            return listed.total_count, [b.value for b in beliefs.beliefs]

    assert asyncio.run(asynchronously()) == (2, ["Shopify"])


def test_beliefs_as_of_a_past_instant(service: Any, shared_sidecar: Sidecar) -> None:
    from datetime import UTC, datetime

    from memevo.client import AsyncMemoryClient, MemoryClient, MemoryState

    ns = "beliefs-as-of"
    w = Writer(service, ns, seed=5)
    shopify = w.keyed("Ana works at Shopify.", 1_000, "person:ana", "employer", "Shopify").memory.id
    lisbon = w.keyed("Ana lives in Lisbon.", 1_100, "person:ana", "city", "Lisbon").memory.id
    canva = w.remember("These days Ana works at Canva.", 2_000, entity="person:ana")
    assert canva.outcome == SUPERSEDED, "perception no longer reads this change: pick a wording it reads"
    porto = w.keyed("Ana lives in Porto.", 3_000, "person:ana", "city", "Porto").memory.id

    def held(seconds: int) -> list[tuple[str, str, int, int]]:
        request = memory_service_pb2.BeliefsRequest(namespace=ns, entity="person:ana", as_of=Timestamp(seconds=seconds))
        answer = service.Beliefs(request)
        assert answer.as_of == Timestamp(seconds=seconds)
        return [(b.attribute, b.value.lower(), b.memory.id, b.version_count) for b in answer.beliefs]

    assert held(1_050) == [("employer", "shopify", shopify, 2)]  # the city was stated at 1 100
    assert held(1_500) == [("city", "lisbon", lisbon, 2), ("employer", "shopify", shopify, 2)]
    assert held(2_500) == [("city", "lisbon", lisbon, 2), ("employer", "canva", canva.memory.id, 2)]
    now = w.beliefs("person:ana")
    assert [b.memory.id for b in now.beliefs] == [porto, canva.memory.id]
    assert now.as_of.seconds > 3_000  # the time of answering
    assert not held(999)

    at = datetime.fromtimestamp(1_500, tz=UTC)
    with MemoryClient(shared_sidecar.unix_target) as client:
        past = client.beliefs("person:ana", namespace=ns, as_of=at)
        assert [(b.value, b.memory.state) for b in past.beliefs] == [
            ("Lisbon", MemoryState.OBSOLETE),  # superseded since, held then
            ("Shopify", MemoryState.OBSOLETE),
        ]
        assert past.as_of == at
        assert [b.value for b in client.beliefs("person:ana", namespace=ns).beliefs] == ["Porto", "canva"]
        with pytest.raises(ValueError, match="as_of"):
            client.beliefs("person:ana", namespace=ns, as_of=datetime(2026, 3, 1))  # naive: refused

    async def asynchronously() -> list[str]:
        async with AsyncMemoryClient(shared_sidecar.unix_target) as client:
            answer = await client.beliefs("person:ana", namespace=ns, as_of=datetime.fromtimestamp(2_500, tz=UTC))
            return [b.value for b in answer.beliefs]

    assert asyncio.run(asynchronously()) == ["Lisbon", "canva"]


@pytest.mark.parametrize(
    ("rpc", "fields", "field"),
    [
        ("Beliefs", {}, "entity"),
        ("Beliefs", {"entity": "x", "namespace": "bad namespace"}, "namespace"),
        ("Beliefs", {"entity": "a\nb"}, "entity"),
        ("Beliefs", {"entity": "e" * 300}, "entity"),
        ("Beliefs", {"entity": "x", "as_of": Timestamp(seconds=1, nanos=-1)}, "as_of"),
        ("Beliefs", {"entity": "x", "as_of": Timestamp(seconds=300_000_000_000)}, "as_of"),
        ("ListEntities", {"limit": 1_000_000}, "limit"),
        ("ListEntities", {"query": "q" * 300}, "query"),
        ("ListEntities", {"namespace": "bad namespace"}, "namespace"),
    ],
)
def test_bad_input_names_the_field(service: Any, rpc: str, fields: dict[str, Any], field: str) -> None:
    request = getattr(memory_service_pb2, f"{rpc}Request")(**fields)
    with pytest.raises(grpc.RpcError) as raised:
        getattr(service, rpc)(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(raised.value) == [field]


def test_a_token_reads_the_beliefs_of_its_namespaces_only(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-t0ken *\nalice-t0ken team-a\n")
    tokens.chmod(0o600)
    sidecar = start_sidecar(tmp_path / "data", "--tokens-file", str(tokens))
    try:
        admin, alice = stub(sidecar.unix_target, "admin-t0ken"), stub(sidecar.unix_target, "alice-t0ken")
        fact = memory_pb2.Fact(attribute="status", value="secret")
        item = memory("The plan is secret.", pack(np.ones(8)), namespace="team-b", entity="plan", kind=FACT, fact=fact)
        admin.Remember(memory_service_pb2.RememberRequest(memory=item))
        for call in (
            lambda: alice.Beliefs(memory_service_pb2.BeliefsRequest(namespace="team-b", entity="plan")),
            lambda: alice.ListEntities(memory_service_pb2.ListEntitiesRequest(namespace="team-b")),
            lambda: alice.ListEntities(memory_service_pb2.ListEntitiesRequest()),  # "default" is not hers either
        ):
            with pytest.raises(grpc.RpcError) as denied:
                call()
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert status_details(denied.value)[1]["field"] == "namespace"
        assert not alice.ListEntities(memory_service_pb2.ListEntitiesRequest(namespace="team-a")).entities
        assert admin.Beliefs(memory_service_pb2.BeliefsRequest(namespace="team-b", entity="plan")).beliefs
    finally:
        sidecar.stop()
