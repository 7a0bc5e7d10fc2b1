"""Slots of plain-text statements over gRPC: a statement without a fact key retires the one it replaces.

A memory about an entity (declared, or named in its text) without a fact key
gets an inferred slot from the namespace's own data — the templates of its
keyed facts, or another statement of the entity worded the same way with
another value — and supersedes that slot's current memory in either
direction between keyed and text, with the reason on the change log. Events
(episodes) that merely repeat a wording are never retired that way. Each
test works in its own namespace of one shared sidecar; vectors are near one
direction so that only the texts decide.
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import memory, pack, stub

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
EPISODE = memory_pb2.MEMORY_KIND_EPISODE
SUPERSEDED = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
CONFIRMED = memory_service_pb2.WRITE_OUTCOME_CONFIRMED


def near(seed: int, count: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(8)
    return [pack(base + 0.05 * rng.standard_normal(8)) for _ in range(count)]


def remember(service: Any, content: str, vector: bytes, **fields: Any) -> memory_service_pb2.WriteResult:
    return service.Remember(memory_service_pb2.RememberRequest(memory=memory(content, vector, **fields))).result


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    return service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0]


def at(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def escalations(
    service: Any, ns: str, topic: str, *, seed: int
) -> tuple[memory_service_pb2.WriteResult, memory_service_pb2.WriteResult]:
    """Two statements of one slot of team:payments, worded alike: who takes escalations about ``topic``."""
    vectors = near(seed, 2)
    old = remember(service, f"Escalations about {topic} go to Ana.", vectors[0], namespace=ns, kind=FACT,
                   entity="team:payments", valid_from=at(1_000))  # fmt: skip
    new = remember(service, f"Escalations about {topic} go to Bo.", vectors[1], namespace=ns, kind=FACT,
                   entity="team:payments", valid_from=at(2_000))  # fmt: skip
    return old, new


def test_a_same_template_statement_with_another_value_retires_the_older(service: Any) -> None:
    old, new = escalations(service, "slots-pair", "billing", seed=1)
    assert new.outcome == SUPERSEDED
    assert list(new.affected_ids) == [old.memory.id]
    retired = get(service, old.memory.id)
    assert retired.state == OBSOLETE
    assert retired.superseded_by == new.memory.id
    assert retired.valid_to.seconds == 2_000
    assert new.memory.inferred.method == "same template"
    assert new.memory.inferred.value == "bo"
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old.memory.id)).events
    reasons = [e.reason for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert reasons
    assert "inferred" in reasons[-1]


def test_a_late_same_template_statement_becomes_history(service: Any) -> None:
    ns = "slots-late"
    vectors = near(2, 2)
    current = remember(service, "The on-call phone for Vega is 555-0101.", vectors[0], namespace=ns, kind=FACT,
                       entity="project:vega", valid_from=at(5_000))  # fmt: skip
    late = remember(service, "The on-call phone for Vega is 555-0199.", vectors[1], namespace=ns, kind=FACT,
                    entity="project:vega", valid_from=at(1_000))  # fmt: skip
    assert late.memory.state == OBSOLETE
    assert late.memory.superseded_by == current.memory.id
    assert get(service, current.memory.id).state == ACTIVE


def test_text_matching_a_keyed_template_retires_the_keyed_fact_and_a_keyed_fact_retires_text(service: Any) -> None:
    ns = "slots-keyed"
    vectors = near(3, 5)
    # Two entities' keyed facts teach the template "<e> now listens on port <v>".
    remember(service, "billing-api now listens on port 8080.", vectors[0], namespace=ns, kind=FACT,
             entity="service:billing-api", fact=memory_pb2.Fact(attribute="port", value="8080"),
             valid_from=at(1_000))  # fmt: skip
    keyed = remember(service, "search-api now listens on port 9000.", vectors[1], namespace=ns, kind=FACT,
                     entity="service:search-api", fact=memory_pb2.Fact(attribute="port", value="9000"),
                     valid_from=at(1_000))  # fmt: skip
    # Text naming the entity only in its words: the name is found, the template gives the attribute and value.
    text = remember(service, "search-api now listens on port 9443.", vectors[2], namespace=ns, kind=FACT,
                    valid_from=at(2_000))  # fmt: skip
    assert text.outcome == SUPERSEDED
    assert get(service, keyed.memory.id).state == OBSOLETE
    inferred = text.memory.inferred
    assert (inferred.entity, inferred.attribute, inferred.value, inferred.method) == (
        "service:search-api",
        "port",
        "9443",
        "template",
    )
    # The key has no current keyed value now; a new keyed value retires the text statement in turn.
    again = remember(service, "Moved search-api: it now listens on port 7000.", vectors[3], namespace=ns, kind=FACT,
                     entity="service:search-api", fact=memory_pb2.Fact(attribute="port", value="7000"),
                     valid_from=at(3_000))  # fmt: skip
    assert get(service, text.memory.id).state == OBSOLETE
    assert get(service, text.memory.id).superseded_by == again.memory.id
    # Recall filtered by the entity finds the text statement's successor, never the retired ones.
    found = service.Recall(memory_service_pb2.RecallRequest(
        query_vector=vectors[4], k=10,
        filter=memory_service_pb2.RecallFilter(namespace=ns, entity="service:search-api")))  # fmt: skip
    assert [m.memory.id for m in found.memories] == [again.memory.id]


def test_restating_the_current_value_in_text_confirms_it(service: Any) -> None:
    ns = "slots-confirm"
    vectors = near(4, 3)
    remember(service, "geo-api now listens on port 81.", vectors[0], namespace=ns, kind=FACT,
             entity="service:geo-api", fact=memory_pb2.Fact(attribute="port", value="81"))  # fmt: skip
    keyed = remember(service, "tax-api now listens on port 82.", vectors[1], namespace=ns, kind=FACT,
                     entity="service:tax-api", fact=memory_pb2.Fact(attribute="port", value="82"))  # fmt: skip
    again = remember(service, "tax-api now listens on port 82 .", vectors[2], namespace=ns, kind=FACT)
    assert again.outcome == CONFIRMED
    assert again.memory.id == keyed.memory.id


def test_repeated_events_and_other_entities_are_not_retired(service: Any) -> None:
    ns = "slots-events"
    vectors = near(5, 4)
    first = remember(service, "Coffee chat with Ana about hiking.", vectors[0], namespace=ns, kind=EPISODE,
                     entity="user:ana-lee")  # fmt: skip
    remember(service, "Coffee chat with Ana about chess.", vectors[1], namespace=ns, kind=EPISODE,
             entity="user:ana-lee")  # fmt: skip
    assert get(service, first.memory.id).state == ACTIVE, "an event repeated with other details retires nothing"
    mine = remember(service, "Escalations about billing go to Ana.", vectors[2], namespace=ns, kind=FACT,
                    entity="user:ana-lee")  # fmt: skip
    remember(service, "Escalations about billing go to Bo.", vectors[3], namespace=ns, kind=FACT,
             entity="user:bo-kim")  # fmt: skip
    assert get(service, mine.memory.id).state == ACTIVE, "another entity's statement is another slot"


def test_multi_valued_attributes_keep_every_text_value(service: Any) -> None:
    ns = "slots-multi"
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.multi_valued_attributes.append(f"{ns}/language")
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    vectors = near(6, 4)
    remember(service, "Ana Lee speaks French fluently.", vectors[0], namespace=ns, kind=FACT,
             entity="user:ana-lee", fact=memory_pb2.Fact(attribute="language", value="French"))  # fmt: skip
    remember(service, "Bo Kim speaks Korean fluently.", vectors[1], namespace=ns, kind=FACT,
             entity="user:bo-kim", fact=memory_pb2.Fact(attribute="language", value="Korean"))  # fmt: skip
    text = remember(service, "Ana Lee speaks Spanish fluently.", vectors[2], namespace=ns, kind=FACT,
                    entity="user:ana-lee")  # fmt: skip
    assert text.memory.state == ACTIVE
    assert list(text.affected_ids) == []


def test_same_template_texts_without_an_entity_settle_by_world_time(service: Any) -> None:
    ns = "slots-no-entity"
    vectors = near(7, 2)
    old = remember(service, "Who chairs the standards board? Maria Silva", vectors[0], namespace=ns, kind=FACT,
                   valid_from=at(1_000))  # fmt: skip
    new = remember(service, "Who chairs the standards board? Tom Berg", vectors[1], namespace=ns, kind=FACT,
                   valid_from=at(2_000))  # fmt: skip
    assert get(service, old.memory.id).state == OBSOLETE
    assert get(service, old.memory.id).superseded_by == new.memory.id


def test_restore_undoes_an_inferred_retirement(service: Any) -> None:
    old, new = escalations(service, "slots-restore", "refunds", seed=8)
    assert get(service, old.memory.id).state == OBSOLETE
    restored = service.Restore(
        memory_service_pb2.RestoreRequest(memory_id=old.memory.id, reason="both hold: two queues")
    ).memory
    assert restored.state == ACTIVE
    assert restored.superseded_by == 0
    assert not restored.HasField("valid_to")
    assert old.memory.id not in get(service, new.memory.id).supersedes
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old.memory.id)).events
    assert events[-1].reason == "restored: both hold: two queues"
    assert events[-1].to_state == ACTIVE
    # Restored once, it is neither retired nor doubted: a second restore is refused, naming why.
    with pytest.raises(grpc.RpcError) as refused:
        service.Restore(memory_service_pb2.RestoreRequest(memory_id=old.memory.id))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "neither superseded nor possibly outdated" in (refused.value.details() or "")


def test_restore_refuses_bad_input_and_a_key_held_by_another_value(service: Any) -> None:
    ns = "slots-restore-keyed"
    vectors = near(9, 2)
    first = remember(service, "geo-api listens on port 1.", vectors[0], namespace=ns, kind=FACT,
                     entity="service:geo-api", fact=memory_pb2.Fact(attribute="port", value="1"),
                     valid_from=at(1_000))  # fmt: skip
    remember(service, "geo-api listens on port 2.", vectors[1], namespace=ns, kind=FACT, entity="service:geo-api",
             fact=memory_pb2.Fact(attribute="port", value="2"), valid_from=at(2_000))  # fmt: skip
    with pytest.raises(grpc.RpcError) as held:
        service.Restore(memory_service_pb2.RestoreRequest(memory_id=first.memory.id))
    assert held.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "supersede that one instead" in (held.value.details() or "")
    assert get(service, first.memory.id).state == OBSOLETE, "nothing written"
    with pytest.raises(grpc.RpcError) as missing:
        service.Restore(memory_service_pb2.RestoreRequest())
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory_id" in (missing.value.details() or "")
    with pytest.raises(grpc.RpcError) as unknown:
        service.Restore(memory_service_pb2.RestoreRequest(memory_id=10**12))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_restore_clears_a_doubt_through_the_python_client(shared_sidecar: Sidecar) -> None:
    from memevo.client import MemoryClient, MemoryKind

    ns = "slots-restore-doubt"
    rng = np.random.default_rng(10)
    base = rng.standard_normal(8)
    # Two statements of one entity worded apart, close (cosine ~0.8) but not one template: a soft conflict.
    other = rng.standard_normal(8)
    other -= other.dot(base) / base.dot(base) * base
    tilted = base / np.linalg.norm(base) * 0.8 + other / np.linalg.norm(other) * 0.6
    with MemoryClient(shared_sidecar.unix_target) as client:
        older = client.remember("Ana keeps her notes in a paper notebook", vector=base.astype(np.float32),
                                namespace=ns, kind=MemoryKind.FACT, entity="user:ana-lee")  # fmt: skip
        newer = client.remember("these days Ana writes everything down in Obsidian", vector=tilted.astype(np.float32),
                                namespace=ns, kind=MemoryKind.FACT, entity="user:ana-lee")  # fmt: skip
        doubted = client.get([older.id])[0]
        assert doubted.possibly_outdated_by == newer.id
        found = client.recall(vector=base.astype(np.float32), namespace=ns, k=2)
        assert [h.memory.id for h in found] == [newer.id, older.id], "the doubted one ranks below its successor"
        assert "possibly outdated" in found[1].hint
        cleared = client.restore(older.id, reason="both hold")
        assert cleared.possibly_outdated_by is None
        assert client.recall(vector=base.astype(np.float32), namespace=ns, k=2)[0].memory.id == older.id


def test_texts_without_an_entity_said_as_of_one_moment_stay_apart(service: Any) -> None:
    ns = "slots-no-entity-same-time"
    vectors = near(11, 4)
    batch = [memory(f"Release checklist, step {n}: tag the build", vectors[n - 3], namespace=ns, kind=FACT,
                    valid_from=at(1_000)) for n in (3, 4)]  # fmt: skip
    written = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=batch)).results
    kept = get(service, written[0].memory.id)
    assert kept.state == ACTIVE, "one moment: neither is the newer value of the other"
    assert kept.possibly_outdated_by == 0
    old = remember(service, "How many titles has the club won? 23", vectors[2], namespace=ns, kind=FACT,
                   valid_from=at(1_000))  # fmt: skip
    new = remember(service, "How many titles has the club won? 24", vectors[3], namespace=ns, kind=FACT,
                   valid_from=at(2_000))  # fmt: skip
    assert get(service, old.memory.id).superseded_by == new.memory.id, "a count said later is a newer value"


def at_cosine(cosine: float) -> tuple[bytes, bytes]:
    """Two vectors whose cosine is ``cosine``: between the soft-conflict and the sure cosine of texts."""
    first = np.zeros(8)
    first[0] = 1.0
    second = np.zeros(8)
    second[0], second[1] = cosine, np.sqrt(1.0 - cosine**2)
    return pack(first), pack(second)


def test_a_long_shared_head_retires_where_a_short_one_only_doubts(service: Any) -> None:
    """The same question answered anew retires the old answer even when the answers make the texts far apart;
    "the user likes ..." with another ending may be a second true value: only doubted."""
    ns = "slots-no-entity-heads"
    old_vector, new_vector = at_cosine(0.8)
    old = remember(service, "Who is the highest paid player in the league this season? Ana Lima", old_vector,
                   namespace=ns, kind=FACT, valid_from=at(1_000))  # fmt: skip
    new = remember(service, "Who is the highest paid player in the league this season? Bo Chen", new_vector,
                   namespace=ns, kind=FACT, valid_from=at(2_000))  # fmt: skip
    assert get(service, old.memory.id).superseded_by == new.memory.id
    likes, likes_too = at_cosine(0.8)
    first = remember(service, "The user likes hiking", likes, namespace=ns, kind=FACT, valid_from=at(1_000))
    second = remember(service, "The user likes chess", likes_too, namespace=ns, kind=FACT, valid_from=at(2_000))
    kept = get(service, first.memory.id)
    assert kept.state == ACTIVE
    assert kept.possibly_outdated_by == second.memory.id


def test_a_text_naming_two_entities_is_about_the_one_whose_statements_it_resembles(service: Any) -> None:
    """ "Page Ana Lima if the billing service breaks": named first is a user, but the text reads like what is said
    of services; its slot is the service's."""
    ns = "slots-two-names"
    rng = np.random.default_rng(12)
    services, users = rng.standard_normal(8), rng.standard_normal(8)

    def around(direction: np.ndarray) -> bytes:
        return pack(direction + 0.1 * rng.standard_normal(8))

    for name, attribute, value in (("billing", "oncall", "Bo"), ("search", "port", "8080"), ("search", "oncall", "Cy")):
        remember(service, f"{value} is the {attribute} of {name}.", around(services), namespace=ns, kind=FACT,
                 entity=f"service:{name}", fact=memory_pb2.Fact(attribute=attribute, value=value))  # fmt: skip
    for name, attribute, value in (("ana-lima", "editor", "vim"), ("dan-ek", "editor", "emacs")):
        remember(service, f"{value} is the {attribute} of {name}.", around(users), namespace=ns, kind=FACT,
                 entity=f"user:{name}", fact=memory_pb2.Fact(attribute=attribute, value=value))  # fmt: skip
    text = remember(service, "Page Ana Lima if the billing service breaks.", around(services), namespace=ns, kind=FACT)
    assert get(service, text.memory.id).inferred.entity == "service:billing"
    other = remember(service, "Ana Lima wrote about the billing service in her notes.", around(users), namespace=ns,
                     kind=FACT)  # fmt: skip
    assert get(service, other.memory.id).inferred.entity == "user:ana-lima"


@pytest.mark.parametrize("batched", [False, True])
def test_a_text_that_named_an_entity_before_it_was_declared_is_about_it_once_declared(
    service: Any, batched: bool
) -> None:
    # "the billing-gateway service ..." is stored before any memory declares service:billing-gateway, so it names
    # no known entity. The first memory that declares it attaches the text (in the same batch too), and a later
    # statement of the entity's port then retires it like any of the entity's statements.
    ns = f"slots-attach-{batched}"
    vectors = near(11, 4)
    said = memory("The billing-gateway service listens on port 8080.", vectors[0], namespace=ns, kind=FACT,
                  valid_from=at(1_000))  # fmt: skip
    remark = memory("Lunch was late today.", vectors[1], namespace=ns, kind=FACT, valid_from=at(1_100))
    declared = memory("billing-gateway is owned by the payments team.", vectors[2], namespace=ns, kind=FACT,
                      entity="service:billing-gateway", valid_from=at(1_500))  # fmt: skip
    if batched:
        batch = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=[said, remark, declared]))
        said_id, remark_id = batch.results[0].memory.id, batch.results[1].memory.id
        declared_result = batch.results[2]
    else:
        said_id = service.Remember(memory_service_pb2.RememberRequest(memory=said)).result.memory.id
        remark_id = service.Remember(memory_service_pb2.RememberRequest(memory=remark)).result.memory.id
        declared_result = service.Remember(memory_service_pb2.RememberRequest(memory=declared)).result
    assert said_id in declared_result.affected_ids
    attached = get(service, said_id)
    assert attached.inferred.entity == "service:billing-gateway"
    assert attached.inferred.method == "name"
    assert attached.state == ACTIVE
    assert not get(service, remark_id).inferred.entity, "a text that names no entity stays without one"

    new = remember(service, "The billing-gateway service listens on port 9090.", vectors[3], namespace=ns, kind=FACT,
                   entity="service:billing-gateway", valid_from=at(2_000))  # fmt: skip
    assert new.outcome == SUPERSEDED
    assert get(service, said_id).superseded_by == new.memory.id


def test_a_statement_worded_otherwise_retires_its_slot_relative_to_the_entity_and_a_restatement_does_not(
    service: Any,
) -> None:
    """Every statement about Project Raven shares the entity, so raw cosines say little about the slot; once the
    entity's mean is taken out, only the lead's statements stay alike. Vectors: the entity's direction, then a
    slot's, then a wording's (raw cosine of the two lead statements 0.82: alone it would only doubt)."""
    ns = "slots-relative"
    axes = np.eye(8)

    def say(slot: int, wording: int) -> bytes:
        return pack(0.7 * axes[0] + 0.71 * (0.8 * axes[1 + slot] + 0.6 * axes[5 + wording]))

    raven = {"namespace": ns, "kind": FACT, "entity": "project:raven"}
    old = remember(service, "Project Raven is led by Nikolai Lopez.", say(0, 0), valid_from=at(1_000), **raven)
    others = [
        remember(service, text, say(slot, 2), valid_from=at(1_000), **raven)
        for slot, text in enumerate(
            ("Project Raven's budget is two million euros.", "Project Raven ships on March 3.",
             "Project Raven's code lives in the raven-core repository."), start=1)
    ]  # fmt: skip
    old_vector = np.frombuffer(say(0, 0), dtype="<f4")
    restated = remember(service, "Double-checked today: Project Raven is led by Nikolai Lopez.",
                        pack(old_vector / np.linalg.norm(old_vector) + 0.25 * axes[7]), valid_from=at(1_500),
                        **raven)  # fmt: skip
    # Said again in other words around it, the lead is not a change: nothing outdated.
    assert get(service, old.memory.id).state == ACTIVE
    assert get(service, old.memory.id).possibly_outdated_by == 0
    new = remember(service, "Leadership of Project Raven passed to Gustavo Siddiqui.", say(0, 1),
                   valid_from=at(2_000), **raven)  # fmt: skip
    retired = get(service, old.memory.id)
    assert retired.state == OBSOLETE
    assert retired.superseded_by == new.memory.id
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old.memory.id)).events
    reasons = [e.reason for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert reasons == [f"superseded by memory {new.memory.id} (inferred: entity-relative similarity, confidence 0.90)"]
    assert get(service, restated.memory.id).possibly_outdated_by == new.memory.id
    for other in others:  # the budget, the date and the repository are other slots of Raven
        kept = get(service, other.memory.id)
        assert (kept.state, kept.possibly_outdated_by) == (ACTIVE, 0)


def say(which: int) -> bytes:
    """A statement's vector: a direction every statement shares and one of its own (cosine 0.49 to another's)."""
    axes = np.eye(8)
    return pack(0.7 * axes[0] + 0.71 * axes[which])


def about(ns: str, entity: str) -> dict[str, Any]:
    """The fields of a fact about ``entity`` in namespace ``ns``."""
    return {"namespace": ns, "kind": FACT, "entity": entity}


def test_a_statement_that_names_a_keyed_attribute_fills_its_slot_in_either_direction(service: Any) -> None:
    """The namespace's keyed facts name their attributes; a text that says every word of one of those names is
    that attribute's statement, though its wording and its vector (cosine 0.49 to the slot's other statements,
    too far for likeness alone even to doubt) say nothing. A text naming no attribute, or half of a two-word
    name, keeps its slot to itself."""
    ns = "slots-attribute-words"

    def project(name: str) -> dict[str, Any]:
        return about(ns, f"project:{name}")

    remember(service, "Kestrel is in beta.", say(7), fact=memory_pb2.Fact(attribute="status", value="in beta"),
             valid_from=at(500), **project("kestrel"))  # fmt: skip
    remember(service, "Kestrel's working hours are 9-17.", say(6), valid_from=at(500),
             fact=memory_pb2.Fact(attribute="working_hours", value="9-17"), **project("kestrel"))  # fmt: skip
    # Text first, then the keyed fact of its slot.
    status = remember(service, "Atlas status: blocked on the vendor contract.", say(1), valid_from=at(1_000),
                      **project("atlas"))  # fmt: skip
    other = remember(service, "Atlas is still working with two designers.", say(2), valid_from=at(1_000),
                     **project("atlas"))  # fmt: skip
    keyed = remember(service, "Atlas is in user testing as of today.", say(3), valid_from=at(2_000),
                     fact=memory_pb2.Fact(attribute="status", value="in user testing"), **project("atlas"))  # fmt: skip
    retired = get(service, status.memory.id)
    assert (retired.state, retired.superseded_by) == (OBSOLETE, keyed.memory.id)
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=status.memory.id)).events
    reasons = [e.reason for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert reasons == [f"superseded by memory {keyed.memory.id} (inferred: attribute word of status)"]
    kept = get(service, other.memory.id)
    assert (kept.state, kept.possibly_outdated_by) == (ACTIVE, 0), "'working' alone does not name working hours"
    # The keyed fact first, then a text naming its attribute.
    old = remember(service, "Heron is in code freeze.", say(1), valid_from=at(1_000),
                   fact=memory_pb2.Fact(attribute="status", value="in code freeze"), **project("heron"))  # fmt: skip
    new = remember(service, "Heron's status changed: blocked by legal.", say(2), valid_from=at(2_000),
                   **project("heron"))  # fmt: skip
    assert new.outcome == SUPERSEDED
    assert (get(service, old.memory.id).state, get(service, old.memory.id).superseded_by) == (OBSOLETE, new.memory.id)
    inferred = get(service, new.memory.id).inferred
    assert (inferred.entity, inferred.attribute, inferred.method) == ("project:heron", "status", "attribute word")


def test_a_statement_holding_the_shape_only_one_attribute_has_fills_its_slot(service: Any) -> None:
    """Every URL a service's keyed facts gave was an endpoint: a text about another service that holds a URL states
    its endpoint, worded as nothing keyed was and with a vector too far from the slot's to tell, in either
    direction between keyed and text."""
    ns = "slots-value-shapes"

    def service_(name: str) -> dict[str, Any]:
        return about(ns, f"service:{name}")

    remember(service, "Clients should call the gateway at https://gateway.example.com/v1.", say(7), valid_from=at(500),
             fact=memory_pb2.Fact(attribute="endpoint", value="https://gateway.example.com/v1"),
             **service_("gateway"))  # fmt: skip
    for attribute, value in (("maintenance_window", "02:00-03:00"), ("standup", "9:30")):
        remember(service, f"Gateway {attribute}: {value}.", say(6), valid_from=at(500),
                 fact=memory_pb2.Fact(attribute=attribute, value=value), **service_("gateway"))  # fmt: skip
    old = remember(service, "Updated the catalog: billing lives at https://billing.example.com/api.", say(1),
                   valid_from=at(1_000), **service_("billing"))  # fmt: skip
    new = remember(service, "The base address of billing changed.", say(3), valid_from=at(2_000),
                   fact=memory_pb2.Fact(attribute="endpoint", value="https://billing-v2.example.com/api"),
                   **service_("billing"))  # fmt: skip
    retired = get(service, old.memory.id)
    assert (retired.state, retired.superseded_by) == (OBSOLETE, new.memory.id)
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old.memory.id)).events
    reasons = [e.reason for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert reasons == [f"superseded by memory {new.memory.id} (inferred: value shape of endpoint)"]
    # The other way round: a text holding a URL retires the keyed endpoint.
    text = remember(service, "Billing moved behind https://billing-v3.example.com/api.", say(4), valid_from=at(3_000),
                    **service_("billing"))  # fmt: skip
    assert text.outcome == SUPERSEDED
    assert get(service, new.memory.id).superseded_by == text.memory.id
    inferred = get(service, text.memory.id).inferred
    assert (inferred.attribute, inferred.method) == ("endpoint", "value shape")


def test_the_first_keyed_fact_of_an_attribute_retires_the_text_that_names_it(service: Any) -> None:
    """Nothing keyed has named a status before: the keyed fact teaches its own name before it judges the texts of
    its slot, so the text said earlier in other words, with a vector too far to tell, is retired by it."""
    ns = "slots-first-keyed"
    glacier = about(ns, "project:glacier")
    text = remember(service, "Glacier status: in code freeze.", say(1), valid_from=at(1_000), **glacier)
    keyed = remember(service, "The Glacier project is blocked on the vendor contract as of today.", say(2),
                     valid_from=at(2_000), fact=memory_pb2.Fact(attribute="status", value="blocked"),
                     **glacier)  # fmt: skip
    retired = get(service, text.memory.id)
    assert (retired.state, retired.superseded_by) == (OBSOLETE, keyed.memory.id)
