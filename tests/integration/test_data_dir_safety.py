"""The data directory against other local users and against whoever can write into it.

Memory text is private: the directory and every file the sidecar (RocksDB,
the index, the start-up snapshot) creates in it are its user's alone. And a
file planted in it must not run code in the sidecar at its next start.
"""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import start_sidecar
from helpers import memory, pack, stub, vec, vectors

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

SNAPSHOT_FILE = "startup.snapshot"


def _write(target: str, count: int) -> dict[int, str]:
    service = stub(target)
    rows = [pack(row) for row in vectors(count, seed=3)]
    response = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(
            memories=[memory(f"private note {i} about the payroll", rows[i], tags=["hr"]) for i in range(count)]
        )
    )
    assert service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(1), k=5)).memories
    service.Govern(memory_service_pb2.GovernRequest())
    return {r.memory.id: r.memory.content for r in response.results}


def _modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of the root and everything under it."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _filled_and_stopped(data: Path, count: int) -> Path:
    """``data`` after a sidecar wrote ``count`` memories into it and stopped cleanly."""
    sidecar = start_sidecar(data)
    try:
        _write(sidecar.unix_target, count)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    return data


def test_every_file_of_a_new_data_directory_is_private_to_its_user(tmp_path: Path) -> None:
    data = tmp_path / "new" / "data"  # the sidecar creates it
    modes = _modes(_filled_and_stopped(data, 300))
    # What a clean stop leaves: RocksDB's tables, logs and manifest, the index and the start-up snapshot.
    for expected in ("rocksdb", "rocksdb/CURRENT", "rocksdb/LOG", SNAPSHOT_FILE):
        assert expected in modes, sorted(modes)
    assert any(name.startswith("rocksdb/MANIFEST") for name in modes), sorted(modes)
    assert any(name.startswith("index") for name in modes), sorted(modes)
    exposed = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not exposed, f"readable by other users: {exposed}"
    assert modes["."] == 0o700


def test_inspect_and_export_leave_the_data_directory_private(tmp_path: Path) -> None:
    # Opening RocksDB for writing rotates its info log and writes a manifest, options and a log of its own:
    # inspect creates files in the data directory too (export opens it read-only and creates none).
    data = _filled_and_stopped(tmp_path / "data", 20)
    before = _modes(data)
    out = tmp_path / "replay.jsonl"
    for args in (["inspect", str(data)], ["export", "--data", str(data), "--out", str(out)]):
        run = subprocess.run(
            [sys.executable, "-m", "memevo.sidecar.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    modes = _modes(data)
    assert set(modes) - set(before), "inspect and export created no file: this test checks nothing"
    exposed = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not exposed, f"readable by other users: {exposed}"


def test_an_existing_data_directory_open_to_others_is_made_private(data_dir: Path) -> None:
    data_dir.chmod(0o755)
    sidecar = start_sidecar(data_dir)
    try:
        _write(sidecar.unix_target, 20)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert "open to other users" in sidecar.log()


class _Planted:
    """Pickles to a call that creates ``marker``: what an attacker would plant as the snapshot."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_pickle_planted_as_the_startup_snapshot_runs_nothing_and_loses_nothing(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir)
    try:
        written = _write(sidecar.unix_target, 50)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    marker = data_dir.parent / "planted-code-ran"
    # The shape the pickled snapshot had (header, parts): a sidecar that unpickles it runs the call.
    planted = ({"format": 7}, {"columns": _Planted(marker)})
    (data_dir / SNAPSHOT_FILE).write_bytes(pickle.dumps(planted, protocol=5))

    restarted = start_sidecar(data_dir)
    try:
        service = stub(restarted.unix_target)
        found = service.Get(memory_service_pb2.GetRequest(ids=sorted(written)))
        assert {m.id: m.content for m in found.memories} == written
        only_hr = memory_service_pb2.RecallFilter(tags=["hr"])  # the tags come back from the restart too
        hits = service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(2), k=5, filter=only_hr))
        assert len(hits.memories) == 5
    finally:
        assert restarted.stop() == 0, restarted.log()
    assert not marker.exists(), "the sidecar ran code planted in its data directory"
    assert "start-up snapshot ignored" in restarted.log(), restarted.log()
    assert "Traceback" not in restarted.log(), restarted.log()
