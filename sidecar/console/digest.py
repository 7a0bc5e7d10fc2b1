"""What the overview and the review page need from the whole change log, kept up to date by one Watch.

The digest reads the log once from the start (in the background; the overview says how far it got) and
then follows it. It keeps, in NumPy arrays, one row per state change (time, kind, from, to) and each
memory's current state and kind, so a page aggregates a million memories' history in milliseconds
without reading a record. It is derived from the sidecar's log and held in memory only: no second store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from memevo.v1 import events_pb2, memory_pb2

from .source import ConsoleSource, SourceError

log = logging.getLogger(__name__)

CHUNK_ROWS = 65_536
"""State changes buffered in Python lists before they join the arrays."""
RETRY_S = 2.0
"""Wait before the digest's Watch is opened again after it failed."""
DECISIONS_KEPT = 500
"""Review decisions (and consolidations) the review page's history shows, newest last."""
LIVE_STATES = (
    memory_pb2.MEMORY_STATE_ACTIVE,
    memory_pb2.MEMORY_STATE_ARCHIVED,
    memory_pb2.MEMORY_STATE_CONSOLIDATED,
    memory_pb2.MEMORY_STATE_OBSOLETE,
)
STATE_COUNT = 6
KIND_COUNT = 6


def reason_class(event_type: int, reason: str) -> str:
    """What kind of transition an event records, from its type and reason (for the life and review pages)."""
    lowered = reason.lower()
    # The console's corrections name it right after the engine's verb (see server.ACTOR): a person decided.
    if lowered.startswith(("forget: console", "superseded: console", "restored: console")):
        return "console"
    if lowered.startswith("superseded by memory") and "(inferred" in lowered:
        return "inferred"
    if lowered.startswith("superseded by memory") or event_type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED:
        return "keyed" if "review" not in lowered else "review decision"
    if lowered.startswith("soft conflict"):
        return "soft conflict"
    if lowered.startswith(("review (", "not replaced by memory", "eviction confirmed by", "re-interpreted by")):
        return "review decision"
    if "reviewer" in lowered:
        return "review decision"
    if "consolidated" in lowered or event_type in (
        events_pb2.CHANGE_EVENT_TYPE_CONSOLIDATED,
        events_pb2.CHANGE_EVENT_TYPE_UNCONSOLIDATED,
    ):
        return "consolidation"
    if event_type == events_pb2.CHANGE_EVENT_TYPE_EVICTED:
        return "eviction"
    if lowered.startswith("sweep"):
        return "governance"
    if lowered.startswith("forget"):
        return "forget"
    if event_type == events_pb2.CHANGE_EVENT_TYPE_CREATED:
        return "created"
    return "other"


def _is_decision(event: events_pb2.ChangeEvent) -> bool:
    return reason_class(event.type, event.reason) in ("review decision", "consolidation") and (
        event.type != events_pb2.CHANGE_EVENT_TYPE_CREATED
    )


class ChangeDigest:
    """Counts by state and kind over time, each memory's state, and recent decisions, from the change log."""

    def __init__(self, source: ConsoleSource, token: str | None) -> None:
        self._source = source
        self._token = token
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.cursor = 0
        """The last sequence read."""
        self.target = 0
        """The log's last sequence when the digest started (0 when GetStats was not allowed)."""
        self.error = ""
        """The last failure of the digest's Watch; empty while it reads."""
        self.decisions: deque[events_pb2.ChangeEvent] = deque(maxlen=DECISIONS_KEPT)
        self._rows: list[tuple[float, int, int, int]] = []
        self._times = np.zeros(0, dtype=np.float64)
        self._codes = np.zeros((0, 3), dtype=np.int8)
        """kind, from state, to state of each state change."""
        self._state = np.zeros(1024, dtype=np.int8)
        self._kind = np.zeros(1024, dtype=np.int8)
        self._thread = threading.Thread(target=self._run, name="memevo-console-digest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._source.cancel_events()
        self._thread.join(timeout=5)

    # ---- reading ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.target = self._source.stats(self._token).last_sequence
        except SourceError as error:
            log.info("console: GetStats refused (%s); the overview shows no read progress", error.message)
        while not self._stop.is_set():
            try:
                for event in self._source.events(self.cursor, self._token):
                    self._take(event)
                    if self._stop.is_set():
                        return
            except SourceError as error:
                if self._stop.is_set():
                    return
                self.error = f"{error.code}: {error.message}"
                log.info("console: change-log reader stopped (%s); retrying", self.error)
            self._flush()
            self._stop.wait(RETRY_S)

    def _take(self, event: events_pb2.ChangeEvent) -> None:
        memory_id = event.memory_id
        if memory_id:
            if memory_id >= self._state.size:
                self._grow(memory_id)
            kind = event.kind or int(self._kind[memory_id])
            if event.type == events_pb2.CHANGE_EVENT_TYPE_CREATED or event.kind:
                self._kind[memory_id] = kind
            if event.to_state:
                self._state[memory_id] = event.to_state
            if event.from_state != event.to_state:
                t = event.recorded_at.seconds + event.recorded_at.nanos * 1e-9
                self._rows.append((t, kind, event.from_state, event.to_state))
                if len(self._rows) >= CHUNK_ROWS:
                    self._flush()
        if _is_decision(event):
            self.decisions.append(event)
        self.cursor = event.sequence
        self.error = ""
        if self.cursor >= self.target and self._rows:
            self._flush()  # caught up: every change is visible at once

    def _grow(self, memory_id: int) -> None:
        size = max(memory_id + 1, self._state.size * 2)
        with self._lock:
            self._state = np.concatenate([self._state, np.zeros(size - self._state.size, dtype=np.int8)])
            self._kind = np.concatenate([self._kind, np.zeros(size - self._kind.size, dtype=np.int8)])

    def _flush(self) -> None:
        if not self._rows:
            return
        rows = np.asarray(self._rows, dtype=np.float64)
        self._rows = []
        with self._lock:
            self._times = np.concatenate([self._times, rows[:, 0]])
            self._codes = np.concatenate([self._codes, rows[:, 1:].astype(np.int8)])

    # ---- answers ----------------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """How far the log was read."""
        return {"cursor": self.cursor, "target": self.target, "error": self.error}

    def series(self, bins: int = 60, now_s: float | None = None) -> dict[str, Any]:
        """Memories per state and per kind at the end of each of ``bins`` time buckets, and creations per bucket."""
        with self._lock:
            times, codes = self._times, self._codes
        if times.size == 0:
            return {"times": [], "states": {}, "kinds": {}, "created": []}
        start = float(times.min())
        end = max(float(times.max()), now_s if now_s is not None else time.time())
        edges = np.linspace(start, end if end > start else start + 1.0, bins + 1)
        bucket = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, bins - 1)
        kind, before, after = (codes[:, i].astype(np.int64) for i in range(3))
        # One bincount per quantity over (bucket, code) cells, not one pass per state and kind.
        cells = bins * STATE_COUNT
        by_state = np.bincount(bucket * STATE_COUNT + after, minlength=cells) - np.bincount(
            bucket * STATE_COUNT + before, minlength=cells
        )
        state_lines = np.cumsum(by_state.reshape(bins, STATE_COUNT), axis=0)
        states = {
            memory_pb2.MemoryState.Name(state): state_lines[:, state].tolist()  # type: ignore[arg-type]
            for state in range(1, STATE_COUNT)
        }
        live = np.zeros(STATE_COUNT, dtype=np.int64)
        live[list(LIVE_STATES)] = 1
        entered = live[after] - live[before]  # +1 into the live states, -1 out of them (evicted)
        by_kind = np.bincount(bucket * KIND_COUNT + kind, weights=entered, minlength=bins * KIND_COUNT)
        kind_lines = np.cumsum(by_kind.reshape(bins, KIND_COUNT), axis=0).astype(np.int64)
        kinds = {
            memory_pb2.MemoryKind.Name(code): kind_lines[:, code].tolist()  # type: ignore[arg-type]
            for code in range(1, KIND_COUNT)
            if kind_lines[:, code].any()
        }
        created = np.bincount(bucket[before == 0], minlength=bins)
        return {
            "times": edges[1:].tolist(),
            "bucket_s": float(edges[1] - edges[0]),
            "states": states,
            "kinds": kinds,
            "created": created.tolist(),
        }

    def sample(self, per_kind: int, seed: int | None = None) -> dict[int, npt.NDArray[np.int64]]:
        """Up to ``per_kind`` random ACTIVE or ARCHIVED memory ids of each kind the log has shown."""
        with self._lock:
            state, kind = self._state, self._kind
        current = (state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)
        rng = np.random.default_rng(seed)
        out: dict[int, npt.NDArray[np.int64]] = {}
        for code in range(1, KIND_COUNT):
            ids = np.flatnonzero(current & (kind == code))
            if ids.size > per_kind:
                ids = np.sort(rng.choice(ids, per_kind, replace=False))
            if ids.size:
                out[code] = ids.astype(np.int64)
        return out
