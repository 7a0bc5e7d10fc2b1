"""Domain objects the layers exchange: validated inputs and queries, free of protobuf."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from google.protobuf.timestamp_pb2 import Timestamp

from memevo.v1 import memory_pb2, memory_service_pb2

if TYPE_CHECKING:
    from .idempotency import RequestKey

DEFAULT_NAMESPACE = "default"


def now_s() -> float:
    """System time, epoch seconds."""
    return time.time()


_MIN_TIMESTAMP_S = -62_135_596_800
_MAX_TIMESTAMP_S = 253_402_300_799
"""A protobuf Timestamp's range: 0001-01-01 to 9999-12-31 (UTC)."""


def _timestamp_parts(epoch_s: float) -> tuple[int, int]:
    """(seconds, nanos) of epoch seconds at microsecond precision; ValueError outside a Timestamp's range."""
    # What Timestamp.FromMicroseconds computes, without its pure-Python detour (three per written memory).
    seconds, micros = divmod(round(epoch_s * 1_000_000), 1_000_000)
    if not _MIN_TIMESTAMP_S <= seconds <= _MAX_TIMESTAMP_S:
        raise ValueError(f"Timestamp is not valid: seconds {seconds} outside years 1 to 9999")
    return seconds, micros * 1_000


def to_timestamp(epoch_s: float) -> Timestamp:
    """Epoch seconds to a protobuf Timestamp (microsecond precision)."""
    seconds, nanos = _timestamp_parts(epoch_s)
    return Timestamp(seconds=seconds, nanos=nanos)


def set_timestamp(stamp: Timestamp, epoch_s: float) -> None:
    """Set ``stamp`` (a record's field) to what :func:`to_timestamp` gives, without building a message to copy."""
    stamp.seconds, stamp.nanos = _timestamp_parts(epoch_s)


def from_timestamp(stamp: Timestamp) -> float:
    """A protobuf Timestamp to epoch seconds."""
    return stamp.seconds + stamp.nanos / 1e9


@dataclass(frozen=True, kw_only=True)
class NewMemory:
    """A validated memory to store; ``vector`` is None when the sidecar must embed ``content``."""

    content: str
    vector: npt.NDArray[np.float32] | None
    namespace: str = DEFAULT_NAMESPACE
    kind: memory_pb2.MemoryKind.ValueType = memory_pb2.MEMORY_KIND_EPISODE
    entity: str = ""
    topic: str = ""
    fact_attribute: str = ""
    fact_value: str = ""
    source: memory_pb2.MemorySource.ValueType = memory_pb2.MEMORY_SOURCE_AGENT_INFERENCE
    confidence: float | None = None
    importance: int = 0
    tags: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    valid_from_s: float | None = None
    """World time it became true; None = now."""
    framework_version: str | None = None
    """None = the sidecar's current declared version."""
    reasoning_ids: tuple[int, ...] = ()
    reasoning_text: str = ""
    task_signature: str = ""
    request: RequestKey | None = None
    """Per-item idempotency key (Remember, streams); None when the item has no request id."""


@dataclass(frozen=True, kw_only=True)
class RecallQuery:
    """A validated recall: unit query vector, filters and mode."""

    vector: npt.NDArray[np.float32]
    text: str = ""
    """The query's words for the lexical signal; empty when only a vector was given."""
    k: int = 10
    namespace: str = DEFAULT_NAMESPACE
    kinds: frozenset[memory_pb2.MemoryKind.ValueType] = frozenset()
    entity: str = ""
    tags: frozenset[str] = frozenset()
    valid_from_after_s: float = -math.inf
    valid_from_before_s: float = math.inf
    mode: memory_service_pb2.RecallMode.ValueType = memory_service_pb2.RECALL_MODE_CURRENT
    include_archived: bool = False
    as_of_s: float | None = None
    include_vectors: bool = False
    turn: int | None = None
    diversity: float = 0.0
    """MMR trade-off in [0, 1): 0 ranks by score alone; higher values push near-duplicates down."""
    peek: bool = False
    """Look without using: no access is counted, no turn noted and no retrieval recorded (RecallRequest.peek)."""


@dataclass(frozen=True)
class Hit:
    """One recalled memory with its similarity, score and reading hint."""

    memory: memory_pb2.Memory
    similarity: float
    score: float
    hint: str
    breakdown: memory_service_pb2.ScoreBreakdown | None = None
    """The terms ``score`` was computed from; None where the caller ranked without them."""
