"""Duplicates and soft conflicts over gRPC: restatements confirm, disagreeing near-duplicates raise inconsistency.

Without a fact key nothing is flipped to OBSOLETE: a new memory about the
same entity whose vector is nearly the same but whose text differs raises
the older memory's ``inconsistency`` (an input of its accuracy) and leaves
it ACTIVE. Each test works in its own namespace of one shared sidecar.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import counts, memory, pack, stub

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
FACT = memory_pb2.MEMORY_KIND_FACT
EPISODE = memory_pb2.MEMORY_KIND_EPISODE
CREATED = memory_service_pb2.WRITE_OUTCOME_CREATED
CONFIRMED = memory_service_pb2.WRITE_OUTCOME_CONFIRMED


def near(seed: int, count: int, noise: float = 0.01) -> list[bytes]:
    """``count`` vectors within ``noise`` of one random direction (cosine > 0.99 for small noise)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(8)
    return [pack(base + noise * rng.standard_normal(8)) for _ in range(count)]


def orthogonal_to(raw: bytes, seed: int) -> bytes:
    """A vector orthogonal to ``raw`` (cosine 0)."""
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    other = np.random.default_rng(seed).standard_normal(8)
    other -= other.dot(vector) / vector.dot(vector) * vector
    return pack(other)


def remember(service: Any, content: str, vector: bytes, **fields: Any) -> memory_service_pb2.WriteResult:
    return service.Remember(memory_service_pb2.RememberRequest(memory=memory(content, vector, **fields))).result


def get(service: Any, memory_id: int) -> memory_pb2.Memory:
    response = service.Get(memory_service_pb2.GetRequest(ids=[memory_id]))
    assert list(response.missing_ids) == []
    return response.memories[0]


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


# ---- exact duplicates ---------------------------------------------------------------------------


def test_exact_duplicate_confirms_the_existing_memory(service: Any) -> None:
    namespace = "dup-exact"
    vector = near(1, 1)[0]
    first = remember(service, "Water boils at 100 C at sea level.", vector, namespace=namespace, kind=FACT)
    assert first.outcome == CREATED
    before = get(service, first.memory.id)
    before_sequence, before_total = counts(service)

    again = remember(service, "Water boils at 100 C at sea level.", vector, namespace=namespace, kind=FACT)
    assert again.outcome == CONFIRMED, memory_service_pb2.WriteOutcome.Name(again.outcome)
    assert again.memory.id == first.memory.id
    after = get(service, first.memory.id)
    assert after.confidence > before.confidence
    assert after.access_count == before.access_count + 1
    assert after.state == ACTIVE
    sequence, total = counts(service)
    assert total == before_total, "the duplicate was stored twice"
    assert sequence > before_sequence, "the confirmation is a change-log event"
    # Only one memory in the namespace answers.
    recalled = service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vector, k=10, filter=memory_service_pb2.RecallFilter(namespace=namespace)
        )
    )
    assert [m.memory.id for m in recalled.memories] == [first.memory.id]


def test_duplicate_differing_in_case_and_punctuation_confirms(service: Any) -> None:
    namespace = "dup-normalised"
    first = remember(service, "The deploy script lives in ops/deploy.sh", near(2, 1)[0], namespace=namespace, kind=FACT)
    # A different vector too: "the same statement" is decided by the text for non-episodes.
    again = remember(
        service, "the DEPLOY script lives in ops deploy sh...", near(3, 1)[0], namespace=namespace, kind=FACT
    )
    assert again.outcome == CONFIRMED
    assert again.memory.id == first.memory.id


def test_confirming_repeatedly_keeps_raising_confidence_below_one(service: Any) -> None:
    namespace = "dup-repeat"
    vector = near(4, 1)[0]
    first = remember(service, "Paris is the capital of France", vector, namespace=namespace, kind=FACT)
    confidences = [first.memory.confidence]
    for _ in range(5):
        result = remember(service, "Paris is the capital of France", vector, namespace=namespace, kind=FACT)
        assert result.outcome == CONFIRMED
        confidences.append(get(service, first.memory.id).confidence)
    assert all(b > a for a, b in itertools.pairwise(confidences)), confidences
    assert confidences[-1] <= 1.0


def test_confirmation_counts_one_more_access_after_recalls(service: Any) -> None:
    namespace = "dup-access"
    vector = near(5, 1)[0]
    first = remember(service, "The staging database is db-2", vector, namespace=namespace, kind=FACT)
    for _ in range(3):
        service.Recall(
            memory_service_pb2.RecallRequest(
                query_vector=vector, k=5, filter=memory_service_pb2.RecallFilter(namespace=namespace)
            )
        )
    recalled = get(service, first.memory.id).access_count
    assert recalled == 3
    again = remember(service, "The staging database is db-2", vector, namespace=namespace, kind=FACT)
    assert again.outcome == CONFIRMED
    assert get(service, first.memory.id).access_count == recalled + 1, "a restatement is one more access"


def test_identical_episodes_are_separate_events(service: Any) -> None:
    namespace = "dup-episode"
    first, second = near(6, 2, noise=0.5)
    one = remember(service, "Ran the test suite; it passed", first, namespace=namespace, kind=EPISODE)
    two = remember(service, "Ran the test suite; it passed", second, namespace=namespace, kind=EPISODE)
    assert one.outcome == two.outcome == CREATED
    assert one.memory.id != two.memory.id


def test_same_text_about_another_entity_is_not_a_duplicate(service: Any) -> None:
    namespace = "dup-entity"
    vector = near(7, 1)[0]
    one = remember(service, "prefers tea", vector, namespace=namespace, kind=FACT, entity="user:a")
    two = remember(service, "prefers tea", vector, namespace=namespace, kind=FACT, entity="user:b")
    assert two.outcome == CREATED
    assert one.memory.id != two.memory.id


def test_same_text_in_another_namespace_is_not_a_duplicate(service: Any) -> None:
    vector = near(8, 1)[0]
    one = remember(service, "the build uses make", vector, namespace="dup-ns-1", kind=FACT)
    two = remember(service, "the build uses make", vector, namespace="dup-ns-2", kind=FACT)
    assert two.outcome == CREATED
    assert one.memory.id != two.memory.id


# ---- soft conflicts -----------------------------------------------------------------------------
# Near-duplicates worded apart: the same wording with another value is one slot's new value (see the tests of
# inferred slots), which retires the older statement instead of casting doubt on it.


def test_soft_conflict_raises_the_older_memorys_inconsistency_and_keeps_it_active(service: Any) -> None:
    namespace = "soft-basic"
    old_vector, new_vector = near(10, 2)
    older = remember(
        service,
        "User B lives in Paris",
        old_vector,
        namespace=namespace,
        kind=FACT,
        entity="user:b",
        valid_from=Timestamp(seconds=1_000),
    )
    before_total = counts(service)[1]
    newer = remember(
        service,
        "User B has moved to a flat in Berlin since",
        new_vector,
        namespace=namespace,
        kind=FACT,
        entity="user:b",
        valid_from=Timestamp(seconds=2_000),
    )
    assert newer.outcome == CREATED
    assert counts(service)[1] == before_total + 1
    old_record = get(service, older.memory.id)
    assert old_record.inconsistency > 0.0, "the older memory's accuracy input must drop"
    assert old_record.inconsistency <= 1.0
    assert old_record.state == ACTIVE, "a soft conflict never flips the state"
    assert not old_record.HasField("valid_to")
    assert old_record.superseded_by == 0
    assert get(service, newer.memory.id).inconsistency == 0.0
    # Both stay in standard recall.
    recalled = service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=old_vector, k=10, filter=memory_service_pb2.RecallFilter(namespace=namespace)
        )
    )
    assert {m.memory.id for m in recalled.memories} == {older.memory.id, newer.memory.id}


def test_soft_conflict_write_reports_the_older_memory_as_affected(service: Any) -> None:
    namespace = "soft-affected"
    old_vector, new_vector = near(18, 2)
    older = remember(service, "User J lives in Lima", old_vector, namespace=namespace, kind=FACT, entity="user:j")
    newer = remember(
        service,
        "User J has moved to a flat in Quito since",
        new_vector,
        namespace=namespace,
        kind=FACT,
        entity="user:j",
    )
    assert get(service, older.memory.id).inconsistency > 0.0
    assert list(newer.affected_ids) == [older.memory.id], "proto: affected_ids lists other memories the write changed"


def test_more_disagreement_means_more_inconsistency(service: Any) -> None:
    namespace = "soft-repeat"
    vectors = near(11, 3)
    # Statements, not events: a later episode never doubts an earlier one (issue 42).
    about = {"namespace": namespace, "entity": "svc:api", "kind": FACT}
    older = remember(service, "the API key rotates monthly", vectors[0], **about)
    remember(service, "rotation of the API key happens weekly now", vectors[1], **about)
    once = get(service, older.memory.id).inconsistency
    remember(service, "since the incident the API key is rotated daily", vectors[2], **about)
    twice = get(service, older.memory.id).inconsistency
    assert 0.0 < once < twice <= 1.0


def test_stored_later_but_world_older_memory_does_not_cast_doubt_on_newer(service: Any) -> None:
    namespace = "soft-late"
    vectors = near(12, 3)
    current = remember(
        service,
        "User C works at Acme",
        vectors[0],
        namespace=namespace,
        kind=FACT,
        entity="user:c",
        valid_from=Timestamp(seconds=5_000),
    )
    late = remember(
        service,
        "User C worked at Initech",
        vectors[1],
        namespace=namespace,
        kind=FACT,
        entity="user:c",
        valid_from=Timestamp(seconds=1_000),
    )
    assert late.outcome == CREATED
    record = get(service, current.memory.id)
    assert record.inconsistency == 0.0, "an older statement arriving late does not lower the newer one"
    assert record.state == ACTIVE
    assert get(service, late.memory.id).state == ACTIVE, "without a fact key nothing becomes OBSOLETE"


def test_late_world_older_memory_is_the_one_that_carries_the_inconsistency(service: Any) -> None:
    namespace = "soft-late-self"
    vectors = near(13, 2)
    remember(
        service,
        "User D drives a Volvo",
        vectors[0],
        namespace=namespace,
        kind=FACT,
        entity="user:d",
        valid_from=Timestamp(seconds=5_000),
    )
    late = remember(
        service,
        "back then User D was driving a Saab",
        vectors[1],
        namespace=namespace,
        kind=FACT,
        entity="user:d",
        valid_from=Timestamp(seconds=1_000),
    )
    # DESIGN §2: the disagreement lowers the *older* memory; here the older one is the late arrival.
    assert get(service, late.memory.id).inconsistency > 0.0


def test_no_soft_conflict_without_an_entity_or_across_entities_or_when_far_apart(service: Any) -> None:
    namespace = "soft-none"
    vectors = near(14, 4)
    no_entity = remember(service, "the sky is blue", vectors[0], namespace=namespace, kind=FACT)
    remember(service, "the sky is grey", vectors[1], namespace=namespace, kind=FACT)
    assert get(service, no_entity.memory.id).inconsistency == 0.0

    user_e = remember(service, "User E likes jazz", vectors[2], namespace=namespace, kind=FACT, entity="user:e")
    remember(service, "User F likes rock", vectors[3], namespace=namespace, kind=FACT, entity="user:f")
    assert get(service, user_e.memory.id).inconsistency == 0.0

    far = orthogonal_to(vectors[2], seed=15)
    remember(service, "User E has a cat", far, namespace=namespace, kind=FACT, entity="user:e")
    assert get(service, user_e.memory.id).inconsistency == 0.0, "a dissimilar memory is not a conflict"


def test_a_keyed_fact_retires_the_text_statement_of_its_slot_instead_of_doubting_it(service: Any) -> None:
    namespace = "soft-keyed"
    vectors = near(16, 2)
    plain = remember(
        service, "User G speaks French at home", vectors[0], namespace=namespace, kind=FACT, entity="user:g"
    )
    keyed = remember(
        service,
        "User G speaks German at home",
        vectors[1],
        namespace=namespace,
        kind=FACT,
        entity="user:g",
        fact=memory_pb2.Fact(attribute="language", value="German"),
    )
    assert keyed.outcome == memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
    retired = get(service, plain.memory.id)
    assert retired.state == memory_pb2.MEMORY_STATE_OBSOLETE, "the keyed fact's own template fits the text"
    assert retired.superseded_by == keyed.memory.id
    assert retired.inconsistency == 0.0, "retired, not doubted"


def test_near_duplicate_episode_about_an_entity_with_the_same_text_confirms(service: Any) -> None:
    namespace = "soft-near-dup"
    first_vector, second_vector = near(17, 2, noise=0.001)
    first = remember(service, "User H asked about pricing", first_vector, namespace=namespace, entity="user:h")
    again = remember(service, "user h asked about pricing.", second_vector, namespace=namespace, entity="user:h")
    assert again.outcome == CONFIRMED
    assert again.memory.id == first.memory.id
    assert get(service, first.memory.id).inconsistency == 0.0
