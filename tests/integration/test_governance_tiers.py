"""Tiered governance over gRPC: a memory near a threshold is moved by the frequent near-tier sweep.

The ACTIVE tier and full sweeps are scheduled far apart here, so only the
near tier (every 0.2 s) can archive the memory once its decaying value
crosses the archive threshold set just below it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sidecar, start_sidecar
from helpers import stub, vec, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[Sidecar]:
    sidecar = start_sidecar(
        tmp_path / "data",
        "--sweep-interval-s",
        "1000",
        "--full-sweep-interval-s",
        "0",
        "--near-interval-s",
        "0.2",
        "--sweep-every-writes",
        "0",
    )
    yield sidecar
    sidecar.stop()


def _value(service: Any, memory_id: int) -> float:
    return float(service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0].scores.value)


def _archived_by(service: Any, attempt: int) -> tuple[str, list[str]]:
    """Write a memory, set the archive threshold just below its value and wait until a sweep archives it: the
    trigger of the sweep that did, and every recent sweep's trigger."""
    memory_id = int(
        service.Remember(
            memory_service_pb2.RememberRequest(
                memory=memory_pb2.MemoryInput(content=f"a decaying note {attempt}", vector=vec(1 + attempt))
            )
        ).result.memory.id
    )
    value = _value(service, memory_id)
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.time_mode = policy_pb2.TIME_MODE_WALL_CLOCK
    for kind in policy.kinds:
        kind.decay_half_life_s = 2.0  # the value falls by a few hundredths per second
        kind.archive_below = value - 0.02  # just below: inside the near margin (0.05)
        kind.reactivate_above = value + 0.5
        kind.evict_below = -1.0
        kind.min_time_in_state_s = 0.0
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    service.Govern(memory_service_pb2.GovernRequest())  # a full sweep: finds it near, too high to move yet
    wait_until(
        lambda: (
            service.Get(memory_service_pb2.GetRequest(ids=[memory_id])).memories[0].state
            == memory_pb2.MEMORY_STATE_ARCHIVED
        ),
        "a sweep to archive it",
        timeout_s=30,
    )
    sweeps = service.GetStats(memory_service_pb2.GetStatsRequest()).recent_sweeps
    archived = memory_pb2.MEMORY_STATE_ARCHIVED
    by = next((s.trigger for s in sweeps if any(t.to_state == archived and t.count for t in s.transitions)), "")
    return by, [s.trigger for s in sweeps]


def test_the_near_tier_archives_a_memory_whose_value_crosses_the_threshold(tiered: Sidecar) -> None:
    service = stub(tiered.unix_target)
    # The policy update itself starts a sweep ("event"); on a loaded machine it can run after the value has
    # crossed, and archive the memory first. That says nothing of the near tier: try again with a new memory.
    seen = []
    for attempt in range(3):
        by, triggers = _archived_by(service, attempt)
        seen.append(by)
        # Nothing else was scheduled: the ACTIVE tier waits 1000 s and full sweeps are off.
        assert not any(t.startswith(("schedule: active", "writes")) or t == "schedule" for t in triggers), triggers
        if "near" in by:
            return
        assert by == "event", (by, triggers)
    pytest.fail(f"the near tier never archived first: {seen}")
