"""The pair judge over gRPC: a change said in prose retires what it replaces, an addition touches nothing.

The sidecar embeds every text and runs the shipped judge (``--judge local``). Each write returns at once; the
judge settles its pairs off the write path, and ``Govern`` waits for it before it sweeps, so every test asks for a
sweep before it looks. What the judge retires is reversible with ``Restore``, and each retirement's reason on the
change log says it was judged. Each test works in a namespace of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import memory, stub

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
DAY_S = 86_400


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    process = start_sidecar(tmp_path_factory.mktemp("judge-data"), embedder="local", judge="local")
    try:
        yield stub(process.unix_target)
    finally:
        process.stop()


def write(service: Any, namespace: str, texts: list[tuple[str, str]], **fields: Any) -> list[int]:
    """Write (text, entity) pairs one a day in world time; their ids in order."""
    ids = []
    for day, (text, entity) in enumerate(texts):
        item = memory(text, kind=FACT, namespace=namespace, entity=entity,
                      valid_from=Timestamp(seconds=1_700_000_000 + day * DAY_S), **fields)  # fmt: skip
        ids.append(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)
    return ids


def settled(service: Any, namespace: str, ids: list[int]) -> list[memory_pb2.Memory]:
    service.Govern(memory_service_pb2.GovernRequest(namespace=namespace))
    return list(service.Get(memory_service_pb2.GetRequest(ids=ids)).memories)


def test_a_prose_change_retires_the_keyed_fact_it_replaces_and_restore_undoes_it(service: Any) -> None:
    ns = "judge-keyed"
    keyed = memory("Ana works at Shopify as a product designer.", kind=FACT, namespace=ns, entity="person:ana",
                   fact=memory_pb2.Fact(attribute="employer", value="Shopify"),
                   valid_from=Timestamp(seconds=1_700_000_000))  # fmt: skip
    old = service.Remember(memory_service_pb2.RememberRequest(memory=keyed)).result.memory.id
    (other,) = write(service, ns, [("Ana lives in Toronto with her partner.", "person:ana")])
    item = memory("Ana left Shopify last month; she has joined Canva as a senior designer.", kind=FACT, namespace=ns,
                  entity="person:ana", valid_from=Timestamp(seconds=1_700_000_000 + 5 * DAY_S))  # fmt: skip
    new = service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id
    retired, kept, newer = settled(service, ns, [old, other, new])
    assert retired.state == OBSOLETE
    assert retired.superseded_by == new
    assert list(newer.supersedes) == [old]
    assert (kept.state, kept.possibly_outdated_by) == (ACTIVE, 0)
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old)).events
    superseded = [e for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert superseded
    assert "judged" in superseded[-1].reason
    restored = service.Restore(memory_service_pb2.RestoreRequest(memory_id=old, reason="the judge was wrong"))
    assert restored.memory.state == ACTIVE
    assert service.Get(memory_service_pb2.GetRequest(ids=[old])).memories[0].state == ACTIVE


def test_an_addition_and_another_entitys_change_touch_nothing(service: Any) -> None:
    ns = "judge-additions"
    ids = write(
        service,
        ns,
        [
            ("Lena speaks German fluently; she grew up in Hamburg.", "person:lena"),
            ("Marco lives in Milan and works from home.", "person:marco"),
            ("Lena is also learning Spanish and can hold a basic conversation.", "person:lena"),
            ("Tom moved to Munich last week.", "person:tom"),
        ],
    )
    for stored in settled(service, ns, ids):
        assert (stored.state, stored.possibly_outdated_by) == (ACTIVE, 0), stored.content


def test_a_change_written_without_an_entity_retires_the_statement_it_replaces(service: Any) -> None:
    ns = "judge-no-entity"
    old, other, new = write(
        service,
        ns,
        [
            ("The staging database runs Postgres 12 on db1.", ""),
            ("The team standup is at 9:30 every weekday.", ""),
            ("Staging was upgraded: it now runs Postgres 15 on db3.", ""),
        ],
    )
    retired, kept, newer = settled(service, ns, [old, other, new])
    assert (retired.state, retired.superseded_by) == (OBSOLETE, new)
    assert (kept.state, kept.possibly_outdated_by) == (ACTIVE, 0)
    assert newer.state == ACTIVE
