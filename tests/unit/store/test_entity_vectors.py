"""Entities' vectors held as one block each: read once, extended as the entity grows, dropped past the budget."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from memevo.sidecar.store.entity_vectors import EntityVectors

DIMENSION = 4
ROW_BYTES = DIMENSION * 4 + 8


def _vector_of(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """A row that names its id, so that a test sees which id a row belongs to."""
    return np.repeat(ids.astype(np.float32)[:, None], DIMENSION, axis=1)


class _Reader:
    def __init__(self) -> None:
        self.read: list[list[int]] = []

    def __call__(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        self.read.append(ids.tolist())
        return _vector_of(ids)


def test_an_entity_is_read_once_and_then_only_its_new_ids() -> None:
    reader = _Reader()
    held = EntityVectors(reader, DIMENSION, 1 << 20)
    ids = np.array([5, 9, 12], dtype=np.int64)
    first = held.block(1, ids)
    assert first is not None
    np.testing.assert_array_equal(first, _vector_of(ids))
    again = held.block(1, ids)
    assert again is not None
    np.testing.assert_array_equal(again, _vector_of(ids))
    grown = np.array([5, 9, 12, 3, 40], dtype=np.int64)  # a later write, and an older memory attributed later
    block = held.block(1, grown)
    assert block is not None
    np.testing.assert_array_equal(block, _vector_of(grown))
    assert reader.read == [[5, 9, 12], [3, 40]]
    np.testing.assert_array_equal(first, _vector_of(ids))  # a block handed out earlier is unchanged


def test_growth_past_the_buffer_keeps_every_row() -> None:
    held = EntityVectors(_Reader(), DIMENSION, 1 << 20)
    ids = np.zeros(0, dtype=np.int64)
    for step in range(1, 60):
        ids = np.append(ids, step * 7)
        block = held.block(3, ids)
        assert block is not None
        np.testing.assert_array_equal(block, _vector_of(ids))


def test_a_list_that_is_not_a_prefix_of_the_held_one_is_read_again() -> None:
    reader = _Reader()
    held = EntityVectors(reader, DIMENSION, 1 << 20)
    held.block(1, np.array([1, 2, 3], dtype=np.int64))
    other = np.array([1, 4], dtype=np.int64)
    block = held.block(1, other)
    assert block is not None
    np.testing.assert_array_equal(block, _vector_of(other))
    assert reader.read[-1] == [1, 4]


def test_a_shorter_list_is_served_from_the_held_rows() -> None:
    reader = _Reader()
    held = EntityVectors(reader, DIMENSION, 1 << 20)
    held.block(1, np.array([1, 2, 3], dtype=np.int64))
    block = held.block(1, np.array([1, 2], dtype=np.int64))
    assert block is not None
    np.testing.assert_array_equal(block, _vector_of(np.array([1, 2])))
    assert len(reader.read) == 1


def test_the_least_recently_used_entity_leaves_past_the_budget() -> None:
    reader = _Reader()
    held = EntityVectors(reader, DIMENSION, 60 * ROW_BYTES)
    for entity in (1, 2, 3):
        held.block(entity, np.arange(entity * 100, entity * 100 + 16, dtype=np.int64))
    held.block(1, np.arange(100, 116, dtype=np.int64))  # 1 is now the most recent: 2 goes first
    held.block(4, np.arange(400, 416, dtype=np.int64))
    assert held.nbytes <= 60 * ROW_BYTES
    reads = len(reader.read)
    held.block(1, np.arange(100, 116, dtype=np.int64))
    assert len(reader.read) == reads  # still held
    held.block(2, np.arange(200, 216, dtype=np.int64))
    assert len(reader.read) == reads + 1  # dropped, read again


def test_an_entity_larger_than_the_budget_is_not_held() -> None:
    reader = _Reader()
    held = EntityVectors(reader, DIMENSION, 10 * ROW_BYTES)
    assert held.block(1, np.arange(1, 12, dtype=np.int64)) is None
    assert reader.read == []
    assert EntityVectors(reader, DIMENSION, 0).block(1, np.arange(1, 2, dtype=np.int64)) is None


def test_concurrent_callers_growing_one_entity_get_the_right_rows() -> None:
    held = EntityVectors(_Reader(), DIMENSION, 1 << 24)
    full = np.arange(1, 2001, dtype=np.int64)
    wrong: list[int] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            ids = full[: int(rng.integers(1, full.size + 1))]
            block = held.block(7, ids)
            if block is None or not np.array_equal(block, _vector_of(ids)):
                wrong.append(ids.size)

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
