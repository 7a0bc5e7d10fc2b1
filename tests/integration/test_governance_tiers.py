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


def test_the_near_tier_archives_a_memory_whose_value_crosses_the_threshold(tiered: Sidecar) -> None:
    service = stub(tiered.unix_target)
    memory_id = int(
        service.Remember(
            memory_service_pb2.RememberRequest(memory=memory_pb2.MemoryInput(content="a decaying note", vector=vec(1)))
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
        "the near tier to archive it",
        timeout_s=30,
    )
    triggers = [s.trigger for s in service.GetStats(memory_service_pb2.GetStatsRequest()).recent_sweeps]
    assert any("near" in t for t in triggers), triggers
    # Nothing else was scheduled: the ACTIVE tier waits 1000 s and full sweeps are off.
    assert not any(t.startswith(("schedule: active", "writes")) or t == "schedule" for t in triggers), triggers
