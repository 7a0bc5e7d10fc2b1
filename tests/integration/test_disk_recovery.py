"""Writes refused for want of disk resume by themselves once there is room again, with no restart.

Two ways to take the room away under a running sidecar: a small tmpfs that
fills up (a real full disk; needs a mount, skipped where mounting is
impossible), and the kernel's per-process file size limit (RLIMIT_FSIZE),
which needs no privilege and is lifted from outside with prlimit(2). While
writes are refused, reads are served, the health entry for writes says
NOT_SERVING (the overall one SERVING) and the metrics say so; once the room is
back, writes are accepted again and nothing acknowledged was lost.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar, start_sidecar_with_file_size_limit
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import (
    assert_all_readable,
    channel,
    counts,
    memory,
    status_details,
    stub,
    vec,
    wait_until,
    write_until_refused,
)

from memevo.v1 import memory_service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MIB = 1024 * 1024
WRITES = "memevo.v1.MemoryService/writes"
RESUME_WAIT_S = 150.0
"""Upper bound of the wait for writes to resume (the sidecar checks every few seconds, backing off to a minute)."""
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _health(target: str, name: str) -> int:
    return int(health_pb2_grpc.HealthStub(channel(target)).Check(health_pb2.HealthCheckRequest(service=name)).status)


def _writes_refused_metric(sidecar: Sidecar) -> str:
    ready = Path(sidecar.args[sidecar.args.index("--ready-file") + 1])
    address = json.loads(ready.read_text())["metrics"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
        text = response.read().decode()
    return next(line for line in text.splitlines() if line.startswith("memevo_writes_refused "))


def _refused_then_resumed(sidecar: Sidecar, make_room: Any, mention: str) -> dict[int, str]:
    """Fill until refused, check the refusal is reported, make room, wait for writes to come back by themselves."""
    target = sidecar.unix_target
    service = stub(target)
    acked, error = write_until_refused(service)
    assert acked, "refused before the first write"
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
    assert mention in error.details(), error.details()
    assert "resume by themselves" in error.details(), error.details()
    assert status_details(error)[1].get("retryable") == "true"
    # While the room is still missing: writes refused and said to be, reads served.
    before = counts(service)
    with pytest.raises(grpc.RpcError):
        service.Remember(memory_service_pb2.RememberRequest(memory=memory("still no room", vec(1))))
    assert counts(service) == before
    assert _health(target, WRITES) == NOT_SERVING
    assert _health(target, "") == SERVING
    assert _writes_refused_metric(sidecar) == "memevo_writes_refused 1"
    writes = service.GetStats(memory_service_pb2.GetStatsRequest()).writes
    assert writes.refused
    assert writes.reason in ("DISK_FULL", "FILE_TOO_LARGE"), writes
    assert mention in writes.message
    assert writes.refused_since.seconds > 0
    assert not writes.restart_required
    last = max(acked)
    assert service.Get(memory_service_pb2.GetRequest(ids=[last])).memories[0].content == acked[last]

    make_room()
    resumed: list[int] = []
    codes: set[grpc.StatusCode] = set()

    def writes_again() -> bool:
        try:
            response = service.Remember(
                memory_service_pb2.RememberRequest(memory=memory("written after the room came back", vec(2)))
            )
        except grpc.RpcError as refused:
            codes.add(refused.code())
            return False
        resumed.append(response.result.memory.id)
        return True

    wait_until(writes_again, "writes to resume by themselves", timeout_s=RESUME_WAIT_S)
    assert codes <= {grpc.StatusCode.UNAVAILABLE}, codes
    acked[resumed[0]] = "written after the room came back"
    assert _health(target, WRITES) == SERVING
    assert _writes_refused_metric(sidecar) == "memevo_writes_refused 0"
    assert service.GetStats(memory_service_pb2.GetStatsRequest()).writes == memory_service_pb2.WriteStats()
    more = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(f"more {i}", vec(10 + i)) for i in range(20)])
    )
    acked.update({r.memory.id: f"more {i}" for i, r in enumerate(more.results)})
    assert_all_readable(service, acked)
    return acked


def _after_restart(data_dir: Path, acked: dict[int, str]) -> None:
    restarted = start_sidecar(data_dir)
    try:
        assert_all_readable(stub(restarted.unix_target), acked)
    finally:
        assert restarted.stop() == 0, restarted.log()


@contextmanager
def _tmpfs(target: Path, size: str) -> Iterator[Path]:
    if shutil.which("mount") is None:
        pytest.skip("mounting is impossible here: no mount command (a real full disk needs a small tmpfs)")
    target.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is impossible here ({done.stderr.strip() or done.returncode})")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, timeout=60)


def test_writes_refused_by_a_full_disk_resume_once_space_is_freed(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", "8m") as small:
        sidecar = start_sidecar(small / "data", "--metrics-listen", "127.0.0.1:0")
        try:

            def grow() -> None:
                subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True, timeout=60)

            acked = _refused_then_resumed(sidecar, grow, "disk is full")
        finally:
            assert sidecar.stop() == 0, sidecar.log()
        assert "Traceback" not in sidecar.log(), sidecar.log()
        assert "writes resumed" in sidecar.log(), sidecar.log()
        _after_restart(small / "data", acked)


def test_writes_refused_by_the_file_size_limit_resume_once_it_is_lifted(tmp_path: Path) -> None:
    """No mount needed: the limit is the kernel's, set before the start and lifted from outside."""
    data_dir = tmp_path / "data"
    sidecar = start_sidecar_with_file_size_limit(data_dir, 2 * MIB, "--metrics-listen", "127.0.0.1:0")
    try:

        def lift() -> None:
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.prlimit(sidecar.process.pid, resource.RLIMIT_FSIZE, (hard, hard))

        acked = _refused_then_resumed(sidecar, lift, "file size limit")
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    assert "Traceback" not in sidecar.log(), sidecar.log()
    _after_restart(data_dir, acked)
