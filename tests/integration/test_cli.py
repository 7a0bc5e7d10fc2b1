"""The command line: ``memevo inspect`` on a stopped data directory, ``memevo demo`` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import start_sidecar
from helpers import memory, stub, vec

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration


def memevo(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memevo.sidecar.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_inspect_reports_counts_schema_embedder_and_index(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sidecar = start_sidecar(data)
    service = stub(sidecar.unix_target)
    written = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(f"note {i}", vec(i)) for i in range(5)])
    )
    service.Forget(memory_service_pb2.ForgetRequest(ids=[written.results[0].memory.id], keep_history=True))
    assert sidecar.stop() == 0
    result = memevo("inspect", str(data), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memories"] == 5
    assert report["by_state_and_kind"] == {
        "MEMORY_STATE_ACTIVE/MEMORY_KIND_EPISODE": 4,
        "MEMORY_STATE_OBSOLETE/MEMORY_KIND_EPISODE": 1,
    }
    assert report["schema_version"] == 1
    assert report["embedder"] == "none"
    assert report["dimension"] == 8
    assert report["index"]["saved_count"] == 5
    assert report["index"]["behind_by_events"] == 0


def test_inspect_refuses_what_is_not_a_data_directory(tmp_path: Path) -> None:
    result = memevo("inspect", str(tmp_path))
    assert result.returncode == 2
    assert "not a memevo data directory" in result.stderr


def test_demo_runs_a_session_and_stops_cleanly() -> None:
    result = memevo("demo", timeout_s=240.0)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Alice prefers Python for data analysis." in result.stdout
    assert "recall for the dog's name now returns it: False" in result.stdout
    assert "EVICTED" in result.stdout
    assert "sidecar stopped cleanly" in result.stdout
