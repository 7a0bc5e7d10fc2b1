"""Crash harness: SIGKILL a real sidecar at random moments under load, restart it, and check what survived.

Usage (from the repository root)::

    python benchmarks/crash.py --trials 20 [--phases writes,sweep,index_save] [--json out/crash.json]

One data directory lives through every trial. A trial starts ``memevo serve``
on it (with the serve flags of the trial's *phase*), verifies everything the
earlier trials acknowledged, retries the writes that were never acknowledged
with their original request ids, then runs a writer (Remember, RememberBatch
and RememberStream, every call with request ids) plus the phase's own load,
and SIGKILLs the process after a random delay. After the last trial the
sidecar is started once more, verified, the last unacknowledged writes are
retried and verified again, and it is stopped cleanly.

What "verified" means (each failure is listed, the run exits 1 if any):

- every acknowledged write is stored exactly once, with its id, content and
  vector; an unacknowledged one at most once, and exactly once after its retry
  (whose reply must say "replayed" exactly when the first attempt was stored);
- no memory the writers did not send; every state ACTIVE or ARCHIVED (the
  sweep policy never evicts); the change log is gap-free from 1, each memory's
  latest event leads to its stored state and carries its stored sequence;
- GetStats counts per state and kind and its total equal the stored records;
- once the fresh tail is empty the ANN graph holds exactly the live memories
  and each memory's own vector finds it as the nearest match (Recall k=10,
  archived included: the hit with similarity >= 0.999 is the memory itself).

Phases (``--phases``, taken round-robin) are pluggable: a :class:`Phase` is a
name, extra serve flags, an optional setup call and a ``drive`` function that
generates load of its kind until told to stop. ``writes`` adds a second
concurrent writer (group commit under kill); ``sweep`` installs a policy that
archives memories within seconds, sweeps every 50 ms and calls Govern and
Recall in a loop; ``index_save`` saves the ANN index every 20 ms, and the
table counts the kills that left a half-written index file behind. Register
another phase with :func:`register_phase` (a consolidation phase will be).

Restart availability (``--availability 100000,1000000``, instead of the
trials): for each size, a fresh data directory gets that many memories with
random ``--dimension``-d client vectors (no embedder) from a sidecar whose
ANN graph is never saved (the worst case of "the graph is behind": a kill
before the first save), then it is SIGKILLed ``--repeats`` times. Each time:
seconds from spawning ``memevo serve`` to its ready file and to the first
answered Recall, GetStats' index state, a sample of memories found by their
own vectors (the last written and random older ones: every acknowledged write
must be visible), the Recall latency while the rebuild runs, and finally the
time a clean stop (SIGTERM) takes. Before each kill but the last, the running
sidecar takes ``AFTER_WRITES`` more memories and forgets ``AFTER_FORGETS``
(so the next start has changes to catch up after its start-up snapshot, which
the sidecar writes in the background): the next restart must find the new
ones by their own vectors and none of the forgotten ones. The sidecar's log
says how many memories the start read again after its snapshot, the
index's share of the start, and how many of the vectors the graph lacked it
copied from the fresh-tail files and how many it read from RocksDB.

A crash after a write burst (``--burst 100000``, instead of the trials): the
agent's long-lived client (``memevo.client.MemoryClient``) is made on a fresh
store, then BURST_WRITERS streams write that many memories as fast as the
sidecar takes them; right after the last acknowledgement the sidecar is
SIGKILLed and at once started again on the same socket, as a supervisor
would, while the agent's client calls Recall every AGENT_POLL_S from the kill
on. Per burst: memories/s, the start-up snapshots the burst saw and how far the
last durable one was behind, how many memories the restart read again and in
how long, seconds from spawning the new process to its ready file and to the
agent's first answered Recall, and the load average. ``--client-backoff grpc``
gives the client gRPC's own reconnect settings (a client without its fix).

Not a test (``tests/integration/test_crash.py`` runs a few short trials in
CI); nothing here asserts on time, the timings in the table are for reading.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import numpy as np
import numpy.typing as npt

from memevo.client import MemevoError, MemoryClient
from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc, policy_pb2

try:
    from benchmarks import machine as machine_info
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import machine as machine_info

REPO_ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 30.0
VERIFY_TIMEOUT_S = 300.0
DIMENSION = 32
"""Random 32-d vectors are never near-duplicates of each other, so no write is merged into another."""
GET_CHUNK = 1000
SELF_HIT_SIMILARITY = 0.999
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
ABSTRACTION = memory_pb2.MEMORY_KIND_ABSTRACTION
INDEX_TEMP_FILES = ("index.usearch.tmp", "index.meta.json.tmp")

Service = memory_service_pb2_grpc.MemoryServiceStub


# ---- the sidecar process ----------------------------------------------------------------------


@dataclass
class Served:
    """A running ``memevo serve`` process on a unix socket."""

    process: subprocess.Popen[bytes]
    target: str
    run_dir: Path
    log_path: Path

    def kill(self) -> None:
        """SIGKILL: nothing is flushed, as in a crash."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)
        return int(self.process.returncode)

    def log(self) -> str:
        """What the process printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def serve(
    data_dir: Path,
    extra_args: Sequence[str],
    *,
    dimension: int = DIMENSION,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    run_dir: Path | None = None,
) -> Served:
    """Start ``memevo serve`` on ``data_dir`` and a unix socket in ``run_dir`` (default: a fresh folder); return once
    its ready file exists. The same ``run_dir`` again serves on the same address, as a supervisor's restart does."""
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix="memevo-crash-run-"))
    socket_path = run_dir / "memevo.sock"
    ready = run_dir / "ready.json"
    ready.unlink(missing_ok=True)
    log_path = run_dir / "sidecar.log"
    args = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data_dir),
        "--listen", f"unix://{socket_path}", "--embedder", "none", "--dimension", str(dimension),
        "--ready-file", str(ready), "--grace-s", "1", *extra_args,
    ]  # fmt: skip
    with log_path.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + startup_timeout_s
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(f"memevo serve exited with {process.returncode}:\n{log_path.read_text()}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"memevo serve not ready after {startup_timeout_s} s:\n{log_path.read_text()}")
        time.sleep(0.02)
    return Served(process, f"unix://{socket_path}", run_dir, log_path)


def stub(target: str) -> tuple[grpc.Channel, Service]:
    """A channel and the MemoryService stub over it."""
    channel = grpc.insecure_channel(target)
    return channel, memory_service_pb2_grpc.MemoryServiceStub(channel)


# ---- what the writers sent --------------------------------------------------------------------


@dataclass
class Item:
    """One memory a writer sent: unique content, its vector, and the stream's per-item request id."""

    content: str
    vector: bytes
    request_id: str = ""


@dataclass
class Write:
    """One call: its rpc ("unary", "batch" or "stream"), request id, items, and the ids once acknowledged."""

    rpc: str
    request_id: str
    items: list[Item]
    ids: list[int] | None = None
    attempts: int = 1


@dataclass
class Ledger:
    """Every write the harness sent, acknowledged or not. Thread-safe."""

    writes: dict[str, Write] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, write: Write) -> None:
        with self.lock:
            self.writes[write.request_id] = write

    def acknowledge(self, write: Write, ids: Sequence[int]) -> None:
        with self.lock:
            write.ids = list(ids)

    def pending(self) -> list[Write]:
        with self.lock:
            return [w for w in self.writes.values() if w.ids is None]

    def items(self) -> dict[str, tuple[Write, int]]:
        """content -> (its write, position in the write)."""
        with self.lock:
            return {item.content: (w, i) for w in self.writes.values() for i, item in enumerate(w.items)}


def _input(item: Item) -> memory_pb2.MemoryInput:
    return memory_pb2.MemoryInput(content=item.content, vector=item.vector, kind=memory_pb2.MEMORY_KIND_FACT)


def send(service: Service, write: Write) -> tuple[list[int], int]:
    """Send ``write`` (or resend it: same request ids); returns (ids, how many the sidecar replayed)."""
    if write.rpc == "unary":
        one = service.Remember(
            memory_service_pb2.RememberRequest(memory=_input(write.items[0]), request_id=write.request_id),
            timeout=CALL_TIMEOUT_S,
        )
        return [one.result.memory.id], int(one.replayed)
    if write.rpc == "batch":
        many = service.RememberBatch(
            memory_service_pb2.RememberBatchRequest(
                memories=[_input(i) for i in write.items], request_id=write.request_id
            ),
            timeout=CALL_TIMEOUT_S,
        )
        return [r.memory.id for r in many.results], len(write.items) if many.replayed else 0
    stream = service.RememberStream(
        iter(
            [memory_service_pb2.RememberStreamRequest(memory=_input(i), request_id=i.request_id) for i in write.items]
        ),
        timeout=CALL_TIMEOUT_S,
    )
    return list(stream.ids), int(stream.replayed_count)


class Writer:
    """Sends writes with request ids until stopped or until a call fails (the sidecar was killed)."""

    def __init__(self, name: str, service: Service, ledger: Ledger, rng: random.Random, counter: Iterator[int]) -> None:
        self.name = name
        self.service = service
        self.ledger = ledger
        self.rng = rng
        self.counter = counter
        self.acknowledged = 0
        self.failure: tuple[float, str] | None = None
        """(monotonic time, status) of the call that failed."""

    def _next(self) -> Write:
        number = next(self.counter)
        rpc = self.rng.choice(("unary", "unary", "batch", "stream"))
        size = 1 if rpc == "unary" else self.rng.randint(2, 24)
        rows = np.random.default_rng(number).standard_normal((size, DIMENSION)).astype("<f4")
        request_id = f"{self.name}-{number}"
        items = [
            Item(f"crash memory {request_id} item {i}", rows[i].tobytes(), f"{request_id}.{i}" * (rpc == "stream"))
            for i in range(size)
        ]
        return Write(rpc, request_id, items)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            write = self._next()
            self.ledger.add(write)
            try:
                ids, _ = send(self.service, write)
            except grpc.RpcError as error:
                self.failure = (time.monotonic(), str(error.code()))
                return
            self.ledger.acknowledge(write, ids)
            self.acknowledged += len(ids)


# ---- phases -----------------------------------------------------------------------------------


@dataclass
class PhaseContext:
    """What a phase's drive function gets: the sidecar, a stop signal, randomness and a place for notes."""

    service: Service
    stop: threading.Event
    rng: random.Random
    ledger: Ledger
    counter: Iterator[int]
    notes: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Phase:
    """A kind of load the sidecar is killed under.

    ``serve_args`` are extra ``memevo serve`` flags, ``setup`` runs once the
    sidecar is verified and before the load starts, ``drive`` generates load
    until ``ctx.stop`` is set (it must return soon after, and must treat a
    failed call as the kill), and ``after_kill`` may inspect the data
    directory while no process holds it (it returns notes for the table).
    """

    name: str
    serve_args: tuple[str, ...] = ()
    drive: Callable[[PhaseContext], None] = lambda ctx: None
    setup: Callable[[Service], None] = lambda service: None
    after_kill: Callable[[Path], dict[str, int]] = lambda data_dir: {}


PHASES: dict[str, Phase] = {}


def register_phase(phase: Phase) -> Phase:
    """Make ``phase`` selectable with ``--phases`` (and by the CI test)."""
    PHASES[phase.name] = phase
    return phase


def _drive_second_writer(ctx: PhaseContext) -> None:
    Writer("w2", ctx.service, ctx.ledger, random.Random(ctx.rng.random()), ctx.counter).run(ctx.stop)


def archive_fast_policy(service: Service) -> policy_pb2.Policy:
    """The stored policy changed so that unused memories archive within seconds and come back when used.

    Wall-clock time; relevance halves every second; a memory must stay 0.3 s
    in a state; eviction is out of reach (its threshold is far below any value).
    """
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest(), timeout=CALL_TIMEOUT_S).policy
    policy.name = "crash-archive-fast"
    policy.time_mode = policy_pb2.TIME_MODE_WALL_CLOCK
    for kind in policy.kinds:
        kind.decay_half_life_s = 1.0
        kind.min_time_in_state_s = 0.3
        kind.evict_below = -1e9
        kind.evict_grace_s = 1e9
        kind.archive_below = 0.45
        kind.reactivate_above = 0.5
    return policy


FREEZE_SETTLE_S = 1.5
"""After freezing, how long a sweep or consolidation pass already under way gets to finish."""


def freeze_governance(service: Service) -> None:
    """Stop lifecycle moves and policy consolidations while a restart is verified.

    The verifier compares a scan of the records with the change log and GetStats; a tier sweep or a
    consolidation landing between those reads would look like a mismatch. The next phase's setup
    installs its own policy.
    """
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest(), timeout=CALL_TIMEOUT_S).policy
    for kind in policy.kinds:
        kind.min_time_in_state_s = kind.min_time_in_state_turns = 1e12
        kind.evict_grace_s = kind.evict_grace_turns = 1e12
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_WAIT
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy), timeout=CALL_TIMEOUT_S)
    time.sleep(FREEZE_SETTLE_S)


def _setup_sweep(service: Service) -> None:
    service.UpdatePolicy(
        memory_service_pb2.UpdatePolicyRequest(policy=archive_fast_policy(service)), timeout=CALL_TIMEOUT_S
    )


def _drive_sweep(ctx: PhaseContext) -> None:
    """Govern on demand while the scheduled sweeps run, and recall old memories so some come back."""
    known = [item for write in list(ctx.ledger.writes.values()) if write.ids for item in write.items]
    while not ctx.stop.is_set():
        try:
            sweep = ctx.service.Govern(memory_service_pb2.GovernRequest(), timeout=CALL_TIMEOUT_S).sweep
            ctx.notes["transitions"] += sum(t.count for t in sweep.transitions)
            for item in ctx.rng.sample(known, min(len(known), 5)):
                ctx.service.Recall(
                    memory_service_pb2.RecallRequest(query_vector=item.vector, k=3, include_archived=True),
                    timeout=CALL_TIMEOUT_S,
                )
        except grpc.RpcError:
            return
        ctx.stop.wait(0.02)


def _torn_index_files(data_dir: Path) -> dict[str, int]:
    return {"torn_index_save": int(any((data_dir / name).exists() for name in INDEX_TEMP_FILES))}


register_phase(Phase("writes", drive=_drive_second_writer))
register_phase(Phase("sweep", ("--sweep-interval-s", "0.05"), drive=_drive_sweep, setup=_setup_sweep))
register_phase(Phase("index_save", ("--index-save-interval-s", "0.02"), after_kill=_torn_index_files))


def _setup_consolidation(service: Service) -> None:
    """Consolidate the writers' memories (FACTs without a key) by policy, extractively, in groups of 3 or more."""
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest(), timeout=CALL_TIMEOUT_S).policy
    policy.consolidation.kinds[:] = [memory_pb2.MEMORY_KIND_FACT]
    policy.consolidation.min_group_size = 3
    policy.consolidation.similarity = 0.9
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy), timeout=CALL_TIMEOUT_S)


WORDS = ("one", "two", "three", "four", "five")
"""What tells a group's members apart: words, not numbers, which consolidation keeps members apart by (issue 42)."""


def _drive_consolidation(ctx: PhaseContext) -> None:
    """Write groups of near-duplicates (in the ledger, with request ids) and consolidate them with Govern."""
    while not ctx.stop.is_set():
        number = next(ctx.counter)
        rng = np.random.default_rng(number)
        centre = rng.standard_normal(DIMENSION)
        rows = (centre + 0.02 * np.linalg.norm(centre) * rng.standard_normal((5, DIMENSION))).astype("<f4")
        request_id = f"group-{number}"
        write = Write(
            "batch",
            request_id,
            [Item(f"crash group {request_id} item {word}", rows[i].tobytes()) for i, word in enumerate(WORDS)],
        )
        ctx.ledger.add(write)
        try:
            ids, _ = send(ctx.service, write)
            ctx.ledger.acknowledge(write, ids)
            passed = ctx.service.Govern(memory_service_pb2.GovernRequest(), timeout=CALL_TIMEOUT_S).consolidation
            ctx.notes["consolidations"] += passed.consolidated_count
        except grpc.RpcError:
            return


register_phase(
    Phase("consolidation", ("--sweep-interval-s", "0.05"), drive=_drive_consolidation, setup=_setup_consolidation)
)


# ---- verification -----------------------------------------------------------------------------


@dataclass
class Verified:
    """What one verification saw."""

    memories: int
    acknowledged: int
    unacknowledged_present: int
    unacknowledged_absent: int
    by_state: dict[str, int]
    events: int
    self_hits: int
    probed: int
    """Memories looked up by their own vector."""
    problems: list[str]
    present: set[str]
    """Contents stored now (to check retries' replayed flags)."""
    abstractions: int = 0
    """ABSTRACTION memories written by consolidation (not by a writer)."""


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = VERIFY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def scan(service: Service, total: int) -> list[memory_pb2.Memory]:
    """Every stored memory (ids are dense: read upward until a whole chunk is missing and all are found)."""
    records: list[memory_pb2.Memory] = []
    start = 1
    while True:
        ids = list(range(start, start + GET_CHUNK))
        found = service.Get(memory_service_pb2.GetRequest(ids=ids, include_vectors=True), timeout=CALL_TIMEOUT_S)
        records.extend(found.memories)
        if not found.memories and len(records) >= total:
            return records
        start += GET_CHUNK


def change_log(service: Service, last_sequence: int) -> list[Any]:
    """Every change-log event from sequence 1 to ``last_sequence``."""
    events: list[Any] = []
    if last_sequence == 0:
        return events
    call = service.Watch(memory_service_pb2.WatchRequest(after_sequence=0), timeout=VERIFY_TIMEOUT_S)
    try:
        for response in call:
            events.append(response.event)
            if response.event.sequence >= last_sequence:
                break
    finally:
        cast(Any, call).cancel()  # grpc's call objects are untyped
    return events


def verify(
    service: Service, ledger: Ledger, *, check_ann: bool = True, old_below: int = 0, old_sample: int = 0
) -> Verified:
    """Check the stored state against the ledger (see the module docstring); list every problem.

    The own-vector check covers every memory with an id of at least ``old_below``
    and, when ``old_sample`` is positive, only that many random older ones.
    """
    problems: list[str] = []
    _wait(
        lambda: (
            service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=CALL_TIMEOUT_S).index.fresh_tail_count == 0
        ),
        "the index builder to empty the fresh tail",
    )
    stats = service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=CALL_TIMEOUT_S)
    records = scan(service, stats.total_count)
    sent = ledger.items()
    by_content: dict[str, list[memory_pb2.Memory]] = defaultdict(list)
    by_id = {r.id: r for r in records}
    for record in records:
        if record.kind == ABSTRACTION:
            # Written by consolidation, not by a writer: its members must all be absorbed into it, or none.
            for member_id in record.members:
                member = by_id.get(member_id)
                if member is None or member.state != CONSOLIDATED or member.consolidated_into != record.id:
                    problems.append(f"abstraction {record.id} lists member {member_id}, which is not absorbed into it")
            continue
        by_content[record.content].append(record)
        if record.content not in sent:
            problems.append(f"memory {record.id} ({record.content!r}) was never sent")
        if record.state == CONSOLIDATED:
            owner = by_id.get(record.consolidated_into)
            if owner is None or owner.kind != ABSTRACTION or record.id not in owner.members:
                problems.append(
                    f"memory {record.id} is CONSOLIDATED into {record.consolidated_into}, which does not list it"
                )
        elif record.state not in (ACTIVE, ARCHIVED):
            problems.append(f"memory {record.id} is {memory_pb2.MemoryState.Name(record.state)}")
    for content, found in by_content.items():
        if len(found) > 1:
            problems.append(f"{content!r} is stored {len(found)} times: ids {[r.id for r in found]}")
    acknowledged = present = absent = 0
    for content, (write, position) in sent.items():
        found = by_content.get(content, [])
        if write.ids is None:
            present += bool(found)
            absent += not found
            continue
        acknowledged += 1
        if not found:
            problems.append(f"acknowledged {content!r} (id {write.ids[position]}) is lost")
            continue
        if found[0].id != write.ids[position]:
            problems.append(f"{content!r} was acknowledged as id {write.ids[position]}, stored as {found[0].id}")
        if found[0].vector != write.items[position].vector:
            problems.append(f"{content!r} (id {found[0].id}) has another vector than was sent")
    # GetStats against the records.
    computed = Counter((r.state, r.kind) for r in records)
    reported = Counter({(c.state, c.kind): c.count for c in stats.counts})
    if computed != reported:
        problems.append(f"GetStats counts {dict(reported)} differ from the stored records {dict(computed)}")
    if stats.total_count != len(records):
        problems.append(f"GetStats total_count {stats.total_count} but {len(records)} memories are stored")
    # The change log against the records.
    events = change_log(service, stats.last_sequence)
    sequences = [e.sequence for e in events]
    if sequences != list(range(1, stats.last_sequence + 1)):
        problems.append(f"change log is not gap-free 1..{stats.last_sequence} ({len(sequences)} events read)")
    latest: dict[int, Any] = {}
    for event in events:
        if event.memory_id:
            latest[event.memory_id] = event
    for record in records:
        event = latest.get(record.id)
        if event is None:
            problems.append(f"memory {record.id} has no change-log event")
        elif event.to_state != record.state or event.sequence != record.sequence:
            problems.append(
                f"memory {record.id} is {memory_pb2.MemoryState.Name(record.state)} at sequence {record.sequence}, "
                f"its latest event says {memory_pb2.MemoryState.Name(event.to_state)} at {event.sequence}"
            )
    stored_ids = {r.id for r in records}
    for memory_id, event in latest.items():
        if memory_id not in stored_ids and event.to_state != memory_pb2.MEMORY_STATE_EVICTED:
            problems.append(f"memory {memory_id} has events up to {event.sequence} but is not stored")
    # The ANN graph against RocksDB.
    self_hits = 0
    probes: list[memory_pb2.Memory] = []
    if stats.index.indexed_count != len(records):
        problems.append(f"the ANN graph holds {stats.index.indexed_count} vectors, RocksDB {len(records)} memories")
    if check_ann:
        older = [r for r in records if r.id < old_below]
        probes = [r for r in records if r.id >= old_below]
        probes += random.Random(len(records)).sample(older, min(len(older), old_sample)) if old_sample else older
        for record in probes:
            # History mode: consolidated members are found only there, and a consolidation may absorb a
            # memory between the scan above and this probe.
            hits = service.Recall(
                memory_service_pb2.RecallRequest(
                    query_vector=record.vector,
                    k=10,
                    include_archived=True,
                    mode=memory_service_pb2.RECALL_MODE_HISTORY,
                ),
                timeout=CALL_TIMEOUT_S,
            ).memories
            best = max(hits, key=lambda h: h.similarity, default=None)
            if best is None or best.memory.id != record.id or best.similarity < SELF_HIT_SIMILARITY:
                got = "nothing" if best is None else f"{best.memory.id} at {best.similarity:.4f}"
                problems.append(f"memory {record.id}'s own vector finds {got}")
            else:
                self_hits += 1
    return Verified(
        memories=len(records),
        acknowledged=acknowledged,
        unacknowledged_present=present,
        unacknowledged_absent=absent,
        by_state={memory_pb2.MemoryState.Name(s): n for s, n in sorted(Counter(r.state for r in records).items())},
        events=len(events),
        self_hits=self_hits,
        probed=len(probes),
        problems=problems,
        present=set(by_content),
        abstractions=sum(r.kind == ABSTRACTION for r in records),
    )


def retry_pending(service: Service, ledger: Ledger, present: set[str]) -> tuple[int, int, list[str]]:
    """Resend every unacknowledged write with its request ids; returns (items retried, replayed, problems).

    A retry must replay exactly the items the killed call had stored, keep their ids and store the rest.
    """
    retried = replayed = 0
    problems: list[str] = []
    for write in ledger.pending():
        stored_before = [item.content in present for item in write.items]
        write.attempts += 1
        ids, replay_count = send(service, write)
        ledger.acknowledge(write, ids)
        retried += len(write.items)
        replayed += replay_count
        if write.rpc == "stream":
            expected = sum(stored_before)
        else:  # unary and batch calls are atomic: all of it was stored, or nothing
            if any(stored_before) and not all(stored_before):
                problems.append(f"atomic {write.rpc} {write.request_id} was stored in part before its retry")
            expected = len(write.items) if all(stored_before) else 0
        if replay_count != expected:
            problems.append(f"retry of {write.rpc} {write.request_id} replayed {replay_count}, expected {expected}")
    return retried, replayed, problems


# ---- trials -----------------------------------------------------------------------------------


@dataclass
class TrialResult:
    """One kill under a phase, and what the restart after it found."""

    trial: int
    phase: str
    kill_after_s: float = 0.0
    written: int = 0
    """Memories acknowledged while the load ran."""
    restart_s: float = 0.0
    """From starting the process to its ready file (open, index load or rebuild)."""
    verify_s: float = 0.0
    memories: int = 0
    acknowledged: int = 0
    unacknowledged_present: int = 0
    unacknowledged_absent: int = 0
    retried: int = 0
    replayed: int = 0
    self_hits: int = 0
    probed: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    abstractions: int = 0

    def record(self, seen: Verified, restart_s: float, verify_s: float) -> None:
        """Fill in what the restart after this trial's kill found."""
        self.restart_s, self.verify_s = round(restart_s, 3), round(verify_s, 3)
        self.memories, self.acknowledged = seen.memories, seen.acknowledged
        self.self_hits, self.probed = seen.self_hits, seen.probed
        self.unacknowledged_present = seen.unacknowledged_present
        self.unacknowledged_absent = seen.unacknowledged_absent
        self.by_state = seen.by_state
        self.abstractions = seen.abstractions
        self.problems += seen.problems


def counter_from(start: int) -> Iterator[int]:
    """A counter shared by the writers (itertools.count's next() is atomic under the GIL)."""
    import itertools

    return itertools.count(start)


def _load(
    phase: Phase, service: Service, ledger: Ledger, counter: Iterator[int], rng: random.Random, row: TrialResult
) -> Callable[[float], None]:
    """Start the writer and the phase's drive; returns the function that stops them (call it after the kill)."""
    stop = threading.Event()
    writer = Writer(f"t{row.trial}", service, ledger, random.Random(rng.random()), counter)
    ctx = PhaseContext(service, stop, random.Random(rng.random()), ledger, counter)
    threads = [
        threading.Thread(target=writer.run, args=(stop,), name="crash-writer"),
        threading.Thread(target=phase.drive, args=(ctx,), name=f"crash-{phase.name}"),
    ]
    for thread in threads:
        thread.start()

    def finish(killed_at: float) -> None:
        stop.set()
        for thread in threads:
            thread.join(timeout=CALL_TIMEOUT_S * 2)
        if writer.failure is not None and writer.failure[0] < killed_at:
            row.problems.append(f"a write failed before the kill: {writer.failure[1]}")
        row.notes.update(ctx.notes)
        row.written = writer.acknowledged

    return finish


def run_trials(
    data_dir: Path,
    *,
    trials: int,
    phases: Sequence[str],
    seed: int = 0,
    kill_after_s: tuple[float, float] = (0.3, 2.0),
    check_ann: bool = True,
    old_sample: int = 500,
    log: Callable[[str], None] = lambda line: None,
) -> list[TrialResult]:
    """Run ``trials`` kill-restart cycles on ``data_dir`` plus a final clean restart; one row per kill.

    Row ``i`` is the kill under its phase and the verification at the next
    start (with the retries of its unacknowledged writes). The last row, phase
    "final", is the verification after those retries, then a clean SIGTERM stop.
    Each restart checks the own-vector hit of every memory new since the last
    check and of ``old_sample`` older ones (0 = all); the final one checks all.
    """
    rng = random.Random(seed)
    ledger = Ledger()
    counter = counter_from(1)
    results: list[TrialResult] = []
    previous: TrialResult | None = None
    checked_below = 0
    for trial in range(trials + 1):
        final = trial == trials
        phase = PHASES["writes"] if final else PHASES[phases[trial % len(phases)]]
        row = TrialResult(trial, "final" if final else phase.name)
        started = time.monotonic()
        served = serve(data_dir, phase.serve_args)
        restart_s = time.monotonic() - started
        channel, service = stub(served.target)
        try:
            checked = time.monotonic()
            freeze_governance(service)
            seen = verify(service, ledger, check_ann=check_ann, old_below=checked_below, old_sample=old_sample)
            checked_below = seen.memories + 1
            retried, replayed, retry_problems = retry_pending(service, ledger, seen.present)
            if previous is not None:
                previous.record(seen, restart_s, time.monotonic() - checked)
                previous.retried, previous.replayed = retried, replayed
                previous.problems += retry_problems
                _log_row(previous, log)
            if final:
                checked = time.monotonic()
                again = verify(service, ledger, check_ann=check_ann, old_sample=0)
                row.record(again, restart_s, time.monotonic() - checked)
                code = served.stop()
                if code != 0:
                    row.problems.append(f"clean stop exited with {code}")
                _log_row(row, log)
            else:
                phase.setup(service)
                finish = _load(phase, service, ledger, counter, rng, row)
                row.kill_after_s = round(rng.uniform(*kill_after_s), 3)
                time.sleep(row.kill_after_s)
                killed_at = time.monotonic()
                served.kill()
                finish(killed_at)
                row.notes.update(phase.after_kill(data_dir))
        except Exception:
            served.kill()
            log(served.log()[-4000:])
            raise
        finally:
            channel.close()
            shutil.rmtree(served.run_dir, ignore_errors=True)
        results.append(row)
        previous = row
    return results


def _log_row(row: TrialResult, log: Callable[[str], None]) -> None:
    log(
        f"trial {row.trial:3d} {row.phase:10s} killed after {row.kill_after_s:5.2f} s, wrote {row.written:5d}; "
        f"restart {row.restart_s:5.2f} s, verify {row.verify_s:5.1f} s: {row.memories} memories "
        f"{row.by_state}, unacked stored/not {row.unacknowledged_present}/{row.unacknowledged_absent}, "
        f"retried {row.retried} (replayed {row.replayed}), self-hits {row.self_hits}/{row.probed}, {row.notes}, "
        f"problems {len(row.problems)}"
    )
    for problem in row.problems[:20]:
        log(f"    PROBLEM: {problem}")


# ---- the command ------------------------------------------------------------------------------


# ---- restart availability ----------------------------------------------------------------------

AVAILABILITY_BATCH = 1_000
AVAILABILITY_PROBES = 200
"""Memories checked by own vector after each restart: the last written and as many random older ones."""
LATENCY_RECALLS = 30
AFTER_WRITES = 2_000
"""Memories written after each restart's measurements, before the next kill."""
AFTER_FORGETS = 100
"""Memories forgotten (deleted) then: the next restart must not show them."""
PROBE_K = 5
"""Hits a probe looks at: found when its own id is among those at the top similarity (>= 0.999)."""
AVAILABILITY_STARTUP_TIMEOUT_S = 1_800.0
"""A crashed 1M store parses every record before serving: minutes on a loaded 2-core machine."""
FILLED_MARKER = "availability-filled.json"
"""Written into a ``--data`` directory once filled (size, dimension, ids), so that a later run reuses it."""


@dataclass
class Availability:
    """One SIGKILL and restart of a data directory whose ANN graph is behind."""

    memories: int
    ready_s: float
    first_recall_s: float
    state: str
    rebuild_remaining: int
    rebuild_total: int
    probed: int
    found: int
    recall_ms_median: float
    recall_ms_p90: float
    remaining_after: int
    """Rebuild vectors still missing after the latency recalls (> 0: they were measured during the rebuild)."""
    caught_up: int
    """Memories the start read again after its start-up snapshot (-1: no snapshot used, every record scanned)."""
    index_s: float
    """The index's share of the start (its log line), seconds; NaN when not logged."""
    forgotten_back: int
    """Memories forgotten before the kill that the restart still showed (must be 0)."""
    mapped: int = -1
    """Of the vectors the graph lacked, those the start copied from the fresh-tail files (-1: not logged)."""
    read: int = -1
    """Those it read from RocksDB instead (-1: not logged)."""


def _fill(
    service: Service,
    count: int,
    dimension: int,
    rng: np.random.Generator,
    log: Callable[[str], None],
    prefix: str = "a",
) -> npt.NDArray[np.int64]:
    """Write ``count`` memories with random vectors (texts ``prefix`` + a number); their ids, in write order."""
    ids = np.zeros(count, dtype=np.int64)
    started = time.monotonic()
    for start in range(0, count, AVAILABILITY_BATCH):
        rows = rng.standard_normal((min(AVAILABILITY_BATCH, count - start), dimension)).astype("<f4")
        request = memory_service_pb2.RememberBatchRequest(
            memories=[
                memory_pb2.MemoryInput(content=f"{prefix}{start + i}", vector=row.tobytes())
                for i, row in enumerate(rows)
            ]
        )
        reply = service.RememberBatch(request, timeout=120)
        ids[start : start + rows.shape[0]] = [result.memory.id for result in reply.results]
        if (start // AVAILABILITY_BATCH) % 50 == 49:
            log(f"  written {start + rows.shape[0]} of {count} ({time.monotonic() - started:.0f} s)")
    return ids


def _first_recall(target: str, spawned: float, query: bytes) -> float:
    """Seconds from ``spawned`` until a Recall is answered (the call waits for the socket to accept)."""
    channel, service = stub(target)
    try:
        while True:
            try:
                service.Recall(
                    memory_service_pb2.RecallRequest(query_vector=query, k=10), timeout=60, wait_for_ready=True
                )
                return time.monotonic() - spawned
            except grpc.RpcError:
                time.sleep(0.01)
    finally:
        channel.close()


def restart_availability(
    count: int, *, dimension: int, repeats: int, seed: int, log: Callable[[str], None], keep: Path | None = None
) -> tuple[list[Availability], float]:
    """Fill a data directory with ``count`` memories, its graph never saved, then SIGKILL and restart it
    ``repeats`` times; returns the restarts and the seconds of the final clean stop.

    ``keep``: a directory to fill (or reuse, when a previous run filled it with the same size and dimension)
    and keep; by default a temporary one, removed at the end.
    """
    rng = np.random.default_rng(seed)
    data_dir = keep / f"n{count}-d{dimension}" if keep is not None else Path(tempfile.mkdtemp(prefix="memevo-avail-"))
    marker = data_dir / FILLED_MARKER
    rows: list[Availability] = []
    try:
        if marker.exists():
            written = np.asarray(json.loads(marker.read_text())["ids"], dtype=np.int64)
            log(f"reusing {data_dir} ({written.size} memories)")
        else:
            # No save during the fill, the builder nearly idle (it would take a core from the writes), and the
            # tail limit above the count so that writes never wait for it.
            no_save = ["--index-save-interval-s", "1e9", "--index-build-rate", "1", "--max-fresh-tail", str(2 * count)]
            data_dir.mkdir(parents=True, exist_ok=True)
            served = serve(data_dir, no_save, dimension=dimension)
            channel, service = stub(served.target)
            log(f"filling {count} memories ({dimension}-d)")
            written = _fill(service, count, dimension, rng, log)
            channel.close()
            served.kill()
            if keep is not None:
                marker.write_text(json.dumps({"count": count, "dimension": dimension, "ids": written.tolist()}))
        forgotten: list[int] = []
        for repeat in range(repeats):
            live = written.size
            probe_ids = np.unique(
                np.concatenate([np.arange(max(live - AVAILABILITY_PROBES, 0), live), rng.integers(0, live, 200)])
            )
            spawned = time.monotonic()
            served = serve(data_dir, [], dimension=dimension, startup_timeout_s=AVAILABILITY_STARTUP_TIMEOUT_S)
            ready_s = time.monotonic() - spawned
            first_s = _first_recall(served.target, spawned, rng.standard_normal(dimension).astype("<f4").tobytes())
            channel, service = stub(served.target)
            index = service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=CALL_TIMEOUT_S).index
            found = 0
            for memory_id in written[probe_ids].tolist():
                record = service.Get(
                    memory_service_pb2.GetRequest(ids=[memory_id], include_vectors=True), timeout=CALL_TIMEOUT_S
                )
                vector = record.memories[0].vector
                reply = service.Recall(
                    memory_service_pb2.RecallRequest(query_vector=vector, k=PROBE_K), timeout=CALL_TIMEOUT_S
                )
                # Among the hits as similar as itself (a reused store may hold an exact copy of a vector).
                found += int(
                    any(m.memory.id == memory_id and m.similarity >= SELF_HIT_SIMILARITY for m in reply.memories)
                    and reply.memories[0].similarity >= SELF_HIT_SIMILARITY
                )
            latencies: list[float] = []
            for _ in range(LATENCY_RECALLS):
                query = rng.standard_normal(dimension).astype("<f4").tobytes()
                started = time.perf_counter()
                service.Recall(memory_service_pb2.RecallRequest(query_vector=query, k=10), timeout=CALL_TIMEOUT_S)
                latencies.append(1000 * (time.perf_counter() - started))
            after = service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=CALL_TIMEOUT_S).index
            back = (
                service.Get(memory_service_pb2.GetRequest(ids=forgotten), timeout=CALL_TIMEOUT_S).memories
                if forgotten
                else []
            )
            text = served.log()
            restored = re.search(r"(\d+) memories changed after it read again", text)
            index_line = re.search(r"index ready to serve in ([\d.]+) s", text)
            sources = re.search(r"(\d+) of them mapped from the fresh-tail files, (\d+) read from RocksDB", text)
            row = Availability(
                memories=count,
                ready_s=ready_s,
                first_recall_s=first_s,
                state=memory_service_pb2.IndexState.Name(index.state),
                rebuild_remaining=int(index.rebuild_remaining),
                rebuild_total=int(index.rebuild_total),
                probed=int(probe_ids.size),
                found=found,
                recall_ms_median=float(np.median(latencies)),
                recall_ms_p90=float(np.percentile(latencies, 90)),
                remaining_after=int(after.rebuild_remaining),
                caught_up=int(restored.group(1)) if restored else -1,
                index_s=float(index_line.group(1)) if index_line else math.nan,
                forgotten_back=len(back),
                mapped=int(sources.group(1)) if sources else -1,
                read=int(sources.group(2)) if sources else -1,
            )
            rows.append(row)
            log(f"  restart {repeat + 1}: {row}")
            if repeat < repeats - 1:
                # Changes after the start-up snapshot, acknowledged, then the kill: the next start catches up.
                # Vectors never drawn before in this directory, also when it is reused by a later run.
                fresh_rng = np.random.default_rng((seed, int(written.size), repeat))
                fresh = _fill(service, AFTER_WRITES, dimension, fresh_rng, log, prefix=f"after-{time.time_ns()}-")
                gone = [
                    int(i)
                    for i in rng.choice(written[: written.size - AVAILABILITY_PROBES], AFTER_FORGETS, replace=False)
                ]
                service.Forget(
                    memory_service_pb2.ForgetRequest(ids=gone, reason="availability"), timeout=CALL_TIMEOUT_S
                )
                forgotten += gone
                written = np.concatenate([written[~np.isin(written, gone)], fresh])
                if keep is not None:
                    marker.write_text(json.dumps({"count": count, "dimension": dimension, "ids": written.tolist()}))
                channel.close()
                served.kill()
            else:
                channel.close()
        stop_started = time.monotonic()
        code = served.stop()
        stop_s = time.monotonic() - stop_started
        log(f"  clean stop: {stop_s:.2f} s (exit {code})")
        return rows, stop_s
    finally:
        if keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)


def availability_table(results: dict[int, tuple[list[Availability], float]]) -> str:
    """Medians per size (Markdown), and every repeat's first-recall time."""
    lines = [
        "| memories | restarts | ready s (median) | first Recall s (median; each) | state at first Recall "
        "| found by own vector / probed | forgotten shown | read again after the snapshot (each) "
        "| index share s (each) | missing vectors mapped / read from RocksDB (each) "
        "| Recall ms (median, p90; rebuild left after) | clean stop s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for count, (rows, stop_s) in results.items():
        firsts = ", ".join(f"{r.first_recall_s:.1f}" for r in rows)
        states = ", ".join(f"{r.state} {r.rebuild_remaining}/{r.rebuild_total}" for r in rows)
        lines.append(
            f"| {count:,} | {len(rows)} | {float(np.median([r.ready_s for r in rows])):.1f} "
            f"| {float(np.median([r.first_recall_s for r in rows])):.1f} ({firsts}) | {states} "
            f"| {sum(r.found for r in rows)} / {sum(r.probed for r in rows)} "
            f"| {sum(r.forgotten_back for r in rows)} "
            f"| {', '.join('scan' if r.caught_up < 0 else str(r.caught_up) for r in rows)} "
            f"| {', '.join(f'{r.index_s:.1f}' for r in rows)} "
            f"| {', '.join('n/a' if r.mapped < 0 else f'{r.mapped:,} / {r.read:,}' for r in rows)} "
            f"| {float(np.median([r.recall_ms_median for r in rows])):.1f}, "
            f"{float(np.median([r.recall_ms_p90 for r in rows])):.1f}; "
            f"{', '.join(str(r.remaining_after) for r in rows)} | {stop_s:.1f} |"
        )
    return "\n".join(lines)


# ---- a crash right after a write burst, seen from the agent's long-lived client ------------------------------

BURST_WRITERS = 2
"""Concurrent RememberStream writers of a burst."""
BURST_STREAM_ITEMS = 5_000
"""Items per RememberStream call of a burst (each commits as it goes; a call is one unit of acknowledgement)."""
BURST_MESSAGE_ITEMS = 64
"""Items per stream message, as the Python client groups them."""
STARTUP_LOG_LINES = 20
"""Lines of the restart's log a burst's row keeps."""
AGENT_POLL_S = 0.05
"""How often the agent's long-lived client calls Recall while the sidecar is away."""
GRPC_DEFAULT_BACKOFF = (
    ("grpc.initial_reconnect_backoff_ms", 1_000),
    ("grpc.max_reconnect_backoff_ms", 120_000),
    ("grpc.use_local_subchannel_pool", 0),
)
"""gRPC's own reconnect settings, which the client overrides: ``--client-backoff grpc`` measures a client without
its fix."""


@dataclass
class Burst:
    """One write burst at full speed, a SIGKILL right after its last acknowledgement, and the restart."""

    memories: int
    written_per_s: float
    """Acknowledged memories per second during the burst."""
    last_sequence: int
    """The change log's last sequence when the sidecar was killed."""
    snapshot_sequence: int
    """The sequence of the newest start-up snapshot written before the kill (0: none)."""
    snapshots: int
    """Start-up snapshots the sidecar wrote during the burst."""
    caught_up: int
    """Memories the restart read again after its snapshot (-1: no snapshot, every record scanned)."""
    restore_s: float
    """Seconds the restart spent loading the snapshot and reading those again (its log line; NaN: not logged)."""
    ready_s: float
    """Seconds from spawning the new process to its ready file."""
    first_answer_s: float
    """Seconds from spawning the new process to the first Recall the agent's long-lived client got answered."""
    failed_calls: int
    """Recalls of that client that failed between the kill and the first answer."""
    load_average: tuple[float, float, float]
    startup_log: list[str] = field(default_factory=list)
    """The restart's log lines up to its ready file (where its time went)."""


class _AgentLoop(threading.Thread):
    """The agent's long-lived client calling Recall every AGENT_POLL_S until one is answered."""

    def __init__(self, client: MemoryClient, query: npt.NDArray[np.float32]) -> None:
        super().__init__(name="agent")
        self._client = client
        self._query = query
        self.failed = 0
        """Calls that failed before the first answer."""
        self.answered_at = math.nan
        """``time.monotonic()`` of the first answer."""

    def run(self) -> None:
        while True:
            try:
                self._client.recall(vector=self._query, k=1, timeout_s=CALL_TIMEOUT_S)
                self.answered_at = time.monotonic()
                return
            except MemevoError:
                self.failed += 1
                time.sleep(AGENT_POLL_S)


def _burst_requests(
    items: int, dimension: int, rng: np.random.Generator, prefix: str
) -> Iterator[memory_service_pb2.RememberStreamRequest]:
    for start in range(0, items, BURST_MESSAGE_ITEMS):
        rows = rng.standard_normal((min(BURST_MESSAGE_ITEMS, items - start), dimension)).astype("<f4")
        yield memory_service_pb2.RememberStreamRequest(
            items=[
                memory_service_pb2.RememberStreamItem(
                    memory=memory_pb2.MemoryInput(content=f"{prefix}{start + i}", vector=row.tobytes())
                )
                for i, row in enumerate(rows)
            ]
        )


def _burst(target: str, count: int, dimension: int, seed: int) -> float:
    """Write ``count`` memories with BURST_WRITERS concurrent streams as fast as the sidecar takes them; seconds."""
    share = -(-count // BURST_WRITERS)

    def writer(number: int) -> None:
        channel, service = stub(target)
        rng = np.random.default_rng((seed, number))
        try:
            mine = min(share, count - number * share)
            for start in range(0, mine, BURST_STREAM_ITEMS):
                items = min(BURST_STREAM_ITEMS, mine - start)
                service.RememberStream(
                    _burst_requests(items, dimension, rng, f"burst-{seed}-{number}-{start}-"), timeout=600
                )
        finally:
            channel.close()

    started = time.monotonic()
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(BURST_WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started


def crash_after_burst(
    count: int,
    *,
    dimension: int,
    repeats: int,
    seed: int,
    log: Callable[[str], None],
    client_options: Sequence[tuple[str, Any]] = (),
) -> list[Burst]:
    """``repeats`` times: a fresh store takes ``count`` memories in a burst at full speed, is SIGKILLed as soon as
    the last one is acknowledged and restarted at once on the same socket (as a supervisor would), while the agent's
    long-lived client (:class:`memevo.client.MemoryClient`, made before the burst) calls Recall every
    AGENT_POLL_S. Measures the snapshot's lag behind the burst and the seconds until that client is answered."""
    rows: list[Burst] = []
    # The fresh tail's bound above the burst: writes never wait for the graph (issue 41 item 7 is that wait).
    serve_args = ("--max-fresh-tail", str(max(2 * count, 200_000)))
    for repeat in range(repeats):
        data_dir = Path(tempfile.mkdtemp(prefix="memevo-burst-"))
        run_dir = Path(tempfile.mkdtemp(prefix="memevo-burst-run-"))
        try:
            served = serve(data_dir, serve_args, dimension=dimension, run_dir=run_dir)
            query = np.ones(dimension, dtype=np.float32)
            with MemoryClient(served.target, options=client_options, timeout_s=CALL_TIMEOUT_S) as agent:
                agent.recall(vector=query, k=1)
                took_s = _burst(served.target, count, dimension, seed + repeat)
                last_sequence = agent.stats().last_sequence
                served.kill()
                text = served.log()
                # Durable ones only: the line "writes paused" comes before the file is written, which a kill can stop.
                snapshots = [int(m) for m in re.findall(r"start-up snapshot of sequence (\d+) written in", text)]
                offset = len(text)
                # The agent keeps calling from the kill on, as an agent loop would: its failures are what grow
                # gRPC's reconnect backoff.
                polling = _AgentLoop(agent, query)
                polling.start()
                spawned = time.monotonic()
                restarted = serve(
                    data_dir, serve_args, dimension=dimension, run_dir=run_dir,
                    startup_timeout_s=AVAILABILITY_STARTUP_TIMEOUT_S,
                )  # fmt: skip
                ready_s = time.monotonic() - spawned
                polling.join()
                first_s = polling.answered_at - spawned
            startup = restarted.log()[offset:]
            restored = re.search(r"(\d+) memories changed after it read again \(sequence \d+\), in ([\d.]+) s", startup)
            row = Burst(
                memories=count,
                written_per_s=count / took_s,
                last_sequence=last_sequence,
                snapshot_sequence=snapshots[-1] if snapshots else 0,
                snapshots=len(snapshots),
                caught_up=int(restored.group(1)) if restored else -1,
                restore_s=float(restored.group(2)) if restored else math.nan,
                ready_s=ready_s,
                first_answer_s=first_s,
                failed_calls=polling.failed,
                load_average=cast(tuple[float, float, float], tuple(round(x, 2) for x in os.getloadavg())),
                startup_log=startup.splitlines()[:STARTUP_LOG_LINES],
            )
            rows.append(row)
            log(f"  burst {repeat + 1}: {row}")
            restarted.stop()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
            shutil.rmtree(run_dir, ignore_errors=True)
    return rows


def burst_table(results: dict[int, list[Burst]]) -> str:
    """Medians per size (Markdown) and each repeat's figures."""
    lines = [
        "| memories | bursts | written/s (median) | snapshots in the burst (each) | snapshot behind at the kill (each) "
        "| read again at restart, s (each) "
        "| ready s (median; each) | first answer to the long-lived client s (median; each) | calls failed (each) "
        "| load (1 min, each) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for count, rows in results.items():
        lines.append(
            f"| {count:,} | {len(rows)} | {float(np.median([r.written_per_s for r in rows])):,.0f} "
            f"| {', '.join(str(r.snapshots) for r in rows)} "
            f"| {', '.join(f'{r.last_sequence - r.snapshot_sequence:,}' for r in rows)} "
            f"| {', '.join('scan' if r.caught_up < 0 else f'{r.caught_up:,} in {r.restore_s:.1f}' for r in rows)} "
            f"| {float(np.median([r.ready_s for r in rows])):.1f} ({', '.join(f'{r.ready_s:.1f}' for r in rows)}) "
            f"| {float(np.median([r.first_answer_s for r in rows])):.1f} "
            f"({', '.join(f'{r.first_answer_s:.1f}' for r in rows)}) "
            f"| {', '.join(str(r.failed_calls) for r in rows)} "
            f"| {', '.join(f'{r.load_average[0]:.1f}' for r in rows)} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """CPU, cores, memory, versions, revision and load average, for the record."""
    return machine_info.machine(("grpcio", "protobuf", "rocksdict", "usearch", "numpy"))


def table(results: Sequence[TrialResult]) -> str:
    """The per-phase summary table (Markdown): kills under each phase and what the restarts after them found."""
    lines = [
        "| phase killed | kills | acked writes checked (last restart) | unacked stored / not stored | "
        "retried (replayed) | own vector finds it / probed | restart s (median) | verify s (median) "
        "| notes | problems |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_phase: dict[str, list[TrialResult]] = defaultdict(list)
    for row in results:
        by_phase[row.phase].append(row)
    for phase, rows in by_phase.items():
        notes: Counter[str] = Counter()
        for row in rows:
            notes.update(row.notes)
        lines.append(
            f"| {phase} | {0 if phase == 'final' else len(rows)} | {rows[-1].acknowledged} "
            f"| {sum(r.unacknowledged_present for r in rows)} / {sum(r.unacknowledged_absent for r in rows)} "
            f"| {sum(r.retried for r in rows)} ({sum(r.replayed for r in rows)}) "
            f"| {sum(r.self_hits for r in rows)} / {sum(r.probed for r in rows)} "
            f"| {float(np.median([r.restart_s for r in rows])):.2f} "
            f"| {float(np.median([r.verify_s for r in rows])):.1f} "
            f"| {', '.join(f'{k} {v}' for k, v in sorted(notes.items())) or '-'} "
            f"| {sum(len(r.problems) for r in rows)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trials, print the table, optionally write JSON; exit 1 if any problem was found."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="kill-restart cycles (default: %(default)s)")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="comma-separated phases, taken round-robin (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-kill-s", type=float, default=0.3, help="earliest kill after the load starts")
    parser.add_argument("--max-kill-s", type=float, default=2.0, help="latest kill after the load starts")
    parser.add_argument("--no-ann", action="store_true", help="skip the per-memory self-hit check")
    parser.add_argument(
        "--old-sample",
        type=int,
        default=500,
        help="older memories re-checked by own vector at each restart; 0 = all (default: %(default)s)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="data directory (default: a temporary one); with --availability, a folder whose filled stores are "
        "kept and reused",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument(
        "--availability",
        default="",
        help="comma-separated store sizes: measure restart availability after SIGKILL instead of the trials",
    )
    parser.add_argument("--repeats", type=int, default=3, help="SIGKILLs per size with --availability")
    parser.add_argument("--dimension", type=int, default=384, help="vector dimension with --availability and --burst")
    parser.add_argument(
        "--burst",
        default="",
        help="comma-separated store sizes: a write burst of that many memories at full speed, a SIGKILL right after "
        "it and an immediate restart, timed from the agent's long-lived client, instead of the trials",
    )
    parser.add_argument(
        "--client-backoff",
        choices=("memevo", "grpc"),
        default="memevo",
        help="with --burst: the client's reconnect settings, or gRPC's own (a client without the fix)",
    )
    args = parser.parse_args(argv)
    if args.availability:
        return _main_availability(args, argv)
    if args.burst:
        return _main_burst(args, argv)
    phases = [p for p in args.phases.split(",") if p]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phases {unknown}; known: {', '.join(PHASES)}")
    data_dir = args.data or Path(tempfile.mkdtemp(prefix="memevo-crash-data-"))
    started = datetime.datetime.now(datetime.timezone.utc)
    before = machine()
    results = run_trials(
        data_dir,
        trials=args.trials,
        phases=phases,
        seed=args.seed,
        kill_after_s=(args.min_kill_s, args.max_kill_s),
        check_ann=not args.no_ann,
        old_sample=args.old_sample,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    after = machine()
    print(table(results))
    problems = [p for r in results for p in r.problems]
    print(f"\n{args.trials} kills, {len(problems)} problems; load average before {before['load_average']}, "
          f"after {after['load_average']}")  # fmt: skip
    if args.json is not None:
        payload = {"trials": [r.__dict__ for r in results], "problems": len(problems)}
        _write_json(args.json, argv, started, before, after, payload)
    if args.data is None:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 1 if problems else 0


def _write_json(
    path: Path,
    argv: Sequence[str] | None,
    started: datetime.datetime,
    before: dict[str, Any],
    after: dict[str, Any],
    payload: dict[str, Any],
) -> None:
    """The run's results with its command, date and machine, for RESULTS.md."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(["python", "benchmarks/crash.py", *(argv or sys.argv[1:])]),
        "date": started.isoformat(timespec="seconds"),
        "machine": before,
        "load_average_after": after["load_average"],
        **payload,
    }
    path.write_text(json.dumps(record, indent=2))


_Row = TypeVar("_Row")


def _per_size(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    sizes: str,
    measure: Callable[[int], _Row],
    table: Callable[[dict[int, _Row]], str],
    payload: Callable[[dict[int, _Row]], dict[str, Any]],
) -> dict[int, _Row]:
    """``measure`` each of the comma-separated ``sizes``; print ``table`` and the load, write the JSON if asked."""
    started = datetime.datetime.now(datetime.timezone.utc)
    before = machine()
    results = {count: measure(count) for count in (int(size) for size in sizes.split(",") if size)}
    after = machine()
    print(table(results))
    print(f"\nload average before {before['load_average']}, after {after['load_average']}")
    if args.json is not None:
        _write_json(args.json, argv, started, before, after, payload(results))
    return results


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _main_availability(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    results = _per_size(
        args,
        argv,
        args.availability,
        lambda count: restart_availability(
            count, dimension=args.dimension, repeats=args.repeats, seed=args.seed, log=_log, keep=args.data
        ),
        availability_table,
        lambda results: {
            "availability": {
                str(count): {"restarts": [r.__dict__ for r in rows], "clean_stop_s": stop_s}
                for count, (rows, stop_s) in results.items()
            }
        },
    )
    lost = sum(r.probed - r.found for rows, _ in results.values() for r in rows)
    return 1 if lost else 0


def _main_burst(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    _per_size(
        args,
        argv,
        args.burst,
        lambda count: crash_after_burst(
            count,
            dimension=args.dimension,
            repeats=args.repeats,
            seed=args.seed,
            log=_log,
            client_options=GRPC_DEFAULT_BACKOFF if args.client_backoff == "grpc" else (),
        ),
        burst_table,
        lambda results: {"burst": {str(count): [r.__dict__ for r in rows] for count, rows in results.items()}},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
