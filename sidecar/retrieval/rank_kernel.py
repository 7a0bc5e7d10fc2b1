"""Recall's last ranking step in one compiled call: trust, ranking factor, score and order of a candidate pool.

The same numbers as ``recall.trust_of`` and ``recall.rank_factors`` followed by ``match * factor`` and a stable
descending sort (tests/unit/retrieval/test_rank_kernel.py compares them bit for bit), in one call instead of some
thirty NumPy calls on arrays of 40: under 8 concurrent recalls every one of those ran under the interpreter lock
(issue 28). The formula's constants are passed in from ``recall.py``, where they are defined and tuned; the
formula itself is written twice, here and in ``rank_factors`` (which replay uses on logged pools), and the test
fails when the two part.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba import types

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

_RESULT = types.Tuple((types.float64[::1], types.float64[::1], types.float64[::1], types.int64[::1]))  # type: ignore[no-untyped-call]
_SIGNATURE = _RESULT(
    types.float64[::1],  # match
    types.float32[::1],  # accuracy
    types.float32[::1],  # relevance
    types.float32[::1],  # inconsistency
    types.uint8[::1],  # importance
    types.uint8[::1],  # kind
    types.bool_[::1],  # demoted
    types.int32[::1],  # signature
    types.float64[::1],  # constants, in the order of CONSTANTS
    types.int64,  # the strategy kind
    types.int64,  # the episode kind
)

CONSTANTS = (
    "TRUST_FLOOR",
    "IMPORTANCE_WEIGHT",
    "UNRATED_IMPORTANCE",
    "INCONSISTENCY_PENALTY",
    "DEMOTED_FACTOR",
    "EPISODE_FACTOR",
)
"""Names in ``recall.py`` of the constants the kernel takes, in order."""


@numba.njit(inline="always")
def _maximum(a: float, b: float) -> float:  # pragma: no cover - compiled
    # np.maximum's: NaN wins.
    if np.isnan(a) or np.isnan(b):
        return np.nan
    return a if a >= b else b


@numba.njit(inline="always")
def _minimum(a: float, b: float) -> float:  # pragma: no cover - compiled
    if np.isnan(a) or np.isnan(b):
        return np.nan
    return a if a <= b else b


# Keeps the interpreter lock: a pool is a few microseconds of work, less than getting the lock back would cost
# beside other recalls (kernels/params.py HOLD_GIL_ROWS, issue 28).
@numba.njit([_SIGNATURE], cache=True)
def rank_pool(  # pragma: no cover - compiled; tested against recall.rank_factors
    match: F64,
    accuracy: F32,
    relevance: F32,
    inconsistency: F32,
    importance: U8,
    kind: U8,
    demoted: npt.NDArray[np.bool_],
    signature: npt.NDArray[np.int32],
    constants: F64,
    strategy: int,
    episode: int,
) -> tuple[F64, F64, F64, npt.NDArray[np.int64]]:
    """(factor, trust, scores, ranked): ``rank_factors``, ``trust_of``, ``match * factor`` and its stable descending
    order, for one pool (one entry per candidate in every array, each C-contiguous of the signature's type;
    ``constants`` as named by :data:`CONSTANTS`)."""
    trust_floor, importance_weight, unrated, penalty, demoted_factor, episode_factor = (
        constants[0],
        constants[1],
        constants[2],
        constants[3],
        constants[4],
        constants[5],
    )
    n = match.shape[0]
    shifted = np.empty(n, dtype=np.float64)
    for i in range(n):
        shifted[i] = np.float64(accuracy[i])
    # trust_of: each task's strategies shifted so that its best counts as 1 (bests from the unshifted accuracies).
    for i in range(n):
        if kind[i] == strategy:
            best = -np.inf
            for j in range(n):
                if kind[j] == strategy and signature[j] == signature[i]:
                    best = _maximum(best, np.float64(accuracy[j]))
            shifted[i] = shifted[i] + (1.0 - best)
    trust = np.empty(n, dtype=np.float64)
    factor = np.empty(n, dtype=np.float64)
    scores = np.empty(n, dtype=np.float64)
    for i in range(n):
        raw = 0.6 * shifted[i] + 0.4 * _minimum(np.float64(relevance[i]), 1.0)
        t = _minimum(_maximum(raw, 0.0), 1.0)
        trust[i] = t
        # rank_factors, operation for operation (the same rounding).
        f = trust_floor + (1.0 - trust_floor) * t
        rated = np.float64(importance[i])
        rating = (_minimum(rated, 10.0) if rated > 0 else unrated) / 10.0
        f = f * (1.0 - importance_weight + importance_weight * rating)
        f = f * (1.0 - penalty * _minimum(np.float64(inconsistency[i]), 1.0))
        if demoted[i]:
            f = f * demoted_factor
        if kind[i] == episode:
            f = f * episode_factor
        factor[i] = f
        scores[i] = match[i] * f
    ranked = np.argsort(-scores, kind="mergesort")  # stable, as np.argsort(kind="stable")
    return factor, trust, scores, ranked
