"""Request ids against a live sidecar: scoped to caller and namespace, checked against the payload, whole replays."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from helpers import counts, memory, status_details, stub, vec

from memevo.sidecar.store.rocks import CF_REQUESTS, RocksStore, u64_key
from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

pytestmark = pytest.mark.integration

ADMIN, TEAM_A, TEAM_B = "admin-t0ken", "ta-t0ken", "tb-t0ken"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(f"{ADMIN} *\n{TEAM_A} team-a\n{TEAM_B} team-b\n")
    tokens.chmod(0o600)
    process = start_sidecar(tmp_path_factory.mktemp("idempotency-data"), "--tokens-file", str(tokens))
    yield process
    process.stop()


def _remember(
    service: memory_service_pb2_grpc.MemoryServiceStub,
    content: str,
    seed: int,
    namespace: str,
    request_id: str,
    **fields: object,
) -> memory_service_pb2.RememberResponse:
    return service.Remember(  # type: ignore[no-any-return]
        memory_service_pb2.RememberRequest(
            memory=memory(content, vec(seed), namespace=namespace, **fields), request_id=request_id
        )
    )


def _reused(call: Callable[[], object], field: str = "request_id") -> dict[str, str]:
    """Assert the call is refused as a reused request id, naming ``field``; returns the ErrorInfo metadata."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS, caught.value.details()
    assert field in caught.value.details()
    fields, metadata = status_details(caught.value)
    assert fields == [field]
    assert metadata["field"] == field
    return metadata


def test_a_request_id_never_replays_another_callers_result(tenants: Sidecar) -> None:
    a, b = stub(tenants.unix_target, TEAM_A), stub(tenants.unix_target, TEAM_B)
    secret = _remember(a, "team a's secret", 1, "team-a", "turn-1-x")
    mine = _remember(b, "team b's note", 2, "team-b", "turn-1-x")
    assert not mine.replayed
    assert mine.result.memory.content == "team b's note"
    assert mine.result.memory.namespace == "team-b"
    assert mine.result.memory.id != secret.result.memory.id

    batch = memory_service_pb2.RememberBatchRequest(
        memories=[memory("a batch", vec(3), namespace="team-a")], request_id="batch-1"
    )
    a.RememberBatch(batch)
    other = b.RememberBatch(
        memory_service_pb2.RememberBatchRequest(
            memories=[memory("b batch", vec(4), namespace="team-b")], request_id="batch-1"
        )
    )
    assert not other.replayed
    assert [r.memory.content for r in other.results] == ["b batch"]

    streamed = [
        memory_service_pb2.RememberStreamRequest(
            memory=memory("team b's note", vec(2), namespace="team-b"), request_id="turn-1-x"
        ),
        memory_service_pb2.RememberStreamRequest(
            memory=memory("b stream", vec(5), namespace="team-b"), request_id="stream-1"
        ),
    ]
    answer = b.RememberStream(iter(streamed))
    assert (answer.replayed_count, answer.created_count) == (1, 1)  # its own Remember above, then a new one
    assert answer.ids[0] == mine.result.memory.id

    forgot_a = a.Forget(memory_service_pb2.ForgetRequest(ids=[secret.result.memory.id], request_id="forget-1"))
    assert list(forgot_a.forgotten_ids) == [secret.result.memory.id]
    forgot_b = b.Forget(memory_service_pb2.ForgetRequest(ids=[mine.result.memory.id], request_id="forget-1"))
    assert list(forgot_b.forgotten_ids) == [mine.result.memory.id]

    # One caller, two namespaces: the same id names two different writes.
    admin = stub(tenants.unix_target, ADMIN)
    first = _remember(admin, "in a", 6, "team-a", "per-namespace")
    second = _remember(admin, "in b", 7, "team-b", "per-namespace")
    assert not second.replayed
    assert (second.result.memory.namespace, second.result.memory.content) == ("team-b", "in b")
    assert first.result.memory.id != second.result.memory.id


def test_a_reused_request_id_with_another_payload_is_refused_and_writes_nothing(tenants: Sidecar) -> None:
    a, admin = stub(tenants.unix_target, TEAM_A), stub(tenants.unix_target, ADMIN)

    def refused_without_writing(call: Callable[[], object], field: str = "request_id") -> dict[str, str]:
        before = counts(admin)
        metadata = _reused(call, field)
        assert counts(admin) == before
        return metadata

    # The pattern the README used to suggest: one id per turn and attribute, and the value changed.
    first = _remember(a, "user prefers tea", 10, "team-a", "turn-3-drink")
    refused_without_writing(lambda: _remember(a, "user prefers coffee", 11, "team-a", "turn-3-drink"))
    same = _remember(a, "user prefers tea", 10, "team-a", "turn-3-drink")
    assert same.replayed
    assert same.result.memory.id == first.result.memory.id

    items = [memory(f"batch item {i}", vec(20 + i), namespace="team-a") for i in range(2)]
    a.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items, request_id="batch-2"))
    refused_without_writing(
        lambda: a.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items[:1], request_id="batch-2"))
    )
    # A retry made a turn later is still the same call.
    later = a.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items, request_id="batch-2", turn=4))
    assert later.replayed

    stream = [
        memory_service_pb2.RememberStreamRequest(memory=memory("fresh", vec(30), namespace="team-a"), request_id="s-1"),
        memory_service_pb2.RememberStreamRequest(
            memory=memory("user prefers coffee", vec(31), namespace="team-a"), request_id="turn-3-drink"
        ),
    ]
    # Both items travel in one atomic chunk: neither is stored, and the error says where to resend from.
    metadata = refused_without_writing(lambda: a.RememberStream(iter(stream)), "[1].request_id")
    assert (metadata["committed_count"], metadata["failed_index"]) == ("0", "0")

    doomed = _remember(a, "to forget", 40, "team-a", "")
    a.Forget(memory_service_pb2.ForgetRequest(ids=[doomed.result.memory.id], request_id="forget-2"))
    refused_without_writing(
        lambda: a.Forget(memory_service_pb2.ForgetRequest(ids=[first.result.memory.id], request_id="forget-2"))
    )
    kept = a.Get(memory_service_pb2.GetRequest(ids=[first.result.memory.id])).memories
    assert kept[0].state == memory_pb2.MEMORY_STATE_ACTIVE


def test_a_replay_returns_the_first_calls_whole_result(tenants: Sidecar) -> None:
    a = stub(tenants.unix_target, TEAM_A)

    def deploy_target(value: str, seed: int, request_id: str) -> memory_service_pb2.RememberResponse:
        fact = memory_pb2.Fact(attribute="target", value=value)
        return _remember(a, f"the deploy target is {value}", seed, "team-a", request_id, entity="deploy", fact=fact)

    old = deploy_target("eu-1", 50, "")
    new = deploy_target("us-2", 51, "move")
    assert new.result.outcome == memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
    assert list(new.result.affected_ids) == [old.result.memory.id]
    again = deploy_target("us-2", 51, "move")
    assert again.replayed
    assert again.result.outcome == memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
    assert list(again.result.affected_ids) == [old.result.memory.id]
    for response in (new, again):
        response.result.memory.ClearField("scores")  # derived from the clock: as of each answer
    assert again.result == new.result

    # A memory forgotten since is answered by id and EVICTED state, never with its text.
    gone = _remember(a, "a private detail", 52, "team-a", "private")
    a.Forget(memory_service_pb2.ForgetRequest(ids=[gone.result.memory.id]))
    replay = _remember(a, "a private detail", 52, "team-a", "private")
    assert replay.replayed
    assert replay.result.memory.id == gone.result.memory.id
    assert replay.result.memory.state == memory_pb2.MEMORY_STATE_EVICTED
    assert replay.result.memory.content == ""


def test_request_records_of_the_old_format_are_dropped_not_replayed(data_dir: Path) -> None:
    first = start_sidecar(data_dir)
    service = stub(first.unix_target)
    stored = service.Remember(memory_service_pb2.RememberRequest(memory=memory("someone's memory", vec(60))))
    assert first.stop() == 0
    # Before scoping, a record was keyed by rpc and request id and held the packed ids.
    store = RocksStore(data_dir, dimension=8, embedder_identity="none")
    store.put_unsynced(CF_REQUESTS, b"remember\0old-id", u64_key(stored.result.memory.id))
    store.close()
    second = start_sidecar(data_dir)
    try:
        answer = stub(second.unix_target).Remember(
            memory_service_pb2.RememberRequest(memory=memory("my own memory", vec(61)), request_id="old-id")
        )
        assert not answer.replayed
        assert answer.result.memory.content == "my own memory"
    finally:
        second.stop()
