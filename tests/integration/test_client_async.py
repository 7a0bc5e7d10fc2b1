"""The asyncio client against a real sidecar process (dimension 8, no embedder: tests send vectors).

No asyncio plugin is installed, so each test drives its own event loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pytest

from memevo.client import (
    AsyncMemoryClient,
    ChangeEventType,
    DeadlineExceededError,
    InvalidArgumentError,
    MemoryInput,
    MemoryKind,
    MemoryState,
    NotFoundError,
    UnavailableError,
    WriteOutcome,
)

pytestmark = pytest.mark.integration

DIM = 8
_T = TypeVar("_T")


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


def vec(seed: int) -> npt.NDArray[np.float32]:
    """A unit vector of the sidecar's dimension, different for each seed."""
    v = np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def near(base: npt.NDArray[np.float32], seed: int, noise: float = 0.05) -> npt.NDArray[np.float32]:
    v = base + noise * np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> str:
    """A namespace of its own for each test on the shared sidecar."""
    return "async-" + re.sub(r"[^A-Za-z0-9_.:-]", "-", request.node.name)[:120]


@pytest.fixture
def target(shared_sidecar: Any) -> str:
    return str(shared_sidecar.unix_target)


def with_client(target: str, body: Callable[[AsyncMemoryClient], Awaitable[_T]], **kwargs: Any) -> _T:
    async def main() -> _T:
        async with AsyncMemoryClient(target, **kwargs) as client:
            return await body(client)

    return run(main())


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_remember_then_recall_finds_it(shared_sidecar: Any, transport: str, ns: str) -> None:
    target = shared_sidecar.unix_target if transport == "unix" else shared_sidecar.tcp_target

    async def body(client: AsyncMemoryClient) -> None:
        written = await client.remember("bob likes tea", vector=vec(1), namespace=ns, kind=MemoryKind.PREFERENCE)
        await client.remember("unrelated", vector=vec(2), namespace=ns)
        result = await client.recall(vector=vec(1), namespace=ns, k=5)
        assert written.outcome is WriteOutcome.CREATED
        assert result[0].memory.id == written.memory.id
        assert result[0].similarity == pytest.approx(1.0, abs=2e-3)  # the index holds half-precision vectors
        assert result[0].memory.kind is MemoryKind.PREFERENCE
        assert result[0].memory.state is MemoryState.ACTIVE
        assert len(result) == 2

    with_client(target, body)


def test_recall_filters(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        base = vec(3)
        a = await client.remember("a", vector=near(base, 1), namespace=ns, entity="user:a", tags=("x",))
        b = await client.remember("b", vector=near(base, 2), namespace=ns, kind=MemoryKind.FACT, entity="user:b")
        assert set((await client.recall(vector=base, namespace=ns)).ids) == {a.id, b.id}
        assert (await client.recall(vector=base, namespace=ns, entity="user:a")).ids == [a.id]
        assert (await client.recall(vector=base, namespace=ns, tags=["x"])).ids == [a.id]
        assert (await client.recall(vector=base, namespace=ns, kinds=[MemoryKind.FACT])).ids == [b.id]

    with_client(target, body)


def test_remember_batch_and_get(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        items = [MemoryInput(content=f"b{i}", vector=vec(10 + i), namespace=ns) for i in range(4)]
        results = await client.remember_batch(items, request_id=f"{ns}-batch")
        ids = [r.memory.id for r in results]
        assert len(set(ids)) == 4
        replay = await client.remember_batch(items, request_id=f"{ns}-batch")
        assert [r.memory.id for r in replay] == ids
        assert all(r.replayed for r in replay)
        got = await client.get(ids, include_vectors=True)
        assert [m.content for m in got] == [f"b{i}" for i in range(4)]
        assert all(m.vector is not None and m.vector.shape == (DIM,) for m in got)
        assert (await client.get_one(ids[0])).id == ids[0]
        with pytest.raises(NotFoundError):
            await client.get_one(ids[-1] + 1_000_000)

    with_client(target, body)


def test_remember_stream_from_an_async_iterable_with_a_replayed_resend(target: str, ns: str) -> None:
    items = [(MemoryInput(content=f"s{i}", vector=vec(20 + i), namespace=ns), f"{ns}-s{i}") for i in range(3)]

    async def produce(n: int) -> AsyncIterator[MemoryInput | tuple[MemoryInput, str]]:
        for item in items[:n]:
            await asyncio.sleep(0)
            yield item

    async def body(client: AsyncMemoryClient) -> None:
        first = await client.remember_stream(produce(2))
        assert first.created_count == 2
        second = await client.remember_stream(produce(3))
        assert second.ids[:2] == first.ids
        assert (second.created_count, second.replayed_count) == (1, 2)

    with_client(target, body)


def test_forget_then_recall_no_longer_returns_it(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        v = vec(30)
        memory = (await client.remember("temporary", vector=v, namespace=ns)).memory
        assert (await client.recall(vector=v, namespace=ns)).ids == [memory.id]
        assert (await client.forget([memory.id])).forgotten_ids == [memory.id]
        assert len(await client.recall(vector=v, namespace=ns)) == 0
        assert await client.get([memory.id]) == []

    with_client(target, body)


def test_watch_delivers_created_events_and_resumes_from_after_sequence(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        start = (await client.stats()).last_sequence
        ids = [(await client.remember(f"w{i}", vector=vec(40 + i), namespace=ns)).memory.id for i in range(3)]
        seen = []
        async with client.watch(start, namespace=ns, timeout_s=30) as events:
            async for event in events:
                seen.append(event)
                if len(seen) == 3:
                    break
        assert [e.memory_id for e in seen] == ids
        assert [e.type for e in seen] == [ChangeEventType.CREATED] * 3
        sequences = [e.sequence for e in seen]
        assert sequences == sorted(sequences)
        assert len(set(sequences)) == 3

        resumed = []
        async with client.watch(seen[0].sequence, namespace=ns, timeout_s=30) as events:
            async for event in events:
                resumed.append(event.sequence)
                if len(resumed) == 2:
                    break
        assert resumed == sequences[1:]

    with_client(target, body)


def test_live_watch_with_resume_and_cancel(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        start = (await client.stats()).last_sequence
        events = client.watch(start, namespace=ns, resume=True)
        received: list[int] = []

        async def consume() -> None:
            async for event in events:
                received.append(event.memory_id)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.1)
        written = [(await client.remember(f"live{i}", vector=vec(50 + i), namespace=ns)).memory.id for i in range(2)]
        for _ in range(200):
            if len(received) == 2:
                break
            await asyncio.sleep(0.05)
        events.cancel()
        await asyncio.wait_for(task, 5)
        assert received == written

    with_client(target, body)


def test_invalid_vector_names_the_field(target: str, ns: str) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        with pytest.raises(InvalidArgumentError) as info:
            await client.remember("bad", vector=np.ones(DIM + 1), namespace=ns)
        assert "memory.vector" in [f for f, _ in info.value.field_violations]
        assert info.value.retryable is False

    with_client(target, body)


def test_per_call_deadline(target: str, ns: str) -> None:
    async def slow_items() -> AsyncIterator[MemoryInput]:
        yield MemoryInput(content="first", vector=vec(60), namespace=ns)
        await asyncio.sleep(1.5)
        yield MemoryInput(content="late", vector=vec(61), namespace=ns)

    async def body(client: AsyncMemoryClient) -> None:
        with pytest.raises(DeadlineExceededError) as info:
            await client.remember_stream(slow_items(), timeout_s=0.3)
        assert info.value.retryable
        with pytest.raises(DeadlineExceededError):
            async for _ in client.watch(timeout_s=0.3):
                pass
        assert (await client.stats()).dimension == DIM

    with_client(target, body)


def test_unreachable_sidecar_is_unavailable(tmp_path: Any) -> None:
    async def body(client: AsyncMemoryClient) -> None:
        with pytest.raises(UnavailableError) as info:
            await client.stats()
        assert info.value.retryable

    with_client(f"unix://{tmp_path}/nothing-here.sock", body, timeout_s=2.0)
