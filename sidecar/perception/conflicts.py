"""Change detection at write time: hard conflicts on fact keys, soft conflicts and duplicates.

Runs inside the committer (one mutation at a time), so its reads and the
writes it decides are serial. It decides deterministically where the
structure allows (a fact key), and only nudges scores where it does not (a
near-duplicate that disagrees raises the older memory's inconsistency).
"""

from __future__ import annotations

import hashlib
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


def _confirm(existing: memory_pb2.Memory, decision: Decision, now: float) -> Decision:
    before = existing.state
    existing.confidence = existing.confidence + (1.0 - existing.confidence) * CONFIRM_CONFIDENCE_GAIN
    existing.updated_at.CopyFrom(to_timestamp(now))  # the access it counts as is recorded by the engine
    decision.confirm = existing
    decision.outcome = "confirmed"
    decision.updated.append((existing, before, "confirmed by restatement"))
    return decision


class Perceiver:
    """Decides how a new memory relates to what is stored."""

    def __init__(self, settings: PerceptionSettings, columns: MemoryColumns | None = None) -> None:
        self.settings = settings
        self.columns = columns
        """The hot columns, when available: candidates come from them instead of a prefix scan."""

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
        ids = ids[(columns.namespace[ids] == namespace) & np.isin(columns.state[ids], CURRENT_STATES)]
        return [int(i) for i in ids[::-1][:SOFT_CONFLICT_CANDIDATES]]

    def perceive(self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float) -> Decision:
        """Classify ``record`` (not yet stored, id assigned) and adjust it and its neighbours."""
        decision = Decision()
        if record.fact.attribute and record.entity:
            return self._hard(txn, record, now, decision)
        duplicate = self._exact_duplicate(txn, record) if record.kind not in REPEATABLE_KINDS else None
        if duplicate is not None:
            return _confirm(duplicate, decision, now)
        if record.entity:
            return self._soft(txn, record, vector, now, decision)
        return decision

    def register(self, txn: Txn, record: memory_pb2.Memory) -> None:
        """Index a stored record for later perception (dedup key, fact versions, entity)."""
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

    def _hard(self, txn: Txn, record: memory_pb2.Memory, now: float, decision: Decision) -> Decision:
        key = fact_key(record.namespace, record.entity, record.fact.attribute)
        versions = self.versions(txn, key)
        value = normalise_text(record.fact.value)
        new_from = from_timestamp(record.valid_from)
        multi = self.settings.is_multi_valued(record.namespace, record.fact.attribute)
        for version in versions:
            # The same value restated: confirm it (current) or the identical historical entry.
            same_value = normalise_text(version.fact.value) == value
            if same_value and (version.state in CURRENT_STATES or from_timestamp(version.valid_from) == new_from):
                return _confirm(version, decision, now)
        if multi:
            return decision
        raw_current = txn.get(CF_FACTS, key)
        current = _load(txn, key_u64(raw_current)) if raw_current else None
        if current is not None and current.state not in CURRENT_STATES:
            current = None
        if current is None:
            return decision
        current_from = from_timestamp(current.valid_from)
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

    def _backdate(
        self,
        record: memory_pb2.Memory,
        versions: list[memory_pb2.Memory],
        new_from: float,
        now: float,
        decision: Decision,
    ) -> Decision:
        """A late-arriving older value: history, closed by the next newer version, never current."""
        later = [v for v in versions if from_timestamp(v.valid_from) >= new_from]
        first_from = min(from_timestamp(v.valid_from) for v in later)
        tied = [v for v in later if from_timestamp(v.valid_from) == first_from]
        # Among versions of the same world time, the one that won (current, else most trusted) closes it.
        successor = next((v for v in tied if v.state in CURRENT_STATES), max(tied, key=lambda v: v.confidence))
        record.state = OBSOLETE
        record.valid_to.CopyFrom(successor.valid_from)
        record.superseded_by = successor.id
        earlier = [v for v in versions if from_timestamp(v.valid_from) < new_from]
        # Links stay two-way: the successor now supersedes the late fact, in place of its old predecessor.
        replaced = [i for i in successor.supersedes if not earlier or i != earlier[-1].id]
        if earlier and earlier[-1].superseded_by != successor.id:
            replaced.append(earlier[-1].id)  # the predecessor was not linked to the successor: keep its link
        del successor.supersedes[:]
        successor.supersedes.extend([*replaced, record.id])
        successor.updated_at.CopyFrom(to_timestamp(now))
        decision.updated.append((successor, successor.state, f"now supersedes late fact {record.id}"))
        if earlier:
            predecessor = earlier[-1]
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
        ids = self._recent_about(txn, record, prefix)
        ids += [i for i in txn.pending(CF_ENTITIES, prefix) if i not in ids]
        if not ids:
            return decision
        # Vectors first (one database call, no parsing); records only for the close ones.
        raws = txn.get_many(CF_VECTORS, [i.to_bytes(8, "big") for i in ids])
        present = [(i, raw) for i, raw in zip(ids, raws, strict=True) if raw is not None]
        if not present:
            return decision
        matrix = np.stack([np.frombuffer(raw, dtype="<f4") for _, raw in present]).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        unit = vector / np.linalg.norm(vector)
        close_enough = min(self.settings.soft_conflict_similarity, self.settings.duplicate_similarity)
        candidates: list[memory_pb2.Memory] = []
        close: list[float] = []
        for (memory_id, _), similarity in zip(present, (matrix @ unit).tolist(), strict=True):
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
            return _confirm(candidates[best], decision, now)
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
