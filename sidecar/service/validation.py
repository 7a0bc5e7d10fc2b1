"""Request validation: protobuf in, domain objects out, or InvalidArgument naming every bad field.

Nothing is written before validation passes, so a rejected request changes nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf.timestamp_pb2 import Timestamp

from memevo.v1 import memory_pb2, memory_service_pb2

from ..config import Limits
from ..domain import DEFAULT_NAMESPACE, NewMemory, RecallQuery, from_timestamp, now_s
from ..errors import InvalidArgument

MAX_LABEL_BYTES = 256
MAX_NAMESPACE_BYTES = 128
MAX_REQUEST_ID_BYTES = 128
MAX_TAGS = 32
MAX_TAG_BYTES = 64
MAX_METADATA_ENTRIES = 32
MAX_METADATA_BYTES = 4096
MAX_NOTE_BYTES = 4096
MAX_FRAMEWORK_BYTES = 64
MAX_REASONING_IDS = 1024
"""Ids a reasoning context may name: a working memory's worth (a turn names a few; word search reads the first 4).
Unbounded, one write of millions of ids made a record of tens of megabytes and took seconds to commit."""
# Protobuf Timestamp's own range: 0001-01-01 to 9999-12-31.
MIN_TIMESTAMP_S = -62_135_596_800
MAX_TIMESTAMP_S = 253_402_300_799
MIN_VECTOR_NORM = 1e-18
MAX_VECTOR_NORM = 1e18
"""Vector lengths whose squares stay normal float32 numbers, so that normalising is exact enough."""
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9_.:\-]+")

_KINDS = frozenset(memory_pb2.MemoryKind.values())
_SOURCES = frozenset(memory_pb2.MemorySource.values())
_MODES = frozenset(memory_service_pb2.RecallMode.values())


class Violations:
    """Collects (field, description) pairs; raises them together."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, description: str) -> None:
        self.items.append((field, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidArgument(self.items)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def check_text(v: Violations, field: str, text: str, limit: int) -> None:
    """A violation when ``text`` is longer than ``limit`` UTF-8 bytes."""
    size = _utf8_len(text)
    if size > limit:
        v.add(field, f"{size} bytes; at most {limit}")


def check_label(v: Violations, field: str, text: str) -> None:
    """Entity, attribute, topic and signature labels: bounded, and no control characters (they build keys)."""
    check_text(v, field, text, MAX_LABEL_BYTES)
    if any(ord(c) < 32 for c in text):
        v.add(field, "must not contain control characters")


def check_request_id(v: Violations, field: str, request_id: str) -> None:
    """Idempotency keys are short and printable."""
    check_text(v, field, request_id, MAX_REQUEST_ID_BYTES)


def check_timestamp(v: Violations, field: str, stamp: Timestamp) -> float:
    """The timestamp in epoch seconds, or a violation if out of protobuf's range."""
    if not (0 <= stamp.nanos < 1_000_000_000) or not (MIN_TIMESTAMP_S <= stamp.seconds <= MAX_TIMESTAMP_S):
        v.add(field, "not a valid timestamp (years 1 to 9999, nanos in [0, 1e9))")
        return 0.0
    return from_timestamp(stamp)


def check_namespace(v: Violations, field: str, namespace: str) -> str:
    """The namespace, "default" when empty."""
    if not namespace:
        return DEFAULT_NAMESPACE
    if _utf8_len(namespace) > MAX_NAMESPACE_BYTES or not NAMESPACE_PATTERN.fullmatch(namespace):
        v.add(field, f"must be 1 to {MAX_NAMESPACE_BYTES} characters of [A-Za-z0-9_.:-]")
    return namespace


def decode_vector(v: Violations, field: str, raw: bytes, dimension: int) -> npt.NDArray[np.float32] | None:
    """Packed little-endian float32 bytes to a vector, checked for size, finiteness and norm."""
    if len(raw) % 4:
        v.add(field, f"{len(raw)} bytes is not a whole number of float32 values")
        return None
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if vector.size != dimension:
        v.add(field, f"has {vector.size} floats; the data directory's dimension is {dimension}")
        return None
    with np.errstate(over="ignore", under="ignore"):
        square = vector.dot(vector)  # what np.linalg.norm squares, in float32 as the index normalises it
    if math.isfinite(square) and square > 0:
        # A finite positive sum of squares: every entry is finite and one is not zero (the usual case, one pass).
        norm = float(np.sqrt(square))
    else:
        if not np.isfinite(vector).all():
            v.add(field, "contains NaN or infinity")
            return None
        if not np.any(vector):
            v.add(field, "is all zeros; a direction is needed")
            return None
        norm = math.sqrt(square) if math.isfinite(square) else math.inf  # 0 (underflow) or inf (overflow)
    if not (MIN_VECTOR_NORM <= norm <= MAX_VECTOR_NORM):
        v.add(
            field,
            f"its length {norm:g} cannot be normalised in float32 (overflow or underflow); "
            f"scale it to a length between {MIN_VECTOR_NORM:g} and {MAX_VECTOR_NORM:g}",
        )
        return None
    return vector


def memory_input(
    v: Violations,
    field: str,
    memory: memory_pb2.MemoryInput,
    *,
    dimension: int,
    limits: Limits,
    has_embedder: bool,
) -> NewMemory | None:
    """Validate one MemoryInput; violations are named under ``field`` (e.g. "memories[3]")."""
    start = len(v.items)
    vector = None
    if memory.vector:
        vector = decode_vector(v, f"{field}.vector", memory.vector, dimension)
    if not memory.content and not memory.vector:
        v.add(f"{field}.content", "content or vector is required")
    elif not memory.vector and not has_embedder:
        v.add(f"{field}.vector", "required: this sidecar has no text embedder, so send a vector")
    check_text(v, f"{field}.content", memory.content, limits.max_content_bytes)
    namespace = check_namespace(v, f"{field}.namespace", memory.namespace)
    if memory.kind not in _KINDS:
        v.add(f"{field}.kind", f"unknown MemoryKind value {memory.kind}")
    if memory.source not in _SOURCES:
        v.add(f"{field}.source", f"unknown MemorySource value {memory.source}")
    for name in ("entity", "topic", "task_signature"):
        check_label(v, f"{field}.{name}", getattr(memory, name))
    fact_attribute = fact_value = ""
    if memory.HasField("fact"):
        fact_attribute, fact_value = memory.fact.attribute, memory.fact.value
        if not fact_attribute:
            v.add(f"{field}.fact.attribute", "required when a fact is given")
        check_label(v, f"{field}.fact.attribute", fact_attribute)
        check_text(v, f"{field}.fact.value", fact_value, MAX_METADATA_BYTES)
        if not memory.entity:
            v.add(
                f"{field}.entity",
                "required when a fact is given: the fact key is (namespace, entity, attribute)",
            )
    confidence = None
    if memory.HasField("confidence"):
        confidence = memory.confidence
        if not (math.isfinite(confidence) and 0.0 <= confidence <= 1.0):
            v.add(f"{field}.confidence", "must be in [0, 1]")
    if memory.importance > 10:
        v.add(f"{field}.importance", "must be 0 (not given) or 1 to 10")
    if len(memory.tags) > MAX_TAGS:
        v.add(f"{field}.tags", f"{len(memory.tags)} tags; at most {MAX_TAGS}")
    for position, tag in enumerate(memory.tags):
        if not tag or _utf8_len(tag) > MAX_TAG_BYTES:
            v.add(f"{field}.tags[{position}]", f"must be 1 to {MAX_TAG_BYTES} bytes")
    if len(memory.metadata) > MAX_METADATA_ENTRIES:
        v.add(f"{field}.metadata", f"{len(memory.metadata)} entries; at most {MAX_METADATA_ENTRIES}")
    metadata_bytes = sum(_utf8_len(k) + _utf8_len(x) for k, x in memory.metadata.items())
    if metadata_bytes > MAX_METADATA_BYTES:
        v.add(f"{field}.metadata", f"{metadata_bytes} bytes; at most {MAX_METADATA_BYTES}")
    valid_from = None
    if memory.HasField("valid_from"):
        valid_from = check_timestamp(v, f"{field}.valid_from", memory.valid_from)
        if valid_from > now_s() + limits.max_future_skew_s:
            v.add(
                f"{field}.valid_from",
                f"{valid_from - now_s():.0f} s in the future; at most {limits.max_future_skew_s:.0f} s",
            )
    check_text(v, f"{field}.framework_version", memory.framework_version, MAX_FRAMEWORK_BYTES)
    check_text(v, f"{field}.reasoning_context.text", memory.reasoning_context.text, MAX_NOTE_BYTES)
    reasoning_ids = memory.reasoning_context.memory_ids
    if len(reasoning_ids) > MAX_REASONING_IDS:
        v.add(f"{field}.reasoning_context.memory_ids", f"{len(reasoning_ids)} ids; at most {MAX_REASONING_IDS}")
    elif any(i == 0 for i in reasoning_ids):
        v.add(f"{field}.reasoning_context.memory_ids", "0 is not a memory id")
    if len(v.items) > start:
        return None
    return NewMemory(
        content=memory.content,
        vector=vector,
        namespace=namespace,
        kind=memory.kind or memory_pb2.MEMORY_KIND_EPISODE,
        entity=memory.entity,
        topic=memory.topic,
        fact_attribute=fact_attribute,
        fact_value=fact_value,
        source=memory.source or memory_pb2.MEMORY_SOURCE_AGENT_INFERENCE,
        confidence=confidence,
        importance=memory.importance,
        tags=tuple(dict.fromkeys(memory.tags)),
        metadata=dict(memory.metadata),
        valid_from_s=valid_from,
        framework_version=memory.framework_version or None,
        reasoning_ids=tuple(memory.reasoning_context.memory_ids),
        reasoning_text=memory.reasoning_context.text,
        task_signature=memory.task_signature,
    )


def check_turn(v: Violations, field: str, has_turn: bool, turn: int) -> int | None:
    """The agent's turn, or None when not given; negative turns are refused."""
    if not has_turn:
        return None
    if turn < 0:
        v.add(field, "must be >= 0")
    return turn


def recall_query(
    v: Violations,
    request: memory_service_pb2.RecallRequest,
    *,
    dimension: int,
    limits: Limits,
    has_embedder: bool,
) -> tuple[RecallQuery | None, str]:
    """Validate a RecallRequest; returns the query (vector still to embed when None) and the text."""
    vector = None
    if request.query_vector:
        vector = decode_vector(v, "query_vector", request.query_vector, dimension)
    elif not request.query:
        v.add("query", "query or query_vector is required")
    elif not has_embedder:
        v.add("query_vector", "required: this sidecar has no text embedder, so send a vector")
    check_text(v, "query", request.query, limits.max_content_bytes)
    k = request.k or 10
    if k > limits.max_k:
        v.add("k", f"{k}; at most {limits.max_k}")
    flt = request.filter
    namespace = check_namespace(v, "filter.namespace", flt.namespace)
    for position, kind in enumerate(flt.kinds):
        if kind not in _KINDS or kind == memory_pb2.MEMORY_KIND_UNSPECIFIED:
            v.add(f"filter.kinds[{position}]", f"unknown MemoryKind value {kind}")
    check_label(v, "filter.entity", flt.entity)
    for position, tag in enumerate(flt.tags):
        if not tag or _utf8_len(tag) > MAX_TAG_BYTES:
            v.add(f"filter.tags[{position}]", f"must be 1 to {MAX_TAG_BYTES} bytes")
    after = (
        check_timestamp(v, "filter.valid_from_after", flt.valid_from_after)
        if flt.HasField("valid_from_after")
        else -math.inf
    )
    before = (
        check_timestamp(v, "filter.valid_from_before", flt.valid_from_before)
        if flt.HasField("valid_from_before")
        else math.inf
    )
    if request.mode not in _MODES:
        v.add("mode", f"unknown RecallMode value {request.mode}")
    as_of = check_timestamp(v, "as_of", request.as_of) if request.HasField("as_of") else None
    turn = check_turn(v, "turn", request.HasField("turn"), request.turn)
    if not (math.isfinite(request.diversity) and 0.0 <= request.diversity < 1.0):
        v.add("diversity", f"{request.diversity} is outside [0, 1)")
    v.raise_if_any()
    query = RecallQuery(
        vector=vector if vector is not None else np.zeros(dimension, dtype=np.float32),
        text=request.query,
        diversity=request.diversity,
        peek=request.peek,
        k=k,
        namespace=namespace,
        kinds=frozenset(flt.kinds),
        entity=flt.entity,
        tags=frozenset(flt.tags),
        valid_from_after_s=after,
        valid_from_before_s=before,
        mode=request.mode or memory_service_pb2.RECALL_MODE_CURRENT,
        include_archived=request.include_archived,
        as_of_s=as_of,
        include_vectors=request.include_vectors,
        turn=turn,
    )
    return query, ("" if vector is not None else request.query)


def check_ids(v: Violations, field: str, ids: Iterable[int], max_count: int) -> list[int]:
    """A non-empty, bounded list of non-zero ids."""
    values = list(ids)
    if not values:
        v.add(field, "at least one id is required")
    elif len(values) > max_count:
        v.add(field, f"{len(values)} ids; at most {max_count} per call")
    elif any(i == 0 for i in values):
        v.add(field, "0 is not a memory id")
    return values


class DecodingInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Parses request messages itself: bytes that are not a valid message get INVALID_ARGUMENT naming it.

    gRPC's own deserialization answers a corrupt message, or a string field
    holding invalid UTF-8 (which another language's client can send), with
    INTERNAL "Exception deserializing request!". Install it outermost.
    """

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer
        method = handler_call_details.method

        def decode(raw: bytes) -> Any:
            try:
                return parse(raw)
            except Exception as exc:  # DecodeError, or whatever a corrupt message makes the parser raise
                raise InvalidArgument.field("request", f"not a valid request message for {method}: {exc}") from exc

        def decoded(raws: Iterator[bytes]) -> Iterator[Any]:
            for raw in raws:  # raising here ends the call through the servicer's error handling
                yield decode(raw)

        def first(raw: bytes, context: grpc.ServicerContext) -> Any:
            try:
                return decode(raw)
            except InvalidArgument as error:
                from .servicer import to_status  # the servicer imports this module

                context.abort_with_status(to_status(error))
                raise  # pragma: no cover - abort_with_status raises

        serialize = handler.response_serializer
        if handler.unary_unary is not None:
            uu = handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(lambda raw, ctx: uu(first(raw, ctx), ctx), None, serialize)
        if handler.unary_stream is not None:
            us = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(lambda raw, ctx: us(first(raw, ctx), ctx), None, serialize)
        if handler.stream_unary is not None:
            su = handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(lambda raws, ctx: su(decoded(raws), ctx), None, serialize)
        ss = handler.stream_stream
        if ss is None:
            return handler
        return grpc.stream_stream_rpc_method_handler(lambda raws, ctx: ss(decoded(raws), ctx), None, serialize)
