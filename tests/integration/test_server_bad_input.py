"""Bad input gets INVALID_ARGUMENT naming the offending field, and nothing is written."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import bad_fields, counts, memory, pack, status_details, stub, vec, vectors

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

MAX_CONTENT_BYTES = 64
MAX_BATCH_ITEMS = 5
MAX_REASONING_IDS = 1024
"""The documented bound of reasoning_context.memory_ids (memory.proto)."""


@pytest.fixture(scope="module")
def limited_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar with small content and batch limits."""
    process = start_sidecar(
        tmp_path_factory.mktemp("limited-data"),
        "--max-content-bytes",
        str(MAX_CONTENT_BYTES),
        "--max-batch-items",
        str(MAX_BATCH_ITEMS),
    )
    yield process
    process.stop()


@contextmanager
def nothing_written(service: Any) -> Iterator[None]:
    """Asserts the change log and the memory count did not move inside the block."""
    before = counts(service)
    yield
    assert counts(service) == before, "a rejected request wrote something"


def expect_invalid(call: Callable[[], object], field: str) -> grpc.RpcError:
    """Run ``call``; it must fail with INVALID_ARGUMENT whose BadRequest names ``field``."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    fields = bad_fields(error)
    assert field in fields, f"BadRequest names {fields}, not {field!r}; message: {error.details()}"
    assert error.details(), "INVALID_ARGUMENT without a message"
    return error


def remember(service: Any, item: memory_pb2.MemoryInput | None) -> Callable[[], object]:
    request = memory_service_pb2.RememberRequest() if item is None else memory_service_pb2.RememberRequest(memory=item)
    return lambda: service.Remember(request)


def _nan_vector() -> bytes:
    raw = vectors(1)[0]
    raw[3] = math.nan
    return pack(raw)


def _inf_vector(sign: float = 1.0) -> bytes:
    raw = vectors(1)[0]
    raw[5] = sign * math.inf
    return pack(raw)


BAD_MEMORIES = [
    pytest.param(memory("x", pack(vectors(1, 7)[0])), "memory.vector", id="dimension-7"),
    pytest.param(memory("x", pack(vectors(1, 9)[0])), "memory.vector", id="dimension-9"),
    pytest.param(memory("x", _nan_vector()), "memory.vector", id="nan"),
    pytest.param(memory("x", _inf_vector()), "memory.vector", id="inf"),
    pytest.param(memory("x", _inf_vector(-1.0)), "memory.vector", id="minus-inf"),
    pytest.param(memory("x", pack(np.zeros(8))), "memory.vector", id="all-zero"),
    pytest.param(memory("x", vec(1) + b"\x00\x00"), "memory.vector", id="bytes-not-multiple-of-4"),
    pytest.param(memory(), "memory.content", id="neither-content-nor-vector"),
    pytest.param(memory("x", vec(1), kind=99), "memory.kind", id="unknown-kind"),
    pytest.param(memory("x", vec(1), source=77), "memory.source", id="unknown-source"),
    pytest.param(memory("x", vec(1), confidence=1.5), "memory.confidence", id="confidence-1.5"),
    pytest.param(memory("x", vec(1), confidence=-0.1), "memory.confidence", id="confidence-negative"),
    pytest.param(memory("x", vec(1), importance=11), "memory.importance", id="importance-11"),
    pytest.param(
        memory("x", vec(1), fact=memory_pb2.Fact(attribute="color", value="blue")),
        "memory.entity",
        id="fact-without-entity",
    ),
    pytest.param(memory("x", vec(1), namespace="no spaces allowed"), "memory.namespace", id="bad-namespace"),
    pytest.param(memory("text only, no embedder"), "memory.vector", id="text-without-embedder"),
    pytest.param(
        memory("x", vec(1), reasoning_context=memory_pb2.ReasoningContext(memory_ids=range(1, MAX_REASONING_IDS + 2))),
        "memory.reasoning_context.memory_ids",
        id="reasoning-ids-over-limit",
    ),
]


@pytest.mark.parametrize(("item", "field"), BAD_MEMORIES)
def test_remember_rejects_bad_memory(shared_sidecar: Sidecar, item: memory_pb2.MemoryInput, field: str) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(remember(service, item), field)


def test_remember_rejects_bad_memory_over_tcp(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.tcp_target)
    with nothing_written(service):
        expect_invalid(remember(service, memory("x", pack(vectors(1, 4)[0]))), "memory.vector")


def test_remember_without_memory(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(remember(service, None), "memory")


def test_good_memory_is_accepted(shared_sidecar: Sidecar) -> None:
    """The control: the same sidecar accepts a valid memory, and it moves the counters."""
    service = stub(shared_sidecar.unix_target)
    before_sequence, before_total = counts(service)
    response = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory("ok", vec(1), namespace="bad-input-control", confidence=1.0, importance=10)
        )
    )
    assert response.result.memory.id > 0
    assert counts(service) == (before_sequence + 1, before_total + 1)


def test_reasoning_context_at_its_limit_is_accepted(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    context = memory_pb2.ReasoningContext(memory_ids=range(1, MAX_REASONING_IDS + 1))
    response = service.Remember(
        memory_service_pb2.RememberRequest(memory=memory("at the limit", vec(2), reasoning_context=context))
    )
    assert len(response.result.memory.reasoning_context.memory_ids) == MAX_REASONING_IDS


def test_content_over_limit(limited_sidecar: Sidecar) -> None:
    service = stub(limited_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(remember(service, memory("x" * (MAX_CONTENT_BYTES + 1), vec(1))), "memory.content")
        # The limit is in UTF-8 bytes, not characters: 22 three-byte characters are 66 bytes.
        expect_invalid(remember(service, memory("中" * 22, vec(1))), "memory.content")
    # Exactly at the limit is fine.
    service.Remember(memory_service_pb2.RememberRequest(memory=memory("x" * MAX_CONTENT_BYTES, vec(1))))


def test_batch_with_one_bad_item_is_rejected_whole(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    items = [memory(f"good {i}", vec(i), namespace="bad-batch") for i in range(5)]
    items[2] = memory("bad", pack(vectors(1, 3)[0]), namespace="bad-batch")
    with nothing_written(service):
        expect_invalid(
            lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)), "memories[2].vector"
        )
    response = service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vec(0), k=100, filter=memory_service_pb2.RecallFilter(namespace="bad-batch")
        )
    )
    assert list(response.memories) == [], "a good item of a rejected batch was stored"


def test_batch_names_every_bad_item(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    items = [memory(f"good {i}", vec(i)) for i in range(6)]
    items[1] = memory("", b"")
    items[4] = memory("x", vec(4), kind=42)
    with nothing_written(service):
        error = expect_invalid(
            lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)),
            "memories[1].content",
        )
    assert "memories[4].kind" in bad_fields(error)


def test_empty_batch(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest()), "memories")


def test_batch_over_max_batch_items(limited_sidecar: Sidecar) -> None:
    service = stub(limited_sidecar.tcp_target)
    items = [memory(f"m{i}", vec(i)) for i in range(MAX_BATCH_ITEMS + 1)]
    with nothing_written(service):
        expect_invalid(
            lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)), "memories"
        )
    # At the limit it is accepted.
    response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items[:MAX_BATCH_ITEMS]))
    assert len(response.results) == MAX_BATCH_ITEMS


def _grouped(items: list[memory_service_pb2.RememberStreamRequest], per_message: int) -> list[Any]:
    """The same stream with ``per_message`` items per message (the ``items`` form); 1 keeps one per message."""
    if per_message == 1:
        return items
    return [
        memory_service_pb2.RememberStreamRequest(
            items=[
                memory_service_pb2.RememberStreamItem(memory=m.memory, request_id=m.request_id)
                for m in items[start : start + per_message]
            ]
        )
        for start in range(0, len(items), per_message)
    ]


def _stream_with_bad_item(
    service: Any, namespace: str, total: int, bad_index: int, per_message: int
) -> tuple[grpc.RpcError, list[bytes]]:
    vs = [vec(1000 + i) for i in range(total)]
    requests = []
    for i in range(total):
        item = memory(f"stream item {i}", vs[i], namespace=namespace)
        if i == bad_index:
            item = memory(f"stream item {i}", pack(vectors(1, 5)[0]), namespace=namespace)
        requests.append(memory_service_pb2.RememberStreamRequest(memory=item))
    stream = _grouped(requests, per_message)
    error = expect_invalid(lambda: service.RememberStream(iter(stream)), f"[{bad_index}].memory.vector")
    return error, vs


@pytest.mark.parametrize(
    ("total", "bad_index", "per_message"),
    [
        pytest.param(5, 2, 1, id="third-item"),
        pytest.param(700, 600, 1, id="after-a-committed-chunk"),
        pytest.param(5, 2, 4, id="third-item-grouped"),
        pytest.param(700, 600, 64, id="after-a-committed-chunk-grouped"),
    ],
)
def test_stream_with_bad_item(shared_sidecar: Sidecar, total: int, bad_index: int, per_message: int) -> None:
    service = stub(shared_sidecar.unix_target)
    namespace = f"bad-stream-{bad_index}-{per_message}"
    before_sequence, before_total = counts(service)
    error, vs = _stream_with_bad_item(service, namespace, total, bad_index, per_message)
    _, metadata = status_details(error)
    assert "committed_count" in metadata, f"ErrorInfo metadata {metadata} lacks committed_count"
    assert int(metadata["failed_index"]) == bad_index  # items are counted, not messages
    committed = int(metadata["committed_count"])
    assert 0 <= committed <= bad_index
    # Exactly the items the error says were committed are stored: the first `committed` ones.
    assert counts(service) == (before_sequence + committed, before_total + committed)
    response = service.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vs[0], k=1000, filter=memory_service_pb2.RecallFilter(namespace=namespace)
        )
    )
    stored = sorted(m.memory.content for m in response.memories)
    assert stored == sorted(f"stream item {i}" for i in range(committed))


def test_stream_without_memory(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    requests = [
        memory_service_pb2.RememberStreamRequest(memory=memory("a", vec(1))),
        memory_service_pb2.RememberStreamRequest(),
    ]
    before = counts(service)
    error = expect_invalid(lambda: service.RememberStream(iter(requests)), "[1].memory")
    committed = int(status_details(error)[1]["committed_count"])
    sequence, total = counts(service)
    assert (sequence - before[0], total - before[1]) == (committed, committed)


def test_stream_mixing_single_and_grouped_messages_stores_every_item_in_order(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    namespace = "stream-mixed"
    contents = [f"mixed {i}" for i in range(9)]
    single = [
        memory_service_pb2.RememberStreamRequest(memory=memory(c, vec(3000 + i), namespace=namespace))
        for i, c in enumerate(contents)
    ]
    stream = [single[0], *_grouped(single[1:5], 4), single[5], *_grouped(single[6:], 2)]
    stream[1].turn = 7  # a message's turn holds for each of its items
    before_sequence, before_total = counts(service)
    response = service.RememberStream(iter(stream))
    assert response.created_count == len(contents)
    assert counts(service) == (before_sequence + len(contents), before_total + len(contents))
    got = service.Get(memory_service_pb2.GetRequest(ids=response.ids))
    assert [m.content for m in got.memories] == contents
    assert [m.turn for m in got.memories][:6] == [0, 7, 7, 7, 7, 0]


@pytest.mark.parametrize(
    ("second", "field"),
    [
        pytest.param(
            memory_service_pb2.RememberStreamRequest(
                memory=memory("both", vec(5)), items=[memory_service_pb2.RememberStreamItem(memory=memory("b", vec(6)))]
            ),
            "[3].items",
            id="memory-and-items",
        ),
        pytest.param(
            memory_service_pb2.RememberStreamRequest(
                request_id="r", items=[memory_service_pb2.RememberStreamItem(memory=memory("b", vec(6)))]
            ),
            "[3].items",
            id="request-id-and-items",
        ),
        pytest.param(
            memory_service_pb2.RememberStreamRequest(
                items=[
                    memory_service_pb2.RememberStreamItem(memory=memory("ok", vec(7))),
                    memory_service_pb2.RememberStreamItem(request_id="no-memory"),
                ]
            ),
            "[4].memory",
            id="item-without-memory",
        ),
        pytest.param(
            memory_service_pb2.RememberStreamRequest(
                items=[memory_service_pb2.RememberStreamItem(memory=memory("ok", vec(7)), request_id="r" * 129)]
            ),
            "[3].request_id",
            id="item-request-id-too-long",
        ),
    ],
)
def test_stream_message_with_bad_items(
    shared_sidecar: Sidecar, second: memory_service_pb2.RememberStreamRequest, field: str
) -> None:
    service = stub(shared_sidecar.unix_target)
    first = memory_service_pb2.RememberStreamRequest(
        items=[memory_service_pb2.RememberStreamItem(memory=memory(f"g{i}", vec(10 + i))) for i in range(3)]
    )
    before = counts(service)
    error = expect_invalid(lambda: service.RememberStream(iter([first, second])), field)
    metadata = status_details(error)[1]
    assert metadata["failed_index"] == field[1 : field.index("]")]
    committed = int(metadata["committed_count"])
    sequence, total = counts(service)
    assert (sequence - before[0], total - before[1]) == (committed, committed)


def test_stream_message_over_max_batch_items(limited_sidecar: Sidecar) -> None:
    service = stub(limited_sidecar.unix_target)
    items = [memory_service_pb2.RememberStreamItem(memory=memory(f"i{j}", vec(j))) for j in range(MAX_BATCH_ITEMS + 1)]
    with nothing_written(service):
        expect_invalid(
            lambda: service.RememberStream(iter([memory_service_pb2.RememberStreamRequest(items=items)])), "[0].items"
        )


RECALL_CASES = [
    pytest.param(memory_service_pb2.RecallRequest(query_vector=vec(1), k=1001), "k", id="k-over-max"),
    pytest.param(memory_service_pb2.RecallRequest(k=5), "query", id="neither-query-nor-vector"),
    pytest.param(memory_service_pb2.RecallRequest(query_vector=pack(vectors(1, 6)[0])), "query_vector", id="dim"),
    pytest.param(memory_service_pb2.RecallRequest(query_vector=_nan_vector()), "query_vector", id="nan"),
    pytest.param(memory_service_pb2.RecallRequest(query_vector=pack(np.zeros(8))), "query_vector", id="zero"),
    pytest.param(
        memory_service_pb2.RecallRequest(query_vector=vec(1), filter=memory_service_pb2.RecallFilter(kinds=[77])),
        "filter.kinds[0]",
        id="unknown-kind-filter",
    ),
    pytest.param(memory_service_pb2.RecallRequest(query_vector=vec(1), mode=9), "mode", id="unknown-mode"),
    pytest.param(memory_service_pb2.RecallRequest(query="text, no embedder"), "query_vector", id="text-no-embedder"),
]


@pytest.mark.parametrize(("request_", "field"), RECALL_CASES)
def test_recall_rejects(shared_sidecar: Sidecar, request_: memory_service_pb2.RecallRequest, field: str) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(lambda: service.Recall(request_), field)


@pytest.mark.parametrize(
    "ids",
    [pytest.param([], id="no-ids"), pytest.param([0], id="id-0"), pytest.param([1, 0, 2], id="id-0-among-others")],
)
def test_get_rejects(shared_sidecar: Sidecar, ids: list[int]) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(lambda: service.Get(memory_service_pb2.GetRequest(ids=ids)), "ids")


@pytest.mark.parametrize("ids", [pytest.param([], id="no-ids"), pytest.param([0], id="id-0")])
def test_forget_rejects(shared_sidecar: Sidecar, ids: list[int]) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(lambda: service.Forget(memory_service_pb2.ForgetRequest(ids=ids)), "ids")


def test_get_over_max_k(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    expect_invalid(lambda: service.Get(memory_service_pb2.GetRequest(ids=list(range(1, 1002)))), "ids")


@pytest.mark.parametrize(
    "types",
    [pytest.param([99], id="unknown"), pytest.param([events_pb2.CHANGE_EVENT_TYPE_CREATED, 99], id="second-unknown")],
)
def test_watch_rejects_unknown_event_type(shared_sidecar: Sidecar, types: list[int]) -> None:
    service = stub(shared_sidecar.unix_target)
    position = types.index(99)

    def first_event() -> object:
        call = service.Watch(memory_service_pb2.WatchRequest(after_sequence=0, types=types), timeout=10)
        try:
            return next(iter(call))
        finally:
            call.cancel()

    with nothing_written(service):
        expect_invalid(first_event, f"types[{position}]")


def test_oversized_request_id(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(
            lambda: service.Remember(
                memory_service_pb2.RememberRequest(memory=memory("x", vec(1)), request_id="r" * 129)
            ),
            "request_id",
        )


def test_negative_turn(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    with nothing_written(service):
        expect_invalid(
            lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("x", vec(1)), turn=-1)),
            "turn",
        )


def test_stream_resend_after_failure_stores_each_item_once(shared_sidecar: Sidecar) -> None:
    """The contract's recovery recipe: give each item a request_id, resend the whole stream after a failure."""
    service = stub(shared_sidecar.unix_target)
    namespace = "stream-resend"
    total = 6
    good = [memory(f"resend {i}", vec(2000 + i), namespace=namespace) for i in range(total)]
    first = [memory_service_pb2.RememberStreamRequest(memory=m, request_id=f"resend-{i}") for i, m in enumerate(good)]
    first[4] = memory_service_pb2.RememberStreamRequest(
        memory=memory("resend 4", pack(vectors(1, 3)[0]), namespace=namespace), request_id="resend-4"
    )
    before_sequence, before_total = counts(service)
    error = expect_invalid(lambda: service.RememberStream(iter(first)), "[4].memory.vector")
    committed = int(status_details(error)[1]["committed_count"])
    assert counts(service) == (before_sequence + committed, before_total + committed)
    retry = [memory_service_pb2.RememberStreamRequest(memory=m, request_id=f"resend-{i}") for i, m in enumerate(good)]
    response = service.RememberStream(iter(retry))
    assert response.replayed_count == committed
    assert response.created_count == total - committed
    assert len(set(response.ids)) == total
    assert counts(service) == (before_sequence + total, before_total + total)
    # A second full resend writes nothing and answers with the same ids.
    again = service.RememberStream(iter(retry))
    assert list(again.ids) == list(response.ids)
    assert again.replayed_count == total
    assert counts(service) == (before_sequence + total, before_total + total)


def test_sidecar_survives_bad_input(shared_sidecar: Sidecar) -> None:
    """After all the bad requests above, the process is still up and serving."""
    assert shared_sidecar.process.poll() is None, shared_sidecar.log()
    assert "Traceback" not in shared_sidecar.log(), shared_sidecar.log()
    service = stub(shared_sidecar.tcp_target)
    counts(service)
