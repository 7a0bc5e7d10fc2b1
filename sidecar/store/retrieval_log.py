"""Retrieval records written by a thread of their own, in batches, off the recall's path.

Every Recall and BuildContext leaves a retrieval record (for ReportOutcome) and an
observation record (for replay), both unsynced: a crash may lose the last few.
Encoding them and writing them one put at a time (a WAL append each) cost a recall
~8 % of the interpreter lock with 8 callers (issue 28); queued here, they are encoded
and written by one thread, all that is queued in one write batch. Nothing is promised
beyond what the unsynced puts promised: a clean stop writes everything queued
(:meth:`RetrievalLog.close`), a crash loses what was queued or in the unsynced WAL,
and a reader of a queued record waits until it is written (:meth:`RetrievalLog.written`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from .rocks import RocksStore

log = logging.getLogger(__name__)

Entry = tuple[bytes, Callable[[], bytes]]
"""A key and what encodes its value (called once, by the writer; pure, so a reader may call it too)."""

MAX_QUEUED = 4_096
"""Entries queued at most; past that (a stalled disk) callers write their own, as before this log."""
LINGER_S = 0.010
"""The writer waits this long after the first entry of a batch for more, unless a reader waits for one.

Woken for every Recall (one or two entries a batch), the writer took the interpreter lock from the recalls at
every wake-up: with 8 callers in process, lingering 10 ms took its CPU from 0.09 to 0.06-0.08 ms a recall (issue 28;
encoding and writing a recall's two records alone cost ~0.02 ms). A reader of a queued record (ReportOutcome) does
not wait for the linger; a crash loses up to this much more of the last retrievals, which were never synced anyway.

After a batch the writer looks at the queue again one linger later without being woken, and sleeps until woken only
when it finds it empty: under steady recalls no caller wakes it. A wake-up is a futex call made while the caller holds
the interpreter lock, and on a busy machine the scheduler then often runs the woken thread in the caller's place,
leaving the lock held by a thread that is not running: py-spy counted 12 % of the lock-held samples of 8 callers'
vector recalls in ``Condition.notify`` here (issue 28).
"""


class RetrievalLog:
    """Queues unsynced writes of one column family and writes them in batches on a thread of its own."""

    def __init__(self, store: RocksStore, cf: str) -> None:
        self._store = store
        self._cf = cf
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        """The writer waits on it for entries."""
        self._done = threading.Condition(self._lock)
        """Readers wait on it for their keys' write."""
        self._queue: list[Entry] = []
        self._queued: set[bytes] = set()
        """Keys queued or being written: a reader of one waits for the write."""
        self._hurry = False
        """A reader waits for a queued key: write without lingering."""
        self._asleep = False
        """The writer waits for a first entry with no time limit: the first entry queued must wake it."""
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="memevo-retrieval-log", daemon=True)
        self._thread.start()

    def add(self, entries: Sequence[Entry]) -> None:
        """Queue ``entries`` to be written together (in one batch)."""
        with self._lock:
            if not self._closed and len(self._queue) < MAX_QUEUED:
                if self._asleep and not self._queue:  # a writer that looks again by itself needs no wake-up
                    self._work.notify()
                self._queue.extend(entries)
                self._queued.update(key for key, _ in entries)
                return
        self._write(list(entries))

    def written(self, keys: Sequence[bytes]) -> None:
        """Return once none of ``keys`` is queued any more (written, or dropped by a refused write)."""
        with self._lock:
            while not self._queued.isdisjoint(keys):
                self._hurry = True
                self._work.notify()
                self._done.wait()

    def close(self) -> None:
        """Write what is queued and stop the thread (before the store closes). Idempotent."""
        with self._lock:
            self._closed = True
            self._work.notify()
        self._thread.join()

    def _run(self) -> None:
        wrote = False
        while True:
            with self._lock:
                if wrote:
                    # Busy lately: the next batch is gathered over one linger from the last write, so recalls
                    # queue without waking this thread (see LINGER_S); only an idle log sleeps until woken.
                    self._linger(time.monotonic() + LINGER_S)
                if not self._queue and not self._closed:
                    self._asleep = True
                    while not self._queue and not self._closed:
                        self._work.wait()
                    self._asleep = False
                    self._linger(time.monotonic() + LINGER_S)
                if not self._queue:  # closed and drained
                    return
                self._hurry = False
                batch, self._queue = self._queue, []
            try:
                self._write(batch)
            finally:
                with self._lock:
                    self._queued.difference_update(key for key, _ in batch)
                    self._done.notify_all()
            wrote = True

    def _linger(self, until: float) -> None:
        """Wait (lock held) until ``until``, a reader waiting, a close or half the queue's bound, whichever first."""
        while not (self._closed or self._hurry) and len(self._queue) < MAX_QUEUED // 2:
            left = until - time.monotonic()
            if left <= 0:
                break
            self._work.wait(left)

    def _write(self, entries: list[Entry]) -> None:
        try:
            items = [(key, encode()) for key, encode in entries]
        except Exception:  # a bug in an encoder must not stop the log: that retrieval is lost, as in a crash
            log.exception("retrieval records not written")
            return
        self._store.put_many_unsynced(self._cf, items)
