"""Unit vectors of each entity's memories held in one block, for entity-filtered recall (issue 28).

"What do I know about this user?" is the most common agent query. Answered from RocksDB, an entity of a
thousand memories cost a thousand vector reads per recall (1.5 KB each, scattered), ~7 ms where the cosines
themselves take ~0.1 ms; from the HNSW graph, a usearch ``get`` per key. Here an entity's vectors sit in one
contiguous float32 block in the order the columns list its ids (``MemoryColumns.entity_ids``), read from
RocksDB once and then only extended: an entity's list only grows, and a memory's vector never changes (a new
version is a new memory), so an entry is never stale, only short.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .rocks import CF_VECTORS, RocksStore

IdArray = npt.NDArray[np.int64]
FloatMatrix = npt.NDArray[np.float32]
GROWTH = 1.25
"""A full entry's buffer is replaced by one this much larger than it needs, so that an entity written to between
recalls is not copied on every one."""


def read_unit_vectors(store: RocksStore, ids: IdArray, dimension: int) -> FloatMatrix:
    """Unit vectors of ``ids`` from RocksDB, one multi_get; a forgotten id's row is 0 (similarity 0).

    The one normalisation of stored vectors recall uses: cosines computed from these rows are the same
    numbers whichever caller read them.
    """
    packed = np.asarray(ids, dtype=">u8").tobytes()  # u64_key of each id, without a call per id
    raws = store.multi_get(CF_VECTORS, [packed[at : at + 8] for at in range(0, len(packed), 8)])
    zero = bytes(4 * dimension)
    joined = b"".join(r if r is not None else zero for r in raws)
    stored = np.frombuffer(joined, dtype="<f4").reshape(-1, dimension)
    norms = np.linalg.norm(stored, axis=1, keepdims=True)
    return np.asarray(stored / np.where(norms > 0, norms, 1.0), dtype=np.float32)


@dataclass
class _Entry:
    ids: IdArray
    """The entity's ids the block holds rows for (the first ``count`` of the buffer are set)."""
    vectors: FloatMatrix
    count: int

    @property
    def nbytes(self) -> int:
        return int(self.vectors.nbytes + self.ids.nbytes)


class EntityVectors:
    """Per entity, the unit vectors of its memories as one block, least recently used dropped past a byte budget.

    Thread-safe: a block handed out is never written again below the rows it had (appends go past them, and
    a full buffer is replaced, not resized), so a caller may read it without a lock.
    """

    def __init__(self, read: Callable[[IdArray], FloatMatrix], dimension: int, budget_bytes: int) -> None:
        """``read``: unit vectors of ids (rows in their order), e.g. :func:`read_unit_vectors` on the store."""
        self._read = read
        self._dimension = dimension
        self._budget = budget_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes the blocks hold now."""
        return self._bytes

    def block(self, entity: int, ids: IdArray) -> FloatMatrix | None:
        """Unit vectors of ``ids`` (the entity's whole current id list, in its order), one row each.

        None when the budget cannot hold them (the caller reads them otherwise). Rows already held are not read
        again; new ids at the list's end are read and appended.
        """
        need = int(ids.size) * (self._dimension * 4 + 8)
        if need > self._budget:
            return None
        with self._lock:
            entry = self._entries.get(entity)
            if entry is not None:
                self._entries.move_to_end(entity)
                held = min(entry.count, int(ids.size))
                if not np.array_equal(entry.ids[:held], ids[:held]):  # not this list's prefix: start again
                    self._drop(entity)
                    entry = None
                elif entry.count >= ids.size:
                    return entry.vectors[: ids.size]
            start = entry.count if entry is not None else 0
        fresh = self._read(ids[start:])  # outside the lock: other entities' recalls need not wait for RocksDB
        with self._lock:
            entry = self._entries.get(entity)
            if entry is None or entry.count < start or not np.array_equal(entry.ids[:start], ids[:start]):
                if start:  # dropped or replaced meanwhile (rare): the caller reads the vectors itself
                    return None
                self._drop(entity)
                entry = self._new_entry(entity, int(ids.size))
            have = entry.count  # another caller may have appended some of these rows meanwhile
            if have < ids.size:
                if ids.size > entry.vectors.shape[0]:
                    entry = self._grown(entity, entry, int(ids.size))
                entry.vectors[have : ids.size] = fresh[have - start :]
                entry.ids[have : ids.size] = ids[have:]
                entry.count = int(ids.size)
            self._evict()
            return entry.vectors[: ids.size] if self._entries.get(entity) is entry else None

    def _new_entry(self, entity: int, rows: int) -> _Entry:
        capacity = max(rows, 16)  # most entities are not written to between recalls: no room to spare at first
        entry = _Entry(np.empty(capacity, dtype=np.int64), np.empty((capacity, self._dimension), dtype=np.float32), 0)
        self._entries[entity] = entry
        self._bytes += entry.nbytes
        return entry

    def _grown(self, entity: int, entry: _Entry, rows: int) -> _Entry:
        capacity = max(int(rows * GROWTH), 16)
        grown = _Entry(
            np.empty(capacity, dtype=np.int64), np.empty((capacity, self._dimension), dtype=np.float32), entry.count
        )
        grown.ids[: entry.count] = entry.ids[: entry.count]
        grown.vectors[: entry.count] = entry.vectors[: entry.count]
        self._bytes += grown.nbytes - entry.nbytes
        self._entries[entity] = grown
        return grown

    def _drop(self, entity: int) -> None:
        entry = self._entries.pop(entity, None)
        if entry is not None:
            self._bytes -= entry.nbytes

    def _evict(self) -> None:
        while self._bytes > self._budget and self._entries:
            oldest = next(iter(self._entries))
            self._drop(oldest)
