"""Perception's in-RAM caches (recent unit vectors, fact-version times and values, the unit vectors of a group's
earlier items) change no decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.perception.conflicts import (
    PENDING_UNITS,
    SOFT_CONFLICT_CANDIDATES,
    Perceiver,
    RecentVectors,
    entity_prefix,
    unit_rows,
)
from memevo.sidecar.store.rocks import CF_ENTITIES, Txn
from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 8
DAY_S = 86_400.0


def _engine(data_dir: Path, *, cached: bool) -> Engine:
    engine = Engine(SidecarConfig(data_dir=data_dir, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))
    if not cached:
        # The reference: every candidate vector and every fact version read from RocksDB at every write.
        engine.perceiver = Perceiver(
            engine.perceiver.settings, engine.columns, vector_cache_bytes=0, version_cache_entries=0
        )
    return engine


def _stream(count: int, seed: int) -> list[NewMemory]:
    """Writes that make perception decide: keyed facts (restated, newer, late), rewordings, restatements."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((3, DIMENSION)).astype(np.float32))
    recent: list[tuple[str, np.ndarray, str]] = []
    items: list[NewMemory] = []
    for number in range(count):
        entity = int(rng.choice(3, p=[0.6, 0.3, 0.1]))
        roll = rng.random()
        if roll < 0.4:
            items.append(
                NewMemory(
                    content=f"e{entity} a{number % 2} = v{int(rng.integers(3))} ({number})",
                    vector=(centres[entity] + 0.5 * rng.standard_normal(DIMENSION)).astype(np.float32),
                    kind=memory_pb2.MEMORY_KIND_FACT,
                    entity=f"e{entity}",
                    fact_attribute=f"a{int(rng.integers(2))}",
                    fact_value=f"v{int(rng.integers(3))}",
                    valid_from_s=1e9 + float(rng.integers(20)) * DAY_S,  # ties and late arrivals happen
                )
            )
            continue
        if recent and roll < 0.7:  # a rewording (near-duplicate vector, other text) or a restatement
            content, vector, about = recent[int(rng.integers(len(recent)))]
            if rng.random() < 0.5:
                content = f"{content}, reworded {number}"
            vector = (vector + 0.01 * rng.standard_normal(DIMENSION)).astype(np.float32)
        else:
            content, about = f"observation {number} about e{entity}", f"e{entity}"
            vector = (centres[entity] + 0.6 * rng.standard_normal(DIMENSION)).astype(np.float32)
            recent.append((content, vector, about))
        items.append(
            NewMemory(
                content=content,
                vector=vector,
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity=about,
                valid_from_s=1e9 + float(rng.integers(20)) * DAY_S,
            )
        )
    return items


def _records(engine: Engine) -> dict[int, tuple[Any, ...]]:
    found, missing = engine.get(list(range(1, engine.store.next_id)))
    assert not missing
    return {
        r.id: (
            r.state,
            r.content,
            round(r.confidence, 6),
            round(r.inconsistency, 6),
            r.superseded_by,
            tuple(r.supersedes),
            r.valid_to.ToMicroseconds() if r.HasField("valid_to") else None,
            r.possibly_outdated_by,
        )
        for r in found
    }


def test_cached_and_uncached_perception_decide_alike(tmp_path: Path) -> None:
    items = _stream(400, seed=3)
    cached, reference = _engine(tmp_path / "cached", cached=True), _engine(tmp_path / "reference", cached=False)
    try:
        outcomes: list[int] = []
        rng = np.random.default_rng(0)
        position = 0
        while position < len(items):
            size = int(rng.integers(1, 4))  # batches too: later items see earlier ones only in the overlay
            chunk = items[position : position + size]
            position += size
            a = cached.remember(chunk, rpc="batch")
            b = reference.remember(chunk, rpc="batch")
            assert [(w.memory.id, w.outcome, w.affected) for w in a] == [
                (w.memory.id, w.outcome, w.affected) for w in b
            ]
            outcomes.extend(w.outcome for w in a)
        assert _records(cached) == _records(reference)
        # The stream exercised every decision the caches take part in.
        assert set(outcomes) == {
            memory_service_pb2.WRITE_OUTCOME_CREATED,
            memory_service_pb2.WRITE_OUTCOME_CONFIRMED,
            memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS,
            memory_service_pb2.WRITE_OUTCOME_BACKDATED,
        }
        assert any(r[3] > 0 for r in _records(cached).values())  # soft conflicts raised inconsistency
        assert len(cached.perceiver._version_keys) > 0
    finally:
        cached.close()
        reference.close()


class _WithoutKeptUnits:
    """A transaction that hides the unit vectors ``register`` keeps for the group: they are read from the overlay."""

    def __init__(self, txn: Txn) -> None:
        self._txn = txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def pending(self, name: str, key: object, *, newest: int = 0) -> list[Any]:
        return [] if name == PENDING_UNITS else self._txn.pending(name, key, newest=newest)


class _AsBeforeIssue42(Perceiver):
    """Every earlier item of the group about the entity a candidate, its vector read and scaled again each time."""

    @staticmethod
    def _pending_about(txn: Txn, namespace: str, entity: str, durable: Any) -> list[int]:
        known = set(durable)
        return [i for i in txn.pending(CF_ENTITIES, entity_prefix(namespace, entity)) if i not in known]

    def _unit_vectors(self, txn: Txn, ids: list[int], durable: int) -> tuple[list[int], npt.NDArray[np.float32]]:
        return super()._unit_vectors(_WithoutKeptUnits(txn), ids, durable)  # type: ignore[arg-type]


def test_batches_within_the_window_are_perceived_as_before_the_bound(tmp_path: Path) -> None:
    """Within SOFT_CONFLICT_CANDIDATES earlier items about its entity, an item of a batch decides as when it compared
    with every earlier one and read their vectors from the overlay (see test_one_entity_batches for beyond)."""
    items = _stream(700, seed=5)
    bounded, reference = _engine(tmp_path / "bounded", cached=True), _engine(tmp_path / "reference", cached=True)
    reference.perceiver = _AsBeforeIssue42(reference.perceiver.settings, reference.columns)
    try:
        position, sizes = 0, [250, 1, 200, 3, 246]  # the first entity holds hundreds before the later batches
        for size in sizes:
            chunk = items[position : position + size]
            position += size
            assert sum(item.entity == "e0" for item in chunk) < SOFT_CONFLICT_CANDIDATES
            a = bounded.remember(chunk, rpc="batch")
            b = reference.remember(chunk, rpc="batch")
            assert [(w.memory.id, w.outcome, w.affected) for w in a] == [
                (w.memory.id, w.outcome, w.affected) for w in b
            ]
        records = _records(bounded)
        assert records == _records(reference)
        assert any(r[3] > 0 for r in records.values())  # soft conflicts were raised, within batches too
    finally:
        bounded.close()
        reference.close()


def test_recent_vectors_keep_the_newest_id_per_slot_and_report_misses() -> None:
    cache = RecentVectors(budget_bytes=4 * 4 * 4)  # 4 slots of 4-d vectors
    first = unit_rows(np.eye(4, dtype=np.float32))
    cache.put(np.asarray([1, 2, 3, 4], dtype=np.int64), first)
    held, rows = cache.get(np.asarray([1, 4, 5], dtype=np.int64))
    assert held.tolist() == [True, True, False]
    np.testing.assert_array_equal(rows[:2], first[[0, 3]])
    cache.put(np.asarray([5], dtype=np.int64), first[[2]])  # id 5 takes id 1's slot
    cache.put(np.asarray([1], dtype=np.int64), first[[0]])  # an older id does not push a newer one out
    held, rows = cache.get(np.asarray([1, 5], dtype=np.int64))
    assert held.tolist() == [False, True]
    np.testing.assert_array_equal(rows[1], first[2])


def test_a_zero_budget_holds_nothing() -> None:
    cache = RecentVectors(budget_bytes=0)
    cache.put(np.asarray([1], dtype=np.int64), unit_rows(np.ones((1, 4), dtype=np.float32)))
    assert cache.get(np.asarray([1], dtype=np.int64))[0].tolist() == [False]
