"""Reading vectors back from the HNSW graph: rows in request order, missing and removed ids flagged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import IndexConfig
from memevo.sidecar.store import vector_index
from memevo.sidecar.store.vector_index import VectorIndex, normalize_rows


@pytest.mark.parametrize(("dtype", "atol"), [("f16", 2e-3), ("f32", 1e-6), ("i8", 2e-2)])
def test_graph_vectors_returns_unit_rows_in_order_and_flags_what_the_graph_lacks(
    tmp_path: Path, dtype: str, atol: float
) -> None:
    # Rows come back to the graph's precision (half precision: ~1e-3).
    rng = np.random.default_rng(3)
    index = VectorIndex(tmp_path, 6, IndexConfig(dtype=dtype))
    vectors = rng.normal(size=(20, 6)).astype(np.float32)
    ids = np.arange(1, 21, dtype=np.int64)
    index.bulk_build(ids, vectors)
    index.remove_from_graph_now(np.asarray([5], dtype=np.int64))
    asked = np.asarray([7, 99, 1, 5, 20], dtype=np.int64)
    rows, found = index.graph_vectors(asked)
    assert found.tolist() == [True, False, True, False, True]
    expected = normalize_rows(vectors[[6, 0, 19]])
    np.testing.assert_allclose(rows[found], expected, rtol=0, atol=atol)
    assert not rows[~found].any()
    all_rows, all_found = index.graph_vectors(np.asarray([3, 4], dtype=np.int64))
    assert all_found.all()
    np.testing.assert_allclose(all_rows, normalize_rows(vectors[[2, 3]]), rtol=0, atol=atol)
    empty_rows, empty_found = index.graph_vectors(np.zeros(0, dtype=np.int64))
    assert empty_rows.shape == (0, 6)
    assert empty_found.size == 0


def _top(ids: np.ndarray, sims: np.ndarray, count: int) -> list[int]:
    order = np.argsort(-sims, kind="stable")[:count]
    return sorted(ids[order].tolist())


def test_search_many_finds_what_one_search_per_row_finds_in_graph_and_tail(tmp_path: Path) -> None:
    # 129 rows: a full block of 128 and a block of one, which usearch answers in another shape.
    rng = np.random.default_rng(5)
    dimension, count = 8, 6
    index = VectorIndex(tmp_path, dimension, IndexConfig())
    graph_vectors = rng.normal(size=(200, dimension)).astype(np.float32)
    index.bulk_build(np.arange(1, 201, dtype=np.int64), graph_vectors)
    tail_vectors = rng.normal(size=(300, dimension)).astype(np.float32)
    index.add(np.arange(201, 501, dtype=np.int64), tail_vectors)  # no builder started: they stay in the tail
    assert index.tail_count == 300
    queries = normalize_rows(rng.normal(size=(129, dimension)).astype(np.float32))
    many = index.search_many(queries, count)
    assert len(many) == 129
    every = normalize_rows(np.concatenate([graph_vectors, tail_vectors]))
    for row, found in enumerate(many):
        one = index.search(queries[row : row + 1], count)
        assert np.unique(found.ids).size == found.ids.size
        assert _top(found.ids, found.similarities, count) == _top(one.ids, one.similarities, count)
        exact = every @ queries[row]
        picked = np.argsort(-found.similarities)[:count]
        np.testing.assert_allclose(found.similarities[picked], exact[found.ids[picked] - 1], rtol=0, atol=2e-3)


def test_search_many_with_only_a_tail_only_a_graph_or_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    queries = normalize_rows(rng.normal(size=(3, 4)).astype(np.float32))
    tail_only = VectorIndex(tmp_path / "tail", 4, IndexConfig())
    assert [m.ids.size for m in tail_only.search_many(queries, 5)] == [0, 0, 0]
    tail_only.add(np.arange(1, 4, dtype=np.int64), rng.normal(size=(3, 4)).astype(np.float32))
    # Fewer tail vectors than asked for: every one of them, for every row.
    assert [sorted(m.ids.tolist()) for m in tail_only.search_many(queries, 5)] == [[1, 2, 3]] * 3
    graph_only = VectorIndex(tmp_path / "graph", 4, IndexConfig())
    graph_only.bulk_build(np.arange(1, 51, dtype=np.int64), rng.normal(size=(50, 4)).astype(np.float32))
    found = graph_only.search_many(queries, 5)
    assert [m.ids.size for m in found] == [5, 5, 5]
    assert all(((m.similarities >= -1.0) & (m.similarities <= 1.0)).all() for m in found)
    assert graph_only.search_many(queries[:0], 5) == []


def test_search_many_takes_fewer_rows_at_a_time_against_a_large_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Same answers whatever the block size: a tail of 300 with room for 2 x 300 similarities at once.
    monkeypatch.setattr(vector_index, "SEARCH_MANY_CELLS", 600)
    rng = np.random.default_rng(9)
    index = VectorIndex(tmp_path, 8, IndexConfig())
    index.add(np.arange(1, 301, dtype=np.int64), rng.normal(size=(300, 8)).astype(np.float32))
    queries = normalize_rows(rng.normal(size=(5, 8)).astype(np.float32))
    found = index.search_many(queries, 4)
    for row, matches in enumerate(found):
        one = index.search(queries[row : row + 1], 4)
        assert _top(matches.ids, matches.similarities, 4) == _top(one.ids, one.similarities, 4)


def test_one_search_answers_every_smaller_count_as_its_own_search_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tail longer than TAIL_ALL (made small here), so that its nearest are a prefix too, and a graph.
    monkeypatch.setattr(vector_index, "TAIL_ALL", 40)
    rng = np.random.default_rng(11)
    dimension = 16
    index = VectorIndex(tmp_path, dimension, IndexConfig())
    index.bulk_build(np.arange(1, 3001, dtype=np.int64), rng.normal(size=(3000, dimension)).astype(np.float32))
    index.add(np.arange(3001, 3301, dtype=np.int64), rng.normal(size=(300, dimension)).astype(np.float32))
    for query in normalize_rows(rng.normal(size=(40, dimension)).astype(np.float32)):
        near = index.neighbours(query[None, :], 64)
        for count in (1, 5, 10, 40, 41, 64):
            once = near.first(count)
            alone = index.search(query[None, :], count)
            assert once.ids.tolist() == alone.ids.tolist()
            np.testing.assert_array_equal(once.similarities, alone.similarities)
        with pytest.raises(ValueError, match="search again"):
            near.first(65)
