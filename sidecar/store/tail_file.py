"""The fresh tail's vectors kept in files of their own, so that a start after a crash maps them instead of reading
them out of RocksDB one record at a time.

After a SIGKILL with the ANN graph far behind, the start used to read every
vector the saved graph lacked from RocksDB: ~880,000 of them at 1M memories,
7-24 s of a 15-23 s start on the benchmark machine. Every vector that goes
into the fresh tail is now also appended here (its unit form, as the tail holds
it), and a start reads what the saved graph lacks from these files in place: the
fresh tail scans the mapped records (:meth:`TailFile.blocks`) until the builder
has them in the graph, so nothing is copied before serving.

RocksDB stays the source of truth: these files are never synced, never needed,
and never trusted beyond their checksums. A start uses a record only when

- its file names this data directory (creation stamp) and dimension,
- its checksum (``memevo.kernels.checksum``, per record) holds, and
- its id is below RocksDB's next id (a file ahead of RocksDB is ignored whole),

and reads every vector it does not find that way from RocksDB, as before. A
memory's vector never changes once written (ids are never reused), so an intact
record of a live id is that memory's vector. Checksums are verified when a start
maps a segment; the map is read as is after that. The sidecar never rewrites or
truncates a segment it found (appends go to a new one; old ones are removed
whole, which leaves a map readable), so what was verified is what is read; a file
truncated by hand under a running sidecar would fault its reads.

Files are segments, numbered up: appends go to the newest; a start and every
graph save open a new one. After a save, an older segment goes once none of its
ids was in the tail when the save began (they are in the saved graph, or
forgotten). Layout of a segment::

    header (64 bytes): MAGIC (16) | format u32 | dimension u32 | segment number u64 | SHA-256 of the stamp (32)
    records: id u64 | dimension float32 (+4 bytes of zeros when odd) | checksum u64, little-endian

A torn last record (a kill inside a write) is shorter than a record and ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import struct
import threading
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memevo.kernels.checksum import row_checksums

from .files import private_directory

log = logging.getLogger(__name__)

TAIL_DIRECTORY = "tail"
SUFFIX = ".vectors"
MAGIC = b"memevo-tail-vec\n"
FORMAT = 1
_HEADER = struct.Struct("<16sIIQ32s")
HEADER_BYTES = _HEADER.size
MAX_PENDING_ROWS = 65_536
"""Rows queued for the disk at most (~100 MB at 384-d); past it the write path's rows are not written to the files."""
PERSIST_ROWS = 8_192
"""Rows a start appends per call when it writes what it read from RocksDB (~12 MB at 384-d: writers' appends
wait for one such call, milliseconds)."""

IdArray = npt.NDArray[np.int64]
FloatMatrix = npt.NDArray[np.float32]
Block = tuple[IdArray, FloatMatrix, npt.NDArray[np.bool_]]
"""A segment's records in place: ids, vectors (a read-only view of the map) and which of them are wanted."""


def record_words(dimension: int) -> int:
    """64-bit words per record: the id, the vector (padded to whole words) and the checksum."""
    return 1 + (dimension + 1) // 2 + 1


def stamp_digest(stamp: str) -> bytes:
    """What a segment's header says of the data directory it belongs to."""
    return hashlib.sha256(stamp.encode()).digest()


@dataclass
class _Segment:
    number: int
    path: Path
    ids: array[int]
    """Ids of its records (of the intact ones, for a segment found at start)."""


class TailFile:
    """Append-only, checksummed segments of (id, unit vector) records; see the module docstring.

    Thread-safe. Appends are queued and written by a thread of their own, so the write path never waits for the
    disk (see :meth:`append`); rotation and pruning take the file's lock. Never raises on a write: a failed one
    (a full disk) is logged and the segment is left alone until the next rotation; a start reads RocksDB instead.
    """

    def __init__(self, directory: Path, dimension: int, stamp: str) -> None:
        self.directory = directory
        self.dimension = dimension
        self._digest = stamp_digest(stamp)
        self._words = record_words(dimension)
        self._lock = threading.Lock()
        self._closed: list[_Segment] = []
        self._current: _Segment | None = None
        self._descriptor = -1
        self._broken = False
        self._found_ids = np.zeros(0, dtype=np.int64)
        self._found_at = np.zeros(0, dtype=np.int64)
        """For each found id (ascending): its record's position in :attr:`_maps` order (segment, row)."""
        self._maps: list[tuple[mmap.mmap, npt.NDArray[np.uint64], IdArray]] = []
        """Segments found at start: the map, its records as words, and each record's id (-1: damaged)."""
        self._map_rows: list[int] = []
        self._queued = threading.Condition()
        """Guards the queue of appends and its counters (the file itself has ``_lock``)."""
        self._pending: deque[tuple[IdArray, FloatMatrix]] = deque()
        self._pending_rows = 0
        self._enqueued = 0
        self._written = 0
        self._dropped = 0
        self._stopping = False
        self._writer: threading.Thread | None = None

    # ---- start-up ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, dimension: int, stamp: str, *, next_id: int) -> TailFile:
        """Map the segments a previous run left (keeping their intact records of ids below ``next_id``) and open a
        new one for appends. A segment of another directory or dimension, or one holding an id RocksDB has not
        given out, is logged and removed."""
        tail = cls(directory, dimension, stamp)
        private_directory(directory)
        found: list[tuple[int, Path]] = []
        for path in directory.glob("*" + SUFFIX):
            with contextlib.suppress(ValueError):
                found.append((int(path.name[: -len(SUFFIX)]), path))
        found.sort()
        numbers = [number for number, _ in found]
        ids_parts: list[IdArray] = []
        at_parts: list[IdArray] = []
        ahead = False
        for number, path in found:
            mapped = tail._map(path, number)
            if mapped is None:
                continue
            handle, words, ids = mapped
            if ids.size and int(ids.max()) >= next_id:
                ahead = True
            known = array("q")
            known.frombytes(ids.tobytes())
            tail._closed.append(_Segment(number, path, known))
            base = sum(tail._map_rows)
            rows = np.flatnonzero(ids >= 0)
            ids_parts.append(ids[rows])
            at_parts.append(base + rows)
            tail._maps.append((handle, words, ids))
            tail._map_rows.append(words.shape[0])
        if ahead:
            log.warning(
                "fresh-tail files in %s hold ids RocksDB has not given out (next id %d): removed, vectors are read "
                "from RocksDB",
                directory,
                next_id,
            )
            tail._release_maps()
            for segment in tail._closed:
                segment.path.unlink(missing_ok=True)
            tail._closed = []
        elif ids_parts:
            ids = np.concatenate(ids_parts)
            at = np.concatenate(at_parts)
            # The newest record of an id wins (a vector is never rewritten, but a copy may be newer).
            order = np.argsort(ids, kind="stable")
            ids, at = ids[order], at[order]
            last = np.ones(ids.size, dtype=bool)
            last[:-1] = ids[1:] != ids[:-1]
            tail._found_ids, tail._found_at = ids[last], at[last]
        tail._open_next(max(numbers, default=0) + 1)
        tail._writer = threading.Thread(target=tail._run_writer, name="memevo-tail-file", daemon=True)
        tail._writer.start()
        return tail

    def _map(self, path: Path, number: int) -> tuple[mmap.mmap, npt.NDArray[np.uint64], IdArray] | None:
        """A segment's records as words and the id of each (-1 where damaged); None (removed) when unusable."""
        try:
            with path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                header = handle.read(HEADER_BYTES)
                if len(header) < HEADER_BYTES:
                    raise ValueError("shorter than its header")
                magic, fmt, dimension, stored_number, digest = _HEADER.unpack(header)
                if magic != MAGIC or fmt != FORMAT:
                    raise ValueError(f"not a fresh-tail segment of format {FORMAT}")
                if dimension != self.dimension or digest != self._digest or stored_number != number:
                    raise ValueError("of another data directory, dimension or name")
                count = (size - HEADER_BYTES) // (8 * self._words)
                if count == 0:
                    path.unlink(missing_ok=True)
                    return None
                mapped = mmap.mmap(handle.fileno(), HEADER_BYTES + count * 8 * self._words, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            log.warning("fresh-tail segment %s ignored and removed (%s): its vectors are read from RocksDB", path, exc)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        words = np.frombuffer(mapped, dtype="<u8", offset=HEADER_BYTES).reshape(count, self._words)
        intact = row_checksums(words, number, columns=self._words - 1) == words[:, -1]
        ids = np.where(intact, words[:, 0].astype(np.int64), -1)
        if not intact.all():
            log.warning(
                "fresh-tail segment %s: %d of %d records damaged (read from RocksDB instead)",
                path,
                int(count - intact.sum()),
                count,
            )
        return mapped, words, ids

    def blocks(self, ids: IdArray) -> tuple[list[Block], npt.NDArray[np.bool_]]:
        """Where the files hold the vectors of ``ids`` (distinct): per segment, its records' ids, their vectors read in
        place (a read-only view of the map) and which of them hold one of ``ids`` (the newest intact record of each),
        cut to the rows from the first such to the last; and which of ``ids`` were found."""
        found = np.zeros(ids.size, dtype=bool)
        parts: list[Block] = []
        if ids.size == 0 or self._found_ids.size == 0:
            return parts, found
        where = np.minimum(np.searchsorted(self._found_ids, ids), self._found_ids.size - 1)
        found = np.asarray(self._found_ids[where] == ids, dtype=bool)
        at = np.sort(self._found_at[where[found]])
        starts = np.cumsum([0, *self._map_rows])
        vector_words = (self.dimension + 1) // 2
        for index, (_, words, segment_ids) in enumerate(self._maps):
            local = at[np.searchsorted(at, starts[index]) : np.searchsorted(at, starts[index + 1])] - starts[index]
            if local.size == 0:
                continue
            rows = slice(int(local[0]), int(local[-1]) + 1)
            alive = np.zeros(rows.stop - rows.start, dtype=bool)
            alive[local - rows.start] = True
            vectors = words[rows, 1 : 1 + vector_words].view("<f4")[:, : self.dimension]
            parts.append((segment_ids[rows], vectors, alive))
        return parts, found

    def read_into(self, ids: IdArray, out: FloatMatrix) -> npt.NDArray[np.bool_]:
        """Copy the vector of every ``ids`` (distinct) the files hold into its row of ``out``; which rows were
        filled."""
        parts, found = self.blocks(ids)
        order = np.argsort(ids)
        for segment_ids, vectors, alive in parts:
            held = np.flatnonzero(alive)
            out[order[np.searchsorted(ids, segment_ids[held], sorter=order)]] = vectors[held]
        return found

    def forget_found(self) -> None:
        """Let go of the maps of the segments found at start (their files stay until pruned)."""
        self._release_maps()
        self._found_ids = np.zeros(0, dtype=np.int64)
        self._found_at = np.zeros(0, dtype=np.int64)

    def _release_maps(self) -> None:
        maps, self._maps, self._map_rows = self._maps, [], []
        for handle, _, _ in maps:
            with contextlib.suppress(BufferError):  # a view still exported: the map goes with its last reference
                handle.close()

    # ---- appends ----------------------------------------------------------------------------

    def append(self, ids: IdArray, unit: FloatMatrix, *, wait: bool = False) -> None:
        """Queue records of ``ids`` and their unit vectors for the newest segment; a thread of this file writes them.

        The write path calls this under the commit lock, so it never waits for the disk: past MAX_PENDING_ROWS
        queued rows the rows are dropped (a start reads them from RocksDB) unless ``wait`` (start-up's copy of
        what it read, on a thread of its own) makes it wait for room. Neither array may change afterwards.
        """
        if ids.size == 0:
            return
        with self._queued:
            while (
                wait and not self._stopping and self._pending_rows and self._pending_rows + ids.size > MAX_PENDING_ROWS
            ):
                self._queued.wait()
            if self._stopping:
                return
            if self._pending_rows + ids.size > MAX_PENDING_ROWS:
                if not self._dropped:
                    log.warning(
                        "fresh-tail files: %d vectors wait for the disk already, later ones are not written until "
                        "they are (a start reads those from RocksDB)",
                        self._pending_rows,
                    )
                self._dropped += int(ids.size)
                return
            self._pending.append((ids, unit))
            self._pending_rows += int(ids.size)
            self._enqueued += 1
            self._queued.notify_all()

    def flush(self) -> None:
        """Wait until everything queued before this call is written (or given up on)."""
        with self._queued:
            target = self._enqueued
            while self._written < target and self._writer is not None and self._writer.is_alive():
                self._queued.wait(1.0)

    def _run_writer(self) -> None:
        while True:
            with self._queued:
                while not self._pending and not self._stopping:
                    self._queued.wait()
                if not self._pending:
                    return
                ids, unit = self._pending[0]  # left queued until written: flush() waits for "written"
            try:
                self._write(ids, unit)
            except Exception:  # never let a bad append stop the thread (flush() and close() wait for it)
                log.exception("fresh-tail segment append failed")
            with self._queued:
                self._pending.popleft()
                self._pending_rows -= int(ids.size)
                self._written += 1
                self._queued.notify_all()

    def _write(self, ids: IdArray, unit: FloatMatrix) -> None:
        records = np.zeros((ids.size, self._words), dtype="<u8")
        records[:, 0] = ids
        records[:, 1 : 1 + (self.dimension + 1) // 2].view("<f4")[:, : self.dimension] = unit
        with self._lock:
            segment = self._current
            if segment is None or self._broken:
                return
            records[:, -1] = row_checksums(records, segment.number, columns=self._words - 1)
            try:
                _write_all(self._descriptor, records.data.cast("B"))
            except OSError as exc:
                # Whatever part was written is a torn record the next start ignores; nothing is appended after it.
                self._broken = True
                log.warning(
                    "fresh-tail segment %s not written (%s): vectors after it are read from RocksDB at a start",
                    segment.path,
                    exc,
                )
                return
            segment.ids.extend(ids.tolist())

    # ---- rotation and pruning ---------------------------------------------------------------

    def rotate(self) -> int:
        """Start a new segment for appends (a graph save is about to begin); returns the number of the last closed.

        Whatever was appended before this call is in the closed segments.
        """
        self.flush()
        with self._lock:
            if self._current is not None:
                self._closed.append(self._current)
                number = self._current.number
            else:
                number = max((s.number for s in self._closed), default=0)
            self._close_descriptor()
            self._open_next(number + 1)
            return number

    def prune(self, through: int, needed: IdArray) -> int:
        """Remove segments numbered up to ``through`` holding none of ``needed`` (the tail's ids when a graph save
        began, the save now done); returns how many were removed."""
        # No np.unique first: on NumPy 2.4 it takes 0.6 s for 830k distinct ids where np.isin takes ~6 ms (its table
        # method), and a save at stop during a 1M rebuild spent 3.3 s in it at load ~6.
        removed = 0
        with self._lock:
            keep: list[_Segment] = []
            for segment in self._closed:
                ids = np.frombuffer(segment.ids, dtype=np.int64) if len(segment.ids) else np.zeros(0, np.int64)
                if segment.number <= through and not np.isin(ids, needed).any():
                    with contextlib.suppress(OSError):
                        segment.path.unlink()
                    removed += 1
                else:
                    keep.append(segment)
            self._closed = keep
        return removed

    def segments(self) -> Iterator[Path]:
        """The segment files this process knows of (closed ones, then the newest)."""
        with self._lock:
            yield from [s.path for s in self._closed]
            if self._current is not None:
                yield self._current.path

    def close(self) -> None:
        """Write what is queued, then close the newest segment's file (appends after this are dropped)."""
        with self._queued:
            self._stopping = True
            self._queued.notify_all()
        if self._writer is not None:
            self._writer.join()
        with self._lock:
            self._close_descriptor()
            self._current = None
        self._release_maps()

    def _open_next(self, number: int) -> None:
        path = self.directory / f"{number:012d}{SUFFIX}"
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
            _write_all(descriptor, _HEADER.pack(MAGIC, FORMAT, self.dimension, number, self._digest))
        except OSError as exc:
            log.warning("fresh-tail segment %s not opened (%s): starts read RocksDB instead", path, exc)
            self._current, self._broken = None, True
            return
        self._descriptor = descriptor
        self._current = _Segment(number, path, array("q"))
        self._broken = False

    def _close_descriptor(self) -> None:
        if self._descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(self._descriptor)
            self._descriptor = -1


def _write_all(descriptor: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        view = view[written:]
