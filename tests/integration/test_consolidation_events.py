"""Consolidation never loses an event, over gRPC against a real sidecar (issue 42).

Members alike in vector but apart in a date, a number or a name are distinct
events: they are not proposed for a merge, while repeated experiences and
strategies still are. A later episode never casts doubt on an earlier one.
Vectors are the client's, near-duplicates on purpose: the cluster pass would
group every set below, so what is proposed depends on the texts alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import pack, stub, unit, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

DIM = 8
EPISODE = memory_pb2.MEMORY_KIND_EPISODE
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED


def near_duplicates(count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    centre = unit(rng.normal(size=DIM))
    return [pack(unit(centre + 0.02 * rng.normal(size=DIM))) for _ in range(count)]


def remember(service: Any, texts: list[str], seed: int, **fields: Any) -> list[memory_service_pb2.WriteResult]:
    """One Remember per text, in order, a day apart in world time (as an agent writes events)."""
    results = []
    for day, (text, vector) in enumerate(zip(texts, near_duplicates(len(texts), seed), strict=True)):
        memory = memory_pb2.MemoryInput(
            content=text, vector=vector, namespace="agent", valid_from=Timestamp(seconds=86_400 * (day + 1)), **fields
        )
        results.append(service.Remember(memory_service_pb2.RememberRequest(memory=memory)).result)
    return results


def ids(results: list[memory_service_pb2.WriteResult]) -> list[int]:
    return [int(r.memory.id) for r in results]


def states(service: Any, memory_ids: list[int]) -> list[int]:
    found = {m.id: m.state for m in service.Get(memory_service_pb2.GetRequest(ids=memory_ids)).memories}
    return [found[i] for i in memory_ids]


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", dimension=DIM)
    yield process
    process.stop()


def events_store(service: Any) -> dict[str, list[int]]:
    """Distinct dated events (a date, a number, a name apart), a repeated experience, and strategies."""
    wendy = {"kind": EPISODE, "entity": "person:wendy"}
    dated = [f"On 2026-05-{day:02d} Wendy scheduled a meeting about Falcon" for day in (14, 15, 18, 21, 25)]
    numbered = [f"Wendy deployed Falcon build {n} to staging" for n in (4411, 4412, 4415, 4420, 4431)]
    named = [f"Wendy met {name} to review the Falcon roadmap" for name in ("Arjun", "Mei", "Tomas", "Lena", "Kofi")]
    repeated = [
        "Ran the Falcon test suite; it passed",
        "Ran the Falcon test suite again; it passed",
        "Ran the whole Falcon test suite; it passed",
        "Ran the Falcon test suite; it passed",
        "Ran the Falcon test suite once more; it passed",
    ]
    strategies = [f"To release Falcon, migrate first, then restart the workers (attempt {i})." for i in range(5)]
    return {
        "dated": ids(remember(service, dated, seed=1, **wendy)),
        "numbered": ids(remember(service, numbered, seed=2, **wendy)),
        "named": ids(remember(service, named, seed=3, **wendy)),
        "repeated": ids(remember(service, repeated, seed=4, **wendy)),
        "strategies": ids(remember(service, strategies, seed=5, kind=STRATEGY, task_signature="release-falcon")),
    }


def set_consolidation(service: Any, **fields: Any) -> None:
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    for name, value in fields.items():
        setattr(policy.consolidation, name, value)
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))


def test_distinct_dated_events_are_never_proposed_while_repeats_and_strategies_are(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    set_consolidation(service, review_timeout_s=1.0)
    store = events_store(service)
    passed = service.Govern(memory_service_pb2.GovernRequest()).consolidation
    assert passed.groups_found >= 2, passed
    assert passed.proposals_opened == 2, "one for the repeated experience, one for the strategies"
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 2

    # At the deadline, extractive mode folds what was proposed, and only that.
    set_consolidation(service, review_timeout_s=1.0, without_reviewer=policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE)
    wait_until(lambda: states(service, store["repeated"]) == [CONSOLIDATED] * 5, "repeated experience folded")
    wait_until(lambda: states(service, store["strategies"]) == [CONSOLIDATED] * 5, "strategies folded")
    assert service.Govern(memory_service_pb2.GovernRequest()).consolidation.consolidated_count == 0
    for events in ("dated", "numbered", "named"):
        assert states(service, store[events]) == [ACTIVE] * 5, f"{events} events were merged"
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).review.open_consolidations == 0


def test_a_later_episode_never_doubts_an_earlier_one(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    texts = [f"On 2026-05-{day:02d} Wendy scheduled a meeting about Falcon" for day in (14, 15, 18, 21, 25, 28)]
    texts += [f"Daily stand-up of Falcon: Wendy closed {n} tickets" for n in (3, 5, 2)]
    results = remember(service, texts, seed=7, kind=EPISODE, entity="person:wendy")
    assert [r.outcome for r in results] == [CREATED] * len(texts)
    assert len(set(ids(results))) == len(texts)
    assert all(list(r.affected_ids) == [] for r in results), "no write changed an earlier episode"
    records = service.Get(memory_service_pb2.GetRequest(ids=ids(results))).memories
    assert [(m.inconsistency, m.possibly_outdated_by) for m in records] == [(0.0, 0)] * len(texts)
