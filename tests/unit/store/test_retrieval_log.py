"""RetrievalLog: queued unsynced writes are written in batches by its thread; readers of a queued key wait."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memevo.sidecar.store import retrieval_log
from memevo.sidecar.store.retrieval_log import RetrievalLog
from memevo.sidecar.store.rocks import CF_RETRIEVALS, RocksStore


def _open(path: Path) -> RocksStore:
    return RocksStore(path, dimension=8, embedder_identity="none")


def test_a_reader_of_a_queued_key_waits_for_its_write(tmp_path: Path) -> None:
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    release = threading.Event()

    def slow() -> bytes:
        release.wait(timeout=10)
        return b"record"

    log.add([(b"r1", slow), (b"r1|x", lambda: b"observation")])
    assert store.get(CF_RETRIEVALS, b"r1") is None  # still being encoded by the log's thread
    threading.Timer(0.05, release.set).start()
    log.written([b"r1"])
    assert store.get(CF_RETRIEVALS, b"r1") == b"record"
    assert store.get(CF_RETRIEVALS, b"r1|x") == b"observation"  # queued together, written together
    log.close()
    store.close()


def test_close_writes_everything_queued(tmp_path: Path) -> None:
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    for i in range(500):
        log.add([(b"k%03d" % i, _constant(b"v%d" % i))])
    log.close()
    log.close()  # idempotent
    assert store.multi_get(CF_RETRIEVALS, [b"k%03d" % i for i in range(500)]) == [b"v%d" % i for i in range(500)]
    store.close()


def test_past_the_bound_callers_write_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval_log, "MAX_QUEUED", 1)
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    release = threading.Event()
    log.add([(b"first", lambda: (release.wait(timeout=10) and b"1") or b"")])
    # The writer holds "first" (encoding); with the queue at its bound a caller writes inline, at once.
    log.add([(b"second", lambda: b"2"), (b"third", lambda: b"3")])
    log.add([(b"fourth", lambda: b"4"), (b"fifth", lambda: b"5")])
    assert store.get(CF_RETRIEVALS, b"fifth") == b"5"
    release.set()
    log.close()
    assert store.multi_get(CF_RETRIEVALS, [b"first", b"second", b"third", b"fourth"]) == [b"1", b"2", b"3", b"4"]
    store.close()


def test_a_failing_encoder_loses_its_batch_without_stopping_the_log(tmp_path: Path) -> None:
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)

    def broken() -> bytes:
        raise RuntimeError("bug")

    log.add([(b"bad", broken)])
    log.written([b"bad"])  # does not hang
    log.add([(b"good", lambda: b"ok")])
    log.written([b"good"])
    assert store.get(CF_RETRIEVALS, b"bad") is None
    assert store.get(CF_RETRIEVALS, b"good") == b"ok"
    log.close()
    store.close()


def test_a_refused_write_is_dropped_and_readers_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    monkeypatch.setattr(store, "_db", _Refusing(store._db))
    log.add([(b"lost", lambda: b"x")])
    log.written([b"lost"])
    monkeypatch.undo()
    assert store.get(CF_RETRIEVALS, b"lost") is None
    log.close()
    store.close()


def test_entries_added_while_the_writer_lingers_go_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retrieval_log, "LINGER_S", 3600.0)  # only close() or a reader ends the wait
    store = _open(tmp_path)
    batches: list[int] = []
    put_many = store.put_many_unsynced

    def counted(cf: str, items: list[tuple[bytes, bytes]]) -> bool:
        batches.append(len(items))
        return put_many(cf, items)

    monkeypatch.setattr(store, "put_many_unsynced", counted)
    log = RetrievalLog(store, CF_RETRIEVALS)
    for i in range(50):
        log.add([(b"k%02d" % i, _constant(b"v")), (b"k%02d|x" % i, _constant(b"o"))])
    log.close()
    assert batches == [100]
    assert store.multi_get(CF_RETRIEVALS, [b"k49", b"k49|x"]) == [b"v", b"o"]
    store.close()


def test_a_reader_does_not_wait_for_the_linger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval_log, "LINGER_S", 3600.0)  # were the reader to wait it out, the test would hang
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    log.add([(b"r1", _constant(b"record"))])
    log.written([b"r1"])
    assert store.get(CF_RETRIEVALS, b"r1") == b"record"
    log.add([(b"r2", _constant(b"next"))])  # a later reader hurries its own batch too
    log.written([b"r2"])
    assert store.get(CF_RETRIEVALS, b"r2") == b"next"
    log.close()
    store.close()


def test_a_busy_log_is_not_woken_by_its_callers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Waking the writer is a futex call made under the interpreter lock; with recalls arriving steadily the writer
    # looks again one linger after each batch by itself, and only an idle (sleeping) writer is woken by an add.
    monkeypatch.setattr(retrieval_log, "LINGER_S", 0.2)
    store = _open(tmp_path)
    log = RetrievalLog(store, CF_RETRIEVALS)
    wakes: list[int] = []
    notify = log._work.notify

    def counted(n: int = 1) -> None:
        wakes.append(n)
        notify(n)

    monkeypatch.setattr(log._work, "notify", counted)

    def wait_for(key: bytes) -> None:
        for _ in range(1000):
            if store.get(CF_RETRIEVALS, key) is not None:
                return
            threading.Event().wait(0.01)
        raise AssertionError(f"{key!r} never written")

    log.add([(b"k1", _constant(b"1"))])  # the writer sleeps: this add wakes it
    wait_for(b"k1")
    assert len(wakes) == 1
    log.add([(b"k2", _constant(b"2"))])  # just after a batch: written by the writer's own look, no wake-up
    wait_for(b"k2")
    assert len(wakes) == 1
    for _ in range(100):  # once it found nothing it sleeps again, and the next add wakes it
        if log._asleep:
            break
        threading.Event().wait(0.02)
    assert log._asleep
    log.add([(b"k3", _constant(b"3"))])
    wait_for(b"k3")
    assert len(wakes) == 2
    log.close()
    store.close()


def _constant(value: bytes) -> Callable[[], bytes]:
    return lambda: value


class _Refusing:
    """A database whose writes fail as on a full disk."""

    def __init__(self, db: object) -> None:
        self._db = db

    def write(self, *_: object) -> None:
        raise OSError("No space left on device")
