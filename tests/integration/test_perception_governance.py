"""The agent's overrides and settings over gRPC: Supersede, lineage, DeclareFramework, GetPolicy/UpdatePolicy.

Supersede and lineage tests share one sidecar (each in its own namespace);
framework and policy tests change sidecar-wide state, so each gets its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import bad_fields, counts, memory, pack, stub, vectors, watch_events

from memevo.sidecar.policy import default_policy
from memevo.sidecar.retrieval.hints import HINT_CURRENT, HINT_OLD_FRAMEWORK
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED
CONFIRMED = memory_service_pb2.WRITE_OUTCOME_CONFIRMED
SUPERSEDED_PREVIOUS = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def remember(service: Any, content: str, vector: bytes, **fields: Any) -> memory_service_pb2.WriteResult:
    return service.Remember(memory_service_pb2.RememberRequest(memory=memory(content, vector, **fields))).result


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    response = service.Get(memory_service_pb2.GetRequest(ids=[memory_id]))
    assert list(response.missing_ids) == []
    return response.memories[0]


def recall(service: Any, namespace: str, query: bytes, k: int = 10) -> memory_service_pb2.RecallResponse:
    return service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=query, k=k, filter=memory_service_pb2.RecallFilter(namespace=namespace)
        )
    )


def expect_error(call: Any, code: grpc.StatusCode) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, (caught.value.code(), caught.value.details())
    return caught.value


def supersede(service: Any, old_id: int, **fields: Any) -> memory_service_pb2.SupersedeResponse:
    return service.Supersede(memory_service_pb2.SupersedeRequest(old_id=old_id, **fields))


# ---- Supersede and lineage ----------------------------------------------------------------------


def test_supersede_by_existing_memory_links_both_ways(service: Any) -> None:
    namespace = "supersede-id"
    rows = vectors(2, seed=50)
    old = remember(service, "the CI runs on Jenkins", pack(rows[0]), namespace=namespace, kind=FACT).memory
    new = remember(service, "the CI runs on GitHub Actions", pack(rows[1]), namespace=namespace, kind=FACT).memory
    response = supersede(service, old.id, new_id=new.id, reason="migrated in March")
    assert response.old_memory.id == old.id
    assert response.new_memory.id == new.id
    old_now, new_now = get(service, old.id), get(service, new.id)
    assert old_now.state == OBSOLETE
    assert old_now.superseded_by == new.id
    assert old_now.HasField("valid_to")
    assert new_now.state == ACTIVE
    assert list(new_now.supersedes) == [old.id]
    assert response.old_memory.superseded_by == new.id
    assert list(response.new_memory.supersedes) == [old.id]
    ids = [m.memory.id for m in recall(service, namespace, pack(rows[0])).memories]
    assert ids == [new.id], "the superseded memory leaves standard recall"
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=old.id)).events
    superseded = [e for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED]
    assert [e.memory_id for e in superseded] == [old.id]
    assert "migrated in March" in superseded[0].reason
    assert new.id in superseded[0].related_ids


def test_supersede_by_new_memory_stores_it_and_links_both_ways(service: Any) -> None:
    namespace = "supersede-new"
    rows = vectors(2, seed=51)
    old = remember(service, "the office is on floor 3", pack(rows[0]), namespace=namespace, kind=FACT).memory
    _, total = counts(service)
    response = supersede(
        service,
        old.id,
        new_memory=memory("the office is on floor 5", pack(rows[1]), namespace=namespace, kind=FACT),
        reason="moved",
    )
    new = response.new_memory
    assert new.id > old.id
    assert new.state == ACTIVE
    assert list(new.supersedes) == [old.id]
    assert counts(service)[1] == total + 1
    stored_new, stored_old = get(service, new.id), get(service, old.id)
    assert list(stored_new.supersedes) == [old.id]
    assert stored_old.state == OBSOLETE
    assert stored_old.superseded_by == new.id
    assert [m.memory.id for m in recall(service, namespace, pack(rows[1])).memories] == [new.id]
    created = [
        e
        for e in service.History(memory_service_pb2.HistoryRequest(memory_id=new.id)).events
        if e.type == events_pb2.CHANGE_EVENT_TYPE_CREATED
    ]
    assert {e.memory_id for e in created} == {old.id, new.id}


def test_supersede_of_a_current_fact_moves_the_fact_key(service: Any) -> None:
    namespace = "supersede-fact"
    rows = vectors(2, seed=52)
    fact = memory_pb2.Fact(attribute="ui_mode", value="light")
    light = remember(
        service,
        "user A prefers light mode",
        pack(rows[0]),
        namespace=namespace,
        entity="user:a",
        fact=fact,
        valid_from=Timestamp(seconds=100),
    ).memory
    response = supersede(
        service,
        light.id,
        new_memory=memory(
            "user A prefers high-contrast mode",
            pack(rows[1]),
            namespace=namespace,
            entity="user:a",
            fact=memory_pb2.Fact(attribute="ui_mode", value="high-contrast"),
            valid_from=Timestamp(seconds=200),
        ),
        reason="the user said so",
    )
    new_id = response.new_memory.id
    key = memory_service_pb2.FactKey(namespace=namespace, entity="user:a", attribute="ui_mode")
    versions = service.History(memory_service_pb2.HistoryRequest(fact_key=key)).versions
    assert [(v.id, v.state) for v in versions] == [(light.id, OBSOLETE), (new_id, ACTIVE)]
    assert versions[0].valid_to.seconds == 200
    restated = remember(
        service,
        "user A prefers high contrast mode",
        pack(rows[1]),
        namespace=namespace,
        entity="user:a",
        fact=memory_pb2.Fact(attribute="ui_mode", value="High contrast"),
    )
    assert restated.outcome == CONFIRMED, "the replacement is the fact key's current value"
    assert restated.memory.id == new_id


def test_superseding_an_obsolete_memory_fails_and_writes_nothing(service: Any) -> None:
    namespace = "supersede-twice"
    rows = vectors(3, seed=53)
    old, first, second = (
        remember(service, f"version {i}", pack(rows[i]), namespace=namespace, kind=FACT).memory for i in range(3)
    )
    supersede(service, old.id, new_id=first.id)
    before = counts(service)
    error = expect_error(lambda: supersede(service, old.id, new_id=second.id), grpc.StatusCode.FAILED_PRECONDITION)
    assert str(first.id) in error.details(), "the message says what superseded it already"
    expect_error(
        lambda: supersede(service, old.id, new_memory=memory("version 3", pack(rows[2]), namespace=namespace)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert counts(service) == before
    assert get(service, old.id).superseded_by == first.id
    assert list(get(service, second.id).supersedes) == []


def test_supersede_bad_requests(service: Any) -> None:
    namespace = "supersede-bad"
    row = pack(vectors(1, seed=54)[0])
    one = remember(service, "a memory", row, namespace=namespace, kind=FACT).memory
    before = counts(service)
    error = expect_error(lambda: supersede(service, one.id, new_id=one.id), grpc.StatusCode.INVALID_ARGUMENT)
    assert "new_id" in bad_fields(error)
    expect_error(lambda: supersede(service, 10**12, new_id=one.id), grpc.StatusCode.NOT_FOUND)
    expect_error(lambda: supersede(service, one.id, new_id=10**12), grpc.StatusCode.NOT_FOUND)
    error = expect_error(lambda: supersede(service, one.id), grpc.StatusCode.INVALID_ARGUMENT)
    assert "replacement" in bad_fields(error)
    error = expect_error(lambda: supersede(service, 0, new_id=one.id), grpc.StatusCode.INVALID_ARGUMENT)
    assert "old_id" in bad_fields(error)
    error = expect_error(
        lambda: supersede(service, one.id, new_memory=memory("bad vector", b"\x00" * 12, namespace=namespace)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "new_memory.vector" in bad_fields(error)
    assert counts(service) == before
    assert get(service, one.id).state == ACTIVE


def test_supersede_with_request_id_is_applied_once(service: Any) -> None:
    namespace = "supersede-idempotent"
    rows = vectors(2, seed=55)
    old = remember(service, "uses python 3.10", pack(rows[0]), namespace=namespace, kind=FACT).memory
    request = {
        "new_memory": memory("uses python 3.12", pack(rows[1]), namespace=namespace, kind=FACT),
        "request_id": "supersede-once",
    }
    first = supersede(service, old.id, **request)
    after = counts(service)
    second = supersede(service, old.id, **request)
    assert second.new_memory.id == first.new_memory.id
    assert second.old_memory.id == old.id
    assert counts(service) == after


def test_history_by_memory_id_returns_the_whole_lineage_oldest_first(service: Any) -> None:
    namespace = "lineage"
    rows = vectors(4, seed=56)
    stamps = [10, 20, 30]
    chain = [
        remember(
            service, f"step {i}", pack(rows[i]), namespace=namespace, kind=FACT, valid_from=Timestamp(seconds=stamps[i])
        ).memory
        for i in range(3)
    ]
    unrelated = remember(service, "unrelated", pack(rows[3]), namespace=namespace, kind=FACT).memory
    supersede(service, chain[0].id, new_id=chain[1].id)
    supersede(service, chain[1].id, new_id=chain[2].id)
    for start in chain:
        response = service.History(memory_service_pb2.HistoryRequest(memory_id=start.id))
        assert [v.id for v in response.versions] == [m.id for m in chain], f"lineage from {start.id}"
        assert unrelated.id not in {e.memory_id for e in response.events}
        kinds = {(e.memory_id, e.type) for e in response.events}
        assert (chain[0].id, events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED) in kinds
        assert (chain[1].id, events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED) in kinds
    alone = service.History(memory_service_pb2.HistoryRequest(memory_id=unrelated.id))
    assert [v.id for v in alone.versions] == [unrelated.id]
    assert [e.type for e in alone.events] == [events_pb2.CHANGE_EVENT_TYPE_CREATED]


def test_history_bad_requests(service: Any) -> None:
    expect_error(
        lambda: service.History(memory_service_pb2.HistoryRequest(memory_id=10**12)), grpc.StatusCode.NOT_FOUND
    )
    error = expect_error(lambda: service.History(memory_service_pb2.HistoryRequest()), grpc.StatusCode.INVALID_ARGUMENT)
    assert "subject" in bad_fields(error)
    error = expect_error(
        lambda: service.History(
            memory_service_pb2.HistoryRequest(fact_key=memory_service_pb2.FactKey(attribute="ui_mode"))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "fact_key.entity" in bad_fields(error)


# ---- DeclareFramework ---------------------------------------------------------------------------


def declare(service: Any, version: str, **fields: Any) -> memory_service_pb2.DeclareFrameworkResponse:
    return service.DeclareFramework(memory_service_pb2.DeclareFrameworkRequest(version=version, **fields))


def test_declare_framework_flags_older_memories_and_recall_says_so(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    rows = vectors(5, seed=60)
    early = [remember(service, f"early {i}", pack(rows[i]), kind=FACT).memory for i in range(3)]
    assert all(m.framework_version == "" for m in early)

    response = declare(service, "v2", description="switched to test-first reasoning")
    assert response.previous_version == ""
    assert response.flagged_count == 3
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).framework_version == "v2"

    later = remember(service, "later", pack(rows[3]), kind=FACT).memory
    assert later.framework_version == "v2", "new memories are formed under the declared version"
    hits = {m.memory.id: m for m in recall(service, "default", pack(rows[0])).memories}
    for old in early:
        assert HINT_OLD_FRAMEWORK in hits[old.id].hint, hits[old.id].hint
    assert hits[later.id].hint == HINT_CURRENT

    response = declare(service, "v3")
    assert response.previous_version == "v2"
    assert response.flagged_count == 4
    hits = {m.memory.id: m for m in recall(service, "default", pack(rows[3])).memories}
    assert HINT_OLD_FRAMEWORK in hits[later.id].hint
    assert "v2" in hits[later.id].hint, "the hint names the framework the memory was formed under"

    explicit = remember(service, "explicit", pack(rows[4]), kind=FACT, framework_version="v3").memory
    hits = {m.memory.id: m for m in recall(service, "default", pack(rows[4])).memories}
    assert hits[explicit.id].hint == HINT_CURRENT

    events = watch_events(service, 1, after_sequence=0, types=[events_pb2.CHANGE_EVENT_TYPE_FRAMEWORK_DECLARED])
    assert events[0].detail == "v2"
    assert events[0].reason == "switched to test-first reasoning"


def test_declare_framework_bad_input_and_idempotency(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    remember(service, "something", pack(vectors(1, seed=61)[0]), kind=FACT)
    before = counts(service)
    error = expect_error(lambda: declare(service, ""), grpc.StatusCode.INVALID_ARGUMENT)
    assert "version" in bad_fields(error)
    error = expect_error(lambda: declare(service, "v" * 65), grpc.StatusCode.INVALID_ARGUMENT)
    assert "version" in bad_fields(error)
    assert counts(service) == before
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).framework_version == ""

    first = declare(service, "v2", request_id="declare-once")
    after = counts(service)
    second = declare(service, "v2", request_id="declare-once")
    assert (second.previous_version, second.flagged_count) == (first.previous_version, first.flagged_count)
    assert counts(service) == after


# ---- policy -------------------------------------------------------------------------------------


def get_policy(service: Any) -> policy_pb2.Policy:
    return service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy


def update_policy(service: Any, policy: policy_pb2.Policy, **fields: Any) -> policy_pb2.Policy:
    return service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy, **fields)).policy


def test_get_policy_returns_the_default(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    policy = get_policy(service)
    assert policy == default_policy()
    assert policy.name == "default"
    assert {k.kind for k in policy.kinds} == set(memory_pb2.MemoryKind.values())
    for kind in policy.kinds:
        assert kind.evict_below <= kind.archive_below <= kind.reactivate_above
    assert 0.0 < policy.soft_conflict_similarity <= policy.duplicate_similarity <= 1.0
    assert 0.5 < policy.strategy_upgrade_probability <= 1.0
    assert list(policy.multi_valued_attributes) == []


def _spoil(policy: policy_pb2.Policy, which: str) -> policy_pb2.Policy:
    """A copy of ``policy`` with one invalid setting."""
    bad = policy_pb2.Policy()
    bad.CopyFrom(policy)
    if which == "archive-above-reactivate":
        kind = bad.kinds[2]
        kind.archive_below = kind.reactivate_above + 0.5
    elif which == "soft-similarity":
        bad.soft_conflict_similarity = 1.5
    elif which == "upgrade-probability":
        bad.strategy_upgrade_probability = 0.4
    elif which == "multi-valued-entry":
        bad.multi_valued_attributes.append("hobby")
    elif which == "source-confidence":
        bad.source_confidence.tool_result = 1.2
    return bad


BAD_POLICIES = [
    ("archive-above-reactivate", "policy.kinds[2]"),
    ("soft-similarity", "policy.soft_conflict_similarity"),
    ("upgrade-probability", "policy.strategy_upgrade_probability"),
    ("multi-valued-entry", "policy.multi_valued_attributes[0]"),
    ("source-confidence", "policy.source_confidence.tool_result"),
]


@pytest.mark.parametrize(("which", "field"), BAD_POLICIES)
def test_invalid_policy_is_refused_naming_the_field_and_nothing_changes(
    shared_sidecar: Sidecar, which: str, field: str
) -> None:
    service = stub(shared_sidecar.unix_target)
    current = get_policy(service)
    before = counts(service)
    bad = _spoil(current, which)
    error = expect_error(lambda: update_policy(service, bad), grpc.StatusCode.INVALID_ARGUMENT)
    fields = bad_fields(error)
    assert any(f == field or f.startswith(field + ".") for f in fields), (fields, error.details())
    assert get_policy(service) == current
    assert counts(service) == before


def test_update_policy_applies_and_survives_a_restart(data_dir: Path) -> None:
    process = start_sidecar(data_dir)
    try:
        service = stub(process.unix_target)
        policy = get_policy(service)
        policy.name = "team"
        policy.soft_conflict_similarity = 0.95
        policy.strategy_upgrade_probability = 0.9
        policy.multi_valued_attributes.append("*/hobby")
        sequence = counts(service)[0]
        stored = update_policy(service, policy)
        assert stored == policy
        assert get_policy(service) == policy
        assert counts(service)[0] == sequence + 1
        event = watch_events(service, 1, after_sequence=sequence)[0]
        assert event.type == events_pb2.CHANGE_EVENT_TYPE_POLICY_UPDATED
        assert event.detail == "team"
    finally:
        assert process.stop() == 0
    process = start_sidecar(data_dir)
    try:
        assert get_policy(stub(process.unix_target)) == policy
    finally:
        process.stop()


def test_multi_valued_attributes_keep_every_value_current(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    policy = get_policy(service)
    policy.multi_valued_attributes.extend(["*/hobby", "team-a/pet"])
    update_policy(service, policy)
    rng = np.random.default_rng(62)
    base = rng.standard_normal(8)
    near = [pack(base + 0.2 * rng.standard_normal(8)) for _ in range(6)]

    def fact(text: str, vector: bytes, attribute: str, value: str, at: int, namespace: str = "default") -> Any:
        return remember(
            service,
            text,
            vector,
            namespace=namespace,
            entity="user:a",
            fact=memory_pb2.Fact(attribute=attribute, value=value),
            valid_from=Timestamp(seconds=at),
        )

    chess = fact("user A plays chess", near[0], "hobby", "chess", 10)
    climbing = fact("user A climbs", near[1], "hobby", "climbing", 100)
    assert chess.outcome == climbing.outcome == CREATED
    assert get(service, chess.memory.id).state == ACTIVE
    assert list(get(service, climbing.memory.id).supersedes) == []
    ids = {m.memory.id for m in recall(service, "default", near[0]).memories}
    assert {chess.memory.id, climbing.memory.id} <= ids
    again = fact("User A plays chess!", near[0], "hobby", "Chess", 150)
    assert again.outcome == CONFIRMED
    assert again.memory.id == chess.memory.id

    # Declared for one namespace only: elsewhere the attribute stays single-valued.
    cat = fact("team A's user has a cat", near[2], "pet", "cat", 10, namespace="team-a")
    dog = fact("team A's user has a dog", near[3], "pet", "dog", 100, namespace="team-a")
    assert dog.outcome == CREATED
    assert get(service, cat.memory.id).state == ACTIVE
    fish = fact("team B's user has a fish", near[4], "pet", "fish", 10, namespace="team-b")
    bird = fact("team B's user has a bird", near[5], "pet", "bird", 100, namespace="team-b")
    assert bird.outcome == SUPERSEDED_PREVIOUS
    assert get(service, fish.memory.id).state == OBSOLETE


def test_policy_thresholds_change_soft_conflict_detection(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    rng = np.random.default_rng(63)
    base = rng.standard_normal(8)
    # Cosine about 0.95: a soft conflict at the default 0.9, none once the policy asks for 0.99.
    other = rng.standard_normal(8)
    other -= other.dot(base) / base.dot(base) * base
    tilted = base / np.linalg.norm(base) * 0.95 + other / np.linalg.norm(other) * np.sqrt(1 - 0.95**2)
    # Worded apart (not one template with another value, which perception would read as the same slot).
    first = remember(service, "user C lives in Rome", pack(base), kind=FACT, entity="user:c").memory
    remember(service, "these days user C has a flat near Milan", pack(tilted), kind=FACT, entity="user:c")
    assert get(service, first.id).inconsistency > 0.0

    policy = get_policy(service)
    policy.soft_conflict_similarity = 0.99
    update_policy(service, policy)
    second = remember(service, "user D lives in Oslo", pack(base), kind=FACT, entity="user:d").memory
    remember(service, "these days user D has a flat near Bergen", pack(tilted), kind=FACT, entity="user:d")
    assert get(service, second.id).inconsistency == 0.0
