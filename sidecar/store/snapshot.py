"""A snapshot of what start-up rebuilds from RocksDB (hot columns, lexical index, ...), written at a clean close.

Opening a data directory otherwise parses every memory record in Python,
tens of microseconds each: most of a minute for a million memories. A clean
close pickles those structures together with the change-log sequence and the
next id they reflect; the next open uses the snapshot only when both still
match RocksDB. The file is deleted as soon as it is read (used or not), so a
later crash can never start from a stale snapshot: checkpoints of access
statistics rewrite records without a new sequence number, and only a clean
close writes a new snapshot after the last of them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import threading
import time
from array import array
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "startup.snapshot"
SNAPSHOT_FORMAT = 7
"""Bump when a snapshotted structure changes shape or meaning: older snapshots are then ignored.

3: the lexical index holds stemmed words.
4: the columns hold each fact value's shape (value_type).
5: the columns say whether each memory's text tells a time (tells_time); the word index counts in half-occurrences
   (a reasoning context's words at half weight).
6: the word index keeps each length's one-byte code beside it.
7: the columns say whether a memory is doubted (a soft conflict), and entity, fields and value shape count what
   perception inferred for plain-text statements.
"""

_LOCK_TYPES = (type(threading.Lock()),)
_RLOCK_TYPES = (type(threading.RLock()),)


class _Pickler(pickle.Pickler):
    """Pickles locks as fresh, unlocked locks (the snapshot is taken with nothing running), arrays as raw bytes."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is array:
            # The word index holds two small arrays per distinct word: rebuilding each from its bytes
            # loads about twice as fast as the default reconstructor.
            return array, (obj.typecode, obj.tobytes())
        if isinstance(obj, _LOCK_TYPES):
            return threading.Lock, ()
        if isinstance(obj, _RLOCK_TYPES):
            return threading.RLock, ()
        return NotImplemented


def save(directory: Path, *, sequence: int, next_id: int, parts: dict[str, Any]) -> None:
    """Write the snapshot atomically; on any failure log it and leave none (the next open scans RocksDB)."""
    started = time.perf_counter()
    path = directory / SNAPSHOT_FILE
    tmp = directory / (SNAPSHOT_FILE + ".tmp")
    try:
        with tmp.open("wb") as output:
            header = {"format": SNAPSHOT_FORMAT, "sequence": sequence, "next_id": next_id}
            _Pickler(output, protocol=5).dump((header, parts))
            output.flush()
            os.fsync(output.fileno())
        os.replace(tmp, path)
    except Exception as exc:
        log.warning("start-up snapshot not written (%s: %s); the next start scans RocksDB", type(exc).__name__, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    log.info("start-up snapshot written in %.2f s", time.perf_counter() - started)


def take(directory: Path, *, sequence: int, next_id: int) -> dict[str, Any] | None:
    """The snapshot's parts if it matches ``sequence`` and ``next_id``, else None; the file is removed either way."""
    path = directory / SNAPSHOT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    try:
        header, parts = pickle.load(io.BytesIO(raw))
    except Exception as exc:
        log.warning("start-up snapshot unreadable (%s): scanning RocksDB", exc)
        return None
    wanted = {"format": SNAPSHOT_FORMAT, "sequence": sequence, "next_id": next_id}
    if header != wanted:
        log.info("start-up snapshot %s does not match the data directory %s: scanning RocksDB", header, wanted)
        return None
    return dict(parts)
