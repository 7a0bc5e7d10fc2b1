"""The start-up snapshot: a clean close's snapshot rebuilds exactly what a scan of RocksDB would, and only then."""

from __future__ import annotations

import hashlib
import logging
import pickle
import stat
import threading
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.store import snapshot as snapshot_module
from memevo.sidecar.store.snapshot import MAGIC, SNAPSHOT_FILE, SnapshotError
from memevo.v1 import memory_pb2

DIMENSION = 8
WORDS = ("coffee", "budget", "paris", "deploy", "cache", "vendor")


def _config(data_dir: Path) -> SidecarConfig:
    return SidecarConfig(data_dir=data_dir, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION)


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
    assert not (tmp_path / SNAPSHOT_FILE).exists(), "a read snapshot must be gone (a crash must not reuse it)"
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


def test_a_snapshot_that_does_not_match_rocksdb_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="memevo.sidecar.store.snapshot")
    engine = Engine(_config(tmp_path))
    _fill(engine, 50)
    engine.close()
    stale = (tmp_path / SNAPSHOT_FILE).read_bytes()
    engine = Engine(_config(tmp_path))
    _fill(engine, 10)  # more writes: RocksDB moves past the old snapshot
    expected = _state(engine)
    engine.close()
    (tmp_path / SNAPSHOT_FILE).write_bytes(stale)  # as if the new one had not been written

    reopened = Engine(_config(tmp_path))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        reopened.close()
    assert "does not match" in caplog.text


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
    else:
        assert vars(left).keys() == vars(right).keys(), where
        for name in vars(left):
            _assert_equal_fields(vars(left)[name], vars(right)[name], f"{where}.{name}")


def test_every_field_of_the_restored_structures_equals_what_the_close_held(tmp_path: Path) -> None:
    engine = Engine(_config(tmp_path))
    _fill(engine, 200)
    engine.columns.record_access(np.asarray([3, 4], dtype=np.int64), 2_000.0, 9)  # not checkpointed: kept as is
    engine.close()
    held = {"columns": engine.columns, "lexical": engine.lexical, "strategies": engine.strategies}

    restored = Engine(_config(tmp_path))
    try:
        got = {"columns": restored.columns, "lexical": restored.lexical, "strategies": restored.strategies}
        _assert_equal_fields(held, got, "snapshot")
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
