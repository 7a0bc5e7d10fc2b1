"""Slots read by attribute names over gRPC: a plain statement worded unlike any keyed fact still finds its slot.

With an embedder, perception also reads which keyed attribute of the entity's type a statement means by its
cosine to the attributes' embedded names ("the user's working hours"): one keyed fact of an attribute is enough
to know its name, where templates and directions need many. Only a clear reading counts; remarks about the
entity ("Tomas was out sick today") read no attribute and retire nothing. The sidecar embeds every text here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import memory, stub

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
SUPERSEDED = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
NAMESPACE = "names"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    process = start_sidecar(tmp_path_factory.mktemp("names-data"), embedder="local")
    try:
        yield stub(process.unix_target)
    finally:
        process.stop()


_clock = iter(range(1_000, 1_000_000, 100))


def remember(service: Any, content: str, entity: str, **fields: Any) -> memory_service_pb2.WriteResult:
    item = memory(
        content, kind=FACT, namespace=NAMESPACE, entity=entity, valid_from=Timestamp(seconds=next(_clock)), **fields
    )
    return service.Remember(memory_service_pb2.RememberRequest(memory=item)).result


def keyed(service: Any, content: str, entity: str, attribute: str, value: str) -> memory_service_pb2.WriteResult:
    return remember(service, content, entity, fact=memory_pb2.Fact(attribute=attribute, value=value))


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    return service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0]


@pytest.fixture(scope="module")
def known(service: Any) -> None:
    """Two users' keyed facts: the namespace knows three user attributes by name, and none worded as below."""
    people = (("ravi", "Oslo", "Kotlin", "8:00-16:00"), ("mei", "Lima", "Rust", "10:00-18:00"))
    for who, city, language, hours in people:
        name = who.title()
        keyed(service, f"{name} lives in {city}.", f"user:{who}", "location", city)
        keyed(service, f"{name} codes mostly in {language}.", f"user:{who}", "language", language)
        keyed(service, f"{name}'s working hours are {hours}.", f"user:{who}", "working_hours", hours)


def test_a_keyed_fact_retires_the_statement_its_attribute_name_reads(service: Any, known: None) -> None:
    said = remember(service, "Tomas is at work from early morning until mid afternoon.", "user:tomas").memory
    assert said.inferred.attribute == "working_hours"
    assert said.inferred.method == "attribute name"
    remark = remember(service, "Tomas was out sick today.", "user:tomas").memory
    place = remember(service, "Tomas is based in Porto.", "user:tomas").memory
    assert not remark.inferred.attribute, "a remark names no attribute"

    new = keyed(service, "Tomas's working hours changed to 7:00-15:00.", "user:tomas", "working_hours", "7:00-15:00")
    assert new.outcome == SUPERSEDED
    assert list(new.affected_ids) == [said.id]
    old = get(service, said.id)
    assert old.state == OBSOLETE
    assert old.superseded_by == new.memory.id
    for untouched in (remark.id, place.id):
        record = get(service, untouched)
        assert record.state == ACTIVE
        assert record.superseded_by == 0


def test_a_statement_its_attribute_name_reads_retires_the_keyed_fact(service: Any, known: None) -> None:
    fact = keyed(service, "Ines's working hours are 10:00-18:00.", "user:ines", "working_hours", "10:00-18:00").memory
    city = keyed(service, "Ines lives in Quito.", "user:ines", "location", "Quito").memory
    said = remember(service, "Ines keeps office hours from late morning into the evening.", "user:ines")
    assert said.memory.inferred.attribute == "working_hours"
    assert said.memory.inferred.method == "attribute name"
    assert said.outcome == SUPERSEDED
    assert get(service, fact.id).superseded_by == said.memory.id
    assert get(service, city.id).state == ACTIVE, "another attribute of the same user stays current"


def test_a_whole_name_says_whom_a_text_is_about_over_one_word_of_another(service: Any) -> None:
    # "Gateway" alone, capitalised at the start of a sentence, is one word of the notifications gateway's name;
    # the ingest worker is named whole. Filed under the gateway, the statement would retire the gateway's limit.
    gateway = keyed(
        service,
        "The notifications-gateway service is rate-limited to 100 requests per second.",
        "service:notifications-gateway",
        "rate_limit",
        "100 requests per second",
    ).memory
    keyed(service, "The ingest worker listens on port 8080.", "service:ingest-worker", "port", "8080")
    item = memory(
        "Gateway config: the ingest worker allows 5000 requests per second per client.",
        kind=FACT,
        namespace=NAMESPACE,
        valid_from=Timestamp(seconds=next(_clock)),
    )
    said = service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory
    assert said.inferred.entity == "service:ingest-worker"
    assert get(service, gateway.id).state == ACTIVE
