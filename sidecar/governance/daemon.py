"""The governance daemon: periodic sweeps that score every memory and move it through its lifecycle.

A sweep runs the evaluation kernels over the hot columns (no Python object
per memory), then applies the proposed transitions through the committer,
each with a change-log event. It also checkpoints access statistics, which
recall only counts in memory. ``Govern`` runs a sweep on demand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import numpy as np
import numpy.typing as npt

from memevo.kernels.lifecycle import count_transitions, propose_transitions
from memevo.v1 import memory_pb2, memory_service_pb2

from ..config import GovernanceConfig
from ..domain import to_timestamp
from ..engine import Engine
from ..evaluation.scoring import clock_for, score
from ..store.columns import NO_CODE

log = logging.getLogger(__name__)

TRANSITIONS_PER_COMMIT = 1024
"""Transitions applied per committer mutation: bounds how long one sweep holds up writers."""
RECENT_SWEEPS = 16


class GovernanceDaemon:
    """Sweeps on a schedule and on request; thread-safe, one sweep at a time."""

    def __init__(self, engine: Engine, config: GovernanceConfig) -> None:
        self.engine = engine
        self.config = config
        self.recent: deque[memory_service_pb2.SweepStats] = deque(maxlen=RECENT_SWEEPS)
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the background thread (unless the interval is 0)."""
        if self.config.sweep_interval_s <= 0 and self.config.checkpoint_interval_s <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="memevo-governance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write a last checkpoint of access statistics."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.checkpoint()

    def _run(self) -> None:
        last_sweep = last_checkpoint = time.monotonic()
        tick = min(x for x in (self.config.sweep_interval_s, self.config.checkpoint_interval_s, 1.0) if x > 0)
        while not self._stop.wait(tick):
            now = time.monotonic()
            try:
                if self.config.checkpoint_interval_s > 0 and now - last_checkpoint >= self.config.checkpoint_interval_s:
                    self.checkpoint()
                    last_checkpoint = now
                if self.config.sweep_interval_s > 0 and now - last_sweep >= self.config.sweep_interval_s:
                    self.sweep("schedule")
                    last_sweep = time.monotonic()
            except Exception:  # the daemon must outlive a bad sweep; the next one retries
                log.exception("governance step failed")

    def checkpoint(self) -> int:
        """Write the access statistics that changed since the last checkpoint; returns how many."""
        ids = self.engine.columns.take_accessed()
        if ids or self.engine.current_turn:
            self.engine.checkpoint_statistics(ids)
        self.engine.expire_retrievals(self.config.retrieval_ttl_s)
        return len(ids)

    def sweep(self, trigger: str, *, dry_run: bool = False, namespace: str = "") -> memory_service_pb2.SweepStats:
        """Score every memory, propose transitions and (unless ``dry_run``) apply them."""
        with self._sweep_lock:
            return self._sweep(trigger, dry_run=dry_run, namespace=namespace)

    def _sweep(self, trigger: str, *, dry_run: bool, namespace: str) -> memory_service_pb2.SweepStats:
        started = time.time()
        t0 = time.perf_counter()
        engine = self.engine
        columns = engine.columns
        policy = engine.policy
        n = columns.size
        params = engine.params
        rows = slice(0, n)
        clock = clock_for(columns, policy, engine.current_turn, rows)
        now = clock.now
        state = columns.state[:n].copy()
        kernel_start = time.perf_counter()
        scores = score(columns, policy, clock, rows, params)
        next_state, next_below = propose_transitions(
            scores.value,
            state,
            columns.kind[:n],
            clock.state_since,
            columns.below_since[:n],
            now,
            params,
        )
        kernel_ms = (time.perf_counter() - kernel_start) * 1e3
        if namespace:
            code = columns.namespaces.lookup(namespace)
            outside = columns.namespace[:n] != code if code != NO_CODE else np.ones(n, dtype=bool)
            next_state[outside] = state[outside]
        matrix = count_transitions(state, next_state)
        if not dry_run:
            columns.value[:n] = scores.value
            columns.below_since[:n] = next_below
            moved = np.flatnonzero(next_state != state).astype(np.int64)
            for start in range(0, moved.size, TRANSITIONS_PER_COMMIT):
                chunk = moved[start : start + TRANSITIONS_PER_COMMIT]
                engine.apply_transitions(
                    chunk, state[chunk], next_state[chunk], scores.value[chunk], _reasons(next_state[chunk])
                )
        stats = memory_service_pb2.SweepStats(
            started_at=to_timestamp(started),
            evaluated_count=int(np.count_nonzero(state)),
            kernel_ms=kernel_ms,
            total_ms=(time.perf_counter() - t0) * 1e3,
            trigger=trigger if not dry_run else f"{trigger} (dry run)",
        )
        for from_state, to_state in zip(*np.nonzero(matrix), strict=True):
            if from_state != to_state:
                stats.transitions.add(
                    from_state=int(from_state),
                    to_state=int(to_state),
                    count=int(matrix[from_state, to_state]),
                )
        self.recent.appendleft(stats)
        return stats


_REASONS: dict[int, str] = {
    memory_pb2.MEMORY_STATE_ARCHIVED: "sweep: value below the archive threshold",
    memory_pb2.MEMORY_STATE_ACTIVE: "sweep: value back above the reactivation threshold",
    memory_pb2.MEMORY_STATE_EVICTED: "sweep: value below the eviction threshold for the whole grace period",
}


def _reasons(targets: npt.NDArray[np.uint8]) -> list[str]:
    return [_REASONS.get(int(t), "sweep") for t in targets]
