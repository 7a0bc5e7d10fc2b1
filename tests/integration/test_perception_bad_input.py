"""Bad perception input gets a clear status naming the field, and writes nothing (issue 4's must-show list).

One sidecar with ``--max-future-skew-s 60`` serves the whole module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import bad_fields, counts, memory, stub, vec

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

MAX_FUTURE_SKEW_S = 60
HOUR_S = 3_600


@pytest.fixture(scope="module")
def skewed_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar that accepts world times at most a minute ahead."""
    process = start_sidecar(tmp_path_factory.mktemp("skew-data"), "--max-future-skew-s", str(MAX_FUTURE_SKEW_S))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def service(skewed_sidecar: Sidecar) -> Any:
    return stub(skewed_sidecar.unix_target)


@pytest.fixture(scope="module")
def retrieval(service: Any) -> tuple[str, int]:
    """(retrieval id, a memory it returned)."""
    stored = service.Remember(
        memory_service_pb2.RememberRequest(memory=memory("seed memory", vec(1), kind=memory_pb2.MEMORY_KIND_FACT))
    ).result.memory
    response = service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(1), k=5))
    assert stored.id in [m.memory.id for m in response.memories]
    return response.retrieval_id, stored.id


def in_future(seconds: float) -> Timestamp:
    return Timestamp(seconds=int(time.time() + seconds))


def fact_memory(**fields: Any) -> memory_pb2.MemoryInput:
    return memory("user A prefers dark mode", vec(2), kind=memory_pb2.MEMORY_KIND_PREFERENCE, **fields)


def expect_refused(service: Any, call: Callable[[], object], code: grpc.StatusCode, field: str) -> grpc.RpcError:
    """``call`` fails with ``code``; INVALID_ARGUMENT names ``field``; the change log and the count do not move."""
    before = counts(service)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert error.code() == code, (error.code(), error.details())
    assert error.details(), "a refusal without a message"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert field in bad_fields(error), (bad_fields(error), error.details())
    else:
        assert field in error.details()
    assert counts(service) == before, "a refused request wrote something"
    return error


def remember(item: memory_pb2.MemoryInput, service: Any) -> Callable[[], object]:
    return lambda: service.Remember(memory_service_pb2.RememberRequest(memory=item))


def test_fact_attribute_without_entity(service: Any) -> None:
    item = fact_memory(fact=memory_pb2.Fact(attribute="ui_mode", value="dark"))
    error = expect_refused(service, remember(item, service), grpc.StatusCode.INVALID_ARGUMENT, "memory.entity")
    assert "entity" in error.details()


def test_fact_value_without_attribute(service: Any) -> None:
    item = fact_memory(entity="user:a", fact=memory_pb2.Fact(value="dark"))
    expect_refused(service, remember(item, service), grpc.StatusCode.INVALID_ARGUMENT, "memory.fact.attribute")


def test_fact_value_without_attribute_or_entity_names_both(service: Any) -> None:
    item = fact_memory(fact=memory_pb2.Fact(value="dark"))
    error = expect_refused(service, remember(item, service), grpc.StatusCode.INVALID_ARGUMENT, "memory.fact.attribute")
    assert "memory.entity" in bad_fields(error)


def test_world_time_too_far_in_the_future(service: Any) -> None:
    item = fact_memory(
        entity="user:a", fact=memory_pb2.Fact(attribute="ui_mode", value="dark"), valid_from=in_future(HOUR_S)
    )
    error = expect_refused(service, remember(item, service), grpc.StatusCode.INVALID_ARGUMENT, "memory.valid_from")
    assert str(MAX_FUTURE_SKEW_S) in error.details(), "the message states the configured skew"


def test_world_time_within_the_skew_is_accepted(service: Any) -> None:
    item = fact_memory(entity="user:skew", valid_from=in_future(MAX_FUTURE_SKEW_S / 2))
    result = service.Remember(memory_service_pb2.RememberRequest(memory=item)).result
    assert result.outcome == memory_service_pb2.WRITE_OUTCOME_CREATED


def test_future_world_time_in_a_batch_rejects_the_whole_batch(service: Any) -> None:
    items = [memory("fine", vec(3)), memory("too late", vec(4), valid_from=in_future(HOUR_S))]
    expect_refused(
        service,
        lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "memories[1].valid_from",
    )


def test_future_world_time_in_a_supersede(service: Any, retrieval: tuple[str, int]) -> None:
    _, memory_id = retrieval
    expect_refused(
        service,
        lambda: service.Supersede(
            memory_service_pb2.SupersedeRequest(
                old_id=memory_id, new_memory=memory("later", vec(5), valid_from=in_future(HOUR_S))
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "new_memory.valid_from",
    )


@pytest.mark.parametrize("reward", [1.0001, -3.0])
def test_reward_outside_range(service: Any, retrieval: tuple[str, int], reward: float) -> None:
    retrieval_id, _ = retrieval
    expect_refused(
        service,
        lambda: service.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(
                retrieval_id=retrieval_id, outcome=memory_service_pb2.OUTCOME_SUCCESS, reward=reward
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "reward",
    )


def test_unknown_retrieval_id(service: Any, retrieval: tuple[str, int]) -> None:
    _, memory_id = retrieval
    expect_refused(
        service,
        lambda: service.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(
                retrieval_id="no-such-retrieval", outcome=memory_service_pb2.OUTCOME_FAILURE
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        "retrieval_id",
    )
    stored = service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0]
    assert stored.failures == 0.0


def test_as_of_out_of_range_is_refused(service: Any) -> None:
    request = memory_service_pb2.RecallRequest(query_vector=vec(1), as_of=Timestamp(seconds=10**13))
    expect_refused(service, lambda: service.Recall(request), grpc.StatusCode.INVALID_ARGUMENT, "as_of")
