"""The per-kind governance policy as a float64 matrix, its defaults and its validation.

A policy is ``params[n_kinds, N_PARAMS]``: one row per memory-kind code, one
column per setting named by the constants below. Row ``KIND_DEFAULT`` (0)
applies to any kind code that has no row of its own. Times (half-lives,
grace, minimum time in state) are in the clock's unit: seconds when decay
runs on the wall clock, turns when it runs on the agent's turn counter.

Every numeric setting of the kernels lives here (STYLE: one place): default
weights and thresholds, the length proxy of utility, the fastmath flags and
the chunk size of the parallel loops.
"""

from __future__ import annotations

import math
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

# -- memory kinds (the proto's MemoryKind codes) ------------------------------------------------------------------
KIND_DEFAULT: Final = 0
KIND_FACT: Final = 1
KIND_PREFERENCE: Final = 2
KIND_EPISODE: Final = 3
KIND_STRATEGY: Final = 4
KIND_ABSTRACTION: Final = 5
N_KINDS: Final = 6
KIND_NAMES: Final = ("default", "fact", "preference", "episode", "strategy", "abstraction")

# -- columns of the policy matrix ------------------------------------------------------------------------------
ALPHA: Final = 0
"""Weight of accuracy in the value."""
BETA: Final = 1
"""Weight of relevance in the value."""
GAMMA: Final = 2
"""Weight of utility in the value."""
DELTA: Final = 3
"""Weight of cost, subtracted from the value."""
W_CONFIDENCE: Final = 4
"""Weight of (decayed) confidence in accuracy."""
W_FEEDBACK: Final = 5
"""Weight of sigmoid(successes - failures) in accuracy."""
W_INCONSISTENCY: Final = 6
"""Weight of the inconsistency score, subtracted from accuracy."""
HALF_LIFE: Final = 7
"""Relevance half-life, clock units (> 0)."""
ACCESS_WEIGHT: Final = 8
"""eta: weight of log1p(access_count) in relevance."""
ARCHIVE_BELOW: Final = 9
"""An ACTIVE memory whose value falls below this becomes ARCHIVED."""
REACTIVATE_ABOVE: Final = 10
"""An ARCHIVED memory whose value rises above this becomes ACTIVE (>= ARCHIVE_BELOW: the hysteresis band)."""
EVICT_BELOW: Final = 11
"""Value below which the eviction grace period runs (<= ARCHIVE_BELOW)."""
EVICT_GRACE: Final = 12
"""How long the value must stay below EVICT_BELOW before eviction, clock units (>= 0)."""
MIN_TIME_IN_STATE: Final = 13
"""Minimum time in ACTIVE/ARCHIVED before archiving or reactivating, clock units (>= 0)."""
CONFIDENCE_FLOOR: Final = 14
"""Confidence of an unused memory decays toward this, in [0, 1]."""
CONFIDENCE_DECAY_HALF_LIFE: Final = 15
"""Half-life of that decay, clock units (> 0)."""
N_PARAMS: Final = 16

PARAM_NAMES: Final = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "w_confidence",
    "w_feedback",
    "w_inconsistency",
    "half_life",
    "access_weight",
    "archive_below",
    "reactivate_above",
    "evict_below",
    "evict_grace",
    "min_time_in_state",
    "confidence_floor",
    "confidence_decay_half_life",
)

# -- settings of the kernels themselves ------------------------------------------------------------------------
FASTMATH: Final = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})
"""LLVM fast-math flags of every kernel: fastmath=True minus ``nnan`` and ``ninf``.

The kernels test for NaN and infinity on purpose (missing timestamps, unset
confidence); with ``nnan``/``ninf`` LLVM may delete those tests.
"""

CHUNK: Final = 1 << 14
"""Items per parallel chunk: large enough to amortise scheduling, small enough to balance 2-64 threads."""

HOLD_GIL_ROWS: Final = 256
"""Up to this many rows a row kernel keeps the interpreter lock (its build without ``nogil``).

A few rows are microseconds of work; releasing the lock for them costs more than they do, because getting it back
waits for whichever thread took it (up to the interpreter's 5 ms switch interval when that thread runs Python).
With 8 concurrent recalls this made each recall's access refresh, run under the columns' lock, a point where the
other recalls queued on that lock (issue 28).
"""

LENGTH_PROXY_BYTES: Final = 2000.0
"""Content length at which the length proxy of density reaches 1 (density = min(1, log1p(bytes)/log1p(this)))."""

UNMEASURED_UNIQUENESS: Final = 1.0
"""Uniqueness assumed when it is NaN (not measured yet): a memory with no known near-duplicate is unique."""

DEFAULT_COST_BUDGET_BYTES: Final = 1048576.0
"""Stored bytes at which cost reaches 1 (the proto's Policy.cost_budget_bytes default)."""
DECAY_EXPONENT_MAX: Final = 100.0
"""Largest decay exponent (half-lives) between the sweep's anchor and now, or stored in a decay term.

The sweep stores each memory's decay at an anchor time and multiplies it by one per-kind factor
2**-((now - anchor) / half_life) per sweep (kernels/sweep.py). Keeping both exponents within 100 keeps the
factor a normal float32 (>= 2**-100) and every term finite, so no product is 0 * inf."""
REBASE_EXPONENT: Final = 64.0
"""The governance daemon moves the anchor to now (one O(n) refresh) once now is this many of the shortest
half-lives past it: well before DECAY_EXPONENT_MAX, which the sweep refuses to exceed."""

Clock = Literal["wall", "turns"]

_DAY_S: Final = 86400.0
_HOUR_S: Final = 3600.0

# Rationale of the defaults. An idle memory (no access, no feedback) tends to
#   V_idle = alpha * (w_c * floor + w_f * 0.5) + gamma * utility - delta * cost,
# and DESIGN §3 wants it to drift ACTIVE -> ARCHIVED -> EVICTED, so V_idle must end
# below EVICT_BELOW (0.05) for an ordinary memory (utility ~0.35: a 200-byte text
# with uniqueness 0.5). With alpha 0.2, w_c 0.8, w_f 0.2, floor 0.02 and gamma 0.05
# that is 0.0232 + 0.05 * utility, below 0.05 for any utility under 0.53; an
# important, unique memory (utility >= 0.6) stays ARCHIVED instead. Strategies weigh
# feedback so much that an untried strategy is only archived, while one that keeps
# failing is evicted; abstractions (gamma 0.1) are evicted only when short or redundant.
# Relevance dominates a fresh memory (beta 0.7), so every new memory starts well above
# REACTIVATE_ABOVE whatever its confidence.
_BASE: Final = {
    ALPHA: 0.2,
    BETA: 0.7,
    GAMMA: 0.05,
    DELTA: 0.05,
    W_CONFIDENCE: 0.8,
    W_FEEDBACK: 0.2,
    W_INCONSISTENCY: 0.6,
    ACCESS_WEIGHT: 0.1,
    ARCHIVE_BELOW: 0.2,
    REACTIVATE_ABOVE: 0.3,
    EVICT_BELOW: 0.05,
    CONFIDENCE_FLOOR: 0.02,
}

# Per kind: overrides of _BASE, and the time settings as (wall seconds, turns).
_KIND_OVERRIDES: Final[dict[int, dict[int, float]]] = {
    KIND_DEFAULT: {},
    KIND_FACT: {},
    KIND_PREFERENCE: {},
    KIND_EPISODE: {},
    # Whether a strategy works is learnt from outcomes, not from how sure its author was.
    KIND_STRATEGY: {ALPHA: 0.3, BETA: 0.6, W_CONFIDENCE: 0.3, W_FEEDBACK: 0.7},
    # Abstractions are dense summaries: their utility counts for more.
    KIND_ABSTRACTION: {BETA: 0.65, GAMMA: 0.1},
}

# kind -> {column: (wall seconds, turns)}. Episodes lose relevance fastest; preferences, strategies and
# abstractions hold longest.
_KIND_TIMES: Final[dict[int, dict[int, tuple[float, float]]]] = {
    KIND_DEFAULT: {HALF_LIFE: (7 * _DAY_S, 200.0), CONFIDENCE_DECAY_HALF_LIFE: (30 * _DAY_S, 1000.0)},
    KIND_FACT: {HALF_LIFE: (7 * _DAY_S, 200.0), CONFIDENCE_DECAY_HALF_LIFE: (30 * _DAY_S, 1000.0)},
    KIND_PREFERENCE: {HALF_LIFE: (30 * _DAY_S, 800.0), CONFIDENCE_DECAY_HALF_LIFE: (90 * _DAY_S, 3000.0)},
    KIND_EPISODE: {HALF_LIFE: (1 * _DAY_S, 50.0), CONFIDENCE_DECAY_HALF_LIFE: (14 * _DAY_S, 500.0)},
    KIND_STRATEGY: {HALF_LIFE: (30 * _DAY_S, 1000.0), CONFIDENCE_DECAY_HALF_LIFE: (90 * _DAY_S, 3000.0)},
    KIND_ABSTRACTION: {HALF_LIFE: (30 * _DAY_S, 1000.0), CONFIDENCE_DECAY_HALF_LIFE: (90 * _DAY_S, 3000.0)},
}

_COMMON_TIMES: Final[dict[int, tuple[float, float]]] = {
    EVICT_GRACE: (30 * _DAY_S, 2000.0),
    MIN_TIME_IN_STATE: (1 * _HOUR_S, 20.0),
}


def default_params(clock: Clock = "wall") -> npt.NDArray[np.float64]:
    """A fresh default policy matrix of shape (N_KINDS, N_PARAMS).

    ``clock`` is "wall" (times in seconds) or "turns" (times in agent turns).
    Raises ValueError for any other clock.
    """
    if clock not in ("wall", "turns"):
        raise ValueError(f"clock must be 'wall' or 'turns', not {clock!r}")
    which = 0 if clock == "wall" else 1
    params = np.full((N_KINDS, N_PARAMS), np.nan, dtype=np.float64)
    for kind in range(N_KINDS):
        for column, value in _BASE.items():
            params[kind, column] = value
        for column, value in _KIND_OVERRIDES[kind].items():
            params[kind, column] = value
        for column, pair in (_COMMON_TIMES | _KIND_TIMES[kind]).items():
            params[kind, column] = pair[which]
    return params


_NON_NEGATIVE: Final = (
    ALPHA,
    BETA,
    GAMMA,
    DELTA,
    W_CONFIDENCE,
    W_FEEDBACK,
    W_INCONSISTENCY,
    ACCESS_WEIGHT,
    EVICT_GRACE,
    MIN_TIME_IN_STATE,
)
_POSITIVE: Final = (HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE)


def _all_valid(params: npt.NDArray[np.float64]) -> bool:
    # The common case in one vectorised pass: every wrapper call checks its params.
    with np.errstate(invalid="ignore"):
        return bool(
            np.isfinite(params).all()
            and (params[:, _NON_NEGATIVE] >= 0).all()
            and (params[:, _POSITIVE] > 0).all()
            and ((params[:, CONFIDENCE_FLOOR] >= 0) & (params[:, CONFIDENCE_FLOOR] <= 1)).all()
            and (params[:, EVICT_BELOW] <= params[:, ARCHIVE_BELOW]).all()
            and (params[:, ARCHIVE_BELOW] <= params[:, REACTIVATE_ABOVE]).all()
        )


def validate_params(params: object) -> list[str]:
    """Human-readable problems of a policy matrix; an empty list means it is valid.

    Checks the shape (2-D, at least one row, N_PARAMS columns, float64), that
    every entry is finite, weights, grace and minimum time are >= 0,
    half-lives are > 0, the confidence floor is in [0, 1], and
    evict_below <= archive_below <= reactivate_above. Meant for the service
    to turn into INVALID_ARGUMENT; never raises.
    """
    if not isinstance(params, np.ndarray):
        return [f"params must be a numpy float64 array of shape (n_kinds, {N_PARAMS}), not {type(params).__name__}"]
    if params.ndim != 2 or params.shape[0] < 1 or params.shape[1] != N_PARAMS:
        return [f"params must have shape (n_kinds >= 1, {N_PARAMS}), not {params.shape}"]
    if params.dtype != np.float64:
        return [f"params must be float64, not {params.dtype}: pass params.astype(np.float64)"]
    if _all_valid(params):
        return []
    problems: list[str] = []
    for kind in range(params.shape[0]):
        row = params[kind]
        where = f"kind {kind} ({KIND_NAMES[kind]})" if kind < N_KINDS else f"kind {kind}"
        finite = True
        for column in range(N_PARAMS):
            if not math.isfinite(row[column]):
                problems.append(f"{where}: {PARAM_NAMES[column]} must be finite, not {row[column]}")
                finite = False
        if not finite:
            continue
        for column in _NON_NEGATIVE:
            if row[column] < 0:
                problems.append(f"{where}: {PARAM_NAMES[column]} must be >= 0, not {row[column]}")
        for column in _POSITIVE:
            if row[column] <= 0:
                problems.append(f"{where}: {PARAM_NAMES[column]} must be > 0, not {row[column]}")
        if not 0.0 <= row[CONFIDENCE_FLOOR] <= 1.0:
            problems.append(f"{where}: confidence_floor must be in [0, 1], not {row[CONFIDENCE_FLOOR]}")
        if not row[EVICT_BELOW] <= row[ARCHIVE_BELOW] <= row[REACTIVATE_ABOVE]:
            problems.append(
                f"{where}: thresholds must satisfy evict_below <= archive_below <= reactivate_above, "
                f"not {row[EVICT_BELOW]} / {row[ARCHIVE_BELOW]} / {row[REACTIVATE_ABOVE]}"
            )
    return problems
