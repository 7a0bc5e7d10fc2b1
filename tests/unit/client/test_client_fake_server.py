"""The sync and asyncio clients against an in-process fake MemoryService: metadata, deadlines, errors, streams.

The fake lets these tests force what a real sidecar does only by accident
(a stream cut with UNAVAILABLE, a slow answer), so resume and deadline logic
is tested deterministically. The real sidecar is tested in tests/integration.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from memevo.client import (
    AsyncMemoryClient,
    ChangeEventType,
    DeadlineExceededError,
    InvalidArgumentError,
    MemevoError,
    MemoryClient,
    MemoryInput,
    NotFoundError,
    UnavailableError,
    UnimplementedError,
)
from memevo.v1 import events_pb2, memory_pb2
from memevo.v1 import memory_service_pb2 as pb
from memevo.v1 import memory_service_pb2_grpc as pb_grpc


class FakeService(pb_grpc.MemoryServiceServicer):
    """Answers a few RPCs from memory and records what it was sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], float | None]] = []
        self.watch_requests: list[pb.WatchRequest] = []
        self.watch_cut_after = 2
        """Events each Watch connection sends before it is cut with UNAVAILABLE."""
        self.watch_cuts = 0
        """How many Watch connections are cut before one stays open."""
        self.watch_cut_code: grpc.StatusCode | None = grpc.StatusCode.UNAVAILABLE
        """How a cut ends: with this status, or cleanly (as a graceful shutdown does) when None."""
        self.last_sequence = 0
        self.stream_requests: list[pb.RememberStreamRequest] = []
        self.next_id = 1
        self.lock = threading.Lock()

    def _record(self, name: str, context: grpc.ServicerContext) -> None:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        remaining = context.time_remaining()
        self.calls.append((name, metadata, None if remaining is None or remaining > 1e9 else remaining))

    def Remember(self, request: pb.RememberRequest, context: grpc.ServicerContext) -> pb.RememberResponse:  # noqa: N802
        self._record("Remember", context)
        if request.memory.content == "slow":
            time.sleep(1.0)
        if request.memory.content == "bad":
            status = status_pb2.Status(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message="content is bad")
            bad = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field="memory.content", description="is bad")
                ]
            )
            info = error_details_pb2.ErrorInfo(reason="BAD_CONTENT", domain="test", metadata={"n": "1"})
            for detail in (bad, info):
                packed = any_pb2.Any()
                packed.Pack(detail)
                status.details.append(packed)
            context.abort_with_status(rpc_status.to_status(status))
        with self.lock:
            memory_id, self.next_id = self.next_id, self.next_id + 1
        memory = memory_pb2.Memory(id=memory_id, content=request.memory.content, vector=request.memory.vector)
        return pb.RememberResponse(
            result=pb.WriteResult(memory=memory, outcome=pb.WRITE_OUTCOME_CREATED), replayed=bool(request.request_id)
        )

    def RememberStream(  # noqa: N802
        self, request_iterator: Iterator[pb.RememberStreamRequest], context: grpc.ServicerContext
    ) -> pb.RememberStreamResponse:
        self._record("RememberStream", context)
        ids = []
        for request in request_iterator:
            self.stream_requests.append(request)
            for _ in request.items or (request,):
                ids.append(len(ids) + 1)
        return pb.RememberStreamResponse(ids=ids, created_count=len(ids))

    def Get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> pb.GetResponse:  # noqa: N802
        self._record("Get", context)
        return pb.GetResponse(missing_ids=list(request.ids))

    def GetStats(self, request: pb.GetStatsRequest, context: grpc.ServicerContext) -> pb.GetStatsResponse:  # noqa: N802
        self._record("GetStats", context)
        return pb.GetStatsResponse(last_sequence=self.last_sequence, dimension=8)

    def Watch(self, request: pb.WatchRequest, context: grpc.ServicerContext) -> Iterator[pb.WatchResponse]:  # noqa: N802
        self._record("Watch", context)
        self.watch_requests.append(request)
        sequence = request.after_sequence if request.HasField("after_sequence") else self.last_sequence
        cut = len(self.watch_requests) <= self.watch_cuts
        for _ in range(self.watch_cut_after if cut else 3):
            sequence += 1
            yield pb.WatchResponse(
                event=events_pb2.ChangeEvent(sequence=sequence, type=events_pb2.CHANGE_EVENT_TYPE_CREATED)
            )
        if cut:
            if self.watch_cut_code is None:
                return
            context.abort(self.watch_cut_code, "sidecar restarting")
        # Stay open like a live Watch until the client goes away.
        while context.is_active():
            time.sleep(0.01)


@pytest.fixture
def fake() -> Iterator[tuple[FakeService, str]]:
    service = FakeService()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_MemoryServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield service, f"127.0.0.1:{port}"
    server.stop(grace=None)


# --- sync -------------------------------------------------------------------------------------------


def test_token_is_sent_as_bearer_metadata(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    with MemoryClient(target, token="s3cret") as client:
        client.remember("x", vector=[1.0, 0.0])
    with MemoryClient(target) as client:
        client.stats()
    assert service.calls[0][1]["authorization"] == "Bearer s3cret"
    assert "authorization" not in service.calls[1][1]


def test_every_unary_call_has_the_default_deadline_unless_overridden(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    with MemoryClient(target, timeout_s=4.0) as client:
        client.stats()
        client.stats(timeout_s=1.5)
        client.get([1, 2])
    (_, _, default), (_, _, override), (_, _, get) = service.calls
    assert default is not None
    assert 3.0 < default < 4.1
    assert override is not None
    assert 0.5 < override < 1.6
    assert get is not None
    assert 3.0 < get < 4.1


def test_watch_has_no_deadline_unless_given(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    with MemoryClient(target, timeout_s=4.0) as client, client.watch(0) as events:
        assert next(events).sequence == 1
    assert service.calls[-1][0] == "Watch"
    assert service.calls[-1][2] is None


def test_deadline_exceeded_is_typed_and_retryable(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    with MemoryClient(target) as client, pytest.raises(DeadlineExceededError) as info:
        client.remember("slow", timeout_s=0.2)
    assert info.value.retryable
    assert info.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_rich_error_travels_end_to_end(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    with MemoryClient(target) as client, pytest.raises(InvalidArgumentError) as info:
        client.remember("bad")
    err = info.value
    assert err.field_violations == [("memory.content", "is bad")]
    assert err.reason == "BAD_CONTENT"
    assert err.metadata == {"n": "1"}
    assert err.details == "content is bad"
    assert not err.retryable
    assert isinstance(err.__cause__, grpc.RpcError)


def test_unimplemented_rpc_is_typed(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    with MemoryClient(target) as client, pytest.raises(UnimplementedError) as info:
        client.govern()
    assert info.value.retryable is False


def test_get_one_raises_not_found_for_a_missing_id(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    with MemoryClient(target) as client:
        assert client.get([5]) == []
        with pytest.raises(NotFoundError):
            client.get_one(5)


def test_unreachable_sidecar_is_unavailable() -> None:
    with MemoryClient("unix:///nonexistent/memevo.sock", timeout_s=2.0) as client:
        with pytest.raises(UnavailableError) as info:
            client.stats()
        assert info.value.retryable


def test_remember_stream_sends_per_item_request_ids(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    items: list[MemoryInput | tuple[MemoryInput, str]] = [
        MemoryInput(content="a", vector=[1.0]),
        (MemoryInput(content="b", vector=[2.0]), "req-b"),
    ]
    with MemoryClient(target) as client:
        result = client.remember_stream(iter(items), turn=7)
    assert result.ids == [1, 2]
    assert result.created_count == 2
    [message] = service.stream_requests  # both in one message
    assert [item.request_id for item in message.items] == ["", "req-b"]
    assert [item.memory.content for item in message.items] == ["a", "b"]
    assert message.turn == 7


def test_remember_stream_reraises_what_the_iterator_raised(fake: tuple[FakeService, str]) -> None:
    _, target = fake

    def items() -> Iterator[MemoryInput]:
        yield MemoryInput(content="a", vector=[1.0])
        raise KeyError("caller's own bug")

    with MemoryClient(target) as client, pytest.raises(KeyError, match="caller's own bug"):
        client.remember_stream(items())


def test_watch_without_resume_raises_unavailable_when_cut(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 1
    seen: list[int] = []
    with MemoryClient(target) as client:
        events = client.watch(0)
        seen += [next(events).sequence, next(events).sequence]
        with pytest.raises(UnavailableError):
            next(events)
    assert seen == [1, 2]


def test_watch_resumes_from_the_last_seen_sequence(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 2
    seen = []
    with MemoryClient(target) as client, client.watch(0, resume=True) as events:
        for event in events:
            assert event.type is ChangeEventType.CREATED
            seen.append(event.sequence)
            if len(seen) == 7:
                break
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    assert [r.after_sequence for r in service.watch_requests] == [0, 2, 4]


def test_resuming_watch_reconnects_after_a_clean_end(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 1
    service.watch_cut_code = None
    with MemoryClient(target) as client:
        with client.watch(0, resume=True) as events:
            assert [next(events).sequence for _ in range(4)] == [1, 2, 3, 4]
        # Without resume a clean end is just the end.
        service.watch_requests.clear()
        assert [e.sequence for e in client.watch(0)] == [1, 2]


def test_resuming_watch_does_not_retry_other_errors(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 1
    service.watch_cut_code = grpc.StatusCode.PERMISSION_DENIED
    with MemoryClient(target) as client, pytest.raises(MemevoError) as info:
        list(client.watch(0, resume=True))
    assert info.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert len(service.watch_requests) == 1


def test_resuming_watch_from_now_asks_for_the_last_sequence_first(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.last_sequence = 40
    service.watch_cuts = 1
    with MemoryClient(target) as client, client.watch(resume=True) as events:
        assert [next(events).sequence for _ in range(4)] == [41, 42, 43, 44]
    assert [r.HasField("after_sequence") for r in service.watch_requests] == [True, True]
    assert [r.after_sequence for r in service.watch_requests] == [40, 42]


def test_resuming_watch_gives_up_after_max_attempts(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 100
    service.watch_cut_after = 0
    with MemoryClient(target) as client, pytest.raises(UnavailableError):
        list(client.watch(0, resume=True, max_attempts=2))
    assert len(service.watch_requests) == 3


def test_watch_can_be_cancelled_from_another_thread(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    with MemoryClient(target) as client:
        events = client.watch(0)
        seen: list[int] = []
        done = threading.Event()

        def consume() -> None:
            seen.extend(e.sequence for e in events)
            done.set()

        thread = threading.Thread(target=consume)
        thread.start()
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        events.cancel()
        assert done.wait(5), "cancel() did not end a blocked iteration"
        thread.join()
    assert seen == [1, 2, 3]
    assert events.cancelled


def test_watch_sends_filters(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    with MemoryClient(target) as client, client.watch(3, namespace="ns", types=[ChangeEventType.CREATED]) as ev:
        assert next(ev).sequence == 4
    request = service.watch_requests[0]
    assert request.namespace == "ns"
    assert list(request.types) == [events_pb2.CHANGE_EVENT_TYPE_CREATED]


# --- asyncio ------------------------------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_async_token_deadline_and_typed_results(fake: tuple[FakeService, str]) -> None:
    service, target = fake

    async def main() -> None:
        async with AsyncMemoryClient(target, token="tok", timeout_s=4.0) as client:
            result = await client.remember("x", vector=[1.0, 2.0])
            assert result.memory.id == 1
            assert result.memory.vector is not None
            assert result.memory.vector.tolist() == [1.0, 2.0]
            await client.stats(timeout_s=1.5)

    run(main())
    (_, md1, t1), (_, _, t2) = service.calls
    assert md1["authorization"] == "Bearer tok"
    assert t1 is not None
    assert 3.0 < t1 < 4.1
    assert t2 is not None
    assert t2 < 1.6


def test_async_client_made_outside_the_loop_works_inside_it(fake: tuple[FakeService, str]) -> None:
    _, target = fake
    client = AsyncMemoryClient(target)

    async def main() -> int:
        try:
            return (await client.stats()).dimension
        finally:
            await client.close()

    assert run(main()) == 8
    # After close() it may serve another loop.
    assert run(main()) == 8


def test_async_errors_are_typed(fake: tuple[FakeService, str]) -> None:
    _, target = fake

    async def main() -> None:
        async with AsyncMemoryClient(target) as client:
            with pytest.raises(InvalidArgumentError) as info:
                await client.remember("bad")
            assert info.value.field_violations == [("memory.content", "is bad")]
            assert info.value.reason == "BAD_CONTENT"
            with pytest.raises(UnimplementedError):
                await client.get_policy()
            with pytest.raises(DeadlineExceededError):
                await client.remember("slow", timeout_s=0.2)
            with pytest.raises(NotFoundError):
                await client.get_one(9)

    run(main())


def test_async_remember_stream_takes_an_async_iterable(fake: tuple[FakeService, str]) -> None:
    service, target = fake

    async def items() -> AsyncIterator[MemoryInput | tuple[MemoryInput, str]]:
        yield MemoryInput(content="a", vector=[1.0])
        yield (MemoryInput(content="b", vector=[1.0]), "rid")

    async def main() -> None:
        async with AsyncMemoryClient(target) as client:
            result = await client.remember_stream(items())
            assert result.ids == [1, 2]

    run(main())
    assert [item.request_id for r in service.stream_requests for item in r.items] == ["", "rid"]


def test_async_remember_stream_reraises_what_the_iterator_raised(fake: tuple[FakeService, str]) -> None:
    _, target = fake

    async def main() -> None:
        async with AsyncMemoryClient(target) as client:
            with pytest.raises(ValueError, match="MemoryInput"):
                await client.remember_stream([MemoryInput(content="a"), "not an input"])  # type: ignore[list-item]

    run(main())


def test_async_watch_resumes_and_cancels(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 2

    async def main() -> list[int]:
        seen: list[int] = []
        async with AsyncMemoryClient(target) as client:
            events = client.watch(0, resume=True)
            async for event in events:
                seen.append(event.sequence)
                if len(seen) == 7:
                    events.cancel()
            assert events.cancelled
        return seen

    assert run(main()) == [1, 2, 3, 4, 5, 6, 7]
    assert [r.after_sequence for r in service.watch_requests] == [0, 2, 4]


def test_async_watch_resumes_after_a_clean_end(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 1
    service.watch_cut_code = None

    async def main() -> list[int]:
        async with AsyncMemoryClient(target) as client, client.watch(0, resume=True) as events:
            return [(await events.__anext__()).sequence for _ in range(4)]

    assert run(main()) == [1, 2, 3, 4]


def test_async_watch_cancel_from_another_task_ends_a_blocked_read(fake: tuple[FakeService, str]) -> None:
    _, target = fake

    async def main() -> list[int]:
        seen: list[int] = []
        async with AsyncMemoryClient(target) as client:
            events = client.watch(0)

            async def consume() -> None:
                async for event in events:
                    seen.append(event.sequence)

            task = asyncio.create_task(consume())
            while len(seen) < 3:
                await asyncio.sleep(0.01)
            events.cancel()
            await asyncio.wait_for(task, 5)
        return seen

    assert run(main()) == [1, 2, 3]


def test_async_watch_without_resume_raises_unavailable(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.watch_cuts = 1

    async def main() -> None:
        async with AsyncMemoryClient(target) as client:
            with pytest.raises(UnavailableError):
                async for _ in client.watch(0):
                    pass

    run(main())
