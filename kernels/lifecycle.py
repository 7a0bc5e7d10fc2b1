"""The lifecycle step of every memory: next state from its value, with hysteresis, minimum time and grace (DESIGN §3).

Per slot, with the policy row of its kind (a kind code with no row uses row 0):

- Only ACTIVE and ARCHIVED slots move; EMPTY (0), CONSOLIDATED, OBSOLETE and
  EVICTED keep their state and their below_since.
- below_since is when the value first fell below EVICT_BELOW: kept while it
  stays below (set to ``now`` if it was not finite), NaN once the value is
  >= EVICT_BELOW.
- EVICTED when below_since is finite and now - below_since >= EVICT_GRACE
  (eviction ignores MIN_TIME_IN_STATE; the grace period is its own wait).
- Otherwise, if now - state_since >= MIN_TIME_IN_STATE: ACTIVE -> ARCHIVED
  when value < ARCHIVE_BELOW, ARCHIVED -> ACTIVE when value > REACTIVATE_ABOVE.
  A value between the two moves nothing (hysteresis). A NaN state_since
  (unknown) does not block a move.
- A NaN value means "not evaluated": the slot keeps its state and below_since.

Thresholds are compared at the value's precision (float32). Times are in the
clock's unit (seconds or turns), as in the policy. The caller applies the
proposal: a slot whose state changed entered it at ``now`` (its new
state_since), and each change is an event for the change log.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt
from numba import prange, types

from memevo.kernels._wrappers import check_column, check_output, check_params, check_scalar, kernel_launch
from memevo.kernels.params import (
    ARCHIVE_BELOW,
    CHUNK,
    EVICT_BELOW,
    EVICT_GRACE,
    FASTMATH,
    MIN_TIME_IN_STATE,
    REACTIVATE_ABOVE,
)

STATE_EMPTY = 0
"""A slot that holds no memory (the proto's MEMORY_STATE_UNSPECIFIED)."""
STATE_ACTIVE = 1
STATE_ARCHIVED = 2
STATE_CONSOLIDATED = 3
STATE_OBSOLETE = 4
STATE_EVICTED = 5
N_STATES = 6
STATE_NAMES = ("empty", "active", "archived", "consolidated", "obsolete", "evicted")

U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]


def _ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    # Read-only variants accept both writable and read-only arrays.
    return types.Array(dtype, ndim, "C", readonly=True)


_PROPOSE_SIGNATURE = types.void(
    _ro(types.float32),  # value
    _ro(types.uint8),  # state
    _ro(types.uint8),  # kind
    _ro(types.float64),  # state_since
    _ro(types.float64),  # below_since
    types.float64,  # now
    _ro(types.float64, 2),  # params
    types.Array(types.uint8, 1, "C"),  # next_state out
    types.Array(types.float64, 1, "C"),  # next_below_since out
)


@numba.njit([_PROPOSE_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _propose_transitions(
    value: npt.NDArray[np.float32],
    state: U8,
    kind: U8,
    state_since: F64,
    below_since: F64,
    now: float,
    params: F64,
    next_state: U8,
    next_below_since: F64,
) -> None:
    n = value.shape[0]
    n_kinds = params.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for chunk in prange(n_chunks):
        # Unsigned bounds: numba then drops negative-index wraparound, which would otherwise turn
        # every load into a gather and every store into a scatter (10x slower).
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        # Branch-free on purpose (every load unconditional, `&` not `and`, selects not ifs): states and
        # values are unpredictable per slot, so branches mispredict, and selects let LLVM vectorise.
        for i in range(start, stop):
            s = state[i]
            below = below_since[i]
            v = value[i]
            since = state_since[i]
            k = np.intp(kind[i])
            k = np.intp(k if k < n_kinds else 0)
            # Thresholds at the value's precision, so a value of exactly 0.3 (as float32) is not "above 0.3".
            evict_below = np.float32(params[k, EVICT_BELOW])
            archive_below = np.float32(params[k, ARCHIVE_BELOW])
            reactivate_above = np.float32(params[k, REACTIVATE_ABOVE])
            grace = params[k, EVICT_GRACE]
            min_time = params[k, MIN_TIME_IN_STATE]

            active = s == STATE_ACTIVE
            archived = s == STATE_ARCHIVED
            governed = (active | archived) & (v == v)
            still_below = below if math.isfinite(below) else now
            new_below = still_below if v < evict_below else np.nan
            below = new_below if governed else below
            # "not <" so that an unknown (NaN) state_since lets the memory move.
            may_move = governed & (not (now - since < min_time))
            evict = governed & math.isfinite(below) & (now - below >= grace)
            archive = may_move & active & (v < archive_below)
            reactivate = may_move & archived & (v > reactivate_above)
            s = STATE_ACTIVE if reactivate else s
            s = STATE_ARCHIVED if archive else s
            s = STATE_EVICTED if evict else s
            next_state[i] = s
            next_below_since[i] = below


def propose_transitions(
    value: npt.NDArray[np.float32],
    state: U8,
    kind: U8,
    state_since: F64,
    below_since: F64,
    now: float,
    params: F64,
    *,
    out: tuple[U8, F64] | None = None,
) -> tuple[U8, F64]:
    """The next state (uint8) and next below_since (float64) of every slot (rules in the module docstring).

    Columns are 1-D C-contiguous arrays of one length: value float32, state
    and kind uint8, state_since and below_since float64 (clock units, NaN =
    unknown / not below). ``now`` must be finite; ``params`` must pass
    ``validate_params``. ``out``, if given, is a (uint8, float64) pair of
    writable arrays of the same length that receives the results; it must
    not overlap the inputs. Slots whose next state differs from ``state``
    entered it at ``now``. Raises ValueError, saying what to pass instead.
    Releases the GIL while it runs.
    """
    n = check_column("value", value, np.float32, None)
    check_column("state", state, np.uint8, n)
    check_column("kind", kind, np.uint8, n)
    check_column("state_since", state_since, np.float64, n)
    check_column("below_since", below_since, np.float64, n)
    now = check_scalar("now", now, positive=False)
    check_params(params)
    if out is None:
        out = (np.empty(n, dtype=np.uint8), np.empty(n, dtype=np.float64))
    else:
        if not isinstance(out, tuple) or len(out) != 2:
            raise ValueError("out must be a (next_state uint8, next_below_since float64) pair of arrays")
        check_output("out[0]", out[0], np.uint8, n)
        check_output("out[1]", out[1], np.float64, n)
        for name, array in (("state", state), ("below_since", below_since), ("value", value)):
            if np.may_share_memory(out[0], array) or np.may_share_memory(out[1], array):
                raise ValueError(f"out overlaps {name}: pass separate output arrays")
    with kernel_launch(n):
        _propose_transitions(value, state, kind, state_since, below_since, now, params, out[0], out[1])
    return out


_COUNT_SIGNATURE = types.void(_ro(types.uint8), _ro(types.uint8), types.Array(types.int64, 2, "C"))


@numba.njit([_COUNT_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _count_transitions(old_state: U8, new_state: U8, per_chunk: npt.NDArray[np.int64]) -> None:
    n = old_state.shape[0]
    n_chunks = per_chunk.shape[0]
    for chunk in prange(n_chunks):
        # Unsigned bounds: numba then drops negative-index wraparound, which would otherwise turn
        # every load into a gather and every store into a scatter (10x slower).
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        for i in range(start, stop):
            old = np.intp(old_state[i])
            new = np.intp(new_state[i])
            if old < N_STATES and new < N_STATES:
                per_chunk[chunk, old * N_STATES + new] += 1


def count_transitions(old_state: U8, new_state: U8) -> npt.NDArray[np.int64]:
    """int64[N_STATES, N_STATES] counts of slots by (old state, new state); the diagonal counts slots that stayed.

    Both arguments are 1-D C-contiguous uint8 arrays of one length; codes
    >= N_STATES are not counted. Raises ValueError, saying what to pass instead.
    """
    n = check_column("old_state", old_state, np.uint8, None)
    check_column("new_state", new_state, np.uint8, n)
    per_chunk = np.zeros(((n + CHUNK - 1) // CHUNK, N_STATES * N_STATES), dtype=np.int64)
    with kernel_launch(n):
        _count_transitions(old_state, new_state, per_chunk)
    counts: npt.NDArray[np.int64] = per_chunk.sum(axis=0).reshape(N_STATES, N_STATES)
    return counts
