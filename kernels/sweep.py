"""The governance sweep in one pass: value and next lifecycle state of every memory over the compact hot columns.

``compute_scores`` + ``propose_transitions`` read the raw columns (67 bytes
per memory, float64 times) and write the value in between; a sweep here
reads the compact columns instead and never materialises the terms:

- ``feedback`` = sigmoid(successes - failures), ``log_count`` =
  log1p(access_count) and ``utility`` = density * uniqueness are float32
  caches, updated when their inputs change (``derive_*`` below), so a sweep
  evaluates no log and no sigmoid per item.
- Times are float32 offsets, in the clock's unit, from a per-store epoch
  (``now`` is passed as an offset too): ``touched`` = last access, or
  creation when never accessed; ``state_since``; ``below`` = when the value
  fell below EVICT_BELOW (NaN = not below). The store keeps the epoch within
  a few days of now (rebasing), so recent times keep sub-second resolution;
  see ``sidecar/store/columns.py``.

Per item the formulas are those of ``compute_scores`` and
``propose_transitions`` (value.py and lifecycle.py docstrings), evaluated in
float32 with the vectorised exp2 of _simd.py: two exp2 per item, no log.
The differences to the raw pipeline are only float32 rounding (value within
1e-5; see tests/unit/kernels/test_sweep.py).

Besides the next state and below time, each item gets a ``near`` flag: a
governed (ACTIVE or ARCHIVED) memory that a small change could move -
ACTIVE with value < archive_below + margin, ARCHIVED with value >
reactivate_above - margin or < evict_below + margin, or an eviction grace
period running. The daemon re-evaluates those more often.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt
from numba import prange, types

from memevo.kernels._simd import exp2f, high_f32, low_f32, pack_f32_pairs
from memevo.kernels._wrappers import check_column, check_output, check_params, check_scalar, kernel_launch
from memevo.kernels.lifecycle import STATE_ACTIVE, STATE_ARCHIVED, STATE_EMPTY, STATE_EVICTED
from memevo.kernels.params import (
    ACCESS_WEIGHT,
    ALPHA,
    ARCHIVE_BELOW,
    BETA,
    CHUNK,
    CONFIDENCE_DECAY_HALF_LIFE,
    CONFIDENCE_FLOOR,
    DELTA,
    EVICT_BELOW,
    EVICT_GRACE,
    FASTMATH,
    GAMMA,
    HALF_LIFE,
    LENGTH_PROXY_BYTES,
    MIN_TIME_IN_STATE,
    REACTIVATE_ABOVE,
    UNMEASURED_UNIQUENESS,
    W_CONFIDENCE,
    W_FEEDBACK,
    W_INCONSISTENCY,
)

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

COUNT_EVALUATED = 0
"""Column of ``SweepResult.counts``: slots holding a memory (state != EMPTY)."""
COUNT_MOVED = 1
"""Column of ``SweepResult.counts``: slots whose next state differs from their state."""
COUNT_NEAR = 2
"""Column of ``SweepResult.counts``: slots flagged near a threshold."""
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


# Per-kind coefficients, two float32 per uint64 word (see _simd.pack_f32_pairs).
_W_RATES = 0  # 1 / half_life, 1 / confidence_decay_half_life
_W_CONFIDENCE = 1  # confidence_floor, w_confidence
_W_ACCURACY = 2  # w_feedback, w_inconsistency
_W_ALPHA_BETA = 3  # alpha, beta
_W_ETA_GAMMA = 4  # beta * eta, gamma
_W_COST_EVICT = 5  # delta / cost_budget_bytes, evict_below
_W_THRESHOLDS = 6  # archive_below, reactivate_above
_W_TIMES = 7  # evict_grace, min_time_in_state
_N_WORDS = 8
_MAX_RATE = 1e30

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)


def _ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=True)


def _rw(dtype: types.Type, ndim: int = 1) -> types.Array:
    return types.Array(dtype, ndim, "C")


@numba.njit(inline="always", fastmath=set(FASTMATH))
def _item(
    s: np.uint8,
    k: np.intp,
    c: np.float32,
    inc: np.float32,
    fb: np.float32,
    lc: np.float32,
    util: np.float32,
    stored: np.uint32,
    t: np.float32,
    since: np.float32,
    below: np.float32,
    now: np.float32,
    margin: np.float32,
    coef: npt.NDArray[np.uint64],
) -> tuple[np.float32, np.uint8, np.float32, np.uint8]:
    rate = low_f32(coef[k, _W_RATES])
    confidence_rate = high_f32(coef[k, _W_RATES])
    floor = low_f32(coef[k, _W_CONFIDENCE])
    w_confidence = high_f32(coef[k, _W_CONFIDENCE])
    w_feedback = low_f32(coef[k, _W_ACCURACY])
    w_inconsistency = high_f32(coef[k, _W_ACCURACY])
    alpha = low_f32(coef[k, _W_ALPHA_BETA])
    beta = high_f32(coef[k, _W_ALPHA_BETA])
    beta_eta = low_f32(coef[k, _W_ETA_GAMMA])
    gamma = high_f32(coef[k, _W_ETA_GAMMA])
    delta_per_byte = low_f32(coef[k, _W_COST_EVICT])
    evict_below = high_f32(coef[k, _W_COST_EVICT])
    archive_below = low_f32(coef[k, _W_THRESHOLDS])
    reactivate_above = high_f32(coef[k, _W_THRESHOLDS])
    grace = low_f32(coef[k, _W_TIMES])
    min_time = high_f32(coef[k, _W_TIMES])

    dt = now - t
    # NaN or infinite reference time, or one in the future: no decay (as compute_scores).
    dt = dt if (dt > _ZERO) & math.isfinite(t) else _ZERO
    decay = exp2f(-(dt * rate))
    confidence_decay = exp2f(-(dt * confidence_rate))
    c = min(max(c, _ZERO), _ONE) if c == c else _ZERO
    c = floor + (c - floor) * confidence_decay if c > floor else c
    inc = min(max(inc, _ZERO), _ONE) if inc == inc else _ZERO
    acc = min(max(w_confidence * c + w_feedback * fb - w_inconsistency * inc, _ZERO), _ONE)
    v = alpha * acc + beta * decay + beta_eta * lc + gamma * util - delta_per_byte * np.float32(stored)

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


_COMMON = (
    _ro(types.float32),  # confidence
    _ro(types.float32),  # inconsistency
    _ro(types.float32),  # feedback
    _ro(types.float32),  # log_count
    _ro(types.float32),  # utility
    _ro(types.uint32),  # stored_bytes
    _ro(types.float32),  # touched
    _ro(types.float32),  # state_since
    _ro(types.float32),  # below
    types.float32,  # now (offset)
    types.float32,  # margin
    _ro(types.uint64, 2),  # coefficient table
    _rw(types.float32),  # value out
    _rw(types.uint8),  # next_state out
    _rw(types.float32),  # next_below out (may be ``below`` itself)
    _rw(types.uint8),  # near out
    _rw(types.int64, 2),  # per-chunk counts out
)
_SWEEP_SIGNATURE = types.void(_ro(types.uint8), _ro(types.uint8), *_COMMON)
_ROWS_SIGNATURE = types.void(_ro(types.int64), _ro(types.uint8), _ro(types.uint8), *_COMMON)


@numba.njit([_SWEEP_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _sweep(
    state: U8,
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    feedback: F32,
    log_count: F32,
    utility: F32,
    stored_bytes: npt.NDArray[np.uint32],
    touched: F32,
    state_since: F32,
    below: F32,
    now: np.float32,
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
                s,
                k,
                confidence[i],
                inconsistency[i],
                feedback[i],
                log_count[i],
                utility[i],
                stored_bytes[i],
                touched[i],
                state_since[i],
                below[i],
                now,
                margin,
                coef,
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


@numba.njit([_ROWS_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _sweep_rows(
    rows: I64,
    state: U8,
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    feedback: F32,
    log_count: F32,
    utility: F32,
    stored_bytes: npt.NDArray[np.uint32],
    touched: F32,
    state_since: F32,
    below: F32,
    now: np.float32,
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
                s,
                k,
                confidence[i],
                inconsistency[i],
                feedback[i],
                log_count[i],
                utility[i],
                stored_bytes[i],
                touched[i],
                state_since[i],
                below[i],
                now,
                margin,
                coef,
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


def sweep_coefficients(params: npt.NDArray[np.float64], cost_budget_bytes: float) -> npt.NDArray[np.uint64]:
    """The packed per-kind table the sweep kernels read, built once per policy (float32 pairs in uint64 words)."""
    check_params(params)
    budget = check_scalar("cost_budget_bytes", cost_budget_bytes, positive=True)
    coef = np.empty((params.shape[0], _N_WORDS), dtype=np.uint64)
    # Capped so that dt * rate is never inf * 0 = NaN.
    rates = np.minimum(1.0 / params[:, [HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE]], _MAX_RATE)
    coef[:, _W_RATES] = pack_f32_pairs(rates[:, 0], rates[:, 1])
    coef[:, _W_CONFIDENCE] = pack_f32_pairs(params[:, CONFIDENCE_FLOOR], params[:, W_CONFIDENCE])
    coef[:, _W_ACCURACY] = pack_f32_pairs(params[:, W_FEEDBACK], params[:, W_INCONSISTENCY])
    coef[:, _W_ALPHA_BETA] = pack_f32_pairs(params[:, ALPHA], params[:, BETA])
    coef[:, _W_ETA_GAMMA] = pack_f32_pairs(params[:, BETA] * params[:, ACCESS_WEIGHT], params[:, GAMMA])
    coef[:, _W_COST_EVICT] = pack_f32_pairs(params[:, DELTA] / budget, params[:, EVICT_BELOW])
    coef[:, _W_THRESHOLDS] = pack_f32_pairs(params[:, ARCHIVE_BELOW], params[:, REACTIVATE_ABOVE])
    coef[:, _W_TIMES] = pack_f32_pairs(params[:, EVICT_GRACE], params[:, MIN_TIME_IN_STATE])
    return coef


_SWEEP_COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("state", np.uint8),
    ("kind", np.uint8),
    ("confidence", np.float32),
    ("inconsistency", np.float32),
    ("feedback", np.float32),
    ("log_count", np.float32),
    ("utility", np.float32),
    ("stored_bytes", np.uint32),
    ("touched", np.float32),
    ("state_since", np.float32),
    ("below", np.float32),
)


def _check_inputs(arrays: tuple[object, ...], length: int | None) -> int:
    n = length
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
    if not isinstance(out.counts, np.ndarray) or out.counts.shape != (n_chunks, N_COUNTS):
        raise ValueError(f"out.counts must be int64 of shape ({n_chunks}, {N_COUNTS})")
    check_output("out.counts[:, 0]", np.ascontiguousarray(out.counts[:, 0]), np.int64, n_chunks)
    if not out.counts.flags.c_contiguous or not out.counts.flags.writeable:
        raise ValueError("out.counts must be a writable C-contiguous int64 array")
    return out


def sweep(
    state: U8,
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    feedback: F32,
    log_count: F32,
    utility: F32,
    stored_bytes: npt.NDArray[np.uint32],
    touched: F32,
    state_since: F32,
    below: F32,
    now: float,
    coef: npt.NDArray[np.uint64],
    *,
    margin: float = 0.0,
    out: SweepResult | None = None,
) -> SweepResult:
    """Value, next state, next below offset and near flag of every slot (rules in the module docstring).

    Columns are 1-D C-contiguous arrays of one length (dtypes as in the
    signature; times are float32 offsets from the caller's epoch, in the
    clock's unit). ``now`` is the current offset (finite); ``coef`` comes
    from ``sweep_coefficients``; ``margin`` (value units, >= 0) widens the
    near band. ``out`` receives the results and may pass ``below`` itself
    as ``next_below`` (updated in place); no other output may overlap an
    input. Raises ValueError saying what to pass instead. Releases the GIL.
    """
    inputs: tuple[npt.NDArray[Any], ...] = (state, kind, confidence, inconsistency, feedback, log_count, utility)
    inputs = (*inputs, stored_bytes, touched, state_since, below)
    n = _check_inputs(inputs, None)
    now32, margin32, coef = _scalars(now, margin, coef)
    result = _outputs(n, out, inputs)
    with kernel_launch(n):
        _sweep(*inputs, now32, margin32, coef, *result)  # type: ignore[arg-type,call-arg]
    return result


def sweep_rows(
    rows: I64,
    state: U8,
    kind: U8,
    confidence: F32,
    inconsistency: F32,
    feedback: F32,
    log_count: F32,
    utility: F32,
    stored_bytes: npt.NDArray[np.uint32],
    touched: F32,
    state_since: F32,
    below: F32,
    now: float,
    coef: npt.NDArray[np.uint64],
    *,
    margin: float = 0.0,
) -> SweepResult:
    """``sweep`` of just the slots in ``rows`` (int64, each in [0, len(state))): results per row, inputs untouched.

    What tiered and event-driven sweeps run: the columns are read in place
    (no gathered copies). Raises ValueError for rows out of range or
    columns as ``sweep`` would.
    """
    inputs: tuple[npt.NDArray[Any], ...] = (state, kind, confidence, inconsistency, feedback, log_count, utility)
    inputs = (*inputs, stored_bytes, touched, state_since, below)
    n = _check_inputs(inputs, None)
    m = check_column("rows", rows, np.int64, None)
    if m and (int(rows.min()) < 0 or int(rows.max()) >= n):
        raise ValueError(f"rows must lie in [0, {n}): pass slot numbers of the columns")
    now32, margin32, coef = _scalars(now, margin, coef)
    result = _outputs(m, None, ())
    with kernel_launch(m):
        _sweep_rows(rows, *inputs, now32, margin32, coef, *result)  # type: ignore[arg-type,call-arg]
    return result


def _scalars(now: float, margin: float, coef: object) -> tuple[np.float32, np.float32, npt.NDArray[np.uint64]]:
    now_value = check_scalar("now", now, positive=False)
    margin_value = check_scalar("margin", margin, positive=False)
    if margin_value < 0:
        raise ValueError(f"margin must be >= 0, not {margin_value}")
    if not isinstance(coef, np.ndarray) or coef.dtype != np.uint64 or coef.ndim != 2 or coef.shape[1] != _N_WORDS:
        raise ValueError("coef must be the table sweep_coefficients(params, cost_budget_bytes) returns")
    return np.float32(now_value), np.float32(margin_value), np.ascontiguousarray(coef)


# -- the caches the sweep reads, derived when their inputs change -------------------------------------------------

_DERIVE_SIGNATURE = types.void(
    _ro(types.float32),  # successes
    _ro(types.float32),  # failures
    _ro(types.uint32),  # access_count
    _ro(types.uint8),  # importance
    _ro(types.uint32),  # content_bytes
    _ro(types.float32),  # uniqueness
    _rw(types.float32),  # feedback out
    _rw(types.float32),  # log_count out
    _rw(types.float32),  # utility out
)
_INV_LOG1P_PROXY = 1.0 / math.log1p(LENGTH_PROXY_BYTES)


@numba.njit([_DERIVE_SIGNATURE], nogil=True, cache=True)
def _derive(
    successes: F32,
    failures: F32,
    access_count: npt.NDArray[np.uint32],
    importance: U8,
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: F32,
    feedback: F32,
    log_count: F32,
    utility: F32,
) -> None:
    # Float64 and libm on purpose: this runs when a memory changes, not per sweep, so it buys accuracy.
    for i in range(successes.shape[0]):
        s = np.float64(successes[i])
        f = np.float64(failures[i])
        x = (s if s == s else 0.0) - (f if f == f else 0.0)
        x = x if x == x else 0.0
        feedback[i] = 1.0 / (1.0 + math.exp(-x)) if x > -700.0 else 0.0
        log_count[i] = math.log1p(np.float64(access_count[i]))
        imp = importance[i]
        if imp >= 1 and imp <= 10:
            density = imp / 10.0
        else:
            density = min(1.0, math.log1p(np.float64(content_bytes[i])) * _INV_LOG1P_PROXY)
        u = float(uniqueness[i])
        u = min(max(u, 0.0), 1.0) if u == u else UNMEASURED_UNIQUENESS
        utility[i] = density * u


class Derived(NamedTuple):
    """The float32 caches of the sweep: sigmoid of feedback, log1p of the access count, utility."""

    feedback: F32
    log_count: F32
    utility: F32


def derive(
    successes: F32,
    failures: F32,
    access_count: npt.NDArray[np.uint32],
    importance: U8,
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: F32,
) -> Derived:
    """The sweep's caches from the raw columns (same rules as compute_scores), computed in float64.

    Columns as in ``compute_scores``. Single-threaded: called for the rows a
    write changes and once per column rebuild. Raises ValueError like the
    other wrappers.
    """
    n = check_column("successes", successes, np.float32, None)
    check_column("failures", failures, np.float32, n)
    check_column("access_count", access_count, np.uint32, n)
    check_column("importance", importance, np.uint8, n)
    check_column("content_bytes", content_bytes, np.uint32, n)
    check_column("uniqueness", uniqueness, np.float32, n)
    out = Derived(*(np.empty(n, dtype=np.float32) for _ in Derived._fields))
    _derive(successes, failures, access_count, importance, content_bytes, uniqueness, *out)
    return out


def derive_one(
    successes: float, failures: float, access_count: int, importance: int, content_bytes: int, uniqueness: float
) -> tuple[float, float, float]:
    """``derive`` of one memory in plain Python (the write path updates one row; no kernel launch for it).

    Returns (feedback, log_count, utility) as floats; equal to ``derive`` (tested).
    """
    x = (successes if successes == successes else 0.0) - (failures if failures == failures else 0.0)
    x = x if x == x else 0.0
    feedback = 1.0 / (1.0 + math.exp(-x)) if x > -700.0 else 0.0
    log_count = math.log1p(access_count)
    proxy = min(1.0, math.log1p(content_bytes) * _INV_LOG1P_PROXY)
    density = importance / 10.0 if 1 <= importance <= 10 else proxy
    u = min(max(uniqueness, 0.0), 1.0) if uniqueness == uniqueness else UNMEASURED_UNIQUENESS
    return feedback, log_count, density * u
