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
import os
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


def test_a_restart_on_a_full_disk_needs_no_room_for_the_log(tmp_path: Path) -> None:
    """Opening RocksDB replays its log into a table file first, as big as the log: on a full disk that used to stop
    the start ("cannot open RocksDB ... No space left"). Now it opens read-only: reads served, writes refused and
    reported, and resumed by themselves once there is room (RocksDB is then reopened for writing)."""
    dimension = 384  # big records: a log of megabytes from a few thousand writes
    with _tmpfs(tmp_path / "small", "48m") as small:
        data = small / "data"
        sidecar = start_sidecar(data, dimension=dimension)
        service = stub(sidecar.unix_target)
        acked: dict[int, str] = {}
        for start in range(0, 6000, 500):
            batch = [memory(f"note {start + i}", vec(start + i, dimension)) for i in range(500)]
            reply = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=batch))
            acked.update({r.memory.id: f"note {start + i}" for i, r in enumerate(reply.results)})
        sidecar.kill()  # the log is not flushed into a table file
        log_bytes = sum(p.stat().st_size for p in (data / "rocksdb").glob("*.log"))
        filler = small / "filler"
        free = shutil.disk_usage(small).free
        with filler.open("wb") as out:
            out.truncate(0)
            os.posix_fallocate(out.fileno(), 0, free - 2 * MIB)
        assert shutil.disk_usage(small).free < log_bytes // 2, (shutil.disk_usage(small).free, log_bytes)

        restarted = start_sidecar(data, "--metrics-listen", "127.0.0.1:0", dimension=dimension)
        try:
            service = stub(restarted.unix_target)
            assert_all_readable(service, acked)
            writes = service.GetStats(memory_service_pb2.GetStatsRequest()).writes
            assert writes.refused
            assert writes.reason == "DISK_FULL"
            assert _health(restarted.unix_target, WRITES) == NOT_SERVING
            assert _health(restarted.unix_target, "") == SERVING
            with pytest.raises(grpc.RpcError) as refused:
                service.Remember(memory_service_pb2.RememberRequest(memory=memory("no room", vec(1, dimension))))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

            filler.unlink()
            written: list[int] = []

            def writes_again() -> bool:
                try:
                    reply = service.Remember(
                        memory_service_pb2.RememberRequest(memory=memory("after the room came back", vec(2, dimension)))
                    )
                except grpc.RpcError:
                    return False
                written.append(reply.result.memory.id)
                return True

            wait_until(writes_again, "writes to resume by themselves", timeout_s=RESUME_WAIT_S)
            acked[written[0]] = "after the room came back"
            assert _health(restarted.unix_target, WRITES) == SERVING
        finally:
            assert restarted.stop() == 0, restarted.log()
        assert "opened read-only" in restarted.log(), restarted.log()
        assert "Traceback" not in restarted.log(), restarted.log()
        again = start_sidecar(data, dimension=dimension)
        try:
            assert_all_readable(stub(again.unix_target), acked)
        finally:
            assert again.stop() == 0, again.log()
