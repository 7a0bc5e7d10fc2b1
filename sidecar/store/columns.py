"""The hot columns: per-memory metadata in NumPy arrays indexed by memory id.

Ids are dense (allocated 1, 2, 3, ...), so the id is the slot: filters and
kernels run over whole arrays with no Python object per memory. Strings that
filters compare (namespace, entity) are interned to small integers; tags are
kept only for the memories that have them.
"""

from __future__ import annotations

import threading
from array import array

import numpy as np
import numpy.typing as npt
from google.protobuf.timestamp_pb2 import Timestamp

from memevo.v1 import memory_pb2

STATE_UNSPECIFIED = memory_pb2.MEMORY_STATE_UNSPECIFIED
STATE_ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
STATE_ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
STATE_CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
STATE_OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
STATE_EVICTED = memory_pb2.MEMORY_STATE_EVICTED

NO_CODE = -1


def _seconds(stamp: Timestamp) -> float:
    return stamp.seconds + stamp.nanos / 1e9


class Interner:
    """Maps strings to dense int32 codes and back; code -1 means "absent"."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._strings: list[str] = []

    def code(self, text: str) -> int:
        """The code of ``text``, allocating one if new."""
        found = self._codes.get(text)
        if found is None:
            found = len(self._strings)
            self._codes[text] = found
            self._strings.append(text)
        return found

    def lookup(self, text: str) -> int:
        """The code of ``text`` or NO_CODE if it was never seen."""
        return self._codes.get(text, NO_CODE)

    def __len__(self) -> int:
        return len(self._strings)

    def string(self, code: int) -> str:
        """The string of ``code``."""
        return self._strings[code]


# name -> (dtype, value of an empty slot)
_COLUMN_SPECS: dict[str, tuple[type[np.generic], float]] = {
    "state": (np.uint8, 0),
    "kind": (np.uint8, 0),
    "namespace": (np.int32, NO_CODE),
    "entity": (np.int32, NO_CODE),
    "valid_from": (np.float64, np.nan),
    "valid_to": (np.float64, np.nan),
    "recorded_at": (np.float64, np.nan),
    "access_count": (np.uint32, 0),
    "last_access_at": (np.float64, np.nan),
    "last_access_turn": (np.int64, 0),
    "confidence": (np.float32, 0.0),
    "inconsistency": (np.float32, 0.0),
    "successes": (np.float32, 0.0),
    "failures": (np.float32, 0.0),
    "framework": (np.int32, NO_CODE),
    "importance": (np.uint8, 0),
    "content_bytes": (np.uint32, 0),
    "stored_bytes": (np.uint32, 0),
    "created_turn": (np.float64, np.nan),
    "state_since": (np.float64, np.nan),
    "state_since_turn": (np.float64, np.nan),
    "below_since": (np.float64, np.nan),
    "uniqueness": (np.float32, np.nan),
    "value": (np.float32, np.nan),
}
# Bytes a memory costs besides its text and vector: record fields, keys, index entries.
RECORD_OVERHEAD_BYTES = 256


class MemoryColumns:
    """Structure-of-arrays metadata of every memory, slot = id.

    Writers (the committer thread) hold the lock while appending or changing a
    row; readers take a consistent view of the row count and read arrays
    without the lock (a row is fully written before the count includes it).
    """

    state: npt.NDArray[np.uint8]
    kind: npt.NDArray[np.uint8]
    namespace: npt.NDArray[np.int32]
    entity: npt.NDArray[np.int32]
    valid_from: npt.NDArray[np.float64]
    """World time (epoch seconds) the memory became true."""
    valid_to: npt.NDArray[np.float64]
    """World time it stopped being true; NaN while it still is."""
    recorded_at: npt.NDArray[np.float64]
    access_count: npt.NDArray[np.uint32]
    last_access_at: npt.NDArray[np.float64]
    last_access_turn: npt.NDArray[np.int64]
    confidence: npt.NDArray[np.float32]
    inconsistency: npt.NDArray[np.float32]
    successes: npt.NDArray[np.float32]
    failures: npt.NDArray[np.float32]
    framework: npt.NDArray[np.int32]
    importance: npt.NDArray[np.uint8]
    content_bytes: npt.NDArray[np.uint32]
    stored_bytes: npt.NDArray[np.uint32]
    """Text + vector + overhead: the cost term's numerator."""
    created_turn: npt.NDArray[np.float64]
    """The agent's turn at write; NaN when none was given."""
    state_since: npt.NDArray[np.float64]
    """System time (epoch s) the current state was entered."""
    state_since_turn: npt.NDArray[np.float64]
    below_since: npt.NDArray[np.float64]
    """When the value first fell below the eviction threshold (clock units); NaN when not below. Not persisted."""
    uniqueness: npt.NDArray[np.float32]
    """1 - similarity to the nearest other memory of its entity; NaN when unmeasured. Not persisted."""
    value: npt.NDArray[np.float32]
    """V at the last sweep; NaN before the first."""

    def __init__(self, capacity: int = 1024, *, vector_bytes: int = 0) -> None:
        self.lock = threading.Lock()
        self.namespaces = Interner()
        self.entities = Interner()
        self.frameworks = Interner()
        self.tags: dict[int, frozenset[str]] = {}
        self.vector_bytes = vector_bytes
        self.accessed: set[int] = set()
        self._by_namespace: dict[int, array[int]] = {}
        self._by_entity: dict[int, array[int]] = {}
        """Ids whose access statistics changed since the last checkpoint."""
        self._size = 1  # slot 0 is never a memory
        self._allocate(max(capacity, 16))

    def _allocate(self, capacity: int) -> None:
        for name, (dtype, fill) in _COLUMN_SPECS.items():
            column = np.full(capacity, fill, dtype=dtype)
            old = getattr(self, name, None)
            if old is not None:
                column[: old.shape[0]] = old
            setattr(self, name, column)

    @property
    def size(self) -> int:
        """One past the highest id stored."""
        return self._size

    def set_record(self, record: memory_pb2.Memory) -> None:
        """Write (or overwrite) the row of ``record.id`` from the stored record."""
        memory_id = record.id
        with self.lock:
            if memory_id >= self.state.shape[0]:
                capacity = self.state.shape[0]
                while capacity <= memory_id:
                    capacity *= 2
                self._allocate(capacity)
            new_row = self.state[memory_id] == STATE_UNSPECIFIED
            self.kind[memory_id] = record.kind
            self.namespace[memory_id] = self.namespaces.code(record.namespace)
            self.entity[memory_id] = self.entities.code(record.entity) if record.entity else NO_CODE
            if new_row:  # ids never change namespace or entity: list each once
                self._by_namespace.setdefault(int(self.namespace[memory_id]), array("Q")).append(memory_id)
                if record.entity:
                    self._by_entity.setdefault(int(self.entity[memory_id]), array("Q")).append(memory_id)
            self.framework[memory_id] = self.frameworks.code(record.framework_version)
            self.valid_from[memory_id] = _seconds(record.valid_from)
            self.valid_to[memory_id] = _seconds(record.valid_to) if record.HasField("valid_to") else np.nan
            self.recorded_at[memory_id] = _seconds(record.recorded_at)
            self.confidence[memory_id] = record.confidence
            self.inconsistency[memory_id] = record.inconsistency
            self.successes[memory_id] = record.successes
            self.failures[memory_id] = record.failures
            self.importance[memory_id] = record.importance
            content_bytes = len(record.content.encode())
            self.content_bytes[memory_id] = content_bytes
            self.stored_bytes[memory_id] = content_bytes + self.vector_bytes + RECORD_OVERHEAD_BYTES
            self.created_turn[memory_id] = record.turn if record.turn else np.nan
            self.state_since[memory_id] = (
                _seconds(record.state_since) if record.HasField("state_since") else _seconds(record.recorded_at)
            )
            self.state_since_turn[memory_id] = (
                record.state_since_turn if record.state_since_turn else (record.turn or np.nan)
            )
            # Access statistics live here first; the record holds the last checkpoint.
            self.access_count[memory_id] = max(int(self.access_count[memory_id]), record.access_count)
            if record.HasField("last_access_at"):
                last = _seconds(record.last_access_at)
                current = self.last_access_at[memory_id]
                self.last_access_at[memory_id] = last if np.isnan(current) else max(current, last)
            self.last_access_turn[memory_id] = max(int(self.last_access_turn[memory_id]), record.last_access_turn)
            tag_set = frozenset(record.tags)
            if tag_set:
                self.tags[memory_id] = tag_set
            else:
                self.tags.pop(memory_id, None)
            # State last: a row becomes visible to filters only once it is complete.
            self.state[memory_id] = record.state
            self._size = max(self._size, memory_id + 1)

    def set_state(self, memory_id: int, state: int, *, valid_to: float | None = None) -> None:
        """Change one memory's state (and validity end)."""
        with self.lock:
            self.state[memory_id] = state
            if valid_to is not None:
                self.valid_to[memory_id] = valid_to
            if state == STATE_EVICTED:
                self.tags.pop(memory_id, None)

    def record_access(self, ids: npt.NDArray[np.int64], now_s: float, turn: int | None) -> None:
        """Count one access of each id (recall returned it)."""
        if ids.size == 0:
            return
        with self.lock:
            np.add.at(self.access_count, ids, 1)
            self.last_access_at[ids] = now_s
            if turn is not None:
                self.last_access_turn[ids] = turn
            self.accessed.update(ids.tolist())

    def take_accessed(self) -> list[int]:
        """The ids accessed since the last call (for the statistics checkpoint)."""
        with self.lock:
            ids, self.accessed = sorted(self.accessed), set()
        return ids

    def namespace_ids(self, code: int) -> npt.NDArray[np.int64]:
        """Every id ever stored in a namespace (evicted ones included: filter by state)."""
        with self.lock:
            ids = self._by_namespace.get(code)
            return np.frombuffer(ids, dtype=np.uint64).astype(np.int64) if ids else np.zeros(0, dtype=np.int64)

    def entity_ids(self, code: int) -> npt.NDArray[np.int64]:
        """Every id ever stored about an entity (any namespace, evicted ones included)."""
        with self.lock:
            ids = self._by_entity.get(code)
            return np.frombuffer(ids, dtype=np.uint64).astype(np.int64) if ids else np.zeros(0, dtype=np.int64)

    def live_ids(self) -> npt.NDArray[np.int64]:
        """Ids of every memory that is not evicted."""
        n = self._size
        state = self.state[:n]
        return np.flatnonzero((state != STATE_UNSPECIFIED) & (state != STATE_EVICTED)).astype(np.int64)

    def count_by_state_kind(self) -> dict[tuple[int, int], int]:
        """Counts of stored memories per (state, kind), evicted ones excluded."""
        n = self._size
        state = self.state[:n].astype(np.int64)
        kind = self.kind[:n].astype(np.int64)
        live = (state != STATE_UNSPECIFIED) & (state != STATE_EVICTED)
        cells = state[live] * 16 + kind[live]
        values, counts = np.unique(cells, return_counts=True)
        return {(int(v) // 16, int(v) % 16): int(c) for v, c in zip(values, counts, strict=True)}
