"""Query embedding shared by concurrent callers: micro-batches with no added wait, and a cache of recent queries.

A recall by text needs one vector, and a model run on one sentence costs
nearly as much as one on four (the bundled model: 6.0 ms for 1, 9.7 ms for
4, 17.8 ms for 8 LoCoMo questions). :class:`QueryEmbedder` lets concurrent
callers share runs without a timer: a caller that finds the embedder idle
runs its own text at once; callers that arrive while a run is going queue,
and when it ends the first of them runs the whole queue as the next batch
(at most ``max_batch`` texts). No caller waits for a window to fill, and
none runs another's batch after its own result is ready: the work stays on
the callers' threads.

Recent queries are kept in a small LRU cache keyed by the exact text; a hit
returns the very vector the first call got (read-only). Agents repeat
queries often (a context per turn, retries, several tools asking the same
question).

When a batch of several texts fails with anything but ``Unavailable`` (the
endpoint is down for everyone), each text is tried again alone, so an error
reaches only the caller whose text caused it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import Unavailable

QUERY_CACHE_SIZE = 1024
"""Query vectors kept (LRU): 1.5 MB at 384-d."""
MAX_QUERY_BATCH = 32
"""Most texts per run; the bundled model's cost per text stops falling at about 16."""
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
"""Upper bounds of the batch-size histogram in the metrics."""

Vector = npt.NDArray[np.float32]
EmbedTexts = Callable[[Sequence[str]], npt.NDArray[np.float32]]
"""Texts in, one float32 row per text out (the engine's ``embed``)."""


@dataclass(frozen=True)
class QueryEmbedderStats:
    """Counters since start; ``busy_s`` over wall time is the embedder's occupancy."""

    requests: int
    """Texts asked for (hits included)."""
    cache_hits: int
    batches: int
    """Model runs (each retry alone after a failed batch counts too)."""
    texts_embedded: int
    """Texts sent to the model, summed over runs."""
    busy_s: float
    """Seconds during which a run was going."""
    waiting: int
    """Callers queued for the next run now."""
    batch_sizes: tuple[int, ...]
    """Runs by size: the count for each bound of ``BATCH_SIZE_BUCKETS`` (non-cumulative), then the rest."""


class _Pending:
    __slots__ = ("done", "error", "text", "vector", "wake")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: Vector | None = None
        self.error: BaseException | None = None
        self.done = False
        self.wake = threading.Event()


class QueryEmbedder:
    """One vector per query text, shared across concurrent callers (see the module docstring).

    ``embed`` is the underlying texts-to-rows function; its exceptions reach the
    caller whose text failed. Keyword-only: ``cache_size`` (0 turns the cache
    off), ``max_batch`` (most texts per run; 0 = no sharing: every caller runs
    its own text at once, concurrently with the others).
    """

    def __init__(
        self, embed: EmbedTexts, *, cache_size: int = QUERY_CACHE_SIZE, max_batch: int = MAX_QUERY_BATCH
    ) -> None:
        if cache_size < 0:
            raise ValueError(f"cache_size is {cache_size}; pass 0 (no cache) or more")
        if max_batch < 0:
            raise ValueError(f"max_batch is {max_batch}; pass 0 (each text alone) or more")
        self._embed = embed
        self._cache_size = cache_size
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._queue: list[_Pending] = []
        self._running = False
        self._requests = 0
        self._hits = 0
        self._batches = 0
        self._texts = 0
        self._busy_s = 0.0
        self._sizes = [0] * (len(BATCH_SIZE_BUCKETS) + 1)

    def embed_one(self, text: str) -> Vector:
        """The vector of ``text``: float32, one row of what ``embed`` returns, read-only.

        Raises what ``embed`` raised for this text.
        """
        with self._lock:
            self._requests += 1
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                self._hits += 1
                return cached
            mine = _Pending(text)
            if self._max_batch:
                self._queue.append(mine)
                lead = not self._running
                self._running = True
        if not self._max_batch:  # no sharing: this caller's own run, beside any others
            vector = self._timed([text])[0]
            with self._lock:
                self._remember(text, vector)
            return vector
        if not lead:
            mine.wake.wait()
        if not mine.done:  # idle on arrival, or woken as the first of the queue: run the next batch
            self._run_batch()
        if mine.error is not None:
            raise mine.error
        assert mine.vector is not None
        return mine.vector

    def stats(self) -> QueryEmbedderStats:
        """The counters now."""
        with self._lock:
            return QueryEmbedderStats(
                requests=self._requests,
                cache_hits=self._hits,
                batches=self._batches,
                texts_embedded=self._texts,
                busy_s=self._busy_s,
                waiting=len(self._queue),
                batch_sizes=tuple(self._sizes),
            )

    def _run_batch(self) -> None:
        """Embed the head of the queue (this caller's own request first), then wake its callers and the next leader."""
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        following: _Pending | None = None
        try:
            self._fill(batch)
        finally:
            with self._lock:
                for pending in batch:
                    if pending.vector is not None:
                        self._remember(pending.text, pending.vector)
                if self._queue:
                    following = self._queue[0]
                else:
                    self._running = False
            for pending in batch:
                if pending.vector is None and pending.error is None:  # _fill itself was interrupted
                    pending.error = RuntimeError("the query embedder stopped before this text was embedded")
                pending.done = True
                pending.wake.set()
            if following is not None:
                following.wake.set()

    def _remember(self, text: str, vector: Vector) -> None:
        """Cache ``vector`` as the newest entry (the lock held)."""
        if self._cache_size:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _fill(self, batch: list[_Pending]) -> None:
        """Set each request's vector or error."""
        texts = list(dict.fromkeys(p.text for p in batch))  # equal texts asked at once are embedded once
        try:
            rows = self._timed(texts)
        except Unavailable as exc:  # the endpoint is down for every text alike: no point asking again one by one
            for pending in batch:
                pending.error = exc
            return
        except Exception as exc:
            if len(texts) == 1:
                for pending in batch:
                    pending.error = exc
                return
            by_text: dict[str, Vector | BaseException] = {}
            for text in texts:  # find whose text failed: each alone
                try:
                    by_text[text] = self._timed([text])[0]
                except Exception as alone:
                    by_text[text] = alone
            for pending in batch:
                got = by_text[pending.text]
                if isinstance(got, BaseException):
                    pending.error = got
                else:
                    pending.vector = got
            return
        by_row = dict(zip(texts, rows, strict=True))
        for pending in batch:
            pending.vector = by_row[pending.text]

    def _timed(self, texts: list[str]) -> list[Vector]:
        """``embed(texts)`` as one read-only row per text, counted and timed.

        Each row is its own copy: a cached vector must not keep its whole batch's array alive, nor share
        memory with what ``embed`` returned.
        """
        began = time.perf_counter()
        try:
            rows = np.asarray(self._embed(texts), dtype=np.float32)
        finally:
            elapsed = time.perf_counter() - began
            bucket = next((i for i, bound in enumerate(BATCH_SIZE_BUCKETS) if len(texts) <= bound), -1)
            with self._lock:
                self._batches += 1
                self._texts += len(texts)
                self._busy_s += elapsed
                self._sizes[bucket] += 1
        if rows.ndim != 2 or rows.shape[0] != len(texts):
            raise ValueError(f"the embedder returned shape {rows.shape} for {len(texts)} texts")
        out = []
        for row in rows:
            own = row.copy()
            own.flags.writeable = False
            out.append(own)
        return out
