"""Concurrent writers over both transports lose nothing and get distinct ids; Watch sees each write once."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from conftest import Sidecar
from helpers import counts, memory, pack, stub, vectors, watch_events

from memevo.v1 import events_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

UNARY_THREADS = 8
UNARY_PER_THREAD = 50
BATCH_THREADS = 2
BATCHES_PER_THREAD = 10
BATCH_SIZE = 20
STREAM_ITEMS = 200
TOTAL = UNARY_THREADS * UNARY_PER_THREAD + BATCH_THREADS * BATCHES_PER_THREAD * BATCH_SIZE + STREAM_ITEMS
RESUME_AFTER = 137


def _run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run jobs in parallel threads released together; re-raise the first failure."""
    barrier = threading.Barrier(len(jobs))

    def released(job: Callable[[], Any]) -> Any:
        barrier.wait(timeout=30)
        return job()

    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(released, job) for job in jobs]
        return [f.result(timeout=120) for f in futures]


def _watch_with_reconnect(target: str, total: int) -> list[events_pb2.ChangeEvent]:
    """Watch from the start while the writes run, disconnect after RESUME_AFTER events, resume from the last one."""
    service = stub(target)
    first = watch_events(service, RESUME_AFTER, after_sequence=0)
    rest = watch_events(service, total - len(first), after_sequence=first[-1].sequence)
    return first + rest


def test_concurrent_writers_lose_nothing(sidecar: Sidecar) -> None:
    targets = [sidecar.unix_target, sidecar.tcp_target]
    matrix = vectors(TOTAL, seed=5)
    sent: dict[str, bytes] = {}
    unseen: list[tuple[int, list[int]]] = []

    def unary_writer(thread: int) -> Callable[[], list[tuple[int, str]]]:
        service = stub(targets[thread % 2])
        items = []
        for i in range(UNARY_PER_THREAD):
            row = thread * UNARY_PER_THREAD + i
            content = f"unary {thread}/{i}"
            sent[content] = pack(matrix[row])
            items.append((content, sent[content]))

        def run() -> list[tuple[int, str]]:
            out = []
            for position, (content, raw) in enumerate(items):
                response = service.Remember(memory_service_pb2.RememberRequest(memory=memory(content, raw)))
                assert not response.replayed
                out.append((response.result.memory.id, content))
                if position % 5 == 0:
                    # Read your own write at once, while other writers and the index builder are busy.
                    hits = service.Recall(memory_service_pb2.RecallRequest(query_vector=raw, k=1)).memories
                    if not hits or hits[0].memory.id != response.result.memory.id:
                        unseen.append((response.result.memory.id, [h.memory.id for h in hits]))
            return out

        return run

    def batch_writer(thread: int) -> Callable[[], list[tuple[int, str]]]:
        service = stub(targets[thread % 2])
        base = UNARY_THREADS * UNARY_PER_THREAD + thread * BATCHES_PER_THREAD * BATCH_SIZE
        batches = []
        for b in range(BATCHES_PER_THREAD):
            batch = []
            for i in range(BATCH_SIZE):
                content = f"batch {thread}/{b}/{i}"
                sent[content] = pack(matrix[base + b * BATCH_SIZE + i])
                batch.append(memory(content, sent[content]))
            batches.append(batch)

        def run() -> list[tuple[int, str]]:
            out = []
            for batch in batches:
                response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=batch))
                assert len(response.results) == len(batch)
                out += [(r.memory.id, m.content) for r, m in zip(response.results, batch, strict=True)]
            return out

        return run

    def stream_writer() -> Callable[[], list[tuple[int, str]]]:
        service = stub(sidecar.tcp_target)
        base = TOTAL - STREAM_ITEMS
        contents = [f"stream {i}" for i in range(STREAM_ITEMS)]
        for i, content in enumerate(contents):
            sent[content] = pack(matrix[base + i])

        def run() -> list[tuple[int, str]]:
            response = service.RememberStream(
                memory_service_pb2.RememberStreamRequest(memory=memory(c, sent[c])) for c in contents
            )
            assert response.created_count == STREAM_ITEMS
            return list(zip(response.ids, contents, strict=True))

        return run

    jobs: list[Callable[[], Any]] = [unary_writer(t) for t in range(UNARY_THREADS)]
    jobs += [batch_writer(t) for t in range(BATCH_THREADS)]
    jobs.append(stream_writer())
    jobs.append(lambda: _watch_with_reconnect(sidecar.unix_target, TOTAL))
    *written, watched = _run_all(jobs)

    acked = [pair for part in written for pair in part]
    assert len(acked) == TOTAL
    ids = [memory_id for memory_id, _ in acked]
    assert len(set(ids)) == TOTAL, "two writes got the same id"
    assert 0 not in ids
    service = stub(sidecar.unix_target)
    assert counts(service) == (TOTAL, TOTAL)
    assert not unseen, f"acknowledged writes their writer could not recall at once (id, top hit): {unseen}"

    # Every acknowledged id holds what its writer sent.
    by_id = dict(acked)
    for start in range(0, TOTAL, 500):
        chunk = sorted(by_id)[start : start + 500]
        response = service.Get(memory_service_pb2.GetRequest(ids=chunk, include_vectors=True))
        assert list(response.missing_ids) == []
        for record in response.memories:
            assert record.content == by_id[record.id]
            assert record.vector == sent[record.content]

    # The watcher that disconnected and resumed mid-write saw every write once, in sequence order.
    assert [e.sequence for e in watched] == list(range(1, TOTAL + 1))
    assert sorted(e.memory_id for e in watched) == sorted(ids)
    assert all(e.type == events_pb2.CHANGE_EVENT_TYPE_CREATED for e in watched)

    # A fresh Watch from 0 after the writes sees every id exactly once.
    replay = watch_events(stub(sidecar.tcp_target), TOTAL, after_sequence=0)
    assert [e.sequence for e in replay] == list(range(1, TOTAL + 1))
    assert sorted(e.memory_id for e in replay) == sorted(ids)
    # Ids increase with commit order, as the contract says.
    assert [e.memory_id for e in replay] == sorted(e.memory_id for e in replay)


def test_watch_resumes_without_gaps_or_duplicates(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    matrix = vectors(60, seed=6)
    service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(f"a{i}", pack(matrix[i])) for i in range(30)])
    )
    first = watch_events(service, 12, after_sequence=0)
    assert [e.sequence for e in first] == list(range(1, 13))
    # More writes happen while the watcher is away.
    service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(f"b{i}", pack(matrix[i])) for i in range(30, 60)])
    )
    rest = watch_events(stub(sidecar.tcp_target), 48, after_sequence=first[-1].sequence)
    assert [e.sequence for e in first + rest] == list(range(1, 61))
    assert len({e.memory_id for e in first + rest}) == 60


def test_live_watch_sees_new_writes(sidecar: Sidecar) -> None:
    """A Watch without after_sequence delivers only what happens after it, as it happens."""
    service = stub(sidecar.unix_target)
    writer = stub(sidecar.tcp_target)
    matrix = vectors(300, seed=7)
    old = service.Remember(memory_service_pb2.RememberRequest(memory=memory("old", pack(matrix[0])))).result.memory
    received: queue.Queue[events_pb2.ChangeEvent] = queue.Queue()
    call = service.Watch(memory_service_pb2.WatchRequest(), timeout=30)

    def read() -> None:
        with contextlib.suppress(grpc.RpcError):
            for response in call:
                received.put(response.event)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # When the watch starts is up to the server: write until it reports something.
        written: list[int] = []
        for row in range(1, 200):
            response = writer.Remember(
                memory_service_pb2.RememberRequest(memory=memory(f"new {row}", pack(matrix[row])))
            )
            written.append(response.result.memory.id)
            if not received.empty():
                break
        else:
            raise AssertionError("the live watch delivered nothing for 199 writes")
        # From now on the watch is live: each further write is delivered.
        for row in range(200, 203):
            response = writer.Remember(
                memory_service_pb2.RememberRequest(memory=memory(f"new {row}", pack(matrix[row])))
            )
            written.append(response.result.memory.id)
        seen: list[events_pb2.ChangeEvent] = []
        while not seen or seen[-1].memory_id != written[-1]:
            seen.append(received.get(timeout=20))
    finally:
        call.cancel()
        reader.join(timeout=10)
    seen_ids = [e.memory_id for e in seen]
    assert old.id not in seen_ids, "a watch without after_sequence replayed an old event"
    # What it saw is a gap-free tail of the new writes, in order.
    assert seen_ids == written[len(written) - len(seen_ids) :]
    assert [e.sequence for e in seen] == list(range(seen[0].sequence, seen[0].sequence + len(seen)))
    assert seen[0].sequence > old.sequence


def test_concurrent_retries_with_one_request_id_store_once(sidecar: Sidecar) -> None:
    raw = pack(vectors(1, seed=8)[0])
    targets = [sidecar.unix_target, sidecar.tcp_target]

    def attempt(thread: int) -> Callable[[], memory_service_pb2.RememberResponse]:
        service = stub(targets[thread % 2])
        request = memory_service_pb2.RememberRequest(memory=memory("charge card once", raw), request_id="pay-1")
        return lambda: service.Remember(request)

    responses = _run_all([attempt(t) for t in range(8)])
    assert len({r.result.memory.id for r in responses}) == 1
    assert sum(not r.replayed for r in responses) == 1
    assert counts(stub(sidecar.unix_target)) == (1, 1)
