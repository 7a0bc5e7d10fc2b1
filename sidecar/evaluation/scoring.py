"""Feed the hot columns to the value kernel, for every memory (sweeps) or a few (reads)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from memevo.kernels.value import Scores, compute_scores
from memevo.v1 import policy_pb2

from ..policy import params_from_policy
from ..store.columns import MemoryColumns

T = TypeVar("T", bound=np.generic)


@dataclass(frozen=True)
class Clock:
    """The time axis of decay: "now", and each memory's times, in the policy's unit (seconds or turns)."""

    now: float
    last_access: npt.NDArray[np.float64]
    created: npt.NDArray[np.float64]
    state_since: npt.NDArray[np.float64]


def clock_for(
    columns: MemoryColumns, policy: policy_pb2.Policy, current_turn: int, rows: slice | npt.NDArray[np.int64]
) -> Clock:
    """The clock columns of ``rows`` in the policy's time mode."""
    if policy.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS:
        last_turn = columns.last_access_turn[rows].astype(np.float64)
        return Clock(
            now=float(current_turn),
            last_access=np.where(last_turn > 0, last_turn, np.nan),
            created=np.ascontiguousarray(columns.created_turn[rows]),
            state_since=np.ascontiguousarray(columns.state_since_turn[rows]),
        )
    return Clock(
        now=time.time(),
        last_access=np.ascontiguousarray(columns.last_access_at[rows]),
        created=np.ascontiguousarray(columns.recorded_at[rows]),
        state_since=np.ascontiguousarray(columns.state_since[rows]),
    )


def score(
    columns: MemoryColumns,
    policy: policy_pb2.Policy,
    clock: Clock,
    rows: slice | npt.NDArray[np.int64],
    params: npt.NDArray[np.float64] | None = None,
) -> Scores:
    """Accuracy, relevance, utility, cost and value of ``rows`` (a slice for sweeps, ids for reads)."""

    def column(array: npt.NDArray[T]) -> npt.NDArray[T]:
        return np.ascontiguousarray(array[rows])

    return compute_scores(
        column(columns.confidence),
        column(columns.successes),
        column(columns.failures),
        column(columns.inconsistency),
        clock.last_access,
        clock.created,
        column(columns.access_count),
        column(columns.importance),
        column(columns.content_bytes),
        column(columns.uniqueness),
        column(columns.stored_bytes),
        column(columns.kind),
        clock.now,
        policy.cost_budget_bytes or 1.0,
        params if params is not None else params_from_policy(policy),
    )
