"""The value of every memory: V = alpha*accuracy + beta*relevance + gamma*utility - delta*cost (DESIGN §4).

``compute_scores`` takes the hot columns (one entry per slot) and returns the
four terms and the value, all float32. Per item, with the policy row of its
kind (a kind code with no row uses row 0):

- dt = now - last_access, or now - created when last_access is not finite
  (never accessed). A reference time that is not finite, or in the future,
  gives dt = 0: no decay rather than a NaN.
- confidence_eff = floor + (c - floor) * 2**(-dt / confidence_decay_half_life)
  when c > floor, else c (decay only lowers confidence). c is the confidence
  clipped to [0, 1]; NaN counts as 0 (nothing is known).
- accuracy = clip(w_c*confidence_eff + w_f*sigmoid(successes - failures)
  - w_i*inconsistency, 0, 1). NaN successes, failures or difference (inf - inf)
  count as 0, i.e. sigmoid = 0.5; inconsistency is clipped to [0, 1], NaN = 0.
- relevance = 2**(-dt / half_life) + eta*log1p(access_count). Not clipped: a
  much-used memory can exceed 1.
- utility = density * uniqueness. density = importance/10 for importance
  1..10, otherwise (0 = not given, or out of range) the length proxy
  min(1, log1p(content_bytes) / log1p(LENGTH_PROXY_BYTES)). uniqueness is
  clipped to [0, 1]; NaN (not measured yet) counts as UNMEASURED_UNIQUENESS.
- cost = stored_bytes / cost_budget_bytes.

With a valid policy every output is finite. Times are in the clock's unit
(seconds or turns), the same unit as the policy's half-lives. Time
differences are taken in float64, the rest in float32 with vectorised
exp2/log approximations (relative error < 3e-7, see _simd.py): results
match a float64 NumPy evaluation within 1e-5.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt
from numba import prange, types

from memevo.kernels._simd import exp2f, high_f32, logf, low_f32, pack_f32_pairs
from memevo.kernels._wrappers import (
    check_column,
    check_output,
    check_params,
    check_scalar,
    kernel_launch,
    renamed,
)
from memevo.kernels.params import (
    ACCESS_WEIGHT,
    ALPHA,
    BETA,
    CHUNK,
    CONFIDENCE_DECAY_HALF_LIFE,
    CONFIDENCE_FLOOR,
    DELTA,
    FASTMATH,
    GAMMA,
    HALF_LIFE,
    HOLD_GIL_ROWS,
    LENGTH_PROXY_BYTES,
    UNMEASURED_UNIQUENESS,
    W_CONFIDENCE,
    W_FEEDBACK,
    W_INCONSISTENCY,
)

F32 = npt.NDArray[np.float32]


class Scores(NamedTuple):
    """The terms of the value and the value itself, one float32 per slot."""

    accuracy: F32
    relevance: F32
    utility: F32
    cost: F32
    value: F32


# The per-kind coefficient table the kernel reads: uint64 words, each two float32 coefficients (see
# _simd.pack_f32_pairs), built from params once per call. Word w holds (low, high):
_W_DECAY = 0
"""1 / half_life and 1 / confidence_decay_half_life: dt * rate is the number of half-lives elapsed."""
_W_CONFIDENCE = 1
"""confidence_floor, w_confidence."""
_W_ACCURACY = 2
"""w_feedback, w_inconsistency."""
_W_ETA_ALPHA = 3
"""access_weight (eta), alpha."""
_W_BETA_GAMMA = 4
"""beta, gamma."""
_W_DELTA = 5
"""delta, unused."""
_N_WORDS = 6
_MAX_RATE = 1e30

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_TENTH = np.float32(0.1)
_LOG2E = np.float32(1.4426950408889634)
_INV_LOG1P_PROXY = np.float32(1.0 / math.log1p(LENGTH_PROXY_BYTES))
_UNMEASURED_UNIQUENESS = np.float32(UNMEASURED_UNIQUENESS)


def _ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    # Read-only variants accept both writable and read-only arrays (e.g. np.frombuffer over a snapshot).
    return types.Array(dtype, ndim, "C", readonly=True)


def _rw(dtype: types.Type) -> types.Array:
    return types.Array(dtype, 1, "C")


_SCORES_SIGNATURE = types.void(
    _ro(types.float32),  # confidence
    _ro(types.float32),  # successes
    _ro(types.float32),  # failures
    _ro(types.float32),  # inconsistency
    _ro(types.float64),  # last_access
    _ro(types.float64),  # created
    _ro(types.uint32),  # access_count
    _ro(types.uint8),  # importance
    _ro(types.uint32),  # content_bytes
    _ro(types.float32),  # uniqueness
    _ro(types.uint32),  # stored_bytes
    _ro(types.uint8),  # kind
    types.float64,  # now
    types.float64,  # 1 / cost_budget_bytes
    _ro(types.uint64, 2),  # packed coefficient table
    _rw(types.float32),  # accuracy out
    _rw(types.float32),  # relevance out
    _rw(types.float32),  # utility out
    _rw(types.float32),  # cost out
    _rw(types.float32),  # value out
)


@numba.njit([_SCORES_SIGNATURE], nogil=True, parallel=True, cache=True, fastmath=set(FASTMATH))
def _compute_scores(
    confidence: F32,
    successes: F32,
    failures: F32,
    inconsistency: F32,
    last_access: npt.NDArray[np.float64],
    created: npt.NDArray[np.float64],
    access_count: npt.NDArray[np.uint32],
    importance: npt.NDArray[np.uint8],
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: F32,
    stored_bytes: npt.NDArray[np.uint32],
    kind: npt.NDArray[np.uint8],
    now: float,
    inv_budget: float,
    coef: npt.NDArray[np.uint64],
    accuracy: F32,
    relevance: F32,
    utility: F32,
    cost: F32,
    value: F32,
) -> None:
    n = confidence.shape[0]
    n_kinds = coef.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    for chunk in prange(n_chunks):
        # Unsigned bounds: numba then drops negative-index wraparound, which would otherwise turn
        # every load into a gather and every store into a scatter (10x slower).
        start = np.uint64(chunk * CHUNK)
        stop = np.uint64(min(chunk * CHUNK + CHUNK, n))
        # Branch-free on purpose (every load unconditional, selects not ifs) so that LLVM vectorises the loop.
        for i in range(start, stop):
            k = np.intp(kind[i])
            k = np.intp(k if k < n_kinds else 0)
            t_access = last_access[i]
            t_created = created[i]
            c = confidence[i]
            s = successes[i]
            f = failures[i]
            inc = inconsistency[i]
            count = access_count[i]
            imp = importance[i]
            length = content_bytes[i]
            u = uniqueness[i]
            stored = stored_bytes[i]

            rate = low_f32(coef[k, _W_DECAY])
            confidence_rate = high_f32(coef[k, _W_DECAY])
            floor = low_f32(coef[k, _W_CONFIDENCE])
            w_confidence = high_f32(coef[k, _W_CONFIDENCE])
            w_feedback = low_f32(coef[k, _W_ACCURACY])
            w_inconsistency = high_f32(coef[k, _W_ACCURACY])
            eta = low_f32(coef[k, _W_ETA_ALPHA])
            alpha = high_f32(coef[k, _W_ETA_ALPHA])
            beta = low_f32(coef[k, _W_BETA_GAMMA])
            gamma = high_f32(coef[k, _W_BETA_GAMMA])
            delta = low_f32(coef[k, _W_DELTA])

            t = t_access if math.isfinite(t_access) else t_created
            dt = now - t
            # NaN or infinite reference time, or one in the future: no decay.
            dt = dt if (dt > 0.0) & math.isfinite(t) else 0.0
            decay = exp2f(-np.float32(dt * np.float64(rate)))
            confidence_decay = exp2f(-np.float32(dt * np.float64(confidence_rate)))

            c = min(max(c, _ZERO), _ONE) if c == c else _ZERO
            c = floor + (c - floor) * confidence_decay if c > floor else c
            feedback = (s if s == s else _ZERO) - (f if f == f else _ZERO)
            feedback = feedback if feedback == feedback else _ZERO
            sigmoid = _ONE / (_ONE + exp2f(-feedback * _LOG2E))
            inc = min(max(inc, _ZERO), _ONE) if inc == inc else _ZERO
            acc = w_confidence * c + w_feedback * sigmoid - w_inconsistency * inc
            acc = min(max(acc, _ZERO), _ONE)

            rel = decay + eta * logf(_ONE + np.float32(count))

            proxy = min(_ONE, logf(_ONE + np.float32(length)) * _INV_LOG1P_PROXY)
            density = np.float32(imp) * _TENTH if (imp >= 1) & (imp <= 10) else proxy
            u = min(max(u, _ZERO), _ONE) if u == u else _UNMEASURED_UNIQUENESS
            util = density * u

            cst = np.float32(stored * inv_budget)

            accuracy[i] = acc
            relevance[i] = rel
            utility[i] = util
            cost[i] = cst
            value[i] = alpha * acc + beta * rel + gamma * util - delta * cst


_compute_scores_serial = numba.njit([_SCORES_SIGNATURE], nogil=True, cache=True, fastmath=set(FASTMATH))(
    renamed(_compute_scores.py_func, "_compute_scores_serial")
)
"""The same loop compiled without ``parallel``, for calls of at most one chunk.

Such a call runs on one thread anyway; this skips numba's parallel launch (switching the thread
count, entering the thread pool), which cost more than the work itself for the few rows a write
or a recall scores (measured: a one-row ``compute_scores`` took 23 us of CPU, 10 us now). Not being
a parallel launch, it needs no launch lock either, whatever numba's threading layer.
"""

_compute_scores_held = numba.njit([_SCORES_SIGNATURE], cache=True, fastmath=set(FASTMATH))(
    renamed(_compute_scores.py_func, "_compute_scores_held")
)
"""The serial loop keeping the interpreter lock, for at most ``HOLD_GIL_ROWS`` rows (a recall's pool)."""


def _compute_coefficients(params: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    coef = np.empty((params.shape[0], _N_WORDS), dtype=np.uint64)
    # Capped so that dt * rate is never inf * 0 = NaN; a half-life under 1e-30 clock units decays at once anyway.
    rates = np.minimum(1.0 / params[:, [HALF_LIFE, CONFIDENCE_DECAY_HALF_LIFE]], _MAX_RATE)
    coef[:, _W_DECAY] = pack_f32_pairs(rates[:, 0], rates[:, 1])
    coef[:, _W_CONFIDENCE] = pack_f32_pairs(params[:, CONFIDENCE_FLOOR], params[:, W_CONFIDENCE])
    coef[:, _W_ACCURACY] = pack_f32_pairs(params[:, W_FEEDBACK], params[:, W_INCONSISTENCY])
    coef[:, _W_ETA_ALPHA] = pack_f32_pairs(params[:, ACCESS_WEIGHT], params[:, ALPHA])
    coef[:, _W_BETA_GAMMA] = pack_f32_pairs(params[:, BETA], params[:, GAMMA])
    coef[:, _W_DELTA] = pack_f32_pairs(params[:, DELTA], np.zeros(params.shape[0]))
    return coef


def _coefficients(params: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """The packed coefficients of ``params``, cached by content (a few policies serve every read)."""
    key = params.tobytes()
    coef = _COEFFICIENTS.get(key)
    if coef is None or coef.shape[0] != params.shape[0]:
        coef = _compute_coefficients(params)
        coef.flags.writeable = False
        if len(_COEFFICIENTS) >= 64:
            _COEFFICIENTS.clear()
        _COEFFICIENTS[key] = coef
    return coef


_COEFFICIENTS: dict[bytes, npt.NDArray[np.uint64]] = {}


def compute_scores(
    confidence: F32,
    successes: F32,
    failures: F32,
    inconsistency: F32,
    last_access: npt.NDArray[np.float64],
    created: npt.NDArray[np.float64],
    access_count: npt.NDArray[np.uint32],
    importance: npt.NDArray[np.uint8],
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: F32,
    stored_bytes: npt.NDArray[np.uint32],
    kind: npt.NDArray[np.uint8],
    now: float,
    cost_budget_bytes: float,
    params: npt.NDArray[np.float64],
    *,
    out: Scores | None = None,
) -> Scores:
    """Accuracy, relevance, utility, cost and value of every slot (see the module docstring for the formulas).

    Columns are 1-D C-contiguous arrays of one length with the dtypes in the
    signature (float32, float64 for times, uint32 counts and bytes, uint8
    importance and kind). ``now`` is in the clock's unit and must be finite;
    ``cost_budget_bytes`` must be finite and > 0; ``params`` must pass
    ``validate_params``. ``out``, if given, receives the results (five
    float32 arrays of the same length), which saves allocating them on every
    sweep. Raises ValueError, saying what to pass instead, for anything else.
    Releases the GIL while it runs, except for at most ``HOLD_GIL_ROWS`` rows (params.py says why).
    """
    n = check_column("confidence", confidence, np.float32, None)
    check_column("successes", successes, np.float32, n)
    check_column("failures", failures, np.float32, n)
    check_column("inconsistency", inconsistency, np.float32, n)
    check_column("last_access", last_access, np.float64, n)
    check_column("created", created, np.float64, n)
    check_column("access_count", access_count, np.uint32, n)
    check_column("importance", importance, np.uint8, n)
    check_column("content_bytes", content_bytes, np.uint32, n)
    check_column("uniqueness", uniqueness, np.float32, n)
    check_column("stored_bytes", stored_bytes, np.uint32, n)
    check_column("kind", kind, np.uint8, n)
    now = check_scalar("now", now, positive=False)
    budget = check_scalar("cost_budget_bytes", cost_budget_bytes, positive=True)
    check_params(params)
    if out is None:
        out = Scores(*(np.empty(n, dtype=np.float32) for _ in Scores._fields))
    else:
        if not isinstance(out, Scores):
            raise ValueError(f"out must be a Scores of five float32 arrays, not {type(out).__name__}")
        for position, (name, array) in enumerate(zip(Scores._fields, out, strict=True)):
            check_output(f"out.{name}", array, np.float32, n)
            others = (confidence, successes, failures, inconsistency, uniqueness, *out[:position])
            if any(np.may_share_memory(array, other) for other in others):
                raise ValueError(f"out.{name} overlaps an input column or another output: pass separate arrays")
    coef = _coefficients(params)
    # One chunk has no parallel work: its serial build skips numba's parallel launch and the launch queue.
    serial = n <= CHUNK
    kernel = _compute_scores_held if n <= HOLD_GIL_ROWS else _compute_scores_serial if serial else _compute_scores
    with contextlib.nullcontext() if serial else kernel_launch(n):
        kernel(
            confidence,
            successes,
            failures,
            inconsistency,
            last_access,
            created,
            access_count,
            importance,
            content_bytes,
            uniqueness,
            stored_bytes,
            kind,
            now,
            1.0 / budget,
            coef,
            *out,
        )
    return out
