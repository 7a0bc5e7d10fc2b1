"""Pairs waiting for the judge: perception queues them on the write path, a worker judges them off it.

A write's candidates (the older statements it may replace) are found under the
commit lock, where a model run of a few milliseconds a pair would hold every
other write; so the write only queues (newer id, older ids) once it is durable,
and ``Engine.judge_pending`` judges them in batches and settles what the judge is
sure of as a change of its own. ``Govern`` drains the queue first, so what a
sweep scores was judged. The queue lives in RAM: a crash loses the judgements
not yet made (the statements stay as written, current), never a memory.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

QUEUE_LIMIT = 100_000
"""Pairs held at most; past it the oldest are dropped (counted in ``dropped``): a burst of writes must not grow RAM
without bound while the judge falls behind."""


@dataclass(frozen=True)
class Judgement:
    """A statement and the older ones it may replace, nearest first."""

    newer: int
    older: tuple[int, ...]
    queued_at: float
    """``time.monotonic()`` when the write was durable (the judge's lag is measured from it)."""


class JudgeQueue:
    """Thread-safe FIFO of judgements with a count of those being judged, so a caller can wait until all are done."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._items: collections.deque[Judgement] = collections.deque()
        self._pairs = 0
        self._busy = 0
        self._limit = limit
        self._changed = threading.Condition()
        self.dropped = 0
        """Pairs dropped because the queue was full, since the start."""
        self.judged = 0
        """Pairs judged since the start."""
        self.lag_s: collections.deque[float] = collections.deque(maxlen=4_096)
        """Seconds from a write's durability to its judgement being settled, the latest ones."""

    def put(self, newer: int, older: tuple[int, ...]) -> None:
        """Queue a statement's candidates (called once its write is durable)."""
        if not older:
            return
        with self._changed:
            self._items.append(Judgement(newer, older, time.monotonic()))
            self._pairs += len(older)
            while self._pairs > self._limit and self._items:
                dropped = self._items.popleft()
                self._pairs -= len(dropped.older)
                self.dropped += len(dropped.older)
            self._changed.notify_all()

    def take(self, max_pairs: int, timeout_s: float | None = None) -> list[Judgement]:
        """Up to ``max_pairs`` pairs' judgements (at least one judgement when any is queued), oldest first; waits
        up to ``timeout_s`` for one (None: not at all). The caller must call ``done`` with them afterwards."""
        with self._changed:
            if not self._items and timeout_s is not None:
                self._changed.wait(timeout_s)
            taken: list[Judgement] = []
            pairs = 0
            while self._items and (not taken or pairs + len(self._items[0].older) <= max_pairs):
                item = self._items.popleft()
                taken.append(item)
                pairs += len(item.older)
            self._pairs -= pairs
            self._busy += pairs
            return taken

    def done(self, taken: list[Judgement]) -> None:
        """Mark judgements from ``take`` as settled (or given up)."""
        now = time.monotonic()
        pairs = sum(len(item.older) for item in taken)
        with self._changed:
            self._busy -= pairs
            self.judged += pairs
            self.lag_s.extend(now - item.queued_at for item in taken)
            self._changed.notify_all()

    def lags(self) -> list[float]:
        """A copy of ``lag_s`` (the worker appends to it while a reader would iterate)."""
        with self._changed:
            return list(self.lag_s)

    def pending(self) -> int:
        """Pairs queued or being judged."""
        with self._changed:
            return self._pairs + self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or being judged; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._items or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def wake(self) -> None:
        """Wake a waiting ``take`` (on shutdown)."""
        with self._changed:
            self._changed.notify_all()
