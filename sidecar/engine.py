"""The engine: one data directory's RocksDB, hot columns, ANN index and embedder, and the write path.

The gRPC servicer validates and converts requests, then calls the engine.
Every mutation goes through the store's committer (serial, group-committed,
fsynced) and updates the columns and the index only after it is durable.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memevo.kernels.value import Scores
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

from .config import SidecarConfig, SnapshotConfig
from .domain import NewMemory, from_timestamp, now_s, set_timestamp, to_timestamp
from .embedding import Embedder, EmbedderError, LocalEmbedder, make_embedder
from .errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, StorageError, Unavailable
from .evaluation.scoring import clock_for, score
from .experiments.arms import Experiments
from .governance.abstraction import ChatAbstractor
from .idempotency import RequestKey, drop_unscoped_records, id_of
from .perception import judge as judge_module
from .perception.conflicts import REPEATABLE_KINDS, SLOT_KINDS, Decision, Perceiver, fact_key
from .perception.feedback import (
    Demotion,
    apply_outcome,
    outcome_weights,
    pack_retrieval,
    strategy_changes,
    unpack_retrieval,
)
from .perception.judge import JudgeError, PairJudge, shipped
from .perception.judging import Judgement, JudgeQueue
from .policy import PerceptionSettings, default_policy, params_from_policy, validate_policy
from .retrieval import rerank as rerank_module
from .retrieval.lexical import CONTEXT_MEMORIES, NamespacedLexicalIndex, context_text, searchable_text
from .retrieval.rerank import Reranker
from .retrieval.rerank import shipped as shipped_reranker
from .store import snapshot
from .store.columns import NO_CODE, STATE_EVICTED, STATE_UNSPECIFIED, MemoryColumns, field_attribute
from .store.files import private_directory
from .store.retrieval_log import Entry, RetrievalLog
from .store.rocks import (
    CF_CHANGELOG,
    CF_FACT_VERSIONS,
    CF_FACTS,
    CF_MEMORIES,
    CF_MEMORY_EVENTS,
    CF_META,
    CF_RETRIEVALS,
    CF_VECTORS,
    META_CREATED,
    META_FRAMEWORK,
    SCHEMA_VERSION,
    RocksStore,
    Txn,
    key_u64,
    require_dimension,
    u64_key,
)
from .store.tail_file import TAIL_DIRECTORY, TailFile
from .store.vector_digests import delete_vector, put_vector
from .store.vector_index import VectorIndex

log = logging.getLogger(__name__)

RECENT_TEXTS = 1024
"""Texts of the latest memories kept while the word index is rebuilt, for the reasoning contexts that name them."""


_OUTCOMES = {
    "created": memory_service_pb2.WRITE_OUTCOME_CREATED,
    "confirmed": memory_service_pb2.WRITE_OUTCOME_CONFIRMED,
    "superseded": memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS,
    "backdated": memory_service_pb2.WRITE_OUTCOME_BACKDATED,
}
META_POLICY = b"policy"
META_TURN = b"agent_turn"
META_STATS_MARK = b"stats_checkpoint_mark"
"""The number of the last checkpoint of access statistics (a start-up snapshot says which it includes)."""
META_STATS_LOG = b"stats_checkpoint/"
"""Prefix of mark (u64) -> the ids (u64 little-endian) whose access statistics that checkpoint rewrote: records
changed without a change-log entry, which a start from an older snapshot must read again. Pruned once a
snapshot includes them."""
SNAPSHOT_TICK_S = 1.0
"""How often the snapshot thread checks whether a snapshot is due."""
CATCH_UP_CHUNK = 4096
"""Records read per RocksDB call while a start catches up from a snapshot."""
STOP_SNAPSHOT_S = 3.0
"""Seconds into a clean stop after which a start-up snapshot still being written is abandoned, when the next start can
catch up from the older one cheaply (see :func:`stop_abandons_snapshot`): at 1M memories under load the write alone
took 3.4-4.2 s of a stop, against ~0.3-0.5 s per 10,000 records a start reads again."""
STOP_CATCH_UP_LIMIT = 4
"""Most ``every_changes`` a start may have to read again for a stop to abandon its snapshot."""
VECTOR_READ_CHUNK = 8192
"""Vectors read per RocksDB call when many are read (start-up, consolidation passes)."""
HISTORY_LINK_GENERATIONS = 8
"""Supersession links a fact key's history follows from its versions: the statement that retired a version, the one
that retired that statement, ... (each generation is one batched read of the links not yet read)."""
SECOND_LOOK_LIMIT = 256
"""Most statements a sweep reads again (see :meth:`Engine.second_look`): ~0.1 s of one core at 0.4 ms each, 2 % of a
core at the 5 s schedule, so the newest statements a start hands over are read over the first minutes, not at once
beside the writes (a 10k life reads ~200 in all). At 1,024 a sweep, also on the 1 s near tier, writes at 100k right
after a start had p99 11-16 ms against 8.4-8.8 (write_latency.py, RESULTS)."""
SECOND_LOOK_SEEDED = 16_384
"""Newest statements about an entity stored before a start that the first sweep hands to perception's second look."""
SECOND_LOOK_CHUNK = 4
"""Statements read again in one store mutation (~0.4 ms each at 10k): a write queued behind it waits ~2 ms at most."""
JUDGE_NICENESS = 10
"""The judge thread's niceness (Linux): below every request thread, above nothing else of the sidecar's."""
JUDGE_BATCH_PAIRS = 32
"""Pairs the judge reads in one go (a model run per 16, one mutation to settle them all)."""
JUDGE_DRAIN_S = 60.0
"""How long ``Govern`` waits for the judge to catch up before it sweeps."""


@dataclass(frozen=True)
class SnapshotPause:
    """How the last start-up snapshot held writers back."""

    waited_s: float
    """Seconds it waited for the commit lock (a commit in progress; no writer waits for the snapshot then)."""
    held_s: float
    """Seconds it held the lock while copying: every writer waited at most this long for it."""


@dataclass(frozen=True)
class Written:
    """The outcome of one stored item: its record, and whether a request id replayed it."""

    memory: memory_pb2.Memory
    outcome: int
    replayed: bool
    affected: tuple[int, ...] = ()
    """Other memories the write changed (superseded, back-dated neighbours, soft conflicts)."""

    def result(self) -> memory_service_pb2.WriteResult:
        """The WriteResult a client receives (and a request id keeps for replays)."""
        return memory_service_pb2.WriteResult(memory=self.memory, outcome=self.outcome, affected_ids=self.affected)  # type: ignore[arg-type]


class ScoredPool:
    """A retrieval's re-ranked candidate pool as recall ranked it, for the replay log (arrays, one row each)."""

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)
        self.matches = np.zeros(0, dtype=np.float32)
        self.inconsistency = np.zeros(0, dtype=np.float32)
        self.demoted = np.zeros(0, dtype=np.uint8)

    def extend(
        self,
        ids: npt.NDArray[np.int64],
        matches: npt.NDArray[np.floating[Any]],
        inconsistency: npt.NDArray[np.floating[Any]],
        demoted: npt.NDArray[np.bool_],
    ) -> None:
        """Add candidates (an id noted twice keeps its first row)."""
        self.ids = np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)])
        self.matches = np.concatenate([self.matches, np.asarray(matches, dtype=np.float32)])
        self.inconsistency = np.concatenate([self.inconsistency, np.asarray(inconsistency, dtype=np.float32)])
        self.demoted = np.concatenate([self.demoted, np.asarray(demoted, dtype=np.uint8)])


def _require_models(config: SidecarConfig) -> None:
    """FailedPrecondition when ``--judge local`` or ``--rerank local`` asks for a model the package does not hold.

    Without it the sidecar would start and silently read prose with the rules alone (or rank by the formula)."""
    wanted = (
        ("--judge local", "pair judge", config.judge == "local", judge_module.MODEL_PATH),
        ("--rerank local", "reranker", config.rerank == "local", rerank_module.MODEL_PATH),
        ("--rerank local", "pair judge", config.rerank == "local", judge_module.MODEL_PATH),
    )
    for flag, name, asked, path in wanted:
        if asked and not path.exists():
            raise FailedPrecondition(
                f"{flag}: this install holds no {name} at {path}; reinstall memevo, or pass {flag.split()[0]} none",
                reason="MODEL_MISSING",
            )


class Engine:
    """Owns a data directory while the sidecar runs. Thread-safe."""

    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.limits = config.limits
        data_dir = Path(config.data_dir)
        self.embedder: Embedder | None = make_embedder(config.embedder)
        if isinstance(self.embedder, LocalEmbedder):
            self.embedder.load()  # a broken install fails at start, and the first write does not pay the load
        identity = self.embedder.identity if self.embedder is not None else "none"
        dimension = self.embedder.dimension if self.embedder is not None else config.dimension
        if self.embedder is not None and config.dimension and config.dimension != dimension:
            raise FailedPrecondition(
                f"--dimension {config.dimension} disagrees with the embedder's dimension {dimension}",
                reason="DIMENSION_MISMATCH",
            )
        _require_models(config)
        require_dimension(data_dir, dimension)  # a start refused for it creates nothing
        private_directory(data_dir)
        self.store = RocksStore(
            data_dir, dimension=dimension, embedder_identity=identity, group_max=config.commit_group_max
        )
        self.dimension = self.store.dimension
        self.retrieval_log = RetrievalLog(self.store, CF_RETRIEVALS)
        """Retrieval and observation records, written off the caller's path (see :mod:`.store.retrieval_log`)."""
        # Small until the start knows it scans: a snapshot brings columns of its own (filling ~120 MB of columns
        # at 1M memories only to drop them took 0.9 s of that start).
        self.columns = MemoryColumns(1024, vector_bytes=4 * self.dimension)
        created = (self.store.meta(META_CREATED) or b"").decode()
        # The fresh-tail files are opened on a thread of their own while this one restores the snapshot: their
        # per-record checksums (a kernel that releases the interpreter lock, 0.6-0.8 s at 1M after a crash) run
        # beside the restore's Python. Without a creation stamp the files could not tell this directory's vectors
        # from another's: none are kept.
        opener = ThreadPoolExecutor(1, thread_name_prefix="memevo-tail-open") if created else None
        tail_opened = (
            opener.submit(TailFile.open, data_dir / TAIL_DIRECTORY, self.dimension, created, next_id=self.store.next_id)
            if opener is not None
            else None
        )
        self.framework_version = (self.store.meta(META_FRAMEWORK) or b"").decode()
        self.current_turn = int((self.store.meta(META_TURN) or b"0").decode())
        """The highest agent turn any request carried (the clock of agent-turn mode)."""
        raw_policy = self.store.meta(META_POLICY)
        self.policy = policy_pb2.Policy.FromString(raw_policy) if raw_policy else default_policy()
        self.judge: PairJudge | None = shipped() if config.judge == "local" else None
        """The pair model that settles prose statements no key or template settles (see ``judge_pending``)."""
        self.reranker: Reranker | None = shipped_reranker() if config.rerank == "local" else None
        """The cross-encoder that orders a text Recall's best few (see ``Recaller._rerank``)."""
        self.recall_judge: PairJudge | None = (self.judge or shipped()) if self.reranker is not None else None
        """With the reranker, the pair model Recall asks whether a newer answer replaces the best one where no entity
        says so (see ``Recaller._newest_versions_first``)."""
        self.judgements: JudgeQueue | None = JudgeQueue() if self.judge is not None else None
        """Pairs perception queued for the judge."""
        self.perceiver = Perceiver(
            PerceptionSettings.from_policy(self.policy),
            self.columns,
            embed=self.embed if self.embedder is not None else None,
            judgements=self.judgements,
            doubt_by_likeness=self.reranker is None,
        )
        self.params = params_from_policy(self.policy)
        """The kernels' matrix of the current policy (rebuilt when the policy changes)."""
        self.lexical = NamespacedLexicalIndex()
        self.perceiver.find_words = self._word_matches
        self.strategies: dict[tuple[str, str], list[int]] = {}
        """(namespace, task_signature) -> ids of its STRATEGY memories."""
        self.eviction_gate: Callable[[npt.NDArray[np.int64], npt.NDArray[np.float32]], npt.NDArray[np.bool_]] | None = (
            None
        )
        """Set by the review broker: which of a sweep's evictions wait for a reviewer (True = hold)."""
        self.escalation: Callable[[], bool] = lambda: False
        """Set by the review broker: whether a second judge (a reviewer, or the chat endpoint in policy mode LLM) now
        decides the pair judge's doubts, so that the local judge only proposes (see ``JUDGE_ASK``)."""
        self.judge_seconds = 0.0
        """Wall seconds the pair judge's model ran, since the start (its thread's share of a core)."""
        self.llm: ChatAbstractor | None = ChatAbstractor(config.llm) if config.llm.url else None
        """The chat model that writes abstractions in policy mode LLM, when one is configured."""
        self._second_look_seeded = False
        """Whether the statements stored before this start were handed to perception for a second look."""
        self.second_looks = 0
        """Statements stored unread that sweeps read again (see :meth:`second_look`), since the start."""
        self.second_look_reads = 0
        """Of those, the ones read as an attribute (each then settled against its slot's holders)."""
        self.experiments = Experiments(self.store, engine=self)
        """The online experiment, if one runs: which policy ranks which retrieval, outcomes per arm."""
        self._scoring = threading.local()
        self._closed = False
        self._store_stamp = created
        self._stats_mark = int((self.store.meta(META_STATS_MARK) or b"0").decode())
        """The last checkpoint of access statistics (counts up; changed only by the committer)."""
        self._stats_rewritten = 0
        """Ids the checkpoints after the newest snapshot's mark rewrote (a start reads them again), counting up."""
        self._snapshot_rewritten = 0
        """``_stats_rewritten`` as of the newest snapshot."""
        self._snapshot_lock = threading.Lock()
        self._snapshot_stop = threading.Event()
        self._snapshot_covers: tuple[int, int] = (-1, -1)
        """(sequence, statistics mark) of the newest snapshot on disk; (-1, -1) when there is none."""
        self._stop_deadline: float | None = None
        """Monotonic time past which a stop abandons a snapshot it may leave (set when the stop begins)."""
        self._snapshot_write_s = 0.0
        """Seconds this process's last snapshot took from asking for the commit lock to durable (0: none yet)."""
        self.snapshot_pause: SnapshotPause | None = None
        """The last snapshot's wait for and hold of the commit lock (None before the first)."""
        try:
            drop_unscoped_records(self.store)
            if not self._restore_snapshot():
                self._load_columns()
        finally:
            tail_file = tail_opened.result() if tail_opened is not None else None
            if opener is not None:
                opener.shutdown()
        self.index = VectorIndex(data_dir, self.dimension, config.index, tail_file=tail_file)
        self._reconcile_index()
        self.index.start(lambda: self.store.last_sequence)
        self._snapshotter = threading.Thread(
            target=self._snapshot_loop, args=(config.snapshot,), name="memevo-snapshot", daemon=True
        )
        self._snapshotter.start()
        self._judging = threading.Thread(target=self._judge_loop, name="memevo-judge", daemon=True)
        if self.judgements is not None:
            self._judging.start()

    # ---- start-up ---------------------------------------------------------------------------

    def _restore_snapshot(self) -> bool:
        """Take the columns, lexical index and strategies from the last snapshot and catch up with RocksDB.

        False (nothing installed) when there is no usable snapshot: none, damaged, of another data directory, or
        ahead of RocksDB; the caller then scans every record.
        """
        started = time.perf_counter()
        loaded = snapshot.load(Path(self.config.data_dir))
        if loaded is None:
            return False
        stamp, reader = loaded
        store = self.store
        if (
            stamp.store != self._store_stamp
            or stamp.sequence > store.last_sequence
            or stamp.next_id > store.next_id
            or stamp.stats_mark > self._stats_mark
        ):
            log.warning(
                "start-up snapshot (%s) does not fit the data directory (created %s, sequence %d, next id %d, "
                "statistics mark %d): scanning RocksDB",
                stamp,
                self._store_stamp,
                store.last_sequence,
                store.next_id,
                self._stats_mark,
            )
            return False
        try:
            columns = MemoryColumns.load_snapshot(reader.child("columns"))
            lexical = NamespacedLexicalIndex.load_snapshot(reader.child("lexical"))
            strategies = snapshot.KeyedLists.load_snapshot(reader.child("strategies"), width=2)
            pairs = {(key[0], key[1]): ids for key, ids in strategies.items()}
            caught_up = self._catch_up(stamp, columns, lexical, pairs)
        except Exception as exc:  # whatever does not fit: the scan rebuilds it all, nothing was installed yet
            log.warning("start-up snapshot ignored (%s: %s): scanning RocksDB", type(exc).__name__, exc)
            return False
        # Update in place: the perceiver and others already hold these objects.
        self.columns.__dict__.update(columns.__dict__)
        self.lexical.__dict__.update(lexical.__dict__)
        self.strategies.update(pairs)
        self._snapshot_covers = (stamp.sequence, stamp.stats_mark)
        log.info(
            "start-up snapshot of sequence %d restored, %d memories changed after it read again (sequence %d), "
            "in %.2f s",
            stamp.sequence,
            caught_up,
            store.last_sequence,
            time.perf_counter() - started,
        )
        return True

    def _catch_up(
        self,
        stamp: snapshot.Stamp,
        columns: MemoryColumns,
        lexical: NamespacedLexicalIndex,
        strategies: dict[tuple[str, str], list[int]],
    ) -> int:
        """Bring structures restored from a snapshot up to RocksDB; returns how many memories were read again.

        Every record write has a change-log entry except checkpoints of access statistics, which log the ids
        they rewrite (META_STATS_LOG): the memories named after the snapshot's sequence and mark are read
        again, as the write path would have published them: new ones are added, changed ones overwritten,
        deleted ones marked EVICTED.
        """
        store = self.store
        changed: set[int] = set()
        event = events_pb2.ChangeEvent()
        for _, value in store.iterate(CF_CHANGELOG, u64_key(stamp.sequence + 1), u64_key(store.last_sequence + 1)):
            event.ParseFromString(value)
            if event.memory_id:
                changed.add(event.memory_id)
        rewritten = 0
        for _, value in store.iterate(
            CF_META, META_STATS_LOG + u64_key(stamp.stats_mark + 1), META_STATS_LOG + u64_key(self._stats_mark + 1)
        ):
            changed.update(np.frombuffer(value, dtype="<u8").tolist())
            rewritten += len(value) // 8
        self._stats_rewritten = rewritten  # behind the snapshot already: they count toward the next one
        ordered = sorted(changed)
        for start in range(0, len(ordered), CATCH_UP_CHUNK):
            chunk = ordered[start : start + CATCH_UP_CHUNK]
            records: list[memory_pb2.Memory] = []
            for memory_id, raw in zip(chunk, store.multi_get(CF_MEMORIES, [u64_key(i) for i in chunk]), strict=True):
                known = memory_id < columns.size and int(columns.state[memory_id]) != STATE_UNSPECIFIED
                if raw is None:  # deleted after the snapshot (or created and deleted since)
                    if known and int(columns.state[memory_id]) != STATE_EVICTED:
                        namespace = columns.namespaces.string(int(columns.namespace[memory_id]))
                        columns.set_state(memory_id, STATE_EVICTED)
                        lexical.remove(namespace, memory_id)
                    continue
                record = memory_pb2.Memory.FromString(raw)
                records.append(record)
                if known:
                    continue
                context = ""
                if record.HasField("reasoning_context"):
                    named = list(record.reasoning_context.memory_ids)[:CONTEXT_MEMORIES]
                    context = context_text(record, self._texts_of(named))
                lexical.add(record.namespace, record.id, searchable_text(record), context)
                if record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature:
                    strategies.setdefault((record.namespace, record.task_signature), []).append(record.id)
            columns.set_records(records)
        return len(ordered)

    def _load_columns(self) -> None:
        self.columns.reserve(self.store.next_id)
        record = memory_pb2.Memory()
        # A reasoning context names memories written shortly before (a conversation's previous turn): the texts
        # of the latest ones are at hand, older ones are read.
        recent: dict[int, tuple[str, str]] = {}
        for _, value in self.store.iterate(CF_MEMORIES):
            record.ParseFromString(value)
            self.columns.set_record(record)
            context = ""
            if record.HasField("reasoning_context"):
                named = list(record.reasoning_context.memory_ids)[:CONTEXT_MEMORIES]
                recent.update(self._texts_of([i for i in named if i not in recent]))
                context = context_text(record, recent)
            self.lexical.add(record.namespace, record.id, searchable_text(record), context)
            recent[record.id] = (record.namespace, record.content)
            if len(recent) > 2 * RECENT_TEXTS:
                recent = dict(list(recent.items())[-RECENT_TEXTS:])
            if record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature:
                self.strategies.setdefault((record.namespace, record.task_signature), []).append(record.id)

    def _reconcile_index(self) -> None:
        """Make the graph agree with RocksDB: load it, drop what is gone, and queue what it misses.

        What it misses is searched exactly from the first request on while the builder inserts it (a crash
        used to cost minutes of outage here: 16 min for 76k vectors).
        """
        started = time.perf_counter()
        loaded = self.index.load()
        live = self.columns.live_ids()
        if loaded:
            in_graph = self.index.graph_contains(live)
            missing = live[~in_graph]
            stale = np.setdiff1d(self.index.graph_keys(), live, assume_unique=True)  # both sets of distinct ids
            self.index.remove_from_graph_now(stale)
            reason = "saved index behind RocksDB"
        else:
            missing = live
            reason = self.index.load_problem
        if missing.size:
            self.index.begin_rebuild(missing, lambda ids, rows: self._read_vectors(ids, out=rows), reason)
        # Start-up's share of the index (load, checksum, reading what the graph lacks), for restart timings.
        log.info("index ready to serve in %.2f s", time.perf_counter() - started)

    def _read_vectors(
        self, ids: npt.NDArray[np.int64], out: npt.NDArray[np.float32] | None = None
    ) -> npt.NDArray[np.float32]:
        """The stored vector of each id, in ``out`` when given (``ids.size`` rows)."""
        if out is None:
            out = np.empty((ids.size, self.dimension), dtype=np.float32)
        step = VECTOR_READ_CHUNK

        def read(start: int) -> bytes:
            chunk = ids[start : start + step]
            packed = chunk.astype(">u8").tobytes()  # u64_key of each id, without a call per id
            raws = self.store.multi_get(CF_VECTORS, [packed[at : at + 8] for at in range(0, len(packed), 8)])
            present = [raw for raw in raws if raw is not None]
            if len(present) < len(raws):
                row = next(row for row, raw in enumerate(raws) if raw is None)
                raise FailedPrecondition(
                    f"memory {int(chunk[row])} has no vector in RocksDB", reason="DATA_DIR_CORRUPT"
                )
            # One join per chunk instead of two NumPy calls per row (a million rows after a crash).
            return b"".join(present)

        if ids.size <= step:
            if ids.size:
                out[:] = np.frombuffer(read(0), dtype="<f4").reshape(-1, self.dimension)
            return out
        # Large reads (start-up after a crash): the next chunk is read from RocksDB while this one is copied
        # into place, which releases the GIL (1M vectors on the 2-core machine: ~15 % less time).
        with ThreadPoolExecutor(1, thread_name_prefix="memevo-read") as reader:
            ahead = reader.submit(read, 0)
            for start in range(0, ids.size, step):
                data = ahead.result()
                if start + step < ids.size:
                    ahead = reader.submit(read, start + step)
                out[start : start + step] = np.frombuffer(data, dtype="<f4").reshape(-1, self.dimension)
        return out

    # ---- writes -----------------------------------------------------------------------------

    def _word_matches(self, namespace: str, text: str) -> npt.NDArray[np.int64]:
        """Ids of ``namespace``'s memories holding words of ``text``, best BM25 match first."""
        ids, scores = self.lexical.search(namespace, text)
        return np.asarray(ids[np.argsort(-scores, kind="stable")], dtype=np.int64)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts with the configured embedder; Unavailable/FailedPrecondition on failure."""
        if self.embedder is None:
            raise FailedPrecondition("this sidecar has no text embedder", reason="NO_EMBEDDER")
        try:
            return self.embedder.embed(list(texts))
        except EmbedderError as exc:
            if getattr(exc, "retryable", False):
                raise Unavailable(f"embedder failed: {exc}", reason="EMBEDDER_UNAVAILABLE") from exc
            raise FailedPrecondition(f"embedder failed: {exc}", reason="EMBEDDER_FAILED") from exc

    def vectors_for(self, items: Sequence[NewMemory]) -> npt.NDArray[np.float32]:
        """The vector of each item: the client's, or the embedding of its content."""
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        to_embed = [i for i, item in enumerate(items) if item.vector is None]
        for i, item in enumerate(items):
            if item.vector is not None:
                out[i] = item.vector
        if to_embed:
            out[to_embed] = self.embed([items[i].content for i in to_embed])
        return out

    def check_capacity(self, count: int) -> None:
        """Back-pressure: refuse writes while the fresh tail is full."""
        # A start-up rebuild's vectors do not count: writes are not refused for the minutes it takes.
        behind = self.index.write_backlog
        if behind + count > self.limits.max_fresh_tail:
            raise ResourceExhausted(
                f"the index is {behind} vectors behind (limit {self.limits.max_fresh_tail}); retry after a short wait",
                reason="INDEX_BACKLOG",
                metadata={"fresh_tail": str(behind)},
            )

    def remember(
        self,
        items: Sequence[NewMemory],
        *,
        batch: RequestKey | None = None,
        turn: int | None = None,
        rpc: str = "remember",
    ) -> list[Written]:
        """Store items durably in one atomic write; returns one result per item, in order.

        ``batch`` makes the whole call idempotent; an item's own ``request``
        makes that item idempotent (Remember, streams). Raises RequestIdReused
        when a key comes back with another payload, ResourceExhausted under
        back-pressure and StorageError when RocksDB fails.
        """
        if self._closed:
            raise Unavailable("the sidecar is shutting down", reason="SHUTTING_DOWN")
        self.check_capacity(len(items))
        vectors = self.vectors_for(items)
        contexts = self._context_texts(items)
        written = self.store.apply(lambda txn: self._remember_mutation(txn, items, vectors, contexts, batch, turn, rpc))
        self._overlay_all([w.memory for w in written])
        self.fill_scores([w.memory for w in written])
        return written

    def submit_remember(self, items: Sequence[NewMemory], *, turn: int | None = None) -> object:
        """Like :meth:`remember` for per-item request ids, returning a future (streams pipeline chunks)."""
        self.check_capacity(len(items))
        vectors = self.vectors_for(items)
        contexts = self._context_texts(items)
        return self.store.submit(
            lambda txn: self._remember_mutation(txn, items, vectors, contexts, None, turn, "remember"), items=len(items)
        )

    def _remember_mutation(
        self,
        txn: Txn,
        items: Sequence[NewMemory],
        vectors: npt.NDArray[np.float32],
        contexts: Mapping[int, tuple[str, str]],
        batch: RequestKey | None,
        turn: int | None,
        rpc: str,
    ) -> list[Written]:
        if batch is not None:
            previous = batch.previous(txn)
            if previous is not None:
                return self._replayed_writes(txn, memory_service_pb2.RememberBatchResponse.FromString(previous).results)
        now = now_s()
        written: list[Written] = []
        fresh_ids: list[int] = []
        fresh_rows: list[int] = []
        changed: dict[int, memory_pb2.Memory] = {}
        confirmed: list[int] = []
        new_strategies: list[memory_pb2.Memory] = []
        for row, item in enumerate(items):
            if item.request is not None:
                previous = item.request.previous(txn)
                if previous is not None:
                    written += self._replayed_writes(txn, [memory_service_pb2.WriteResult.FromString(previous)])
                    continue
            memory_id = txn.allocate_id()
            record = self._new_record(item, memory_id, now, turn)
            decision = self.perceiver.perceive(txn, record, vectors[row], now)
            for other, before, reason in decision.updated:
                self.save(txn, other, before=before, reason=reason, turn=turn, related=[memory_id])
                changed[other.id] = other
            if decision.confirm is not None:
                txn.release_id(memory_id)
                confirmed.append(decision.confirm.id)
                affected = tuple(o.id for o, _, _ in decision.updated if o.id != decision.confirm.id)
                written.append(Written(decision.confirm, memory_service_pb2.WRITE_OUTCOME_CONFIRMED, False, affected))
                if item.request is not None:
                    item.request.record(txn, written[-1].result().SerializeToString())
                continue
            self._claim_room(txn, len(items))
            self.save(
                txn,
                record,
                before=memory_pb2.MEMORY_STATE_UNSPECIFIED,
                reason=rpc,
                turn=turn,
                related=list(record.supersedes),
                request_id=id_of(item.request or batch),
            )
            put_vector(txn, record.namespace, memory_id, vectors[row])
            self.perceiver.register(txn, record, vectors[row])
            affected = tuple(o.id for o, _, _ in decision.updated)
            written.append(Written(record, _OUTCOMES[decision.outcome], False, affected))
            if item.request is not None:
                item.request.record(txn, written[-1].result().SerializeToString())
            fresh_ids.append(memory_id)
            fresh_rows.append(row)
            changed[memory_id] = record
            if record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature:
                new_strategies.append(record)
                txn.add_pending("strategies", (record.namespace, record.task_signature), memory_id)
        if batch is not None:
            answer = memory_service_pb2.RememberBatchResponse(results=[w.result() for w in written])
            batch.record(txn, answer.SerializeToString())
        ids = np.asarray(fresh_ids, dtype=np.int64)
        fresh_vectors = vectors[fresh_rows]

        def publish() -> None:
            self.columns.set_records(list(changed.values()))
            for record in new_strategies:
                self.strategies.setdefault((record.namespace, record.task_signature), []).append(record.id)
            for memory_id in fresh_ids:
                record = changed[memory_id]
                self.lexical.add(record.namespace, memory_id, searchable_text(record), context_text(record, contexts))
            # A restatement counts as one more use of the memory it confirms.
            self.columns.record_access(np.asarray(confirmed, dtype=np.int64), now, turn)
            self.index.add(ids, fresh_vectors)

        txn.on_commit(publish)
        return written

    def _claim_room(self, txn: Txn, asked: int) -> None:
        """Count one more new memory against ``--max-memories``; ResourceExhausted past it.

        Runs inside the mutation, so a refused call writes nothing (a batch is all
        or nothing) and replays and confirmations, which add no memory, still pass.
        """
        limit = self.limits.max_memories
        if limit <= 0:
            return
        # Columns hold what earlier groups committed; this group's new memories are pending.
        held = self.columns.live_count + len(txn.pending("new_memories", None))
        if held + 1 > limit:
            raise ResourceExhausted(
                f"the data directory is at its limit of {limit} memories (--max-memories) and this call "
                f"would add up to {asked}: nothing was written. Forget memories or raise the limit",
                reason="MAX_MEMORIES",
                metadata={"held": str(held), "limit": str(limit)},
            )
        txn.add_pending("new_memories", None, 1)

    def save(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        *,
        before: int,
        reason: str,
        turn: int | None,
        related: Sequence[int] = (),
        request_id: str = "",
        event_type: int | None = None,
        detail: str = "",
    ) -> int:
        """Write ``record`` with a fresh sequence and the change-log event that explains it.

        The event type follows from the states unless given: CREATED from
        UNSPECIFIED, SUPERSEDED when it gained ``superseded_by`` and became
        OBSOLETE, STATE_CHANGED on any other state change, UPDATED otherwise.
        """
        sequence = txn.next_sequence()
        record.sequence = sequence
        if before != record.state:
            record.state_since.CopyFrom(record.updated_at if record.HasField("updated_at") else to_timestamp(now_s()))
            record.state_since_turn = turn or self.current_turn
        if turn is not None and turn > self.current_turn:
            self.current_turn = turn
            txn.put(CF_META, META_TURN, str(turn).encode())
        if event_type is None:
            if before == memory_pb2.MEMORY_STATE_UNSPECIFIED:
                event_type = events_pb2.CHANGE_EVENT_TYPE_CREATED
            elif record.state == memory_pb2.MEMORY_STATE_OBSOLETE and record.superseded_by and before != record.state:
                event_type = events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED
            elif before != record.state:
                event_type = events_pb2.CHANGE_EVENT_TYPE_STATE_CHANGED
            else:
                event_type = events_pb2.CHANGE_EVENT_TYPE_UPDATED
        txn.put(CF_MEMORIES, u64_key(record.id), record.SerializeToString())
        self.emit(
            txn,
            events_pb2.ChangeEvent(
                sequence=sequence,
                type=event_type,  # type: ignore[arg-type]
                memory_id=record.id,
                namespace=record.namespace,
                from_state=before,  # type: ignore[arg-type]
                to_state=record.state,
                recorded_at=record.updated_at,
                reason=reason,
                related_ids=related,
                request_id=request_id,
                kind=record.kind,
                turn=turn or 0,
                detail=detail,
            ),
        )
        return sequence

    def emit(self, txn: Txn, event: events_pb2.ChangeEvent) -> None:
        """Append ``event`` (its sequence already allocated) to the change log and its memory's event index."""
        txn.put(CF_CHANGELOG, u64_key(event.sequence), event.SerializeToString())
        if event.memory_id:
            txn.put(CF_MEMORY_EVENTS, u64_key(event.memory_id) + u64_key(event.sequence), b"")

    def _replayed_writes(self, txn: Txn, results: Iterable[memory_service_pb2.WriteResult]) -> list[Written]:
        """The first call's results again, flagged as replayed (see :meth:`replayed_memory`)."""
        return [Written(self.replayed_memory(txn, r.memory), r.outcome, True, tuple(r.affected_ids)) for r in results]

    @staticmethod
    def replayed_memory(txn: Txn, record: memory_pb2.Memory) -> memory_pb2.Memory:
        """A memory of a first call's response, as a replay shows it: as it was then, unless forgotten since.

        A forgotten memory's text must not come back through a replay: it is answered with
        its id, namespace and EVICTED state only.
        """
        if not record.id or txn.get(CF_MEMORIES, u64_key(record.id)) is not None:
            return record
        return memory_pb2.Memory(id=record.id, namespace=record.namespace, state=memory_pb2.MEMORY_STATE_EVICTED)

    def _context_texts(self, items: Sequence[NewMemory]) -> dict[int, tuple[str, str]]:
        """The namespaces and texts of the memories the items' reasoning contexts name (those word search counts,
        see ``lexical.context_text``), read before the write; ids that name no memory are left out."""
        return self._texts_of(list(dict.fromkeys(i for item in items for i in item.reasoning_ids[:CONTEXT_MEMORIES])))

    def _texts_of(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """Namespace and content by id of the stored memories among ``ids``."""
        if not ids:
            return {}
        raws = self.store.multi_get(CF_MEMORIES, [u64_key(i) for i in ids])
        records = [memory_pb2.Memory.FromString(raw) for raw in raws if raw is not None]
        return {r.id: (r.namespace, r.content) for r in records}

    def _new_record(self, item: NewMemory, memory_id: int, now: float, turn: int | None) -> memory_pb2.Memory:
        confidence = (
            item.confidence if item.confidence is not None else self.perceiver.settings.source_confidence[item.source]
        )
        stamp = to_timestamp(now)  # copied into each field
        record = memory_pb2.Memory(
            id=memory_id,
            namespace=item.namespace,
            kind=item.kind,
            state=memory_pb2.MEMORY_STATE_ACTIVE,
            content=item.content,
            entity=item.entity,
            topic=item.topic,
            source=item.source,
            confidence=confidence,
            importance=item.importance,
            tags=item.tags,
            metadata=item.metadata,
            valid_from=stamp if item.valid_from_s is None else to_timestamp(item.valid_from_s),
            recorded_at=stamp,
            updated_at=stamp,
            turn=turn or 0,
            framework_version=(
                item.framework_version if item.framework_version is not None else self.framework_version
            ),
            task_signature=item.task_signature,
        )
        if item.fact_attribute:
            record.fact.attribute = item.fact_attribute
            record.fact.value = item.fact_value
        if item.reasoning_ids or item.reasoning_text:
            record.reasoning_context.memory_ids.extend(item.reasoning_ids)
            record.reasoning_context.text = item.reasoning_text
        return record

    def forget(
        self,
        ids: Sequence[int],
        *,
        reason: str,
        keep_history: bool,
        request: RequestKey | None = None,
        turn: int | None = None,
    ) -> tuple[list[int], list[int]]:
        """Delete memories (tombstone event) or mark them OBSOLETE; returns (forgotten, missing)."""
        request_id = id_of(request)

        def mutation(txn: Txn) -> tuple[list[int], list[int]]:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                response = memory_service_pb2.ForgetResponse.FromString(previous)
                return list(response.forgotten_ids), list(response.missing_ids)
            now = now_s()
            forgotten: list[int] = []
            missing: list[int] = []
            changed: list[memory_pb2.Memory] = []
            why = f"forget: {reason}" if reason else "forget"
            for memory_id in dict.fromkeys(ids):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                record = None if raw is None else memory_pb2.Memory.FromString(raw)
                if record is None or (keep_history and record.state == memory_pb2.MEMORY_STATE_OBSOLETE):
                    missing.append(memory_id)
                    continue
                before = record.state
                record.updated_at.CopyFrom(to_timestamp(now))
                if keep_history:
                    record.state = memory_pb2.MEMORY_STATE_OBSOLETE
                    if not record.HasField("valid_to"):
                        record.valid_to.CopyFrom(to_timestamp(now))
                    self.save(txn, record, before=before, reason=why, turn=turn, request_id=request_id)
                else:
                    self._evict(txn, record, reason=why, turn=turn, request_id=request_id)
                self.perceiver.release_current(txn, record)
                forgotten.append(memory_id)
                changed.append(record)
            if request is not None:
                response = memory_service_pb2.ForgetResponse(forgotten_ids=forgotten, missing_ids=missing)
                request.record(txn, response.SerializeToString())

            def publish() -> None:
                evicted = [r for r in changed if r.state == STATE_EVICTED]
                # The whole row of a memory kept as OBSOLETE (its state_since too, as a restart reads it).
                self.columns.set_records([r for r in changed if r.state != STATE_EVICTED])
                for record in evicted:
                    self.columns.set_state(record.id, STATE_EVICTED)
                for record in evicted:
                    self.lexical.remove(record.namespace, record.id)
                self.index.remove(np.asarray([r.id for r in evicted], dtype=np.int64))

            txn.on_commit(publish)
            return forgotten, missing

        return self.store.apply(mutation)

    def _evict(
        self, txn: Txn, record: memory_pb2.Memory, *, reason: str, turn: int | None, request_id: str = ""
    ) -> None:
        """Delete a memory: its record, vector and index entries go; a tombstone event stays."""
        before = record.state
        record.state = memory_pb2.MEMORY_STATE_EVICTED
        self.save(
            txn,
            record,
            before=before,
            reason=reason,
            turn=turn,
            request_id=request_id,
            event_type=events_pb2.CHANGE_EVENT_TYPE_EVICTED,
        )
        self.perceiver.unregister(txn, record)
        self.perceiver.release_current(txn, record)
        txn.delete(CF_MEMORIES, u64_key(record.id))
        delete_vector(txn, record.namespace, record.id)

    # ---- governance -----------------------------------------------------------------------------

    def second_look(self, limit: int = SECOND_LOOK_LIMIT) -> int:
        """Read again the statements stored unread whose namespace has learnt enough since (see
        ``Perceiver.second_look``), at most ``limit``, ``SECOND_LOOK_CHUNK`` to a mutation so that writes wait for
        one chunk at most; returns how many were read. Each reading and what it settled is a change of its own."""
        if self.store.write_refusal is not None:
            return 0  # what it would settle must be written; the next sweep after the room comes back reads it
        if not self._second_look_seeded:
            self._seed_second_look()
        due = self.store.apply(lambda txn: self.perceiver.second_look_due(txn, limit))
        read = 0
        for start in range(0, len(due), SECOND_LOOK_CHUNK):
            chunk = due[start : start + SECOND_LOOK_CHUNK]
            read += self.store.apply(functools.partial(self._second_look_chunk, ids=chunk))
        self.second_looks += len(due)
        self.second_look_reads += read
        return read

    def judge_pending(self, max_pairs: int = JUDGE_BATCH_PAIRS) -> int:
        """Judge up to ``max_pairs`` queued pairs now and settle what the judge is sure of; returns pairs judged."""
        queue = self.judgements
        if queue is None:
            return 0
        taken = queue.take(max_pairs)
        try:
            return self._judge(taken)
        finally:
            queue.done(taken)

    def drain_judgements(self, timeout_s: float = JUDGE_DRAIN_S) -> bool:
        """Wait until every queued pair was judged (the worker judges them); False when ``timeout_s`` passed."""
        return self.judgements is None or self.judgements.wait_idle(timeout_s)

    def _judge_loop(self) -> None:
        queue = self.judgements
        assert queue is not None
        # Background work: where the judge and the writes want the same core, the writes go first and the judge
        # lags (the model runs on this thread: one intra-op thread). Linux sets niceness per thread.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), JUDGE_NICENESS)
        while not self._closed:
            taken = queue.take(JUDGE_BATCH_PAIRS, timeout_s=1.0)
            try:
                self._judge(taken)
            except Unavailable as refused:  # writes refused (a full disk): these stay as written
                log.info("judgements dropped: %s", refused)
            except Exception:  # the judge must never take the sidecar down; these pairs stay as written
                log.exception("judging %d statements failed", len(taken))
            finally:
                queue.done(taken)

    def _judge(self, taken: Sequence[Judgement]) -> int:
        """Read the pairs' texts, run the judge outside any lock, then settle in one mutation."""
        judge = self.judge
        if not taken or judge is None:
            return 0
        ids = list(dict.fromkeys(i for item in taken for i in (item.newer, *item.older)))
        raws = self.store.multi_get(CF_MEMORIES, [u64_key(i) for i in ids])
        records = {i: memory_pb2.Memory.FromString(raw) for i, raw in zip(ids, raws, strict=True) if raw is not None}
        current = (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED)
        pairs = [
            (item.newer, older)
            for item in taken
            for older in item.older
            if item.newer in records and older in records
            and records[item.newer].state in current and records[older].state in current
        ]  # fmt: skip
        if not pairs:
            return 0
        started = time.perf_counter()
        try:
            found = judge.replaces([records[o].content for _, o in pairs], [records[n].content for n, _ in pairs])
        except JudgeError:
            log.exception("the judge failed on %d pairs; they stay as written", len(pairs))
            return 0
        self.judge_seconds += time.perf_counter() - started
        verdicts = [(n, o, p) for (n, o), p in zip(pairs, found, strict=True)]
        escalates = self.escalation()
        self.store.apply(functools.partial(self._settle_judged, verdicts=verdicts, escalates=escalates))
        return len(pairs)

    def _settle_judged(self, txn: Txn, verdicts: Sequence[tuple[int, int, float]], escalates: bool) -> None:
        now = now_s()
        changed: dict[int, memory_pb2.Memory] = {}
        for newer_id, older_id, replaces in verdicts:
            loaded = []
            for memory_id in (newer_id, older_id):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                loaded.append(changed.get(memory_id) or (memory_pb2.Memory.FromString(raw) if raw else None))
            newer, older = loaded
            if newer is None or older is None:
                continue
            befores = {newer.id: newer.state, older.id: older.state}
            doubted_before = newer.possibly_outdated_by
            decision = Decision()
            self.perceiver.settle_judged(txn, newer, older, replaces, now, decision, escalates=escalates)
            for other, _, reason in decision.updated:
                self.save(txn, other, before=befores[other.id], reason=reason, turn=None, related=[newer.id])
                changed[other.id] = other
            # A statement written late (older in world time) is the one doubted: it changes without being listed.
            if decision.updated or newer.possibly_outdated_by != doubted_before:
                newer.updated_at.CopyFrom(to_timestamp(now))
                why = f"judged against memory {older.id}: replaces with confidence {replaces:.2f}"
                self.save(txn, newer, before=befores[newer.id], reason=why, turn=None, related=[older.id])
                changed[newer.id] = newer
        if changed:
            txn.on_commit(lambda: self.columns.set_records(list(changed.values())))

    def _seed_second_look(self) -> None:
        """Hand perception the newest statements about an entity stored unread before this start, read outside a
        store mutation (writes do not wait for it); they get a second look.

        Chosen from the columns, so the records read are those perception keeps: a fact or preference (episodes are
        not read again) whose fields hold no attribute, declared or inferred. Picking among every statement about an
        entity instead spent most of ``SECOND_LOOK_SEEDED`` on keyed facts and remarks.
        """
        columns = self.columns
        size = columns.size
        state, entity = columns.state[:size], columns.entity[:size]
        current = (state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)
        stating = np.isin(columns.kind[:size], [kind for kind in SLOT_KINDS if kind not in REPEATABLE_KINDS])
        ids = np.flatnonzero(current & (entity != NO_CODE) & stating)
        codes = columns.fields[ids]
        present, inverse = np.unique(codes, return_inverse=True)
        attributed = np.asarray(
            [code != NO_CODE and field_attribute(columns.field_sets.string(int(code))) != "" for code in present],
            dtype=np.bool_,
        )
        ids = ids[~attributed[inverse]]
        ids = ids[-SECOND_LOOK_SEEDED:].tolist()
        records: list[memory_pb2.Memory] = []
        for start in range(0, len(ids), VECTOR_READ_CHUNK):
            keys = [u64_key(i) for i in ids[start : start + VECTOR_READ_CHUNK]]
            records += [memory_pb2.Memory.FromString(raw) for raw in self.store.multi_get(CF_MEMORIES, keys) if raw]
        self.store.apply(lambda txn: self.perceiver.seed_unread(records))
        self._second_look_seeded = True

    def _second_look_chunk(self, txn: Txn, ids: Sequence[int]) -> int:
        now = now_s()
        changed: dict[int, memory_pb2.Memory] = {}
        found = 0
        for memory_id in ids:
            raw = txn.get(CF_MEMORIES, u64_key(memory_id))
            record = memory_pb2.Memory.FromString(raw) if raw is not None else None
            raw_vector = txn.get(CF_VECTORS, u64_key(memory_id))
            if record is None or raw_vector is None:
                self.perceiver.drop_unread(memory_id)
                continue
            before = record.state
            decision = Decision()
            if not self.perceiver.second_look(txn, record, np.frombuffer(raw_vector, dtype="<f4"), now, decision):
                continue
            found += 1
            for other, other_before, reason in decision.updated:
                self.save(txn, other, before=other_before, reason=reason, turn=None, related=[record.id])
                changed[other.id] = other
            record.updated_at.CopyFrom(to_timestamp(now))
            inferred = record.inferred
            self.save(
                txn,
                record,
                before=before,
                reason=f"read again: {inferred.method} of {inferred.attribute}",
                turn=None,
                related=[other.id for other, _, _ in decision.updated],
            )
            changed[record.id] = record
        if changed:
            txn.on_commit(lambda: self.columns.set_records(list(changed.values())))
        return found

    def apply_transitions(
        self,
        ids: npt.NDArray[np.int64],
        observed: npt.NDArray[np.uint8],
        targets: npt.NDArray[np.uint8],
        values: npt.NDArray[np.float32],
        reasons: Sequence[str],
        *,
        review: bool = True,
    ) -> int:
        """Move memories to the states a sweep proposed, if they are still in the state it saw.

        With ``review`` (the default) evictions pass the review broker's gate
        first: those it holds stay where they are until a reviewer (or the
        policy, at the proposal's deadline) decides.
        """
        if review and self.eviction_gate is not None:
            evicting = np.flatnonzero(targets == memory_pb2.MEMORY_STATE_EVICTED)
            if evicting.size:
                hold = np.zeros(ids.size, dtype=bool)
                hold[evicting] = self.eviction_gate(ids[evicting], values[evicting])
                if hold.any():
                    keep = ~hold
                    ids, observed, targets, values = ids[keep], observed[keep], targets[keep], values[keep]
                    reasons = [r for r, k in zip(reasons, keep.tolist(), strict=True) if k]

        def mutation(txn: Txn) -> int:
            now = now_s()
            changed: list[memory_pb2.Memory] = []
            for memory_id, seen, target, value, reason in zip(
                ids.tolist(), observed.tolist(), targets.tolist(), values.tolist(), reasons, strict=True
            ):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                if raw is None:
                    continue
                record = memory_pb2.Memory.FromString(raw)
                if record.state != seen:
                    continue  # changed since the sweep looked: the next sweep decides again
                record.updated_at.CopyFrom(to_timestamp(now))
                record.scores.value = value
                detail = f"value {value:.4f}"
                if target == memory_pb2.MEMORY_STATE_EVICTED:
                    self._evict(txn, record, reason=reason, turn=None)
                else:
                    before = record.state
                    record.state = target
                    self.save(txn, record, before=before, reason=reason, turn=None, detail=detail)
                changed.append(record)

            def publish() -> None:
                for record in changed:
                    if record.state == STATE_EVICTED:
                        self.columns.set_state(record.id, STATE_EVICTED)
                    else:
                        self.columns.set_record(record)
                evicted = [r for r in changed if r.state == STATE_EVICTED]
                for record in evicted:
                    self.lexical.remove(record.namespace, record.id)
                self.index.remove(np.asarray([r.id for r in evicted], dtype=np.int64))

            txn.on_commit(publish)
            return len(changed)

        return self.store.apply(mutation)

    def evict_reviewed(self, ids: Sequence[int], *, reason: str, hook: Callable[[Txn], None] | None = None) -> int:
        """Evict those of ``ids`` still ACTIVE or ARCHIVED (a reviewed eviction); returns how many."""
        live = [i for i in ids if 0 < i < self.columns.size]
        observed = self.columns.state[np.asarray(live, dtype=np.int64)] if live else np.zeros(0, dtype=np.uint8)
        movable = [
            (i, int(s))
            for i, s in zip(live, observed.tolist(), strict=True)
            if s in (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED)
        ]

        def mutation(txn: Txn) -> int:
            if hook is not None:
                hook(txn)
            now = now_s()
            evicted: list[memory_pb2.Memory] = []
            for memory_id, seen in movable:
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                if raw is None:
                    continue
                record = memory_pb2.Memory.FromString(raw)
                if record.state != seen:
                    continue
                record.updated_at.CopyFrom(to_timestamp(now))
                self._evict(txn, record, reason=reason, turn=None)
                evicted.append(record)

            def publish() -> None:
                for record in evicted:
                    self.columns.set_state(record.id, STATE_EVICTED)
                    self.lexical.remove(record.namespace, record.id)
                self.index.remove(np.asarray([r.id for r in evicted], dtype=np.int64))

            txn.on_commit(publish)
            return len(evicted)

        return self.store.apply(mutation)

    def spare(self, ids: Sequence[int]) -> None:
        """A reviewer kept these memories: their eviction grace period starts over."""
        rows = np.asarray([i for i in ids if 0 < i < self.columns.size], dtype=np.int64)
        if rows.size:
            with self.columns.lock:
                self.columns.below[rows] = np.nan

    def reaffirm_framework(self, ids: Sequence[int], *, reason: str, hook: Callable[[Txn], None] | None = None) -> int:
        """Mark memories as re-read under the current framework version; returns how many changed."""
        version = self.framework_version

        def mutation(txn: Txn) -> int:
            if hook is not None:
                hook(txn)
            now = now_s()
            changed: list[memory_pb2.Memory] = []
            for memory_id in dict.fromkeys(ids):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                if raw is None:
                    continue
                record = memory_pb2.Memory.FromString(raw)
                if record.framework_version == version or record.state == memory_pb2.MEMORY_STATE_EVICTED:
                    continue
                record.framework_version = version
                record.updated_at.CopyFrom(to_timestamp(now))
                self.save(txn, record, before=record.state, reason=reason, turn=None, detail=version)
                changed.append(record)

            def publish() -> None:
                for record in changed:
                    self.columns.set_record(record)

            txn.on_commit(publish)
            return len(changed)

        return self.store.apply(mutation)

    def checkpoint_statistics(self, ids: Sequence[int]) -> None:
        """Persist access statistics (and the turn clock) of ``ids``; no change-log events."""
        columns = self.columns

        def mutation(txn: Txn) -> None:
            # Runs every few seconds over every memory recall returned since the last one (thousands with
            # callers busy): one read for all, the statistics set as Get sets them (columns read as lists, no
            # Timestamp built per record). Under 8 recall callers this pass held the interpreter lock for more
            # samples than recall's own ranking.
            keys = [u64_key(memory_id) for memory_id in ids]
            records = [memory_pb2.Memory.FromString(raw) for raw in txn.get_many(CF_MEMORIES, keys) if raw is not None]
            self._overlay_all(records)
            for record in records:
                txn.put(CF_MEMORIES, u64_key(record.id), record.SerializeToString())
            if self.current_turn:
                txn.put(CF_META, META_TURN, str(self.current_turn).encode())
            if ids:
                # These records changed without a change-log entry: say so, for a start from an older snapshot.
                self._stats_mark += 1
                self._stats_rewritten += len(ids)
                txn.put(CF_META, META_STATS_MARK, str(self._stats_mark).encode())
                txn.put(CF_META, META_STATS_LOG + u64_key(self._stats_mark), np.asarray(ids, dtype="<u8").tobytes())

        try:
            self.store.apply(mutation)
        except StorageError as error:
            # A full or read-only disk must not stop the daemon or the shutdown; retry at the next checkpoint.
            log.warning("access statistics not checkpointed: %s", error.message)
            with columns.lock:
                columns.accessed.update(ids)

    # ---- outcomes, supersession, history -------------------------------------------------------

    def new_retrieval_id(self) -> str:
        """A fresh retrieval id (known before ranking, so an experiment arm can be assigned by it)."""
        # Time-ordered ids (milliseconds first) let expired records go in one range delete.
        return f"{int(now_s() * 1000):012x}{uuid.uuid4().hex[:12]}"

    def record_retrieval(
        self, ids: Sequence[int], turn: int | None, *, retrieval_id: str = "", beside: Sequence[Entry] = ()
    ) -> str:
        """Remember which memories a retrieval returned, for ReportOutcome; returns its id.

        Queued for the retrieval log's thread with ``beside`` (the observation record; written in the same
        batch), without fsync and outside the committer: losing the last few retrievals in a crash only means
        their outcomes cannot be reported. A clean stop writes them all; :meth:`retrieval` waits for its own.
        """
        retrieval_id = retrieval_id or self.new_retrieval_id()
        recorded_at, returned = now_s(), list(ids)
        self.retrieval_log.add([(retrieval_id.encode(), lambda: pack_retrieval(returned, recorded_at, turn)), *beside])
        return retrieval_id

    def expire_retrievals(self, older_than_s: float) -> None:
        """Forget retrieval records older than ``older_than_s`` seconds: their outcomes can no longer be reported."""
        cutoff = f"{int((now_s() - older_than_s) * 1000):012x}".encode()
        self.store.delete_range_unsynced(CF_RETRIEVALS, b"", cutoff)

    def retrieval(self, retrieval_id: str) -> list[int] | None:
        """The ids a retrieval returned, or None when it is unknown."""
        key = retrieval_id.encode()
        # Its observation record (same batch) is then written too: ReportOutcome reads it for the experiment.
        self.retrieval_log.written([key])
        raw = self.store.get(CF_RETRIEVALS, key)
        return None if raw is None else unpack_retrieval(raw)[2]

    def report_outcome(
        self,
        used: Sequence[int],
        *,
        outcome: int,
        reward: float | None,
        retrieval_id: str,
        note: str,
        request: RequestKey | None = None,
        turn: int | None = None,
    ) -> int:
        """Apply outcome feedback to the used memories; returns how many were updated."""
        success, failure = outcome_weights(outcome, reward)
        request_id = id_of(request)

        def mutation(txn: Txn) -> int:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                return memory_service_pb2.ReportOutcomeResponse.FromString(previous).updated_count
            if retrieval_id:
                self.experiments.on_outcome(txn, retrieval_id, success, failure)
            now = now_s()
            updated: list[memory_pb2.Memory] = []
            signatures: set[tuple[str, str]] = set()
            for memory_id in dict.fromkeys(used):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                if raw is None:
                    continue
                record = memory_pb2.Memory.FromString(raw)
                apply_outcome(record, success, failure)
                record.updated_at.CopyFrom(to_timestamp(now))
                updated.append(record)
                if record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature:
                    signatures.add((record.namespace, record.task_signature))
            detail = memory_service_pb2.Outcome.Name(outcome) if reward is None else f"reward {reward:+.3f}"  # type: ignore[arg-type]
            reason = f"outcome of retrieval {retrieval_id}" if retrieval_id else "outcome reported"
            for record in updated:
                self.save(txn, record, before=record.state, reason=reason, turn=turn, detail=detail)
            self.emit(
                txn,
                events_pb2.ChangeEvent(
                    sequence=txn.next_sequence(),
                    type=events_pb2.CHANGE_EVENT_TYPE_OUTCOME_REPORTED,
                    recorded_at=to_timestamp(now),
                    reason=(note or reason)[:4096],
                    related_ids=[r.id for r in updated],
                    detail=f"{retrieval_id} {detail}".strip(),
                    request_id=request_id,
                    turn=turn or 0,
                ),
            )
            changed = {r.id: r for r in updated}
            for namespace, signature in signatures:
                for change in self._strategy_changes(txn, namespace, signature, changed):
                    record = change.record
                    record.demoted_by = change.demoted_by
                    record.updated_at.CopyFrom(to_timestamp(now))
                    why = (
                        f"demoted: strategy {change.demoted_by} does better (p={change.probability:.3f})"
                        if change.demoted_by
                        else f"restored: its demoter no longer does better (p={change.probability:.3f})"
                    )
                    self.save(txn, record, before=record.state, reason=why, turn=turn, related=[change.demoted_by])
                    changed[record.id] = record
            if request is not None:
                request.record(
                    txn, memory_service_pb2.ReportOutcomeResponse(updated_count=len(updated)).SerializeToString()
                )

            def publish() -> None:
                for record in changed.values():
                    self.columns.set_record(record)

            txn.on_commit(publish)
            return len(updated)

        return self.store.apply(mutation)

    def _strategy_changes(
        self, txn: Txn, namespace: str, signature: str, changed: dict[int, memory_pb2.Memory]
    ) -> list[Demotion]:
        ids = list(self.strategies.get((namespace, signature), ()))
        ids += [i for i in txn.pending("strategies", (namespace, signature)) if i not in ids]
        records = []
        for memory_id in ids:
            record = changed.get(memory_id)
            if record is None:
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                record = None if raw is None else memory_pb2.Memory.FromString(raw)
            if record is not None and record.state in (
                memory_pb2.MEMORY_STATE_ACTIVE,
                memory_pb2.MEMORY_STATE_ARCHIVED,
            ):
                records.append(record)
        return strategy_changes(records, self.policy.strategy_upgrade_probability)

    def supersede(
        self,
        old_id: int,
        *,
        new_id: int = 0,
        new_item: NewMemory | None = None,
        reason: str,
        request: RequestKey | None = None,
        turn: int | None = None,
    ) -> tuple[memory_pb2.Memory, memory_pb2.Memory]:
        """Make ``old_id`` OBSOLETE in favour of an existing memory or a new one; returns (old, new)."""
        vectors = self.vectors_for([new_item]) if new_item is not None else None
        contexts = self._context_texts([new_item]) if new_item is not None else {}
        request_id = id_of(request)

        def mutation(txn: Txn) -> tuple[memory_pb2.Memory, memory_pb2.Memory]:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                answer = memory_service_pb2.SupersedeResponse.FromString(previous)
                return self.replayed_memory(txn, answer.old_memory), self.replayed_memory(txn, answer.new_memory)
            now = now_s()
            old = self._live(txn, old_id, "old_id")
            if old.state == memory_pb2.MEMORY_STATE_OBSOLETE:
                raise FailedPrecondition(
                    f"memory {old_id} is already OBSOLETE (superseded by {old.superseded_by})",
                    reason="ALREADY_OBSOLETE",
                )
            fresh: list[memory_pb2.Memory] = []
            if new_item is not None:
                assert vectors is not None
                self._claim_room(txn, 1)
                new = self._new_record(new_item, txn.allocate_id(), now, turn)
                put_vector(txn, new.namespace, new.id, vectors[0])
                fresh.append(new)
            else:
                if new_id == old_id:
                    raise InvalidArgument.field("new_id", "a memory cannot supersede itself")
                new = self._live(txn, new_id, "new_id")
            before_old, before_new = old.state, new.state
            old.state = memory_pb2.MEMORY_STATE_OBSOLETE
            old.superseded_by = new.id
            # The doubt is settled; left in place, a Restore would bring it back and the reviewer be asked again.
            old.possibly_outdated_by = 0
            old.valid_to.CopyFrom(
                new.valid_from if new.valid_from.ToSeconds() > old.valid_from.ToSeconds() else to_timestamp(now)
            )
            old.updated_at.CopyFrom(to_timestamp(now))
            if old.id not in new.supersedes:
                new.supersedes.append(old.id)
            new.updated_at.CopyFrom(to_timestamp(now))
            why = f"superseded: {reason}" if reason else "superseded by request"
            self.save(txn, old, before=before_old, reason=why, turn=turn, related=[new.id], request_id=request_id)
            self.save(
                txn,
                new,
                before=memory_pb2.MEMORY_STATE_UNSPECIFIED if fresh else before_new,
                reason=why,
                turn=turn,
                related=[old.id],
                request_id=request_id,
            )
            self.perceiver.release_current(txn, old)
            if fresh:
                self.perceiver.register(txn, new)
            elif (
                new.entity
                and new.fact.attribute
                and new.state
                in (
                    memory_pb2.MEMORY_STATE_ACTIVE,
                    memory_pb2.MEMORY_STATE_ARCHIVED,
                )
            ):
                key = fact_key(new.namespace, new.entity, new.fact.attribute)
                txn.put(CF_FACTS, key, u64_key(new.id))
            if request is not None:
                request.record(
                    txn, memory_service_pb2.SupersedeResponse(old_memory=old, new_memory=new).SerializeToString()
                )

            def publish() -> None:
                self.columns.set_record(old)
                self.columns.set_record(new)
                if fresh and vectors is not None:
                    self.lexical.add(new.namespace, new.id, searchable_text(new), context_text(new, contexts))
                    self.index.add(np.asarray([new.id], dtype=np.int64), vectors)

            txn.on_commit(publish)
            return old, new

        return self.store.apply(mutation)

    def restore(
        self, memory_id: int, *, reason: str = "", request: RequestKey | None = None, turn: int | None = None
    ) -> memory_pb2.Memory:
        """Undo a supersession (the memory is current again) or a doubt (``possibly_outdated_by`` cleared).

        For an inference perception got wrong, or a review that decided "B does not replace A". Raises
        NotFound for an unknown id and FailedPrecondition when the memory is neither superseded nor doubted,
        or when its fact key has another current value (supersede that one instead).
        """

        request_id = id_of(request)

        def mutation(txn: Txn) -> memory_pb2.Memory:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                return self.replayed_memory(txn, memory_service_pb2.RestoreResponse.FromString(previous).memory)
            now = now_s()
            record = self._live(txn, memory_id, "memory_id")
            before = record.state
            why = f"restored: {reason}" if reason else "restored by request"
            changed = [record]
            if record.state == memory_pb2.MEMORY_STATE_OBSOLETE and record.superseded_by:
                key = fact_key(record.namespace, record.entity, record.fact.attribute) if record.fact.attribute else b""
                holder = txn.get(CF_FACTS, key) if key else None
                if holder is not None and holder != u64_key(record.id):
                    raise FailedPrecondition(
                        f"memory_id: the fact key of memory {record.id} is held by memory {key_u64(holder)}; "
                        "supersede that one instead",
                        reason="KEY_HELD",
                    )
                successor_raw = txn.get(CF_MEMORIES, u64_key(record.superseded_by))
                if successor_raw is not None:
                    successor = memory_pb2.Memory.FromString(successor_raw)
                    kept = [i for i in successor.supersedes if i != record.id]
                    del successor.supersedes[:]
                    successor.supersedes.extend(kept)
                    successor.updated_at.CopyFrom(to_timestamp(now))
                    self.save(txn, successor, before=successor.state, reason=why, turn=turn, related=[record.id])
                    changed.append(successor)
                record.state = memory_pb2.MEMORY_STATE_ACTIVE
                record.superseded_by = 0
                record.ClearField("valid_to")
                if key:
                    txn.put(CF_FACTS, key, u64_key(record.id))
            elif record.state in (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED) and (
                record.possibly_outdated_by
            ):
                record.possibly_outdated_by = 0
            else:
                raise FailedPrecondition(
                    f"memory_id: memory {record.id} is neither superseded nor possibly outdated", reason="NOT_RETIRED"
                )
            record.updated_at.CopyFrom(to_timestamp(now))
            related = [c.id for c in changed[1:]]
            self.save(txn, record, before=before, reason=why, turn=turn, related=related, request_id=request_id)
            if request is not None:
                request.record(txn, memory_service_pb2.RestoreResponse(memory=record).SerializeToString())

            def publish() -> None:
                self.columns.set_records(changed)

            txn.on_commit(publish)
            return record

        return self.store.apply(mutation)

    def _live(self, txn: Txn, memory_id: int, field: str) -> memory_pb2.Memory:
        raw = txn.get(CF_MEMORIES, u64_key(memory_id))
        if raw is None:
            raise NotFound(f"{field}: memory {memory_id} does not exist", metadata={"field": field})
        return memory_pb2.Memory.FromString(raw)

    def history_of_fact(self, namespace: str, entity: str, attribute: str) -> list[memory_pb2.Memory]:
        """Every stored version of a fact key, oldest valid_from first, whether it was keyed or written in prose.

        The versions are the memories written with the key; the plain-text statements perception read as this
        (entity, attribute) (``inferred``); and the memories linked to any of those by supersession
        (``supersedes``, ``superseded_by``), followed ``HISTORY_LINK_GENERATIONS`` links deep, so the statement that
        retired a version is there even when nothing was inferred for it. Only memories of ``namespace``; evicted
        ones are gone (their tombstones stay in the change log). The current version is the one still ACTIVE or
        ARCHIVED with no ``valid_to``, as for keyed versions alone.
        """
        key = fact_key(namespace, entity, attribute)
        ids = {key_u64(k[-8:]) for k in self.store.prefix_keys(CF_FACT_VERSIONS, key + b"\0")}
        ids.update(self._stating_slot(namespace, entity, attribute))
        records, _ = self.get(sorted(ids))
        versions = {r.id: r for r in records}
        read = set(ids)
        frontier = records
        for _ in range(HISTORY_LINK_GENERATIONS):
            linked = sorted({i for r in frontier for i in (*r.supersedes, r.superseded_by) if i and i not in read})
            if not linked:
                break
            read.update(linked)
            found, _ = self.get(linked)
            frontier = [r for r in found if r.namespace == namespace]
            versions.update((r.id, r) for r in frontier)
        return sorted(versions.values(), key=lambda r: (from_timestamp(r.valid_from), r.id))

    def _stating_slot(self, namespace: str, entity: str, attribute: str) -> list[int]:
        """Ids of the memories of ``namespace`` whose fields name (entity, attribute), declared or inferred.

        Read from the columns' entity index and interned fields (:func:`field_key`), no record: a scan of the
        entity's ids, whatever their number, and one string per distinct field combination among them.
        """
        columns = self.columns
        entity_code = columns.entities.lookup(entity)
        namespace_code = columns.namespaces.lookup(namespace)
        if entity_code == NO_CODE or namespace_code == NO_CODE:
            return []
        ids = columns.entity_ids(entity_code)
        ids = ids[ids < columns.size]  # a row is complete once the size counts it
        state = columns.state[ids]
        ids = ids[(columns.namespace[ids] == namespace_code) & (state != STATE_UNSPECIFIED) & (state != STATE_EVICTED)]
        present, inverse = np.unique(columns.fields[ids], return_inverse=True)
        names = [field_attribute(columns.field_sets.string(int(code))) if code != NO_CODE else "" for code in present]
        stating = np.asarray([name == attribute for name in names], dtype=np.bool_)
        return [int(i) for i in ids[stating[inverse]]]

    def lineage(self, memory_id: int) -> list[memory_pb2.Memory]:
        """The memory and everything linked to it by supersession or consolidation, oldest first."""
        seen: dict[int, memory_pb2.Memory] = {}
        frontier = [memory_id]
        while frontier and len(seen) < self.limits.max_k:
            found, _ = self.get([i for i in frontier if i not in seen])
            frontier = []
            for record in found:
                seen[record.id] = record
                links = [*record.supersedes, record.superseded_by, record.consolidated_into, *record.members]
                frontier += [i for i in links if i and i not in seen]
        if memory_id not in seen:
            raise NotFound(f"memory_id: memory {memory_id} does not exist", metadata={"field": "memory_id"})
        return sorted(seen.values(), key=lambda r: (from_timestamp(r.valid_from), r.id))

    def events_about(self, ids: Iterable[int]) -> list[events_pb2.ChangeEvent]:
        """The change-log events about these memories, in sequence order."""
        sequences: set[int] = set()
        for memory_id in ids:
            for key in self.store.prefix_keys(CF_MEMORY_EVENTS, u64_key(memory_id)):
                sequences.add(key_u64(key[8:]))
        ordered = sorted(sequences)
        raws = self.store.multi_get(CF_CHANGELOG, [u64_key(s) for s in ordered])
        return [events_pb2.ChangeEvent.FromString(r) for r in raws if r is not None]

    # ---- policy and framework ----------------------------------------------------------------

    def update_policy(
        self,
        policy: policy_pb2.Policy,
        *,
        request: RequestKey | None = None,
        also: Callable[[Txn], None] | None = None,
    ) -> policy_pb2.Policy:
        """Validate and store a new policy (INVALID_ARGUMENT naming every bad field); returns it.

        ``also`` runs inside the same transaction (an experiment's decision lands with the policy it set).
        """
        problems = validate_policy(policy)
        if problems:
            raise InvalidArgument(problems)
        if not policy.name:
            policy.name = "custom"

        def mutation(txn: Txn) -> policy_pb2.Policy:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                return policy_pb2.Policy.FromString(previous)
            txn.put(CF_META, META_POLICY, policy.SerializeToString())
            self.emit(
                txn,
                events_pb2.ChangeEvent(
                    sequence=txn.next_sequence(),
                    type=events_pb2.CHANGE_EVENT_TYPE_POLICY_UPDATED,
                    recorded_at=to_timestamp(now_s()),
                    reason="policy updated",
                    detail=policy.name,
                ),
            )
            if also is not None:
                also(txn)
            if request is not None:
                request.record(txn, policy.SerializeToString())

            def publish() -> None:
                self.policy = policy
                self.params = params_from_policy(policy)
                self.perceiver.settings = PerceptionSettings.from_policy(policy)

            txn.on_commit(publish)
            return policy

        return self.store.apply(mutation)

    def declare_framework(
        self, version: str, description: str, *, request: RequestKey | None = None, turn: int | None = None
    ) -> tuple[str, int]:
        """Make ``version`` current; returns (previous version, memories formed under other versions)."""
        request_id = id_of(request)

        def mutation(txn: Txn) -> tuple[str, int]:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                answer = memory_service_pb2.DeclareFrameworkResponse.FromString(previous)
                return answer.previous_version, answer.flagged_count
            before = self.framework_version
            flagged = self.count_other_frameworks(version)
            txn.put(CF_META, META_FRAMEWORK, version.encode())
            self.emit(
                txn,
                events_pb2.ChangeEvent(
                    sequence=txn.next_sequence(),
                    type=events_pb2.CHANGE_EVENT_TYPE_FRAMEWORK_DECLARED,
                    recorded_at=to_timestamp(now_s()),
                    reason=description or "framework declared",
                    detail=version,
                    request_id=request_id,
                    turn=turn or 0,
                ),
            )
            if request is not None:
                answer = memory_service_pb2.DeclareFrameworkResponse(previous_version=before, flagged_count=flagged)
                request.record(txn, answer.SerializeToString())

            def publish() -> None:
                self.framework_version = version

            txn.on_commit(publish)
            return before, flagged

        return self.store.apply(mutation)

    def count_other_frameworks(self, version: str) -> int:
        """Live memories formed under a framework version other than ``version``."""
        live = self.columns.live_ids()
        code = self.columns.frameworks.lookup(version)
        return int(np.count_nonzero(self.columns.framework[live] != code))

    # ---- reads ------------------------------------------------------------------------------

    def get(
        self, ids: Sequence[int], *, include_vectors: bool = False, scores: Scores | None = None
    ) -> tuple[list[memory_pb2.Memory], list[int]]:
        """Records by id in request order, and the ids that do not exist.

        ``scores``, when given, are the ids' scores (row i for ``ids[i]``) just computed by
        :meth:`score_rows`: they are copied into the records instead of being computed again.
        """
        keys = [u64_key(i) for i in ids]
        raws = self.store.multi_get(CF_MEMORIES, keys)
        found: list[memory_pb2.Memory] = []
        missing: list[int] = []
        vectors = self.store.multi_get(CF_VECTORS, keys) if include_vectors else [None] * len(keys)
        positions: list[int] = []
        for position, (memory_id, raw, vector) in enumerate(zip(ids, raws, vectors, strict=True)):
            if raw is None:
                missing.append(memory_id)
                continue
            record = memory_pb2.Memory.FromString(raw)
            if vector is not None:
                record.vector = vector
            found.append(record)
            positions.append(position)
        self._overlay_all(found)
        if scores is None:
            self.fill_scores(found)
        else:  # row i of ``scores`` is ids[i]: recall's path, the scores it ranked with
            _set_scores(found, Scores(*(np.asarray(column)[positions] for column in scores)))
        return found, missing

    def _overlay_all(self, records: Sequence[memory_pb2.Memory]) -> None:
        """Fill the records' access statistics from the hot columns (newer than the stored records)."""
        size = self.columns.size
        held = [r for r in records if r.id < size]
        if not held:
            return
        rows = np.asarray([r.id for r in held], dtype=np.int64)
        counts = self.columns.access_count[rows].tolist()
        lasts = self.columns.last_access_at[rows].tolist()
        turns = self.columns.last_access_turn[rows].tolist()
        for record, count, last, turn in zip(held, counts, lasts, turns, strict=True):
            record.access_count = count
            if last == last:  # not NaN: accessed
                set_timestamp(record.last_access_at, last)
            record.last_access_turn = turn

    @contextlib.contextmanager
    def scoring_policy(
        self, policy: policy_pb2.Policy | None = None, params: npt.NDArray[np.float64] | None = None
    ) -> Iterator[ScoredPool]:
        """Within the block, this thread's reads score with ``policy`` (an experiment arm's) if given.

        Yields the pool recall ranks in the block (see :meth:`note_pool`), for the replay log.
        """
        seen = ScoredPool()
        self._scoring.override = (policy, params, seen)
        try:
            yield seen
        finally:
            self._scoring.override = None

    def score_rows(self, rows: npt.NDArray[np.int64]) -> Scores:
        """Scores of ``rows`` (ids below ``columns.size``) as of now, under this thread's scoring policy.

        The same numbers :meth:`fill_scores` writes into records, without reading them: recall ranks its
        candidate pool with these and reads only the records it returns.
        """
        policy, params = self.policy, self.params
        override = getattr(self._scoring, "override", None)
        if override is not None and override[0] is not None:
            policy, params = override[0], override[1]
        return score(self.columns, policy, clock_for(self.columns, policy, self.current_turn, rows), rows, params)

    def note_pool(
        self,
        ids: npt.NDArray[np.int64],
        matches: npt.NDArray[np.floating[Any]],
        inconsistency: npt.NDArray[np.floating[Any]],
        demoted: npt.NDArray[np.bool_],
    ) -> None:
        """Hand recall's ranked pool (each candidate's exact match) to an open :meth:`scoring_policy` block."""
        override = getattr(self._scoring, "override", None)
        if override is not None:
            override[2].extend(ids, matches, inconsistency, demoted)

    def fill_scores(self, records: Sequence[memory_pb2.Memory]) -> None:
        """Set each record's scores as of now (the value kernel over just these rows)."""
        held = [r for r in records if r.id < self.columns.size]
        if not held:
            return
        rows = np.asarray([r.id for r in held], dtype=np.int64)
        policy, params = self.policy, self.params
        override = getattr(self._scoring, "override", None)
        if override is not None and override[0] is not None:
            policy, params = override[0], override[1]
        clock = clock_for(self.columns, policy, self.current_turn, rows)
        _set_scores(held, score(self.columns, policy, clock, rows, params))

    def note_turn(self, turn: int | None) -> None:
        """A read carried the agent's turn: advance the turn clock (persisted at the next checkpoint)."""
        if turn is not None and turn > self.current_turn:
            self.current_turn = turn

    def events(self, after_sequence: int, stop: threading.Event | None = None) -> Iterator[events_pb2.ChangeEvent]:
        """Change-log events with a sequence above ``after_sequence``, then live ones until ``stop``."""
        cursor = after_sequence
        while not (stop is not None and stop.is_set()) and not self._closed:
            durable = self.store.last_sequence
            if durable > cursor:
                for key, value in self.store.iterate(CF_CHANGELOG, u64_key(cursor + 1), u64_key(durable + 1)):
                    cursor = key_u64(key)
                    yield events_pb2.ChangeEvent.FromString(value)
                cursor = max(cursor, durable)
                continue
            self.store.wait_for_sequence(cursor, timeout_s=0.5)

    def stats(self) -> memory_service_pb2.GetStatsResponse:
        """Counts per state and kind, index status, sequence, embedder."""
        response = memory_service_pb2.GetStatsResponse(
            last_sequence=self.store.last_sequence,
            embedder=self.store.embedder_identity,
            dimension=self.dimension,
            schema_version=SCHEMA_VERSION,
            framework_version=self.framework_version,
        )
        total = 0
        for (state, kind), count in sorted(self.columns.count_by_state_kind().items()):
            response.counts.add(state=state, kind=kind, count=count)
            total += count
        response.total_count = total
        self.experiments.fill_stats(response)
        response.index.indexed_count = self.index.graph_count
        response.index.fresh_tail_count = self.index.tail_count
        response.index.saved_sequence = self.index.saved_sequence
        if self.index.saved_at:
            response.index.saved_at.CopyFrom(to_timestamp(self.index.saved_at))
        rebuild = self.index.rebuild
        response.index.state = (
            memory_service_pb2.INDEX_STATE_REBUILDING if rebuild.remaining else memory_service_pb2.INDEX_STATE_READY
        )
        response.index.rebuild_total = rebuild.total
        response.index.rebuild_remaining = rebuild.remaining
        response.index.rebuild_reason = rebuild.reason
        refusal = self.store.write_refusal
        if refusal is not None:
            response.writes.refused = True
            response.writes.reason = refusal.reason
            response.writes.message = refusal.message
            response.writes.refused_since.CopyFrom(to_timestamp(self.store.refused_since or now_s()))
            response.writes.restart_required = refusal.reason == "RESTART_REQUIRED"
        return response

    # ---- the start-up snapshot -----------------------------------------------------------------

    def write_snapshot(self, *, cancellable: bool = False) -> bool:
        """Write the start-up snapshot of the structures as they stand; True once it is durable.

        Writes are held back only while what changes in place is copied (the commit lock; 10-50 ms at 1M
        memories with a million distinct words); what only grows (postings, id lists) is copied after writes
        resume, and the file written, mostly outside the GIL. With ``cancellable`` a stop abandons it, unless the
        stop would write one itself (``close``): then abandoning it would only start the same write over (0.4-2.5 s
        of a 1M stop). Any write still under way STOP_SNAPSHOT_S into a stop is abandoned when the next start can
        catch up from the older snapshot cheaply (:func:`stop_abandons_snapshot`).
        """
        with self._snapshot_lock:
            would_write = self._stop_writes_snapshot()

            def cancelled() -> bool:
                if not self._snapshot_stop.is_set():
                    return False
                return (cancellable and not would_write) or self._stop_leaves_snapshot()

            # Preparing touches ~120 MB at 1M (seconds of a stop under load): it looks at the stop as it goes.
            if not self.columns.prepare_snapshot(cancelled) or cancelled():
                log.info("start-up snapshot abandoned before its copy: the sidecar is stopping")
                return False
            asked = time.perf_counter()
            with self.store.paused():
                # Waiting for the lock is waiting for a commit in progress (a RememberBatch of 10,000 holds it for
                # its whole perception: up to 28 s at 300k memories under load): no writer waits for the snapshot
                # meanwhile. The 1M console build logged that wait as a pause of up to 27 s.
                held = time.perf_counter()
                stamp = snapshot.Stamp(
                    sequence=self.store.last_sequence,
                    next_id=self.store.next_id,
                    stats_mark=self._stats_mark,
                    store=self._store_stamp,
                )
                rewritten = self._stats_rewritten
                writer = snapshot.collect(
                    {
                        "columns": self.columns,
                        "lexical": self.lexical,
                        "strategies": snapshot.KeyedLists(self.strategies.items()),
                    }
                )
            released = time.perf_counter()
            self.snapshot_pause = SnapshotPause(waited_s=held - asked, held_s=released - held)
            # Logged before the file is written, so that the line's time is when writes resumed.
            log.info(
                "start-up snapshot of sequence %d: writes paused %.3f s while it was copied, after waiting %.3f s "
                "for the commit in progress",
                stamp.sequence,
                self.snapshot_pause.held_s,
                self.snapshot_pause.waited_s,
            )
            written = snapshot.write(Path(self.config.data_dir), writer, stamp, cancelled=cancelled)
            if written:
                self._snapshot_write_s = time.perf_counter() - asked
                previous = self._snapshot_covers[1]
                self._snapshot_covers = (stamp.sequence, stamp.stats_mark)
                self._snapshot_rewritten = rewritten
                # Statistics the previous snapshot holds need not be read again (this one's are kept too, for a
                # start that finds the previous file after all); losing this delete costs a few reads.
                if previous > 0:
                    self.store.delete_range_unsynced(CF_META, META_STATS_LOG, META_STATS_LOG + u64_key(previous + 1))
            return written

    def _snapshot_changed(self) -> tuple[int, bool]:
        """Records a start would read again after the newest snapshot (at most: change-log entries since it plus the
        ids statistics checkpoints rewrote since), and whether statistics were checkpointed since.

        The rewritten ids count: without them a recall-heavy run never made a snapshot due by its changes, and each
        start read more again (the 1M restart harness: 13-22k records, 0.5-1.8 s of a start, at 2,100 changes a round).
        """
        sequence, mark = self._snapshot_covers
        rewritten = self._stats_rewritten - self._snapshot_rewritten
        return self.store.last_sequence - sequence + rewritten, self._stats_mark != mark

    def _stop_writes_snapshot(self) -> bool:
        """Whether a stop now would write the snapshot (``close``): none yet, or the next start would otherwise read
        ``every_changes`` or more records again."""
        changes, _ = self._snapshot_changed()
        return self._snapshot_covers[0] < 0 or changes >= max(self.config.snapshot.every_changes, 1)

    def _stop_leaves_snapshot(self) -> bool:
        """Whether a stop past its deadline abandons the snapshot or does not begin one (stop_abandons_snapshot)."""
        if self._stop_deadline is None or self.columns.accessed:  # statistics not checkpointed live only in it
            return False
        changes, _ = self._snapshot_changed()
        return stop_abandons_snapshot(
            time.monotonic() - self._stop_deadline,
            has_snapshot=self._snapshot_covers[0] >= 0,
            changes=changes,
            every_changes=self.config.snapshot.every_changes,
        )

    def _snapshot_loop(self, config: SnapshotConfig) -> None:
        """Write the snapshot in the background when enough changed, at most every so often (see SnapshotConfig)."""
        if config.every_changes <= 0 and config.max_age_s <= 0:
            return
        started = time.monotonic()
        last_at: float | None = None  # when this run's last snapshot ended: the spacing rules apply between two
        cost_s = 0.0
        while not self._snapshot_stop.wait(SNAPSHOT_TICK_S):
            now = time.monotonic()
            changes, checkpointed = self._snapshot_changed()
            if (
                last_at is not None
                and now - last_at < max(config.min_interval_s, config.cost_ratio * cost_s)
                and not behind_burst(changes, cost_s, config)
            ):
                continue
            age_s = now - (started if last_at is None else last_at)
            due = (config.every_changes > 0 and changes >= config.every_changes) or (
                config.max_age_s > 0 and age_s >= config.max_age_s and (changes > 0 or checkpointed)
            )
            if not due or self.store.write_refusal is not None:  # a full disk would refuse the file as well
                continue
            pause = self.snapshot_pause
            try:
                self.write_snapshot(cancellable=True)
            except Exception:  # the next start scans more; serving goes on
                log.exception("start-up snapshot failed")
            cost_s = time.monotonic() - now
            if self.snapshot_pause is not pause and self.snapshot_pause is not None:
                # Waiting for the commit in progress costs nothing (the thread sleeps, writes go on): a burst's
                # large groups made a 0.3 s snapshot look like one of seconds, and spaced the next far apart.
                cost_s -= self.snapshot_pause.waited_s
            last_at = time.monotonic()

    # ---- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the index builder and save it, write the start-up snapshot if it is far behind, close RocksDB.

        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        if self.judgements is not None:
            self.judgements.wake()
            self._judging.join()  # a batch's model runs and its one mutation: well under a second
        began = time.monotonic()
        self._stop_deadline = began + STOP_SNAPSHOT_S
        self.index.stop_builder()
        self._snapshot_stop.set()
        self._snapshotter.join()
        # A stop writes the snapshot only when the next start would otherwise read many records again: within
        # every_changes of the last one, that start catches up as after a crash, which costs it less than the
        # write costs the stop (1M memories: ~2.5 s to write, ~0.3 s per 10,000 changes to catch up). What lives
        # only in memory (eviction grace periods begun since) is then taken from the older snapshot.
        writes_snapshot = self._stop_writes_snapshot() or bool(self.columns.accessed)
        try:
            self.index.close(
                save=True,
                budget_s=graph_save_budget_s(
                    self.config.index.close_save_budget_s,
                    waited_s=time.monotonic() - began,
                    snapshot_s=self._snapshot_write_s if writes_snapshot else 0.0,
                ),
            )
        except Exception as exc:  # e.g. a full disk: the index is rebuilt from RocksDB, which must still be closed
            log.warning("the ANN index was not saved at shutdown (%s); it is rebuilt at the next start", exc)
        if writes_snapshot and self._stop_leaves_snapshot():
            log.info(
                "start-up snapshot not written at stop (%.1f s into it): the next start reads the %d changes after "
                "the one of sequence %d again",
                time.monotonic() - began,
                self._snapshot_changed()[0],
                self._snapshot_covers[0],
            )
        elif writes_snapshot:
            self.write_snapshot()
        else:
            log.info(
                "start-up snapshot of sequence %d kept: the next start reads the %d changes after it again",
                self._snapshot_covers[0],
                self._snapshot_changed()[0],
            )
        self.retrieval_log.close()
        self.store.close()
        if self.embedder is not None:
            self.embedder.close()


def behind_burst(changes: int, cost_s: float, config: SnapshotConfig) -> bool:
    """Whether a snapshot due by its count is written before the spacing since the last one has passed.

    The spacing keeps snapshots to a small share of the time, but a write burst outran it: after 100k streamed
    writes the newest snapshot was 40-80k changes behind, and a crash then cost the next start seconds of reading
    them again. Once reading the changes again would take a start longer than the last snapshot took to write, the
    next one starts at once; so a burst leaves at most about that many changes, plus those of one snapshot's
    duration, for a start to read again.
    """
    return 0 < config.every_changes <= changes and changes * config.catch_up_record_s >= cost_s


def stop_abandons_snapshot(past_deadline_s: float, *, has_snapshot: bool, changes: int, every_changes: int) -> bool:
    """Whether a clean stop ``past_deadline_s`` past STOP_SNAPSHOT_S leaves the start-up snapshot unwritten.

    Only when an older snapshot exists (without one the next start scans RocksDB: ~50 s at 1M) and the next start
    reads at most STOP_CATCH_UP_LIMIT x ``every_changes`` records again from it. Nothing acknowledged depends on the
    snapshot: the start reads every change after the older one's sequence from RocksDB. What lives only in memory
    (eviction grace periods begun since) comes from the older snapshot, as when a stop keeps it.
    """
    if past_deadline_s < 0 or not has_snapshot:
        return False
    return changes <= STOP_CATCH_UP_LIMIT * max(every_changes, 1)


def graph_save_budget_s(budget_s: float, *, waited_s: float, snapshot_s: float) -> float:
    """Seconds a clean stop gives the graph's save: ``close_save_budget_s`` less what the stop already spent waiting
    (a background snapshot it let finish) and less what its own snapshot write is expected to take (this process's
    last one). The snapshot goes first in the budget: skipping the graph's save costs the next start background
    inserts, skipping the snapshot a longer catch-up before serving. At 1M memories under load the two together
    took up to 9 s of a stop (5.9 s of it the graph's save)."""
    return max(budget_s - waited_s - snapshot_s, 0.0)


def _set_scores(records: Sequence[memory_pb2.Memory], scores: Scores) -> None:
    """Copy row i of ``scores`` into ``records[i]``."""
    for record, accuracy, relevance, utility, cost, value in zip(
        records,
        np.asarray(scores.accuracy).tolist(),
        np.asarray(scores.relevance).tolist(),
        np.asarray(scores.utility).tolist(),
        np.asarray(scores.cost).tolist(),
        np.asarray(scores.value).tolist(),
        strict=True,
    ):
        record.scores.accuracy = accuracy
        record.scores.relevance = relevance
        record.scores.utility = utility
        record.scores.cost = cost
        record.scores.value = value
