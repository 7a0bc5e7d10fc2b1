"""Text in, vectors out: a sidecar with the bundled local embedder remembers and recalls by text alone."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import bad_fields, counts, memory, pack, stub, unpack

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

TEXTS = [
    "The user's favourite programming language is Rust.",
    "The deployment server runs in the Frankfurt data centre.",
    "Alice is allergic to peanuts.",
    "The weekly team meeting is on Tuesday at 10am.",
    "The quarterly sales report is due at the end of March.",
]
PARAPHRASES = [
    ("Which coding language does the user like best?", 0),
    ("Where is the production machine hosted?", 1),
    ("What food can Alice not eat?", 2),
    ("When does the team get together every week?", 3),
    ("When must the revenue summary for the quarter be handed in?", 4),
]


@pytest.fixture(scope="module")
def text_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path_factory.mktemp("text-data"), embedder="local")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def remembered(text_sidecar: Sidecar) -> list[int]:
    service = stub(text_sidecar.unix_target)
    ids = []
    for text in TEXTS:
        response = service.Remember(memory_service_pb2.RememberRequest(memory=memory(text, namespace="text")))
        ids.append(response.result.memory.id)
    return ids


def test_sidecar_reports_its_embedder(text_sidecar: Sidecar) -> None:
    stats = stub(text_sidecar.unix_target).GetStats(memory_service_pb2.GetStatsRequest())
    assert stats.dimension == 384
    assert stats.embedder not in ("", "none")


@pytest.mark.parametrize(("query", "expected"), PARAPHRASES, ids=[str(i) for _, i in PARAPHRASES])
def test_paraphrased_query_finds_the_right_memory(
    text_sidecar: Sidecar, remembered: list[int], query: str, expected: int
) -> None:
    service = stub(text_sidecar.tcp_target)
    response = service.Recall(
        memory_service_pb2.RecallRequest(query=query, k=5, filter=memory_service_pb2.RecallFilter(namespace="text"))
    )
    got = [m.memory.content for m in response.memories]
    assert len(got) == 5
    assert got[0] == TEXTS[expected], got
    assert response.memories[0].similarity > response.memories[1].similarity


def test_stored_vector_is_the_embedding_of_the_content(text_sidecar: Sidecar, remembered: list[int]) -> None:
    service = stub(text_sidecar.unix_target)
    stored = service.Get(memory_service_pb2.GetRequest(ids=remembered, include_vectors=True)).memories
    matrix = np.stack([unpack(m.vector) for m in stored])
    assert matrix.shape == (len(TEXTS), 384)
    assert np.isfinite(matrix).all()
    # Recalling by the exact text finds it with similarity ~1.
    for record in stored:
        response = service.Recall(
            memory_service_pb2.RecallRequest(
                query=record.content, k=1, filter=memory_service_pb2.RecallFilter(namespace="text")
            )
        )
        assert response.memories[0].memory.id == record.id
        assert response.memories[0].similarity == pytest.approx(1.0, abs=1e-3)


def test_client_vector_wins_over_text(text_sidecar: Sidecar) -> None:
    service = stub(text_sidecar.unix_target)
    own = np.zeros(384, dtype=np.float32)
    own[7] = 1.0
    written = service.Remember(
        memory_service_pb2.RememberRequest(memory=memory("text that would embed elsewhere", pack(own), namespace="own"))
    ).result.memory
    got = service.Get(memory_service_pb2.GetRequest(ids=[written.id], include_vectors=True)).memories[0]
    assert got.vector == pack(own)


def test_vector_of_the_wrong_dimension_is_refused(text_sidecar: Sidecar) -> None:
    service = stub(text_sidecar.unix_target)
    before = counts(service)
    with pytest.raises(grpc.RpcError) as caught:
        service.Remember(memory_service_pb2.RememberRequest(memory=memory("x", pack(np.ones(8)))))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory.vector" in bad_fields(caught.value)
    assert counts(service) == before
