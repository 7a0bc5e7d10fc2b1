"""A write burst does not leave the start-up snapshot far behind: a crash right after it costs a short catch-up.

The background snapshot waited at least ``min_interval_s`` (10 s) and ten times the last one's duration between
two snapshots, however many changes piled up meanwhile: after a burst the newest snapshot was tens of thousands
of changes behind, and a start after a SIGKILL read them all again; and a snapshot could not even begin while the
writes kept the commit queue from running dry. Here 60,000 memories are streamed at full speed with a snapshot
due every 1,000 changes; the restart after a SIGKILL right after the last acknowledgement must read back a small
part of them, and find every one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import start_sidecar
from helpers import DEADLINE_S, counts, pack, stub

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DIMENSION = 8
EVERY_CHANGES = 1_000
BURST = 60_000
WRITERS = 2
MESSAGE_ITEMS = 64
READ_AGAIN_AT_MOST = 2 * BURST // 3
"""Before the fix, 50,000 or more were behind (the first snapshot, if any, at a few thousand). Now a snapshot due by
its count starts within a tick (1 s) once reading the changes again would cost a start more than the last snapshot
took to write (``behind_burst``, 50 us a record), and waits for the commit group in progress: with snapshots of
1-1.5 s on a loaded 2-core machine that leaves 20-30k plus one snapshot's worth of writes behind (measured on
2026-12-07: 7-34k, on this tree and the one before it). The bound catches the old behaviour, not the machine's
speed; the catch-up time itself is benchmarks/crash.py's figure."""


def _messages(writer: int, items: int) -> Iterator[memory_service_pb2.RememberStreamRequest]:
    rows = np.random.default_rng(writer).standard_normal((items, DIMENSION)).astype(np.float32)
    for start in range(0, items, MESSAGE_ITEMS):
        yield memory_service_pb2.RememberStreamRequest(
            items=[
                memory_service_pb2.RememberStreamItem(
                    memory=memory_pb2.MemoryInput(content=f"burst {writer}-{start + i}", vector=pack(row))
                )
                for i, row in enumerate(rows[start : start + MESSAGE_ITEMS])
            ]
        )


def test_a_crash_right_after_a_write_burst_reads_back_a_small_part_of_it(data_dir: Path) -> None:
    args = ("--snapshot-every-changes", str(EVERY_CHANGES))
    sidecar = start_sidecar(data_dir, *args, dimension=DIMENSION)
    try:
        service = stub(sidecar.unix_target)
        errors: list[BaseException] = []

        def write(writer: int) -> None:
            try:
                stub(sidecar.unix_target).RememberStream(_messages(writer, BURST // WRITERS), timeout=4 * DEADLINE_S)
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        last_sequence, total = counts(service)
        assert total == BURST
    finally:
        sidecar.kill()
    written = re.findall(r"start-up snapshot of sequence (\d+) written in", sidecar.log())
    restarted = start_sidecar(data_dir, *args, dimension=DIMENSION)
    try:
        caught_up = re.search(r"(\d+) memories changed after it read again", restarted.log())
        assert caught_up is not None, sidecar.log() + restarted.log()
        read_again = int(caught_up.group(1))
        print(f"the restart read {read_again} of {last_sequence} changes again; durable snapshots at {written}")
        assert read_again <= READ_AGAIN_AT_MOST, (
            f"the restart read {read_again} of {last_sequence} changes again; durable snapshots at {written}"
        )
        assert counts(stub(restarted.unix_target)) == (last_sequence, BURST)
    finally:
        restarted.stop()
