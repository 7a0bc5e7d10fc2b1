"""The start-up snapshot: a clean close's snapshot rebuilds exactly what a scan of RocksDB would, and only then."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.store.snapshot import SNAPSHOT_FILE
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
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"not a pickle")
    reopened = Engine(_config(tmp_path))
    try:
        _assert_same(_state(reopened), expected)
    finally:
        reopened.close()
