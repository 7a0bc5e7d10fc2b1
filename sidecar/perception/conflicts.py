"""Change detection at write time: hard conflicts on fact keys, soft conflicts and duplicates.

Runs under the store's commit lock (one mutation at a time), so its reads and
the writes it decides are serial. It decides deterministically where the
structure allows (a fact key), and only nudges scores where it does not (a
near-duplicate that disagrees raises the older memory's inconsistency).

Because it runs in the serial section of every write, it keeps what never
changes about a memory in RAM: the unit vectors of recently written entity
memories (the soft-conflict candidates of hot entities) and, per fact version,
its world time and normalised value. Both are keyed by memory id and filled
only with durable ids (an id of a write that failed is handed out again), and
everything that can change (state, links, confidence) is still read from the
record or the hot columns.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2

from ..domain import from_timestamp, to_timestamp
from ..policy import PerceptionSettings
from ..store.columns import NO_CODE, MemoryColumns
from ..store.rocks import CF_DEDUP, CF_ENTITIES, CF_FACT_VERSIONS, CF_FACTS, CF_MEMORIES, CF_VECTORS, Txn, key_u64

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
CURRENT_STATES = (ACTIVE, ARCHIVED)
REPEATABLE_KINDS = (memory_pb2.MEMORY_KIND_EPISODE,)
"""Kinds whose identical text is a new event, not a restatement: never merged by text alone."""

SOFT_CONFLICT_CANDIDATES = 256
"""Most recent memories of an entity compared with a new one: bounds the write's cost."""
VECTOR_CACHE_BYTES = 32 * 2**20
"""RAM for unit vectors of recently written entity memories (soft-conflict candidates skip RocksDB)."""
VERSION_CACHE_ENTRIES = 500_000
"""Fact versions whose world time and normalised value are kept in RAM (about 150 bytes each)."""
INCONSISTENCY_STEP = 0.5
"""Inconsistency added by a soft conflict at similarity 1 (scaled down linearly to the threshold)."""
CONFIRM_CONFIDENCE_GAIN = 0.2
"""A restatement moves confidence this share of the way to 1."""

_PUNCTUATION = re.compile(r"[\W_]+", re.UNICODE)


def normalise_text(text: str) -> str:
    """Case-, width- and punctuation-insensitive form, for "the same statement" checks."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCTUATION.sub(" ", folded).split())


def fact_key(namespace: str, entity: str, attribute: str) -> bytes:
    """Key of the fact-key index: (namespace, entity, attribute) -> current memory id."""
    return f"{namespace}\0{entity}\0{attribute}".encode()


def entity_prefix(namespace: str, entity: str) -> bytes:
    """Prefix of the entity index keys of one entity."""
    return f"{namespace}\0{entity}\0".encode()


def dedup_key(namespace: str, kind: int, content: str) -> bytes:
    """Key of the exact-duplicate index."""
    digest = hashlib.blake2b(normalise_text(content).encode(), digest_size=16).digest()
    return f"{namespace}\0{kind}\0".encode() + digest


@dataclass
class Decision:
    """What perception decided for one new memory."""

    confirm: memory_pb2.Memory | None = None
    """An existing memory the write restates: confirm it instead of storing a new one."""
    outcome: str = "created"
    """"created", "superseded", "backdated" or "confirmed"."""
    updated: list[tuple[memory_pb2.Memory, int, str]] = field(default_factory=list)
    """Other memories changed: (new record, state before, reason)."""


def _load(txn: Txn, memory_id: int) -> memory_pb2.Memory | None:
    raw = txn.get(CF_MEMORIES, memory_id.to_bytes(8, "big"))
    return None if raw is None else memory_pb2.Memory.FromString(raw)


def _confirm(existing: memory_pb2.Memory, restatement: memory_pb2.Memory, decision: Decision, now: float) -> Decision:
    before = existing.state
    existing.confidence = existing.confidence + (1.0 - existing.confidence) * CONFIRM_CONFIDENCE_GAIN
    existing.updated_at.CopyFrom(to_timestamp(now))  # the access it counts as is recorded by the engine
    said_at = from_timestamp(restatement.valid_from)
    if said_at > _confirmed_at(existing):
        existing.confirmed_valid_at.CopyFrom(restatement.valid_from)
    decision.confirm = existing
    decision.outcome = "confirmed"
    decision.updated.append((existing, before, "confirmed by restatement"))
    return decision


def _confirmed_at(record: memory_pb2.Memory) -> float:
    """World time up to which the record is known to hold: its latest confirmation, else its start."""
    start = from_timestamp(record.valid_from)
    return max(start, from_timestamp(record.confirmed_valid_at)) if record.HasField("confirmed_valid_at") else start


def unit_rows(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to length 1, in float32 (the same numbers whether a row comes alone or with others)."""
    out: npt.NDArray[np.float32] = matrix.astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


class RecentVectors:
    """Unit vectors of recently stored memories, by id: a direct-mapped ring over the dense ids.

    Slot ``id % capacity`` holds the newest id put there, so the ring keeps about
    the last ``capacity`` ids (older ids that were looked up stay until a newer id
    needs their slot). Vectors never change once stored, so an entry stays valid;
    callers put only durable ids. Not thread-safe: used under the commit lock.
    """

    def __init__(self, budget_bytes: int = VECTOR_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._ids = np.zeros(0, dtype=np.int64)
        self._vectors = np.zeros((0, 0), dtype=np.float32)

    def _ready(self, dimension: int) -> bool:
        if self._vectors.shape[1] != dimension:
            capacity = self.budget_bytes // max(4 * dimension, 1)
            if capacity <= 0:
                return False
            self._ids = np.full(capacity, -1, dtype=np.int64)
            self._vectors = np.zeros((capacity, dimension), dtype=np.float32)  # pages are touched on first use
        return True

    def put(self, ids: npt.NDArray[np.int64], units: npt.NDArray[np.float32]) -> None:
        """Remember the unit vectors of durable ``ids`` (a newer id keeps its slot)."""
        if ids.size == 0 or not self._ready(units.shape[1]):
            return
        slots = ids % self._ids.size
        newer = self._ids[slots] <= ids
        self._ids[slots[newer]] = ids[newer]
        self._vectors[slots[newer]] = units[newer]

    def get(self, ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32]]:
        """Which ``ids`` are held, and their vectors (rows of the misses are garbage)."""
        if self._ids.size == 0:
            return np.zeros(ids.size, dtype=bool), np.zeros((ids.size, 0), dtype=np.float32)
        slots = ids % self._ids.size
        return self._ids[slots] == ids, self._vectors[slots]


class _Version:
    """One version of a fact key, its record read only when a decision needs more than time and value."""

    __slots__ = ("_record", "_txn", "memory_id", "state", "valid_from_s", "value")

    def __init__(
        self,
        txn: Txn,
        memory_id: int,
        valid_from_s: float,
        value: str,
        state: int,
        record: memory_pb2.Memory | None = None,
    ) -> None:
        self._txn = txn
        self.memory_id = memory_id
        self.valid_from_s = valid_from_s
        self.value = value
        self.state = state
        """From the record when it was read, else from the hot columns (which mirror it once published)."""
        self._record = record

    def record(self) -> memory_pb2.Memory:
        """The full record (read once; perception changes it in place)."""
        if self._record is None:
            self._record = _load(self._txn, self.memory_id)
            if self._record is None:  # pragma: no cover - the version index and the records are written together
                raise KeyError(f"fact version {self.memory_id} has no record")
            self.state = self._record.state
        return self._record


class Perceiver:
    """Decides how a new memory relates to what is stored."""

    def __init__(
        self,
        settings: PerceptionSettings,
        columns: MemoryColumns | None = None,
        *,
        vector_cache_bytes: int = VECTOR_CACHE_BYTES,
        version_cache_entries: int = VERSION_CACHE_ENTRIES,
    ) -> None:
        self.settings = settings
        self.columns = columns
        """The hot columns, when available: candidates come from them instead of a prefix scan."""
        self.recent_vectors = RecentVectors(vector_cache_bytes)
        """Unit vectors of recent entity memories, so soft-conflict checks of busy entities skip RocksDB."""
        self._version_keys: dict[int, tuple[float, str]] = {}
        """Durable fact version id -> (valid_from in seconds, normalised value): neither ever changes."""
        self.version_cache_entries = version_cache_entries
        """Most entries of ``_version_keys`` (0 = read every version's record at every keyed write)."""

    def _recent_about(self, txn: Txn, record: memory_pb2.Memory, prefix: bytes) -> list[int]:
        """The most recent stored memories about the record's entity in its namespace, newest first."""
        columns = self.columns
        if columns is None:
            keys = txn.prefix_keys(CF_ENTITIES, prefix, newest_first=True, limit=SOFT_CONFLICT_CANDIDATES)
            return [key_u64(k[-8:]) for k in keys]
        entity = columns.entities.lookup(record.entity)
        namespace = columns.namespaces.lookup(record.namespace)
        if entity == NO_CODE or namespace == NO_CODE:
            return []
        ids = columns.entity_ids(entity)
        ids = ids[ids < columns.size]
        # Newest first, a window at a time: a busy entity has thousands of ids and most are current.
        found: list[npt.NDArray[np.int64]] = []
        count, end, window = 0, ids.size, 2 * SOFT_CONFLICT_CANDIDATES
        while end > 0 and count < SOFT_CONFLICT_CANDIDATES:
            chunk = ids[max(0, end - window) : end]
            state = columns.state[chunk]
            chunk = chunk[(columns.namespace[chunk] == namespace) & ((state == ACTIVE) | (state == ARCHIVED))]
            found.append(chunk[::-1])
            count += chunk.size
            end -= window
            window *= 4
        if not found:
            return []
        recent: list[int] = np.concatenate(found)[:SOFT_CONFLICT_CANDIDATES].tolist()
        return recent

    def perceive(self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float) -> Decision:
        """Classify ``record`` (not yet stored, id assigned) and adjust it and its neighbours."""
        decision = Decision()
        if record.fact.attribute and record.entity:
            return self._hard(txn, record, now, decision)
        duplicate = self._exact_duplicate(txn, record) if record.kind not in REPEATABLE_KINDS else None
        if duplicate is not None:
            return _confirm(duplicate, record, decision, now)
        if record.entity:
            return self._soft(txn, record, vector, now, decision)
        return decision

    def register(self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32] | None = None) -> None:
        """Index a stored record for later perception (dedup key, fact versions, entity).

        ``vector``, the record's vector when the caller has it at hand, is kept in RAM once the write is durable.
        """
        if record.entity and vector is not None:
            ids = np.asarray([record.id], dtype=np.int64)
            units = unit_rows(vector.reshape(1, -1))
            txn.on_commit(lambda: self.recent_vectors.put(ids, units))
        if not record.fact.attribute and record.kind not in REPEATABLE_KINDS:
            txn.put(CF_DEDUP, dedup_key(record.namespace, record.kind, record.content), record.id.to_bytes(8, "big"))
        if record.entity:
            prefix = entity_prefix(record.namespace, record.entity)
            txn.put(CF_ENTITIES, prefix + record.id.to_bytes(8, "big"), b"")
            txn.add_pending(CF_ENTITIES, prefix, record.id)
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            txn.put(CF_FACT_VERSIONS, key + b"\0" + record.id.to_bytes(8, "big"), b"")
            txn.add_pending(CF_FACT_VERSIONS, key, record.id)
            if record.state in CURRENT_STATES:
                txn.put(CF_FACTS, key, record.id.to_bytes(8, "big"))

    def unregister(self, txn: Txn, record: memory_pb2.Memory) -> None:
        """Drop a deleted record from the perception indexes."""
        key_id = record.id.to_bytes(8, "big")
        if not record.fact.attribute and record.kind not in REPEATABLE_KINDS:
            dedup = dedup_key(record.namespace, record.kind, record.content)
            if txn.get(CF_DEDUP, dedup) == key_id:
                txn.delete(CF_DEDUP, dedup)
        if record.entity:
            txn.delete(CF_ENTITIES, entity_prefix(record.namespace, record.entity) + key_id)
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            txn.delete(CF_FACT_VERSIONS, key + b"\0" + key_id)

    def release_current(self, txn: Txn, record: memory_pb2.Memory) -> None:
        """If ``record`` was its fact key's current value, the key has no current value any more."""
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            if txn.get(CF_FACTS, key) == record.id.to_bytes(8, "big"):
                txn.delete(CF_FACTS, key)

    # ---- hard conflicts ---------------------------------------------------------------------

    def versions(self, txn: Txn, key: bytes) -> list[memory_pb2.Memory]:
        """Every stored version of a fact key, oldest valid_from first."""
        ids = [key_u64(k[-8:]) for k in txn.prefix_keys(CF_FACT_VERSIONS, key + b"\0")]
        ids += [i for i in txn.pending(CF_FACT_VERSIONS, key) if i not in ids]
        records = [r for r in (_load(txn, i) for i in ids) if r is not None]
        return sorted(records, key=lambda r: (from_timestamp(r.valid_from), r.id))

    def _versions(self, txn: Txn, key: bytes) -> list[_Version]:
        """Every version of a fact key, oldest valid_from first, reading records only where needed.

        A version this group wrote is read from the overlay; a durable one takes its
        time and value from RAM (read once) and its state from the hot columns.
        """
        durable = [key_u64(k[-8:]) for k in txn.prefix_keys(CF_FACT_VERSIONS, key + b"\0")]
        known = set(durable)
        pending = [i for i in txn.pending(CF_FACT_VERSIONS, key) if i not in known]
        columns = self.columns
        cache = self._version_keys
        out: list[_Version] = []
        for memory_id in durable + pending:
            slot = memory_id.to_bytes(8, "big")
            cached = cache.get(memory_id)
            if (
                cached is not None
                and columns is not None
                and memory_id < columns.size
                and not txn.in_group(CF_MEMORIES, slot)
            ):
                out.append(_Version(txn, memory_id, cached[0], cached[1], int(columns.state[memory_id])))
                continue
            loaded = _load(txn, memory_id)
            if loaded is None:
                continue
            valid_from_s, value = from_timestamp(loaded.valid_from), normalise_text(loaded.fact.value)
            if memory_id in known and self.version_cache_entries > 0:
                cache[memory_id] = (valid_from_s, value)
            out.append(_Version(txn, memory_id, valid_from_s, value, loaded.state, loaded))
        if len(cache) > self.version_cache_entries:
            for stale in list(itertools.islice(cache, len(cache) // 2)):  # oldest entries first
                del cache[stale]
        out.sort(key=lambda v: (v.valid_from_s, v.memory_id))
        return out

    def _hard(self, txn: Txn, record: memory_pb2.Memory, now: float, decision: Decision) -> Decision:
        key = fact_key(record.namespace, record.entity, record.fact.attribute)
        versions = self._versions(txn, key)
        value = normalise_text(record.fact.value)
        new_from = from_timestamp(record.valid_from)
        multi = self.settings.is_multi_valued(record.namespace, record.fact.attribute)
        for version in versions:
            # The same value restated: confirm it (current) or the identical historical entry.
            if version.value != value or not (version.state in CURRENT_STATES or version.valid_from_s == new_from):
                continue
            existing = version.record()  # authoritative state: confirm only what the record says
            if existing.state in CURRENT_STATES or version.valid_from_s == new_from:
                return _confirm(existing, record, decision, now)
        if multi:
            return decision
        raw_current = txn.get(CF_FACTS, key)
        current = _load(txn, key_u64(raw_current)) if raw_current else None
        if current is not None and current.state not in CURRENT_STATES:
            current = None
        if current is None:
            return decision
        current_from = from_timestamp(current.valid_from)
        if current_from < new_from < _confirmed_at(current):
            return self._overruled(record, current, now, decision)
        if new_from > current_from or (new_from == current_from and record.confidence > current.confidence):
            before = current.state
            current.state = OBSOLETE
            current.valid_to.CopyFrom(record.valid_from)
            current.superseded_by = record.id
            current.updated_at.CopyFrom(to_timestamp(now))
            record.supersedes.append(current.id)
            decision.outcome = "superseded"
            decision.updated.append((current, before, f"superseded by memory {record.id}"))
            return decision
        return self._backdate(record, versions, new_from, now, decision)

    def _overruled(
        self, record: memory_pb2.Memory, current: memory_pb2.Memory, now: float, decision: Decision
    ) -> Decision:
        """A late value from after the current one started but before a restatement said the current one held.

        "It turns out Olga took over on the 22nd" after "Double-checked on the 24th: Jana leads it": Olga's
        value held at most until the 24th. History, closed at that confirmation, superseded by the current.
        """
        record.state = OBSOLETE
        record.valid_to.CopyFrom(current.confirmed_valid_at)
        record.superseded_by = current.id
        current.supersedes.append(record.id)
        current.updated_at.CopyFrom(to_timestamp(now))
        decision.updated.append((current, current.state, f"now supersedes late fact {record.id}"))
        decision.outcome = "backdated"
        return decision

    def _backdate(
        self,
        record: memory_pb2.Memory,
        versions: list[_Version],
        new_from: float,
        now: float,
        decision: Decision,
    ) -> Decision:
        """A late-arriving older value: history, closed by the next newer version, never current."""
        later = [v for v in versions if v.valid_from_s >= new_from]
        first_from = min(v.valid_from_s for v in later)
        tied = [v.record() for v in later if v.valid_from_s == first_from]
        # Among versions of the same world time, the one that won (current, else most trusted) closes it.
        successor = next((v for v in tied if v.state in CURRENT_STATES), max(tied, key=lambda v: v.confidence))
        record.state = OBSOLETE
        record.valid_to.CopyFrom(successor.valid_from)
        record.superseded_by = successor.id
        earlier = [v for v in versions if v.valid_from_s < new_from]
        # Links stay two-way: the successor now supersedes the late fact, in place of its old predecessor.
        replaced = [i for i in successor.supersedes if not earlier or i != earlier[-1].memory_id]
        if earlier and earlier[-1].record().superseded_by != successor.id:
            replaced.append(earlier[-1].memory_id)  # the predecessor was not linked to the successor: keep its link
        del successor.supersedes[:]
        successor.supersedes.extend([*replaced, record.id])
        successor.updated_at.CopyFrom(to_timestamp(now))
        decision.updated.append((successor, successor.state, f"now supersedes late fact {record.id}"))
        if earlier:
            predecessor = earlier[-1].record()
            closes_after = not predecessor.HasField("valid_to") or from_timestamp(predecessor.valid_to) > new_from
            if closes_after:
                before = predecessor.state
                predecessor.valid_to.CopyFrom(record.valid_from)
                predecessor.superseded_by = record.id
                predecessor.updated_at.CopyFrom(to_timestamp(now))
                record.supersedes.append(predecessor.id)
                decision.updated.append((predecessor, before, f"validity closed by late fact {record.id}"))
        decision.outcome = "backdated"
        return decision

    # ---- duplicates and soft conflicts ------------------------------------------------------

    def _unit_vectors(self, txn: Txn, ids: list[int], durable: int) -> tuple[list[int], npt.NDArray[np.float32]]:
        """The ids that have a vector, in order, and their unit vectors (one row each).

        The first ``durable`` ids are published, hence durable: their vectors come
        from RAM when held there, and those read from RocksDB are kept for the next
        write. (One evicted earlier in this group may still come from RAM; its record
        is gone from the overlay, so it is skipped like a missing vector would be.)
        """
        wanted = np.asarray(ids, dtype=np.int64)
        held, rows = self.recent_vectors.get(wanted)
        held[durable:] = False  # this group's own writes: only the overlay has them
        missing = np.flatnonzero(~held).tolist()
        if not missing:
            return ids, rows
        raws = txn.get_many(CF_VECTORS, [ids[i].to_bytes(8, "big") for i in missing])
        read = [(i, raw) for i, raw in zip(missing, raws, strict=True) if raw is not None]
        if read:
            positions = np.asarray([i for i, _ in read], dtype=np.int64)
            units = unit_rows(np.stack([np.frombuffer(raw, dtype="<f4") for _, raw in read]))
            if rows.shape[1] != units.shape[1]:
                rows = np.zeros((wanted.size, units.shape[1]), dtype=np.float32)
            rows[positions] = units
            held[positions] = True
            durable_read = positions[positions < durable]
            self.recent_vectors.put(wanted[durable_read], rows[durable_read])
        present = np.flatnonzero(held)
        return wanted[present].tolist(), rows[present]

    def _exact_duplicate(self, txn: Txn, record: memory_pb2.Memory) -> memory_pb2.Memory | None:
        raw = txn.get(CF_DEDUP, dedup_key(record.namespace, record.kind, record.content))
        if raw is None:
            return None
        existing = _load(txn, key_u64(raw))
        if existing is None or existing.state not in CURRENT_STATES or existing.entity != record.entity:
            return None
        return existing

    def _soft(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        vector: npt.NDArray[np.float32],
        now: float,
        decision: Decision,
    ) -> Decision:
        prefix = entity_prefix(record.namespace, record.entity)
        durable = self._recent_about(txn, record, prefix)
        known = set(durable)
        ids = durable + [i for i in txn.pending(CF_ENTITIES, prefix) if i not in known]
        if not ids:
            return decision
        # Vectors first (RAM, else one database call; no parsing); records only for the close ones.
        present, matrix = self._unit_vectors(txn, ids, len(durable))
        if not present:
            return decision
        unit = vector / np.linalg.norm(vector)
        close_enough = min(self.settings.soft_conflict_similarity, self.settings.duplicate_similarity)
        candidates: list[memory_pb2.Memory] = []
        close: list[float] = []
        for memory_id, similarity in zip(present, (matrix @ unit).tolist(), strict=True):
            if similarity < close_enough:
                continue
            existing = _load(txn, memory_id)
            if existing is None or existing.state not in CURRENT_STATES or existing.fact.attribute:
                continue  # keyed facts are governed by their key, not by similarity
            candidates.append(existing)
            close.append(similarity)
        if not candidates:
            return decision
        similarities = np.asarray(close, dtype=np.float32)
        text = normalise_text(record.content)
        best = int(np.argmax(similarities))
        if (
            similarities[best] >= self.settings.duplicate_similarity
            and normalise_text(candidates[best].content) == text
        ):
            return _confirm(candidates[best], record, decision, now)
        threshold = self.settings.soft_conflict_similarity
        for existing, similarity in zip(candidates, similarities.tolist(), strict=True):
            if similarity < threshold or normalise_text(existing.content) == text:
                continue
            strength = INCONSISTENCY_STEP * max((similarity - threshold) / max(1.0 - threshold, 1e-6), 0.1)
            if from_timestamp(existing.valid_from) > from_timestamp(record.valid_from):
                # The stored one is newer in world time: the late arrival is the older, doubtful one.
                record.inconsistency = min(1.0, record.inconsistency + strength)
                continue
            before = existing.state
            existing.inconsistency = min(1.0, existing.inconsistency + strength)
            existing.updated_at.CopyFrom(to_timestamp(now))
            decision.updated.append((existing, before, f"soft conflict with memory {record.id}"))
        return decision
