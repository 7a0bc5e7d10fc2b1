"""Open streams against a live sidecar: they cannot starve unary calls or health, and their number is capped.

An open Watch, a Review waiting for proposals and an idle RememberStream each
last as long as their client wants. Many of them at once must leave every other
call answered (health included), and past the caps a new stream is refused at
once with RESOURCE_EXHAUSTED naming the cap, while the others keep working.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import channel, counts, memory, status_details, stub, vec, wait_until

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

WORKERS = 4
ANSWER_S = 20.0
"""Deadline of the calls made while the streams are open: they hang without the fix, so it must end them."""


class _Held:
    """A client request stream that sends ``first`` (if any) and then nothing until closed."""

    def __init__(self, first: Any = None) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        if first is not None:
            self._queue.put(first)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def close(self) -> None:
        self._queue.put(None)


def _open_streams(target: str, count: int) -> tuple[list[grpc.Future], list[_Held]]:  # type: ignore[type-arg]
    """``count`` idle streams, a third each of Watch, Review and RememberStream, each on its own channel."""
    calls: list[Any] = []
    held: list[_Held] = []
    for position in range(count):
        service = stub(target)
        if position % 3 == 0:
            calls.append(service.Watch(memory_service_pb2.WatchRequest(), timeout=120))
        elif position % 3 == 1:
            hello = memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer=f"r{position}"))
            held.append(_Held(hello))
            calls.append(service.Review(iter(held[-1]), timeout=120))
        else:
            held.append(_Held())
            calls.append(service.RememberStream.future(iter(held[-1]), timeout=120))
    return calls, held


def _unary_calls_and_health_answer(target: str) -> None:
    service = stub(target)
    health = health_pb2_grpc.HealthStub(channel(target))
    for seed in range(3):
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=ANSWER_S).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        service.Remember(
            memory_service_pb2.RememberRequest(memory=memory(f"written beside open streams {seed}", vec(seed))),
            timeout=ANSWER_S,
        )
        assert service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(seed), k=3), timeout=ANSWER_S).memories
        assert service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=ANSWER_S).total_count == seed + 1


def test_three_times_as_many_open_streams_as_workers_leave_unary_calls_and_health_answered(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, "--workers", str(WORKERS))
    calls, held = _open_streams(sidecar.unix_target, 3 * WORKERS)
    try:
        _unary_calls_and_health_answer(sidecar.unix_target)
        # The streams are served too, not just parked: every Watch sees the writes.
        for call in calls[::3]:
            assert next(call).event.type  # the first write's event
        for call in calls[2::3]:
            assert not call.done(), "an idle RememberStream ended by itself"
    finally:
        for stream in held:
            stream.close()
        for call in calls:
            call.cancel()
        assert sidecar.stop() == 0, sidecar.log()
    assert "Traceback" not in sidecar.log(), sidecar.log()


TOKENS = ("alpha-t0ken", "beta-t0ken")


def _watch(target: str, token: str, writer: Any, seed: int) -> tuple[Any, grpc.RpcError | None]:
    """A Watch from ``token``, and the error that ended it if it was not admitted.

    An admitted Watch delivers the event of a new write; a refused one ends at once. It asks for the log from
    before that write: an admitted stream's handler may start only after the write (its pool thread still held by
    a stream cancelled a moment ago), and a live-only Watch would then wait for an event that never comes.
    """
    before = counts(writer)[0]
    call = stub(target, token).Watch(memory_service_pb2.WatchRequest(after_sequence=before), timeout=120)
    writer.Remember(memory_service_pb2.RememberRequest(memory=memory(f"event {seed}", vec(seed))), timeout=ANSWER_S)
    try:
        next(call)
    except grpc.RpcError as error:
        return call, error
    return call, None


def _admitted(results: list[tuple[Any, grpc.RpcError | None]]) -> list[Any]:
    errors = [error.details() for _, error in results if error is not None]
    assert not errors, errors
    return [call for call, _ in results]


def _refused(result: tuple[Any, grpc.RpcError | None], *mentions: str) -> None:
    error = result[1]
    assert error is not None, "the stream past the cap was admitted"
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (error.code(), error.details())
    for text in mentions:
        assert text in error.details(), error.details()
    assert status_details(error)[1].get("retryable") == "true"


@pytest.fixture
def capped(tmp_path: Path, data_dir: Path) -> Iterator[Sidecar]:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{token} *\n" for token in TOKENS))
    tokens.chmod(0o600)
    sidecar = start_sidecar(
        data_dir, "--tokens-file", str(tokens), "--max-streams", "5", "--max-streams-per-caller", "3"
    )
    yield sidecar
    assert sidecar.stop() == 0, sidecar.log()
    assert "Traceback" not in sidecar.log(), sidecar.log()


def test_streams_past_the_caps_are_refused_and_a_closed_one_frees_its_place(capped: Sidecar) -> None:
    target = capped.unix_target
    alpha, beta = TOKENS
    writer = stub(target, alpha)
    seeds = iter(range(100))
    opened = _admitted([_watch(target, alpha, writer, next(seeds)) for _ in range(3)])
    _refused(_watch(target, alpha, writer, next(seeds)), "this caller", "max-streams-per-caller 3")
    # Another caller still has room under its own cap, until the sidecar's overall cap.
    opened += _admitted([_watch(target, beta, writer, next(seeds)) for _ in range(2)])
    _refused(_watch(target, beta, writer, next(seeds)), "5 streams are open", "max-streams 5")
    health = health_pb2_grpc.HealthStub(channel(target))
    serving = health.Check(health_pb2.HealthCheckRequest(), timeout=ANSWER_S).status
    assert serving == health_pb2.HealthCheckResponse.SERVING
    assert stub(target, beta).GetStats(memory_service_pb2.GetStatsRequest(), timeout=ANSWER_S).total_count

    # Closing streams gives their places back (the sidecar learns of a cancel a moment later).
    for call in opened[:3]:
        call.cancel()
    admitted: list[Any] = []

    def one_more() -> bool:
        result = _watch(target, alpha, writer, next(seeds))
        if result[1] is not None:
            _refused(result)
            return False
        admitted.append(result[0])
        return len(admitted) == 3

    wait_until(one_more, "the cancelled streams' places to be free again")
    for call in opened[3:] + admitted:
        call.cancel()


def test_a_stream_cap_below_one_is_refused_at_start(data_dir: Path) -> None:
    with pytest.raises(RuntimeError, match="must be at least 1"):
        start_sidecar(data_dir, "--max-streams", "0")
    assert not any(data_dir.iterdir()), "a misconfigured sidecar touched the data directory"


def _health_watch(target: str, token: str | None) -> tuple[Any, grpc.RpcError | None]:
    """A health Watch sent with ``token`` (valid, invented or None), and the error that ended it if refused."""
    call = health_pb2_grpc.HealthStub(channel(target, token)).Watch(health_pb2.HealthCheckRequest(), timeout=120)
    try:
        assert next(call).status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError as error:
        return call, error
    return call, None


def test_health_watches_without_a_valid_token_cannot_take_the_places_of_authenticated_streams(
    tmp_path: Path, data_dir: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKENS[0]} *\n")
    tokens.chmod(0o600)
    sidecar = start_sidecar(
        data_dir,
        "--tokens-file",
        str(tokens),
        "--max-streams",
        "3",
        "--max-streams-per-caller",
        "3",
        "--max-unauthenticated-streams",
        "3",
        "--max-unauthenticated-streams-per-peer",
        "2",
    )
    token = TOKENS[0]
    held: list[_Held] = []
    calls: list[Any] = []
    try:
        # On the unix socket, one connection, every Watch with a token of its own invention.
        invented = [_health_watch(sidecar.unix_target, f"invented-{n}") for n in range(40)]
        # Over TCP without any token, one connection per Watch.
        tokenless = [_health_watch(sidecar.tcp_target, None) for _ in range(40)]
        calls += [call for call, _ in invented + tokenless]
        assert [error is None for _, error in invented].count(True) == 2
        assert [error is None for _, error in tokenless].count(True) == 1
        per_peer = next(error for _, error in invented if error is not None)
        _refused((None, per_peer), "this peer", "unauthenticated health", "--max-unauthenticated-streams-per-peer 2")
        overall = next(error for _, error in tokenless if error is not None)
        _refused((None, overall), "3 unauthenticated health streams", "--max-unauthenticated-streams 3")

        # Every authenticated kind of stream is still admitted: Watch, Review, RememberStream.
        writer = stub(sidecar.unix_target, token)
        watch = _admitted([_watch(sidecar.tcp_target, token, writer, 0)])[0]
        hello = memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer="r"))
        held.append(_Held(hello))
        review = stub(sidecar.tcp_target, token).Review(iter(held[-1]), timeout=120)
        held.append(_Held(memory_service_pb2.RememberStreamRequest(memory=memory("streamed", vec(1)))))
        remember = stub(sidecar.tcp_target, token).RememberStream.future(iter(held[-1]), timeout=120)
        calls += [watch, review, remember]
        # The three hold the whole authenticated pool, and no health Watch holds any of it: a fourth is refused
        # (once the Review and the RememberStream, opened without waiting, have been admitted).
        seeds = iter(range(2, 100))

        def fourth_refused() -> bool:
            call, error = _watch(sidecar.unix_target, token, writer, next(seeds))
            if error is None:
                call.cancel()
                return False
            _refused((call, error), "3 streams are open", "--max-streams 3")
            return True

        wait_until(fourth_refused, "the authenticated pool to be full")
        assert not review.done()
        assert not remember.done()
        held[-1].close()
        assert len(remember.result(timeout=ANSWER_S).ids) == 1
        # A MemoryService stream without a valid token is refused for what it is, not counted.
        with pytest.raises(grpc.RpcError) as denied:
            next(stub(sidecar.unix_target, "invented").Watch(memory_service_pb2.WatchRequest(), timeout=ANSWER_S))
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        for stream in held:
            stream.close()
        for call in calls:
            call.cancel()
        assert sidecar.stop() == 0, sidecar.log()
    assert "Traceback" not in sidecar.log(), sidecar.log()
