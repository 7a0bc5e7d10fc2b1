"""Entity-filtered recall from held blocks of vectors ranks exactly as reading each vector did (issue 28)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.config import IndexConfig, SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.recall import GRAPH_READ_LIMIT, Recaller, _compile
from memevo.sidecar.store.entity_vectors import EntityVectors
from memevo.sidecar.store.vector_index import VectorIndex, normalize_rows
from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 24
SIZES = {"user:small": 12, "user:graph-read": 200, "user:mid": 700, "user:large": 1_300}
"""Entities of each path: under GRAPH_READ_LIMIT (vectors from the graph), up to exact_scan_limit (RocksDB
before), and past it (an over-fetched ANN search before, an exact scan of the held block now)."""
EXACT_SCAN_LIMIT = 1_024
HISTORY = memory_service_pb2.RECALL_MODE_HISTORY
CURRENT = memory_service_pb2.RECALL_MODE_CURRENT


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A seeded store: most vectors in the graph, the newest in the fresh tail, some forgotten or obsolete."""
    config = SidecarConfig(
        data_dir=Path(tmp_path_factory.mktemp("entity-scan")),
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        index=IndexConfig(exact_scan_limit=EXACT_SCAN_LIMIT),
    )
    engine = Engine(config)
    rng = np.random.default_rng(28)
    centres = rng.standard_normal((8, DIMENSION)).astype(np.float32)
    items = []
    for entity, size in SIZES.items():
        for number in range(size):
            vector = centres[rng.integers(0, 8)] + 0.8 * rng.standard_normal(DIMENSION).astype(np.float32)
            items.append(NewMemory(content=f"note {number} about {entity}", vector=vector, entity=entity))
    for number in range(300):  # memories about nobody, in the same space
        vector = centres[rng.integers(0, 8)] + 0.8 * rng.standard_normal(DIMENSION).astype(np.float32)
        items.append(NewMemory(content=f"remark {number}", vector=vector))
    order = rng.permutation(len(items))
    shuffled = [items[i] for i in order]
    newest = 150
    for start in range(0, len(shuffled) - newest, 500):
        engine.remember(shuffled[start : min(start + 500, len(shuffled) - newest)])
    while engine.index.tail_count:  # the builder moves them into the graph
        time.sleep(0.01)
    # Then it stops, so that the newest stay in the fresh tail and no row changes place between two recalls.
    engine.index._stop.set()
    engine.index._wake.set()
    assert engine.index._builder is not None
    engine.index._builder.join()
    engine.remember(shuffled[len(shuffled) - newest :])
    chosen = rng.choice(np.arange(1, engine.columns.size, dtype=np.int64), 80, replace=False).tolist()
    engine.forget(chosen[:40], reason="test", keep_history=False)
    engine.forget(chosen[40:], reason="test", keep_history=True)
    yield engine
    engine.close()


def _reference(engine: Engine) -> Recaller:
    """A recaller that holds no entity's vectors: every filtered recall reads them as before issue 28."""
    recaller = Recaller(engine)
    recaller._entity_vectors = EntityVectors(lambda ids: np.zeros((0, DIMENSION), np.float32), DIMENSION, 0)
    return recaller


def _queries(count: int, seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((count, DIMENSION)).astype(np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


@pytest.mark.parametrize("entity", ["user:small", "user:graph-read", "user:mid"])
@pytest.mark.parametrize("mode", ["current", "history", "episodes"])
def test_candidates_are_the_same_ids_with_the_same_cosines_bit_for_bit(engine: Engine, entity: str, mode: str) -> None:
    fast, reference = Recaller(engine), _reference(engine)
    for query_vector in _queries(12, sum(map(ord, entity + mode))):
        query = RecallQuery(
            vector=query_vector,
            entity=entity,
            mode=memory_service_pb2.RECALL_MODE_HISTORY
            if mode == "history"
            else memory_service_pb2.RECALL_MODE_CURRENT,
            kinds=frozenset({memory_pb2.MEMORY_KIND_EPISODE}) if mode == "episodes" else frozenset(),
        )
        flt = _compile(query, engine.columns)
        assert flt is not None
        got_ids, got_sims = fast._candidates(query, flt)
        want_ids, want_sims = reference._candidates(query, flt)
        np.testing.assert_array_equal(got_ids, want_ids)
        assert got_sims.dtype == want_sims.dtype == np.float32
        assert got_sims.tobytes() == want_sims.tobytes()


def test_the_paths_under_test_are_the_ones_meant(engine: Engine) -> None:
    """The small entity is read from the graph, the mid one from RocksDB, the large one is past the exact scan."""
    tail_ids, _ = engine.index.tail_snapshot()
    for entity, low, high in (
        ("user:graph-read", 1, GRAPH_READ_LIMIT),
        ("user:mid", GRAPH_READ_LIMIT + 1, EXACT_SCAN_LIMIT),
        ("user:large", EXACT_SCAN_LIMIT + 1, engine.config.index.entity_scan_limit),
    ):
        ids = engine.columns.entity_ids(engine.columns.entities.lookup(entity))
        live = ids[engine.columns.state[ids] == memory_pb2.MEMORY_STATE_ACTIVE]
        outside_tail = live[~np.isin(live, tail_ids)]
        assert low <= outside_tail.size <= high, entity
        assert np.isin(live, tail_ids).any(), entity  # some rows come from the tail


def test_recall_returns_the_same_hits_in_the_same_order(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # A recall notes its hits' use, which moves their relevance: the second of a pair would not rank the same store.
    monkeypatch.setattr(engine.columns, "record_access", lambda *args, **kwargs: None)
    fast, reference = Recaller(engine), _reference(engine)
    for entity in ("user:small", "user:graph-read", "user:mid"):
        for query_vector in _queries(8, 7):
            query = RecallQuery(vector=query_vector, entity=entity, k=10)
            want = reference.recall(query)
            got = fast.recall(query)
            assert [h.memory.id for h in got] == [h.memory.id for h in want]
            assert [h.similarity for h in got] == [h.similarity for h in want]
            # Relevance decays with the clock between the two calls: scores agree to its drift, not to the bit.
            np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-6)


def test_a_large_entity_is_scanned_exactly(engine: Engine) -> None:
    """Past exact_scan_limit, every passing memory is a candidate with its exact cosine (before: the ANN's)."""
    fast = Recaller(engine)
    code = engine.columns.entities.lookup("user:large")
    listed = engine.columns.entity_ids(code)
    for query_vector in _queries(6, 3):
        query = RecallQuery(vector=query_vector, entity="user:large")
        flt = _compile(query, engine.columns)
        assert flt is not None
        ids, sims = fast._candidates(query, flt)
        live = listed[engine.columns.state[listed] == memory_pb2.MEMORY_STATE_ACTIVE]
        np.testing.assert_array_equal(ids, live)
        exact = np.asarray([_unit(engine, int(i)) @ query_vector for i in ids], dtype=np.float32)
        np.testing.assert_allclose(sims, exact, atol=1e-5)


def test_a_write_after_a_recall_is_found_by_the_next(engine: Engine) -> None:
    fast = Recaller(engine)
    query_vector = _queries(1, 11)[0]
    away = -query_vector
    engine.remember([NewMemory(content="the first about later", vector=away, entity="user:later")])
    assert len(fast.recall(RecallQuery(vector=query_vector, entity="user:later"))) == 1
    [written] = engine.remember([NewMemory(content="the next about later", vector=query_vector, entity="user:later")])
    hits = fast.recall(RecallQuery(vector=query_vector, entity="user:later"))
    assert [h.memory.id for h in hits][:1] == [written.memory.id]
    assert len(hits) == 2


def _unit(engine: Engine, memory_id: int) -> npt.NDArray[np.float32]:
    [record], _ = engine.get([memory_id], include_vectors=True)
    vector = np.frombuffer(record.vector, dtype="<f4")
    return np.asarray(vector / np.linalg.norm(vector), dtype=np.float32)


def test_numpy_rounds_unit_rows_to_half_as_the_graph_stores_them(tmp_path: Path) -> None:
    """Recall rounds held rows to half precision instead of reading them from the graph: the same numbers."""
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((600, 64)).astype(np.float32)
    rows[:100] *= rng.uniform(1e-6, 1e-3, size=(100, 64)).astype(np.float32)  # components in half's subnormals
    rows[100:200, :4] = [1.0, 2.0**-14, 2.0**-24, 65504.0]  # at half's edges before normalising
    index = VectorIndex(tmp_path, 64, IndexConfig(dtype="f16"))
    ids = np.arange(1, 601, dtype=np.int64)
    index.bulk_build(ids, rows)
    from_graph, found = index.graph_vectors(ids)
    assert found.all()
    unit = normalize_rows(rows)
    assert from_graph.tobytes() == unit.astype(np.float16).astype(np.float32).tobytes()
