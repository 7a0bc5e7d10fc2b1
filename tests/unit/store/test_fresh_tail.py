"""The fresh tail's buffer against a plain list of (id, vector) rows, and snapshots that outlive changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import IndexConfig
from memevo.sidecar.store.fresh_tail import FreshTail, nearest
from memevo.sidecar.store.vector_index import TAIL_ALL, VectorIndex, normalize_rows

DIM = 4


def _rows(rng: np.random.Generator, ids: list[int]) -> np.ndarray:
    return normalize_rows(rng.normal(size=(len(ids), DIM)).astype(np.float32))


def _append_new(tail: FreshTail, rng: np.random.Generator, first: int, most: int) -> tuple[list[int], np.ndarray]:
    """Append up to ``most`` new rows with ids from ``first`` on; their ids and vectors."""
    ids = list(range(first, first + int(rng.integers(1, most))))
    vectors = _rows(rng, ids)
    tail.append(np.asarray(ids, dtype=np.int64), vectors)
    return ids, vectors


def test_random_appends_removals_and_builder_steps_match_a_plain_list() -> None:
    rng = np.random.default_rng(11)
    tail = FreshTail(DIM)
    model: list[tuple[int, np.ndarray]] = []  # live rows in write order
    next_id = 1
    old_snapshots: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(600):
        op = rng.integers(4)
        if op <= 1:
            ids, vectors = _append_new(tail, rng, next_id, 700)
            next_id += len(ids)
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


def _mapped_rows(rng: np.random.Generator, ids: list[int]) -> np.ndarray:
    """Unit rows as a strided view inside wider records, as the fresh-tail files' maps hold them."""
    records = np.zeros((len(ids), DIM + 3), dtype=np.float32)
    records[:, 1 : 1 + DIM] = _rows(rng, ids)
    records.flags.writeable = False
    return records[:, 1 : 1 + DIM]


@pytest.mark.parametrize("mapped", [False, True])
def test_builder_steps_interleaved_with_writes_and_forgets_lose_no_row(mapped: bool) -> None:
    # The builder takes a span, inserts it outside the lock while writes and forgets go on, then drops the span:
    # every row it drops is one it took, and every live row not taken stays in the tail (a regrow that left dead
    # rows out shifted the span, and a write's vector left the tail without entering the graph).
    rng = np.random.default_rng(21)
    tail = FreshTail(DIM)
    model: dict[int, np.ndarray] = {}  # live rows in builder order
    next_id = 1
    if mapped:  # what a start found in the files: two blocks read in place, some rows not wanted
        for _ in range(2):
            block = list(range(next_id, next_id + 300))
            next_id += 300
            in_place = _mapped_rows(rng, block)
            alive = rng.random(300) < 0.8
            tail.adopt(np.asarray(block, dtype=np.int64), in_place, alive.copy())
            model.update((i, v) for i, v, a in zip(block, in_place, alive, strict=True) if a)
    taken: tuple[int, list[int]] | None = None
    for _ in range(800):
        op = rng.integers(5)
        if op <= 1:
            written, rows = _append_new(tail, rng, next_id, 400)
            next_id += len(written)
            model.update(zip(written, rows, strict=True))
        elif op == 2 and model:
            victims = rng.choice(list(model), size=min(len(model), int(rng.integers(1, 30))), replace=False)
            removed = tail.remove(np.asarray([*victims.tolist(), 10**9], dtype=np.int64))
            assert sorted(removed.tolist()) == sorted(victims.tolist())
            for victim in victims.tolist():
                del model[victim]
        elif taken is None:
            span, ids_taken, vectors_taken = tail.front(int(rng.integers(1, 500)))
            assert ids_taken.tolist() == list(model)[: ids_taken.size]
            for memory_id, got in zip(ids_taken.tolist(), vectors_taken, strict=True):
                np.testing.assert_array_equal(got, model[memory_id])
            taken = span, ids_taken.tolist()
        else:
            span, listed = taken
            dropped = tail.drop_front(span).tolist()
            assert dropped == [i for i in listed if i in model]
            for memory_id in dropped:
                del model[memory_id]
            taken = None
        assert tail.count == len(model)
        asked = np.asarray([*rng.choice(max(next_id, 2), 20).tolist(), *list(model)[:5]], dtype=np.int64)
        got, found = tail.lookup(asked)
        assert found.tolist() == [i in model for i in asked.tolist()]
        for row in np.flatnonzero(found).tolist():
            np.testing.assert_array_equal(got[row], model[int(asked[row])])
        assert sorted(tail.live_ids().tolist()) == sorted(model)
    snapshot_ids, snapshot_vectors = tail.snapshot()
    assert snapshot_ids.tolist() == sorted(model)
    if model:
        np.testing.assert_array_equal(snapshot_vectors, np.stack([model[i] for i in snapshot_ids.tolist()]))


def test_search_reads_rows_in_place_and_in_the_buffer_as_one_tail(tmp_path: Path) -> None:
    rng = np.random.default_rng(23)
    index = VectorIndex(tmp_path, DIM, IndexConfig(build_batch=64))
    first = list(range(1, 3_001))
    mapped = _mapped_rows(rng, first)
    alive = np.ones(len(first), dtype=bool)
    alive[::7] = False  # in the saved graph already, say
    with index._tail_lock:
        index._tail.adopt(np.asarray(first, dtype=np.int64), mapped, alive.copy())
    later = rng.normal(size=(500, DIM)).astype(np.float32)
    index.add(np.arange(3_001, 3_501, dtype=np.int64), later)
    index.remove(np.asarray([2, 3_002], dtype=np.int64))
    live = {i: row for i, row, a in zip(first, mapped, alive, strict=True) if a}
    live.update(zip(range(3_001, 3_501), normalize_rows(later), strict=True))
    del live[2], live[3_002]
    ids = np.asarray(sorted(live), dtype=np.int64)
    matrix = np.stack([live[i] for i in ids.tolist()])
    queries = normalize_rows(rng.normal(size=(3, DIM)).astype(np.float32))
    for query in queries:
        sims = matrix @ query
        found = index.search(query[None, :], 10)
        assert set(found.ids.tolist()) == set(ids[np.argsort(-sims)[:TAIL_ALL]].tolist())
        assert index.search(query[None, :], ids.size).ids.tolist() == ids.tolist()
    for query, many in zip(queries, index.search_many(queries, 10), strict=True):
        best = ids[np.argsort(-(matrix @ query))[:10]]
        assert set(many.ids.tolist()) == set(best.tolist())
    while index._build_step():
        pass
    assert index.tail_count == 0
    assert sorted(index.graph_keys().tolist()) == ids.tolist()


def test_a_regrow_while_the_builder_inserts_does_not_shift_its_span() -> None:
    tail = FreshTail(DIM)
    rng = np.random.default_rng(3)
    for memory_id in range(1, 1_025):  # one at a time: the buffer ends full, its next append regrows it
        tail.append(np.asarray([memory_id], dtype=np.int64), _rows(rng, [memory_id]))
    tail.remove(np.asarray([3], dtype=np.int64))
    span, taken, _ = tail.front(10)
    tail.append(np.asarray([2_000], dtype=np.int64), _rows(rng, [2_000]))
    assert tail.drop_front(span).tolist() == taken.tolist() == [1, 2, *range(4, 11)]
    assert tail.front(1)[1].tolist() == [11]  # still waiting for the graph
