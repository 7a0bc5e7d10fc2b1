"""A snapshot of what start-up rebuilds from RocksDB (hot columns, lexical index, ...), so a start need not scan.

Opening a data directory otherwise parses every memory record in Python,
tens of microseconds each: over a minute for a million memories. The engine
writes a snapshot of those structures while it serves (in the background,
every so many changes) and at a clean close, stamped with the change-log
sequence and next id it reflects, and with the mark of the last checkpoint of
access statistics it includes. A start loads the newest intact snapshot and
catches up from the change log: only the memories changed after its sequence
(and those whose statistics a later checkpoint rewrote) are read again. So a
crash costs the records changed since the last snapshot, not all of them.

A snapshot is written to a temporary file, synced and renamed over the old
one, then its directory is synced: a kill leaves either the old snapshot or
the new one, never a mix, and a torn file fails its checksum and is ignored.

The file holds data only, never code: whoever can write the data directory
must not be able to run anything in the sidecar through it (a pickle could).
Its layout::

    MAGIC | header length (u64 little-endian) | header (JSON) | array bytes ... | SHA-256 of all that precedes

The header carries the format, sequence, next id and checkpoint mark, the
JSON values, and the name, dtype and shape of every array in the order their
raw bytes follow. Only numeric dtypes are accepted. A file that is not of this
format, whose checksum does not match, or whose parts do not fit together is
ignored with a log line, and start-up scans RocksDB instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import struct
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "startup.snapshot"
SNAPSHOT_FORMAT = 10
"""Bump when a snapshotted structure changes shape or meaning: older snapshots are then ignored.

3: the lexical index holds stemmed words.
4: the columns hold each fact value's shape (value_type).
5: the columns say whether each memory's text tells a time (tells_time); the word index counts in half-occurrences
   (a reasoning context's words at half weight).
6: the word index keeps each length's one-byte code beside it.
7: the columns say whether a memory is doubted (a soft conflict), and entity, fields and value shape count what
   perception inferred for plain-text statements.
8: arrays and JSON with a checksum instead of a pickle (a pickle runs code when it is read).
9: written while serving too and kept once read; the header names the data directory (its creation stamp) and
   the statistics checkpoint mark, and the start catches up from the change log.
10: the word index's words as one UTF-8 array (JSON of a million words held the GIL for 0.3 s while writing);
   the columns' rows in use only, not their spare capacity.
"""

MAGIC = b"memevo-snapshot\n"
_LENGTH = struct.Struct("<Q")
_DIGEST_BYTES = 32
_NUMERIC_KINDS = frozenset("biuf")
"""Bool, signed, unsigned and float dtypes: the only ones a snapshot may hold (an object dtype could hold code)."""
MAX_HEADER_BYTES = 1 << 31
"""A header length above this is a damaged file, not one to allocate memory for."""


GROWING_BLOCK_PARTS = 16_384
"""Parts :meth:`SnapshotWriter.growing_array_list` copies per call (a million words' postings: ~60 calls of ~2 ms)."""


class SnapshotError(ValueError):
    """The snapshot is damaged or does not fit the structures it should rebuild: start-up scans RocksDB instead."""


class SnapshotWriter:
    """Collects named arrays and JSON values under name prefixes; :func:`save` writes them.

    Two phases: what a part stores while its caller keeps writers out (the commit lock) is copied at once, except
    what :meth:`growing_array_list` defers; :meth:`finish` (called by :func:`write`, after the lock is released)
    copies that. So writers wait for a copy of what can change in place, not of what only grows.
    """

    def __init__(
        self,
        arrays: list[tuple[str, npt.NDArray[Any]]] | None = None,
        prefix: str = "",
        deferred: list[Callable[[], None]] | None = None,
    ) -> None:
        self._arrays: list[tuple[str, npt.NDArray[Any]]] = [] if arrays is None else arrays
        self._values: dict[str, Any] = {}
        self._prefix = prefix
        self._children: dict[str, SnapshotWriter] = {}
        self._deferred: list[Callable[[], None]] = [] if deferred is None else deferred

    def child(self, name: str) -> SnapshotWriter:
        """A writer whose names live under ``name`` (a part of a part)."""
        writer = SnapshotWriter(self._arrays, f"{self._prefix}{name}/", self._deferred)
        self._children[name] = writer
        return writer

    def value(self, name: str, value: Any) -> None:
        """Store a JSON-encodable value (numbers, strings, lists, dicts with string keys)."""
        self._values[name] = value

    def ndarray(self, name: str, values: npt.NDArray[Any]) -> None:
        """Store a copy of a numeric NumPy array (its bytes, dtype and shape): the original may change meanwhile."""
        self._add(name, np.array(values, order="C", copy=True))

    def own(self, name: str, data: npt.NDArray[Any]) -> None:
        """Store ``data`` as it is, not copied: the caller hands it over and never changes it."""
        self._add(name, data)

    def _add(self, name: str, data: npt.NDArray[Any]) -> None:
        if data.dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"snapshot array {name} has dtype {data.dtype}; only numeric arrays are stored")
        self._arrays.append((self._prefix + name, data))

    def array_list(self, name: str, parts: Sequence[array[int]], typecode: str) -> None:
        """Store a list of ``array.array`` of one typecode as one array of their items and one of their lengths."""
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        joined = b"".join(parts)  # one C loop over the buffers (a million small lists at 1M memories)
        self._add(name + ".lengths", lengths)
        self._add(name + ".items", np.frombuffer(joined, dtype=np.dtype(typecode)) if joined else np.zeros(0, "u1"))

    def growing_array_list(self, name: str, parts: Sequence[array[int]], typecode: str) -> None:
        """:meth:`array_list` of parts that only ever grow at their end, their items copied later by :meth:`finish`.

        Now (one C pass over the parts, no item copied) it notes how long each part is; :meth:`finish` copies the
        parts and keeps of each the items it had now: appended ones are left out, so the snapshot holds exactly
        what the parts held when this was called. Valid only for parts that nothing shrinks, changes in place or
        replaces (the id lists per namespace and entity).
        """
        held = list(parts)
        lengths = np.fromiter(map(len, held), dtype=np.int64, count=len(held))

        def copy() -> None:
            items, now = copy_parts(held, typecode)
            self.joined_array_list(name, lengths, first_items(items, now, lengths))

        self.defer(copy)

    def joined_array_list(self, name: str, lengths: npt.NDArray[np.int64], items: npt.NDArray[Any]) -> None:
        """Store what :meth:`array_list` stores, given already as the parts' lengths and their items joined (kept
        as they are, not copied)."""
        self._add(name + ".lengths", lengths)
        self._add(name + ".items", items if items.size else np.zeros(0, "u1"))

    def defer(self, copy: Callable[[], None]) -> None:
        """Run ``copy`` at :meth:`finish`, after the caller's hold on writers ends: for what only grows meanwhile."""
        self._deferred.append(copy)

    def finish(self, cancelled: Callable[[], bool] | None = None) -> bool:
        """Run what :meth:`defer` (and :meth:`growing_array_list`) left for later; writers may run meanwhile.

        False when ``cancelled()`` turned true between two copies (the rest is not run).
        """
        deferred, self._deferred[:] = list(self._deferred), []
        for copy in deferred:
            if cancelled is not None and cancelled():
                return False
            copy()
        return True

    def tree(self) -> dict[str, Any]:
        """The JSON values of this part and its children, as the header stores them."""
        return {"values": self._values, "children": {name: child.tree() for name, child in self._children.items()}}

    def stored_arrays(self) -> list[tuple[str, npt.NDArray[Any]]]:
        """Every array stored so far (all parts), in the order their bytes are written."""
        return self._arrays


class SnapshotReader:
    """The arrays and JSON values of a verified snapshot, looked up by the names :class:`SnapshotWriter` gave."""

    def __init__(self, arrays: dict[str, npt.NDArray[Any]], tree: Any, prefix: str = "") -> None:
        if not isinstance(tree, dict) or not isinstance(tree.get("values"), dict):
            raise SnapshotError(f"snapshot part {prefix or '/'} is not a mapping")
        self._arrays = arrays
        self._tree = tree
        self._prefix = prefix

    def child(self, name: str) -> SnapshotReader:
        """The reader of :meth:`SnapshotWriter.child` ``name``."""
        children = self._tree.get("children")
        if not isinstance(children, dict) or name not in children:
            raise SnapshotError(f"snapshot has no part {self._prefix}{name}")
        return SnapshotReader(self._arrays, children[name], f"{self._prefix}{name}/")

    def value(self, name: str, kind: type | tuple[type, ...]) -> Any:
        """A JSON value, checked to be of ``kind`` (SnapshotError otherwise)."""
        values = self._tree["values"]
        if name not in values:
            raise SnapshotError(f"snapshot has no value {self._prefix}{name}")
        found = values[name]
        if not isinstance(found, kind) or (isinstance(found, bool) and bool not in _kinds(kind)):
            raise SnapshotError(f"snapshot value {self._prefix}{name} is a {type(found).__name__}")
        return found

    def strings(self, name: str) -> list[str]:
        """A JSON list of strings."""
        found = self.value(name, list)
        if not all(isinstance(item, str) for item in found):
            raise SnapshotError(f"snapshot value {self._prefix}{name} is not a list of strings")
        return list(found)

    def ndarray(self, name: str, dtype: npt.DTypeLike, *, ndim: int = 1) -> npt.NDArray[Any]:
        """A stored array, checked to have ``dtype`` and ``ndim`` dimensions (SnapshotError otherwise)."""
        found = self._arrays.get(self._prefix + name)
        if found is None:
            raise SnapshotError(f"snapshot has no array {self._prefix}{name}")
        if found.dtype != np.dtype(dtype) or found.ndim != ndim:
            raise SnapshotError(f"snapshot array {self._prefix}{name} is {found.dtype} {found.shape}")
        return found

    def joined(self, name: str, typecode: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """What :meth:`SnapshotWriter.array_list` stored as it is: each part's length and their items joined (no
        part built: a million of them took seconds)."""
        lengths = self.ndarray(name + ".lengths", np.int64)
        items = self._arrays.get(self._prefix + name + ".items")
        total = int(lengths.sum()) if lengths.size else 0
        if items is None or (lengths < 0).any() or (total and items.dtype != np.dtype(typecode)) or items.size != total:
            raise SnapshotError(f"snapshot arrays {self._prefix}{name} do not fit their lengths")
        return lengths, items if total else np.zeros(0, dtype=np.dtype(typecode))

    def array_list(self, name: str, typecode: str) -> list[array[int]]:
        """The ``array.array`` list :meth:`SnapshotWriter.array_list` stored (one copy each, as appendable arrays)."""
        lengths, items = self.joined(name, typecode)
        raw = items.data.cast("B") if items.size else memoryview(b"")
        width = array(typecode).itemsize
        parts: list[array[int]] = []
        start = 0
        for length in lengths.tolist():
            part = array(typecode)
            end = start + length * width
            part.frombytes(raw[start:end])
            parts.append(part)
            start = end
        return parts


def copy_parts(parts: Sequence[array[int]], typecode: str) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """The items of ``array.array`` parts of one typecode, joined, and how many each held, as copied now.

    A block of parts per C call, each call holding the GIL for a few ms, so that other threads (writers
    appending to these very parts) run between blocks; the parts may grow meanwhile, never shrink.
    """
    itemsize = array(typecode).itemsize
    blocks: list[npt.NDArray[Any]] = []
    counts: list[npt.NDArray[np.int64]] = []
    for start in range(0, len(parts), GROWING_BLOCK_PARTS):
        copies = list(map(bytes, parts[start : start + GROWING_BLOCK_PARTS]))
        blocks.append(np.frombuffer(b"".join(copies), dtype=np.dtype(typecode)))
        counts.append(np.fromiter(map(len, copies), dtype=np.int64, count=len(copies)) // itemsize)
    if not blocks:
        return np.zeros(0, dtype=np.dtype(typecode)), np.zeros(0, dtype=np.int64)
    return np.concatenate(blocks), np.concatenate(counts)


def first_items(
    items: npt.NDArray[Any], counts: npt.NDArray[np.int64], keep: npt.NDArray[np.int64]
) -> npt.NDArray[Any]:
    """Of joined parts holding ``counts`` items each, the first ``keep`` items of each (``keep`` <= ``counts``)."""
    if np.array_equal(counts, keep):
        return items
    position = np.arange(items.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return items[position < np.repeat(keep, counts)]


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


class KeyedLists:
    """A mapping of string tuples to lists of ints (e.g. (namespace, task) -> ids), as one snapshot part."""

    def __init__(self, items: Iterable[tuple[tuple[str, ...], Sequence[int]]]) -> None:
        self.items = list(items)

    def save_snapshot(self, writer: SnapshotWriter) -> None:
        """Keys as JSON, lists as one array."""
        writer.value("keys", [list(key) for key, _ in self.items])
        writer.array_list("ids", [array("q", ids) for _, ids in self.items], "q")

    @classmethod
    def load_snapshot(cls, reader: SnapshotReader, *, width: int) -> dict[tuple[str, ...], list[int]]:
        """The mapping :meth:`save_snapshot` wrote, each key ``width`` strings long."""
        keys = reader.value("keys", list)
        lists = reader.array_list("ids", "q")
        if len(keys) != len(lists) or not all(
            isinstance(key, list) and len(key) == width and all(isinstance(k, str) for k in key) for key in keys
        ):
            raise SnapshotError("snapshot keyed lists do not fit together")
        return {tuple(key): list(ids) for key, ids in zip(keys, lists, strict=True)}


class Snapshotted(Protocol):
    """A structure start-up rebuilds, able to write itself into a snapshot part."""

    def save_snapshot(self, writer: SnapshotWriter) -> None:
        """Write every field the structure needs to be rebuilt as it is."""


@dataclass(frozen=True)
class Stamp:
    """What a snapshot reflects: the data directory's state it was taken at."""

    sequence: int
    """The last change-log sequence whose change it holds (it holds none after it)."""
    next_id: int
    """The id the next memory was to get."""
    stats_mark: int
    """The last checkpoint of access statistics it holds (later ones are caught up from RocksDB)."""
    store: str
    """The data directory's creation stamp: a snapshot of another directory is never used."""


def collect(parts: dict[str, Snapshotted]) -> SnapshotWriter:
    """Copy every part into a writer (the caller holds whatever keeps the parts consistent meanwhile); what only
    grows is copied later, by :meth:`SnapshotWriter.finish` (:func:`write` calls it), without that hold."""
    writer = SnapshotWriter()
    for name, part in parts.items():
        part.save_snapshot(writer.child(name))
    return writer


def save(directory: Path, *, stamp: Stamp, parts: dict[str, Snapshotted]) -> bool:
    """:func:`collect` then :func:`write`."""
    return write(directory, collect(parts), stamp)


def write(
    directory: Path, writer: SnapshotWriter, stamp: Stamp, *, cancelled: Callable[[], bool] | None = None
) -> bool:
    """Write the snapshot atomically, readable by its owner only; True once it is durable.

    On any failure, or when ``cancelled()`` turns true between chunks, it logs, leaves the previous snapshot in
    place and returns False. Holds the GIL only for the header: hashing and writing the arrays release it.
    """
    started = time.perf_counter()
    path = directory / SNAPSHOT_FILE
    tmp = directory / (SNAPSHOT_FILE + ".tmp")
    try:
        # Checked before the file too: under load the deferred copy took seconds of a stop before the first chunk.
        if not writer.finish(cancelled) or (cancelled is not None and cancelled()):
            raise _Cancelled
        header = {
            "format": SNAPSHOT_FORMAT,
            **asdict(stamp),
            "arrays": [[name, data.dtype.str, list(data.shape)] for name, data in writer.stored_arrays()],
            "parts": writer.tree(),
        }
        encoded = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as output:
            digest = hashlib.sha256()
            _write(output, digest, (MAGIC, _LENGTH.pack(len(encoded)), encoded))
            chunks = (chunk for _, data in writer.stored_arrays() if data.size for chunk in _chunks(data))
            if not _write(output, digest, chunks, cancelled):
                raise _Cancelled
            output.write(digest.digest())
            output.flush()
            os.fsync(output.fileno())
        os.replace(tmp, path)
        _sync_directory(directory)
    except _Cancelled:
        log.info("start-up snapshot of sequence %d abandoned: the sidecar is stopping", stamp.sequence)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    except Exception as exc:
        log.warning(
            "start-up snapshot not written (%s: %s); a start reads the previous one, if any, and more of RocksDB",
            type(exc).__name__,
            exc,
        )
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    log.info("start-up snapshot of sequence %d written in %.2f s", stamp.sequence, time.perf_counter() - started)
    return True


class _Cancelled(Exception):
    pass


CHUNK_BYTES = 1 << 22
"""Bytes hashed and written per call while writing a snapshot (a cancelled write stops within one)."""


def _chunks(data: npt.NDArray[Any]) -> Iterator[memoryview]:
    raw = data.data.cast("B")
    for start in range(0, raw.nbytes, CHUNK_BYTES):
        yield raw[start : start + CHUNK_BYTES]


def _write(
    output: BinaryIO,
    digest: Any,
    chunks: Iterable[bytes | memoryview],
    cancelled: Callable[[], bool] | None = None,
) -> bool:
    for chunk in chunks:
        if cancelled is not None and cancelled():
            return False
        digest.update(chunk)
        output.write(chunk)
    return True


def _sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (so a power cut cannot bring back the file it replaced)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def load(directory: Path) -> tuple[Stamp, SnapshotReader] | None:
    """The snapshot and its stamp if the file is intact, else None (logged). The file stays: a later crash reuses it.

    What it returns is verified (format, checksum, numeric arrays); the caller decides whether the stamp fits the
    data directory, and its rebuild may still raise SnapshotError when the parts do not fit together.
    """
    path = directory / SNAPSHOT_FILE
    started = time.perf_counter()
    with contextlib.suppress(OSError):  # what a write cut short by a kill left (up to the snapshot's size)
        (directory / (SNAPSHOT_FILE + ".tmp")).unlink()
    try:
        source = path.open("rb")
    except FileNotFoundError:
        return None
    try:
        with source:
            header, arrays = _read(source, os.fstat(source.fileno()).st_size)
        stamp = Stamp(
            **{name: header.get(name) for name in ("sequence", "next_id", "stats_mark", "store")}  # type: ignore[arg-type]
        )
        if not all(type(getattr(stamp, n)) is int for n in ("sequence", "next_id", "stats_mark")) or not isinstance(
            stamp.store, str
        ):
            raise SnapshotError(f"header stamp {stamp} is not numbers and a creation stamp")
        reader = SnapshotReader(arrays, header.get("parts"))
    except (OSError, SnapshotError, ValueError) as exc:
        log.warning("start-up snapshot ignored (%s): scanning RocksDB", exc)
        return None
    log.info(
        "start-up snapshot of sequence %d read and verified in %.2f s", stamp.sequence, time.perf_counter() - started
    )
    return stamp, reader


def _read(source: io.BufferedReader, file_bytes: int) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    """Header and arrays of an open snapshot file of ``file_bytes``, each checked; SnapshotError if anything is off."""
    digest = hashlib.sha256()
    lead = _exactly(source, len(MAGIC) + _LENGTH.size, "its start")
    if lead[: len(MAGIC)] != MAGIC:
        raise SnapshotError("not a snapshot of this version of memevo (an older format, or another file)")
    digest.update(lead)
    (header_bytes,) = _LENGTH.unpack(lead[len(MAGIC) :])
    if header_bytes > min(MAX_HEADER_BYTES, file_bytes):
        raise SnapshotError(f"header length {header_bytes} is implausible")
    encoded = _exactly(source, header_bytes, "its header")
    digest.update(encoded)
    try:
        header = json.loads(encoded)
    except ValueError as exc:
        raise SnapshotError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != SNAPSHOT_FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise SnapshotError(f"format {found}, this memevo reads {SNAPSHOT_FORMAT}")
    manifest = header.get("arrays")
    if not isinstance(manifest, list):
        raise SnapshotError("header lists no arrays")
    # Nothing is allocated for arrays the file cannot hold: a damaged shape must not exhaust memory.
    remaining = file_bytes - len(lead) - header_bytes - _DIGEST_BYTES
    arrays: dict[str, npt.NDArray[Any]] = {}
    for entry in manifest:
        name, dtype, shape = _describe(entry)
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if nbytes > remaining or name in arrays:
            raise SnapshotError(f"array {name} does not fit in the file, or is listed twice")
        remaining -= nbytes
        data = np.empty(shape, dtype=dtype)
        if data.size:
            view = data.data.cast("B")
            if source.readinto(view) != view.nbytes:
                raise SnapshotError(f"file ends inside array {name}")
            digest.update(view)
        arrays[name] = data
    stored = source.read(_DIGEST_BYTES + 1)
    if len(stored) != _DIGEST_BYTES:
        raise SnapshotError("file is truncated or has bytes past its checksum")
    if stored != digest.digest():
        raise SnapshotError("checksum does not match its content (damaged or changed)")
    return header, arrays


def _describe(entry: Any) -> tuple[str, np.dtype[Any], list[int]]:
    """The name, dtype and shape of one manifest entry, refusing anything but numeric dtypes."""
    if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and isinstance(entry[1], str)):
        raise SnapshotError(f"bad array entry {str(entry)[:80]}")
    name, dtype_text, shape = entry
    try:
        dtype = np.dtype(dtype_text)
    except TypeError as exc:
        raise SnapshotError(f"array {name} has an unknown dtype {dtype_text!r}") from exc
    if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise SnapshotError(f"array {name} has dtype {dtype_text!r}; only numeric arrays are read")
    if not (isinstance(shape, list) and all(type(n) is int and 0 <= n < 1 << 40 for n in shape)):
        raise SnapshotError(f"array {name} has a bad shape {str(shape)[:80]}")
    return name, dtype, shape


def _exactly(source: io.BufferedReader, count: int, what: str) -> bytes:
    data = source.read(count)
    if len(data) != count:
        raise SnapshotError(f"file ends inside {what}")
    return data
