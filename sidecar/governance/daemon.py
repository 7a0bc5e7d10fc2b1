"""The governance daemon: tiered, sampled and event-driven sweeps that move memories through their lifecycle.

A sweep runs the fused kernel of ``kernels/sweep.py`` over the compact hot
columns (no Python object per memory), then applies the proposed
transitions through the committer, each with a change-log event. A
scheduled sweep of a block of slots writes only the ``below`` and ``near``
entries that change and re-runs the full kernel on the few chunks where a
memory moves; ``Govern`` and dry runs compute every value. Before a sweep
the columns' decay terms are re-anchored when the policy or time mode
changed or now drifted too far from the anchor (``MemoryColumns.rebase``,
O(n), rare). Which
memories a scheduled sweep evaluates depends on the tier that is due:

- ``near`` (every ``near_interval_s``): the memories the last sweep flagged
  close to a threshold or in an eviction grace period;
- ``active`` (every ``sweep_interval_s`` or ``sweep_every_writes`` rows):
  ACTIVE memories plus the near ones;
- ``full`` (every ``full_interval_s``): everything, ARCHIVED included.

Above ``sample_above_count`` slots each scheduled sweep takes a rotating
block of ``sample_count`` slots instead of the whole tier. Perception events
(updates, supersessions, outcomes) re-evaluate the memories they name at
once; a policy update triggers a full sweep. ``Govern`` always runs a full
sweep. The daemon also checkpoints access statistics, which recall only
counts in memory. The trigger of each sweep in GetStats says which path ran:
"request", "schedule" (full), "schedule: active", "schedule: near",
"writes: active", "event".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from memevo.kernels.lifecycle import STATE_ACTIVE, STATE_ARCHIVED, STATE_EVICTED, count_transitions
from memevo.kernels.params import CHUNK
from memevo.kernels.sweep import (
    COUNT_EVALUATED,
    COUNT_MOVED,
    N_COUNTS,
    SweepResult,
    sweep,
    sweep_coefficients,
    sweep_in_place,
    sweep_rows,
)
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

from ..config import GovernanceConfig
from ..domain import to_timestamp
from ..engine import Engine
from ..errors import Unavailable
from ..store.columns import NO_CODE, MemoryColumns

log = logging.getLogger(__name__)
_U8 = npt.NDArray[np.uint8]
_F32 = npt.NDArray[np.float32]

TRANSITIONS_PER_COMMIT = 1024
LAUNCH_BLOCK = 64 * CHUNK
"""Slots per kernel launch of a scheduled sweep (about 1M): kernel launches are serialised
(kernels/_wrappers.py), so a recall's small kernel waits for at most one block, not a whole 10M sweep."""
"""Transitions applied per committer mutation: bounds how long one sweep holds up writers."""
RECENT_SWEEPS = 16
TIER_NEAR = "near"
TIER_ACTIVE = "active"
TIER_FULL = "full"
EVENT_TYPES = frozenset(
    {
        events_pb2.CHANGE_EVENT_TYPE_UPDATED,
        events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED,
        events_pb2.CHANGE_EVENT_TYPE_OUTCOME_REPORTED,
        events_pb2.CHANGE_EVENT_TYPE_UNCONSOLIDATED,
    }
)
"""Change events whose memories (memory_id and related_ids) a sweep re-evaluates at once."""
EVENT_BATCH_WAIT_S = 0.05
"""How long the event thread gathers more events before sweeping them together."""
_VALID_MOVES = frozenset(
    {
        (STATE_ACTIVE, STATE_ARCHIVED),
        (STATE_ARCHIVED, STATE_ACTIVE),
        (STATE_ACTIVE, STATE_EVICTED),
        (STATE_ARCHIVED, STATE_EVICTED),
    }
)


@dataclass
class TierClock:
    """When each tier last ran (monotonic seconds) and the write count then; decides which tier is due."""

    config: GovernanceConfig
    last_near: float
    last_active: float
    last_full: float
    writes_at_active: int = 0

    def due(self, now: float, writes: int) -> tuple[str, str] | None:
        """(tier, trigger) of the most inclusive tier due at ``now``, or None; the caller then calls ``ran``."""
        config = self.config
        if config.full_interval_s > 0 and now - self.last_full >= config.full_interval_s:
            return TIER_FULL, "schedule"
        if config.sweep_interval_s > 0 and now - self.last_active >= config.sweep_interval_s:
            return TIER_ACTIVE, "schedule: active"
        if config.sweep_every_writes > 0 and writes - self.writes_at_active >= config.sweep_every_writes:
            return TIER_ACTIVE, "writes: active"
        if config.near_interval_s > 0 and now - self.last_near >= config.near_interval_s:
            return TIER_NEAR, "schedule: near"
        return None

    def ran(self, tier: str, now: float, writes: int) -> None:
        """Record that ``tier`` ran; a tier includes the ones below it (full > active > near)."""
        self.last_near = now
        if tier in (TIER_ACTIVE, TIER_FULL):
            self.last_active = now
            self.writes_at_active = writes
        if tier == TIER_FULL:
            self.last_full = now


def tier_rows(
    tier: str,
    state: npt.NDArray[np.uint8],
    near: npt.NDArray[np.uint8],
    cursor: int,
    *,
    sample_above_count: int,
    sample_count: int,
) -> tuple[slice | npt.NDArray[np.int64], int]:
    """The slots a ``tier`` sweep evaluates, and the next sampling cursor.

    ``state`` and ``near`` are the first ``size`` slots. A full tier is the
    whole slice; above ``sample_above_count`` slots it is the block of
    ``sample_count`` slots at ``cursor`` (wrapping to 1 past the end). The
    active tier is the ACTIVE or near ids (of that block, when sampling);
    the near tier is the near ids (at most ``sample_count`` of them from
    ``cursor`` on, when sampling).
    """
    size = state.shape[0]
    sampling = size > sample_above_count
    start, stop = 1, size
    next_cursor = cursor
    if sampling and tier != TIER_NEAR:
        start = cursor if 1 <= cursor < size else 1
        stop = min(size, start + sample_count)
        next_cursor = stop if stop < size else 1
    if tier == TIER_FULL:
        return slice(start, stop), next_cursor
    if tier == TIER_ACTIVE:
        picked = (state[start:stop] == STATE_ACTIVE) | (near[start:stop] != 0)
        return (np.flatnonzero(picked) + start).astype(np.int64), next_cursor
    ids = np.flatnonzero(near).astype(np.int64)
    if sampling and ids.size > sample_count:
        first = int(np.searchsorted(ids, cursor))
        taken = np.take(ids, np.arange(first, first + sample_count), mode="wrap")
        return np.sort(taken), int(taken[-1]) + 1
    return ids, next_cursor


class GovernanceDaemon:
    """Sweeps on a schedule, on events and on request; thread-safe, one sweep at a time."""

    def __init__(self, engine: Engine, config: GovernanceConfig) -> None:
        self.engine = engine
        self.config = config
        self.recent: deque[memory_service_pb2.SweepStats] = deque(maxlen=RECENT_SWEEPS)
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._buffers: SweepResult | None = None
        self._cursors = {TIER_NEAR: 1, TIER_ACTIVE: 1, TIER_FULL: 1}
        now = time.monotonic()
        self.tiers = TierClock(config, now, now, now, engine.columns.writes)

    def start(self) -> None:
        """Start the background threads (none when both the sweep and checkpoint intervals are 0)."""
        if self.config.sweep_interval_s <= 0 and self.config.checkpoint_interval_s <= 0:
            return
        self._threads.append(threading.Thread(target=self._run, name="memevo-governance", daemon=True))
        if self.config.sweep_interval_s > 0 and self.config.react_to_events:
            self._threads.append(threading.Thread(target=self._follow_events, name="memevo-events", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the threads and write a last checkpoint of access statistics."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self.checkpoint()

    def _limit_threads(self) -> None:
        # numba's thread count is per calling thread: this caps the daemon's sweeps, not Govern's.
        wanted = self.config.sweep_threads or max(1, (os.cpu_count() or 1) - 1)
        numba.set_num_threads(max(1, min(wanted, numba.get_num_threads())))

    def _run(self) -> None:
        self._limit_threads()
        last_checkpoint = time.monotonic()
        intervals = (
            self.config.sweep_interval_s,
            self.config.near_interval_s if self.config.sweep_interval_s > 0 else 0.0,
            self.config.checkpoint_interval_s,
            1.0,
        )
        tick = min(x for x in intervals if x > 0)
        while not self._stop.wait(tick):
            now = time.monotonic()
            try:
                if self.config.checkpoint_interval_s > 0 and now - last_checkpoint >= self.config.checkpoint_interval_s:
                    self.checkpoint()
                    last_checkpoint = now
                if self.config.sweep_interval_s > 0:
                    writes = self.engine.columns.writes
                    due = self.tiers.due(now, writes)
                    if due is not None:
                        self.sweep_tier(*due)
                        self.tiers.ran(due[0], time.monotonic(), writes)
            except Exception:  # the daemon must outlive a bad sweep; the next one retries
                log.exception("governance step failed")

    def _follow_events(self) -> None:
        """Re-evaluate the memories named by perception events as they are committed."""
        self._limit_threads()
        after = self.engine.store.last_sequence
        while not self._stop.is_set():
            try:
                ids: set[int] = set()
                policy_changed = False
                deadline: float | None = None
                for event in self.engine.events(after, self._stop):
                    after = event.sequence
                    if event.type == events_pb2.CHANGE_EVENT_TYPE_POLICY_UPDATED:
                        policy_changed = True
                    elif event.type in EVENT_TYPES:
                        ids.add(event.memory_id)
                        ids.update(event.related_ids)
                    if (ids or policy_changed) and deadline is None:
                        deadline = time.monotonic() + EVENT_BATCH_WAIT_S
                    if deadline is not None and (
                        time.monotonic() >= deadline or self.engine.store.last_sequence <= after
                    ):
                        break
                if policy_changed:
                    self.sweep("event")
                elif ids:
                    self.sweep_ids(np.asarray(sorted(ids), dtype=np.int64), "event")
            except Exception:
                log.exception("event-driven sweep failed")
                self._stop.wait(1.0)

    def checkpoint(self) -> int:
        """Write the access statistics that changed since the last checkpoint; returns how many."""
        ids = self.engine.columns.take_accessed()
        if ids or self.engine.current_turn:
            self.engine.checkpoint_statistics(ids)
        self.engine.expire_retrievals(self.config.retrieval_ttl_s)
        return len(ids)

    # ---- sweeps ------------------------------------------------------------------------------

    def sweep(self, trigger: str, *, dry_run: bool = False, namespace: str = "") -> memory_service_pb2.SweepStats:
        """Score every memory (of ``namespace``, if given), propose transitions and (unless ``dry_run``) apply them."""
        with self._sweep_lock:
            columns = self.engine.columns
            if not dry_run:
                self.engine.drain_judgements()
                self._second_look()
            if namespace:
                code = columns.namespaces.lookup(namespace)
                ids = columns.namespace_ids(code) if code != NO_CODE else np.zeros(0, dtype=np.int64)
                return self._sweep(ids, trigger, dry_run=dry_run)
            return self._sweep(slice(1, columns.size), trigger, dry_run=dry_run)

    def _second_look(self) -> None:
        """Statements stored unread are read again with what their namespace learnt since (see
        ``Engine.second_look``) before the sweep scores: what that retires is history by the sweep's time."""
        try:
            self.engine.second_look()
        except Unavailable as refused:  # writes refused since (a full disk): the next sweep tries again
            log.info("second look skipped: %s", refused)
        except Exception:  # perception's second look must not cost the sweep; the next one retries
            log.exception("second look failed")

    def sweep_tier(self, tier: str, trigger: str) -> memory_service_pb2.SweepStats:
        """Sweep the slots of ``tier`` (TIER_NEAR, TIER_ACTIVE, TIER_FULL), sampled in a very large store."""
        with self._sweep_lock:
            if tier != TIER_NEAR:  # every second: a share of a core the writes would feel
                self._second_look()
            columns = self.engine.columns
            rows, self._cursors[tier] = tier_rows(
                tier,
                columns.state[: columns.size],
                columns.near[: columns.size],
                self._cursors[tier],
                sample_above_count=self.config.sample_above_count,
                sample_count=self.config.sample_count,
            )
            if isinstance(rows, slice) and (rows.start, rows.stop) != (1, columns.size):
                trigger = f"{trigger} (sample)"
            return self._sweep(rows, trigger, dry_run=False)

    def sweep_ids(self, ids: npt.NDArray[np.int64], trigger: str) -> memory_service_pb2.SweepStats:
        """Sweep just ``ids`` (ids past the last slot are ignored)."""
        with self._sweep_lock:
            ids = ids[(ids > 0) & (ids < self.engine.columns.size)]
            return self._sweep(ids, trigger, dry_run=False)

    def _prepare(self) -> npt.NDArray[np.uint64]:
        """The sweep coefficients at the current time, re-anchoring the columns' terms first if needed."""
        engine = self.engine
        columns = engine.columns
        policy = engine.policy
        if policy.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS:
            clock, now = "turns", float(engine.current_turn)
        else:
            clock, now = "wall", time.time()
        budget = policy.cost_budget_bytes or 1.0
        params = engine.params
        if columns.needs_rebase(clock, now, params, budget):
            columns.rebase(clock, now, params, budget)
        return sweep_coefficients(columns.params, now - columns.epoch)

    def _columns(self, rows: slice) -> tuple[_U8, _U8, _F32, _F32, _F32, _F32, _F32, _F32]:
        """The sweep's input columns at ``rows`` (views, no copies)."""
        c: MemoryColumns = self.engine.columns
        return (
            c.state[rows],
            c.kind[rows],
            c.acc_base[rows],
            c.conf_term[rows],
            c.rel_term[rows],
            c.static[rows],
            c.since[rows],
            c.below[rows],
        )

    def _full(self, rows: slice | npt.NDArray[np.int64], coef: npt.NDArray[np.uint64]) -> SweepResult:
        """Every output of a sweep of ``rows``, into reused buffers (inputs untouched)."""
        margin = self.config.near_margin
        if not isinstance(rows, slice):
            return sweep_rows(rows, *self._columns(slice(0, self.engine.columns.size)), coef, margin=margin)
        n = rows.stop - rows.start
        if self._buffers is None or self._buffers.value.shape[0] < n:
            capacity = max(n, 1024)
            self._buffers = SweepResult(
                np.empty(capacity, dtype=np.float32),
                np.empty(capacity, dtype=np.uint8),
                np.empty(capacity, dtype=np.float32),
                np.empty(capacity, dtype=np.uint8),
                np.zeros(((capacity + CHUNK - 1) // CHUNK, N_COUNTS), dtype=np.int64),
            )
        buffers = self._buffers
        out = SweepResult(
            buffers.value[:n],
            buffers.next_state[:n],
            buffers.next_below[:n],
            buffers.near[:n],
            np.zeros(((n + CHUNK - 1) // CHUNK, N_COUNTS), dtype=np.int64),
        )
        return sweep(*self._columns(rows), coef, margin=margin, out=out)

    def _kernel(
        self, rows: slice | npt.NDArray[np.int64], coef: npt.NDArray[np.uint64], *, dry_run: bool
    ) -> tuple[npt.NDArray[np.int64], Moved]:
        """Per-chunk counts and the moves of a sweep of ``rows``; unless ``dry_run``, below and near are updated."""
        columns: MemoryColumns = self.engine.columns
        if dry_run or not isinstance(rows, slice):
            result = self._full(rows, coef)
            if not dry_run:
                columns.below[rows] = result.next_below
                columns.near[rows] = result.near
            return result.counts, _moved(rows, result, columns.state)
        blocks = []
        for start in range(rows.start, rows.stop, LAUNCH_BLOCK):
            block = slice(start, min(start + LAUNCH_BLOCK, rows.stop))
            blocks.append(
                sweep_in_place(*self._columns(block), columns.near[block], coef, margin=self.config.near_margin)
            )
            time.sleep(0)  # let a recall waiting for the kernel launch lock in between blocks
        counts = np.concatenate(blocks) if blocks else np.zeros((0, N_COUNTS), dtype=np.int64)
        # Values and next states only where something moves (the in-place update is idempotent).
        parts = []
        for chunk in np.flatnonzero(counts[:, COUNT_MOVED]).tolist():
            part = slice(rows.start + chunk * CHUNK, min(rows.start + (chunk + 1) * CHUNK, rows.stop))
            parts.append(_moved(part, self._full(part, coef), columns.state))
        if not parts:
            return counts, _NO_MOVES
        return counts, Moved(*(np.concatenate(arrays) for arrays in zip(*parts, strict=True)))

    def _sweep(
        self, rows: slice | npt.NDArray[np.int64], trigger: str, *, dry_run: bool
    ) -> memory_service_pb2.SweepStats:
        started = time.time()
        t0 = time.perf_counter()
        engine = self.engine
        coef = self._prepare()
        kernel_start = time.perf_counter()
        counts, (moved_ids, observed, targets, values) = self._kernel(rows, coef, dry_run=dry_run)
        kernel_ms = (time.perf_counter() - kernel_start) * 1e3
        totals = counts.sum(axis=0)
        matrix = count_transitions(observed, targets)
        if not dry_run:
            for start in range(0, moved_ids.size, TRANSITIONS_PER_COMMIT):
                part = slice(start, start + TRANSITIONS_PER_COMMIT)
                engine.apply_transitions(
                    moved_ids[part], observed[part], targets[part], values[part], _reasons(targets[part])
                )
        stats = memory_service_pb2.SweepStats(
            started_at=to_timestamp(started),
            evaluated_count=int(totals[COUNT_EVALUATED]),
            kernel_ms=kernel_ms,
            total_ms=(time.perf_counter() - t0) * 1e3,
            trigger=trigger if not dry_run else f"{trigger} (dry run)",
        )
        for from_state, to_state in zip(*np.nonzero(matrix), strict=True):
            if from_state != to_state:
                stats.transitions.add(
                    from_state=int(from_state), to_state=int(to_state), count=int(matrix[from_state, to_state])
                )
        self.recent.appendleft(stats)
        return stats


class Moved(NamedTuple):
    """The memories a sweep moves: ids, observed state, target state and value."""

    ids: npt.NDArray[np.int64]
    observed: npt.NDArray[np.uint8]
    targets: npt.NDArray[np.uint8]
    values: npt.NDArray[np.float32]


_NO_MOVES = Moved(
    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.float32)
)


def _moved(rows: slice | npt.NDArray[np.int64], result: SweepResult, state: npt.NDArray[np.uint8]) -> Moved:
    """Ids, observed state, target state and value of the slots a sweep moves.

    Only chunks whose kernel count says something moved are compared. The observed state is read
    again now: a pair that is no longer a sweep transition (a writer changed the memory meanwhile)
    is dropped, and the committer re-checks each against the stored record.
    """
    chunks = np.flatnonzero(result.counts[:, COUNT_MOVED])
    if chunks.size == 0:
        return _NO_MOVES
    positions = []
    for chunk in chunks.tolist():
        part = slice(chunk * CHUNK, min((chunk + 1) * CHUNK, result.next_state.shape[0]))
        ids = np.arange(part.start, part.stop, dtype=np.int64)
        ids = ids + rows.start if isinstance(rows, slice) else rows[part]
        changed = np.flatnonzero(result.next_state[part] != state[ids]) + part.start
        positions.append(changed)
    where = np.concatenate(positions)
    ids = (where + rows.start) if isinstance(rows, slice) else rows[where]
    observed = state[ids]
    targets = result.next_state[where]
    keep = np.fromiter(
        ((int(o), int(t)) in _VALID_MOVES for o, t in zip(observed, targets, strict=True)), dtype=bool, count=ids.size
    )
    return Moved(ids[keep].astype(np.int64), observed[keep], targets[keep], result.value[where][keep])


_REASONS: dict[int, str] = {
    memory_pb2.MEMORY_STATE_ARCHIVED: "sweep: value below the archive threshold",
    memory_pb2.MEMORY_STATE_ACTIVE: "sweep: value back above the reactivation threshold",
    memory_pb2.MEMORY_STATE_EVICTED: "sweep: value below the eviction threshold for the whole grace period",
}


def _reasons(targets: npt.NDArray[np.uint8]) -> list[str]:
    return [_REASONS.get(int(t), "sweep") for t in targets]
