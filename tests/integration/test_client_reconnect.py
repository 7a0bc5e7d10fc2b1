"""A long-lived client answers within a second or two of its sidecar coming back after a crash.

gRPC's default reconnect backoff (1 s, x1.6 per failed attempt, up to 2 minutes) grows while the sidecar is
down, so a client that kept trying through a restart used to fail on for seconds after the sidecar was
serving again; the subchannel (and its backoff) was shared by every channel to the same address in the
process, so a new client inherited the wait too. The test keeps the sidecar down for 30 s while a client keeps
calling (gRPC's own backoff then reaches 10-17 s between attempts), restarts it on the same socket and data
directory, and measures from the new process's ready file to the first answered Recall of that client and of
one made after the restart.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import STARTUP_TIMEOUT_S, Sidecar, start_sidecar

from memevo.client import MemoryClient, UnavailableError
from memevo.sidecar.config import default_listen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DOWN_S = 30.0
"""How long the sidecar stays dead while the client keeps calling: with gRPC's default backoff the attempts
are then about 26 and 43 s after the crash, so a sidecar ready after 30-36 s waits 5 s or more; with the
client's own cap the next attempt is at most a second away."""
ANSWER_WITHIN_S = 3.0
"""Upper bound of ready-to-first-answer; the cap on the backoff is 1 s, the rest is slack for a loaded machine."""
DIMENSION = 8


def _vector() -> np.ndarray:
    return np.ones(DIMENSION, dtype=np.float32)


def _restart(sidecar: Sidecar) -> Sidecar:
    """The same command again (same socket, same data directory); returns once its ready file exists."""
    ready = Path(sidecar.args[sidecar.args.index("--ready-file") + 1])
    ready.unlink(missing_ok=True)
    log = sidecar.log_path.open("ab")
    process = subprocess.Popen(sidecar.args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"restart failed:\n{sidecar.log()}")
        time.sleep(0.01)
    return Sidecar(sidecar.data_dir, sidecar.unix_target, sidecar.tcp_target, process, sidecar.args, sidecar.log_path)


def _keep_failing(client: MemoryClient, seconds: float) -> int:
    """Recall every 50 ms for ``seconds`` while the sidecar is down (each must fail); the failures seen."""
    failures = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with pytest.raises(UnavailableError):
            client.recall(vector=_vector(), k=1, timeout_s=2.0)
        failures += 1
        time.sleep(0.05)
    return failures


def _seconds_to_first_answer(client: MemoryClient, limit_s: float = 30.0) -> float:
    start = time.monotonic()
    while True:
        try:
            client.recall(vector=_vector(), k=1, timeout_s=2.0)
            return time.monotonic() - start
        except UnavailableError:
            if time.monotonic() - start > limit_s:
                raise
            time.sleep(0.05)


def test_a_long_lived_client_and_a_new_one_answer_soon_after_their_sidecar_restarts(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, dimension=DIMENSION)
    try:
        with MemoryClient(sidecar.unix_target) as old:
            old.remember("before the crash", vector=_vector())
            sidecar.kill()
            assert _keep_failing(old, DOWN_S) > 0
            sidecar = _restart(sidecar)
            with MemoryClient(sidecar.unix_target) as new, ThreadPoolExecutor(2) as pool:
                old_s, new_s = pool.map(_seconds_to_first_answer, (old, new))
            print(f"first answer after the restart: long-lived client {old_s:.2f} s, new client {new_s:.2f} s")
            assert old_s <= ANSWER_WITHIN_S, f"the long-lived client first answered {old_s:.2f} s after the restart"
            assert new_s <= ANSWER_WITHIN_S, f"a new client first answered {new_s:.2f} s after the restart"
            assert [m.memory.content for m in old.recall(vector=_vector(), k=1).memories] == ["before the crash"]
    finally:
        sidecar.stop()


def test_a_client_without_an_address_talks_to_memevo_address_else_serves_default_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMEVO_ADDRESS", "127.0.0.1:7070")
    with MemoryClient() as client:
        assert client.target == "127.0.0.1:7070"
    monkeypatch.delenv("MEMEVO_ADDRESS")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    with MemoryClient() as client:
        assert client.target == default_listen() == f"unix:///run/user/1234/memevo-{os.getuid()}.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    with MemoryClient() as client:
        assert client.target == default_listen() == f"unix:///tmp/memevo-{os.getuid()}.sock"
