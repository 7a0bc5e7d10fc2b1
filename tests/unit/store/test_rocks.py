"""RocksStore: metadata checks, group commit, dense ids and sequences, failed mutations write nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memevo.sidecar.errors import FailedPrecondition, InvalidArgument, Unavailable
from memevo.sidecar.store.rocks import CF_CHANGELOG, CF_MEMORIES, RocksStore, Txn, u64_key


def _open(path: Path, dimension: int = 8, embedder: str = "none") -> RocksStore:
    return RocksStore(path, dimension=dimension, embedder_identity=embedder)


def _write_one(txn: Txn) -> int:
    memory_id = txn.allocate_id()
    sequence = txn.next_sequence()
    txn.put(CF_MEMORIES, u64_key(memory_id), b"m%d" % memory_id)
    txn.put(CF_CHANGELOG, u64_key(sequence), b"e%d" % memory_id)
    return memory_id


def test_new_directory_needs_a_dimension(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="dimension") as refused:
        _open(tmp_path / "data", dimension=0)
    assert refused.value.reason == "DIMENSION_REQUIRED"
    # Refused before anything is made: no directory left for a later open to take for a data directory.
    assert not (tmp_path / "data").exists()


def test_a_reader_refuses_a_directory_no_store_initialised_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="not a memevo data directory") as refused:
        RocksStore(tmp_path / "data", dimension=0, embedder_identity="none", create=False)
    assert refused.value.reason == "NOT_A_DATA_DIR"
    assert not (tmp_path / "data").exists()
    # A RocksDB without memevo's metadata (what a start refused for its dimension used to leave).
    import rocksdict

    (tmp_path / "leftover").mkdir()
    rocksdict.Rdict(str(tmp_path / "leftover" / "rocksdb"), rocksdict.Options(raw_mode=True)).close()
    with pytest.raises(FailedPrecondition, match="no memevo metadata") as refused:
        RocksStore(tmp_path / "leftover", dimension=0, embedder_identity="none", create=False)
    assert refused.value.reason == "NOT_A_DATA_DIR"
    _open(tmp_path / "data").close()
    store = RocksStore(tmp_path / "data", dimension=0, embedder_identity="none", create=False)
    assert store.dimension == 8
    store.close()


def test_dimension_and_embedder_are_fixed_per_directory(tmp_path: Path) -> None:
    _open(tmp_path, dimension=8, embedder="local:a").close()
    with pytest.raises(FailedPrecondition, match="8-d"):
        _open(tmp_path, dimension=16, embedder="local:a")
    with pytest.raises(FailedPrecondition, match="embedder"):
        _open(tmp_path, dimension=8, embedder="local:b")
    store = _open(tmp_path, dimension=0, embedder="none")  # vectors-only clients may reopen it
    assert store.dimension == 8
    assert store.embedder_identity == "local:a"
    store.close()


def test_second_open_of_the_same_directory_is_refused(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        with pytest.raises(FailedPrecondition, match="in use"):
            _open(tmp_path)
    finally:
        store.close()


def test_concurrent_writers_get_dense_distinct_ids_that_survive_reopen(tmp_path: Path) -> None:
    store = _open(tmp_path)
    results: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(100):
            memory_id = store.apply(_write_one)
            with lock:
                results.append(memory_id)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(1, 601))
    assert store.last_sequence == 600
    store.close()
    reopened = _open(tmp_path)
    assert reopened.next_id == 601
    assert reopened.last_sequence == 600
    assert [k for k, _ in reopened.iterate(CF_CHANGELOG)] == [u64_key(i) for i in range(1, 601)]
    reopened.close()


def test_a_failing_mutation_writes_nothing_and_leaves_no_gap(tmp_path: Path) -> None:
    store = _open(tmp_path)

    def failing(txn: Txn) -> None:
        _write_one(txn)
        raise InvalidArgument.field("memory.vector", "bad")

    first = store.submit(_write_one)
    bad = store.submit(failing)
    last = store.submit(_write_one)
    assert first.result() == 1
    with pytest.raises(InvalidArgument):
        bad.result()
    assert last.result() == 2  # the failed mutation's id was given back
    assert store.last_sequence == 2
    assert store.get(CF_MEMORIES, u64_key(3)) is None
    store.close()


def test_reads_inside_a_group_see_earlier_uncommitted_writes(tmp_path: Path) -> None:
    store = _open(tmp_path)
    seen: list[bytes | None] = []

    def writer(txn: Txn) -> None:
        txn.put(CF_MEMORIES, b"k", b"v1")

    def reader(txn: Txn) -> None:
        seen.append(txn.get(CF_MEMORIES, b"k"))

    futures = [store.submit(writer), store.submit(reader)]
    for future in futures:
        future.result()
    assert seen == [b"v1"]
    store.close()


def test_pending_lists_a_slots_values_oldest_first_and_only_the_newest_when_asked(tmp_path: Path) -> None:
    store = _open(tmp_path)

    def mutation(txn: Txn) -> tuple[list[int], ...]:
        for value in range(5):
            txn.add_pending("ids", b"a", value)
            txn.add_pending("ids", b"b", 10 + value)
        return txn.pending("ids", b"a"), txn.pending("ids", b"a", newest=2), txn.pending("ids", b"c", newest=3)

    assert store.apply(mutation) == ([0, 1, 2, 3, 4], [3, 4], [])
    store.close()


def test_applies_and_submits_from_many_threads_share_groups_and_stay_dense(tmp_path: Path) -> None:
    store = _open(tmp_path)
    results: list[int] = []
    lock = threading.Lock()

    def applier() -> None:
        for _ in range(60):
            memory_id = store.apply(_write_one)
            with lock:
                results.append(memory_id)

    def submitter() -> None:
        futures = [store.submit(_write_one) for _ in range(60)]
        ids = [future.result(timeout=60) for future in futures]
        assert ids == sorted(ids)  # one thread's submissions commit in order
        with lock:
            results.extend(ids)

    threads = [threading.Thread(target=applier) for _ in range(4)]
    threads += [threading.Thread(target=submitter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    assert sorted(results) == list(range(1, 361))
    reopened = _open(tmp_path)
    assert reopened.last_sequence == 360
    assert [k for k, _ in reopened.iterate(CF_CHANGELOG)] == [u64_key(i) for i in range(1, 361)]
    reopened.close()


def test_a_lone_write_commits_on_the_callers_thread_and_queued_ones_on_the_committer(tmp_path: Path) -> None:
    store = _open(tmp_path)
    ran_on: list[str] = []

    def recorded(txn: Txn) -> int:
        ran_on.append(threading.current_thread().name)
        return _write_one(txn)

    assert store.apply(recorded) == 1
    assert ran_on == [threading.current_thread().name]  # no hand-off for a write with nothing queued
    # With a group being committed, a write queues for the committer thread instead.
    entered, release = threading.Event(), threading.Event()

    def slow(txn: Txn) -> int:
        entered.set()
        assert release.wait(30)
        return _write_one(txn)

    first = threading.Thread(target=store.apply, args=(slow,), name="first-writer")
    first.start()
    assert entered.wait(30)
    queued = store.submit(recorded)
    release.set()
    first.join(30)
    assert queued.result(timeout=30) == 3
    assert ran_on[-1] == "memevo-commit"
    store.close()
    reopened = _open(tmp_path)
    assert reopened.last_sequence == 3
    reopened.close()


def test_a_failing_publish_is_logged_and_the_durable_write_still_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _open(tmp_path)

    def fail() -> None:
        raise RuntimeError("the columns refused it")

    def broken_publish(txn: Txn) -> int:
        txn.on_commit(fail)
        return _write_one(txn)

    try:
        assert store.apply(broken_publish) == 1
        assert store.apply(_write_one) == 2  # the next writer is not stuck behind the failure
        assert store.get(CF_MEMORIES, u64_key(1)) == b"m1"
        assert "publishing a committed write failed" in caplog.text
    finally:
        store.close()


def test_writes_after_close_are_refused_as_unavailable(tmp_path: Path) -> None:
    store = _open(tmp_path)
    store.apply(_write_one)
    store.close()
    with pytest.raises(Unavailable):
        store.apply(_write_one)
    with pytest.raises(Unavailable):
        store.submit(_write_one)
