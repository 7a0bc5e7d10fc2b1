"""Shared helpers of the server integration tests: channels with deadlines, vectors, error details.

Every call made through :func:`channel` or :func:`stub` carries a deadline
(``DEADLINE_S`` unless the caller gives a shorter one), so no test can hang on
a sidecar that stopped answering.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, memory_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the integration tests run from their own folder
    sys.path.insert(0, str(ROOT))
from benchmarks.quality.scripted_judge import chat_endpoint  # noqa: E402

DEADLINE_S = 30.0
"""Default deadline of every call, seconds."""
WAIT_S = 60.0
"""Upper bound of every polling wait, seconds."""

FloatMatrix = npt.NDArray[np.float32]


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _DefaultsInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds a deadline to calls without one, and the bearer token when given."""

    def __init__(self, token: str | None) -> None:
        self._token = token

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        metadata = list(details.metadata or ())
        if self._token is not None:
            metadata.append(("authorization", f"Bearer {self._token}"))
        return _CallDetails(
            details.method,
            DEADLINE_S if details.timeout is None else details.timeout,
            metadata or None,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def channel(target: str, token: str | None = None) -> grpc.Channel:
    """An insecure channel to ``target`` (``unix:///...`` or ``host:port``) whose calls all have deadlines."""
    raw = grpc.insecure_channel(target)
    return grpc.intercept_channel(raw, _DefaultsInterceptor(token))


def stub(target: str, token: str | None = None) -> memory_service_pb2_grpc.MemoryServiceStub:
    """The generated MemoryService stub over :func:`channel`."""
    return memory_service_pb2_grpc.MemoryServiceStub(channel(target, token))


# ---- vectors --------------------------------------------------------------------------------


def vectors(count: int, dimension: int = 8, seed: int = 0) -> FloatMatrix:
    """``count`` random Gaussian float32 rows (never zero, almost surely pairwise distinct in direction)."""
    return np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)


def vec(seed: int, dimension: int = 8) -> bytes:
    """One random vector, packed little-endian float32 as the wire wants it."""
    return pack(vectors(1, dimension, seed)[0])


def pack(vector: Iterable[float] | npt.NDArray[Any]) -> bytes:
    """Packed little-endian float32 bytes of a vector."""
    return np.asarray(vector, dtype="<f4").tobytes()


def unpack(raw: bytes) -> FloatMatrix:
    """Inverse of :func:`pack`."""
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def unit(vector: npt.NDArray[Any]) -> FloatMatrix:
    """``vector`` scaled to length 1 (rows, for a matrix)."""
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array, axis=-1, keepdims=True)


def memory(content: str = "", vector: bytes = b"", **fields: Any) -> memory_pb2.MemoryInput:
    """A MemoryInput."""
    return memory_pb2.MemoryInput(content=content, vector=vector, **fields)


class Writer:
    """Writes facts of one namespace, each with a vector near one direction (the texts decide), and reads its views."""

    def __init__(self, service: memory_service_pb2_grpc.MemoryServiceStub, namespace: str, seed: int) -> None:
        self.service = service
        self.namespace = namespace
        self.rng = np.random.default_rng(seed)
        self.base = self.rng.standard_normal(8)

    def near(self) -> bytes:
        return pack(self.base + 0.05 * self.rng.standard_normal(8))

    def elsewhere(self) -> bytes:
        """A vector far from the others: nothing about it is near a statement of the namespace."""
        return pack(-self.base + 0.05 * self.rng.standard_normal(8))

    def remember(self, content: str, when: int, *, vector: bytes | None = None, **fields: Any) -> Any:
        fields.setdefault("namespace", self.namespace)
        fields.setdefault("kind", memory_pb2.MEMORY_KIND_FACT)
        item = memory(content, vector or self.near(), valid_from=Timestamp(seconds=when), **fields)
        return self.service.Remember(memory_service_pb2.RememberRequest(memory=item)).result

    def keyed(self, content: str, when: int, entity: str, attribute: str, value: str, **fields: Any) -> Any:
        fact = memory_pb2.Fact(attribute=attribute, value=value)
        return self.remember(content, when, entity=entity, fact=fact, **fields)

    def history(self, entity: str, attribute: str) -> memory_service_pb2.HistoryResponse:
        key = memory_service_pb2.FactKey(namespace=self.namespace, entity=entity, attribute=attribute)
        return self.service.History(memory_service_pb2.HistoryRequest(fact_key=key))

    def beliefs(self, entity: str) -> memory_service_pb2.BeliefsResponse:
        return self.service.Beliefs(memory_service_pb2.BeliefsRequest(namespace=self.namespace, entity=entity))

    def entities(self, **fields: Any) -> memory_service_pb2.ListEntitiesResponse:
        return self.service.ListEntities(memory_service_pb2.ListEntitiesRequest(namespace=self.namespace, **fields))


# ---- errors ---------------------------------------------------------------------------------


def status_details(error: grpc.RpcError) -> tuple[list[str], dict[str, str]]:
    """The BadRequest field names and the ErrorInfo metadata of a failed call."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    fields: list[str] = []
    metadata: dict[str, str] = {}
    if status is None:
        return fields, metadata
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(v.field for v in bad.field_violations)
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            metadata.update(info.metadata)
    return fields, metadata


def bad_fields(error: grpc.RpcError) -> list[str]:
    """The field names of the BadRequest detail of a failed call."""
    return status_details(error)[0]


# ---- state ----------------------------------------------------------------------------------


def counts(service: memory_service_pb2_grpc.MemoryServiceStub) -> tuple[int, int]:
    """(last change-log sequence, memories not evicted)."""
    stats = service.GetStats(memory_service_pb2.GetStatsRequest())
    return stats.last_sequence, stats.total_count


def assert_all_readable(service: memory_service_pb2_grpc.MemoryServiceStub, acked: dict[int, str]) -> None:
    """Every acknowledged write (id -> content) is stored, and nothing else is."""
    assert counts(service)[1] == len(acked)
    ids = sorted(acked)
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        found = service.Get(memory_service_pb2.GetRequest(ids=chunk))
        assert [m.content for m in found.memories] == [acked[i] for i in chunk]


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``predicate`` until it holds; fail the test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def wait_indexed(service: memory_service_pb2_grpc.MemoryServiceStub) -> None:
    """Wait until the fresh tail is empty: every vector is in the HNSW graph."""
    wait_until(
        lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count == 0,
        "the index builder to empty the fresh tail",
    )


def watch_events(
    service: memory_service_pb2_grpc.MemoryServiceStub,
    count: int,
    *,
    after_sequence: int = 0,
    timeout_s: float = DEADLINE_S,
    **filters: Any,
) -> list[events_pb2.ChangeEvent]:
    """The first ``count`` events of Watch(after_sequence), then the stream is cancelled."""
    call = service.Watch(memory_service_pb2.WatchRequest(after_sequence=after_sequence, **filters), timeout=timeout_s)
    events: list[events_pb2.ChangeEvent] = []
    try:
        for response in call:
            events.append(response.event)
            if len(events) >= count:
                break
    finally:
        call.cancel()
    return events


def recall_ids(
    service: memory_service_pb2_grpc.MemoryServiceStub, query_vector: bytes, k: int = 10, **fields: Any
) -> list[int]:
    """Ids returned by Recall for a query vector, best first."""
    response = service.Recall(memory_service_pb2.RecallRequest(query_vector=query_vector, k=k, **fields))
    return [m.memory.id for m in response.memories]


def write_until_refused(service: memory_service_pb2_grpc.MemoryServiceStub) -> tuple[dict[int, str], grpc.RpcError]:
    """Batches of 2 KB memories until the sidecar refuses one (a full disk): what it acknowledged, and the refusal."""
    acked: dict[int, str] = {}
    for batch in range(2000):
        texts = [f"disk filler {batch}.{i} " + "x" * 2000 for i in range(40)]
        rows = [pack(row) for row in vectors(40, seed=batch)]
        items = [memory(text, row) for text, row in zip(texts, rows, strict=True)]
        try:
            response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items))
        except grpc.RpcError as error:
            return acked, error
        acked.update({r.memory.id: texts[i] for i, r in enumerate(response.results)})
    raise AssertionError("the writes were never refused: the disk or the file size limit was never reached")


@dataclass
class FakeChat:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 (``url`` for --llm-url).

    Each request takes the next ``(status, text)`` queued in ``answers`` (HTTP 500 when none comes within 5 s)
    and is recorded in ``seen`` as ``{"path", "body", "auth"}``.
    """

    url: str
    answers: queue.Queue[tuple[int, str]] = field(default_factory=queue.Queue)
    seen: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def fake_chat() -> Iterator[FakeChat]:
    """A :class:`FakeChat` serving until the block ends."""
    answers: queue.Queue[tuple[int, str]] = queue.Queue()
    seen: list[dict[str, Any]] = []

    def reply(request: dict[str, Any]) -> tuple[int, str]:
        seen.append(request)
        try:
            return answers.get(timeout=5)
        except queue.Empty:  # a call the test did not expect: an error the sidecar must survive
            return 500, "no answer queued"

    with chat_endpoint(reply, "fake-chat") as url:
        yield FakeChat(url, answers, seen)
