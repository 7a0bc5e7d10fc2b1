"""Outcome feedback over gRPC: ReportOutcome updates exactly the used memories; strategies rise and fall by outcomes.

Each test works in its own namespace of one shared sidecar.
"""

from __future__ import annotations

import math
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar
from helpers import bad_fields, counts, memory, pack, status_details, stub, vectors, watch_events

from memevo.sidecar.retrieval.hints import HINT_COUNTER_EXAMPLE, HINT_CURRENT
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

SUCCESS = memory_service_pb2.OUTCOME_SUCCESS
FAILURE = memory_service_pb2.OUTCOME_FAILURE
PARTIAL = memory_service_pb2.OUTCOME_PARTIAL
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY
FACT = memory_pb2.MEMORY_KIND_FACT
SIGNATURE = "deploy:python-service"


@pytest.fixture(scope="module")
def service(shared_sidecar: Sidecar) -> Any:
    return stub(shared_sidecar.unix_target)


def remember(service: Any, content: str, vector: bytes, **fields: Any) -> memory_pb2.Memory:
    return service.Remember(memory_service_pb2.RememberRequest(memory=memory(content, vector, **fields))).result.memory


def get(service: Any, *ids: int) -> list[memory_pb2.Memory]:
    response = service.Get(memory_service_pb2.GetRequest(ids=list(ids)))
    assert list(response.missing_ids) == []
    return list(response.memories)


def recall(service: Any, namespace: str, query: bytes, k: int = 10) -> memory_service_pb2.RecallResponse:
    return service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=query, k=k, filter=memory_service_pb2.RecallFilter(namespace=namespace)
        )
    )


def report(service: Any, **fields: Any) -> memory_service_pb2.ReportOutcomeResponse:
    return service.ReportOutcome(memory_service_pb2.ReportOutcomeRequest(**fields))


def three_facts(service: Any, namespace: str, seed: int) -> tuple[list[memory_pb2.Memory], str, bytes]:
    """Three memories of equal confidence, one recall that returns all three: (memories, retrieval id, query)."""
    rows = vectors(3, seed=seed)
    stored = [
        remember(service, f"{namespace} fact {i}", pack(row), namespace=namespace, kind=FACT, confidence=0.6)
        for i, row in enumerate(rows)
    ]
    response = recall(service, namespace, pack(rows[0]))
    assert response.retrieval_id, "a recall carries a retrieval id"
    assert {m.memory.id for m in response.memories} == {m.id for m in stored}
    return stored, response.retrieval_id, pack(rows[0])


def expect_error(call: Any, code: grpc.StatusCode) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, (caught.value.code(), caught.value.details())
    return caught.value


# ---- ReportOutcome ------------------------------------------------------------------------------


def test_outcome_updates_exactly_the_used_memories(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-exact", seed=20)
    used, unused = stored[0], stored[1:]
    response = report(service, retrieval_id=retrieval_id, outcome=SUCCESS, used_memory_ids=[used.id])
    assert response.updated_count == 1
    after = get(service, *(m.id for m in stored))
    assert after[0].successes == 1.0
    assert after[0].failures == 0.0
    assert after[0].confidence > used.confidence
    for before, now in zip(unused, after[1:], strict=True):
        assert now.successes == 0.0
        assert now.failures == 0.0
        assert now.confidence == before.confidence
        assert now.sequence == before.sequence, "an unused memory was rewritten"


def test_outcome_without_used_ids_applies_to_everything_the_retrieval_returned(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-all", seed=21)
    response = report(service, retrieval_id=retrieval_id, outcome=FAILURE)
    assert response.updated_count == 3
    for before, now in zip(stored, get(service, *(m.id for m in stored)), strict=True):
        assert now.failures == 1.0
        assert now.confidence < before.confidence


def test_failure_lowers_confidence_more_than_success_raises_it(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-asymmetry", seed=22)
    report(service, retrieval_id=retrieval_id, outcome=SUCCESS, used_memory_ids=[stored[0].id])
    report(service, retrieval_id=retrieval_id, outcome=FAILURE, used_memory_ids=[stored[1].id])
    succeeded, failed, _ = get(service, *(m.id for m in stored))
    start = stored[0].confidence
    assert stored[1].confidence == start
    gain, loss = succeeded.confidence - start, start - failed.confidence
    assert gain > 0.0
    assert loss > gain, f"success +{gain:.3f}, failure -{loss:.3f}"


def test_reward_and_partial_weigh_the_record(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-reward", seed=23)
    first, second, third = stored
    report(service, retrieval_id=retrieval_id, outcome=SUCCESS, reward=0.5, used_memory_ids=[first.id])
    report(service, retrieval_id=retrieval_id, outcome=FAILURE, reward=-1.0, used_memory_ids=[second.id])
    report(service, retrieval_id=retrieval_id, outcome=PARTIAL, used_memory_ids=[third.id])
    a, b, c = get(service, first.id, second.id, third.id)
    assert (a.successes, a.failures) == (0.5, 0.0)
    assert (b.successes, b.failures) == (0.0, 1.0)
    assert (c.successes, c.failures) == (0.5, 0.5)
    assert a.confidence > first.confidence
    assert b.confidence < second.confidence


def test_outcome_by_memory_ids_without_a_retrieval(service: Any) -> None:
    stored, _, _ = three_facts(service, "outcome-direct", seed=24)
    response = report(service, outcome=SUCCESS, used_memory_ids=[stored[2].id])
    assert response.updated_count == 1
    assert get(service, stored[2].id)[0].successes == 1.0
    assert get(service, stored[0].id)[0].successes == 0.0


def test_outcome_is_an_event_in_the_change_log(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-event", seed=25)
    before = counts(service)[0]
    report(service, retrieval_id=retrieval_id, outcome=SUCCESS, used_memory_ids=[stored[0].id], note="it worked")
    events = watch_events(service, 2, after_sequence=before)
    types = [e.type for e in events]
    assert events_pb2.CHANGE_EVENT_TYPE_OUTCOME_REPORTED in types
    reported = next(e for e in events if e.type == events_pb2.CHANGE_EVENT_TYPE_OUTCOME_REPORTED)
    assert list(reported.related_ids) == [stored[0].id]
    assert retrieval_id in reported.detail
    assert reported.reason == "it worked"


def test_outcome_with_request_id_is_applied_once(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-idempotent", seed=26)
    request = {
        "retrieval_id": retrieval_id,
        "outcome": SUCCESS,
        "used_memory_ids": [stored[0].id, stored[1].id],
        "request_id": "outcome-once",
    }
    first = report(service, **request)
    after_first = counts(service)
    second = report(service, **request)
    assert second.updated_count == first.updated_count == 2
    assert counts(service) == after_first, "the retry wrote again"
    for record in get(service, stored[0].id, stored[1].id):
        assert record.successes == 1.0


def test_used_ids_outside_the_retrieval_are_refused_and_nothing_changes(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-outside", seed=27)
    stranger = remember(service, "not returned by that recall", pack(vectors(1, seed=28)[0]), namespace="elsewhere")
    before = counts(service)
    error = expect_error(
        lambda: report(
            service, retrieval_id=retrieval_id, outcome=SUCCESS, used_memory_ids=[stored[0].id, stranger.id]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "used_memory_ids" in bad_fields(error)
    assert str(stranger.id) in error.details()
    assert counts(service) == before
    assert all(m.successes == 0.0 for m in get(service, stored[0].id, stranger.id))


def test_unknown_retrieval_id_is_not_found_and_nothing_changes(service: Any) -> None:
    stored, _, _ = three_facts(service, "outcome-unknown", seed=29)
    before = counts(service)
    error = expect_error(
        lambda: report(service, retrieval_id="0" * 32, outcome=SUCCESS, used_memory_ids=[stored[0].id]),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "retrieval_id" in error.details()
    _, metadata = status_details(error)
    assert metadata.get("field") == "retrieval_id"
    assert counts(service) == before
    assert get(service, stored[0].id)[0].successes == 0.0


@pytest.mark.parametrize("reward", [1.5, -1.01, 2.0e9, math.nan, math.inf, -math.inf])
def test_reward_outside_range_is_refused_and_nothing_changes(service: Any, reward: float) -> None:
    stored, retrieval_id, _ = three_facts(service, f"outcome-reward-bad-{reward}", seed=30)
    before = counts(service)
    error = expect_error(
        lambda: report(service, retrieval_id=retrieval_id, outcome=SUCCESS, reward=reward),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "reward" in bad_fields(error)
    assert counts(service) == before
    assert all(m.successes == 0.0 and m.failures == 0.0 for m in get(service, *(m.id for m in stored)))


@pytest.mark.parametrize("reward", [-1.0, 0.0, 1.0])
def test_reward_at_the_bounds_is_accepted(service: Any, reward: float) -> None:
    stored, retrieval_id, _ = three_facts(service, f"outcome-reward-edge-{reward}", seed=31)
    response = report(
        service, retrieval_id=retrieval_id, outcome=SUCCESS, reward=reward, used_memory_ids=[stored[0].id]
    )
    assert response.updated_count == 1
    record = get(service, stored[0].id)[0]
    assert (record.successes, record.failures) == (max(reward, 0.0), max(-reward, 0.0))


def test_outcome_needs_an_outcome_and_a_subject(service: Any) -> None:
    _, retrieval_id, _ = three_facts(service, "outcome-missing", seed=32)
    before = counts(service)
    error = expect_error(lambda: report(service, retrieval_id=retrieval_id), grpc.StatusCode.INVALID_ARGUMENT)
    assert "outcome" in bad_fields(error)
    error = expect_error(lambda: report(service, outcome=SUCCESS), grpc.StatusCode.INVALID_ARGUMENT)
    assert "retrieval_id" in bad_fields(error)
    assert counts(service) == before


# ---- strategies ---------------------------------------------------------------------------------


def _strategy_vectors(seed: int) -> tuple[bytes, bytes, bytes]:
    """(query, older strategy, newer strategy): the older is the closer one to the query."""
    rng = np.random.default_rng(seed)
    query = rng.standard_normal(8)
    older = query + 0.05 * rng.standard_normal(8)
    newer = query + 0.4 * rng.standard_normal(8)
    return pack(query), pack(older), pack(newer)


def _ranking(service: Any, namespace: str, query: bytes) -> tuple[list[int], dict[int, Any]]:
    response = recall(service, namespace, query)
    return [m.memory.id for m in response.memories], {m.memory.id: m for m in response.memories}


def _report_each(service: Any, namespace: str, query: bytes, plan: list[tuple[int, int]]) -> None:
    """For each (memory id, outcome): recall, then report that outcome of that one memory."""
    for memory_id, outcome in plan:
        retrieval_id = recall(service, namespace, query).retrieval_id
        report(service, retrieval_id=retrieval_id, outcome=outcome, used_memory_ids=[memory_id])


def test_strategy_upgrade_by_outcomes_flips_the_ranking_and_enough_evidence_restores_it(service: Any) -> None:
    namespace = "strategy-flip"
    query, older_vector, newer_vector = _strategy_vectors(40)
    older = remember(
        service,
        "deploy by copying files over ssh",
        older_vector,
        namespace=namespace,
        kind=STRATEGY,
        task_signature=SIGNATURE,
    )
    newer = remember(
        service,
        "deploy by building a container image",
        newer_vector,
        namespace=namespace,
        kind=STRATEGY,
        task_signature=SIGNATURE,
    )
    order, hits = _ranking(service, namespace, query)
    assert order == [older.id, newer.id], "before any outcome the closer strategy ranks first"
    assert hits[older.id].hint == HINT_CURRENT
    assert get(service, older.id)[0].demoted_by == 0, "being newer alone demotes nothing"

    _report_each(service, namespace, query, [(newer.id, SUCCESS), (older.id, FAILURE)] * 3)
    demoted = get(service, older.id)[0]
    assert demoted.demoted_by == newer.id
    assert demoted.state == memory_pb2.MEMORY_STATE_ACTIVE, "demoted, not deleted or obsolete"
    order, hits = _ranking(service, namespace, query)
    assert order == [newer.id, older.id], "the better strategy now ranks first"
    assert hits[older.id].similarity > hits[newer.id].similarity, "the flip comes from outcomes, not similarity"
    assert hits[older.id].score < hits[newer.id].score
    assert hits[older.id].hint.startswith(HINT_COUNTER_EXAMPLE), hits[older.id].hint
    assert str(newer.id) in hits[older.id].hint
    assert hits[newer.id].hint == HINT_CURRENT
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=older.id)).events
    assert any("demoted" in e.reason and newer.id in e.related_ids for e in events), [e.reason for e in events]

    _report_each(service, namespace, query, [(older.id, SUCCESS), (newer.id, FAILURE)] * 12)
    restored = get(service, older.id)[0]
    assert restored.demoted_by == 0, "the evidence turned: the older strategy is restored"
    assert get(service, newer.id)[0].demoted_by == 0
    order, hits = _ranking(service, namespace, query)
    assert order == [older.id, newer.id]
    assert hits[older.id].hint == HINT_CURRENT
    events = service.History(memory_service_pb2.HistoryRequest(memory_id=older.id)).events
    assert any("restored" in e.reason for e in events), [e.reason for e in events]


def test_one_lucky_outcome_does_not_demote(service: Any) -> None:
    namespace = "strategy-weak-evidence"
    query, older_vector, newer_vector = _strategy_vectors(41)
    older = remember(
        service, "retry the flaky test", older_vector, namespace=namespace, kind=STRATEGY, task_signature="ci:flaky"
    )
    newer = remember(
        service,
        "quarantine the flaky test",
        newer_vector,
        namespace=namespace,
        kind=STRATEGY,
        task_signature="ci:flaky",
    )
    _report_each(service, namespace, query, [(newer.id, SUCCESS)])
    assert get(service, older.id)[0].demoted_by == 0
    # Strategies of one task share its relevance, so one success may put the newer first; but the older
    # is not treated as beaten: presented as current, its score not halved as a demoted one's would be.
    order, hits = _ranking(service, namespace, query)
    assert sorted(order) == sorted([older.id, newer.id])
    assert hits[older.id].hint == HINT_CURRENT
    assert hits[older.id].score > 0.9 * hits[newer.id].score


def test_strategies_of_different_signatures_do_not_compete(service: Any) -> None:
    namespace = "strategy-signatures"
    query, older_vector, newer_vector = _strategy_vectors(42)
    older = remember(
        service, "run migrations by hand", older_vector, namespace=namespace, kind=STRATEGY, task_signature="db:migrate"
    )
    newer = remember(
        service, "deploy with blue/green", newer_vector, namespace=namespace, kind=STRATEGY, task_signature="deploy:web"
    )
    _report_each(service, namespace, query, [(newer.id, SUCCESS), (older.id, FAILURE)] * 4)
    assert get(service, older.id)[0].demoted_by == 0
    _, hits = _ranking(service, namespace, query)
    assert hits[older.id].hint == HINT_CURRENT


def test_a_retrieval_of_another_namespace_is_not_found_and_nothing_changes(service: Any) -> None:
    stored, retrieval_id, _ = three_facts(service, "outcome-tenant-a", seed=31)
    before = counts(service)
    for outcome in (FAILURE, FAILURE, FAILURE):
        error = expect_error(
            lambda outcome=outcome: report(
                service, retrieval_id=retrieval_id, outcome=outcome, namespace="outcome-tenant-b"
            ),
            grpc.StatusCode.NOT_FOUND,
        )
        assert error.details().startswith("retrieval_id: "), error.details()
        assert "'outcome-tenant-b'" in error.details()
        assert status_details(error)[1].get("field") == "retrieval_id"
    # Named by id instead of by retrieval: the same confinement.
    error = expect_error(
        lambda: report(service, outcome=FAILURE, used_memory_ids=[m.id for m in stored], namespace="outcome-tenant-b"),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert bad_fields(error) == ["used_memory_ids"]
    assert counts(service) == before
    assert [(m.confidence, m.failures) for m in get(service, *(m.id for m in stored))] == [
        (m.confidence, 0.0) for m in stored
    ]
    # In its own namespace the same retrieval is reported.
    assert report(service, retrieval_id=retrieval_id, outcome=FAILURE, namespace="outcome-tenant-a").updated_count == 3
    assert all(m.failures > 0 for m in get(service, *(m.id for m in stored)))
