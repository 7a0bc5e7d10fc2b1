"""Consolidation: find groups of similar memories, fold a group into one ABSTRACTION memory, and undo it.

Cluster detection is incremental. Each pass takes the memories written since
the last pass (a watermark id kept in the data directory) plus those whose
statistics changed, asks the ANN index for each one's nearest neighbours and
lets the linking kernel (``memevo.kernels.clusters``) join the pairs that are
similar enough and belong to the same group — same namespace, kind and entity,
or for strategies the same task signature. Work is proportional to the new
memories, never to the store.

Folding a group is one RocksDB write batch: the abstraction (with member
count, summed outcome statistics and provenance), every member's move to
CONSOLIDATED with its ``consolidated_into`` link, and the change-log events.
``unconsolidate`` reverses it in one batch as well: the members become ACTIVE,
the abstraction OBSOLETE.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memevo.kernels.clusters import components, link_neighbours
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

from ..domain import now_s, to_timestamp
from ..engine import Engine
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from ..idempotency import RequestKey, id_of
from ..policy import ConsolidationSettings
from ..retrieval.lexical import searchable_text
from ..store.rocks import CF_MEMORIES, CF_META, CF_VECTORS, Txn, key_u64, u64_key
from ..store.vector_digests import put_vector
from ..store.vector_index import Matches, normalize_rows

log = logging.getLogger(__name__)

META_WATERMARK = b"cluster_watermark"
"""The highest memory id a cluster pass has looked at (8 bytes, big-endian)."""
SEEDS_PER_PASS = 4096
SEEDS_PER_BLOCK = 256
"""Seeds searched between two looks at the stop flag: a shutdown waits for one block, not a whole pass."""
"""Most seeds one pass looks at; the rest wait for the next pass (bounds a pass after a large import)."""
MAX_TAIL_FOR_PASS = 0
"""Background passes wait while the fresh tail holds more vectors than this: every block of seeds scans the
whole tail, and a burst of writes needs the cores more. The new memories are looked at (the watermark keeps
its place) once the builder has caught up; an explicit Govern runs a pass regardless. It was 4,096: at the end
of a bulk load the passes then started while the builder still had ~4k vectors to insert, and slowed it 5-10x
(its search calls and the builder's add() calls take turns): those last vectors took 34 s of 199-263 s to fully
searchable at 100k, 107 s of 286-294 s at 50k under load (benchmarks/bulk_ingest.py; issue 41, item 7)."""
MAX_TAGS = 32
"""Most tags an abstraction inherits from its members (the most common first)."""

_CONSOLIDATABLE_STATES = (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED)

TxnHook = Callable[[Txn], None]
"""Extra writes that must land in the same batch as a consolidation (the proposal's settlement)."""


@dataclass(frozen=True)
class PassResult:
    """What one cluster pass looked at and found."""

    seeds: int
    groups: list[list[int]]


def _eligible(record: memory_pb2.Memory, settings: ConsolidationSettings) -> bool:
    return (
        record.state in _CONSOLIDATABLE_STATES
        and record.kind in settings.kinds
        and record.kind != memory_pb2.MEMORY_KIND_ABSTRACTION
        and not record.fact.attribute
        and not record.consolidated_into
    )


def _group_key(record: memory_pb2.Memory) -> tuple[str, int, str, str]:
    # Strategies group by task signature alone; everything else by entity (empty entity = one group).
    if record.kind == memory_pb2.MEMORY_KIND_STRATEGY and record.task_signature:
        return (record.namespace, record.kind, "", record.task_signature)
    return (record.namespace, record.kind, record.entity, "")


class ClusterFinder:
    """Incremental cluster detection over the ANN neighbours of new and changed memories. Thread-safe."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._changed: set[int] = set()
        raw = engine.store.meta(META_WATERMARK)
        self.watermark = key_u64(raw) if raw else 0

    def note_changed(self, ids: Iterable[int]) -> None:
        """Memories whose statistics changed: look at their neighbourhood again at the next pass."""
        size = self.engine.columns.size
        with self._lock:
            # Only ids that are stored: a request may name ids that never existed (up to 2^64 - 1).
            self._changed.update(i for i in ids if 0 < i < size)

    def find(
        self, settings: ConsolidationSettings, *, exclude: set[int], stopping: Callable[[], bool] | None = None
    ) -> PassResult:
        """Groups of at least ``min_group_size`` similar, eligible memories among the new ones' neighbourhoods.

        ``exclude``: ids already in an open proposal. Advances the watermark. When ``stopping()`` turns true
        between blocks of seeds (a shutdown), it returns no groups and leaves the watermark and the changed
        memories for the next pass.
        """
        engine = self.engine
        columns = engine.columns
        with self._lock:
            top = columns.size - 1
            fresh = np.arange(self.watermark + 1, top + 1, dtype=np.int64)[:SEEDS_PER_PASS]
            changed = np.fromiter(self._changed, dtype=np.int64, count=len(self._changed))
            self._changed.clear()
        new_watermark = int(fresh[-1]) if fresh.size else self.watermark
        seeds = np.union1d(fresh, changed)
        seeds = seeds[(seeds > 0) & (seeds < columns.size)]
        kinds = np.asarray(sorted(settings.kinds), dtype=np.uint8)
        state = columns.state[seeds]
        keep = ((state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)) & np.isin(
            columns.kind[seeds], kinds
        )
        seeds = seeds[keep]
        if exclude:
            seeds = seeds[~np.isin(seeds, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))]
        groups = self._groups(seeds, settings, exclude, stopping) if seeds.size else []
        if groups is None:
            self.note_changed(changed.tolist())
            return PassResult(0, [])
        if new_watermark != self.watermark:
            self._save_watermark(new_watermark)
        return PassResult(int(seeds.size), groups)

    def advance(self, watermark: int) -> None:
        """Treat every memory up to ``watermark`` as already looked at (benchmarks; imports that need no pass)."""
        with self._lock:
            self._save_watermark(max(watermark, self.watermark))

    def _save_watermark(self, watermark: int) -> None:
        def mutation(txn: Txn) -> None:
            txn.put(CF_META, META_WATERMARK, u64_key(watermark))

        self.engine.store.apply(mutation)
        self.watermark = watermark

    def _groups(
        self,
        seeds: npt.NDArray[np.int64],
        settings: ConsolidationSettings,
        exclude: set[int],
        stopping: Callable[[], bool] | None,
    ) -> list[list[int]] | None:
        """The groups around ``seeds``; None when ``stopping()`` turned true between blocks of seeds."""
        engine = self.engine
        columns = engine.columns
        k = settings.max_group_size
        neighbour_ids = np.full((seeds.size, k), -1, dtype=np.int64)
        neighbour_sims = np.zeros((seeds.size, k), dtype=np.float32)
        found_rows: list[Matches] = []
        for start in range(0, seeds.size, SEEDS_PER_BLOCK):
            if stopping is not None and stopping():
                return None
            vectors = engine._read_vectors(seeds[start : start + SEEDS_PER_BLOCK])
            found_rows += engine.index.search_many(normalize_rows(vectors), k + 1)
        for row, found in enumerate(found_rows):
            close = found.similarities >= settings.similarity
            ids, sims = found.ids[close], found.similarities[close]
            if ids.size > k:
                best = np.argpartition(-sims, k - 1)[:k]
                ids, sims = ids[best], sims[best]
            neighbour_ids[row, : ids.size] = ids
            neighbour_sims[row, : ids.size] = sims
        # Cheap column filters first; the records (fact key, signature) only for the survivors.
        nodes = np.unique(np.concatenate([seeds, neighbour_ids[neighbour_ids > 0]]))
        nodes = nodes[nodes < columns.size]
        same_kind = np.isin(columns.kind[nodes], np.asarray(sorted(settings.kinds), dtype=np.uint8))
        state = columns.state[nodes]
        live = (state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)
        nodes = nodes[same_kind & live]
        if exclude:
            nodes = nodes[~np.isin(nodes, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))]
        records, _ = engine.get(nodes.tolist())
        by_id = {r.id: r for r in records if _eligible(r, settings)}
        node_ids = np.asarray(sorted(by_id), dtype=np.int64)
        if node_ids.size < settings.min_group_size:
            return []
        position = {int(i): p for p, i in enumerate(node_ids.tolist())}
        codes: dict[tuple[str, int, str, str], int] = {}
        group_codes = np.asarray([codes.setdefault(_group_key(by_id[i]), len(codes)) for i in node_ids.tolist()])
        local_seeds = np.asarray([position.get(int(s), -1) for s in seeds.tolist()], dtype=np.int64)
        local_neighbours = np.vectorize(lambda i: position.get(int(i), -1), otypes=[np.int64])(neighbour_ids)
        labels = link_neighbours(
            local_seeds,
            local_neighbours.astype(np.int64),
            neighbour_sims,
            group_codes.astype(np.int64),
            settings.similarity,
        )
        groups: list[list[int]] = []
        for component in components(labels):
            members = sorted(int(node_ids[p]) for p in component)
            for start in range(0, len(members), settings.max_group_size):
                chunk = members[start : start + settings.max_group_size]
                if len(chunk) >= settings.min_group_size:
                    groups.append(chunk)
        return groups


def _merged(members: Sequence[memory_pb2.Memory], field: str) -> str:
    values = {getattr(m, field) for m in members}
    return values.pop() if len(values) == 1 else ""


def consolidate(
    engine: Engine,
    member_ids: Sequence[int],
    text: str,
    *,
    decided_by: str,
    proposal_id: str = "",
    hook: TxnHook | None = None,
) -> memory_pb2.Memory | None:
    """Fold the members into one new ABSTRACTION memory with ``text``, atomically; returns it.

    Members that changed since the proposal (no longer ACTIVE or ARCHIVED,
    already consolidated, gone) are left out; with fewer than two left,
    nothing is written and None is returned. ``hook`` adds writes to the same
    batch.
    """
    ids = list(dict.fromkeys(int(i) for i in member_ids))
    raw_vectors = engine.store.multi_get(CF_VECTORS, [u64_key(i) for i in ids])
    vector_of = {i: np.frombuffer(raw, dtype="<f4") for i, raw in zip(ids, raw_vectors, strict=True) if raw is not None}

    def mutation(txn: Txn) -> memory_pb2.Memory | None:
        members: list[memory_pb2.Memory] = []
        for memory_id in ids:
            raw = txn.get(CF_MEMORIES, u64_key(memory_id))
            if raw is None or memory_id not in vector_of:
                continue
            record = memory_pb2.Memory.FromString(raw)
            if (
                record.state in _CONSOLIDATABLE_STATES
                and record.kind != memory_pb2.MEMORY_KIND_ABSTRACTION
                and not record.consolidated_into
            ):
                members.append(record)
        if hook is not None:
            hook(txn)
        if len(members) < 2:
            return None
        now = now_s()
        abstraction_id = txn.allocate_id()
        vector = np.mean(np.stack([vector_of[m.id] for m in members]), axis=0)
        norm = float(np.linalg.norm(vector))
        vector = (vector / norm if norm > 0 else vector_of[members[0].id]).astype(np.float32)
        tag_counts: dict[str, int] = {}
        for m in members:
            for tag in m.tags:
                tag_counts[tag] = tag_counts.get(tag, 0) + 1
        tags = sorted(tag_counts, key=lambda t: (-tag_counts[t], t))[:MAX_TAGS]
        abstraction = memory_pb2.Memory(
            id=abstraction_id,
            namespace=members[0].namespace,
            kind=memory_pb2.MEMORY_KIND_ABSTRACTION,
            state=memory_pb2.MEMORY_STATE_ACTIVE,
            content=text,
            entity=_merged(members, "entity"),
            topic=_merged(members, "topic"),
            source=memory_pb2.MEMORY_SOURCE_REFLECTION,
            confidence=float(np.mean([m.confidence for m in members])),
            importance=max(m.importance for m in members),
            tags=tags,
            valid_from=min((m.valid_from for m in members), key=lambda t: (t.seconds, t.nanos)),
            recorded_at=to_timestamp(now),
            updated_at=to_timestamp(now),
            framework_version=engine.framework_version,
            task_signature=_merged(members, "task_signature"),
            members=[m.id for m in members],
            successes=float(sum(m.successes for m in members)),
            failures=float(sum(m.failures for m in members)),
        )
        abstraction.metadata["consolidated_by"] = decided_by[:128]
        if proposal_id:
            abstraction.metadata["proposal_id"] = proposal_id
        member_ids_now = [m.id for m in members]
        why = f"consolidated {len(members)} memories ({decided_by})"
        engine.save(
            txn,
            abstraction,
            before=memory_pb2.MEMORY_STATE_UNSPECIFIED,
            reason=why,
            turn=None,
            related=member_ids_now,
            event_type=events_pb2.CHANGE_EVENT_TYPE_CONSOLIDATED,
            detail=proposal_id,
        )
        put_vector(txn, abstraction.namespace, abstraction_id, vector)
        engine.perceiver.register(txn, abstraction)
        for member in members:
            before = member.state
            member.state = memory_pb2.MEMORY_STATE_CONSOLIDATED
            member.consolidated_into = abstraction_id
            member.updated_at.CopyFrom(to_timestamp(now))
            engine.save(
                txn,
                member,
                before=before,
                reason=f"consolidated into {abstraction_id}",
                turn=None,
                related=[abstraction_id],
            )

        def publish() -> None:
            for member in members:
                engine.columns.set_record(member)
            engine.columns.set_record(abstraction)
            engine.lexical.add(abstraction.namespace, abstraction_id, searchable_text(abstraction))
            engine.index.add(np.asarray([abstraction_id], dtype=np.int64), vector[None, :])

        txn.on_commit(publish)
        return abstraction

    return engine.store.apply(mutation)


def unconsolidate(engine: Engine, abstraction_id: int, *, request: RequestKey | None = None) -> list[int]:
    """Undo a consolidation: the members become ACTIVE again, the abstraction OBSOLETE; returns the members' ids.

    NotFound when the memory does not exist; FailedPrecondition when it is no
    ABSTRACTION or was already undone.
    """
    if abstraction_id <= 0:
        raise InvalidArgument.field("abstraction_id", "required: the id of an ABSTRACTION memory")

    request_id = id_of(request)

    def mutation(txn: Txn) -> list[int]:
        previous = request.previous(txn) if request is not None else None
        if previous is not None:
            return list(memory_service_pb2.UnconsolidateResponse.FromString(previous).restored_ids)
        raw = txn.get(CF_MEMORIES, u64_key(abstraction_id))
        if raw is None:
            raise NotFound(
                f"abstraction_id: memory {abstraction_id} does not exist", metadata={"field": "abstraction_id"}
            )
        abstraction = memory_pb2.Memory.FromString(raw)
        if abstraction.kind != memory_pb2.MEMORY_KIND_ABSTRACTION or not abstraction.members:
            raise FailedPrecondition(
                f"memory {abstraction_id} is a {memory_pb2.MemoryKind.Name(abstraction.kind)}, not an abstraction "
                "with members",
                reason="NOT_AN_ABSTRACTION",
            )
        if abstraction.state == memory_pb2.MEMORY_STATE_OBSOLETE:
            raise FailedPrecondition(
                f"abstraction {abstraction_id} was already undone or superseded", reason="ALREADY_UNCONSOLIDATED"
            )
        now = now_s()
        restored: list[memory_pb2.Memory] = []
        for member_id in abstraction.members:
            member_raw = txn.get(CF_MEMORIES, u64_key(member_id))
            if member_raw is None:
                continue
            member = memory_pb2.Memory.FromString(member_raw)
            if member.state != memory_pb2.MEMORY_STATE_CONSOLIDATED or member.consolidated_into != abstraction_id:
                continue
            member.state = memory_pb2.MEMORY_STATE_ACTIVE
            member.consolidated_into = 0
            member.updated_at.CopyFrom(to_timestamp(now))
            engine.save(
                txn,
                member,
                before=memory_pb2.MEMORY_STATE_CONSOLIDATED,
                reason=f"unconsolidated from {abstraction_id}",
                turn=None,
                related=[abstraction_id],
                request_id=request_id,
            )
            restored.append(member)
        before = abstraction.state
        abstraction.state = memory_pb2.MEMORY_STATE_OBSOLETE
        abstraction.valid_to.CopyFrom(to_timestamp(now))
        abstraction.updated_at.CopyFrom(to_timestamp(now))
        restored_ids = [m.id for m in restored]
        engine.save(
            txn,
            abstraction,
            before=before,
            reason=f"unconsolidated: {len(restored_ids)} members restored",
            turn=None,
            related=restored_ids,
            request_id=request_id,
            event_type=events_pb2.CHANGE_EVENT_TYPE_UNCONSOLIDATED,
        )
        if request is not None:
            request.record(txn, memory_service_pb2.UnconsolidateResponse(restored_ids=restored_ids).SerializeToString())

        def publish() -> None:
            for member in restored:
                engine.columns.set_record(member)
            engine.columns.set_record(abstraction)

        txn.on_commit(publish)
        return restored_ids

    return engine.store.apply(mutation)


def unconsolidate_response(restored: Sequence[int]) -> memory_service_pb2.UnconsolidateResponse:
    """The wire answer of Unconsolidate."""
    return memory_service_pb2.UnconsolidateResponse(restored_ids=list(restored))
