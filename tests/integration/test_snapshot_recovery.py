"""A SIGKILL after a background snapshot: the restart loads it and catches up from the change log.

The sidecar writes its start-up snapshot while it serves (``--snapshot-every-changes``); a start after a crash
reads only the memories changed after it instead of every record. Whatever was acknowledged after the snapshot
(new memories, supersessions, forgets with and without history) must be there after the restart, exactly as a
start that scans every record would show it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import assert_all_readable, memory, pack, recall_ids, stub, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

DIMENSION = 32
"""Random 32-d vectors are never near-duplicates of each other, so no write is merged into another."""
SNAPSHOT_EVERY = 200
BEFORE = 300
"""Memories written before the background snapshot (more than SNAPSHOT_EVERY changes: one becomes due)."""
SNAPSHOT_FILE = "startup.snapshot"
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE


def _start(data_dir: Path) -> Sidecar:
    return start_sidecar(data_dir, "--snapshot-every-changes", str(SNAPSHOT_EVERY), dimension=DIMENSION)


def _write(
    service: Any, rng: np.random.Generator, count: int, first: int, **fields: Any
) -> dict[int, tuple[str, bytes]]:
    written: dict[int, tuple[str, bytes]] = {}
    inputs = [(f"note {first + i}", pack(rng.standard_normal(DIMENSION))) for i in range(count)]
    reply = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(text, vector, **fields) for text, vector in inputs])
    )
    for result, (text, vector) in zip(reply.results, inputs, strict=True):
        written[result.memory.id] = (text, vector)
    return written


def test_a_kill_after_a_background_snapshot_loses_nothing_acknowledged_after_it(data_dir: Path) -> None:
    rng = np.random.default_rng(7)
    sidecar = _start(data_dir)
    try:
        service = stub(sidecar.unix_target)
        live = _write(service, rng, BEFORE, 0)
        wait_until(lambda: (data_dir / SNAPSHOT_FILE).exists(), "the background snapshot", timeout_s=120)
        snapshot_bytes = (data_dir / SNAPSHOT_FILE).read_bytes()
        sequence_at_snapshot = service.GetStats(memory_service_pb2.GetStatsRequest()).last_sequence

        # After the snapshot (fewer changes than make the next one due): every kind of change.
        live.update(_write(service, rng, 20, BEFORE))
        old_fact = service.Remember(
            memory_service_pb2.RememberRequest(
                memory=memory(
                    "Ana's desk is on floor 2",
                    pack(rng.standard_normal(DIMENSION)),
                    entity="ana",
                    fact=memory_pb2.Fact(attribute="desk", value="floor 2"),
                )
            )
        ).result.memory.id
        new_fact = service.Remember(
            memory_service_pb2.RememberRequest(
                memory=memory(
                    "Ana's desk is on floor 5",
                    pack(rng.standard_normal(DIMENSION)),
                    entity="ana",
                    fact=memory_pb2.Fact(attribute="desk", value="floor 5"),
                )
            )
        ).result
        assert new_fact.outcome == memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS
        ids = sorted(live)
        deleted = ids[:5] + ids[-3:]  # written before the snapshot and after it
        kept_as_history = ids[10:13]
        service.Forget(memory_service_pb2.ForgetRequest(ids=deleted, reason="test"))
        service.Forget(memory_service_pb2.ForgetRequest(ids=kept_as_history, reason="test", keep_history=True))
        for memory_id in deleted:
            del live[memory_id]
        stats = service.GetStats(memory_service_pb2.GetStatsRequest())
        assert stats.last_sequence > sequence_at_snapshot
        assert (data_dir / SNAPSHOT_FILE).read_bytes() == snapshot_bytes, "no second snapshot was written"
    finally:
        sidecar.kill()

    restarted = _start(data_dir)
    try:
        log = restarted.log()
        restored = re.search(r"snapshot of sequence (\d+) restored, (\d+) memories changed after it read again", log)
        assert restored is not None, log
        assert int(restored.group(1)) == sequence_at_snapshot
        service = stub(restarted.unix_target)
        after = service.GetStats(memory_service_pb2.GetStatsRequest())
        assert after.last_sequence == stats.last_sequence
        assert after.total_count == stats.total_count

        expected = {memory_id: text for memory_id, (text, _) in live.items()}
        expected[old_fact] = "Ana's desk is on floor 2"
        expected[new_fact.memory.id] = "Ana's desk is on floor 5"
        assert_all_readable(service, expected)
        states = {
            m.id: m.state for m in service.Get(memory_service_pb2.GetRequest(ids=[old_fact, *kept_as_history])).memories
        }
        assert states == dict.fromkeys([old_fact, *kept_as_history], OBSOLETE)
        found = service.Get(memory_service_pb2.GetRequest(ids=deleted))
        assert list(found.memories) == [], "deleted memories came back"
        # Recall sees the columns the catch-up rebuilt: every live memory finds itself, the retired ones do not.
        for memory_id, (_, vector) in live.items():
            top = recall_ids(service, vector, k=1)
            if memory_id in kept_as_history:
                assert memory_id not in top
            else:
                assert top == [memory_id]
    finally:
        restarted.stop()
