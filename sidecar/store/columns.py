"""The hot columns: per-memory metadata in NumPy arrays indexed by memory id.

Ids are dense (allocated 1, 2, 3, ...), so the id is the slot: filters and
kernels run over whole arrays with no Python object per memory. Strings that
filters compare (namespace, entity) are interned to small integers; tags are
kept only for the memories that have them.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from google.protobuf.timestamp_pb2 import Timestamp

from memevo.kernels.params import (
    CONFIDENCE_DECAY_HALF_LIFE,
    DEFAULT_COST_BUDGET_BYTES,
    HALF_LIFE,
    REBASE_EXPONENT,
    default_params,
)
from memevo.kernels.sweep import Terms, derive_terms
from memevo.sidecar.retrieval.answer_type import tells_time, value_type
from memevo.sidecar.store.snapshot import SnapshotError, SnapshotReader, SnapshotWriter
from memevo.v1 import memory_pb2

STATE_UNSPECIFIED = memory_pb2.MEMORY_STATE_UNSPECIFIED
STATE_ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
STATE_ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
STATE_CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
STATE_OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
STATE_EVICTED = memory_pb2.MEMORY_STATE_EVICTED

NO_CODE = -1


def _is_live(state: int) -> int:
    return int(state not in (STATE_UNSPECIFIED, STATE_EVICTED))


def live_mask(states: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.bool_]:
    """Per state code: whether a memory in it is stored and not evicted (an empty slot reads as UNSPECIFIED)."""
    return np.asarray((states != STATE_UNSPECIFIED) & (states != STATE_EVICTED), dtype=bool)


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

    def strings(self) -> list[str]:
        """Every string, in code order (a copy)."""
        return list(self._strings)

    @classmethod
    def of(cls, strings: Sequence[str]) -> Interner:
        """An interner holding ``strings`` as codes 0, 1, ... (ValueError on a repeat: codes would be ambiguous)."""
        interner = cls()
        interner._strings = list(strings)
        interner._codes = {text: code for code, text in enumerate(interner._strings)}
        if len(interner._codes) != len(interner._strings):
            raise ValueError("an interner's strings must be distinct")
        return interner


FIELD_SEPARATOR = "\x1f"


def about_entity(record: memory_pb2.Memory) -> str:
    """The entity a memory is about: the declared one, else the one its text names (perception's inference)."""
    return record.entity or record.inferred.entity


def field_key(record: memory_pb2.Memory) -> str:
    """A memory's structured fields as one string (entity, fact attribute, task signature); empty when none.

    The entity and attribute perception inferred for a plain-text statement count as declared ones: recall's
    structured evidence says which slot a question asks about, whatever form its statements took.
    """
    parts = (about_entity(record), record.fact.attribute or record.inferred.attribute, record.task_signature)
    return FIELD_SEPARATOR.join(parts) if any(parts) else ""


def field_attribute(key: str) -> str:
    """The fact attribute in a :func:`field_key` string ("" for none)."""
    parts = key.split(FIELD_SEPARATOR)
    return parts[1] if len(parts) > 1 else ""


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
    # A soft conflict: a newer memory may replace this one (recall ranks it as a demoted strategy).
    "doubted": (np.bool_, False),
    "successes": (np.float32, 0.0),
    "failures": (np.float32, 0.0),
    "framework": (np.int32, NO_CODE),
    "importance": (np.uint8, 0),
    # Recall's structured evidence (retrieval/recall.py): a strategy's task signature, and the memory's
    # structured fields (entity, fact attribute, task signature) as one interned combination.
    "signature": (np.int32, NO_CODE),
    "fields": (np.int32, NO_CODE),
    # The shape of a fact's value (retrieval/answer_type.py ValueType): a URL, a date, a name...
    "value_type": (np.uint8, 0),
    # Whether the memory's text says when (a date, "yesterday", "last week"): what a "when" question's answer does.
    "tells_time": (np.bool_, False),
    "content_bytes": (np.uint32, 0),
    "stored_bytes": (np.uint32, 0),
    "created_turn": (np.float64, np.nan),
    "state_since": (np.float64, np.nan),
    "state_since_turn": (np.float64, np.nan),
    "uniqueness": (np.float32, np.nan),
    # The sweep's compact columns (kernels/sweep.py): float32 terms anchored at ``epoch`` under the current policy,
    # and float32 time offsets from ``epoch`` in the clock the policy runs on. Derived from the columns above when
    # those change, and all of them again when the policy or the anchor changes (``rebase``).
    "acc_base": (np.float32, 0.0),
    "conf_term": (np.float32, 0.0),
    "rel_term": (np.float32, 0.0),
    "static": (np.float32, 0.0),
    "since": (np.float32, np.nan),
    "below": (np.float32, np.nan),
    "near": (np.uint8, 0),
}
HOT_COLUMNS = (
    *("state", "kind", "acc_base", "conf_term", "rel_term", "static", "since", "below", "near"),
    *("namespace", "entity", "valid_from", "valid_to"),
)
"""The columns a sweep (kernels/sweep.py) or a recall filter scans; the others are read per record only."""
HOT_BYTES_PER_MEMORY = sum(np.dtype(_COLUMN_SPECS[name][0]).itemsize for name in HOT_COLUMNS)
ALL_BYTES_PER_MEMORY = sum(np.dtype(dtype).itemsize for dtype, _ in _COLUMN_SPECS.values())
REBASE_AFTER = {"wall": 7 * 86_400.0, "turns": 1_000_000.0}
"""How far (clock units) now may move from the epoch before the time offsets are rebased on it.

A float32 offset x is exact to |x| * 2**-24: within 7 days of the epoch that is 0.03 s, and a time 10
years back still resolves to 16 s. Turn offsets are exact integers up to 2**24 turns from the epoch. The
decay terms need a rebase sooner when a half-life is short: see ``needs_rebase``."""
SNAPSHOT_ROOM_ROWS = 4_096
"""Rows :meth:`MemoryColumns.prepare_snapshot` adds for writes between it and the copy (at least 1/64 more)."""
SNAPSHOT_PREPARE_BYTES = 8 << 20
"""Bytes of a snapshot's copy touched between two looks at a stop (``prepare_snapshot``): a few ms on a free core."""
# Bytes a memory costs besides its text and vector: record fields, keys, index entries.
RECORD_OVERHEAD_BYTES = 256


class MemoryColumns:
    """Structure-of-arrays metadata of every memory, slot = id.

    Writers (the holder of the store's commit lock) hold the lock while appending or changing a
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
    doubted: npt.NDArray[np.bool_]
    """Whether a newer memory may replace it (``possibly_outdated_by``): recall ranks it lower."""
    successes: npt.NDArray[np.float32]
    failures: npt.NDArray[np.float32]
    framework: npt.NDArray[np.int32]
    importance: npt.NDArray[np.uint8]
    signature: npt.NDArray[np.int32]
    """A strategy's task signature (code in ``signatures``); NO_CODE for other kinds or none."""
    fields: npt.NDArray[np.int32]
    """The memory's structured fields (code in ``field_sets``, see :func:`field_key`); NO_CODE when it has none."""
    value_type: npt.NDArray[np.uint8]
    """The shape of the fact's value (a ``ValueType``); NONE (0) without a value."""
    tells_time: npt.NDArray[np.bool_]
    """Whether the memory's text says when something happened or will (see ``answer_type.tells_time``)."""
    content_bytes: npt.NDArray[np.uint32]
    stored_bytes: npt.NDArray[np.uint32]
    """Text + vector + overhead: the cost term's numerator."""
    created_turn: npt.NDArray[np.float64]
    """The agent's turn at write; NaN when none was given."""
    state_since: npt.NDArray[np.float64]
    """System time (epoch s) the current state was entered."""
    state_since_turn: npt.NDArray[np.float64]
    uniqueness: npt.NDArray[np.float32]
    """1 - similarity to the nearest other memory of its entity; NaN when unmeasured. Not persisted."""
    acc_base: npt.NDArray[np.float32]
    """The part of accuracy that does not decay (kernels/sweep.py), under ``params``."""
    conf_term: npt.NDArray[np.float32]
    """The decaying part of accuracy at ``epoch`` (kernels/sweep.py)."""
    rel_term: npt.NDArray[np.float32]
    """Relevance decay at ``epoch``: 2**-((epoch - last use) / half_life) (kernels/sweep.py)."""
    static: npt.NDArray[np.float32]
    """The time-independent value terms: use count, utility, cost (kernels/sweep.py)."""
    since: npt.NDArray[np.float32]
    """When the current state was entered, offset from ``epoch`` in ``clock`` units; NaN = unknown."""
    below: npt.NDArray[np.float32]
    """When the value first fell below the eviction threshold, offset from ``epoch``; NaN when not. Not persisted."""
    near: npt.NDArray[np.uint8]
    """1 when the last sweep found the memory close to a threshold (the daemon's frequent tier)."""

    def __init__(self, capacity: int = 1024, *, vector_bytes: int = 0) -> None:
        self.lock = threading.Lock()
        self.namespaces = Interner()
        self.entities = Interner()
        self.frameworks = Interner()
        self.signatures = Interner()
        self.field_sets = Interner()
        """Distinct field combinations (few: entities x attributes), so a column of codes describes every memory."""
        self.tags: dict[int, frozenset[str]] = {}
        self.vector_bytes = vector_bytes
        self.accessed: set[int] = set()
        self._by_namespace: dict[int, array[int]] = {}
        self._by_entity: dict[int, array[int]] = {}
        """Ids whose access statistics changed since the last checkpoint."""
        self._size = 1  # slot 0 is never a memory
        self._live = 0
        self.clock = "wall"
        """The clock of the offset columns: "wall" (seconds) or "turns"."""
        self.epoch = 0.0
        """What offset 0 means on that clock (epoch seconds or a turn), and the decay terms' anchor; see ``rebase``."""
        self.params = default_params("wall")
        """The policy matrix the terms were derived under (kernels/params.py); changed by ``rebase``."""
        self.cost_budget_bytes = DEFAULT_COST_BUDGET_BYTES
        """The cost budget the terms were derived under."""
        self.writes = 0
        """Rows written by set_record since start (the daemon sweeps its frequent tier every N writes)."""
        self._snapshot_buffers: dict[str, npt.NDArray[Any]] = {}
        """Memory for the next snapshot's copy of the columns, touched in advance (see ``prepare_snapshot``)."""
        self._allocate(max(capacity, 16))

    def _allocate(self, capacity: int) -> None:
        for name, (dtype, fill) in _COLUMN_SPECS.items():
            column = np.full(capacity, fill, dtype=dtype)
            old = getattr(self, name, None)
            if old is not None:
                column[: old.shape[0]] = old
            setattr(self, name, column)

    _INTERNERS = ("namespaces", "entities", "frameworks", "signatures", "field_sets")
    _SCALARS: ClassVar[dict[str, type | tuple[type, ...]]] = {
        "vector_bytes": int,
        "_size": int,
        "_live": int,
        "clock": str,
        "epoch": (int, float),
        "cost_budget_bytes": (int, float),
        "writes": int,
    }

    def reserve(self, rows: int) -> None:
        """Room for ids below ``rows`` at once (a start that scans every record), instead of doubling as they come."""
        with self.lock:
            if rows > self.state.shape[0]:
                self._allocate(rows)

    def prepare_snapshot(self, cancelled: Callable[[], bool] | None = None) -> bool:
        """Allocate and touch the memory :meth:`save_snapshot` copies the columns into, before the caller keeps
        writers out: at 1M memories, first touching ~120 MB of fresh pages took 0.3 s of a 0.32 s copy.

        False, keeping nothing, when ``cancelled()`` turned true between two pieces of SNAPSHOT_PREPARE_BYTES: beside
        CPU-bound jobs preparing took up to 3.4 s of a 1M stop before a stop past its deadline was first looked at.
        """
        self._snapshot_buffers = {}
        rows = self._size + max(SNAPSHOT_ROOM_ROWS, self._size // 64)
        buffers = {}
        for name, (dtype, _) in _COLUMN_SPECS.items():
            buffer = np.empty(rows, dtype=dtype)
            step = max(1, SNAPSHOT_PREPARE_BYTES // buffer.itemsize)
            for start in range(0, rows, step):
                if cancelled is not None and cancelled():
                    return False
                buffer[start : start + step].fill(0)  # written, so the pages are in place (np.zeros maps them lazily)
            buffers[name] = buffer
        self._snapshot_buffers = buffers
        return True

    def save_snapshot(self, writer: SnapshotWriter) -> None:
        """Copy every column, interner, id list and setting (start-up snapshot; the caller keeps writers out)."""
        with self.lock:  # recalls count accesses under it
            self._save_snapshot(writer)

    def _save_snapshot(self, writer: SnapshotWriter) -> None:
        buffers, self._snapshot_buffers = self._snapshot_buffers, {}
        for name in _COLUMN_SPECS:
            # The rows in use, not the capacity (up to twice as many): a load adds room of its own.
            column = getattr(self, name)[: self._size]
            buffer = buffers.get(name)
            if buffer is not None and buffer.shape[0] >= column.shape[0]:
                np.copyto(buffer[: column.shape[0]], column)
                writer.own(name, buffer[: column.shape[0]])
            else:
                writer.ndarray(name, column)
        writer.ndarray("params", self.params)
        for name in self._INTERNERS:
            writer.value(name, getattr(self, name).strings())
        for name in self._SCALARS:
            writer.value(name, getattr(self, name))
        tagged = sorted(self.tags)
        writer.ndarray("tagged", np.asarray(tagged, dtype=np.int64))
        writer.value("tags", [sorted(self.tags[memory_id]) for memory_id in tagged])
        writer.ndarray("accessed", np.asarray(sorted(self.accessed), dtype=np.int64))
        for name, lists in (("by_namespace", self._by_namespace), ("by_entity", self._by_entity)):
            writer.ndarray(name + ".codes", np.asarray(list(lists), dtype=np.int64))
            writer.growing_array_list(name, list(lists.values()), "Q")  # ids are only ever appended

    @classmethod
    def load_snapshot(cls, reader: SnapshotReader) -> MemoryColumns:
        """Columns as :meth:`save_snapshot` wrote them; SnapshotError when the parts do not fit together."""
        columns = cls(16)
        for name in cls._INTERNERS:
            try:
                setattr(columns, name, Interner.of(reader.strings(name)))
            except ValueError as exc:
                raise SnapshotError(f"snapshot interner {name}: {exc}") from exc
        for name, kind in cls._SCALARS.items():
            setattr(columns, name, reader.value(name, kind))
        capacity = -1
        for name, (dtype, _) in _COLUMN_SPECS.items():
            column = reader.ndarray(name, dtype)
            capacity = column.shape[0] if capacity < 0 else capacity
            if column.shape[0] != capacity:
                raise SnapshotError(f"snapshot column {name} holds {column.shape[0]} rows, not {capacity}")
            setattr(columns, name, column)
        if not 1 <= columns._size <= capacity or columns.clock not in REBASE_AFTER:
            raise SnapshotError(f"snapshot columns: size {columns._size} of {capacity}, clock {columns.clock!r}")
        # Room for the writes to come: a snapshot holds the rows in use only, and growing past them later doubles
        # every column at once (0.7 s at 1M memories, in a write or in the start's catch-up).
        headroom = capacity + max(SNAPSHOT_ROOM_ROWS, capacity // 8)
        for name, (dtype, fill) in _COLUMN_SPECS.items():
            column = getattr(columns, name)
            grown = np.empty(headroom, dtype=dtype)
            grown[:capacity] = column
            grown[capacity:] = fill
            setattr(columns, name, grown)
        columns.epoch = float(columns.epoch)
        columns.cost_budget_bytes = float(columns.cost_budget_bytes)
        columns.params = reader.ndarray("params", np.float64, ndim=2)
        tagged = reader.ndarray("tagged", np.int64).tolist()
        tags = reader.value("tags", list)
        if len(tags) != len(tagged):
            raise SnapshotError("snapshot tags do not fit their ids")
        columns.tags = {memory_id: frozenset(map(str, names)) for memory_id, names in zip(tagged, tags, strict=True)}
        columns.accessed = set(reader.ndarray("accessed", np.int64).tolist())
        for name, attribute in (("by_namespace", "_by_namespace"), ("by_entity", "_by_entity")):
            codes = reader.ndarray(name + ".codes", np.int64).tolist()
            lists = reader.array_list(name, "Q")
            if len(codes) != len(lists):
                raise SnapshotError(f"snapshot {name} lists do not fit their codes")
            setattr(columns, attribute, dict(zip(codes, lists, strict=True)))
        return columns

    @property
    def size(self) -> int:
        """One past the highest id stored."""
        return self._size

    @property
    def live_count(self) -> int:
        """Memories stored and not evicted (kept up to date by set_record and set_state)."""
        return self._live

    def _count_change(self, before: int, after: int) -> None:
        self._live += _is_live(after) - _is_live(before)

    def set_record(self, record: memory_pb2.Memory) -> None:
        """Write (or overwrite) the row of ``record.id`` from the stored record."""
        self.set_records([record])

    def set_records(self, records: Sequence[memory_pb2.Memory]) -> None:
        """:meth:`set_record` for many records under one lock, with their sweep terms derived in one call.

        A streamed chunk writes hundreds of rows at once; deriving them one by one was a kernel call each.
        """
        if not records:
            return
        records = list({r.id: r for r in records}.values())  # one row per id: the last record wins
        with self.lock:
            for record in records:
                self._set_raw(record)
            rows = np.fromiter((r.id for r in records), dtype=np.int64, count=len(records))
            self.since[rows] = (self._since(rows) - self.epoch).astype(np.float32)
            self._refresh(rows, time.time())
            self.writes += len(records)
            # States last: a row becomes visible to filters only once it is complete.
            for record in records:
                memory_id = record.id
                self._count_change(int(self.state[memory_id]), record.state)
                self.state[memory_id] = record.state
                self._size = max(self._size, memory_id + 1)

    def _set_raw(self, record: memory_pb2.Memory) -> None:
        """Every column of ``record.id`` but the state and the derived terms (lock held)."""
        memory_id = record.id
        if memory_id >= self.state.shape[0]:
            capacity = self.state.shape[0]
            while capacity <= memory_id:
                capacity *= 2
            self._allocate(capacity)
        new_row = self.state[memory_id] == STATE_UNSPECIFIED
        self.kind[memory_id] = record.kind
        self.namespace[memory_id] = self.namespaces.code(record.namespace)
        entity = about_entity(record)
        had_entity = not new_row and self.entity[memory_id] != NO_CODE
        self.entity[memory_id] = self.entities.code(entity) if entity else NO_CODE
        if new_row:  # ids never change namespace, nor entity once they have one: list each once
            self._by_namespace.setdefault(int(self.namespace[memory_id]), array("Q")).append(memory_id)
        if entity and not had_entity:  # new, or a text that named an entity before it was declared (perception)
            self._by_entity.setdefault(int(self.entity[memory_id]), array("Q")).append(memory_id)
        self.framework[memory_id] = self.frameworks.code(record.framework_version)
        self.valid_from[memory_id] = _seconds(record.valid_from)
        self.valid_to[memory_id] = _seconds(record.valid_to) if record.HasField("valid_to") else np.nan
        self.recorded_at[memory_id] = _seconds(record.recorded_at)
        self.confidence[memory_id] = record.confidence
        self.inconsistency[memory_id] = record.inconsistency
        self.doubted[memory_id] = record.possibly_outdated_by != 0
        self.successes[memory_id] = record.successes
        self.failures[memory_id] = record.failures
        self.importance[memory_id] = record.importance
        is_strategy = record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature
        self.signature[memory_id] = self.signatures.code(record.task_signature) if is_strategy else NO_CODE
        fields = field_key(record)
        self.fields[memory_id] = self.field_sets.code(fields) if fields else NO_CODE
        self.value_type[memory_id] = value_type(record.fact.value or record.inferred.value)
        if new_row:  # a memory's text never changes: classified once (9 µs, not on every state change)
            self.tells_time[memory_id] = tells_time(record.content)
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

    def set_state(self, memory_id: int, state: int, *, valid_to: float | None = None) -> None:
        """Change one memory's state (and validity end)."""
        with self.lock:
            self._count_change(int(self.state[memory_id]), state)
            self.state[memory_id] = state
            if valid_to is not None:
                self.valid_to[memory_id] = valid_to
            if state == STATE_EVICTED:
                self.tags.pop(memory_id, None)

    def record_access(self, ids: npt.NDArray[np.int64], now_s: float, turn: int | None) -> None:
        """Count one access of each id (recall returned it)."""
        if ids.size == 0:
            return
        listed = ids.tolist()
        with self.lock:
            # np.add.at runs its loop without the interpreter lock (numpy's ufunc.at), and getting it back under
            # this lock made the other recalls queue here: with 8 concurrent recalls 22 % of the acquisitions found
            # it taken and waited 8.5 ms on average (issue 28). Indexing of a few hundred items keeps the
            # interpreter lock; the count is add.at's for distinct ids, which a recall's are.
            if len(set(listed)) == len(listed):
                self.access_count[ids] += 1
            else:
                np.add.at(self.access_count, ids, 1)
            self.last_access_at[ids] = now_s
            if turn is not None:
                self.last_access_turn[ids] = turn
            self._refresh(ids.astype(np.int64, copy=False), now_s)
            self.accessed.update(listed)

    def terms(self) -> Terms:
        """The four term columns (full capacity; slice them to ``size``)."""
        return Terms(self.acc_base, self.conf_term, self.rel_term, self.static)

    def _latest(self, now_s: float) -> float:
        """Latest time a term may count from (kernels/sweep.py): now on the wall clock; turns never run ahead."""
        return now_s if self.clock == "wall" else math.inf

    def _refresh(self, ids: npt.NDArray[np.int64], now_s: float) -> None:
        """Re-derive the terms of ``ids`` (valid slots) under the current basis (lock held)."""
        derive_terms(
            self.kind,
            self.confidence,
            self.inconsistency,
            self.successes,
            self.failures,
            self.access_count,
            self.importance,
            self.content_bytes,
            self.uniqueness,
            self.stored_bytes,
            self._touched(ids),
            anchor=self.epoch,
            params=self.params,
            cost_budget_bytes=self.cost_budget_bytes,
            latest=self._latest(now_s),
            rows=ids,
            out=self.terms(),
            check=False,  # our own columns and ids: the checks would cost more than the refresh
        )

    def _touched(self, rows: slice | npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Decay reference time of ``rows`` on the current clock: last access, else creation (NaN = none)."""
        if self.clock == "wall":
            last = self.last_access_at[rows]
            return np.where(np.isfinite(last), last, self.recorded_at[rows])
        last_turn = self.last_access_turn[rows]
        return np.where(last_turn > 0, last_turn.astype(np.float64), self.created_turn[rows])

    def _since(self, rows: slice | npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self.state_since[rows] if self.clock == "wall" else self.state_since_turn[rows]

    def needs_rebase(self, clock: str, now: float, params: npt.NDArray[np.float64], cost_budget_bytes: float) -> bool:
        """Whether the terms must be re-derived before a sweep at ``now`` on ``clock`` under this policy.

        Yes when the clock, policy or budget changed, when now is before the anchor, more than
        REBASE_AFTER past it (offset precision) or more than REBASE_EXPONENT of the shortest half-life
        past it (the sweep's per-kind factors must stay normal float32; kernels/params.py).
        """
        elapsed = now - self.epoch
        shortest = float(params[:, [HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE]].min())
        return (
            clock != self.clock
            or cost_budget_bytes != self.cost_budget_bytes
            or params.shape != self.params.shape
            or not np.array_equal(params, self.params)
            or not 0.0 <= elapsed <= min(REBASE_AFTER[clock], REBASE_EXPONENT * shortest)
        )

    def rebase(self, clock: str, epoch: float, params: npt.NDArray[np.float64], cost_budget_bytes: float) -> None:
        """Anchor the offsets and terms at ``epoch`` on ``clock`` under ``params``; O(n) and parallel, under the lock.

        The sweep calls it when ``needs_rebase``: a policy or time-mode change, or now drifting away from
        the anchor. ``below`` (no float64 twin) is shifted when only the anchor moves and cleared on a
        clock change (the next sweep starts the grace period again). About 0.1 s per million memories;
        writers wait meanwhile.
        """
        if clock not in REBASE_AFTER:
            raise ValueError(f"clock must be 'wall' or 'turns', not {clock!r}")
        with self.lock:
            n = self._size
            if clock == self.clock:
                self.below[:n] = (self.below[:n].astype(np.float64) + (self.epoch - epoch)).astype(np.float32)
            else:
                self.below[:n] = np.nan
            self.clock = clock
            self.epoch = float(epoch)
            self.params = np.array(params, dtype=np.float64, copy=True)
            self.cost_budget_bytes = float(cost_budget_bytes)
            rows = slice(0, n)
            self.since[rows] = (self._since(rows) - self.epoch).astype(np.float32)
            derive_terms(
                self.kind[rows],
                self.confidence[rows],
                self.inconsistency[rows],
                self.successes[rows],
                self.failures[rows],
                self.access_count[rows],
                self.importance[rows],
                self.content_bytes[rows],
                self.uniqueness[rows],
                self.stored_bytes[rows],
                self._touched(rows),
                anchor=self.epoch,
                params=self.params,
                cost_budget_bytes=self.cost_budget_bytes,
                latest=self._latest(time.time()),
                out=Terms(*(column[rows] for column in self.terms())),
            )

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

    def namespace_count(self, code: int) -> int:
        """How many ids were ever stored in a namespace (evicted ones included), without copying them."""
        with self.lock:
            ids = self._by_namespace.get(code)
            return len(ids) if ids else 0

    def entity_ids(self, code: int, *, newest: int = 0) -> npt.NDArray[np.int64]:
        """Every id ever stored about an entity (any namespace, evicted ones included), in the order stored; only
        the last ``newest`` when given (0 = all), copied without copying the rest."""
        with self.lock:
            ids = self._by_entity.get(code)
            if not ids:
                return np.zeros(0, dtype=np.int64)
            held = np.frombuffer(ids, dtype=np.uint64)
            return (held[-newest:] if newest else held).astype(np.int64)

    def live_ids(self) -> npt.NDArray[np.int64]:
        """Ids of every memory that is not evicted."""
        n = self._size
        state = self.state[:n]
        return np.flatnonzero(live_mask(state)).astype(np.int64)

    def count_by_state_kind(self) -> dict[tuple[int, int], int]:
        """Counts of stored memories per (state, kind), evicted ones excluded."""
        n = self._size
        state = self.state[:n].astype(np.int64)
        kind = self.kind[:n].astype(np.int64)
        live = live_mask(state)
        cells = state[live] * 16 + kind[live]
        values, counts = np.unique(cells, return_counts=True)
        return {(int(v) // 16, int(v) % 16): int(c) for v, c in zip(values, counts, strict=True)}
