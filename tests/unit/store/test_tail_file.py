"""The fresh tail's files: what a start may take from them, and everything it must refuse (RocksDB has it all)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import IndexConfig
from memevo.sidecar.store import tail_file, vector_index
from memevo.sidecar.store.tail_file import HEADER_BYTES, TailFile, record_words
from memevo.sidecar.store.vector_index import VectorIndex, normalize_rows

DIM = 7
"""Odd: each record's vector is padded to whole words."""
STAMP = "1764660000.5"


def _unit(count: int, seed: int) -> np.ndarray:
    return normalize_rows(np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32))


def _filled(directory: Path, ids: np.ndarray, vectors: np.ndarray) -> None:
    tail = TailFile.open(directory, DIM, STAMP, next_id=1)
    for start in range(0, ids.size, 10):  # several appends, as several writes make
        tail.append(ids[start : start + 10], vectors[start : start + 10])
    tail.close()


def _read(
    directory: Path, ids: np.ndarray, *, next_id: int = 10_000, stamp: str = STAMP
) -> tuple[np.ndarray, np.ndarray]:
    tail = TailFile.open(directory, DIM, stamp, next_id=next_id)
    out = np.zeros((ids.size, DIM), dtype=np.float32)
    found = tail.read_into(ids, out)
    tail.close()
    return found, out


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + tail_file.SUFFIX))


def test_a_start_gets_back_every_appended_vector_and_only_those(tmp_path: Path) -> None:
    ids = np.arange(5, 45, dtype=np.int64)
    vectors = _unit(ids.size, 1)
    _filled(tmp_path, ids, vectors)
    asked = np.asarray([1, 5, 6, 30, 44, 45, 900], dtype=np.int64)
    found, out = _read(tmp_path, asked)
    assert found.tolist() == [False, True, True, True, True, False, False]
    np.testing.assert_array_equal(out[found], vectors[asked[found] - 5])
    assert not out[~found].any()
    # Scattered and out-of-order asks are copied row by row.
    shuffled = np.asarray([40, 7, 22], dtype=np.int64)
    found, out = _read(tmp_path, shuffled)
    assert found.all()
    np.testing.assert_array_equal(out, vectors[shuffled - 5])
    assert (tmp_path.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in _segments(tmp_path))


def test_a_torn_last_record_and_a_damaged_one_are_skipped_the_rest_kept(tmp_path: Path) -> None:
    ids = np.arange(1, 21, dtype=np.int64)
    vectors = _unit(ids.size, 2)
    _filled(tmp_path, ids, vectors)
    (path,) = _segments(tmp_path)
    record = 8 * record_words(DIM)
    content = bytearray(path.read_bytes())
    content[HEADER_BYTES + 4 * record + 20] ^= 0x40  # a flipped bit in id 5's vector
    path.write_bytes(bytes(content[: len(content) - record // 2]))  # id 20 torn by a kill
    found, out = _read(tmp_path, ids)
    assert np.flatnonzero(~found).tolist() == [4, 19]
    np.testing.assert_array_equal(out[found], vectors[found])


def test_files_of_another_directory_or_dimension_or_ahead_of_rocksdb_are_refused_and_removed(tmp_path: Path) -> None:
    ids = np.arange(1, 11, dtype=np.int64)
    _filled(tmp_path, ids, _unit(ids.size, 3))
    found, _ = _read(tmp_path, ids, stamp="another directory")
    assert not found.any()
    assert len(_segments(tmp_path)) == 1  # only the segment that open() started, empty

    _filled(tmp_path, ids, _unit(ids.size, 3))
    other = TailFile.open(tmp_path, DIM + 1, STAMP, next_id=100)
    other.close()
    found, _ = _read(tmp_path, ids)
    assert not found.any()

    _filled(tmp_path, ids, _unit(ids.size, 3))
    found, _ = _read(tmp_path, ids, next_id=10)  # id 10 is one RocksDB never gave out: the files are not its
    assert not found.any()
    found, _ = _read(tmp_path, ids, next_id=11)
    assert not found.any()  # they were removed, not just skipped


def test_a_segment_is_pruned_only_once_none_of_its_ids_is_still_in_the_tail(tmp_path: Path) -> None:
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=1)
    tail.append(np.arange(1, 11, dtype=np.int64), _unit(10, 4))
    first = tail.rotate()
    tail.append(np.arange(11, 21, dtype=np.int64), _unit(10, 5))
    assert tail.prune(first, needed=np.asarray([3, 15], dtype=np.int64)) == 0  # id 3 still waits for the graph
    second = tail.rotate()
    assert tail.prune(second, needed=np.asarray([15], dtype=np.int64)) == 1
    assert tail.prune(second, needed=np.zeros(0, dtype=np.int64)) == 1
    tail.close()
    found, _ = _read(tmp_path, np.arange(1, 21, dtype=np.int64))
    assert not found.any()


def test_a_failed_append_is_logged_not_raised_and_loses_only_the_files_copy(tmp_path: Path) -> None:
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=1)
    vectors = _unit(20, 6)
    tail.append(np.arange(1, 11, dtype=np.int64), vectors[:10])
    tail.flush()
    os.close(tail._descriptor)  # what a full disk or a lost device does to the next write
    tail.append(np.arange(11, 21, dtype=np.int64), vectors[10:])
    tail.flush()
    tail._descriptor = -1
    tail.close()
    found, out = _read(tmp_path, np.arange(1, 21, dtype=np.int64))
    assert found.tolist() == [True] * 10 + [False] * 10
    np.testing.assert_array_equal(out[:10], vectors[:10])


def test_a_start_up_rebuild_maps_what_the_files_hold_and_reads_the_rest(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(300, DIM)).astype(np.float32)
    kept = VectorIndex(tmp_path, DIM, IndexConfig(), tail_file=TailFile.open(tmp_path / "tail", DIM, STAMP, next_id=1))
    kept.add(np.arange(1, 201, dtype=np.int64), raw[:200])  # ids 201-300: written by an older version, say
    kept.close(save=False)

    index = VectorIndex(
        tmp_path, DIM, IndexConfig(), tail_file=TailFile.open(tmp_path / "tail", DIM, STAMP, next_id=301)
    )
    asked: list[int] = []

    def fill(ids: np.ndarray, rows: np.ndarray) -> None:
        asked.extend(ids.tolist())
        rows[:] = raw[ids - 1]

    index.begin_rebuild(np.arange(1, 301, dtype=np.int64), fill, "no saved index")
    assert asked == list(range(201, 301))
    # The 200 the files hold are read where they are (the read-only map), not copied: only the 100 read from
    # RocksDB are in the tail's own buffer.
    ((_, in_place, _), (buffer_ids, _, _)) = index._tail.parts()
    assert in_place.shape[0] == 200
    assert not in_place.flags.writeable
    assert buffer_ids.tolist() == list(range(201, 301))
    ids, unit = index.tail_snapshot()
    np.testing.assert_array_equal(ids, np.arange(1, 301))
    np.testing.assert_allclose(unit, normalize_rows(raw), atol=1e-6)
    assert index._persister is not None
    index._persister.join()  # the rows read from RocksDB are written to the files for the next start
    index.close(save=False)
    found, out = _read(tmp_path / "tail", np.arange(1, 301, dtype=np.int64), next_id=301)
    assert found.all()
    np.testing.assert_allclose(out, normalize_rows(raw), atol=1e-6)


def test_a_graph_save_removes_the_segments_it_covers(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    index = VectorIndex(
        tmp_path, DIM, IndexConfig(build_batch=64), tail_file=TailFile.open(tmp_path / "tail", DIM, STAMP, next_id=1)
    )
    index.add(np.arange(1, 101, dtype=np.int64), rng.normal(size=(100, DIM)).astype(np.float32))
    (written,) = _segments(tmp_path / "tail")
    index._build_step()  # 64 in the graph, 36 still in the tail: the segment stays
    index.save()
    assert written.exists()
    while index._build_step():
        pass
    index.save()
    assert not written.exists()
    assert len(_segments(tmp_path / "tail")) == 1  # the newest, for appends
    index.close(save=False)


@pytest.mark.parametrize("yield_every", [1, 1_000_000], ids=["while-serialised", "while-written"])
def test_a_save_past_its_deadline_changes_nothing_and_the_next_start_finds_every_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yield_every: int
) -> None:
    # A stop abandons a save that runs past its budget: the saved graph, its metadata and the fresh-tail files must
    # stay as they were, so that the next start maps what the older graph lacks.
    monkeypatch.setattr(vector_index, "SAVE_YIELD_EVERY", yield_every)
    vectors = _unit(200, 9)
    index = VectorIndex(
        tmp_path, DIM, IndexConfig(build_batch=100), tail_file=TailFile.open(tmp_path / "tail", DIM, STAMP, next_id=1)
    )
    index.add(np.arange(1, 101, dtype=np.int64), vectors[:100])
    while index._build_step():
        pass
    assert index.save()
    saved = (tmp_path / vector_index.INDEX_FILE).read_bytes()
    meta = (tmp_path / vector_index.INDEX_META_FILE).read_text()
    index.add(np.arange(101, 201, dtype=np.int64), vectors[100:])
    while index._build_step():
        pass
    segments = _segments(tmp_path / "tail")
    assert not index.save(deadline=time.monotonic() - 1.0)
    assert (tmp_path / vector_index.INDEX_FILE).read_bytes() == saved
    assert (tmp_path / vector_index.INDEX_META_FILE).read_text() == meta
    assert not (tmp_path / (vector_index.INDEX_FILE + ".tmp")).exists()
    assert set(segments) <= set(_segments(tmp_path / "tail"))  # nothing pruned
    assert index._dirty  # a later save (or the next start) still owes the graph its last 100
    index.close(save=False)

    restarted = VectorIndex(tmp_path, DIM, IndexConfig())
    assert restarted.load()
    assert restarted.graph_count == 100
    found, out = _read(tmp_path / "tail", np.arange(101, 201, dtype=np.int64), next_id=201)
    assert found.all()
    np.testing.assert_allclose(out, vectors[100:], atol=1e-6)


def test_the_write_path_never_waits_for_the_disk_rows_past_the_queue_are_left_to_rocksdb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_file, "MAX_PENDING_ROWS", 20)
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=1)
    vectors = _unit(40, 9)
    with tail._lock:  # the disk stalls: the writer thread cannot write
        for start in range(0, 40, 10):
            tail.append(np.arange(1 + start, 11 + start, dtype=np.int64), vectors[start : start + 10])
    tail.close()
    found, out = _read(tmp_path, np.arange(1, 41, dtype=np.int64))
    assert found.tolist() == [True] * 20 + [False] * 20
    np.testing.assert_array_equal(out[:20], vectors[:20])


@pytest.mark.parametrize("count", [0, 1])
def test_empty_appends_and_reads_do_nothing(tmp_path: Path, count: int) -> None:
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=1)
    tail.append(np.zeros(0, dtype=np.int64), np.zeros((0, DIM), dtype=np.float32))
    out = np.zeros((count, DIM), dtype=np.float32)
    assert tail.read_into(np.arange(count, dtype=np.int64), out).tolist() == [False] * count
    tail.close()


def test_a_start_reads_only_the_newest_record_of_each_asked_id_in_place(tmp_path: Path) -> None:
    old, new = _unit(20, 10), _unit(5, 11)
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=1)
    tail.append(np.arange(1, 21, dtype=np.int64), old)
    tail.rotate()
    tail.append(np.arange(6, 11, dtype=np.int64), new)  # a later copy of ids 6-10 (a start's write-back, say)
    tail.close()
    tail = TailFile.open(tmp_path, DIM, STAMP, next_id=100)
    asked = np.asarray([2, 3, 7, 9, 15], dtype=np.int64)
    blocks, found = tail.blocks(asked)
    assert found.all()
    wanted = {int(i): v for ids, vectors, alive in blocks for i, v in zip(ids[alive], vectors[alive], strict=True)}
    assert sorted(wanted) == asked.tolist()
    for memory_id, expected in ((2, old[1]), (3, old[2]), (7, new[1]), (9, new[3]), (15, old[14])):
        np.testing.assert_array_equal(wanted[memory_id], expected)
    # Each cut to its rows from the first wanted to the last: ids 2-15 of the first, 7-9 of the second.
    assert [block[0].size for block in blocks] == [14, 3]
    tail.close()
