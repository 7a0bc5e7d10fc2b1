"""The start-up snapshot: a snapshot plus the changes after it rebuild exactly what a scan of RocksDB would.

A snapshot is written at a clean close and in the background while serving, and kept once read: a start after
a crash loads the last one and reads again only the memories the change log (and the checkpoints of access
statistics) name after it. A snapshot that is damaged, torn, of another data directory or ahead of RocksDB is
ignored and every record is scanned.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import re
import shutil
import stat
import threading
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig, SnapshotConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.lexical import LexicalIndex, NamespacedLexicalIndex
from memevo.sidecar.store import snapshot as snapshot_module
from memevo.sidecar.store.columns import _COLUMN_SPECS
from memevo.sidecar.store.snapshot import MAGIC, SNAPSHOT_FILE, SnapshotError
from memevo.v1 import memory_pb2

DIMENSION = 8
WORDS = ("coffee", "budget", "paris", "deploy", "cache", "vendor")


def _config(data_dir: Path) -> SidecarConfig:
    return SidecarConfig(data_dir=data_dir, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION)


def _every_100_changes(
    data_dir: Path, *, max_age_s: float = 0, min_interval_s: float = SnapshotConfig.min_interval_s
) -> SidecarConfig:
    """Snapshots due at 100 changes, never by age alone unless ``max_age_s`` is given."""
    return SidecarConfig(
        data_dir=data_dir,
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        snapshot=SnapshotConfig(every_changes=100, max_age_s=max_age_s, min_interval_s=min_interval_s),
    )


def _fill(engine: Engine, count: int) -> None:
    rng = np.random.default_rng(0)
    items = []
    for i in range(count):
        strategy = i % 7 == 0
        fact = not strategy and i % 5 == 1  # a value of each shape: the value_type column is rebuilt too
        items.append(
            NewMemory(
                content=f"{WORDS[i % 6]} {WORDS[(i * 5) % 6]} note {i}",
                vector=rng.standard_normal(DIMENSION).astype(np.float32),
                namespace=("default", "team-a", "team-b")[i % 3],
                kind=memory_pb2.MEMORY_KIND_STRATEGY
                if strategy
                else memory_pb2.MEMORY_KIND_FACT
                if fact
                else memory_pb2.MEMORY_KIND_EPISODE,
                fact_attribute=f"a{i}" if fact else "",
                fact_value=("https://x.dev/a", "2026-01-02", "Ana Lopez")[i % 3] if fact else "",
                entity=f"e{i % 5}" if i % 2 or fact else "",
                tags=("x", f"t{i % 3}") if i % 4 == 0 else (),
                task_signature=f"task-{i % 2}" if strategy else "",
                importance=1 + i % 10,
            )
        )
    engine.remember(items, rpc="batch")
    ids = np.arange(1, count + 1, 3, dtype=np.int64)
    engine.columns.record_access(ids, 1_000.0, 7)  # statistics only in memory until a checkpoint
    engine.forget([2, 5], reason="test", keep_history=False)
    # As the daemon does before a clean close: every access counted in memory reaches RocksDB.
    engine.checkpoint_statistics(engine.columns.take_accessed())


def _state(engine: Engine) -> dict[str, Any]:
    """Everything start-up rebuilds, for the live memories (a forgotten one's row may stay, marked EVICTED)."""
    columns = engine.columns
    live = columns.live_ids()
    live_set = set(live.tolist())
    arrays = {k: v[live].copy() for k, v in vars(columns).items() if isinstance(v, np.ndarray) and v.ndim == 1}
    # Interned codes depend on the order strings were first seen: compare the strings.
    for name, interner in (
        ("namespace", columns.namespaces),
        ("entity", columns.entities),
        ("signature", columns.signatures),
        ("fields", columns.field_sets),
    ):
        arrays[name] = np.asarray([interner.string(int(c)) if c >= 0 else "" for c in arrays[name]])
    lexical = {}
    for ns in ("default", "team-a", "team-b"):
        for word in WORDS:
            # Ids only: a running index keeps a forgotten memory's postings, which nudges BM25 statistics.
            ids, _ = engine.lexical.search(ns, word)
            lexical[(ns, word)] = sorted(i for i in ids.tolist() if i in live_set)
    return {
        "arrays": arrays,
        "live_ids": live.tolist(),
        "tags": {i: t for i, t in columns.tags.items() if i in live_set},
        "namespaces": {
            columns.namespaces.string(c): [i for i in columns.namespace_ids(c).tolist() if i in live_set]
            for c in range(len(columns.namespaces))
        },
        "lexical": lexical,
        "strategies": {key: [i for i in ids if i in live_set] for key, ids in engine.strategies.items()},
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["arrays"].keys() == b["arrays"].keys()
    for name, left in a["arrays"].items():
        right = b["arrays"][name]
        if left.dtype.kind == "f":  # times are stored with microsecond precision, held in memory exactly
            same = np.allclose(left, right, rtol=0.0, atol=1e-5, equal_nan=True)
        else:
            same = np.array_equal(left, right)
        assert same, name
    for key in ("live_ids", "tags", "namespaces", "lexical", "strategies"):
        assert a[key] == b[key], key


def test_a_clean_close_snapshot_restores_what_a_scan_builds(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 300)
    engine.close()
    assert (tmp_path / SNAPSHOT_FILE).exists()

    restored = Engine(_config(tmp_path))
    assert (tmp_path / SNAPSHOT_FILE).exists(), "a read snapshot stays: a crash after this start reuses it"
    from_snapshot = _state(restored)
    # The restored engine keeps working: a new write lands in the restored columns and indexes.
    _fill(restored, 30)
    after_snapshot = _state(restored)
    restored.close()
    (tmp_path / SNAPSHOT_FILE).unlink()

    scanned = Engine(_config(tmp_path))
    after_scan = _state(scanned)
    scanned.close()
    _assert_same(after_snapshot, after_scan)
    assert len(from_snapshot["live_ids"]) == 298
    assert from_snapshot["strategies"], "the fill should have made strategies"
    assert len(set(from_snapshot["arrays"]["value_type"].tolist())) == 4, "no value, a URL, a date and a name"


def _crash(engine: Engine) -> None:
    """Leave the data directory as a SIGKILL would: no snapshot and no index save at the end.

    RocksDB is closed only to release its lock in this process; its synced WAL already held every write.
    """
    engine._snapshot_stop.set()
    engine._snapshotter.join()
    engine.index.close(save=False)
    engine.store.close()
    engine._closed = True


def _scanned(tmp_path: Path) -> dict[str, Any]:
    """What a start without any snapshot builds (the snapshot file is set aside meanwhile)."""
    path = tmp_path / SNAPSHOT_FILE
    kept = path.read_bytes() if path.exists() else None
    path.unlink(missing_ok=True)
    scanned = Engine(_config(tmp_path))
    try:
        return _state(scanned)
    finally:
        _crash(scanned)
        path.unlink(missing_ok=True)
        if kept is not None:
            path.write_bytes(kept)


def _vector(seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(DIMENSION).astype(np.float32)


def _change_everything(engine: Engine) -> None:
    """After a snapshot: new memories, a supersession, a state change, a forget, a deletion, statistics."""
    written = engine.remember(
        [
            NewMemory(content="vendor cache note fresh", vector=_vector(901), namespace="team-b", tags=("late",)),
            NewMemory(
                content="deploy strategy fresh",
                vector=_vector(902),
                kind=memory_pb2.MEMORY_KIND_STRATEGY,
                task_signature="task-0",
            ),
            NewMemory(  # memory 7 was fact (default, e1, a6): a new value supersedes it
                content="paris value changed",
                vector=_vector(903),
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity="e1",
                fact_attribute="a6",
                fact_value="Berta Ruiz",
            ),
        ]
    )
    fresh = [w.memory.id for w in written]
    engine.remember(
        [NewMemory(content="budget follows", vector=_vector(904), reasoning_ids=(fresh[0],), namespace="team-b")]
    )
    engine.forget([10], reason="test", keep_history=True)  # OBSOLETE: the record stays
    engine.forget([11, fresh[1]], reason="test", keep_history=False)  # deleted: an old one and a new one
    engine.columns.record_access(np.asarray([12, 13, fresh[0]], dtype=np.int64), 5_000.0, 40)
    engine.checkpoint_statistics(engine.columns.take_accessed())


def test_a_crash_after_a_snapshot_catches_up_every_change_made_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.engine")
    engine = Engine(_config(tmp_path))
    _fill(engine, 120)
    assert engine.write_snapshot()
    _change_everything(engine)
    live = _state(engine)
    _crash(engine)

    restarted = Engine(_config(tmp_path))
    try:
        caught_up = _state(restarted)
        columns = restarted.columns
        assert columns.state[7] == memory_pb2.MEMORY_STATE_OBSOLETE, "superseded after the snapshot"
        assert columns.state[10] == memory_pb2.MEMORY_STATE_OBSOLETE, "forgotten with history after the snapshot"
        assert columns.state[11] == memory_pb2.MEMORY_STATE_EVICTED, "deleted after the snapshot"
        assert columns.access_count[12] == live["arrays"]["access_count"][live["live_ids"].index(12)] >= 1
        assert columns.last_access_turn[13] == 40, "checkpointed statistics after the snapshot"
    finally:
        _crash(restarted)
    assert "restored" in caplog.text
    _assert_same(caught_up, live)
    _assert_same(caught_up, _scanned(tmp_path))


def test_the_copy_under_the_commit_lock_takes_no_posting_and_no_id_list(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    try:
        _fill(engine, 60)
        # What write_snapshot runs while writers wait: it must not copy what grows with the store's words and ids.
        writer = snapshot_module.collect({"columns": engine.columns, "lexical": engine.lexical})
        assert not [name for name, _ in writer.stored_arrays() if name.endswith(".items")]
        writer.finish()  # after writers are let go
        items = [name for name, _ in writer.stored_arrays() if name.endswith(".items")]
        assert "lexical/0/ids.items" in items
        assert "columns/by_namespace.items" in items
    finally:
        _crash(engine)


def test_writes_run_while_the_snapshot_copies_what_grows_and_a_start_catches_them_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 120)
    during: list[int] = []
    finish = snapshot_module.SnapshotWriter.finish

    def finish_after_a_write(writer: snapshot_module.SnapshotWriter, cancelled: Callable[[], bool] | None) -> bool:
        def write() -> None:
            # A word the store has (postings copied from here on) and one it has not, an entity's id list.
            written = engine.remember(
                [NewMemory(content="coffee zeppelin", vector=_vector(77), namespace="team-a", entity="e1")]
            )
            during.append(written[0].memory.id)

        writer_thread = threading.Thread(target=write)
        writer_thread.start()
        writer_thread.join(timeout=120)
        assert not writer_thread.is_alive(), "a write waited for the snapshot's copy of postings and id lists"
        return finish(writer, cancelled)

    monkeypatch.setattr(snapshot_module.SnapshotWriter, "finish", finish_after_a_write)
    assert engine.write_snapshot()
    monkeypatch.undo()
    assert len(during) == 1
    _crash(engine)

    restarted = Engine(_config(tmp_path))
    try:
        # The snapshot left the write out (it came after its sequence) and the start read it again: once.
        _assert_restored(engine, restarted)
        ids, _ = restarted.lexical.search("team-a", "coffee zeppelin")
        assert ids.tolist().count(during[0]) == 1
    finally:
        _crash(restarted)


def test_a_stale_snapshot_left_by_a_lost_rename_still_catches_up(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 50)
    engine.close()
    stale = (tmp_path / SNAPSHOT_FILE).read_bytes()
    engine = Engine(_config(tmp_path))
    _fill(engine, 10)  # more writes: RocksDB moves past the old snapshot
    _change_everything(engine)
    expected = _state(engine)
    engine.close()
    (tmp_path / SNAPSHOT_FILE).write_bytes(stale)  # as if the new one had not been written

    reopened = Engine(_config(tmp_path))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        _crash(reopened)


@pytest.mark.parametrize("source", ["another directory", "ahead of rocksdb"])
def test_a_snapshot_ahead_of_rocksdb_or_of_another_directory_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, source: str
) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.engine")
    mine = tmp_path / "mine"
    engine = Engine(_config(mine))
    _fill(engine, 40)
    expected = _state(engine)
    engine.close()
    if source == "another directory":
        other = tmp_path / "other"
        engine = Engine(_config(other))
        _fill(engine, 80)
        engine.close()
        planted = (other / SNAPSHOT_FILE).read_bytes()
    else:  # a later snapshot of this directory beside an older copy of its RocksDB (a restored backup)
        shutil.copytree(mine / "rocksdb", tmp_path / "backup")
        engine = Engine(_config(mine))
        _fill(engine, 20)
        assert engine.write_snapshot()
        engine.close()
        planted = (mine / SNAPSHOT_FILE).read_bytes()
        shutil.rmtree(mine / "rocksdb")
        shutil.copytree(tmp_path / "backup", mine / "rocksdb")
    (mine / SNAPSHOT_FILE).write_bytes(planted)
    reopened = Engine(_config(mine))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        _crash(reopened)
    assert "does not fit the data directory" in caplog.text


def test_a_write_torn_by_a_kill_leaves_the_previous_snapshot_in_use(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 60)
    assert engine.write_snapshot()
    _change_everything(engine)
    # Killed while the next snapshot was being written: a partial temporary file, the old snapshot intact.
    snapshot_path = tmp_path / SNAPSHOT_FILE
    (tmp_path / (SNAPSHOT_FILE + ".tmp")).write_bytes(snapshot_path.read_bytes()[:1000])
    expected = _state(engine)
    _crash(engine)
    restarted = Engine(_config(tmp_path))
    try:
        _assert_same(_state(restarted), expected)
    finally:
        restarted.close()
    assert not (tmp_path / (SNAPSHOT_FILE + ".tmp")).exists(), "a start removes the torn file"


def test_a_torn_snapshot_file_falls_back_to_the_scan_after_a_crash(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 60)
    assert engine.write_snapshot()
    _change_everything(engine)
    expected = _state(engine)
    _crash(engine)
    path = tmp_path / SNAPSHOT_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a file system that lost its tail
    restarted = Engine(_config(tmp_path))
    try:
        _assert_same(_state(restarted), expected)
    finally:
        _crash(restarted)


def test_the_background_thread_writes_a_snapshot_after_enough_changes(tmp_path: Path) -> None:
    config = SidecarConfig(
        data_dir=tmp_path,
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        snapshot=SnapshotConfig(every_changes=50, min_interval_s=0.0, cost_ratio=0.0),
    )
    engine = Engine(config)
    try:
        _fill(engine, 40)  # fewer changes than the threshold: none written
        assert not (tmp_path / SNAPSHOT_FILE).exists()
        _fill(engine, 40)
        deadline = time.monotonic() + 60
        while not (tmp_path / SNAPSHOT_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / SNAPSHOT_FILE).exists()
        expected = _state(engine)
    finally:
        _crash(engine)
    restarted = Engine(_config(tmp_path))
    try:
        _assert_same(_state(restarted), expected)
    finally:
        _crash(restarted)


def test_a_corrupt_snapshot_falls_back_to_the_scan(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 40)
    expected = _state(engine)
    engine.close()
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"not a snapshot")
    reopened = Engine(_config(tmp_path))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        reopened.close()


def _assert_equal_fields(left: Any, right: Any, where: str) -> None:
    """Every attribute of two objects equal, recursively: what a snapshot restores is what the close held."""
    assert type(left) is type(right), where
    if isinstance(left, np.ndarray):
        assert left.dtype == right.dtype, where
        assert left.shape == right.shape, where
        assert np.array_equal(left, right, equal_nan=left.dtype.kind == "f"), where
    elif isinstance(left, dict):
        assert left.keys() == right.keys(), where
        for key in left:
            _assert_equal_fields(left[key], right[key], f"{where}[{key!r}]")
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right), where
        for position, (a, b) in enumerate(zip(left, right, strict=True)):
            _assert_equal_fields(a, b, f"{where}[{position}]")
    elif isinstance(left, (int, float, str, bytes, set, frozenset, array, type(None))):
        assert left == right, where
    elif isinstance(left, type(threading.Lock())):
        assert not right.locked(), where
    elif isinstance(left, LexicalIndex):
        _assert_equal_fields(_lexical_fields(left), _lexical_fields(right), where)
    else:
        assert vars(left).keys() == vars(right).keys(), where
        for name in vars(left):
            _assert_equal_fields(vars(left)[name], vars(right)[name], f"{where}.{name}")


def _lexical_fields(index: LexicalIndex) -> dict[str, Any]:
    """A word index's fields, its postings as arrays by word: those a start restored and no write has touched since
    are kept as the snapshot gave them (one joined array), the others as the index's own appendable arrays."""
    fields = dict(vars(index))
    restored = fields.pop("_restored")
    ids = {word: np.frombuffer(part, dtype=np.uint64) for word, part in fields.pop("_ids").items()}
    counts = {word: np.frombuffer(part, dtype=np.uint16) for word, part in fields.pop("_counts").items()}
    if restored is not None:
        for word in restored.words:
            posting = restored.posting(word)
            if posting is not None:
                ids[word], counts[word] = posting
    return {**fields, "ids": ids, "counts": counts}


def _assert_restored(held: Engine, restored: Engine) -> None:
    """Every field of the structures a start restores equals what ``held`` had, in the rows in use (the spare
    capacity past them is empty rows, which a snapshot does not store)."""
    for columns in (held.columns, restored.columns):
        for name in _COLUMN_SPECS:
            setattr(columns, name, getattr(columns, name)[: columns.size])
    _assert_equal_fields(
        {"columns": held.columns, "lexical": held.lexical, "strategies": held.strategies},
        {"columns": restored.columns, "lexical": restored.lexical, "strategies": restored.strategies},
        "snapshot",
    )


def test_every_field_of_the_restored_structures_equals_what_the_close_held(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 200)
    engine.columns.record_access(np.asarray([3, 4], dtype=np.int64), 2_000.0, 9)  # not checkpointed: kept as is
    engine.close()

    restored = Engine(_config(tmp_path))
    try:
        _assert_restored(engine, restored)
    finally:
        restored.close()


def _snapshot_of_a_filled_engine(tmp_path: Path) -> dict[str, Any]:
    engine = Engine(_config(tmp_path))
    _fill(engine, 60)
    expected = _state(engine)
    engine.close()
    return expected


def _reopens_from_rocksdb(tmp_path: Path, expected: dict[str, Any]) -> None:
    reopened = Engine(_config(tmp_path))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        reopened.close()
    assert not (tmp_path / (SNAPSHOT_FILE + ".tmp")).exists()


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))

    def __init__(self, marker: Path) -> None:
        self.marker = marker


def test_a_pickle_in_place_of_the_snapshot_is_never_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.store.snapshot")
    expected = _snapshot_of_a_filled_engine(tmp_path)
    marker = tmp_path / "code-ran"
    (tmp_path / SNAPSHOT_FILE).write_bytes(pickle.dumps(({"format": 7}, _RunsCode(marker)), protocol=5))
    _reopens_from_rocksdb(tmp_path, expected)
    assert not marker.exists(), "reading the snapshot ran code written into the data directory"
    assert "not a snapshot of this version" in caplog.text


def _flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "logged"),
    [
        pytest.param(lambda raw: _flip(raw, len(raw) - 1), "checksum", id="checksum-byte"),
        pytest.param(lambda raw: _flip(raw, 100), "", id="header-byte"),
        pytest.param(lambda raw: _flip(raw, len(raw) // 2), "checksum", id="array-byte"),
        pytest.param(lambda raw: raw[: len(raw) - 40], "", id="truncated"),
        pytest.param(lambda raw: raw + b"\0", "past its checksum", id="appended"),
    ],
)
def test_a_damaged_snapshot_is_ignored_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, logged: str
) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.store.snapshot")
    expected = _snapshot_of_a_filled_engine(tmp_path)
    path = tmp_path / SNAPSHOT_FILE
    path.write_bytes(damage(path.read_bytes()))
    _reopens_from_rocksdb(tmp_path, expected)
    assert "start-up snapshot ignored" in caplog.text
    assert logged in caplog.text


def test_a_snapshot_with_a_non_numeric_array_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    expected = _snapshot_of_a_filled_engine(tmp_path)
    path = tmp_path / SNAPSHOT_FILE
    raw = path.read_bytes()
    length = int.from_bytes(raw[len(MAGIC) : len(MAGIC) + 8], "little")
    header = raw[len(MAGIC) + 8 : len(MAGIC) + 8 + length].replace(b'"|u1"', b'"|O"', 1)
    body = MAGIC + len(header).to_bytes(8, "little") + header + raw[len(MAGIC) + 8 + length : -32]
    path.write_bytes(body + hashlib.sha256(body).digest())  # a checksum that matches: the dtype alone must refuse
    with pytest.raises(SnapshotError, match="only numeric"), path.open("rb") as source:
        snapshot_module._read(source, len(body) + 32)
    _reopens_from_rocksdb(tmp_path, expected)


def test_the_snapshot_file_is_private_to_its_owner(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 10)
    engine.close()
    assert stat.S_IMODE((tmp_path / SNAPSHOT_FILE).stat().st_mode) == 0o600


def test_a_clean_stop_close_behind_the_last_snapshot_keeps_it_and_the_next_start_catches_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.engine")
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _fill(engine, 60)
    assert engine.write_snapshot()
    kept = (tmp_path / SNAPSHOT_FILE).read_bytes()
    _change_everything(engine)  # fewer changes than every_changes
    expected = _state(engine)
    engine.close()
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() == kept, "the stop wrote a snapshot it did not need"
    assert "kept: the next start reads the" in caplog.text

    reopened = Engine(config)
    try:
        _assert_same(_state(reopened), expected)
        _fill(reopened, 120)  # past every_changes: a new snapshot (the background thread's or the stop's)
        after = _state(reopened)
    finally:
        reopened.close()
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() != kept
    _assert_same(after, _scanned(tmp_path))


def _restores_reading_nothing_again(
    config: SidecarConfig, expected: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A start finds ``expected`` in the snapshot and reads no record again."""
    assert _restores(config, expected, caplog) == 0


def _restores(config: SidecarConfig, expected: dict[str, Any], caplog: pytest.LogCaptureFixture) -> int:
    """A start from the snapshot and RocksDB finds ``expected``; how many records it read again."""
    caplog.clear()
    reopened = Engine(config)
    try:
        _assert_same(_state(reopened), expected)
    finally:
        reopened.close()
    caught_up = re.search(r"restored, (\d+) memories changed after it read again", caplog.text)
    assert caught_up is not None
    return int(caught_up.group(1))


def _background_writes_wait_for_the_stop(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[bool]]:
    """Make the background thread's snapshot writes wait for the stop; (set once one waits, what each write gave)."""
    real_write = snapshot_module.write
    under_way = threading.Event()
    written: list[bool] = []

    def write(*args: Any, **kwargs: Any) -> bool:
        engine = getattr(threading.current_thread(), "engine", None)
        if engine is not None:
            under_way.set()
            assert engine._snapshot_stop.wait(30), "the stop never came"
        written.append(real_write(*args, **kwargs))
        return written[-1]

    monkeypatch.setattr(snapshot_module, "write", write)
    return under_way, written


def _mark_background_thread(engine: Engine) -> None:
    engine._snapshotter.engine = engine  # type: ignore[attr-defined]


def _a_background_snapshot_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Engine, SidecarConfig, list[bool], bytes]:
    """An engine whose background thread is writing a snapshot due by changes, waiting for the stop; (engine, its
    config, what each write gave, the older snapshot's bytes)."""
    under_way, written = _background_writes_wait_for_the_stop(monkeypatch)
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _mark_background_thread(engine)
    _fill(engine, 60)
    assert engine.write_snapshot()
    kept = (tmp_path / SNAPSHOT_FILE).read_bytes()
    _fill(engine, 150)  # past every_changes: the background thread starts a snapshot
    assert under_way.wait(30), "no background snapshot"
    return engine, config, written, kept


def test_a_stop_lets_a_background_snapshot_it_would_write_itself_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A stop abandoned the background snapshot under way and, as it was due, wrote it again from the start: 0.4-2.5 s
    # of a 1M stop. Now the one under way finishes and the stop keeps it.
    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    engine, config, written, _ = _a_background_snapshot_under_way(tmp_path, monkeypatch)
    expected = _state(engine)
    engine.close()
    assert written == [True, True], "the stop abandoned the snapshot under way and wrote another"
    assert "abandoned" not in caplog.text
    assert "kept: the next start reads the 0 changes after it again" in caplog.text
    _restores_reading_nothing_again(config, expected, caplog)


def test_a_stop_abandons_a_background_snapshot_it_would_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Due by age alone, with fewer changes than every_changes: the stop keeps the older snapshot, so the one under way
    # is abandoned.
    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    under_way, written = _background_writes_wait_for_the_stop(monkeypatch)
    engine = Engine(_every_100_changes(tmp_path, max_age_s=2.0, min_interval_s=0.0))
    _fill(engine, 20)
    assert engine.write_snapshot()  # before the first age comes due
    kept = (tmp_path / SNAPSHOT_FILE).read_bytes()
    _mark_background_thread(engine)
    _fill(engine, 5)
    assert under_way.wait(30), "no background snapshot by age"
    engine.close()
    assert written[-1] is False
    assert "abandoned: the sidecar is stopping" in caplog.text
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() == kept


def test_a_stop_leaves_its_snapshot_only_past_its_deadline_with_an_older_one_close_enough() -> None:
    # At 1M under load the snapshot alone took 3.4-4.2 s of a stop; a start catches up ~10,000 records in 0.3-0.5 s.
    from memevo.sidecar.engine import STOP_CATCH_UP_LIMIT, stop_abandons_snapshot

    assert not stop_abandons_snapshot(-0.1, has_snapshot=True, changes=150, every_changes=100)  # before the deadline
    assert stop_abandons_snapshot(0.0, has_snapshot=True, changes=150, every_changes=100)
    assert stop_abandons_snapshot(5.0, has_snapshot=True, changes=STOP_CATCH_UP_LIMIT * 100, every_changes=100)
    # Without an older snapshot the next start scans RocksDB (~50 s at 1M); far behind it, it reads too much again.
    assert not stop_abandons_snapshot(5.0, has_snapshot=False, changes=150, every_changes=100)
    assert not stop_abandons_snapshot(5.0, has_snapshot=True, changes=STOP_CATCH_UP_LIMIT * 100 + 1, every_changes=100)


def test_a_snapshot_due_by_its_count_skips_the_spacing_once_the_changes_cost_a_start_more_than_it_took() -> None:
    # After 100k streamed writes the newest snapshot was 40-80k changes behind: the spacing (10 s, ten times the
    # last one's duration) held the next back however many changes piled up.
    from memevo.sidecar.config import SnapshotConfig
    from memevo.sidecar.engine import behind_burst

    config = SnapshotConfig(every_changes=10_000, catch_up_record_s=50e-6)
    assert behind_burst(10_000, 0.3, config)  # 0.5 s to read again > 0.3 s to write
    assert not behind_burst(9_999, 0.0, config)  # not due by its count
    assert not behind_burst(20_000, 1.5, config)  # a 1M snapshot of 1.5 s waits for 30,000
    assert behind_burst(30_000, 1.5, config)
    assert not behind_burst(10**9, 0.0, SnapshotConfig(every_changes=0))  # only at a clean stop


def test_a_stop_past_its_deadline_abandons_the_snapshot_and_the_next_start_catches_up_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from memevo.sidecar import engine as engine_module

    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    monkeypatch.setattr(engine_module, "STOP_SNAPSHOT_S", 0.0)  # every stop is past its deadline at once
    engine, config, written, kept = _a_background_snapshot_under_way(tmp_path, monkeypatch)
    expected = _state(engine)
    engine.close()
    assert written == [True, False], "the stop past its deadline finished the snapshot or wrote another"
    assert "not written at stop" in caplog.text
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() == kept

    assert _restores(config, expected, caplog) >= 150  # every change after the older snapshot, read again


class _NumpyStoppingAtColumn:
    """NumPy as the columns module sees it, with a stop begun while ``prepare_snapshot`` allocates column ``at``."""

    def __init__(self, at: int, stop: Callable[[], None]) -> None:
        self.at = at
        self.stop = stop
        self.allocated = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def empty(self, *args: Any, **kwargs: Any) -> Any:
        self.allocated += 1
        if self.allocated == self.at:
            self.stop()
        return np.empty(*args, **kwargs)


def test_a_stop_abandons_a_snapshot_while_its_copy_is_prepared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Preparing the copy (touching ~120 MB at 1M) took up to 3.4 s of a stop beside CPU-bound jobs, all of it before
    # the stop was first looked at; now between pieces of the copy too.
    from memevo.sidecar import engine as engine_module
    from memevo.sidecar.store import columns as columns_module

    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    monkeypatch.setattr(engine_module, "STOP_SNAPSHOT_S", 0.0)  # every stop is past its deadline at once
    monkeypatch.setattr(columns_module, "SNAPSHOT_PREPARE_BYTES", 64)  # several pieces per column
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _fill(engine, 60)
    assert engine.write_snapshot()
    kept = (tmp_path / SNAPSHOT_FILE).read_bytes()
    _fill(engine, 150)  # past every_changes: the stop would write one itself, and abandons it past its deadline
    expected = _state(engine)
    stopper = threading.Thread(target=engine.close)

    def stop() -> None:
        stopper.start()
        assert engine._snapshot_stop.wait(30), "the stop never began"

    numpy = _NumpyStoppingAtColumn(2, stop)
    monkeypatch.setattr(columns_module, "np", numpy)
    try:
        assert not engine.write_snapshot(cancellable=True)
    finally:
        monkeypatch.setattr(columns_module, "np", np)
        stopper.join(60)
    assert numpy.allocated == 2, f"{numpy.allocated} of {len(_COLUMN_SPECS)} columns prepared after the stop began"
    assert "abandoned before its copy" in caplog.text
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() == kept
    assert _restores(config, expected, caplog) >= 150  # every change after the older snapshot, read again


def test_a_snapshot_prepared_in_pieces_is_the_whole_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from memevo.sidecar.store import columns as columns_module

    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    monkeypatch.setattr(columns_module, "SNAPSHOT_PREPARE_BYTES", 64)
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _fill(engine, 150)
    looks: list[int] = []

    def never() -> bool:
        looks.append(1)
        return False

    assert engine.columns.prepare_snapshot(never)
    assert len(looks) > len(_COLUMN_SPECS)  # looked at between pieces, not only between columns
    assert not engine.columns.prepare_snapshot(lambda: True)
    assert engine.write_snapshot()  # after a preparation given up, the next one is whole
    expected = _state(engine)
    engine.close()
    _restores_reading_nothing_again(config, expected, caplog)


def test_a_cancelled_write_stops_between_deferred_copies_and_leaves_no_file(tmp_path: Path) -> None:
    # Under load the deferred copy ran for seconds of a stop before the first chunk, where a stop was first looked at.
    writer = snapshot_module.SnapshotWriter()
    writer.ndarray("kept", np.arange(4, dtype=np.int64))
    ran: list[int] = []
    writer.defer(lambda: ran.append(1))
    writer.defer(lambda: ran.append(2))
    stamp = snapshot_module.Stamp(sequence=1, next_id=2, stats_mark=0, store="s")
    assert not snapshot_module.write(tmp_path, writer, stamp, cancelled=lambda: bool(ran))
    assert ran == [1]
    assert not list(tmp_path.iterdir())


def test_a_stop_past_its_deadline_still_writes_the_first_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from memevo.sidecar import engine as engine_module

    caplog.set_level(logging.INFO, logger="memevo.sidecar")
    monkeypatch.setattr(engine_module, "STOP_SNAPSHOT_S", 0.0)
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _fill(engine, 20)
    expected = _state(engine)
    engine.close()
    assert (tmp_path / SNAPSHOT_FILE).exists(), "without a snapshot the next start scans RocksDB"
    _restores_reading_nothing_again(config, expected, caplog)


def test_records_rewritten_by_statistics_checkpoints_make_a_snapshot_due(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A checkpoint rewrites records without change-log entries, and a start reads them all again; they did not
    # count toward every_changes, so a recall-heavy run kept its old snapshot and each start read more (13-21k
    # records at 1M in the restart harness). A stop past every_changes of them now writes a new one.
    caplog.set_level(logging.INFO, logger="memevo.sidecar.engine")
    config = _every_100_changes(tmp_path)
    engine = Engine(config)
    _fill(engine, 150)
    assert engine.write_snapshot()
    kept = (tmp_path / SNAPSHOT_FILE).read_bytes()
    engine.columns.record_access(engine.columns.live_ids(), 2_000.0, 8)
    engine.checkpoint_statistics(engine.columns.take_accessed())  # ~148 records rewritten, no change-log entry
    expected = _state(engine)
    engine.close()
    assert (tmp_path / SNAPSHOT_FILE).read_bytes() != kept, "the stop kept a snapshot 148 rewrites behind"

    _restores_reading_nothing_again(config, expected, caplog)


def test_words_in_any_script_and_an_empty_word_index_survive_a_snapshot(tmp_path: Path) -> None:
    lexical = NamespacedLexicalIndex()
    lexical.add("default", 1, "Zoë's café in 東京 on Straße 9")
    lexical.add("default", 2, "the and of")  # stop words only: a document without words
    lexical.add("empty", 3, "")
    stamp = snapshot_module.Stamp(sequence=3, next_id=4, stats_mark=0, store="s")
    assert snapshot_module.save(tmp_path, stamp=stamp, parts={"lexical": lexical})
    loaded = snapshot_module.load(tmp_path)
    assert loaded is not None
    restored = NamespacedLexicalIndex.load_snapshot(loaded[1].child("lexical"))
    _assert_equal_fields(lexical, restored, "lexical")
    ids, _ = restored.search("default", "東 café")
    assert ids.tolist() == [1]


def _saved_and_loaded(tmp_path: Path, lexical: NamespacedLexicalIndex) -> NamespacedLexicalIndex:
    tmp_path.mkdir(exist_ok=True)
    stamp = snapshot_module.Stamp(sequence=1, next_id=1, stats_mark=0, store="s")
    assert snapshot_module.save(tmp_path, stamp=stamp, parts={"lexical": lexical})
    loaded = snapshot_module.load(tmp_path)
    assert loaded is not None
    return NamespacedLexicalIndex.load_snapshot(loaded[1].child("lexical"))


def _same_searches(left: NamespacedLexicalIndex, right: NamespacedLexicalIndex, queries: list[str]) -> None:
    for query in queries:
        (left_ids, left_scores), (right_ids, right_scores) = left.search("n", query), right.search("n", query)
        assert sorted(zip(left_ids.tolist(), left_scores.tolist(), strict=True)) == sorted(
            zip(right_ids.tolist(), right_scores.tolist(), strict=True)
        ), query
        terms = query.split()
        assert left.idf("n", terms) == right.idf("n", terms)
        assert left.postings("n", terms) == right.postings("n", terms)


def test_a_restored_word_index_builds_a_words_postings_only_when_a_write_adds_to_it(tmp_path: Path) -> None:
    # A start kept a million words' postings as the file gave them (building each took seconds in all): searches
    # read them there, a write copies out the words it adds to, and later snapshots hold both kinds.
    rng = np.random.default_rng(5)
    vocabulary = [f"w{i}" for i in range(60)]
    texts = {i: " ".join(rng.choice(vocabulary, 6).tolist()) for i in range(1, 301)}
    built = NamespacedLexicalIndex()
    for memory_id, text in texts.items():
        built.add("n", memory_id, text)
    restored = _saved_and_loaded(tmp_path, built)
    index = restored._indexes["n"]
    assert not index._ids  # nothing built at the start
    queries = ["w1 w2", "w3", "w59 w7 w8", "absent w4"]
    _same_searches(built, restored, queries)
    for lexical in (built, restored):
        lexical.add("n", 301, "w1 fresh")
        lexical.remove("n", 7)
    assert sorted(index._ids) == ["fresh", "w1"]
    _same_searches(built, restored, [*queries, "fresh w1"])
    again = _saved_and_loaded(tmp_path / "again", restored)  # own postings and untouched restored ones together
    _assert_equal_fields(built, again, "lexical")
    _same_searches(built, again, [*queries, "fresh w1"])
    for lexical in (built, restored):
        lexical.add("n", 5, "w2 late")  # an id below the last one: the snapshot copies the postings at once
    third = _saved_and_loaded(tmp_path / "third", restored)
    _same_searches(built, third, [*queries, "fresh w1", "late w2"])
    built._indexes["n"]._in_order = True  # not kept in a snapshot (the ids a start adds after it are all larger)
    _assert_equal_fields(built, third, "lexical")
