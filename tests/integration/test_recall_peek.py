"""RecallRequest.peek over the wire: a look that counts no access and records no retrieval."""

from __future__ import annotations

import pytest
from conftest import Sidecar
from helpers import memory, stub, vec

from memevo.client import InvalidArgumentError, MemoryClient
from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc

pytestmark = pytest.mark.integration


def _accesses(service: memory_service_pb2_grpc.MemoryServiceStub, ids: list[int]) -> list[int]:
    found = {m.id: m.access_count for m in service.Get(memory_service_pb2.GetRequest(ids=ids)).memories}
    return [found[i] for i in ids]


def _recall(peek: bool) -> memory_service_pb2.RecallRequest:
    request = memory_service_pb2.RecallRequest(query_vector=vec(700), k=3, peek=peek)
    request.filter.namespace = "peek"
    return request


def test_a_peek_counts_no_access_and_records_no_retrieval_where_a_recall_does(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ids = [
        service.Remember(
            memory_service_pb2.RememberRequest(memory=memory(f"peek probe {i}", vec(700 + i), namespace="peek"))
        ).result.memory.id
        for i in range(3)
    ]
    looked = service.Recall(_recall(peek=True))
    assert sorted(m.memory.id for m in looked.memories) == sorted(ids)
    assert looked.retrieval_id == ""
    assert looked.arm == ""
    assert _accesses(service, ids) == [0, 0, 0]

    used = service.Recall(_recall(peek=False))
    assert [m.memory.id for m in used.memories] == [m.memory.id for m in looked.memories], "a peek ranks as a recall"
    assert used.retrieval_id
    assert _accesses(service, ids) == [1, 1, 1]


def test_the_python_client_sends_peek_and_diversity(shared_sidecar: Sidecar) -> None:
    axis = [1.0] + [0.0] * 7
    with MemoryClient(shared_sidecar.unix_target) as client:
        written = client.remember("client peek probe", vector=axis, namespace="peek-client").memory.id
        looked = client.recall(vector=axis, namespace="peek-client", peek=True, diversity=0.5)
        assert [m.memory.id for m in looked] == [written]
        assert looked.retrieval_id == ""
        assert client.get(written)[0].access_count == 0
        used = client.recall(vector=axis, namespace="peek-client")
        assert used.retrieval_id
        assert client.get(written)[0].access_count == 1
        # The diversity reaches the sidecar: out of range, it is refused by name.
        with pytest.raises(InvalidArgumentError, match="diversity"):
            client.recall(vector=axis, namespace="peek-client", diversity=1.5)
