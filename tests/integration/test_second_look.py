"""A second look over gRPC: statements stored unread are read again by a sweep once the namespace knows more.

A statement worded as no keyed fact was when it was written ("Zofia is based in Taipei now." while the only
location keyed was "Zofia works from Lisbon.") retires nothing at its write. Once keyed facts of other users
teach that wording, a governance sweep reads it as their attribute and settles it against its slot's holders by
world time, in either direction, with the reason on the change log. A statement the new knowledge does not read
stays as it was. The sidecar runs without scheduled sweeps, so that only ``Govern`` can take the second look.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import memory, pack, stub

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    data = Path(tmp_path_factory.mktemp("second-look"))
    process = start_sidecar(data, "--sweep-interval-s", "0", "--metrics-listen", "127.0.0.1:0")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def service(sidecar: Sidecar) -> Any:
    return stub(sidecar.unix_target)


def second_look_metrics(process: Sidecar) -> dict[str, float]:
    ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
    with urllib.request.urlopen(f"http://{ready['metrics']}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {
        name: float(value) for name, value in (line.split() for line in lines if line.startswith("memevo_second_look_"))
    }


def say(which: int) -> bytes:
    """A statement's vector: a direction every statement shares and one of its own (cosine 0.49 to another's), too
    far apart for likeness alone to say that two statements fill one slot."""
    axes = np.eye(8)
    return pack(0.7 * axes[0] + 0.71 * axes[which])


def user(name: str, ns: str = "second-look") -> dict[str, Any]:
    return {"namespace": ns, "kind": FACT, "entity": f"user:{name}"}


def remember(service: Any, content: str, vector: bytes, seconds: int, **fields: Any) -> memory_service_pb2.WriteResult:
    request = memory_service_pb2.RememberRequest(memory=memory(content, vector, valid_from=Timestamp(seconds=seconds),
                                                               **fields))  # fmt: skip
    return service.Remember(request).result


def location(
    service: Any, name: str, content: str, value: str, vector: bytes, seconds: int, ns: str = "second-look"
) -> int:
    fact = memory_pb2.Fact(attribute="location", value=value)
    return remember(service, content, vector, seconds, fact=fact, **user(name, ns)).memory.id


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    return service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0]


def reasons(service: Any, memory_id: int) -> list[str]:
    """Why the memory itself changed since its write (History also lists the changes that name it)."""
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=memory_id)).events
    return [e.reason for e in events if e.memory_id == memory_id and e.type != events_pb2.CHANGE_EVENT_TYPE_CREATED]


def test_a_sweep_reads_again_what_later_keyed_facts_teach_and_settles_it_by_world_time(
    sidecar: Sidecar, service: Any
) -> None:
    lisbon = location(service, "zofia", "Zofia works from Lisbon.", "Lisbon", say(1), 1_000)
    taipei = remember(service, "Zofia is based in Taipei now.", say(2), 2_000, **user("zofia"))
    hiking = remember(service, "Zofia enjoys hiking on weekends.", say(3), 2_000, **user("zofia"))
    oslo = location(service, "ana", "Ana works from Oslo.", "Oslo", say(4), 3_000)
    # Said after Ana's keyed location was written, but true from an earlier moment: a late statement.
    rome = remember(service, "Ana is based in Rome now.", say(5), 2_500, **user("ana"))
    for written in (taipei, hiking, rome):
        assert written.outcome == CREATED
        assert written.memory.inferred.attribute == ""
    for name, city, axis in (("ben", "Porto", 6), ("cleo", "Paris", 7)):
        location(service, name, f"{name.title()} is based in {city} now.", city, say(axis), 500)
    # The keyed facts of other users taught the wording; nothing of Zofia's or Ana's changed by it.
    assert get(service, lisbon).state == ACTIVE
    assert get(service, taipei.memory.id).inferred.attribute == ""
    assert second_look_metrics(sidecar) == {
        "memevo_second_look_statements_total": 0,
        "memevo_second_look_read_total": 0,
        "memevo_second_look_tracked": 3,
    }

    service.Govern(memory_service_pb2.GovernRequest())

    assert second_look_metrics(sidecar) == {
        "memevo_second_look_statements_total": 3,
        "memevo_second_look_read_total": 2,
        "memevo_second_look_tracked": 1,
    }
    retired = get(service, lisbon)
    assert (retired.state, retired.superseded_by, retired.valid_to.seconds) == (OBSOLETE, taipei.memory.id, 2_000)
    assert reasons(service, lisbon) == [
        f"superseded by memory {taipei.memory.id} (inferred on a second look: template of location)"
    ]
    current = get(service, taipei.memory.id)
    assert current.state == ACTIVE
    assert list(current.supersedes) == [lisbon]
    inferred = current.inferred
    assert (inferred.entity, inferred.attribute, inferred.value, inferred.method) == (
        "user:zofia",
        "location",
        "taipei",
        "template",
    )
    assert reasons(service, taipei.memory.id) == ["read again: template of location"]
    # The late statement is history at once, closed where the keyed location began.
    late = get(service, rome.memory.id)
    assert (late.state, late.superseded_by, late.valid_to.seconds) == (OBSOLETE, oslo, 3_000)
    assert get(service, oslo).state == ACTIVE
    assert list(get(service, oslo).supersedes) == [rome.memory.id]
    # What the new knowledge does not read keeps its slot to itself.
    kept = get(service, hiking.memory.id)
    assert (kept.state, kept.superseded_by, kept.possibly_outdated_by, kept.inferred.attribute) == (ACTIVE, 0, 0, "")
    assert reasons(service, hiking.memory.id) == []


def test_a_statement_read_again_can_be_restored_and_is_not_read_twice(service: Any) -> None:
    """The second look's retirement is undone like any other; a later sweep does not take it again."""
    ns = "second-look-restore"
    old = location(service, "dara", "Dara works from Lima.", "Lima", say(1), 1_000, ns)
    new = remember(service, "Dara is based in Quito now.", say(2), 2_000, **user("dara", ns))
    assert new.memory.inferred.attribute == ""
    for name, city, axis in (("eli", "Cusco", 3), ("fay", "Bogota", 4), ("gus", "Cali", 5)):
        location(service, name, f"{name.title()} is based in {city} now.", city, say(axis), 500, ns)
    service.Govern(memory_service_pb2.GovernRequest())
    assert get(service, old).superseded_by == new.memory.id
    restored = service.Restore(memory_service_pb2.RestoreRequest(memory_id=old, reason="Dara is still in Lima")).memory
    assert (restored.state, restored.superseded_by) == (ACTIVE, 0)
    for name, city, axis in (("hal", "Tumbes", 6), ("ivy", "Arica", 7), ("jon", "Iquitos", 6), ("kai", "Puno", 7)):
        location(service, name, f"{name.title()} is based in {city} now.", city, say(axis), 500, ns)
    service.Govern(memory_service_pb2.GovernRequest())
    assert get(service, old).state == ACTIVE
    readings = [reason for reason in reasons(service, new.memory.id) if reason.startswith("read again")]
    assert readings == ["read again: template of location"]


def test_a_statement_that_took_over_a_slot_is_its_holder_when_its_predecessor_names_the_attribute(
    service: Any,
) -> None:
    """ "The Tufa team is still working towards the public beta." names no milestone, but it retired the statement
    that did (by likeness relative to the entity): the keyed milestone that comes later retires it as the slot's
    holder. Vectors: the entity's direction, then a slot's, then a wording's (see test_perception_slots)."""
    ns = "second-look-lineage"
    axes = np.eye(8)

    def said(slot: int, wording: int) -> bytes:
        return pack(0.7 * axes[0] + 0.71 * (0.8 * axes[1 + slot] + 0.6 * axes[5 + wording]))

    tufa = {"namespace": ns, "kind": FACT, "entity": "project:tufa"}
    first = remember(service, "Milestone for Tufa: the dogfood release.", said(0, 0), 1_000, **tufa)
    others = [
        remember(service, text, said(slot, 2), 1_000, **tufa).memory.id
        for slot, text in enumerate(
            ("Tufa's budget is two million euros.", "Tufa ships on March 3.",
             "Tufa's code lives in the tufa-core repository."), start=1)
    ]  # fmt: skip
    took_over = remember(service, "The Tufa team is still working towards the public beta.", said(0, 1), 2_000, **tufa)
    assert get(service, first.memory.id).superseded_by == took_over.memory.id
    assert took_over.memory.inferred.attribute == ""
    # Worded as nothing of Tufa's was: a vector no statement's likeness ties to it (cosine 0.49 to the holder).
    keyed = remember(service, "Roadmap: Tufa aims at the public API launch next.", pack(0.7 * axes[0] - 0.71 * axes[7]),
                     3_000,
                     fact=memory_pb2.Fact(attribute="milestone", value="the public API launch"), **tufa)  # fmt: skip
    retired = get(service, took_over.memory.id)
    assert (retired.state, retired.superseded_by) == (OBSOLETE, keyed.memory.id)
    assert reasons(service, took_over.memory.id) == [
        f"superseded by memory {keyed.memory.id} (inferred: lineage of milestone)"
    ]
    for other in others:  # the budget, the date and the repository are other slots of Tufa
        kept = get(service, other)
        assert (kept.state, kept.possibly_outdated_by) == (ACTIVE, 0)


def test_statements_stored_unread_before_a_restart_get_their_second_look(tmp_path: Path) -> None:
    """What waits for a second look is kept in memory; a start hands the stored unread statements to the first
    sweep again, so a restart between a statement and the keyed facts that teach its wording loses nothing."""
    data = tmp_path / "data"
    first = start_sidecar(data, "--sweep-interval-s", "0")
    try:
        service = stub(first.unix_target)
        lisbon = location(service, "zofia", "Zofia works from Lisbon.", "Lisbon", say(1), 1_000)
        taipei = remember(service, "Zofia is based in Taipei now.", say(2), 2_000, **user("zofia"))
    finally:
        assert first.stop() == 0
    second = start_sidecar(data, "--sweep-interval-s", "0")
    try:
        service = stub(second.unix_target)
        for name, city, axis in (("ben", "Porto", 6), ("cleo", "Paris", 7)):
            location(service, name, f"{name.title()} is based in {city} now.", city, say(axis), 500)
        assert get(service, lisbon).state == ACTIVE
        service.Govern(memory_service_pb2.GovernRequest())
        retired = get(service, lisbon)
        assert (retired.state, retired.superseded_by) == (OBSOLETE, taipei.memory.id)
        assert get(service, taipei.memory.id).inferred.attribute == "location"
    finally:
        second.stop()
