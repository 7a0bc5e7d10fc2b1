"""The governance sweep in one pass: value and next lifecycle state of every memory over the compact hot columns.

``compute_scores`` + ``propose_transitions`` read the raw columns and
evaluate two exponentials, a log and a sigmoid per memory. A sweep here
reads per memory only four float32 *terms*, refreshed when the memory
changes (``derive_terms``), plus its lifecycle times, and evaluates no
transcendental function per item:

- ``rel_term`` = 2**-((anchor - t) / half_life): relevance decay at the
  *anchor* time, t = last access (or creation). At ``now`` the decay is
  ``min(1, rel_term * F)`` with F = 2**-((now - anchor) / half_life), one
  exp2 per kind per sweep (``sweep_coefficients``).
- ``conf_term`` = w_confidence * max(confidence - floor, 0) *
  2**-((anchor - t) / confidence_decay_half_life), likewise scaled by a
  per-kind factor G: the decaying part of accuracy.
- ``acc_base`` = w_confidence * min(confidence, floor) + w_feedback *
  sigmoid(successes - failures) - w_inconsistency * inconsistency: the part
  of accuracy that does not decay.
- ``static`` = beta * eta * log1p(access_count) + gamma * utility -
  delta * cost: the value terms that do not depend on time.

So value = alpha * clip(acc_base + conf_term * G, 0, 1) + beta * min(1,
rel_term * F) + static: a handful of multiply-adds per item, the same
formula as ``compute_scores`` (value.py docstring) up to float32 rounding.
The terms depend on the policy (weights, half-lives, cost budget) and on
the anchor: a policy change or a rebase refreshes all of them (O(n), see
sidecar/store/columns.py). Times are offsets from the anchor in the clock's
unit (``now`` too); both decay exponents must stay within
``DECAY_EXPONENT_MAX`` half-lives (the coefficient builder refuses more:
rebase first). A time with no value (NaN, infinite) means no decay, as in
``compute_scores``: its whole confidence goes to ``acc_base`` and its
relevance (1) to ``static``. A time later than the refresh's ``latest``
(clock skew) counts as ``latest``, so a term never grows above its value
at the time of the refresh.

Precision: the terms are computed in float64 and rounded to float32
(relative error 2**-24), F and G likewise; the sweep's multiply-adds are
float32. The value differs from the float64 formula by a few 1e-7 for
values of order 1 (tests: 1e-5 relative, 1e-6 absolute).

Besides the next state and ``below`` time (when the value fell below
EVICT_BELOW; NaN = not below), each item gets a ``near`` flag: a governed
(ACTIVE or ARCHIVED) memory that a small change could move - ACTIVE with
value < archive_below + margin, ARCHIVED with value > reactivate_above -
margin or < evict_below + margin, or an eviction grace period running. The
daemon re-evaluates those more often. ``sweep`` writes every output;
``sweep_in_place`` (scheduled sweeps) writes only the ``below`` and
``near`` entries that change and counts the moves, and the caller re-runs
``sweep`` on the few chunks where something moved.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt
from numba import prange, types

from memevo.kernels._simd import high_f32, low_f32, pack_f32_pairs
from memevo.kernels._wrappers import (
    check_column,
    check_output,
    check_params,
    check_scalar,
    kernel_launch,
    renamed,
)
from memevo.kernels.lifecycle import STATE_ACTIVE, STATE_ARCHIVED, STATE_EMPTY, STATE_EVICTED
from memevo.kernels.params import (
    ACCESS_WEIGHT,
    ALPHA,
    ARCHIVE_BELOW,
    BETA,
    CHUNK,
    CONFIDENCE_DECAY_HALF_LIFE,
    CONFIDENCE_FLOOR,
    DECAY_EXPONENT_MAX,
    DELTA,
    EVICT_BELOW,
    EVICT_GRACE,
    FASTMATH,
    GAMMA,
    HALF_LIFE,
    HOLD_GIL_ROWS,
    LENGTH_PROXY_BYTES,
    MIN_TIME_IN_STATE,
    REACTIVATE_ABOVE,
    UNMEASURED_UNIQUENESS,
    W_CONFIDENCE,
    W_FEEDBACK,
    W_INCONSISTENCY,
)

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

COUNT_EVALUATED = 0
"""Column of the per-chunk counts: slots holding a memory (state != EMPTY)."""
COUNT_MOVED = 1
"""Column of the per-chunk counts: slots whose next state differs from their state."""
COUNT_NEAR = 2
"""Column of the per-chunk counts: slots flagged near a threshold."""
N_COUNTS = 3


class SweepResult(NamedTuple):
    """What one sweep proposes, one entry per slot (or per row of ``sweep_rows``)."""

    value: F32
    next_state: U8
    next_below: F32
    """Next ``below`` offset; NaN = not below EVICT_BELOW."""
    near: U8
    """1 when the memory is close to a threshold (module docstring), else 0."""
    counts: I64
    """int64[n_chunks, N_COUNTS] per-chunk counts (COUNT_* columns); sum over axis 0 for totals."""


class Terms(NamedTuple):
    """The float32 per-memory terms a sweep reads (module docstring), one entry per slot."""

    acc_base: F32
    conf_term: F32
    rel_term: F32
    static: F32


# Per-kind coefficients, two float32 per uint64 word (see _simd.pack_f32_pairs).
_W_DECAY = 0  # F (relevance factor), G (confidence factor) at now
_W_ALPHA_BETA = 1  # alpha, beta
_W_EVICT_ARCHIVE = 2  # evict_below, archive_below
_W_REACTIVATE_GRACE = 3  # reactivate_above, evict_grace
_W_TIME_NOW = 4  # min_time_in_state, now (the same in every row; read once from row 0)
_N_WORDS = 5

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_LN2 = math.log(2.0)


def _ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=True)


def _rw(dtype: types.Type, ndim: int = 1) -> types.Array:
    return types.Array(dtype, ndim, "C")


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _item(
    s: np.uint8,
    k: np.intp,
    acc_base: np.float32,
    conf_term: np.float32,
    rel_term: np.float32,
    static: np.float32,
    since: np.float32,
    below: np.float32,
    now: np.float32,
    margin: np.float32,
    coef: npt.NDArray[np.uint64],
) -> tuple[np.float32, np.uint8, np.float32, np.uint8]:
    factor = low_f32(coef[k, _W_DECAY])
    confidence_factor = high_f32(coef[k, _W_DECAY])
    alpha = low_f32(coef[k, _W_ALPHA_BETA])
    beta = high_f32(coef[k, _W_ALPHA_BETA])
    evict_below = low_f32(coef[k, _W_EVICT_ARCHIVE])
    archive_below = high_f32(coef[k, _W_EVICT_ARCHIVE])
    reactivate_above = low_f32(coef[k, _W_REACTIVATE_GRACE])
    grace = high_f32(coef[k, _W_REACTIVATE_GRACE])
    min_time = low_f32(coef[k, _W_TIME_NOW])

    # min(): a time refreshed after this sweep's now (a concurrent write) must not count as more than fresh.
    decay = min(rel_term * factor, _ONE)
    acc = min(max(acc_base + conf_term * confidence_factor, _ZERO), _ONE)
    v = alpha * acc + beta * decay + static

    active = s == STATE_ACTIVE
    archived = s == STATE_ARCHIVED
    governed = active | archived
    still_below = below if math.isfinite(below) else now
    new_below = still_below if v < evict_below else np.float32(np.nan)
    below = new_below if governed else below
    may_move = governed & (not (now - since < min_time))
    evict = governed & math.isfinite(below) & (now - below >= grace)
    archive = may_move & active & (v < archive_below)
    reactivate = may_move & archived & (v > reactivate_above)
    nxt = STATE_ACTIVE if reactivate else s
    nxt = STATE_ARCHIVED if archive else nxt
    nxt = STATE_EVICTED if evict else nxt
    near = governed & (
        (active & (v < archive_below + margin))
        | (archived & ((v > reactivate_above - margin) | (v < evict_below + margin)))
        | math.isfinite(below)
    )
    near = near & (nxt != STATE_EVICTED)
    return v, np.uint8(nxt), below, np.uint8(near)


_INPUTS = (
    _ro(types.uint8),  # state
    _ro(types.uint8),  # kind
    _ro(types.float32),  # acc_base
    _ro(types.float32),  # conf_term
    _ro(types.float32),  # rel_term
    _ro(types.float32),  # static
    _ro(types.float32),  # since
)
_SCALARS = (types.float32, _ro(types.uint64, 2))  # margin, coefficient table
_OUTPUTS = (
    _rw(types.float32),  # value out
    _rw(types.uint8),  # next_state out
    _rw(types.float32),  # next_below out (may be ``below`` itself)
    _rw(types.uint8),  # near out
    _rw(types.int64, 2),  # per-chunk counts out
)
_SWEEP_SIGNATURE = types.void(*_INPUTS, _ro(types.float32), *_SCALARS, *_OUTPUTS)
_ROWS_SIGNATURE = types.void(_ro(types.int64), *_INPUTS, _ro(types.float32), *_SCALARS, *_OUTPUTS)
# In place: below and near are read and rewritten where they change.
_IN_PLACE_SIGNATURE = types.void(*_INPUTS, _rw(types.float32), _rw(types.uint8), *_SCALARS, _rw(types.int64, 2))


@numba.njit([_SWEEP_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _sweep(
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    margin: np.float32,
    coef: npt.NDArray[np.uint64],
    value: F32,
    next_state: U8,
    next_below: F32,
    near: U8,
    counts: I64,
) -> None:
    n = state.shape[0]
    n_kinds = coef.shape[0]
    n_chunks = counts.shape[0]
    now = high_f32(coef[0, _W_TIME_NOW])
    for chunk in prange(n_chunks):
        # Unsigned bounds: numba then drops negative-index wraparound (gathers/scatters instead of vector loads).
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        evaluated = np.int64(0)
        moved = np.int64(0)
        close = np.int64(0)
        for i in range(start, stop):
            s = state[i]
            k = np.intp(kind[i])
            k = np.intp(k if k < n_kinds else 0)
            v, nxt, b, flag = _item(
                s, k, acc_base[i], conf_term[i], rel_term[i], static[i], since[i], below[i], now, margin, coef
            )
            value[i] = v
            next_state[i] = nxt
            next_below[i] = b
            near[i] = flag
            evaluated += np.int64(s != STATE_EMPTY)
            moved += np.int64(nxt != s)
            close += np.int64(flag)
        counts[chunk, COUNT_EVALUATED] = evaluated
        counts[chunk, COUNT_MOVED] = moved
        counts[chunk, COUNT_NEAR] = close


@numba.njit([_IN_PLACE_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _sweep_in_place(
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    near: U8,
    margin: np.float32,
    coef: npt.NDArray[np.uint64],
    counts: I64,
) -> None:
    n = state.shape[0]
    n_kinds = coef.shape[0]
    n_chunks = counts.shape[0]
    now = high_f32(coef[0, _W_TIME_NOW])
    for chunk in prange(n_chunks):
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        evaluated = np.int64(0)
        moved = np.int64(0)
        close = np.int64(0)
        for i in range(start, stop):
            s = state[i]
            k = np.intp(kind[i])
            k = np.intp(k if k < n_kinds else 0)
            old_below = below[i]
            _value, nxt, b, flag = _item(
                s, k, acc_base[i], conf_term[i], rel_term[i], static[i], since[i], old_below, now, margin, coef
            )
            # Conditional (masked) stores: an unchanged cache line is never written back.
            if not ((b == old_below) | ((b != b) & (old_below != old_below))):
                below[i] = b
            if flag != near[i]:
                near[i] = flag
            evaluated += np.int64(s != STATE_EMPTY)
            moved += np.int64(nxt != s)
            close += np.int64(flag)
        counts[chunk, COUNT_EVALUATED] = evaluated
        counts[chunk, COUNT_MOVED] = moved
        counts[chunk, COUNT_NEAR] = close


@numba.njit([_ROWS_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _sweep_rows(
    rows: I64,
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    margin: np.float32,
    coef: npt.NDArray[np.uint64],
    value: F32,
    next_state: U8,
    next_below: F32,
    near: U8,
    counts: I64,
) -> None:
    n = rows.shape[0]
    n_kinds = coef.shape[0]
    n_chunks = counts.shape[0]
    now = high_f32(coef[0, _W_TIME_NOW])
    for chunk in prange(n_chunks):
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        evaluated = np.int64(0)
        moved = np.int64(0)
        close = np.int64(0)
        for j in range(start, stop):
            i = rows[j]
            s = state[i]
            k = np.intp(kind[i])
            k = np.intp(k if k < n_kinds else 0)
            v, nxt, b, flag = _item(
                s, k, acc_base[i], conf_term[i], rel_term[i], static[i], since[i], below[i], now, margin, coef
            )
            value[j] = v
            next_state[j] = nxt
            next_below[j] = b
            near[j] = flag
            evaluated += np.int64(s != STATE_EMPTY)
            moved += np.int64(nxt != s)
            close += np.int64(flag)
        counts[chunk, COUNT_EVALUATED] = evaluated
        counts[chunk, COUNT_MOVED] = moved
        counts[chunk, COUNT_NEAR] = close


def max_elapsed(params: F64) -> float:
    """How far (clock units) now may be past the anchor: DECAY_EXPONENT_MAX times the shortest half-life."""
    check_params(params)
    return float(DECAY_EXPONENT_MAX * params[:, [HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE]].min())


def sweep_coefficients(params: F64, now: float) -> npt.NDArray[np.uint64]:
    """The packed per-kind table a sweep at ``now`` reads (one exp2 per kind and half-life), built once per sweep.

    ``now`` is the offset from the terms' anchor in clock units, in [0, max_elapsed(params)]; raises
    ValueError otherwise (rebase the terms on a new anchor first) and for an invalid ``params``.
    """
    check_params(params)
    elapsed = check_scalar("now", now, positive=False)
    limit = max_elapsed(params)
    if not 0.0 <= elapsed <= limit:
        raise ValueError(
            f"now must be in [0, {limit}] (at most {DECAY_EXPONENT_MAX:g} half-lives past the anchor), not {elapsed}: "
            "rebase the terms on an anchor closer to now (derive_terms)"
        )
    coef = np.empty((params.shape[0], _N_WORDS), dtype=np.uint64)
    factors = np.exp2(-elapsed / params[:, [HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE]])
    coef[:, _W_DECAY] = pack_f32_pairs(factors[:, 0], factors[:, 1])
    coef[:, _W_ALPHA_BETA] = pack_f32_pairs(params[:, ALPHA], params[:, BETA])
    coef[:, _W_EVICT_ARCHIVE] = pack_f32_pairs(params[:, EVICT_BELOW], params[:, ARCHIVE_BELOW])
    coef[:, _W_REACTIVATE_GRACE] = pack_f32_pairs(params[:, REACTIVATE_ABOVE], params[:, EVICT_GRACE])
    coef[:, _W_TIME_NOW] = pack_f32_pairs(params[:, MIN_TIME_IN_STATE], np.full(params.shape[0], elapsed))
    return coef


_SWEEP_COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("state", np.uint8),
    ("kind", np.uint8),
    ("acc_base", np.float32),
    ("conf_term", np.float32),
    ("rel_term", np.float32),
    ("static", np.float32),
    ("since", np.float32),
    ("below", np.float32),
)


def _check_inputs(arrays: tuple[object, ...]) -> int:
    n: int | None = None
    for (name, dtype), array in zip(_SWEEP_COLUMNS, arrays, strict=True):
        n = check_column(name, array, dtype, n)
    assert n is not None
    return n


def _same_memory(a: object, b: object) -> bool:
    """Whether ``b`` is an array over exactly the same elements as ``a`` (an in-place output)."""
    return (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _check_counts(counts: object, n_chunks: int) -> npt.NDArray[np.int64]:
    if (
        not isinstance(counts, np.ndarray)
        or counts.dtype != np.int64
        or counts.shape != (n_chunks, N_COUNTS)
        or not counts.flags.c_contiguous
        or not counts.flags.writeable
    ):
        raise ValueError(f"counts must be a writable C-contiguous int64 array of shape ({n_chunks}, {N_COUNTS})")
    return counts


def _outputs(n: int, out: SweepResult | None, inputs: tuple[object, ...]) -> SweepResult:
    n_chunks = (n + CHUNK - 1) // CHUNK
    if out is None:
        return SweepResult(
            np.empty(n, dtype=np.float32),
            np.empty(n, dtype=np.uint8),
            np.empty(n, dtype=np.float32),
            np.empty(n, dtype=np.uint8),
            np.zeros((n_chunks, N_COUNTS), dtype=np.int64),
        )
    if not isinstance(out, SweepResult):
        raise ValueError(f"out must be a SweepResult, not {type(out).__name__}")
    dtypes: tuple[type[np.generic], ...] = (np.float32, np.uint8, np.float32, np.uint8)
    for name, array, dtype in zip(SweepResult._fields[:4], out[:4], dtypes, strict=True):
        check_output(f"out.{name}", array, dtype, n)
        for other_name, other in zip(_SWEEP_COLUMNS, inputs, strict=True):
            # next_below may be below itself: each item reads its slot before writing it.
            if name == "next_below" and other_name[0] == "below" and _same_memory(array, other):
                continue
            if isinstance(other, np.ndarray) and np.may_share_memory(array, other):
                raise ValueError(f"out.{name} overlaps input {other_name[0]}: pass a separate array")
    _check_counts(out.counts, n_chunks)
    return out


def _check_coef(coef: object) -> npt.NDArray[np.uint64]:
    if not isinstance(coef, np.ndarray) or coef.dtype != np.uint64 or coef.ndim != 2 or coef.shape[1] != _N_WORDS:
        raise ValueError("coef must be the table sweep_coefficients(params, now) returns")
    if coef.shape[0] < 1:
        raise ValueError("coef must have a row per kind (at least one)")
    return np.ascontiguousarray(coef)


def _margin(margin: float) -> np.float32:
    value = check_scalar("margin", margin, positive=False)
    if value < 0:
        raise ValueError(f"margin must be >= 0, not {value}")
    return np.float32(value)


def sweep(
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    coef: npt.NDArray[np.uint64],
    *,
    margin: float = 0.0,
    out: SweepResult | None = None,
) -> SweepResult:
    """Value, next state, next below offset and near flag of every slot (rules in the module docstring).

    Columns are 1-D C-contiguous arrays of one length: state and kind uint8,
    the terms (``derive_terms``) and the times float32; ``since`` and
    ``below`` are offsets from the terms' anchor in clock units. ``coef``
    comes from ``sweep_coefficients(params, now)`` and carries ``now``.
    ``margin`` (value units, >= 0) widens the near band. ``out`` receives the
    results and may pass ``below`` itself as ``next_below`` (updated in
    place); no other output may overlap an input. Raises ValueError saying
    what to pass instead. Releases the GIL.
    """
    inputs: tuple[npt.NDArray[Any], ...] = (state, kind, acc_base, conf_term, rel_term, static, since, below)
    n = _check_inputs(inputs)
    margin32, coef = _margin(margin), _check_coef(coef)
    result = _outputs(n, out, inputs)
    with kernel_launch(n):
        _sweep(*inputs, margin32, coef, *result)  # type: ignore[arg-type,call-arg]
    return result


def sweep_in_place(
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    near: U8,
    coef: npt.NDArray[np.uint64],
    *,
    margin: float = 0.0,
    counts: I64 | None = None,
) -> I64:
    """``sweep`` that updates ``below`` and ``near`` in place (only the entries that change) and returns the counts.

    What scheduled sweeps run: no value or next state is written, so a sweep
    costs little more than reading the columns. ``counts[:, COUNT_MOVED]``
    says which chunks of CHUNK slots hold a memory to move; ``sweep`` over
    those chunks gives their values and next states (the update is
    idempotent: it proposes the same). ``counts`` (int64[n_chunks,
    N_COUNTS]) may be passed to reuse it. Raises ValueError like ``sweep``.
    """
    inputs: tuple[npt.NDArray[Any], ...] = (state, kind, acc_base, conf_term, rel_term, static, since, below)
    n = _check_inputs(inputs)
    check_output("below", below, np.float32, n)
    check_output("near", near, np.uint8, n)
    for name, other in zip(_SWEEP_COLUMNS, inputs, strict=True):
        if isinstance(other, np.ndarray) and np.may_share_memory(near, other):
            raise ValueError(f"near overlaps input {name[0]}: pass the near column")
    margin32, coef = _margin(margin), _check_coef(coef)
    n_chunks = (n + CHUNK - 1) // CHUNK
    counts = np.zeros((n_chunks, N_COUNTS), dtype=np.int64) if counts is None else _check_counts(counts, n_chunks)
    with kernel_launch(n):
        _sweep_in_place(*inputs, near, margin32, coef, counts)  # type: ignore[arg-type,call-arg]
    return counts


def sweep_rows(
    rows: I64,
    state: U8,
    kind: U8,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
    since: F32,
    below: F32,
    coef: npt.NDArray[np.uint64],
    *,
    margin: float = 0.0,
) -> SweepResult:
    """``sweep`` of just the slots in ``rows`` (int64, each in [0, len(state))): results per row, inputs untouched.

    What tiered and event-driven sweeps run: the columns are read in place
    (no gathered copies). Raises ValueError for rows out of range or
    columns as ``sweep`` would.
    """
    inputs: tuple[npt.NDArray[Any], ...] = (state, kind, acc_base, conf_term, rel_term, static, since, below)
    n = _check_inputs(inputs)
    m = check_column("rows", rows, np.int64, None)
    if m and (int(rows.min()) < 0 or int(rows.max()) >= n):
        raise ValueError(f"rows must lie in [0, {n}): pass slot numbers of the columns")
    margin32, coef = _margin(margin), _check_coef(coef)
    result = _outputs(m, None, ())
    with kernel_launch(m):
        _sweep_rows(rows, *inputs, margin32, coef, *result)  # type: ignore[arg-type,call-arg]
    return result


# -- the terms the sweep reads, derived when their inputs change ---------------------------------------------------

_INV_LOG1P_PROXY = 1.0 / math.log1p(LENGTH_PROXY_BYTES)
_RAW = (
    _ro(types.uint8),  # kind
    _ro(types.float32),  # confidence
    _ro(types.float32),  # inconsistency
    _ro(types.float32),  # successes
    _ro(types.float32),  # failures
    _ro(types.uint32),  # access_count
    _ro(types.uint8),  # importance
    _ro(types.uint32),  # content_bytes
    _ro(types.float32),  # uniqueness
    _ro(types.uint32),  # stored_bytes
    _ro(types.float64),  # touched (clock units, absolute; NaN = none)
)
_TERMS_SCALARS = (types.float64, types.float64, types.float64, _ro(types.float64, 2))  # anchor, latest, 1/budget
_TERMS_OUT = (_rw(types.float32),) * 4
_DERIVE_ALL_SIGNATURE = types.void(*_RAW, *_TERMS_SCALARS, *_TERMS_OUT)
_DERIVE_ROWS_SIGNATURE = types.void(_ro(types.int64), *_RAW, *_TERMS_SCALARS, *_TERMS_OUT)


@numba.njit(inline="always")
def _unit(x: float, nan: float) -> float:
    """x clipped to [0, 1]; NaN becomes ``nan``."""
    return min(max(x, 0.0), 1.0) if x == x else nan


@numba.njit(inline="always")
def _terms(
    p: F64,
    confidence: float,
    inconsistency: float,
    successes: float,
    failures: float,
    access_count: float,
    importance: int,
    content_bytes: float,
    uniqueness: float,
    stored_bytes: float,
    touched: float,
    anchor: float,
    latest: float,
    inv_budget: float,
) -> tuple[float, float, float, float]:
    # Float64 and libm on purpose: this runs when a memory changes, not per sweep, so it buys accuracy.
    c = _unit(confidence, 0.0)
    inc = _unit(inconsistency, 0.0)
    x = (successes if successes == successes else 0.0) - (failures if failures == failures else 0.0)
    x = x if x == x else 0.0
    feedback = 1.0 / (1.0 + math.exp(-x)) if x > -700.0 else 0.0
    if importance >= 1 and importance <= 10:
        density = importance / 10.0
    else:
        density = min(1.0, math.log1p(content_bytes) * _INV_LOG1P_PROXY)
    utility = density * _unit(uniqueness, UNMEASURED_UNIQUENESS)
    floor = p[CONFIDENCE_FLOOR]
    w_confidence = p[W_CONFIDENCE]
    excess = w_confidence * max(c - floor, 0.0)
    acc_base = w_confidence * min(c, floor) + p[W_FEEDBACK] * feedback - p[W_INCONSISTENCY] * inc
    static = p[BETA] * p[ACCESS_WEIGHT] * math.log1p(access_count) + p[GAMMA] * utility
    static -= p[DELTA] * stored_bytes * inv_budget
    if math.isfinite(touched):
        t = min(touched, latest)
        rel_exponent = min((t - anchor) / p[HALF_LIFE], DECAY_EXPONENT_MAX)
        conf_exponent = min((t - anchor) / p[CONFIDENCE_DECAY_HALF_LIFE], DECAY_EXPONENT_MAX)
        rel_term = math.exp(rel_exponent * _LN2)
        conf_term = excess * math.exp(conf_exponent * _LN2)
    else:  # no time, no decay: the whole confidence and a relevance of 1 are constant
        acc_base += excess
        static += p[BETA]
        rel_term = 0.0
        conf_term = 0.0
    return acc_base, conf_term, rel_term, static


@numba.njit([_DERIVE_ALL_SIGNATURE], nogil=True, parallel=True, cache=True)
def _derive_all(
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    successes: F32,
    failures: F32,
    access_count: U32,
    importance: U8,
    content_bytes: U32,
    uniqueness: F32,
    stored_bytes: U32,
    touched: F64,
    anchor: float,
    latest: float,
    inv_budget: float,
    params: F64,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
) -> None:
    n = kind.shape[0]
    n_kinds = params.shape[0]
    for chunk in prange((n + CHUNK - 1) // CHUNK):
        for i in range(chunk * CHUNK, min(chunk * CHUNK + CHUNK, n)):
            k = np.intp(kind[i])
            a, c, r, s = _terms(
                params[k if k < n_kinds else 0],
                np.float64(confidence[i]),
                np.float64(inconsistency[i]),
                np.float64(successes[i]),
                np.float64(failures[i]),
                np.float64(access_count[i]),
                importance[i],
                np.float64(content_bytes[i]),
                np.float64(uniqueness[i]),
                np.float64(stored_bytes[i]),
                touched[i],
                anchor,
                latest,
                inv_budget,
            )
            acc_base[i] = a
            conf_term[i] = c
            rel_term[i] = r
            static[i] = s


@numba.njit([_DERIVE_ROWS_SIGNATURE], nogil=True, cache=True)
def _derive_rows(
    rows: I64,
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    successes: F32,
    failures: F32,
    access_count: U32,
    importance: U8,
    content_bytes: U32,
    uniqueness: F32,
    stored_bytes: U32,
    touched: F64,
    anchor: float,
    latest: float,
    inv_budget: float,
    params: F64,
    acc_base: F32,
    conf_term: F32,
    rel_term: F32,
    static: F32,
) -> None:
    n_kinds = params.shape[0]
    for j in range(rows.shape[0]):
        i = rows[j]
        k = np.intp(kind[i])
        a, c, r, s = _terms(
            params[k if k < n_kinds else 0],
            np.float64(confidence[i]),
            np.float64(inconsistency[i]),
            np.float64(successes[i]),
            np.float64(failures[i]),
            np.float64(access_count[i]),
            importance[i],
            np.float64(content_bytes[i]),
            np.float64(uniqueness[i]),
            np.float64(stored_bytes[i]),
            touched[j],
            anchor,
            latest,
            inv_budget,
        )
        acc_base[i] = a
        conf_term[i] = c
        rel_term[i] = r
        static[i] = s


_derive_rows_held = numba.njit([_DERIVE_ROWS_SIGNATURE], cache=True)(renamed(_derive_rows.py_func, "_derive_rows_held"))
"""``_derive_rows`` keeping the interpreter lock, for at most ``HOLD_GIL_ROWS`` rows: the store refreshes a recall's
few rows under its columns' lock, where releasing the interpreter lock let the other recalls queue on that lock."""


_RAW_COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("kind", np.uint8),
    ("confidence", np.float32),
    ("inconsistency", np.float32),
    ("successes", np.float32),
    ("failures", np.float32),
    ("access_count", np.uint32),
    ("importance", np.uint8),
    ("content_bytes", np.uint32),
    ("uniqueness", np.float32),
    ("stored_bytes", np.uint32),
)


def derive_terms(
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    successes: F32,
    failures: F32,
    access_count: U32,
    importance: U8,
    content_bytes: U32,
    uniqueness: F32,
    stored_bytes: U32,
    touched: F64,
    *,
    anchor: float,
    params: F64,
    cost_budget_bytes: float,
    latest: float = math.inf,
    rows: I64 | None = None,
    out: Terms | None = None,
    check: bool = True,
) -> Terms:
    """The sweep's terms (module docstring) from the raw columns, in float64, rounded to float32.

    Raw columns as in ``compute_scores``, one length n; ``touched`` is each
    memory's decay reference time (last access, else creation; NaN = none)
    as an absolute float64 on the clock, and ``anchor`` the time the terms
    are anchored at (the sweep's offsets count from it). A touched time
    after ``latest`` counts as ``latest`` (clock skew). Without ``rows``
    every slot is derived (parallel) into new arrays or ``out``; with
    ``rows`` (int64 slots) only those, ``touched`` then has one entry per
    row, and ``out`` (the full-length term columns) is required and updated
    at those slots. Raises ValueError saying what to pass instead.

    ``check=False`` skips the argument checks (about 200 us, which would
    dominate refreshing the few rows a recall touches): for the store, which
    owns its columns' dtypes and passes rows in range. Out-of-range rows are
    then undefined behaviour.
    """
    if not check:
        if rows is None or out is None:
            raise ValueError("check=False needs rows and out: pass both (or leave check on)")
        latest_value = float(latest)
        (_derive_rows_held if rows.shape[0] <= HOLD_GIL_ROWS else _derive_rows)(
            rows,
            kind,
            confidence,
            inconsistency,
            successes,
            failures,
            access_count,
            importance,
            content_bytes,
            uniqueness,
            stored_bytes,
            touched,
            float(anchor),
            latest_value,
            1.0 / cost_budget_bytes,
            params,
            *out,
        )
        return out
    raw: tuple[npt.NDArray[Any], ...] = (kind, confidence, inconsistency, successes, failures, access_count)
    raw = (*raw, importance, content_bytes, uniqueness, stored_bytes)
    n: int | None = None
    for (name, dtype), array in zip(_RAW_COLUMNS, raw, strict=True):
        n = check_column(name, array, dtype, n)
    assert n is not None
    check_params(params)
    budget = check_scalar("cost_budget_bytes", cost_budget_bytes, positive=True)
    anchor_value = check_scalar("anchor", anchor, positive=False)
    latest_value = float(latest)
    if latest_value != latest_value:
        raise ValueError("latest must be a number or inf, not NaN")
    if rows is None:
        check_column("touched", touched, np.float64, n)
    else:
        m = check_column("rows", rows, np.int64, None)
        check_column("touched", touched, np.float64, m)
        if m and (int(rows.min()) < 0 or int(rows.max()) >= n):
            raise ValueError(f"rows must lie in [0, {n}): pass slot numbers of the columns")
        if out is None:
            raise ValueError("out is required with rows: pass the Terms columns to update")
    if out is None:
        out = Terms(*(np.empty(n, dtype=np.float32) for _ in Terms._fields))
    elif not isinstance(out, Terms):
        raise ValueError(f"out must be Terms, not {type(out).__name__}")
    for name, array in zip(Terms._fields, out, strict=True):
        check_output(f"out.{name}", array, np.float32, n)
    scalars = (anchor_value, latest_value, 1.0 / budget, params)
    if rows is None:
        _derive_all(*raw, touched, *scalars, *out)  # type: ignore[arg-type,call-arg]
    else:
        derive = _derive_rows_held if rows.shape[0] <= HOLD_GIL_ROWS else _derive_rows
        derive(rows, *raw, touched, *scalars, *out)  # type: ignore[arg-type,call-arg]
    return out
