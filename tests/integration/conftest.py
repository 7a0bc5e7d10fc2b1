"""Fixtures that start a real sidecar process (``memevo serve``) and wait until it is ready."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 60.0
RUN_ROOT = Path(tempfile.gettempdir()) / f"memevo-runs-{os.getpid()}"
"""Socket, ready-file and log folders of the sidecars this session starts (a short path: a socket's is limited).

Per process, not per module: test_client.py loads this file a second time under another name.
"""


@pytest.fixture(scope="session", autouse=True)
def _remove_run_dirs() -> Iterator[None]:
    """Remove the run folders at the end of the session: every test run used to leave about a hundred in /tmp."""
    yield
    shutil.rmtree(RUN_ROOT, ignore_errors=True)


@dataclass
class Sidecar:
    """A running sidecar process and where to reach it."""

    data_dir: Path
    unix_target: str
    tcp_target: str
    process: subprocess.Popen[bytes]
    args: list[str] = field(default_factory=list)
    log_path: Path = Path()

    def kill(self) -> None:
        """SIGKILL the process: nothing is flushed, as in a crash."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM and wait for a clean shutdown; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        return self.process.returncode

    def log(self) -> str:
        """What the process printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_sidecar(
    data_dir: Path, *extra_args: str, dimension: int = 8, embedder: str = "none", judge: str = "none"
) -> Sidecar:
    """Start ``memevo serve`` on a unix socket and a free TCP loopback port; wait for its ready file.

    The pair judge is off unless asked for (``judge="local"``): it settles prose pairs after the write returns, and
    a test of another feature must not see a memory change under it (the judge's own tests turn it on).
    """
    RUN_ROOT.mkdir(exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=RUN_ROOT))
    socket_path = run_dir / "memevo.sock"
    ready_file = run_dir / "ready.json"
    log_path = run_dir / "sidecar.log"
    args = [
        sys.executable,
        "-m",
        "memevo.sidecar.cli",
        "serve",
        "--data",
        str(data_dir),
        "--listen",
        f"unix://{socket_path}",
        "--listen",
        "127.0.0.1:0",
        "--embedder",
        embedder,
        "--judge",
        judge,
        "--ready-file",
        str(ready_file),
    ]
    if embedder == "none":
        args += ["--dimension", str(dimension)]
    args += list(extra_args)
    log = log_path.open("wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready_file.exists():
        if process.poll() is not None:
            raise RuntimeError(f"sidecar exited with {process.returncode}:\n{log_path.read_text()}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sidecar not ready after {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()}")
        time.sleep(0.05)
    ready = json.loads(ready_file.read_text())
    unix_target = next(a for a in ready["listen"] if a.startswith("unix:"))
    tcp_target = next(a for a in ready["listen"] if not a.startswith("unix:"))
    return Sidecar(data_dir, unix_target, tcp_target, process, args, log_path)


def start_sidecar_with_file_size_limit(data_dir: Path, limit_bytes: int, *extra_args: str) -> Sidecar:
    """:func:`start_sidecar` under the kernel's per-process file size limit (RLIMIT_FSIZE): a full disk, no mount.

    The child inherits the limit; Python ignores SIGXFSZ, so its write past the limit fails with EFBIG.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        return start_sidecar(data_dir, *extra_args)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh, empty data directory."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def sidecar(data_dir: Path) -> Iterator[Sidecar]:
    """A sidecar on a fresh data directory, vectors only (no embedder), dimension 8."""
    process = start_sidecar(data_dir)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def shared_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """One sidecar for a whole test module (dimension 8, no embedder): for tests that only read what they wrote."""
    process = start_sidecar(tmp_path_factory.mktemp("shared-data"))
    yield process
    process.stop()
