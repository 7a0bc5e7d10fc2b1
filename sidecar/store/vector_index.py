"""The ANN index: a usearch HNSW graph plus the fresh tail of vectors not yet in it.

A write is acknowledged once it is in RocksDB and in the fresh tail; a
background builder moves the tail into the graph in batches. Search scans
the tail exactly (it is small) and merges it with the graph's matches, so
every acknowledged vector is searchable at once (DESIGN §5).

Start-up uses the same path: what the saved graph lacks (after a crash, or a
damaged file) goes into the tail as a *rebuild*, so the sidecar serves at
once, with exact recall over the missing vectors, while the builder inserts
them and saves its progress. The saved file carries a SHA-256 in its metadata;
a file that does not match is not loaded. What the saved graph lacks is read in
place from the fresh-tail files (``tail_file.py``), which every tail vector is
also appended to, and from RocksDB only where they do not hold it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from usearch.compiled import ScalarKind
from usearch.index import Index as _CompiledIndex

from ..config import IndexConfig
from ..priority import lower_thread_priority, set_thread_nice, thread_nice
from .fresh_tail import FreshTail, nearest
from .tail_file import PERSIST_ROWS, TailFile

log = logging.getLogger(__name__)

INDEX_FILE = "index.usearch"
INDEX_META_FILE = "index.meta.json"
BUILD_STEP = 512
"""Most tail rows one builder step moves into the graph: the tail shrinks (and stops being scanned) this finely,
as it did when a step took one write batch at a time."""
TAIL_ALL = 2_048
"""A search takes every tail vector up to this many; past it, the nearest (a long backlog is scanned, not returned)."""
VERIFY_COUNT = 10
"""Nearest neighbours a vector inserted on several threads must be among, searched for by itself (see
:meth:`VectorIndex._repair`): not only the first, as another memory may hold the same vector."""
VERIFY_EXPANSION = 64
"""Beam of that first search: ~4-6x cheaper than the configured 384 on the benchmark machine; at 20k random 384-d
vectors it missed 0.07 % of reachable ones, which a second search with the configured beam then finds."""
PROBE_EVERY = 16
"""Backlog steps between two steps inserted with the thread count measured slower (load changes: see
:class:`_InsertThreads`)."""
RATE_WEIGHT = 0.3
"""Weight of the newest step in each thread count's moving average of seconds per vector."""
SEARCH_MANY_BLOCK = 128
"""Most query rows :meth:`VectorIndex.search_many` scores against the tail at once."""
SEARCH_MANY_CELLS = 4_000_000
"""Most block x tail similarities held at once (~50 MB with the partition's indices), for large tails."""
PERSIST_BYTES_PER_S = 64e6
"""Pace of start-up's copy into the fresh-tail files of what it read from RocksDB (~20 s for 845k 384-d vectors)."""
NORMALISE_ROWS = 65_536
"""Rows a start-up rebuild normalises at once (the norms' temporary stays small)."""
DIGEST_CHUNK_BYTES = 16 << 20
"""Read size while checksumming the index file (hashlib releases the GIL for each chunk)."""
SAVE_YIELD_EVERY = 1_024
"""Graph nodes a save writes between two offers of the interpreter lock to other threads (about a millisecond)."""
SAVE_BYTES_PER_S = 75e6
"""Save speed a clean stop assumes before this process has measured one of its own. Quiet, usearch wrote 275 MB in
0.9-1.5 s on the benchmark machine; at 1M under load the stop's save of a ~280 MB graph took 2-4 s at load 4-7
and 5.9 s at load 10.7 (47 MB/s), where the 150 MB/s assumed before budgeted under 2 s."""
SAVE_RATES_KEPT = 3
"""Measured saves a stop's estimate looks at; it takes the slowest, since the load at the stop is not the load
of the last save."""

FloatMatrix = npt.NDArray[np.float32]
IdArray = npt.NDArray[np.int64]


def _best(found: list[tuple[IdArray, npt.NDArray[np.float32]]], count: int) -> tuple[IdArray, npt.NDArray[np.float32]]:
    """The ``count`` most similar of several parts' nearest (all of them when no more)."""
    ids = np.concatenate([part[0] for part in found])
    sims = np.concatenate([part[1] for part in found])
    if count >= ids.size:
        return ids, sims
    best = np.argpartition(-sims, count - 1)[:count]
    return ids[best], sims[best]


def normalize_rows(vectors: FloatMatrix) -> FloatMatrix:
    """Rows scaled to unit length (callers reject zero rows before)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


class _SharedExclusiveLock:
    """Many searchers and inserters at once; exclusive for capacity growth, save and removal."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    def acquire_shared(self) -> None:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            if self._shared == 0:
                self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._shared:
                self._cond.wait()

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()


@dataclass(frozen=True)
class Matches:
    """Search candidates: memory ids and cosine similarities, not sorted, ids unique."""

    ids: IdArray
    similarities: npt.NDArray[np.float32]


@dataclass(frozen=True)
class Neighbours:
    """One search's nearest graph matches (best first, as usearch gives them) and tail matches, up to ``count``.

    :meth:`first` answers a search for any count up to ``count`` without searching again: HNSW's result for a
    count within its search expansion is the prefix of its result for a larger such count (the beam is the
    expansion's either way), and the tail's nearest are kept best first. Recall's filter asks again with 4x
    the count when too few neighbours pass (superseded facts near the query): one search of the expansion's
    size then answers both rounds.
    """

    count: int
    graph_ids: IdArray
    graph_similarities: npt.NDArray[np.float32]
    tail_ids: IdArray
    tail_similarities: npt.NDArray[np.float32]

    def first(self, count: int) -> Matches:
        """What :meth:`VectorIndex.search` with ``count`` (at most :attr:`count`) returns."""
        if count > self.count:
            raise ValueError(f"count {count} is more than the {self.count} searched; search again")
        graph = min(count, self.graph_ids.size)
        tail = max(count, TAIL_ALL)
        ids = np.concatenate([self.tail_ids[:tail], self.graph_ids[:graph]])
        sims = np.concatenate([self.tail_similarities[:tail], self.graph_similarities[:graph]])
        # An id may sit in both the tail and the graph while the builder moves it.
        unique_ids, first = np.unique(ids, return_index=True)
        return Matches(unique_ids, sims[first])


class _BuilderPriority:
    """The builder's nice value: lowered while the index keeps up, back to normal while it is behind.

    Lowered, the builder takes the cores that requests leave idle; but when writes outpace it, the tail
    grows to the back-pressure bound and every writer waits for the builder, so it should run first.
    """

    def __init__(self, config: IndexConfig, base_nice: int | None) -> None:
        self._config = config
        self._base = base_nice
        """Nice value to return to when behind; None when never lowered (or raising it back was refused)."""
        self._boosted = False

    def follow(self, tail_count: int) -> None:
        if self._base is None:
            return
        if not self._boosted and tail_count >= self._config.backlog_vectors:
            if set_thread_nice(self._base, what="the index builder"):
                self._boosted = True
                log.info("index %d vectors behind: builder at normal priority", tail_count)
            else:
                self._base = None  # not allowed here: stay lowered, and stop asking
        elif self._boosted and tail_count < self._config.backlog_vectors // 2:
            set_thread_nice(self._base + self._config.builder_nice, what="the index builder")
            self._boosted = False


class _InsertThreads:
    """The thread count the builder inserts a backlog step with: the one measured faster per vector, wall time.

    Two threads inserted ~2.2x faster than one on the idle 2-core benchmark machine, but slower than one (0.64x) while
    other processes kept both cores busy: each add() waits for its slowest thread. So both are measured, on the
    steps themselves (the check of what two threads inserted counted in), and the slower is tried again every
    PROBE_EVERY steps in case the load changed.
    """

    def __init__(self, bulk: int, single: int) -> None:
        self._choices = sorted({max(bulk, 1), max(single, 1)})
        self._cost: dict[int, float] = {}
        """Moving average of seconds per vector, by thread count."""
        self._steps = 0

    def choose(self) -> int:
        """Threads for the next backlog step."""
        self._steps += 1
        untried = [threads for threads in reversed(self._choices) if threads not in self._cost]
        if untried:
            return untried[0]
        ranked = sorted(self._choices, key=lambda threads: self._cost[threads])
        if len(ranked) > 1 and self._steps % PROBE_EVERY == 0:
            return ranked[1]
        return ranked[0]

    def record(self, threads: int, vectors: int, seconds: float) -> None:
        """A backlog step of ``vectors`` inserted on ``threads`` took ``seconds``."""
        if vectors <= 0:
            return
        cost = seconds / vectors
        before = self._cost.get(threads)
        self._cost[threads] = cost if before is None else (1 - RATE_WEIGHT) * before + RATE_WEIGHT * cost

    def call_size(self, threads: int, call_s: float, floor: int) -> int:
        """Vectors one add() call on ``threads`` takes so that it lasts about ``call_s`` (at least ``floor``).

        From the measured seconds per vector of whole steps (their check counted in, so a call comes out a little
        shorter than ``call_s``); ``floor`` until ``threads`` has been measured, or when ``call_s`` is 0.
        """
        cost = self._cost.get(threads)
        if cost is None or cost <= 0 or call_s <= 0:
            return floor
        return max(floor, int(call_s / cost))


class SaveAbandoned(Exception):
    """A save given a deadline passed it before the file was complete: nothing was replaced."""


def stop_save_fits(size_bytes: int, measured_bytes_per_s: list[float], budget_s: float) -> bool:
    """Whether a clean stop should save a graph of ``size_bytes`` within ``budget_s``.

    The speed is the slowest of this process's last measured saves, or SAVE_BYTES_PER_S before one was measured.
    Skipping loses nothing: the next start inserts what the saved file lacks (reading it from the fresh-tail files
    or RocksDB), and a save started anyway is abandoned at its deadline.
    """
    if budget_s <= 0:
        return False
    rate = min(measured_bytes_per_s[-SAVE_RATES_KEPT:], default=SAVE_BYTES_PER_S)
    return size_bytes / rate <= budget_s


def _serialize_yielding(graph: _CompiledIndex, deadline: float | None = None) -> bytes | bytearray:
    """The graph as usearch saves it, letting other threads take the interpreter lock every SAVE_YIELD_EVERY nodes.

    usearch holds the lock for the whole save, and every request waited for it: 0.7-1.2 s at 1M during a
    rebuild, growing with the graph. It calls ``progress`` (with the lock held) twice per node while it writes the
    graph's links, not while it copies the vectors, which come first; a ``time.sleep(0)`` there releases the lock
    and a waiting thread runs. Into memory, not a file: the vectors' part is then a copy, not thousands of small
    writes (at 200k 384-d vectors here 0.12-0.14 s before the first call against 0.22-0.27 s, and nothing after the
    last against 0.14-0.15 s). It costs a transient buffer of the file's size.
    """
    calls = 0
    late = False

    def progress(processed: int, total: int) -> bool:
        nonlocal calls, late
        calls += 1
        if calls % SAVE_YIELD_EVERY == 0:
            time.sleep(0)
            if deadline is not None and time.monotonic() > deadline:
                late = True
                return False  # usearch stops and raises
        return True

    # usearch checks the callback's annotations as types, and this module's are strings (postponed evaluation).
    progress.__annotations__ = {"processed": int, "total": int, "return": bool}
    try:
        serialized = graph.save(None, progress=progress)
    except RuntimeError as exc:
        if late:
            raise SaveAbandoned("past its deadline while the graph was serialised") from exc
        raise
    if serialized is None:  # a graph opened from a path saves there: never one of ours
        raise RuntimeError("usearch saved to its own path instead of returning the graph")
    return serialized


def _write_hashed(path: Path, data: bytes | bytearray, deadline: float | None = None) -> str:
    """Write ``data`` to ``path`` in pieces (each write and hash releases the interpreter lock); its SHA-256.

    Raises SaveAbandoned when ``deadline`` (monotonic) passes before the last piece.
    """
    digest = hashlib.sha256()
    view = memoryview(data)
    with path.open("wb") as handle:
        for start in range(0, len(view), DIGEST_CHUNK_BYTES):
            if deadline is not None and time.monotonic() > deadline:
                raise SaveAbandoned(f"past its deadline after {start} of {len(view)} bytes written")
            piece = view[start : start + DIGEST_CHUNK_BYTES]
            handle.write(piece)
            digest.update(piece)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of a file, hex (SHA-256 rather than BLAKE2: hardware-accelerated here, ~1.7 GB/s against 0.8)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(DIGEST_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class RebuildState:
    """What start-up found missing from the saved graph and how much of it the builder has inserted."""

    total: int
    """Vectors the saved graph lacked at start-up (0: it had them all)."""
    remaining: int
    """Of those, vectors not yet in the graph (recall scans them exactly)."""
    reason: str
    """Why they were missing, for operators ("" when none were)."""


class VectorIndex:
    """HNSW graph + fresh tail, keyed by memory id, with a background builder thread.

    ``add`` is called by the committer after a write is durable; ``search``
    by any gRPC thread. ``start`` launches the builder; ``close`` stops it and
    saves the graph.
    """

    def __init__(
        self, directory: Path, dimension: int, config: IndexConfig, *, tail_file: TailFile | None = None
    ) -> None:
        self.directory = directory
        self.dimension = dimension
        self.config = config
        self._graph = self._new_graph()
        self._lock = _SharedExclusiveLock()
        self._tail_lock = threading.Lock()
        self._tail = FreshTail(dimension)
        self._pending_removals: list[int] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._builder: threading.Thread | None = None
        self._dirty = False
        self.saved_sequence = 0
        self.saved_at: float | None = None
        self._sequence_source: Callable[[], int] = lambda: 0
        self.load_problem = "no saved index"
        """Why :meth:`load` did not load a graph ("" when it did)."""
        self._rebuild_total = 0
        self._rebuild_left = 0
        self._rebuild_below = 0
        """Rebuild rows are the ids below this (every later write has a larger id); guarded by the tail lock."""
        self._rebuild_reason = ""
        self._save_rates: list[float] = []
        """Bytes per second of this process's last saves, newest last (a stop's estimate)."""
        self._tail_file = tail_file
        """Where every tail vector is also appended, for a start after a crash to map (None: not kept)."""
        self._persister: threading.Thread | None = None
        self._bulk_threads = config.bulk_threads or len(os.sched_getaffinity(0))
        """Threads a backlog step inserts with (``IndexConfig.bulk_threads``, 0 = one per core this process may use)."""
        self._insert_threads = _InsertThreads(self._bulk_threads, config.build_threads)
        self._graph_threads = 0
        """Threads the graph's per-thread state was last sized for by an exclusive add() (0: not yet)."""
        self.repaired = 0
        """Vectors inserted again: the graph did not find them after a multi-threaded add() (upstream issue 735)."""

    def _new_graph(self) -> _CompiledIndex:
        return _CompiledIndex(
            ndim=self.dimension,
            metric="cos",
            dtype=self.config.dtype,
            connectivity=self.config.connectivity,
            expansion_add=self.config.expansion_add,
            expansion_search=self.config.expansion_search,
        )

    # ---- load, reconcile, save --------------------------------------------------------------

    def load(self) -> bool:
        """Load the saved graph if it is intact and of our dimension; False: start empty, see :attr:`load_problem`."""
        path = self.directory / INDEX_FILE
        meta_path = self.directory / INDEX_META_FILE
        if not path.exists() or not meta_path.exists():
            self.load_problem = "no saved index"
            return False
        try:
            meta = json.loads(meta_path.read_text())
            expected = meta.get("sha256")
            if expected is None:
                # Saved before checksums: loaded as before; its next save adds one.
                log.warning("index file %s has no checksum: loaded unverified", path)
            elif file_digest(path) != expected:
                raise ValueError("index file checksum mismatch")
            graph = self._new_graph()
            graph.load(str(path))
            if graph.ndim != self.dimension or int(meta.get("count", -1)) != len(graph):
                raise ValueError("index file does not match its metadata")
            if graph.dtype != self._new_graph().dtype:
                # Saved by a version with another scalar type: a rebuild gives the configured one.
                raise ValueError(f"index file stores {graph.dtype}, configured {self.config.dtype}")
        except Exception as exc:  # a torn, damaged or foreign file is rebuilt, never trusted
            log.warning("index file %s unreadable (%s): rebuilding from RocksDB", path, exc)
            self.load_problem = f"saved index unusable: {exc}"
            return False
        self.load_problem = ""
        self._graph = graph
        self._graph_threads = 0
        self.saved_sequence = int(meta.get("sequence", 0))
        self.saved_at = float(meta.get("saved_at", 0.0)) or None
        return True

    def graph_contains(self, ids: IdArray) -> npt.NDArray[np.bool_]:
        """Which of ``ids`` are in the graph (safe beside the builder: recall asks while it inserts)."""
        if ids.size == 0:
            return np.zeros(0, dtype=bool)
        self._lock.acquire_shared()
        try:
            found = self._graph.contains(ids.astype(np.uint64))
        finally:
            self._lock.release_shared()
        return np.asarray(found, dtype=bool).reshape(-1)

    def graph_keys(self) -> IdArray:
        """Every id in the graph."""
        if len(self._graph) == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self._graph.keys, dtype=np.int64)

    def bulk_build(self, ids: IdArray, vectors: FloatMatrix, progress: Callable[[int], None] | None = None) -> None:
        """Insert many vectors into the graph directly, before :meth:`start` (tests and tools: nothing searches)."""
        step = max(self.config.build_batch, 1)
        for start in range(0, ids.size, step):
            chunk = slice(start, start + step)
            self._graph.add(
                ids[chunk].astype(np.uint64), normalize_rows(vectors[chunk]), threads=self.config.build_threads
            )
            if progress is not None:
                progress(int(ids[chunk].size))
        self._dirty = True

    def remove_from_graph_now(self, ids: IdArray) -> None:
        """Remove ids from the graph before serving (start-up reconciliation)."""
        if ids.size:
            self._graph.remove(ids.astype(np.uint64))
            self._dirty = True

    def save(self, deadline: float | None = None) -> bool:
        """Write the graph atomically (temp file + rename), then its metadata: the sequence it covers and its SHA-256.

        A crash between the two renames leaves a file that does not match its metadata: it is not loaded. With a
        ``deadline`` (monotonic) the save is abandoned if it passes before the file is complete (False): the saved
        file, its metadata and the fresh-tail files stay as they were, so the next start finds what it lacks.
        """
        started = time.perf_counter()
        tmp = self.directory / (INDEX_FILE + ".tmp")
        rotated = -1
        needed = np.zeros(0, dtype=np.int64)
        if self._tail_file is not None:
            # Appends from here on go to a new segment; what the closed ones hold is in the graph this save
            # writes, or in the tail now (kept), or forgotten. Rotated outside the tail lock: rotating waits for
            # queued appends to reach the disk, and writers take that lock.
            rotated = self._tail_file.rotate()
            with self._tail_lock:
                needed = self._tail.live_ids()
        # Shared, not exclusive: only the builder thread changes the graph, and it is the one saving (or it has
        # stopped), so searches may read the graph while it is written (they waited for the whole save before).
        self._lock.acquire_shared()
        try:
            sequence = self._sequence_source()
            count = len(self._graph)
            dirty_before = self._dirty
            try:
                serialized = _serialize_yielding(self._graph, deadline)
            except SaveAbandoned as exc:
                log.info("index save abandoned (%s): the next start inserts what the saved file lacks", exc)
                return False
            self._dirty = False
        finally:
            self._lock.release_shared()
        try:
            digest = _write_hashed(tmp, serialized, deadline)
            del serialized
            os.replace(tmp, self.directory / INDEX_FILE)
            meta_tmp = self.directory / (INDEX_META_FILE + ".tmp")
            now = time.time()
            meta_tmp.write_text(
                json.dumps(
                    {
                        "sequence": sequence,
                        "count": count,
                        "dimension": self.dimension,
                        "saved_at": now,
                        "sha256": digest,
                    }
                )
            )
            os.replace(meta_tmp, self.directory / INDEX_META_FILE)
        except SaveAbandoned as exc:
            tmp.unlink(missing_ok=True)
            self._dirty = dirty_before
            log.info("index save abandoned (%s): the next start inserts what the saved file lacks", exc)
            return False
        except BaseException:
            tmp.unlink(missing_ok=True)
            self._dirty = dirty_before
            raise
        self.saved_sequence = sequence
        self.saved_at = now
        if self._tail_file is not None and rotated >= 0:
            self._tail_file.prune(rotated, needed)
        elapsed = time.perf_counter() - started
        size = (self.directory / INDEX_FILE).stat().st_size
        if elapsed > 0.05:  # a tiny save says little about the speed of a large one
            self._save_rates = [*self._save_rates[1 - SAVE_RATES_KEPT :], size / elapsed]
        return True

    # ---- writes -----------------------------------------------------------------------------

    @property
    def tail_count(self) -> int:
        """Vectors acknowledged but not yet in the graph."""
        return self._tail.count

    @property
    def graph_count(self) -> int:
        """Vectors in the graph."""
        return len(self._graph)

    def begin_rebuild(self, ids: IdArray, fill: Callable[[IdArray, FloatMatrix], object], reason: str) -> None:
        """Make what the graph lacks at start-up searchable now (fresh tail), before any write; the builder inserts it.

        ``ids`` ascending, all below every id written later; ``fill(some_ids, rows)`` writes the stored vectors of
        ``some_ids`` (any length) into ``rows``, one row per id. What the fresh-tail files hold the tail reads in
        place (their unit vectors, mapped: nothing copied, no fresh memory touched); ``fill`` is asked for the rest,
        into the tail's own buffer, so that a million vectors are not copied through temporaries, and those are
        normalised in place and appended to the files in the background (the next start finds them there). Until
        the builder has them in the graph, recall scans them exactly, and the tail's back-pressure does not count
        them (see :attr:`write_backlog`).
        """
        if ids.size == 0:
            return
        blocks: list[tuple[IdArray, FloatMatrix, npt.NDArray[np.bool_]]] = []
        mapped = np.zeros(ids.size, dtype=bool)
        if self._tail_file is not None:
            blocks, mapped = self._tail_file.blocks(ids)
        read = ids[~mapped]
        with self._tail_lock:
            for block_ids, block_vectors, alive in blocks:
                self._tail.adopt(block_ids, block_vectors, alive)
            id_rows, vector_rows = self._tail.reserve(int(read.size))
        id_rows[:] = read
        fill(read, vector_rows)
        for start in range(0, read.size, NORMALISE_ROWS):
            block = vector_rows[start : start + NORMALISE_ROWS]
            block /= np.linalg.norm(block, axis=1, keepdims=True)
        with self._tail_lock:
            self._tail.commit(int(read.size))
            self._rebuild_total = int(ids.size)
            self._rebuild_left = int(ids.size)
            self._rebuild_below = int(ids[-1]) + 1
            self._rebuild_reason = reason
        log.info(
            "serving while %d vectors missing from the saved index are inserted (%s); %d of them mapped from the "
            "fresh-tail files, %d read from RocksDB",
            ids.size,
            reason,
            ids.size - read.size,
            read.size,
        )
        if self._tail_file is not None and read.size:
            # Rows of the tail's buffer are never overwritten (see FreshTail), so they can be read meanwhile.
            self._persister = threading.Thread(
                target=self._persist, args=(read, vector_rows[: read.size]), name="memevo-tail-copy", daemon=True
            )
            self._persister.start()

    def _persist(self, ids: IdArray, rows: FloatMatrix) -> None:
        """Append rows read from RocksDB at start-up to the fresh-tail files, a block at a time, until stopped."""
        assert self._tail_file is not None
        for start in range(0, ids.size, PERSIST_ROWS):
            picked = slice(start, start + PERSIST_ROWS)
            self._tail_file.append(ids[picked], rows[picked], wait=True)
            # Paced: a burst of a gigabyte into the page cache made the write path's log fsyncs wait seconds
            # (1M memories: writes held 1.3-4.5 s at the start that wrote them all at once).
            if self._stop.wait(ids[picked].size * rows.shape[1] * 4 / PERSIST_BYTES_PER_S):
                return

    @property
    def rebuild(self) -> RebuildState:
        """The start-up rebuild's size and progress."""
        with self._tail_lock:
            return RebuildState(self._rebuild_total, self._rebuild_left, self._rebuild_reason)

    @property
    def write_backlog(self) -> int:
        """Tail vectors that writes put there (the tail less the start-up rebuild's rows)."""
        return max(self._tail.count - self._rebuild_left, 0)

    def _rebuilt(self, ids: IdArray) -> None:
        """Count rebuild rows that left the tail (inserted or forgotten); under the tail lock."""
        if self._rebuild_left and ids.size:
            self._rebuild_left -= int(np.count_nonzero(ids < self._rebuild_below))
            if self._rebuild_left <= 0:
                self._rebuild_left = 0
                log.info("index rebuild complete: %d vectors inserted", self._rebuild_total)

    def add(self, ids: IdArray, vectors: FloatMatrix) -> None:
        """Make vectors searchable now (fresh tail); the builder moves them into the graph."""
        if ids.size == 0:
            return
        unit = normalize_rows(vectors)
        with self._tail_lock:
            self._tail.append(ids.astype(np.int64), unit)
        self._wake.set()
        if self._tail_file is not None:
            # After the tail: a save that rotates meanwhile then finds the ids in the tail and keeps their segment.
            self._tail_file.append(ids.astype(np.int64), unit)

    def remove(self, ids: IdArray) -> None:
        """Drop ids from the graph (done by the builder) and from the tail (now)."""
        if ids.size == 0:
            return
        with self._tail_lock:
            self._rebuilt(self._tail.remove(np.asarray(ids, dtype=np.int64)))
            self._pending_removals.extend(int(i) for i in ids)
        self._wake.set()

    # ---- search -----------------------------------------------------------------------------

    def search(self, query: FloatMatrix, count: int, *, with_tail: bool = True) -> Matches:
        """Up to ``count`` nearest graph matches plus the tail's nearest, by cosine similarity.

        ``query`` is one unit-length row. The tail is scanned exactly and gives every vector when it
        holds up to TAIL_ALL, else its nearest max(``count``, TAIL_ALL). The caller filters and ranks;
        the search was exhaustive when ``count`` covers both :attr:`graph_count` and :attr:`tail_count`.
        """
        return self.neighbours(query, count, with_tail=with_tail).first(count)

    def neighbours(self, query: FloatMatrix, count: int, *, with_tail: bool = True) -> Neighbours:
        """The nearest ``count`` of one unit-length query row, kept so that :meth:`search` with any smaller count
        can be answered from them (see :class:`Neighbours`)."""
        tail_ids = np.zeros(0, dtype=np.int64)
        tail_sims = np.zeros(0, dtype=np.float32)
        if with_tail:
            with self._tail_lock:
                parts = self._tail.parts()
            wanted = max(count, TAIL_ALL)
            nearest_parts = [nearest(i, v, query[0], wanted, alive) for i, v, alive in parts if i.size]
            if nearest_parts:
                tail_ids, tail_sims = nearest_parts[0] if len(nearest_parts) == 1 else _best(nearest_parts, wanted)
                if tail_ids.size > TAIL_ALL:  # kept best first, so that a smaller count takes a prefix
                    order = np.argsort(-tail_sims, kind="stable")
                    tail_ids, tail_sims = tail_ids[order], tail_sims[order]
        graph_ids = np.zeros(0, dtype=np.int64)
        graph_sims = np.zeros(0, dtype=np.float32)
        if count > 0 and len(self._graph) > 0:
            self._lock.acquire_shared()
            try:
                # Not capped at a size read before the search: the builder may move tail vectors in meanwhile,
                # and the graph's first few would then be those (the tail read above has them too) instead of
                # the older ones a cap let through. usearch answers with what it holds when asked for more.
                found = self._graph.search(query[0], count)
            finally:
                self._lock.release_shared()
            graph_ids = np.asarray(found.keys, dtype=np.int64)
            # Half-precision vectors put a cosine within ~1e-3 of the exact one, so keep it inside [-1, 1].
            graph_sims = np.clip(1.0 - np.asarray(found.distances, dtype=np.float32), -1.0, 1.0)
            sane = np.isfinite(graph_sims)
            if not sane.all():  # a damaged vector in memory: no score is better than NaN
                graph_ids, graph_sims = graph_ids[sane], graph_sims[sane]
        return Neighbours(count, graph_ids, graph_sims, tail_ids, tail_sims)

    def search_many(self, queries: FloatMatrix, count: int) -> list[Matches]:
        """The ``count`` nearest neighbours of each unit row of ``queries`` (graph and tail), one Matches per row.

        For background passes over many seeds: each block of rows reads the fresh tail once (one matrix
        product) instead of once per row, which at a tail of 100k+ vectors is most of the work, and
        asks the graph for the whole block in one call.
        """
        out: list[Matches] = []
        if queries.shape[0] == 0 or count <= 0:
            return out
        with self._tail_lock:
            tail_parts = [part for part in self._tail.parts() if part[0].size]
        size = len(self._graph)
        widest = max((part[0].size for part in tail_parts), default=1)
        step = max(1, min(SEARCH_MANY_BLOCK, SEARCH_MANY_CELLS // widest))
        for start in range(0, queries.shape[0], step):
            block = np.ascontiguousarray(queries[start : start + step], dtype=np.float32)
            rows = block.shape[0]
            parts_ids: list[IdArray] = []
            parts_sims: list[npt.NDArray[np.float32]] = []
            for tail_ids, tail_vectors, alive in tail_parts:
                sims = (block @ tail_vectors.T).astype(np.float32, copy=False)  # rows x part
                if alive is not None:  # a dead row is never among the best; dropped below as not finite
                    sims[:, ~alive] = -np.inf
                take = min(count, tail_ids.size)
                best = np.argpartition(-sims, take - 1, axis=1)[:, :take] if take < tail_ids.size else None
                if best is None:
                    parts_ids.append(np.broadcast_to(tail_ids, (rows, tail_ids.size)))
                    parts_sims.append(sims)
                else:
                    parts_ids.append(tail_ids[best])
                    parts_sims.append(np.take_along_axis(sims, best, axis=1))
            if len(tail_parts) > 1:  # the best ``count`` of the whole tail, as one part would give
                joined_ids, joined_sims = np.concatenate(parts_ids, axis=1), np.concatenate(parts_sims, axis=1)
                if joined_ids.shape[1] > count:
                    best = np.argpartition(-joined_sims, count - 1, axis=1)[:, :count]
                    joined_ids = np.take_along_axis(joined_ids, best, axis=1)
                    joined_sims = np.take_along_axis(joined_sims, best, axis=1)
                parts_ids, parts_sims = [joined_ids], [joined_sims]
            if size > 0:
                self._lock.acquire_shared()
                try:
                    found = self._graph.search(block, count)  # not capped at ``size``: see neighbours()
                finally:
                    self._lock.release_shared()
                keys = np.asarray(found.keys, dtype=np.int64).reshape(rows, -1)
                distances = np.asarray(found.distances, dtype=np.float32).reshape(rows, -1)
                # usearch answers a one-row block with the row's matches alone (no counts).
                counts = np.asarray(getattr(found, "counts", [keys.shape[1]]), dtype=np.int64).reshape(rows)
                width = keys.shape[1]
                valid = np.arange(width)[None, :] < counts[:, None]
                parts_ids.append(np.where(valid, keys, -1))
                # Past a row's count the distances are padding (asked for more than the graph holds): not read.
                sims = np.full(distances.shape, -np.inf, dtype=np.float32)
                sims[valid] = np.clip(1.0 - distances[valid], -1.0, 1.0)
                parts_sims.append(sims)
            if not parts_ids:
                out.extend(Matches(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)) for _ in range(rows))
                continue
            ids = np.concatenate(parts_ids, axis=1)
            sims_all = np.concatenate(parts_sims, axis=1)
            for row in range(rows):
                keep = (ids[row] >= 0) & np.isfinite(sims_all[row])
                row_ids, row_sims = ids[row][keep], sims_all[row][keep]
                # An id may sit in both the tail and the graph while the builder moves it.
                unique_ids, first = np.unique(row_ids, return_index=True)
                out.append(Matches(unique_ids, row_sims[first]))
        return out

    def tail_snapshot(self) -> tuple[IdArray, FloatMatrix]:
        """Every tail id (ascending) and its unit vector (read-only; no copy in the common case, but a copy of them
        all while a start's rebuild reads rows in place: tools and tests; requests use :meth:`tail_vectors`)."""
        with self._tail_lock:
            return self._tail.snapshot()

    def tail_vectors(self, ids: IdArray) -> tuple[FloatMatrix, npt.NDArray[np.bool_]]:
        """Unit vectors of those of ``ids`` in the tail (rows in ``ids`` order, others 0) and which ids it holds."""
        with self._tail_lock:
            return self._tail.lookup(ids)

    def graph_vectors(self, ids: IdArray) -> tuple[FloatMatrix, npt.NDArray[np.bool_]]:
        """Unit vectors of ids from the graph (rows in ``ids`` order) and which ids it holds (other rows: 0).

        Rows come back as inserted (to the graph's precision); every insert (tail, ``bulk_build``) is of unit rows.
        usearch builds one array per key: cheap for a few dozen ids, not for thousands.
        """
        vectors = np.zeros((ids.size, self.dimension), dtype=np.float32)
        found = np.zeros(ids.size, dtype=bool)
        if ids.size == 0:
            return vectors, found
        keys = ids.astype(np.uint64)
        self._lock.acquire_shared()
        try:
            compiled = getattr(self._graph, "_compiled", None)
            if compiled is not None and hasattr(compiled, "get_many"):
                # What Index.get calls, without its per-key Python cast (a third of a recall's vector reads).
                rows = compiled.get_many(keys, ScalarKind.F32)
            else:
                rows = self._graph.get(keys, dtype="f32")
        finally:
            self._lock.release_shared()
        if not isinstance(rows, tuple):
            rows = (rows,)
        present = [row for row in rows if row is not None]
        if len(present) == len(rows):
            found[:] = True
            np.stack(present, out=vectors)
        elif present:
            found[:] = [row is not None for row in rows]
            vectors[found] = np.stack(present)
        damaged = found & ~np.isfinite(vectors).all(axis=1)
        if damaged.any():  # reported missing, so the caller reads RocksDB instead
            found &= ~damaged
            vectors[damaged] = 0.0
        return vectors, found

    # ---- the builder ------------------------------------------------------------------------

    def start(self, sequence_source: Callable[[], int]) -> None:
        """Start the background builder; ``sequence_source`` tells saves which sequence they cover."""
        self._sequence_source = sequence_source
        if self._tail_file is not None:
            self._tail_file.forget_found()  # the start took what it needed from them
        self._builder = threading.Thread(target=self._run_builder, name="memevo-index", daemon=True)
        self._builder.start()

    def _run_builder(self) -> None:
        base_nice = thread_nice()
        lowered = lower_thread_priority(self.config.builder_nice, what="the index builder")
        priority = _BuilderPriority(self.config, base_nice if lowered else None)
        last_save = time.monotonic()
        rate = self.config.build_rate_per_s

        def save_due() -> bool:
            interval = self.config.save_interval_s
            if self._rebuild_left:
                interval = min(interval, self.config.rebuild_save_interval_s)
            return self._dirty and time.monotonic() - last_save >= interval

        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            try:
                while moved := self._build_step():
                    priority.follow(self._tail.count)
                    # Saved while behind too: a kill during a long rebuild resumes from here, not from scratch. Not
                    # once a stop has begun: close() joins this thread, and decides itself whether a save fits.
                    if save_due() and not self._stop.is_set():
                        last_save = time.monotonic()  # a failed save (full disk) waits a whole interval too
                        self.save()
                    if rate > 0 and self._stop.wait(moved / rate):
                        break
                    if self._stop.is_set():
                        break
                priority.follow(self._tail.count)
                if save_due() and not self._stop.is_set():
                    last_save = time.monotonic()
                    self.save()
            except Exception:  # keep building: a failed step leaves its vectors in the tail
                log.exception("index builder step failed")
                time.sleep(1.0)

    def _build_step(self) -> int:
        """Move one batch from the tail into the graph; the vectors inserted or removed (0: nothing to do)."""
        with self._tail_lock:
            removals, self._pending_removals = self._pending_removals, []
        if removals:
            self._lock.acquire_exclusive()
            try:
                keys = np.asarray(removals, dtype=np.uint64)
                present = np.asarray(self._graph.contains(keys), dtype=bool).reshape(-1)
                if present.any():
                    self._graph.remove(keys[present])
                self._dirty = True
            finally:
                self._lock.release_exclusive()
        step = min(self.config.build_batch, BUILD_STEP)
        if self.config.build_rate_per_s > 0:  # a capped rate moves small steps, not one large step and a long wait
            step = min(step, max(int(self.config.build_rate_per_s), 1))
        with self._tail_lock:
            span, ids, vectors = self._tail.front(step)
        if span == 0:
            return len(removals)
        if ids.size:
            # A row forgotten meanwhile is inserted all the same; its removal is pending and follows.
            complete = self._insert(ids.astype(np.uint64), vectors)
            self._dirty = True
            if not complete:  # stopping: the rows stay in the tail (and in RocksDB); the next start finds them
                return int(ids.size)
        with self._tail_lock:
            self._rebuilt(self._tail.drop_front(span))
        return max(int(ids.size), 1)

    def _insert(self, keys: npt.NDArray[np.uint64], vectors: FloatMatrix) -> bool:
        """Add to the graph in pieces so that searches wait milliseconds, not seconds; False if stopped midway.

        usearch serialises search against a running add() (measured: a search
        waits for the whole call), and grows its arrays inside add(), which
        must not race with searches. So a few writes go in ``insert_chunk``
        per thread at a time; a piece that would grow the arrays goes in
        alone, under the exclusive lock, as a single vector. A step of
        ``bulk_min_vectors`` or more (a backlog) goes in on ``bulk_threads``
        when that has been the faster per vector (:class:`_InsertThreads`), in
        calls of about ``bulk_call_s`` each (:meth:`_InsertThreads.call_size`):
        at 8 vectors a thread the threads waited for each other at every
        call's end, and usearch's thread 0 takes the interpreter lock back
        after every vector, so a busy write path held the others up; what the
        graph then does not find by its own vector goes in again on one
        thread (:meth:`_repair`).
        """
        backlog = keys.size >= self.config.bulk_min_vectors
        threads = self._insert_threads.choose() if backlog else self.config.build_threads
        piece = max(self.config.insert_chunk, 1) * max(threads, 1)
        if backlog and threads > 1:  # one thread has no one to wait for at a call's end: its calls stay short
            piece = self._insert_threads.call_size(threads, self.config.bulk_call_s, piece)
        began = time.monotonic()
        if not self._add_pieces(keys, vectors, threads, piece):
            return False
        if threads > 1 and not self._repair(keys, vectors, threads, piece):
            return False
        if backlog:
            self._insert_threads.record(threads, int(keys.size), time.monotonic() - began)
        return True

    def _add_pieces(self, keys: npt.NDArray[np.uint64], vectors: FloatMatrix, threads: int, step: int) -> bool:
        """:meth:`_insert`'s add() calls, ``step`` vectors each; False if stopped midway."""
        step = max(step, 1)
        done = 0
        while done < keys.size:
            if self._stop.is_set():
                # A step of 512 inserts takes seconds, and much longer at the builder's low priority on a busy
                # machine: a clean stop waited for it (py-spy: MainThread in the builder join of a slow stop).
                return False
            room = int(self._graph.capacity) - len(self._graph)
            grows = room <= 0
            # usearch's add() reserves room for its thread count each call: more threads than the graph was last
            # sized for reallocates per-thread state that searches use, so that call excludes them too; and a
            # growth passes the most used so far, so that a one-thread growth does not size it down again.
            exclusive = grows or threads > self._graph_threads
            take = 1 if grows else min(room, step, keys.size - done)
            call_threads = max(threads, self._graph_threads) if grows else threads
            if exclusive:
                self._lock.acquire_exclusive()
            else:
                self._lock.acquire_shared()
            try:
                self._graph.add(keys[done : done + take], vectors[done : done + take], threads=call_threads)
                if exclusive:
                    self._graph_threads = call_threads
            finally:
                if exclusive:
                    self._lock.release_exclusive()
                else:
                    self._lock.release_shared()
            done += take
        return True

    def _repair(self, keys: npt.NDArray[np.uint64], vectors: FloatMatrix, threads: int, step: int) -> bool:
        """Insert again, on one thread, what a multi-threaded add() left unreachable; False if stopped midway.

        usearch 2.26's concurrent add() can leave a node in the graph that no search reaches (upstream issue 735).
        Each of ``keys`` is searched for by its own vector with a beam of VERIFY_EXPANSION (a search with the
        configured beam cost ~3 inserts, which undid what the second core gained); those not among their
        VERIFY_COUNT nearest are searched for again with the configured beam, and those still not found are
        removed and added again. The vectors are still in the fresh tail meanwhile: recall finds them regardless.
        Searches go ``step`` vectors a call, as the inserts did (a search is several times cheaper than an insert).
        """
        unfound = self._unfound(keys, vectors, threads, VERIFY_EXPANSION, step)
        if unfound is None:
            return False
        if unfound.size:
            again = np.flatnonzero(np.isin(keys, unfound))
            unfound = self._unfound(keys[again], vectors[again], threads, None, step)
        if unfound is None:
            return False
        if not unfound.size:
            return True
        picked = np.flatnonzero(np.isin(keys, unfound))
        self._lock.acquire_exclusive()
        try:
            self._graph.remove(keys[picked])
        finally:
            self._lock.release_exclusive()
        self.repaired += int(picked.size)
        log.debug(
            "%d of %d vectors inserted on %d threads were unreachable: inserted again", picked.size, keys.size, threads
        )
        return self._add_pieces(keys[picked], vectors[picked], 1, max(self.config.insert_chunk, 1))

    def _unfound(
        self, keys: npt.NDArray[np.uint64], vectors: FloatMatrix, threads: int, expansion: int | None, step: int
    ) -> npt.NDArray[np.uint64] | None:
        """Those of ``keys`` the graph does not give among the VERIFY_COUNT nearest of their own vectors, searched
        with a beam of ``expansion`` (None: the configured one); None if stopped midway.

        A beam other than the configured one is set for the call alone, under the exclusive lock (the setting is the
        graph's, and a recall meanwhile must search with its own); each call takes ``step`` vectors, as many as an
        insert piece, so a search waits no longer than for one.
        """
        step = max(step, 1)
        lost: list[npt.NDArray[np.uint64]] = []
        for start in range(0, keys.size, step):
            if self._stop.is_set():
                return None
            piece = slice(start, start + step)
            rows = int(keys[piece].size)
            if expansion is None:
                self._lock.acquire_shared()
            else:
                self._lock.acquire_exclusive()
            try:
                if expansion is None:
                    found = self._graph.search(vectors[piece], VERIFY_COUNT, threads=min(threads, rows))
                else:
                    configured = self._graph.expansion_search
                    self._graph.expansion_search = expansion  # type: ignore[misc]  # usearch declares the setter apart
                    try:
                        found = self._graph.search(vectors[piece], VERIFY_COUNT, threads=min(threads, rows))
                    finally:
                        self._graph.expansion_search = configured  # type: ignore[misc]
            finally:
                if expansion is None:
                    self._lock.release_shared()
                else:
                    self._lock.release_exclusive()
            # usearch answers a one-row query with that row's matches alone (no leading axis).
            hits = np.asarray(found.keys, dtype=np.uint64).reshape(rows, -1)
            lost.append(keys[piece][~(hits == keys[piece][:, None]).any(axis=1)])
        return np.concatenate(lost) if lost else np.zeros(0, dtype=np.uint64)

    def save_estimate_s(self) -> float:
        """Seconds a save would take now, from the graph's size and the slowest of this process's last saves."""
        rate = min(self._save_rates, default=SAVE_BYTES_PER_S)
        return float(self._graph.serialized_length) / rate

    def stop_builder(self) -> None:
        """Ask the builder to stop at its next insert (``close`` waits for it): a stop's other work then has the cores
        the builder would take (at 1M under load it was still inserting while the stop wrote the snapshot)."""
        self._stop.set()
        self._wake.set()

    def close(self, *, save: bool = True, budget_s: float | None = None) -> None:
        """Stop the builder and save the graph if that fits ``budget_s`` (default ``close_save_budget_s``).

        The tail is not drained (that could take minutes): its vectors are in RocksDB and go back into the tail at
        the next start. Neither is a large graph saved: the next start finds what the saved file lacks, serves at
        once and inserts it in the background. A save begun is abandoned when the budget runs out before its file
        is complete (the estimate was 1.5-3x optimistic under load), so the stop waits for the budget at most.
        """
        budget = self.config.close_save_budget_s if budget_s is None else min(budget_s, self.config.close_save_budget_s)
        self.stop_builder()
        if self._builder is not None:
            self._builder.join()
        if self._persister is not None:
            self._persister.join()
        try:
            if not (save and self._dirty):
                return
            if not stop_save_fits(self._graph.serialized_length, self._save_rates, budget):
                log.info(
                    "index not saved at stop (~%.1f s, budget %.1f s): the next start inserts what the saved file "
                    "lacks",
                    self.save_estimate_s(),
                    budget,
                )
                return
            self.save(deadline=time.monotonic() + budget)
        finally:
            if self._tail_file is not None:
                self._tail_file.close()
