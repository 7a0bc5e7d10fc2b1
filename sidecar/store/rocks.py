"""RocksDB, the source of truth: column families, metadata and group-committed, fsynced writes.

Every mutation runs in one committer thread, under the commit lock, so id and
sequence allocation, read-modify-write checks (request ids, fact keys) and the
order of the change log are serial and simple. The committer takes all
mutations queued while the previous write was syncing and writes them in one
synced batch: concurrent writers share an fsync (group commit) and each is
acknowledged only after its batch is durable.

Measured (benchmarks/write_latency.py, runs interleaved in one process): letting
an uncontended caller commit on its own thread instead (leader/follower) saved no
time and cost p99 and throughput, with one caller and with eight, so every write
goes through the committer thread.

A failed log write (a full disk, a file size limit, a file system turned
read-only) leaves RocksDB refusing every later write until it is reopened.
The store then refuses writes at once, and the committer checks every few
seconds (backing off to a minute) whether the problem is gone: a probe file
must be writable with room to spare, then the database is reopened in place
(RocksDB recovers its log and flushes it) and writes resume, with no restart.
Reads keep working throughout; one racing the reopen waits for it and retries.

A start needs no room for the log either: opening RocksDB replays its log
into a table file about the log's size (measured: a 20.7 MB log and 4 MB free
made the start fail with "No space left"). When that fails for want of space
the store opens read-only (it replays the log in memory, writes nothing,
and this process holds RocksDB's lock in its place), serves reads, refuses
writes as above, and reopens for writing once a probe finds the room.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import logging
import math
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import rocksdict

from ..errors import FailedPrecondition, StorageError, Unavailable
from .files import restrict_new_files

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

CF_MEMORIES = "memories"
CF_VECTORS = "vectors"
CF_FACTS = "facts"
CF_ENTITIES = "entities"
CF_CHANGELOG = "changelog"
CF_META = "meta"
CF_REQUESTS = "requests"
CF_FACT_VERSIONS = "fact_versions"
"""(namespace, entity, attribute, id) -> b"": every version of a fact key, current or not."""
CF_DEDUP = "dedup"
"""(namespace, kind, hash of normalised content) -> id: exact duplicates are confirmed, not stored."""
CF_MEMORY_EVENTS = "memory_events"
"""(memory id, sequence) -> b"": the change-log events about one memory, for History."""
CF_RETRIEVALS = "retrievals"
"""retrieval id -> the ids a Recall returned, for ReportOutcome (written unsynced)."""
CF_VECTOR_DIGESTS = "vector_digests"
"""(namespace, digest of the unit vector, id) -> b"": which memories hold exactly a vector (store/vector_digests.py).
Added within schema 1: a store written before gains it empty at its first read-write open, and its earlier memories
have no digest (see ``RocksStore._open``)."""
COLUMN_FAMILIES = (
    CF_MEMORIES,
    CF_VECTORS,
    CF_FACTS,
    CF_ENTITIES,
    CF_CHANGELOG,
    CF_META,
    CF_REQUESTS,
    CF_FACT_VERSIONS,
    CF_DEDUP,
    CF_MEMORY_EVENTS,
    CF_RETRIEVALS,
    CF_VECTOR_DIGESTS,
)

GROUP_MAX_ITEMS = 2048
"""Memories one commit group takes at most (a lone larger mutation is a group of its own). Streams queue their chunks
without waiting for them, so a group used to take whatever queued while the previous one committed: under a burst
groups grew to 20,000 memories and 5 s each (a snapshot waits for the group in progress, a writer for its own). At
~4,000 memories/s a group is now half a second; a sync costs ~60 us, nothing next to a group's perception."""

META_SCHEMA = b"schema_version"
META_DIMENSION = b"dimension"
META_EMBEDDER = b"embedder"
META_NEXT_ID = b"next_id"
META_LAST_SEQUENCE = b"last_sequence"
META_FRAMEWORK = b"framework_version"
META_CREATED = b"created_at"

_U64 = struct.Struct(">Q")
T = TypeVar("T")

RESUME_FIRST_S = 2.0
"""Seconds after a failed write before the first check whether writes can resume."""
RESUME_MAX_S = 60.0
"""The longest wait between two such checks (the wait doubles after each one that fails)."""
REOPEN_ATTEMPTS = 100
"""Tries to reopen RocksDB (20 ms apart) while a read still holds the closed database's lock."""
PROBE_FILE = "write-probe"
PROBE_BYTES = 1 << 20
"""Bytes a probe file must take (written and synced), beyond the size of RocksDB's logs, before a reopen."""
ITERATE_CHUNK = 1024
"""Pairs read per RocksDB iterator by :meth:`RocksStore.iterate`: no iterator lives on while its caller works,
which would keep open a database that must be reopened."""
WRITES_HEALTH_NAME = "memevo.v1.MemoryService/writes"
"""The grpc.health.v1 service name that is NOT_SERVING while writes are refused (reads are still served)."""


def u64_key(value: int) -> bytes:
    """Big-endian 8 bytes, so RocksDB's byte order is numeric order."""
    return _U64.pack(value)


def key_u64(key: bytes) -> int:
    """Inverse of :func:`u64_key`."""
    return int(_U64.unpack(key)[0])


def _storage_error(exc: Exception) -> StorageError:
    """A StorageError that says what went wrong in words a caller can act on (full disk, read-only)."""
    text = str(exc)
    if "No space left" in text:
        why, reason = "the data directory's disk is full", "DISK_FULL"
    elif "Read-only file system" in text:
        why, reason = "the data directory is read-only", "DATA_DIR_READ_ONLY"
    elif "File too large" in text:
        why, reason = "a file of the data directory reached the process's file size limit", "FILE_TOO_LARGE"
    else:
        why, reason = "RocksDB write failed", "STORAGE_WRITE_FAILED"
    return StorageError(
        f"{why}; nothing of this call was stored, reads keep working. Writes resume by themselves once the "
        f"problem is fixed (checked every few seconds; health service {WRITES_HEALTH_NAME!r} says when). ({text})",
        reason=reason,
    )


def _cf_options() -> rocksdict.Options:
    return rocksdict.Options(raw_mode=True)


class _Reopening(dict[str, Any]):
    """The column families while none is open (a reopen failed): a read gets UNAVAILABLE, not a KeyError."""

    def __missing__(self, key: str) -> Any:
        raise Unavailable(
            "RocksDB is being reopened after a failed write and is not open now; retry in a few seconds",
            reason="STORAGE_REOPENING",
        )


class _AbsentColumnFamily:
    """A column family a read-only open could not open (a newer memevo added it): read as empty."""

    def get(self, key: bytes | list[bytes]) -> Any:
        return [None] * len(key) if isinstance(key, list) else None

    def iter(self) -> _AbsentColumnFamily:
        return self

    def seek(self, key: bytes) -> None:
        pass

    def seek_for_prev(self, key: bytes) -> None:
        pass

    def seek_to_first(self) -> None:
        pass

    def valid(self) -> bool:
        return False

    def next(self) -> None:
        pass

    def prev(self) -> None:
        pass

    def put(self, key: bytes, value: bytes, options: Any = None) -> None:
        raise StorageError("RocksDB is open read-only", reason="STORAGE_READ_ONLY")

    def delete_range(self, begin: bytes, end: bytes, options: Any = None) -> None:
        self.put(begin, b"")

    def close(self) -> None:
        pass


@dataclass
class Txn:
    """The writes of one mutation, applied only if the mutation returns without raising.

    Reads see this mutation's own writes, then those of earlier mutations in the
    same group (not yet durable), then the database.
    """

    store: RocksStore
    parent: dict[tuple[str, bytes], bytes | None]
    group: dict[tuple[str, object], list[Any]] = field(default_factory=dict)
    """Lists shared by the mutations of one group (e.g. ids created under a prefix), because
    the database's prefix scans cannot see writes that are not yet durable."""
    writes: dict[tuple[str, bytes], bytes | None] = field(default_factory=dict)
    group_adds: list[tuple[tuple[str, object], Any]] = field(default_factory=list)
    own_adds: dict[tuple[str, object], list[Any]] = field(default_factory=dict)
    """``group_adds`` by (name, key): a batch of thousands adds as many values, and scanning them all at every
    ``pending`` made the batch quadratic."""
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    events: int = 0

    def get(self, cf: str, key: bytes) -> bytes | None:
        """The current value, including writes not yet durable."""
        slot = (cf, key)
        if slot in self.writes:
            return self.writes[slot]
        if slot in self.parent:
            return self.parent[slot]
        return self.store.get(cf, key)

    def get_many(self, cf: str, keys: list[bytes]) -> list[bytes | None]:
        """Several current values in one database call (writes not yet durable included)."""
        values: list[bytes | None] = [None] * len(keys)
        missing: list[int] = []
        for position, key in enumerate(keys):
            slot = (cf, key)
            if slot in self.writes:
                values[position] = self.writes[slot]
            elif slot in self.parent:
                values[position] = self.parent[slot]
            else:
                missing.append(position)
        for position, value in zip(missing, self.store.multi_get(cf, [keys[i] for i in missing]), strict=True):
            values[position] = value
        return values

    def in_group(self, cf: str, key: bytes) -> bool:
        """Whether this mutation or an earlier one of its group wrote or deleted ``key`` (not durable yet)."""
        slot = (cf, key)
        return slot in self.writes or slot in self.parent

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        """Write ``value`` at commit."""
        self.writes[(cf, key)] = value

    def delete(self, cf: str, key: bytes) -> None:
        """Delete ``key`` at commit."""
        self.writes[(cf, key)] = None

    def pending(self, name: str, key: object, *, newest: int = 0) -> list[Any]:
        """What earlier mutations of this group, and this one, added under (name, key), oldest first; only the
        last ``newest`` of them when given (0 = all)."""
        slot = (name, key)
        values = [*self.group.get(slot, ()), *self.own_adds.get(slot, ())]
        return values[-newest:] if newest else values

    def add_pending(self, name: str, key: object, value: Any) -> None:
        """Record ``value`` under (name, key) for later mutations of the group, if this one succeeds."""
        self.group_adds.append(((name, key), value))
        self.own_adds.setdefault((name, key), []).append(value)

    def prefix_keys(self, cf: str, prefix: bytes, *, newest_first: bool = False, limit: int = 0) -> list[bytes]:
        """Durable keys starting with ``prefix`` (in key order, or reversed), at most ``limit`` (0 = all)."""
        return self.store.prefix_keys(cf, prefix, newest_first=newest_first, limit=limit)

    def allocate_id(self) -> int:
        """A new memory id; ids are dense and increase with commit order."""
        return self.store._allocate_id()

    def release_id(self, memory_id: int) -> None:
        """Give back the id just allocated (the write turned out to confirm an existing memory)."""
        self.store._release_id(memory_id)

    def next_sequence(self) -> int:
        """The next change-log sequence number (gap-free once the group is durable)."""
        self.events += 1
        return self.store._allocate_sequence()

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the committer thread once the write is durable, before anyone is acknowledged.

        An exception it raises is logged, not returned: the write is durable by then.
        """
        self.after_commit.append(callback)


@dataclass
class _Pending(Generic[T]):
    mutation: Callable[[Txn], T]
    future: Future[T]
    items: int = 1
    """Memories the mutation writes, as its submitter counts them (a group holds GROUP_MAX_ITEMS at most)."""


def _dimension_required(path: Path) -> FailedPrecondition:
    return FailedPrecondition(
        f"new data directory {path} needs a vector dimension: configure an embedder or pass --dimension",
        reason="DIMENSION_REQUIRED",
    )


def _not_initialised(path: Path, why: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"{path} is not a memevo data directory ({why}: no sidecar has initialised it; "
        "memevo serve --data creates one)",
        reason="NOT_A_DATA_DIR",
    )


def require_dimension(path: Path, dimension: int) -> None:
    """FailedPrecondition (DIMENSION_REQUIRED) when ``path`` holds no database yet and ``dimension`` is 0.

    Checked before anything is created: a refused start used to leave ``path`` and an empty ``rocksdb/`` behind,
    which a later ``inspect`` then took for a data directory.
    """
    if dimension <= 0 and not (path / "rocksdb" / "CURRENT").exists():
        raise _dimension_required(path)


class RocksStore:
    """One RocksDB database per data directory, with its column families and group committer.

    Opening fails with FailedPrecondition when another process holds the
    directory, when its schema is newer than this code, or when the caller's
    dimension or embedder differs from the one the directory was created with.
    With ``create=False`` (tools that only read a directory, such as ``memevo
    inspect``) it also fails, creating nothing, where no sidecar initialised one
    (reason NOT_A_DATA_DIR).
    """

    def __init__(
        self,
        path: Path,
        *,
        dimension: int,
        embedder_identity: str,
        group_max: int = 4096,
        create: bool = True,
    ) -> None:
        # Every process that opens a data directory (serve, inspect, an engine in process) creates files in it:
        # RocksDB rotates its info log and writes a manifest, options and a log at each open.
        restrict_new_files()
        self._create = create
        if not create and not (path / "rocksdb" / "CURRENT").exists():
            raise _not_initialised(path, "no RocksDB database inside")
        if create:
            require_dimension(path, dimension)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._reopened = threading.Condition()
        """Notified when a reopen ends; ``_generation`` counts them, ``_reopening`` says one is under way."""
        self._generation = 0
        self._reopening = False
        self._guard: int | None = None
        """While RocksDB is open read-only: a descriptor of its LOCK file, holding the lock RocksDB does not take."""
        opened_full: StorageError | None = None
        try:
            try:
                self._open()
            except Exception as exc:
                if "No space left" not in str(exc) or not (path / "rocksdb" / "CURRENT").exists():
                    raise
                # Opening replays the WAL into a table file first: a full disk refuses that. Serve reads from a
                # read-only open meanwhile; writes are refused and resume once there is room (see _try_resume).
                opened_full = _storage_error(exc)
                self._lock_for_read_only()
                self._open(read_only=True)
        except Exception as exc:
            self._unlock_read_only()
            text = str(exc)
            if "lock" in text.lower():
                raise FailedPrecondition(
                    f"data directory {path} is in use by another sidecar (RocksDB lock held): {text}",
                    reason="DATA_DIR_LOCKED",
                ) from exc
            raise FailedPrecondition(f"cannot open RocksDB in {path}: {text}", reason="DATA_DIR_UNUSABLE") from exc
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True
        self._unsynced = rocksdict.WriteOptions()
        try:
            self.dimension, self.embedder_identity = self._check_meta(dimension, embedder_identity)
        except BaseException:
            self._release()
            raise
        self._next_id = self._meta_int(META_NEXT_ID, 1)
        self._last_sequence = self._meta_int(META_LAST_SEQUENCE, 0)
        self._durable_sequence = self._last_sequence
        self._group_max = group_max
        self._queue: deque[_Pending[Any]] = deque()
        """Mutations waiting for the commit lock's holder, in arrival order (appends and pops are atomic)."""
        self._commit_lock = threading.Lock()
        """Held while a group runs its mutations, writes and publishes; serialises all of them."""
        self._pause_turn = threading.Condition()
        self._pausers = 0
        """Callers of :meth:`paused` waiting for the commit lock: the committer steps out between groups for them."""
        self._work = threading.Event()
        """Wakes the committer thread: a submitted mutation is queued, or the store is closing."""
        self._closed = False
        self._released = False
        self._sequence_changed = threading.Condition()
        self._refusal: StorageError | None = None
        """Why writes are refused since a log write failed (None while they are accepted)."""
        self.refused_since = 0.0
        """System time (epoch s) writes started being refused; 0 while they are accepted."""
        self._resume_at = 0.0
        self._resume_wait_s = RESUME_FIRST_S
        self.on_writes_changed: Callable[[StorageError | None], None] | None = None
        """Called (from the committing thread) when writes start being refused (with why) or resume (None)."""
        if opened_full is not None:
            log.warning(
                "RocksDB opened read-only: its log could not be replayed into a table file (%s). Reads are "
                "served; writes are refused until the data directory has room for them",
                opened_full.message,
            )
            self._refusal = opened_full
            self.refused_since = time.time()
            self._resume_at = time.monotonic() + self._resume_wait_s
        self._committer = threading.Thread(target=self._run_committer, name="memevo-commit", daemon=True)
        self._committer.start()

    def _open(self, *, read_only: bool = False) -> None:
        directory = self.path / "rocksdb"
        names: tuple[str, ...] = COLUMN_FAMILIES
        if (directory / "CURRENT").exists():
            present = set(rocksdict.Rdict.list_cf(str(directory)))
            if read_only:
                # A read-only open cannot create the column families a newer memevo added: open those there are
                # and read the others as empty until a read-write reopen creates them.
                names = tuple(name for name in COLUMN_FAMILIES if name in present)
            elif CF_VECTOR_DIGESTS not in present:
                log.info(
                    "this data directory predates exact vector lookup: memories written before now have no vector "
                    "digest, so their own vector finds them through the ANN graph only (every later one is exact)"
                )
        options = _cf_options()
        options.create_if_missing(self._create and not read_only)
        options.create_missing_column_families(not read_only)
        options.increase_parallelism(2)
        self._db = rocksdict.Rdict(
            str(directory),
            options,
            column_families={name: _cf_options() for name in names},
            access_type=rocksdict.AccessType.read_only() if read_only else rocksdict.AccessType.read_write(),
        )
        self._handles = {name: self._db.get_column_family_handle(name) for name in names}
        self._cfs: dict[str, Any] = {
            name: self._db.get_column_family(name) if name in names else _AbsentColumnFamily()
            for name in COLUMN_FAMILIES
        }

    def _lock_for_read_only(self) -> None:
        """Hold RocksDB's LOCK file as RocksDB would (a read-only open takes no lock): another sidecar must not
        open the directory meanwhile. FailedPrecondition-worthy "lock" error when one holds it."""
        descriptor = os.open(self.path / "rocksdb" / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(descriptor)
            raise OSError(f"RocksDB lock held by another process: {exc}") from exc
        self._guard = descriptor

    def _unlock_read_only(self) -> None:
        """Let go of the read-only open's lock (closing the descriptor releases it) before RocksDB takes its own:
        the two are one POSIX lock of this process, and closing later would drop RocksDB's."""
        if self._guard is not None:
            os.close(self._guard)
            self._guard = None

    # ---- metadata -------------------------------------------------------------------------

    def _meta_int(self, key: bytes, default: int) -> int:
        raw = self.get(CF_META, key)
        return default if raw is None else int(raw.decode())

    def meta(self, key: bytes) -> bytes | None:
        """A raw metadata value."""
        return self.get(CF_META, key)

    def _check_meta(self, dimension: int, embedder_identity: str) -> tuple[int, str]:
        schema = self.get(CF_META, META_SCHEMA)
        if schema is None:
            if not self._create:
                raise _not_initialised(self.path, "its RocksDB holds no memevo metadata")
            if dimension <= 0:
                raise _dimension_required(self.path)
            batch = rocksdict.WriteBatch(raw_mode=True)
            meta = self._handles[CF_META]
            batch.put(META_SCHEMA, str(SCHEMA_VERSION).encode(), meta)
            batch.put(META_DIMENSION, str(dimension).encode(), meta)
            batch.put(META_EMBEDDER, embedder_identity.encode(), meta)
            batch.put(META_CREATED, json.dumps(time.time()).encode(), meta)
            self._db.write(batch, self._sync)
            return dimension, embedder_identity
        version = int(schema.decode())
        if version > SCHEMA_VERSION:
            raise FailedPrecondition(
                f"data directory {self.path} has schema version {version}; this memevo reads up to "
                f"{SCHEMA_VERSION}: upgrade memevo",
                reason="SCHEMA_TOO_NEW",
            )
        stored_dimension = int((self.get(CF_META, META_DIMENSION) or b"0").decode())
        stored_embedder = (self.get(CF_META, META_EMBEDDER) or b"").decode()
        if dimension and dimension != stored_dimension:
            raise FailedPrecondition(
                f"data directory {self.path} holds {stored_dimension}-d vectors; "
                f"this sidecar was configured for {dimension}-d",
                reason="DIMENSION_MISMATCH",
            )
        if embedder_identity != stored_embedder and "none" not in (embedder_identity, stored_embedder):
            raise FailedPrecondition(
                f"data directory {self.path} was created with embedder {stored_embedder!r}; "
                f"this sidecar uses {embedder_identity!r}: vectors of the two are not comparable. "
                "Use the same embedder, or a new data directory",
                reason="EMBEDDER_MISMATCH",
            )
        if embedder_identity == "none" and stored_embedder not in ("none", ""):
            # Vectors-only clients may use a directory built with an embedder; keep its identity.
            embedder_identity = stored_embedder
        return stored_dimension, embedder_identity

    # ---- reads ----------------------------------------------------------------------------

    def _raced_reopen(self, generation: int) -> bool:
        """Whether a read that failed, begun under ``generation``, raced a reopen (waited for): then retry it."""
        with self._reopened:
            while self._reopening:
                self._reopened.wait()
            return self._generation != generation

    def get(self, cf: str, key: bytes) -> bytes | None:
        """One value, or None."""
        generation = self._generation
        try:
            value = self._cfs[cf].get(key)
        except Exception:
            if not self._raced_reopen(generation):
                raise
            value = self._cfs[cf].get(key)
        return None if value is None else bytes(value)

    def multi_get(self, cf: str, keys: list[bytes]) -> list[bytes | None]:
        """Several values in one call, None where missing."""
        if not keys:
            return []
        generation = self._generation
        try:
            values: list[Any] = self._cfs[cf].get(cast(Any, keys)) or []
        except Exception:
            if not self._raced_reopen(generation):
                raise
            values = self._cfs[cf].get(cast(Any, keys)) or []
        return [None if v is None else bytes(v) for v in values]

    def prefix_keys(self, cf: str, prefix: bytes, *, newest_first: bool = False, limit: int = 0) -> list[bytes]:
        """Keys starting with ``prefix``, in key order or reversed, at most ``limit`` (0 = all)."""
        generation = self._generation
        try:
            return self._prefix_keys(cf, prefix, newest_first, limit)
        except Exception:
            if not self._raced_reopen(generation):
                raise
            return self._prefix_keys(cf, prefix, newest_first, limit)

    def _prefix_keys(self, cf: str, prefix: bytes, newest_first: bool, limit: int) -> list[bytes]:
        it = self._cfs[cf].iter()
        keys: list[bytes] = []
        if newest_first:
            it.seek_for_prev(prefix + b"\xff" * 9)
            step = it.prev
        else:
            it.seek(prefix)
            step = it.next
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                break
            keys.append(key)
            if limit and len(keys) >= limit:
                break
            step()
        return keys

    def put_unsynced(self, cf: str, key: bytes, value: bytes) -> bool:
        """Write without fsync, outside the committer: for data a crash may lose (retrieval records).

        Best effort: when RocksDB refuses the write (full or read-only disk) it is
        logged and dropped, as a crash would drop it, so reads keep working; False then.
        """
        try:
            self._cfs[cf].put(key, value, self._unsynced)
        except Exception as exc:
            log.warning("unsynced write to %s dropped: %s", cf, exc)
            return False
        return True

    def put_many_unsynced(self, cf: str, items: Sequence[tuple[bytes, bytes]]) -> bool:
        """Several :meth:`put_unsynced` in one write batch (one WAL append); best effort likewise."""
        if not items:
            return True
        try:
            batch = rocksdict.WriteBatch(raw_mode=True)
            handle = self._handles[cf]
            for key, value in items:
                batch.put(key, value, handle)
            self._db.write(batch, self._unsynced)
        except Exception as exc:
            log.warning("%d unsynced writes to %s dropped: %s", len(items), cf, exc)
            return False
        return True

    def delete_range_unsynced(self, cf: str, begin: bytes, end: bytes) -> bool:
        """Delete keys in [begin, end) without fsync, outside the committer (expiring retrieval records).

        Best effort like :meth:`put_unsynced`: a refused delete is logged and retried by the next caller.
        """
        try:
            self._cfs[cf].delete_range(begin, end, self._unsynced)
        except Exception as exc:
            log.warning("unsynced range delete in %s dropped: %s", cf, exc)
            return False
        return True

    def iterate(self, cf: str, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs in key order, from ``start`` (inclusive) to ``stop`` (exclusive).

        Read ITERATE_CHUNK pairs at a time, each chunk from a fresh view of the database.
        """
        position, after = start, False
        while True:
            generation = self._generation
            try:
                chunk = self._chunk(cf, position, after, stop)
            except Exception:
                if not self._raced_reopen(generation):
                    raise
                chunk = self._chunk(cf, position, after, stop)
            yield from chunk
            if len(chunk) < ITERATE_CHUNK:
                return
            position, after = chunk[-1][0], True

    def _chunk(self, cf: str, start: bytes | None, after: bool, stop: bytes | None) -> list[tuple[bytes, bytes]]:
        """Up to ITERATE_CHUNK pairs from ``start`` (the ones past it when ``after``) to ``stop``."""
        it = self._cfs[cf].iter()
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
            if after and it.valid() and bytes(it.key()) == start:
                it.next()
        pairs: list[tuple[bytes, bytes]] = []
        while it.valid() and len(pairs) < ITERATE_CHUNK:
            key = bytes(it.key())
            if stop is not None and key >= stop:
                break
            pairs.append((key, bytes(it.value())))
            it.next()
        return pairs

    @property
    def last_sequence(self) -> int:
        """The last durable change-log sequence number."""
        return self._durable_sequence

    @property
    def next_id(self) -> int:
        """The id the next stored memory will get."""
        return self._next_id

    def wait_for_sequence(self, after: int, timeout_s: float) -> int:
        """Block until the durable sequence exceeds ``after`` or the timeout passes; returns it."""
        with self._sequence_changed:
            if self._durable_sequence <= after and not self._closed:
                self._sequence_changed.wait(timeout_s)
            return self._durable_sequence

    # ---- writes ---------------------------------------------------------------------------

    def submit(self, mutation: Callable[[Txn], T], *, items: int = 1) -> Future[T]:
        """Queue ``mutation`` for the committer; the future resolves once its writes are durable.

        The mutation runs in the committer thread. It reads and writes through the
        :class:`Txn` it gets; if it raises, none of its writes happen and the
        future carries the exception.
        """
        future = self._enqueue(mutation, items).future
        self._work.set()
        return future

    def apply(self, mutation: Callable[[Txn], T]) -> T:
        """:meth:`submit` and wait for the result.

        A lone write (nothing else queued, no group being committed) is committed by the calling thread
        itself instead of being handed to the committer thread and waiting to be woken: the two thread
        hand-offs were about a third of a lone write's latency. Concurrent writes queue for the committer as
        before, which groups them under one fsync.
        """
        pending = self._enqueue(mutation)
        # Only a lone write commits itself: with others queued, the committer's larger group shares the fsync.
        if len(self._queue) == 1 and self._commit_lock.acquire(blocking=False):
            try:
                while not pending.future.done() and self._queue:
                    self._commit_queued()
            finally:
                self._commit_lock.release()
            if self._queue:  # queued while this thread committed: the committer takes them
                self._work.set()
        else:
            self._work.set()
        return pending.future.result()

    def _enqueue(self, mutation: Callable[[Txn], T], items: int = 1) -> _Pending[T]:
        if self._closed:
            raise Unavailable("the sidecar is shutting down", reason="SHUTTING_DOWN")
        pending = _Pending(mutation, Future(), items)
        self._queue.append(pending)
        return pending

    def _allocate_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def _release_id(self, memory_id: int) -> None:
        if memory_id == self._next_id - 1:
            self._next_id -= 1

    def _allocate_sequence(self) -> int:
        self._last_sequence += 1
        return self._last_sequence

    def _run_committer(self) -> None:
        while True:
            # While writes are refused, wake up to see whether they can resume even if none is queued.
            refused = self._refusal is not None and self._resume_at < math.inf
            self._work.wait(max(0.0, self._resume_at - time.monotonic()) if refused else None)
            self._work.clear()
            while True:
                with self._commit_lock:
                    if self._refusal is not None and not self._closed and time.monotonic() >= self._resume_at:
                        self._try_resume()
                    while self._queue and not self._pausers:
                        self._commit_queued()
                if not self._queue:
                    break
                # A lock released and taken straight back is rarely handed to a thread waiting for it: under a
                # steady write stream the queue never ran dry and the start-up snapshot waited for the whole burst
                # (7 s of a 30,000-write burst, so a crash then read the burst again). Wait until it holds the lock.
                with self._pause_turn:
                    self._pause_turn.wait_for(lambda: not self._pausers)
            if self._closed:
                return

    def _commit_queued(self) -> None:
        """Commit up to ``group_max`` queued mutations as one group (commit lock held).

        Every mutation taken off the queue has its future resolved before this
        returns, whatever fails, so no caller waits for a mutation no one holds.
        """
        group: list[_Pending[Any]] = []
        items = 0
        while (
            self._queue
            and len(group) < self._group_max
            and (not group or items + self._queue[0].items <= GROUP_MAX_ITEMS)
        ):
            items += self._queue[0].items
            group.append(self._queue.popleft())
        if not group:
            return
        try:
            if self._released:
                raise Unavailable("the sidecar is shutting down", reason="SHUTTING_DOWN")
            self._commit_group(group)
        except BaseException as exc:
            for pending in group:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    def _commit_group(self, group: list[_Pending[Any]]) -> None:
        if self._refusal is not None:
            if time.monotonic() >= self._resume_at:
                self._try_resume()
            if self._refusal is not None:
                # No mutation runs: nothing is allocated, nothing written (RocksDB would refuse the batch).
                raise StorageError(self._refusal.message, reason=self._refusal.reason)
        start_id, start_sequence = self._next_id, self._last_sequence
        overlay: dict[tuple[str, bytes], bytes | None] = {}
        shared: dict[tuple[str, object], list[Any]] = {}
        done: list[tuple[_Pending[Any], Txn, Any]] = []
        for pending in group:
            if not pending.future.set_running_or_notify_cancel():
                continue
            txn = Txn(self, overlay, shared)
            id_mark, sequence_mark = self._next_id, self._last_sequence
            try:
                result = pending.mutation(txn)
            except BaseException as exc:
                # A failed mutation gives back what it allocated so ids and sequences stay dense.
                self._next_id, self._last_sequence = id_mark, sequence_mark
                pending.future.set_exception(exc)
                continue
            overlay.update(txn.writes)
            for slot, value in txn.group_adds:
                shared.setdefault(slot, []).append(value)
            done.append((pending, txn, result))
        if not done:
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        for (cf, key), value in overlay.items():
            if value is None:
                batch.delete(key, self._handles[cf])
            else:
                batch.put(key, value, self._handles[cf])
        meta = self._handles[CF_META]
        if self._next_id != start_id:
            batch.put(META_NEXT_ID, str(self._next_id).encode(), meta)
        if self._last_sequence != start_sequence:
            batch.put(META_LAST_SEQUENCE, str(self._last_sequence).encode(), meta)
        try:
            self._db.write(batch, self._sync)
        except Exception as exc:
            self._next_id, self._last_sequence = start_id, start_sequence
            error = _storage_error(exc)
            self._refuse_writes(error)
            for pending, _, _ in done:
                pending.future.set_exception(error)
            return
        for _, txn, _ in done:
            for callback in txn.after_commit:
                try:
                    callback()
                except Exception:  # durable already: acknowledge it; the in-memory views catch up at restart
                    log.exception("publishing a committed write failed")
        with self._sequence_changed:
            self._durable_sequence = self._last_sequence
            self._sequence_changed.notify_all()
        for pending, _, result in done:
            pending.future.set_result(result)

    # ---- refused writes and their resumption ------------------------------------------------

    @property
    def write_refusal(self) -> StorageError | None:
        """Why writes are refused now (a failed log write not yet resolved), or None while they are accepted."""
        return self._refusal

    def _refuse_writes(self, error: StorageError) -> None:
        """RocksDB keeps refusing after a failed log write: refuse at once until a reopen succeeds (lock held)."""
        first = self._refusal is None
        self._refusal = error
        self._resume_wait_s = RESUME_FIRST_S
        self._resume_at = time.monotonic() + self._resume_wait_s
        self._work.set()  # the committer times the next check, even if it was committing nothing
        if first:
            self.refused_since = time.time()
            log.warning("writes refused until the data directory can take them again: %s", error.message)
            self._announce(error)

    def _try_resume(self) -> None:
        """Reopen the database if a probe shows the data directory writable with room to spare (lock held)."""
        try:
            self._probe()
            self._reopen()
        except Exception as exc:
            if isinstance(exc, Unavailable) and exc.reason == "RESTART_REQUIRED":
                log.error("writes refused until a restart: %s", exc.message)
                self._refusal = StorageError(exc.message, reason=exc.reason)
                self._resume_at = math.inf
                self._announce(self._refusal)
                return
            self._resume_wait_s = min(2 * self._resume_wait_s, RESUME_MAX_S)
            self._resume_at = time.monotonic() + self._resume_wait_s
            log.info("writes still refused (%s); next check in %.0f s", exc, self._resume_wait_s)
            return
        self._refusal = None
        self.refused_since = 0.0
        log.warning("writes resumed: the data directory takes writes again")
        self._announce(None)

    def _announce(self, refusal: StorageError | None) -> None:
        if self.on_writes_changed is not None:
            try:
                self.on_writes_changed(refusal)
            except Exception:
                log.exception("reporting the write state failed")

    def _probe(self) -> None:
        """Raise OSError unless PROBE_BYTES plus the size of RocksDB's logs can be written and synced.

        Reopening replays the logs into a table file of about their size before it accepts a write: a probe
        with room for less would reopen into the same failure.
        """
        folder = self.path / "rocksdb"
        logs = sum(entry.stat().st_size for entry in folder.iterdir() if entry.suffix == ".log")
        probe = folder / PROBE_FILE
        block = bytes(1 << 16)
        try:
            with probe.open("wb") as output:
                for _ in range(max(1, -(-(PROBE_BYTES + logs) // len(block)))):
                    output.write(block)
                output.flush()
                os.fsync(output.fileno())
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _reopen(self) -> None:
        """Close and reopen RocksDB (commit lock held): it recovers its log and forgets the failed write."""
        with self._reopened:
            self._reopening = True
        try:
            self._drop_handles()
            self._unlock_read_only()
            for attempt in range(REOPEN_ATTEMPTS):
                try:
                    self._open()
                    break
                except Exception as exc:
                    if "No space left" in str(exc):
                        # Still no room to replay the log: keep serving reads from a read-only open.
                        self._lock_for_read_only()
                        self._open(read_only=True)
                        raise
                    # A read still holding the old database (a get under way) keeps its lock a moment.
                    if "lock" not in str(exc).lower() or attempt == REOPEN_ATTEMPTS - 1:
                        raise
                    gc.collect()
                    time.sleep(0.02)
            durable = (self._meta_int(META_NEXT_ID, 1), self._meta_int(META_LAST_SEQUENCE, 0))
            if durable != (self._next_id, self._last_sequence):
                # The refused write reached the log after all: what memory holds no longer matches RocksDB.
                raise Unavailable(
                    f"after reopening, RocksDB holds next id and sequence {durable}, the sidecar "
                    f"{(self._next_id, self._last_sequence)}: restart the sidecar to resume writes",
                    reason="RESTART_REQUIRED",
                )
        finally:
            with self._reopened:
                self._reopening = False
                self._generation += 1
                self._reopened.notify_all()

    def _drop_handles(self) -> None:
        """Close the database and drop every handle to it, so that its lock is released."""
        with contextlib.suppress(Exception):  # a database that refuses writes also fails to flush at close
            for cf in self._cfs.values():
                cf.close()
        with contextlib.suppress(Exception):
            self._db.close()
        self._cfs = _Reopening()
        self._handles = {}
        self.__dict__.pop("_db", None)
        gc.collect()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold back every commit while the block runs: the in-memory views then stand exactly at
        :attr:`last_sequence` (each group publishes before the commit lock is released). Keep the block short:
        every writer waits for it. It waits for the group being committed, not for the queue to run dry."""
        with self._pause_turn:
            self._pausers += 1
        try:
            self._commit_lock.acquire()
        finally:
            with self._pause_turn:
                self._pausers -= 1
                self._pause_turn.notify_all()
        try:
            yield
        finally:
            self._commit_lock.release()

    def put_meta_now(self, key: bytes, value: bytes) -> None:
        """Write one metadata value durably, through the committer."""

        def mutation(txn: Txn) -> None:
            txn.put(CF_META, key, value)

        self.apply(mutation)

    # ---- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Drain the committer, then flush and close RocksDB. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._work.set()
        self._committer.join()
        with self._commit_lock:
            while self._queue:  # writes of callers that queued while the committer stopped
                self._commit_queued()
            self._released = True  # anyone queueing later gets Unavailable, not a closed database
            with self._sequence_changed:
                self._sequence_changed.notify_all()
            with contextlib.suppress(Exception):  # closing anyway; the WAL holds everything
                self._db.flush()
            self._release()

    def _release(self) -> None:
        try:
            for cf in self._cfs.values():
                cf.close()
            self._db.close()
        except Exception as exc:  # e.g. a full disk: every acknowledged write is in the synced WAL already
            log.warning("RocksDB did not close cleanly (%s); its WAL is replayed at the next open", exc)
        # RocksDB's lock is released only when every handle object is gone.
        self._cfs.clear()
        self._handles.clear()
        self.__dict__.pop("_db", None)
        gc.collect()
        self._unlock_read_only()
