"""The fresh tail's buffer against a plain list of (id, vector) rows, and snapshots that outlive changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memevo.sidecar.config import IndexConfig
from memevo.sidecar.store.fresh_tail import FreshTail, nearest
from memevo.sidecar.store.vector_index import TAIL_ALL, VectorIndex, normalize_rows

DIM = 4


def _rows(rng: np.random.Generator, ids: list[int]) -> np.ndarray:
    return normalize_rows(rng.normal(size=(len(ids), DIM)).astype(np.float32))


def test_random_appends_removals_and_builder_steps_match_a_plain_list() -> None:
    rng = np.random.default_rng(11)
    tail = FreshTail(DIM)
    model: list[tuple[int, np.ndarray]] = []  # live rows in write order
    next_id = 1
    old_snapshots: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(600):
        op = rng.integers(4)
        if op <= 1:
            n = int(rng.integers(1, 700))
            ids = list(range(next_id, next_id + n))
            next_id += n
            vectors = _rows(rng, ids)
            tail.append(np.asarray(ids, dtype=np.int64), vectors)
            model.extend(zip(ids, vectors, strict=True))
        elif op == 2 and model:
            victims = rng.choice([i for i, _ in model], size=min(len(model), int(rng.integers(1, 20))), replace=False)
            tail.remove(np.asarray([*victims.tolist(), 10**9], dtype=np.int64))  # an id never written is ignored
            dead = {int(v) for v in victims}
            model = [(i, v) for i, v in model if i not in dead]
        else:
            # The builder's view: the oldest live rows, in write order, at most `limit` positions of them.
            limit = int(rng.integers(1, 900))
            span, ids, vectors = tail.front(limit)
            assert len(ids) <= span <= limit
            if model:
                assert span > 0  # the builder always makes progress
            assert ids.tolist() == [i for i, _ in model[: len(ids)]]
            for (_, expected), got in zip(model, vectors, strict=False):
                np.testing.assert_array_equal(got, expected)
            tail.drop_front(span)
            model = model[len(ids) :]
        assert tail.count == len(model)
        ids, vectors = tail.snapshot()
        assert ids.tolist() == [i for i, _ in model]
        if model:
            np.testing.assert_array_equal(vectors, np.stack([v for _, v in model]))
        old_snapshots.append((ids, vectors, ids.copy(), vectors.copy()))
    # Rows once handed out are never overwritten: every earlier snapshot still reads what it read.
    for ids, vectors, ids_then, vectors_then in old_snapshots:
        np.testing.assert_array_equal(ids, ids_then)
        np.testing.assert_array_equal(vectors, vectors_then)


def test_ids_written_out_of_order_come_back_sorted() -> None:
    rng = np.random.default_rng(2)
    tail = FreshTail(DIM)
    tail.append(np.asarray([10, 11], dtype=np.int64), _rows(rng, [10, 11]))
    late = _rows(rng, [3])
    tail.append(np.asarray([3], dtype=np.int64), late)
    ids, vectors = tail.snapshot()
    assert ids.tolist() == [3, 10, 11]
    np.testing.assert_array_equal(vectors[0], late[0])


def test_nearest_keeps_the_most_similar_rows() -> None:
    rng = np.random.default_rng(4)
    vectors = normalize_rows(rng.normal(size=(500, DIM)).astype(np.float32))
    ids = np.arange(500, dtype=np.int64) + 7
    query = vectors[42]
    got_ids, got_sims = nearest(ids, vectors, query, 10)
    truth = np.argsort(-(vectors @ query))[:10]
    assert sorted(got_ids.tolist()) == sorted((truth + 7).tolist())
    np.testing.assert_allclose(np.sort(got_sims), np.sort((vectors @ query)[truth]), rtol=1e-6)
    all_ids, _ = nearest(ids, vectors, query, 500)
    assert all_ids.size == 500


def test_search_of_a_long_tail_returns_its_nearest_and_says_when_it_was_exhaustive(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    index = VectorIndex(tmp_path, DIM, IndexConfig())
    n = TAIL_ALL * 3
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    index.add(np.arange(1, n + 1, dtype=np.int64), vectors)  # no builder started: all in the tail
    query = normalize_rows(rng.normal(size=(1, DIM)).astype(np.float32))
    found = index.search(query, 10)
    assert found.ids.size == TAIL_ALL  # not every one of the 6k tail vectors
    sims = normalize_rows(vectors) @ query[0]
    truth = set((np.argsort(-sims)[:TAIL_ALL] + 1).tolist())
    assert set(found.ids.tolist()) == truth
    everything = index.search(query, n)
    assert everything.ids.size == n


def test_the_builder_drains_a_tail_with_forgotten_rows_into_the_graph(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    index = VectorIndex(tmp_path, DIM, IndexConfig(build_batch=100))
    vectors = rng.normal(size=(1_000, DIM)).astype(np.float32)
    ids = np.arange(1, 1_001, dtype=np.int64)
    index.add(ids[:600], vectors[:600])
    index.remove(np.asarray([5, 300, 599], dtype=np.int64))
    index.add(ids[600:], vectors[600:])
    assert index.tail_count == 997
    while index._build_step():  # the builder's step, without its thread
        pass
    assert index.tail_count == 0
    assert index.graph_count == 997
    assert not index.graph_contains(np.asarray([5, 300, 599], dtype=np.int64)).any()
    assert index.tail_snapshot()[0].size == 0
