"""The fresh tail: acknowledged unit vectors waiting for the ANN graph, in one contiguous buffer.

Writes append at the end, the index builder takes from the front, a forget marks
an entry dead. Searches scan the tail exactly, so it must be cheap to read while
it changes: live rows sit in one array (one matrix-vector product, not one per
write batch), and rows once written are never moved or overwritten — growing or
compacting copies into a new array — so a snapshot taken under the lock stays
valid after it is released, at no copy. Before this, every write invalidated a
concatenated copy of the whole tail that the next recall rebuilt: with 200k
vectors behind, ~300 MB copied per recall.

Not thread-safe: :class:`~memevo.sidecar.store.vector_index.VectorIndex` calls
it under its tail lock and reads snapshots outside it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]
FloatMatrix = npt.NDArray[np.float32]

MIN_CAPACITY = 1_024
GROWTH = 1.5
"""A full buffer is copied into one this many times the live span (plus what is being appended)."""


class FreshTail:
    """Ids and unit vectors in write order, with a live flag per row (see the module docstring)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._ids = np.zeros(0, dtype=np.int64)
        self._vectors = np.zeros((0, dimension), dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._head = 0
        self._end = 0
        self._live = 0
        self._ascending = True
        """Whether ids[head:end] increase strictly (the committer writes in id order; a snapshot then needs no sort)."""
        self._cached: tuple[IdArray, FloatMatrix] | None = None
        """The live rows as a sorted copy, when views would not do (dead rows in the span, ids out of order)."""

    @property
    def count(self) -> int:
        """Live vectors."""
        return self._live

    def append(self, ids: IdArray, unit: FloatMatrix) -> None:
        """Add unit rows (already normalised) at the end."""
        n = int(ids.size)
        if n == 0:
            return
        if self._end + n > self._ids.size:
            self._regrow(n)
        span = slice(self._end, self._end + n)
        if (self._end > self._head and int(ids[0]) <= int(self._ids[self._end - 1])) or not _increasing(ids):
            self._ascending = False
        self._ids[span] = ids
        self._vectors[span] = unit
        self._alive[span] = True
        self._end += n
        self._live += n
        self._cached = None

    def reserve(self, count: int) -> tuple[IdArray, FloatMatrix]:
        """Writable rows for ``count`` entries at the end of an empty tail, with room to grow after them.

        For start-up, before anything reads the tail: the caller fills the rows in place (a million vectors
        after a crash, read once instead of copied through temporaries) and then calls :meth:`commit`.
        """
        if self._end != self._head:
            raise ValueError("reserve() needs an empty tail; append() to a tail in use")
        self._regrow(count)
        return self._ids[:count], self._vectors[:count]

    def commit(self, count: int) -> None:
        """Make the first ``count`` rows given by :meth:`reserve` live, once filled (ids and unit vectors)."""
        self._alive[:count] = True
        self._end = self._live = count
        self._ascending = _increasing(self._ids[:count])
        self._cached = None

    def _regrow(self, incoming: int) -> None:
        """Copy the live rows into a new buffer with room for ``incoming`` more (old arrays stay as they were)."""
        window = slice(self._head, self._end)
        keep = self._alive[window]
        ids, vectors = self._ids[window][keep], self._vectors[window][keep]
        capacity = max(MIN_CAPACITY, int(GROWTH * (ids.size + incoming)))
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._vectors = np.zeros((capacity, self.dimension), dtype=np.float32)
        self._alive = np.zeros(capacity, dtype=bool)
        self._ids[: ids.size] = ids
        self._vectors[: ids.size] = vectors
        self._alive[: ids.size] = True
        self._head, self._end = 0, int(ids.size)
        self._ascending = _increasing(ids)

    def remove(self, ids: IdArray) -> IdArray:
        """Mark the live rows holding ``ids`` dead; returns the ids of the rows it marked."""
        if ids.size == 0 or self._live == 0:
            return np.zeros(0, dtype=np.int64)
        window = slice(self._head, self._end)
        hit = np.isin(self._ids[window], ids) & self._alive[window]
        killed = self._ids[window][hit]
        if killed.size:
            self._alive[window][hit] = False
            self._live -= int(killed.size)
            self._cached = None
        return killed

    def front(self, limit: int) -> tuple[int, IdArray, FloatMatrix]:
        """The first ``limit`` rows (a span) and the live ids and vectors among them, for the builder."""
        span = min(limit, self._end - self._head)
        window = slice(self._head, self._head + span)
        alive = self._alive[window]
        if bool(alive.all()):
            return span, self._ids[window], self._vectors[window]
        return span, self._ids[window][alive], self._vectors[window][alive]

    def drop_front(self, span: int) -> IdArray:
        """Forget the first ``span`` rows (moved into the graph, or dead); returns the ids of the live ones."""
        span = min(span, self._end - self._head)
        if span <= 0:
            return np.zeros(0, dtype=np.int64)
        window = slice(self._head, self._head + span)
        dropped = self._ids[window][self._alive[window]]
        self._live -= int(dropped.size)
        self._head += span
        if self._head == self._end:
            # Empty: let the buffer go (snapshots still reading it keep their own reference); the next
            # append allocates one sized for what comes.
            self._ids = np.zeros(0, dtype=np.int64)
            self._vectors = np.zeros((0, self.dimension), dtype=np.float32)
            self._alive = np.zeros(0, dtype=bool)
            self._head = self._end = 0
            self._ascending = True
        self._cached = None
        return dropped

    def view(self) -> tuple[IdArray, FloatMatrix, npt.NDArray[np.bool_] | None]:
        """Every row of the span as views, and which are live (a copy, or None when all are).

        For exact scans that mask dead rows: :meth:`snapshot` copies the live rows when some are dead, which
        for a tail of a million vectors (a rebuild after a crash) is over a gigabyte per change.
        """
        window = slice(self._head, self._end)
        alive = None if self._live == self._end - self._head else self._alive[window].copy()
        return self._ids[window], self._vectors[window], alive

    def snapshot(self) -> tuple[IdArray, FloatMatrix]:
        """Every live id (ascending) and its unit vector: views of the buffer when possible, else a cached copy."""
        window = slice(self._head, self._end)
        if self._live == self._end - self._head and self._ascending:
            return self._ids[window], self._vectors[window]
        if self._cached is None:
            keep = self._alive[window]
            ids, vectors = self._ids[window][keep], self._vectors[window][keep]
            if not _increasing(ids):
                order = np.argsort(ids, kind="stable")
                ids, vectors = ids[order], vectors[order]
            self._cached = ids, vectors
        return self._cached


def _increasing(ids: IdArray) -> bool:
    return ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))


def nearest(
    ids: IdArray,
    vectors: FloatMatrix,
    query: npt.NDArray[np.float32],
    count: int,
    alive: npt.NDArray[np.bool_] | None = None,
) -> tuple[IdArray, npt.NDArray[np.float32]]:
    """The ``count`` rows most similar to the unit ``query`` (all of them when no more), with their cosines.

    ``alive`` (one flag per row, None = all) leaves dead rows out. One matrix-vector product over the
    contiguous block: at a million 384-d rows that is ~1.5 GB read per call, bound by memory bandwidth.
    """
    sims = (vectors @ query).astype(np.float32, copy=False)
    if alive is not None:
        ids, sims = ids[alive], sims[alive]
    if count >= ids.size:
        return ids, sims
    best = np.argpartition(-sims, count - 1)[:count]
    return ids[best], sims[best]
