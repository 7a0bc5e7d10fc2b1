"""The engine: one data directory's RocksDB, hot columns, ANN index and embedder, and the write path.

The gRPC servicer validates and converts requests, then calls the engine.
Every mutation goes through the store's committer (serial, group-committed,
fsynced) and updates the columns and the index only after it is durable.
"""

from __future__ import annotations

import logging
import struct
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

from .config import SidecarConfig
from .domain import NewMemory, from_timestamp, now_s, to_timestamp
from .embedding import Embedder, EmbedderError, make_embedder
from .errors import FailedPrecondition, ResourceExhausted, Unavailable
from .store.columns import STATE_EVICTED, STATE_OBSOLETE, MemoryColumns
from .store.rocks import (
    CF_CHANGELOG,
    CF_ENTITIES,
    CF_FACTS,
    CF_MEMORIES,
    CF_REQUESTS,
    CF_VECTORS,
    META_FRAMEWORK,
    SCHEMA_VERSION,
    RocksStore,
    Txn,
    key_u64,
    u64_key,
)
from .store.vector_index import VectorIndex

log = logging.getLogger(__name__)

# Starting confidence per source until the policy layer (issue 3) makes it configurable.
SOURCE_CONFIDENCE = {
    memory_pb2.MEMORY_SOURCE_TOOL_RESULT: 0.9,
    memory_pb2.MEMORY_SOURCE_USER_STATEMENT: 0.8,
    memory_pb2.MEMORY_SOURCE_AGENT_INFERENCE: 0.6,
    memory_pb2.MEMORY_SOURCE_REFLECTION: 0.6,
    memory_pb2.MEMORY_SOURCE_IMPORT: 0.7,
}

_ID_LIST = struct.Struct(">Q")


def _pack_ids(ids: Sequence[int]) -> bytes:
    return b"".join(_ID_LIST.pack(i) for i in ids)


def _unpack_ids(raw: bytes) -> list[int]:
    return [key_u64(raw[i : i + 8]) for i in range(0, len(raw), 8)]


def _request_key(rpc: str, request_id: str) -> bytes:
    return f"{rpc}\0{request_id}".encode()


def entity_key(namespace: str, entity: str, memory_id: int) -> bytes:
    """Key of the entity index: every memory about an entity, in id order."""
    return f"{namespace}\0{entity}\0".encode() + u64_key(memory_id)


def fact_key(namespace: str, entity: str, attribute: str) -> bytes:
    """Key of the fact-key index: (namespace, entity, attribute) -> current memory id."""
    return f"{namespace}\0{entity}\0{attribute}".encode()


@dataclass(frozen=True)
class Written:
    """The outcome of one stored item: its record, and whether a request id replayed it."""

    memory: memory_pb2.Memory
    outcome: int
    replayed: bool


class Engine:
    """Owns a data directory while the sidecar runs. Thread-safe."""

    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.limits = config.limits
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.embedder: Embedder | None = make_embedder(config.embedder)
        identity = self.embedder.identity if self.embedder is not None else "none"
        dimension = self.embedder.dimension if self.embedder is not None else config.dimension
        if self.embedder is not None and config.dimension and config.dimension != dimension:
            raise FailedPrecondition(
                f"--dimension {config.dimension} disagrees with the embedder's dimension {dimension}",
                reason="DIMENSION_MISMATCH",
            )
        self.store = RocksStore(
            data_dir, dimension=dimension, embedder_identity=identity, group_max=config.commit_group_max
        )
        self.dimension = self.store.dimension
        self.columns = MemoryColumns(max(self.store.next_id, 1024))
        self.index = VectorIndex(data_dir, self.dimension, config.index)
        self._framework_lock = threading.Lock()
        self.framework_version = (self.store.meta(META_FRAMEWORK) or b"").decode()
        self._closed = False
        self._load_columns()
        self._reconcile_index()
        self.index.start(lambda: self.store.last_sequence)

    # ---- start-up ---------------------------------------------------------------------------

    def _load_columns(self) -> None:
        record = memory_pb2.Memory()
        for key, value in self.store.iterate(CF_MEMORIES):
            record.ParseFromString(value)
            self._set_columns_row(key_u64(key), record)

    def _set_columns_row(self, memory_id: int, record: memory_pb2.Memory) -> None:
        self.columns.set_row(
            memory_id,
            state=record.state,
            kind=record.kind,
            namespace=record.namespace,
            entity=record.entity,
            valid_from=from_timestamp(record.valid_from),
            valid_to=from_timestamp(record.valid_to) if record.HasField("valid_to") else float("nan"),
            recorded_at=from_timestamp(record.recorded_at),
            tags=record.tags,
            access_count=record.access_count,
            last_access_at=(
                from_timestamp(record.last_access_at) if record.HasField("last_access_at") else float("nan")
            ),
            last_access_turn=record.last_access_turn,
        )

    def _reconcile_index(self) -> None:
        """Make the graph agree with RocksDB: load it, add what it misses, drop what is gone."""
        loaded = self.index.load()
        live = self.columns.live_ids()
        if loaded:
            in_graph = self.index.graph_contains(live)
            missing = live[~in_graph]
            stale = np.setdiff1d(self.index.graph_keys(), live, assume_unique=False)
            self.index.remove_from_graph_now(stale)
        else:
            missing = live
        if missing.size == 0:
            return
        vectors = self._read_vectors(missing)
        if missing.size <= self.config.index.build_batch:
            self.index.add(missing, vectors)
            return
        log.info("building the ANN index for %d memories from RocksDB", missing.size)
        with tqdm(total=int(missing.size), desc="index rebuild", unit="vec", file=sys.stderr, mininterval=1.0) as bar:
            self.index.bulk_build(missing, vectors, progress=bar.update)
        self.index.save()

    def _read_vectors(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        out = np.empty((ids.size, self.dimension), dtype=np.float32)
        step = 8192
        for start in range(0, ids.size, step):
            chunk = ids[start : start + step]
            raws = self.store.multi_get(CF_VECTORS, [u64_key(int(i)) for i in chunk])
            for row, raw in enumerate(raws):
                if raw is None:
                    raise FailedPrecondition(
                        f"memory {int(chunk[row])} has no vector in RocksDB", reason="DATA_DIR_CORRUPT"
                    )
                out[start + row] = np.frombuffer(raw, dtype="<f4")
        return out

    # ---- writes -----------------------------------------------------------------------------

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
        if self.index.tail_count + count > self.limits.max_fresh_tail:
            raise ResourceExhausted(
                f"the index is {self.index.tail_count} vectors behind (limit {self.limits.max_fresh_tail}); "
                "retry after a short wait",
                reason="INDEX_BACKLOG",
                metadata={"fresh_tail": str(self.index.tail_count)},
            )

    def remember(
        self,
        items: Sequence[NewMemory],
        *,
        batch_request_id: str = "",
        turn: int | None = None,
        rpc: str = "remember",
    ) -> list[Written]:
        """Store items durably in one atomic write; returns one result per item, in order.

        ``batch_request_id`` makes the whole call idempotent; an item's own
        ``request_id`` makes that item idempotent (streams). Raises
        ResourceExhausted under back-pressure and StorageError when RocksDB fails.
        """
        if self._closed:
            raise Unavailable("the sidecar is shutting down", reason="SHUTTING_DOWN")
        self.check_capacity(len(items))
        vectors = self.vectors_for(items)
        return self.store.apply(lambda txn: self._remember_mutation(txn, items, vectors, batch_request_id, turn, rpc))

    def submit_remember(self, items: Sequence[NewMemory], *, turn: int | None = None) -> object:
        """Like :meth:`remember` for per-item request ids, returning a future (streams pipeline chunks)."""
        self.check_capacity(len(items))
        vectors = self.vectors_for(items)
        return self.store.submit(lambda txn: self._remember_mutation(txn, items, vectors, "", turn, "remember"))

    def _remember_mutation(
        self,
        txn: Txn,
        items: Sequence[NewMemory],
        vectors: npt.NDArray[np.float32],
        batch_request_id: str,
        turn: int | None,
        rpc: str,
    ) -> list[Written]:
        if batch_request_id:
            previous = txn.get(CF_REQUESTS, _request_key(rpc, batch_request_id))
            if previous is not None:
                return [Written(m, memory_service_pb2.WRITE_OUTCOME_CREATED, True) for m in self._replay(previous)]
        now = now_s()
        written: list[Written] = []
        fresh_ids: list[int] = []
        fresh_rows: list[int] = []
        records: list[memory_pb2.Memory] = []
        for row, item in enumerate(items):
            if item.request_id:
                previous = txn.get(CF_REQUESTS, _request_key("remember", item.request_id))
                if previous is not None:
                    replayed = self._replay(previous, pending=txn)
                    written.append(Written(replayed[0], memory_service_pb2.WRITE_OUTCOME_CREATED, True))
                    continue
            memory_id = txn.allocate_id()
            sequence = txn.next_sequence()
            record = self._new_record(item, memory_id, sequence, now, turn)
            txn.put(CF_MEMORIES, u64_key(memory_id), record.SerializeToString())
            txn.put(CF_VECTORS, u64_key(memory_id), vectors[row].astype("<f4").tobytes())
            if item.entity:
                txn.put(CF_ENTITIES, entity_key(item.namespace, item.entity, memory_id), b"")
                if item.fact_attribute:
                    txn.put(
                        CF_FACTS,
                        fact_key(item.namespace, item.entity, item.fact_attribute),
                        u64_key(memory_id),
                    )
            event = events_pb2.ChangeEvent(
                sequence=sequence,
                type=events_pb2.CHANGE_EVENT_TYPE_CREATED,
                memory_id=memory_id,
                namespace=item.namespace,
                to_state=memory_pb2.MEMORY_STATE_ACTIVE,
                recorded_at=record.recorded_at,
                reason=rpc,
                request_id=item.request_id or batch_request_id,
                kind=item.kind,
                turn=turn or 0,
            )
            txn.put(CF_CHANGELOG, u64_key(sequence), event.SerializeToString())
            if item.request_id:
                txn.put(CF_REQUESTS, _request_key("remember", item.request_id), _pack_ids([memory_id]))
            written.append(Written(record, memory_service_pb2.WRITE_OUTCOME_CREATED, False))
            fresh_ids.append(memory_id)
            fresh_rows.append(row)
            records.append(record)
        if batch_request_id:
            txn.put(CF_REQUESTS, _request_key(rpc, batch_request_id), _pack_ids([w.memory.id for w in written]))
        ids = np.asarray(fresh_ids, dtype=np.int64)
        fresh_vectors = vectors[fresh_rows]

        def publish() -> None:
            for record in records:
                self._set_columns_row(record.id, record)
            self.index.add(ids, fresh_vectors)

        txn.on_commit(publish)
        return written

    def _replay(self, packed: bytes, pending: Txn | None = None) -> list[memory_pb2.Memory]:
        out = []
        for memory_id in _unpack_ids(packed):
            raw = (
                pending.get(CF_MEMORIES, u64_key(memory_id))
                if pending
                else self.store.get(CF_MEMORIES, u64_key(memory_id))
            )
            record = memory_pb2.Memory()
            if raw is None:
                # Forgotten since: answer with its id and EVICTED state, as the first call's result.
                record.id = memory_id
                record.state = memory_pb2.MEMORY_STATE_EVICTED
            else:
                record.ParseFromString(raw)
            out.append(record)
        return out

    def _new_record(
        self, item: NewMemory, memory_id: int, sequence: int, now: float, turn: int | None
    ) -> memory_pb2.Memory:
        confidence = item.confidence if item.confidence is not None else SOURCE_CONFIDENCE[item.source]
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
            valid_from=to_timestamp(item.valid_from_s if item.valid_from_s is not None else now),
            recorded_at=to_timestamp(now),
            updated_at=to_timestamp(now),
            turn=turn or 0,
            framework_version=(
                item.framework_version if item.framework_version is not None else self.framework_version
            ),
            task_signature=item.task_signature,
            sequence=sequence,
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
        request_id: str = "",
        turn: int | None = None,
    ) -> tuple[list[int], list[int]]:
        """Delete memories (tombstone in the change log) or mark them OBSOLETE; returns (forgotten, missing)."""

        def mutation(txn: Txn) -> tuple[list[int], list[int]]:
            if request_id:
                previous = txn.get(CF_REQUESTS, _request_key("forget", request_id))
                if previous is not None:
                    response = memory_service_pb2.ForgetResponse.FromString(previous)
                    return list(response.forgotten_ids), list(response.missing_ids)
            now = now_s()
            forgotten: list[int] = []
            missing: list[int] = []
            changes: list[tuple[int, int]] = []
            for memory_id in dict.fromkeys(ids):
                raw = txn.get(CF_MEMORIES, u64_key(memory_id))
                if raw is None:
                    missing.append(memory_id)
                    continue
                record = memory_pb2.Memory.FromString(raw)
                if keep_history and record.state == memory_pb2.MEMORY_STATE_OBSOLETE:
                    missing.append(memory_id)
                    continue
                sequence = txn.next_sequence()
                to_state = memory_pb2.MEMORY_STATE_OBSOLETE if keep_history else memory_pb2.MEMORY_STATE_EVICTED
                event = events_pb2.ChangeEvent(
                    sequence=sequence,
                    type=(
                        events_pb2.CHANGE_EVENT_TYPE_STATE_CHANGED
                        if keep_history
                        else events_pb2.CHANGE_EVENT_TYPE_EVICTED
                    ),
                    memory_id=memory_id,
                    namespace=record.namespace,
                    from_state=record.state,
                    to_state=to_state,
                    recorded_at=to_timestamp(now),
                    reason=f"forget: {reason}" if reason else "forget",
                    request_id=request_id,
                    kind=record.kind,
                    turn=turn or 0,
                )
                txn.put(CF_CHANGELOG, u64_key(sequence), event.SerializeToString())
                if keep_history:
                    record.state = to_state
                    record.valid_to.CopyFrom(to_timestamp(now))
                    record.updated_at.CopyFrom(to_timestamp(now))
                    record.sequence = sequence
                    txn.put(CF_MEMORIES, u64_key(memory_id), record.SerializeToString())
                else:
                    txn.delete(CF_MEMORIES, u64_key(memory_id))
                    txn.delete(CF_VECTORS, u64_key(memory_id))
                    if record.entity:
                        txn.delete(CF_ENTITIES, entity_key(record.namespace, record.entity, memory_id))
                if record.entity and record.fact.attribute:
                    key = fact_key(record.namespace, record.entity, record.fact.attribute)
                    if txn.get(CF_FACTS, key) == u64_key(memory_id):
                        txn.delete(CF_FACTS, key)
                forgotten.append(memory_id)
                changes.append((memory_id, to_state))
            if request_id:
                response = memory_service_pb2.ForgetResponse(forgotten_ids=forgotten, missing_ids=missing)
                txn.put(CF_REQUESTS, _request_key("forget", request_id), response.SerializeToString())

            def publish() -> None:
                for memory_id, state in changes:
                    self.columns.set_state(memory_id, state, valid_to=now if state == STATE_OBSOLETE else None)
                evicted = [m for m, s in changes if s == STATE_EVICTED]
                self.index.remove(np.asarray(evicted, dtype=np.int64))

            txn.on_commit(publish)
            return forgotten, missing

        return self.store.apply(mutation)

    # ---- reads ------------------------------------------------------------------------------

    def get(self, ids: Sequence[int], *, include_vectors: bool = False) -> tuple[list[memory_pb2.Memory], list[int]]:
        """Records by id in request order, and the ids that do not exist."""
        keys = [u64_key(i) for i in ids]
        raws = self.store.multi_get(CF_MEMORIES, keys)
        found: list[memory_pb2.Memory] = []
        missing: list[int] = []
        vectors = self.store.multi_get(CF_VECTORS, keys) if include_vectors else [None] * len(keys)
        for memory_id, raw, vector in zip(ids, raws, vectors, strict=True):
            if raw is None:
                missing.append(memory_id)
                continue
            record = memory_pb2.Memory.FromString(raw)
            self.overlay_statistics(record)
            if vector is not None:
                record.vector = vector
            found.append(record)
        return found, missing

    def overlay_statistics(self, record: memory_pb2.Memory) -> None:
        """Fill access statistics from the hot columns (newer than the stored record)."""
        memory_id = record.id
        if memory_id >= self.columns.size:
            return
        record.access_count = int(self.columns.access_count[memory_id])
        last = float(self.columns.last_access_at[memory_id])
        if not np.isnan(last):
            record.last_access_at.CopyFrom(to_timestamp(last))
        record.last_access_turn = int(self.columns.last_access_turn[memory_id])

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
        response.index.indexed_count = self.index.graph_count
        response.index.fresh_tail_count = self.index.tail_count
        response.index.saved_sequence = self.index.saved_sequence
        if self.index.saved_at:
            response.index.saved_at.CopyFrom(to_timestamp(self.index.saved_at))
        return response

    # ---- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the index builder and save it, then close RocksDB. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.index.close(save=True)
        self.store.close()
        if self.embedder is not None:
            self.embedder.close()
