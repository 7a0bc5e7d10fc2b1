"""Tier selection of the governance daemon: which tier is due, and which slots each tier sweeps."""

from __future__ import annotations

import numpy as np

from memevo.sidecar.config import GovernanceConfig
from memevo.sidecar.governance.daemon import TIER_ACTIVE, TIER_FULL, TIER_NEAR, TierClock, tier_rows

ACTIVE, ARCHIVED, OBSOLETE = 1, 2, 4


def test_the_most_inclusive_due_tier_wins_and_running_it_resets_the_ones_below() -> None:
    config = GovernanceConfig(sweep_interval_s=5.0, near_interval_s=1.0, full_interval_s=60.0, sweep_every_writes=100)
    clock = TierClock(config, 0.0, 0.0, 0.0)
    assert clock.due(0.5, 0) is None
    assert clock.due(1.0, 0) == (TIER_NEAR, "schedule: near")
    clock.ran(TIER_NEAR, 1.0, 0)
    assert clock.due(1.5, 100) == (TIER_ACTIVE, "writes: active")
    clock.ran(TIER_ACTIVE, 1.5, 100)
    assert clock.due(2.0, 150) is None
    assert clock.due(6.5, 150) == (TIER_ACTIVE, "schedule: active")
    assert clock.due(60.0, 150) == (TIER_FULL, "schedule")
    clock.ran(TIER_FULL, 60.0, 150)
    assert clock.due(60.9, 150) is None


def test_tiers_pick_near_active_or_every_slot() -> None:
    state = np.array([0, ACTIVE, ARCHIVED, ARCHIVED, OBSOLETE, ACTIVE], dtype=np.uint8)
    near = np.array([0, 0, 1, 0, 0, 1], dtype=np.uint8)
    big = {"sample_above_count": 100, "sample_count": 10}
    rows, _ = tier_rows(TIER_NEAR, state, near, 1, **big)
    assert list(rows) == [2, 5]  # type: ignore[arg-type]
    rows, _ = tier_rows(TIER_ACTIVE, state, near, 1, **big)
    assert list(rows) == [1, 2, 5]  # type: ignore[arg-type]
    rows, _ = tier_rows(TIER_FULL, state, near, 1, **big)
    assert rows == slice(1, 6)


def test_a_large_store_is_swept_in_rotating_blocks() -> None:
    state = np.full(25, ACTIVE, dtype=np.uint8)
    near = np.zeros(25, dtype=np.uint8)
    small = {"sample_above_count": 10, "sample_count": 10}
    cursor = 1
    blocks = []
    for _ in range(4):
        rows, cursor = tier_rows(TIER_FULL, state, near, cursor, **small)
        blocks.append(rows)
    assert blocks == [slice(1, 11), slice(11, 21), slice(21, 25), slice(1, 11)]
    near[[3, 7, 12, 15, 20, 22]] = 1
    rows, cursor = tier_rows(TIER_NEAR, state, near, 1, **{"sample_above_count": 10, "sample_count": 4})
    assert list(rows) == [3, 7, 12, 15]  # type: ignore[arg-type]
    rows, cursor = tier_rows(TIER_NEAR, state, near, cursor, **{"sample_above_count": 10, "sample_count": 4})
    assert list(rows) == [3, 7, 20, 22]  # type: ignore[arg-type]
