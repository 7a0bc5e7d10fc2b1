"""The perception RPCs through the typed Python client (memevo.client.MemoryClient) against a real sidecar."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timezone

import numpy as np
import pytest
from conftest import Sidecar
from helpers import vectors

from memevo.client import (
    ChangeEventType,
    FactKey,
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryClient,
    MemoryInput,
    MemoryKind,
    MemoryState,
    NotFoundError,
    Outcome,
    WriteOutcome,
)

pytestmark = pytest.mark.integration

ENTITY = "user:a"


def at(seconds: int) -> datetime:
    """World time ``seconds`` after the epoch."""
    return datetime.fromtimestamp(seconds, timezone.utc)


@pytest.fixture(scope="module")
def client(shared_sidecar: Sidecar) -> Iterator[MemoryClient]:
    with MemoryClient(shared_sidecar.unix_target, timeout_s=30) as c:
        yield c


def test_fact_change_recall_as_of_and_history(client: MemoryClient) -> None:
    namespace = "client-facts"
    rng = np.random.default_rng(80)
    base = rng.standard_normal(8)
    dark_vector, light_vector = (base + 0.2 * rng.standard_normal(8) for _ in range(2))
    dark = client.remember(
        "user A prefers dark mode",
        vector=dark_vector,
        namespace=namespace,
        kind=MemoryKind.PREFERENCE,
        entity=ENTITY,
        fact=("ui_mode", "dark"),
        valid_from=at(10),
    )
    light = client.remember(
        "user A prefers light mode",
        vector=light_vector,
        namespace=namespace,
        kind=MemoryKind.PREFERENCE,
        entity=ENTITY,
        fact=("ui_mode", "light"),
        valid_from=at(100),
    )
    assert dark.outcome is WriteOutcome.CREATED
    assert light.outcome is WriteOutcome.SUPERSEDED_PREVIOUS

    now = client.recall(vector=dark_vector, namespace=namespace)
    assert now.ids == [light.id]
    assert now.retrieval_id
    then = client.recall(vector=dark_vector, namespace=namespace, as_of=at(50))
    assert then.ids == [dark.id]
    assert then[0].memory.state is MemoryState.OBSOLETE

    history = client.history(FactKey(entity=ENTITY, attribute="ui_mode", namespace=namespace))
    assert [v.id for v in history.versions] == [dark.id, light.id]
    assert history.versions[0].valid_from == at(10)
    assert history.versions[0].valid_to == at(100)
    assert history.versions[1].valid_to is None
    assert history.versions[0].superseded_by == light.id
    assert ChangeEventType.SUPERSEDED in {e.type for e in history.events}

    late = client.remember(
        "user A preferred night mode",
        vector=dark_vector,
        namespace=namespace,
        kind=MemoryKind.PREFERENCE,
        entity=ENTITY,
        fact=("ui_mode", "night"),
        valid_from=at(5),
    )
    assert late.outcome is WriteOutcome.BACKDATED
    assert late.memory.state is MemoryState.OBSOLETE
    restated = client.remember(
        "User A prefers LIGHT mode.",
        vector=light_vector,
        namespace=namespace,
        kind=MemoryKind.PREFERENCE,
        entity=ENTITY,
        fact=("ui_mode", "Light"),
    )
    assert restated.outcome is WriteOutcome.CONFIRMED
    assert restated.id == light.id


def test_outcomes_supersede_and_errors(client: MemoryClient) -> None:
    namespace = "client-outcomes"
    rows = vectors(3, seed=81)
    stored = [
        client.remember(f"client fact {i}", vector=rows[i], namespace=namespace, kind=MemoryKind.FACT, confidence=0.6)
        for i in range(3)
    ]
    recalled = client.recall(vector=rows[0], namespace=namespace)
    assert client.report_outcome(recalled.retrieval_id, Outcome.FAILURE, used_memory_ids=[stored[0].id]) == 1
    failed = client.get_one(stored[0].id)
    assert failed.failures == 1.0
    assert failed.confidence < 0.6

    with pytest.raises(InvalidArgumentError) as caught:
        client.report_outcome(recalled.retrieval_id, Outcome.SUCCESS, reward=1.5)
    assert "reward" in [f for f, _ in caught.value.field_violations]
    with pytest.raises(NotFoundError):
        client.report_outcome("no-such-retrieval", Outcome.SUCCESS)

    replaced = client.supersede(
        stored[1].id, MemoryInput(content="client fact 1, corrected", vector=rows[1], namespace=namespace)
    )
    old = client.get_one(stored[1].id)
    assert old.state is MemoryState.OBSOLETE
    assert old.superseded_by == replaced.new_memory.id
    with pytest.raises(FailedPreconditionError):
        client.supersede(stored[1].id, stored[2].id)
    lineage = client.history(stored[1].id)
    assert [v.id for v in lineage.versions] == [stored[1].id, replaced.new_memory.id]


def test_policy_round_trip_and_refusal(client: MemoryClient) -> None:
    policy = client.get_policy()
    assert policy.name == "default"
    with pytest.raises(InvalidArgumentError) as caught:
        client.update_policy(dataclasses.replace(policy, soft_conflict_similarity=2.0))
    assert "policy.soft_conflict_similarity" in [f for f, _ in caught.value.field_violations]
    assert client.get_policy() == policy
