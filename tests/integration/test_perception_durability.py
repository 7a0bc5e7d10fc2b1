"""Perception state survives SIGKILL: obsolete links, back-dated history, confirmations, demotions, policy, framework.

The sidecar is killed right after the last acknowledged call, so nothing is
flushed at shutdown; the restarted sidecar must answer as the first one did
and keep governing with the same indexes (fact keys, duplicates, strategies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import counts, memory, pack, stub

from memevo.sidecar.retrieval.hints import HINT_AS_OF, HINT_COUNTER_EXAMPLE, HINT_OLD_FRAMEWORK
from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
CONFIRMED = memory_service_pb2.WRITE_OUTCOME_CONFIRMED
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED
BACKDATED = memory_service_pb2.WRITE_OUTCOME_BACKDATED
SUPERSEDED_PREVIOUS = memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
FACTS = "facts"
STRATEGIES = "strategies"
VOLATILE_FIELDS = ("access_count", "last_access_at", "last_access_turn", "scores")
"""Access statistics are checkpointed lazily (by design); scores are derived at read time and decay with the clock."""


@dataclass
class Before:
    """What the first sidecar acknowledged."""

    ids: dict[str, int] = field(default_factory=dict)
    records: dict[int, memory_pb2.Memory] = field(default_factory=dict)
    history: list[memory_pb2.Memory] = field(default_factory=list)
    policy: policy_pb2.Policy = field(default_factory=policy_pb2.Policy)
    counts: tuple[int, int] = (0, 0)
    created_confidence: float = 0.0
    """Confidence of the duplicated memory before it was confirmed."""


def _vectors() -> dict[str, bytes]:
    rng = np.random.default_rng(70)
    modes = rng.standard_normal(8)
    query = rng.standard_normal(8)
    soft = rng.standard_normal(8)
    return {
        "dark": pack(modes + 0.2 * rng.standard_normal(8)),
        "light": pack(modes + 0.2 * rng.standard_normal(8)),
        "night": pack(modes + 0.2 * rng.standard_normal(8)),
        "sepia": pack(modes + 0.2 * rng.standard_normal(8)),
        "query": pack(query),
        "older strategy": pack(query + 0.05 * rng.standard_normal(8)),
        "newer strategy": pack(query + 0.4 * rng.standard_normal(8)),
        "duplicate": pack(rng.standard_normal(8)),
        "soft old": pack(soft),
        "soft new": pack(soft + 0.01 * rng.standard_normal(8)),
        "hobby 1": pack(rng.standard_normal(8)),
        "hobby 2": pack(rng.standard_normal(8)),
        "replaced": pack(rng.standard_normal(8)),
        "replacement": pack(rng.standard_normal(8)),
    }


VECTORS = _vectors()


def remember(service: Any, content: str, name: str, **fields: Any) -> memory_service_pb2.WriteResult:
    item = memory(content, VECTORS[name], **fields)
    return service.Remember(memory_service_pb2.RememberRequest(memory=item)).result


def mode_fact(service: Any, value: str, at: int) -> memory_service_pb2.WriteResult:
    return remember(
        service,
        f"user A prefers {value} mode",
        value,
        namespace=FACTS,
        entity="user:a",
        kind=memory_pb2.MEMORY_KIND_PREFERENCE,
        fact=memory_pb2.Fact(attribute="ui_mode", value=value),
        valid_from=Timestamp(seconds=at),
    )


def recall(service: Any, namespace: str, name: str, **fields: Any) -> memory_service_pb2.RecallResponse:
    return service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=VECTORS[name], k=10, filter=memory_service_pb2.RecallFilter(namespace=namespace), **fields
        )
    )


def fact_history(service: Any) -> list[memory_pb2.Memory]:
    key = memory_service_pb2.FactKey(namespace=FACTS, entity="user:a", attribute="ui_mode")
    return list(service.History(memory_service_pb2.HistoryRequest(fact_key=key)).versions)


def stable(record: memory_pb2.Memory) -> memory_pb2.Memory:
    """The record without its volatile fields."""
    copy = memory_pb2.Memory()
    copy.CopyFrom(record)
    for name in VOLATILE_FIELDS:
        if name in copy.DESCRIPTOR.fields_by_name:
            copy.ClearField(name)
    return copy


def _build(service: Any) -> Before:
    before = Before()
    ids = before.ids
    # Facts: a supersession, a back-dated late fact and a late fact between two versions.
    ids["dark"] = mode_fact(service, "dark", 10).memory.id
    light = mode_fact(service, "light", 100)
    assert light.outcome == SUPERSEDED_PREVIOUS
    ids["light"] = light.memory.id
    night = mode_fact(service, "night", 5)
    assert night.outcome == BACKDATED
    ids["night"] = night.memory.id
    sepia = mode_fact(service, "sepia", 50)
    assert sepia.outcome == BACKDATED
    ids["sepia"] = sepia.memory.id
    # A confirmed duplicate.
    first = remember(service, "the build uses bazel", "duplicate", kind=memory_pb2.MEMORY_KIND_FACT)
    again = remember(service, "The build uses Bazel.", "duplicate", kind=memory_pb2.MEMORY_KIND_FACT)
    assert again.outcome == CONFIRMED
    ids["duplicate"] = first.memory.id
    before.created_confidence = first.memory.confidence
    # A soft conflict.
    # Facts: a later episode never doubts an earlier one (an event is not a newer value).
    fact = memory_pb2.MEMORY_KIND_FACT
    ids["soft old"] = remember(service, "user B lives in Paris", "soft old", entity="user:b", kind=fact).memory.id
    ids["soft new"] = remember(service, "user B lives in Berlin", "soft new", entity="user:b", kind=fact).memory.id
    # A demoted strategy, by outcomes only.
    for name in ("older strategy", "newer strategy"):
        ids[name] = remember(
            service, name, name, namespace=STRATEGIES, kind=memory_pb2.MEMORY_KIND_STRATEGY, task_signature="deploy"
        ).memory.id
    for used, outcome in [(ids["newer strategy"], "SUCCESS"), (ids["older strategy"], "FAILURE")] * 3:
        retrieval_id = recall(service, STRATEGIES, "query").retrieval_id
        service.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(
                retrieval_id=retrieval_id,
                outcome=memory_service_pb2.Outcome.Value(f"OUTCOME_{outcome}"),
                used_memory_ids=[used],
            )
        )
    # An agent override.
    ids["replaced"] = remember(service, "the CI runs on Jenkins", "replaced").memory.id
    ids["replacement"] = service.Supersede(
        memory_service_pb2.SupersedeRequest(
            old_id=ids["replaced"], new_memory=memory("the CI runs on Actions", VECTORS["replacement"])
        )
    ).new_memory.id
    # Policy and framework.
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.name = "durable"
    policy.multi_valued_attributes.append("*/hobby")
    policy.strategy_upgrade_probability = 0.9
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    service.DeclareFramework(memory_service_pb2.DeclareFrameworkRequest(version="v2"))

    before.policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    response = service.Get(memory_service_pb2.GetRequest(ids=list(ids.values())))
    before.records = {m.id: m for m in response.memories}
    before.history = fact_history(service)
    before.counts = counts(service)
    return before


def _check_state(service: Any, before: Before) -> None:
    ids = before.ids
    assert counts(service) == before.counts
    response = service.Get(memory_service_pb2.GetRequest(ids=list(ids.values())))
    assert list(response.missing_ids) == []
    for record in response.memories:
        assert stable(record) == stable(before.records[record.id]), f"memory {record.id} changed"
    assert [stable(v) for v in fact_history(service)] == [stable(v) for v in before.history]
    records = {m.id: m for m in response.memories}

    night, dark, sepia, light = (records[ids[n]] for n in ("night", "dark", "sepia", "light"))
    assert [v.id for v in before.history] == [night.id, dark.id, sepia.id, light.id]
    assert (night.state, night.superseded_by, night.valid_to.seconds) == (OBSOLETE, dark.id, 10)
    assert (dark.state, dark.superseded_by, dark.valid_to.seconds) == (OBSOLETE, sepia.id, 50)
    assert (sepia.state, sepia.superseded_by, sepia.valid_to.seconds) == (OBSOLETE, light.id, 100)
    assert light.state == ACTIVE
    assert not light.HasField("valid_to")
    assert records[ids["duplicate"]].confidence > before.created_confidence, "the confirmation raised confidence"
    assert records[ids["soft old"]].inconsistency > 0.0
    assert records[ids["older strategy"]].demoted_by == ids["newer strategy"]
    assert records[ids["replaced"]].superseded_by == ids["replacement"]
    assert list(records[ids["replacement"]].supersedes) == [ids["replaced"]]
    assert service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy == before.policy
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).framework_version == "v2"

    # Recall answers from the same state.
    current = [m.memory.id for m in recall(service, FACTS, "dark").memories]
    assert current == [light.id]
    as_of = recall(service, FACTS, "dark", as_of=Timestamp(seconds=60)).memories
    assert [m.memory.id for m in as_of] == [sepia.id]
    assert as_of[0].hint.startswith(HINT_AS_OF)
    strategies = recall(service, STRATEGIES, "query").memories
    assert [m.memory.id for m in strategies] == [ids["newer strategy"], ids["older strategy"]]
    assert HINT_COUNTER_EXAMPLE in strategies[1].hint
    assert HINT_OLD_FRAMEWORK in strategies[0].hint, "formed before v2 was declared"


def _check_still_governing(service: Any, before: Before) -> None:
    """The restarted sidecar's perception indexes work: fact keys, duplicates, multi-valued policy."""
    ids = before.ids
    restated = mode_fact(service, "light", 150)
    assert restated.outcome == CONFIRMED
    assert restated.memory.id == ids["light"]
    late = mode_fact(service, "night", 7)
    assert late.outcome == BACKDATED
    assert late.memory.superseded_by == ids["dark"]
    duplicate = remember(service, "the build uses bazel", "duplicate", kind=memory_pb2.MEMORY_KIND_FACT)
    assert duplicate.outcome == CONFIRMED
    assert duplicate.memory.id == ids["duplicate"]
    hobbies = [
        remember(
            service,
            text,
            name,
            namespace=FACTS,
            entity="user:a",
            fact=memory_pb2.Fact(attribute="hobby", value=text),
            valid_from=Timestamp(seconds=at),
        )
        for text, name, at in (("chess", "hobby 1", 10), ("climbing", "hobby 2", 20))
    ]
    assert [h.outcome for h in hobbies] == [CREATED, CREATED], "the multi-valued policy survived"
    older = service.Get(memory_service_pb2.GetRequest(ids=[hobbies[0].memory.id])).memories[0]
    assert older.state == ACTIVE
    dark_later = mode_fact(service, "dark", 200)
    assert dark_later.outcome == SUPERSEDED_PREVIOUS
    assert list(dark_later.memory.supersedes) == [ids["light"]]


def test_perception_state_survives_sigkill(data_dir: Path) -> None:
    first = start_sidecar(data_dir)
    try:
        before = _build(stub(first.unix_target))
    finally:
        first.kill()
    second = start_sidecar(data_dir)
    try:
        service = stub(second.unix_target)
        _check_state(service, before)
        _check_still_governing(service, before)
    finally:
        second.stop()
    # And once more after a clean stop, with the changes made since.
    third = start_sidecar(data_dir)
    try:
        service = stub(third.unix_target)
        current = [m.memory.id for m in recall(service, FACTS, "light").memories]
        assert before.ids["light"] not in current
        assert service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy == before.policy
    finally:
        third.stop()
