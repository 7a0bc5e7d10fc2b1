"""The fresh tail: acknowledged unit vectors waiting for the ANN graph, in one contiguous buffer.

Writes append at the end, the index builder takes from the front, a forget marks
an entry dead. Searches scan the tail exactly, so it must be cheap to read while
it changes: live rows sit in one array (one matrix-vector product, not one per
write batch), and rows once written are never moved or overwritten — growing or
compacting copies into a new array — so a snapshot taken under the lock stays
valid after it is released, at no copy. Before this, every write invalidated a
concatenated copy of the whole tail that the next recall rebuilt: with 200k
vectors behind, ~300 MB copied per recall.

A start after a crash puts in front of that buffer the rows it found in the
fresh-tail files (``tail_file.py``) as *mapped* blocks: views of the files' maps,
read in place, never copied (copying a million of them into a new 1.3 GB buffer
took ~3.3 s of a 1M start, most of it first touch of that memory). They are
read-only; a forget clears their row's flag, the builder takes them first.

Not thread-safe: :class:`~memevo.sidecar.store.vector_index.VectorIndex` calls
it under its tail lock and reads snapshots outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]
FloatMatrix = npt.NDArray[np.float32]
Part = tuple[IdArray, FloatMatrix, "npt.NDArray[np.bool_] | None"]
"""Rows of the tail to scan: ids, unit vectors (possibly strided views) and which are live (None: all)."""

MIN_CAPACITY = 1_024
GROWTH = 1.5
"""A full buffer is copied into one this many times the live span (plus what is being appended)."""


@dataclass
class _Mapped:
    """Rows found in the fresh-tail files at start, in place (see the module docstring)."""

    ids: IdArray
    """One per row; a dead row's id means nothing (a damaged record's, one in the graph or written twice)."""
    vectors: FloatMatrix
    """Read-only, possibly a strided view of a file's records."""
    alive: npt.NDArray[np.bool_]
    """The tail's own flags; rows before ``head`` are cleared as the builder takes them."""
    head: int = 0
    live: int = 0
    sorted_ids: IdArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sorted_rows: IdArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The rows live when adopted, by id (for lookups and forgets; the flags say which still are)."""

    def find(self, ids: IdArray) -> tuple[IdArray, IdArray]:
        """Positions in ``ids`` of those live here, and their rows."""
        if ids.size == 0 or self.sorted_ids.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        where = np.minimum(np.searchsorted(self.sorted_ids, ids), self.sorted_ids.size - 1)
        rows = self.sorted_rows[where]
        hit = np.flatnonzero((self.sorted_ids[where] == ids) & self.alive[rows])
        return hit, rows[hit]


class FreshTail:
    """Ids and unit vectors in write order, with a live flag per row (see the module docstring)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._mapped: list[_Mapped] = []
        """Blocks read in place, oldest first, in front of the buffer (start-up only adds them)."""
        self._mapped_live = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._vectors = np.zeros((0, dimension), dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._head = 0
        self._end = 0
        self._live = 0
        self._ascending = True
        """Whether ids[head:end] increase strictly (the committer writes in id order; a snapshot then needs no sort)."""
        self._cached_buffer: tuple[IdArray, FloatMatrix] | None = None
        """The live rows as a sorted copy, when views would not do (dead rows in the span, ids out of order)."""
        self._cached_all: tuple[IdArray, FloatMatrix] | None = None
        """The same for the mapped blocks and the buffer together (:meth:`snapshot` with mapped blocks)."""

    @property
    def count(self) -> int:
        """Live vectors."""
        return self._live + self._mapped_live

    def adopt(self, ids: IdArray, vectors: FloatMatrix, alive: npt.NDArray[np.bool_]) -> None:
        """Put rows read in place (``vectors`` is never written) in front of the buffer, ``alive`` saying which are
        live (taken over: the tail clears its flags). For start-up, before any append."""
        if self._end != self._head:
            raise ValueError("adopt() comes before any append")
        live = int(np.count_nonzero(alive))
        if live == 0:
            return
        rows = np.flatnonzero(alive)
        order = np.argsort(ids[rows], kind="stable")
        self._mapped.append(_Mapped(ids, vectors, alive, 0, live, ids[rows][order], rows[order]))
        self._mapped_live += live
        self._cached_buffer = self._cached_all = None

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
        self._cached_buffer = self._cached_all = None

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
        self._cached_buffer = self._cached_all = None

    def _regrow(self, incoming: int) -> None:
        """Copy the span into a new buffer with room for ``incoming`` more (old arrays stay as they were).

        Dead rows are copied too: the builder holds a span (:meth:`front`) while it inserts, then drops that
        many rows from the front (:meth:`drop_front`); leaving dead rows out here shifted the rows under it, so a
        write's vector behind a forgotten one could leave the tail without ever entering the graph.
        """
        window = slice(self._head, self._end)
        ids, vectors, alive = self._ids[window], self._vectors[window], self._alive[window]
        capacity = max(MIN_CAPACITY, int(GROWTH * (ids.size + incoming)))
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._vectors = np.zeros((capacity, self.dimension), dtype=np.float32)
        self._alive = np.zeros(capacity, dtype=bool)
        self._ids[: ids.size] = ids
        self._vectors[: ids.size] = vectors
        self._alive[: ids.size] = alive
        self._head, self._end = 0, int(ids.size)
        self._ascending = _increasing(ids)

    def remove(self, ids: IdArray) -> IdArray:
        """Mark the live rows holding ``ids`` dead; returns the ids of the rows it marked."""
        if ids.size == 0 or self.count == 0:
            return np.zeros(0, dtype=np.int64)
        parts: list[IdArray] = []
        if self._mapped_live:
            asked = np.unique(ids)
            for block in self._mapped:
                _, rows = block.find(asked)
                if rows.size:
                    block.alive[rows] = False
                    block.live -= int(rows.size)
                    self._mapped_live -= int(rows.size)
                    parts.append(block.ids[rows])
        if self._live:
            window = slice(self._head, self._end)
            hit = np.isin(self._ids[window], ids) & self._alive[window]
            killed = self._ids[window][hit]
            if killed.size:
                self._alive[window][hit] = False
                self._live -= int(killed.size)
                parts.append(killed)
        if not parts:
            return np.zeros(0, dtype=np.int64)
        self._cached_buffer = self._cached_all = None
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def front(self, limit: int) -> tuple[int, IdArray, FloatMatrix]:
        """The first ``limit`` rows (a span) and the live ids and vectors among them, for the builder."""
        if self._mapped:
            block = self._mapped[0]
            span = min(limit, block.ids.size - block.head)
            window = slice(block.head, block.head + span)
            alive = block.alive[window]
            return span, block.ids[window][alive], np.ascontiguousarray(block.vectors[window][alive])
        span = min(limit, self._end - self._head)
        window = slice(self._head, self._head + span)
        alive = self._alive[window]
        if bool(alive.all()):
            return span, self._ids[window], self._vectors[window]
        return span, self._ids[window][alive], self._vectors[window][alive]

    def drop_front(self, span: int) -> IdArray:
        """Forget the first ``span`` rows (moved into the graph, or dead); returns the ids of the live ones."""
        if self._mapped:
            block = self._mapped[0]
            span = min(span, block.ids.size - block.head)
            window = slice(block.head, block.head + span)
            dropped = block.ids[window][block.alive[window]]
            block.alive[window] = False
            block.live -= int(dropped.size)
            self._mapped_live -= int(dropped.size)
            block.head += span
            if block.head == block.ids.size or block.live == 0:
                self._mapped.pop(0)  # its map goes with the last search still reading it
            self._cached_buffer = self._cached_all = None
            return dropped
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
        self._cached_buffer = self._cached_all = None
        return dropped

    def parts(self) -> list[Part]:
        """Every row of the tail as views, block by block, and which are live (a copy, or None when all are).

        For exact scans that mask dead rows: :meth:`snapshot` copies the live rows when some are dead, which
        for a tail of a million vectors (a rebuild after a crash) is over a gigabyte per change.
        """
        found: list[Part] = []
        for block in self._mapped:
            window = slice(block.head, block.ids.size)
            alive = block.alive[window]
            found.append((block.ids[window], block.vectors[window], None if bool(alive.all()) else alive.copy()))
        if self._end > self._head:
            window = slice(self._head, self._end)
            alive_rows = None if self._live == self._end - self._head else self._alive[window].copy()
            found.append((self._ids[window], self._vectors[window], alive_rows))
        return found

    def live_ids(self) -> IdArray:
        """Every live id (in no particular order)."""
        return np.concatenate(
            [np.zeros(0, dtype=np.int64)] + [ids if alive is None else ids[alive] for ids, _, alive in self.parts()]
        )

    def lookup(self, ids: IdArray) -> tuple[FloatMatrix, npt.NDArray[np.bool_]]:
        """The unit vector of each of ``ids`` the tail holds live (rows in ``ids`` order, others 0), and which."""
        vectors = np.zeros((ids.size, self.dimension), dtype=np.float32)
        found = np.zeros(ids.size, dtype=bool)
        for block in self._mapped:
            hit, rows = block.find(ids)
            vectors[hit] = block.vectors[rows]
            found[hit] = True
        if self._end > self._head and ids.size:
            tail_ids, tail_vectors = self._buffer_snapshot()
            if tail_ids.size:
                slots = np.minimum(np.searchsorted(tail_ids, ids), tail_ids.size - 1)
                hit = np.flatnonzero(tail_ids[slots] == ids)
                vectors[hit] = tail_vectors[slots[hit]]
                found[hit] = True
        return vectors, found

    def snapshot(self) -> tuple[IdArray, FloatMatrix]:
        """Every live id (ascending) and its unit vector: views of the buffer when possible, else a cached copy.

        With mapped blocks that is a copy of them all (a gigabyte after a crash at 1M): for tools and tests; the
        serving path reads :meth:`parts` and :meth:`lookup`.
        """
        if not self._mapped:
            return self._buffer_snapshot()
        if self._cached_all is None:
            ids = self.live_ids()
            vectors, _ = self.lookup(ids)
            order = np.argsort(ids, kind="stable")
            self._cached_all = ids[order], vectors[order]
        return self._cached_all

    def _buffer_snapshot(self) -> tuple[IdArray, FloatMatrix]:
        """:meth:`snapshot` of the buffer alone (the mapped blocks left out)."""
        window = slice(self._head, self._end)
        if self._live == self._end - self._head and self._ascending:
            return self._ids[window], self._vectors[window]
        if self._cached_buffer is None:
            keep = self._alive[window]
            ids, vectors = self._ids[window][keep], self._vectors[window][keep]
            if not _increasing(ids):
                order = np.argsort(ids, kind="stable")
                ids, vectors = ids[order], vectors[order]
            self._cached_buffer = ids, vectors
        return self._cached_buffer


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
