"""The obvious NumPy version of every kernel in memevo.kernels, for the tests and benchmarks to compare against.

Written for clarity, in float64, one whole-array expression per step: no
chunks, no float32 tricks, no polynomial approximations. The rules (NaN
handling, clipping, fallbacks) are the kernels' documented ones.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from memevo.kernels import params as kp
from memevo.kernels.lifecycle import N_STATES, STATE_ACTIVE, STATE_ARCHIVED, STATE_EVICTED

F64 = npt.NDArray[np.float64]


class NaiveScores(NamedTuple):
    """Float64 twin of memevo.kernels.value.Scores."""

    accuracy: F64
    relevance: F64
    utility: F64
    cost: F64
    value: F64


def _row_of(kind: npt.NDArray[np.uint8], params: F64) -> npt.NDArray[np.intp]:
    k = kind.astype(np.intp)
    return np.where(k < params.shape[0], k, 0)


def compute_scores(
    confidence: npt.NDArray[np.float32],
    successes: npt.NDArray[np.float32],
    failures: npt.NDArray[np.float32],
    inconsistency: npt.NDArray[np.float32],
    last_access: F64,
    created: F64,
    access_count: npt.NDArray[np.uint32],
    importance: npt.NDArray[np.uint8],
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: npt.NDArray[np.float32],
    stored_bytes: npt.NDArray[np.uint32],
    kind: npt.NDArray[np.uint8],
    now: float,
    cost_budget_bytes: float,
    params: F64,
) -> NaiveScores:
    """Reference for memevo.kernels.value.compute_scores."""
    row = params[_row_of(kind, params)]
    with np.errstate(invalid="ignore", over="ignore"):
        reference = np.where(np.isfinite(last_access), last_access, created)
        dt = now - reference
        dt = np.where(np.isfinite(reference) & (dt > 0), dt, 0.0)

        c = np.clip(np.nan_to_num(confidence.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
        floor = row[:, kp.CONFIDENCE_FLOOR]
        decayed = floor + (c - floor) * np.exp2(-dt / row[:, kp.CONFIDENCE_DECAY_HALF_LIFE])
        c_eff = np.where(c > floor, decayed, c)
        s = np.where(np.isnan(successes), 0.0, successes.astype(np.float64))
        f = np.where(np.isnan(failures), 0.0, failures.astype(np.float64))
        feedback = s - f
        feedback = np.where(np.isnan(feedback), 0.0, feedback)
        sigmoid = 1.0 / (1.0 + np.exp(-feedback))
        inc = np.clip(np.nan_to_num(inconsistency.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
        accuracy = np.clip(
            row[:, kp.W_CONFIDENCE] * c_eff + row[:, kp.W_FEEDBACK] * sigmoid - row[:, kp.W_INCONSISTENCY] * inc,
            0.0,
            1.0,
        )

    relevance = np.exp(-np.log(2.0) * dt / row[:, kp.HALF_LIFE]) + row[:, kp.ACCESS_WEIGHT] * np.log1p(
        access_count.astype(np.float64)
    )

    given = (importance >= 1) & (importance <= 10)
    proxy = np.minimum(1.0, np.log1p(content_bytes.astype(np.float64)) / np.log1p(kp.LENGTH_PROXY_BYTES))
    density = np.where(given, importance / 10.0, proxy)
    u = uniqueness.astype(np.float64)
    u = np.where(np.isnan(u), kp.UNMEASURED_UNIQUENESS, np.clip(u, 0.0, 1.0))
    utility = density * u

    cost = stored_bytes.astype(np.float64) / cost_budget_bytes
    value = (
        row[:, kp.ALPHA] * accuracy + row[:, kp.BETA] * relevance + row[:, kp.GAMMA] * utility - row[:, kp.DELTA] * cost
    )
    return NaiveScores(accuracy, relevance, utility, cost, value)


def propose_transitions(
    value: npt.NDArray[np.float32],
    state: npt.NDArray[np.uint8],
    kind: npt.NDArray[np.uint8],
    state_since: F64,
    below_since: F64,
    now: float,
    params: F64,
) -> tuple[npt.NDArray[np.uint8], F64]:
    """Reference for memevo.kernels.lifecycle.propose_transitions."""
    row = params[_row_of(kind, params)]
    v = value
    governed = ((state == STATE_ACTIVE) | (state == STATE_ARCHIVED)) & ~np.isnan(v)
    # Thresholds are compared at the value's precision (float32).
    thresholds = row.astype(np.float32)

    is_below = v < thresholds[:, kp.EVICT_BELOW]
    started = np.where(np.isfinite(below_since), below_since, now)
    next_below = np.where(governed, np.where(is_below, started, np.nan), below_since)

    with np.errstate(invalid="ignore"):
        may_move = governed & ~(now - state_since < row[:, kp.MIN_TIME_IN_STATE])
        evict = governed & np.isfinite(next_below) & (now - next_below >= row[:, kp.EVICT_GRACE])
    archive = may_move & (state == STATE_ACTIVE) & (v < thresholds[:, kp.ARCHIVE_BELOW])
    reactivate = may_move & (state == STATE_ARCHIVED) & (v > thresholds[:, kp.REACTIVATE_ABOVE])

    next_state = state.copy()
    next_state[reactivate] = STATE_ACTIVE
    next_state[archive] = STATE_ARCHIVED
    next_state[evict] = STATE_EVICTED
    return next_state, next_below


def count_transitions(old_state: npt.NDArray[np.uint8], new_state: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """Reference for memevo.kernels.lifecycle.count_transitions."""
    keep = (old_state < N_STATES) & (new_state < N_STATES)
    cells = old_state[keep].astype(np.int64) * N_STATES + new_state[keep]
    return np.bincount(cells, minlength=N_STATES * N_STATES).reshape(N_STATES, N_STATES).astype(np.int64)


def link_neighbours(
    seeds: npt.NDArray[np.int64],
    neighbours: npt.NDArray[np.int64],
    similarities: npt.NDArray[np.float32],
    groups: npt.NDArray[np.int64],
    threshold: float,
) -> npt.NDArray[np.int64]:
    """Twin of memevo.kernels.clusters.link_neighbours: min-label propagation over the qualifying edges."""
    n_nodes = groups.shape[0]
    labels = np.arange(n_nodes, dtype=np.int64)
    if seeds.size == 0 or neighbours.shape[1] == 0:
        return labels
    a = np.repeat(seeds, neighbours.shape[1])
    b = neighbours.reshape(-1)
    s = similarities.reshape(-1).astype(np.float64)
    valid = (a >= 0) & (a < n_nodes) & (b >= 0) & (b < n_nodes) & (a != b)
    a, b, s = a[valid], b[valid], s[valid]
    keep = (groups[a] >= 0) & (groups[a] == groups[b]) & (s >= threshold)
    a, b = a[keep], b[keep]
    while True:
        low = np.minimum(labels[a], labels[b])
        before = labels.copy()
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        labels = labels[labels]  # jump to the label's label until stable
        if np.array_equal(labels, before):
            return labels


def derive_terms(
    kind: npt.NDArray[np.uint8],
    confidence: npt.NDArray[np.float32],
    inconsistency: npt.NDArray[np.float32],
    successes: npt.NDArray[np.float32],
    failures: npt.NDArray[np.float32],
    access_count: npt.NDArray[np.uint32],
    importance: npt.NDArray[np.uint8],
    content_bytes: npt.NDArray[np.uint32],
    uniqueness: npt.NDArray[np.float32],
    stored_bytes: npt.NDArray[np.uint32],
    touched: F64,
    anchor: float,
    params: F64,
    cost_budget_bytes: float,
    latest: float = np.inf,
) -> tuple[F64, F64, F64, F64]:
    """Reference for memevo.kernels.sweep.derive_terms: (acc_base, conf_term, rel_term, static) in float64."""
    row = params[_row_of(kind, params)]
    s = np.where(np.isnan(successes), 0.0, successes.astype(np.float64))
    f = np.where(np.isnan(failures), 0.0, failures.astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        x = s - f
        x = np.where(np.isnan(x), 0.0, x)
        feedback = 1.0 / (1.0 + np.exp(-x))
    c = np.clip(np.nan_to_num(confidence.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    inc = np.clip(np.nan_to_num(inconsistency.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    given = (importance >= 1) & (importance <= 10)
    proxy = np.minimum(1.0, np.log1p(content_bytes.astype(np.float64)) / np.log1p(kp.LENGTH_PROXY_BYTES))
    u = uniqueness.astype(np.float64)
    u = np.where(np.isnan(u), kp.UNMEASURED_UNIQUENESS, np.clip(u, 0.0, 1.0))
    utility = np.where(given, importance / 10.0, proxy) * u

    floor = row[:, kp.CONFIDENCE_FLOOR]
    w_c = row[:, kp.W_CONFIDENCE]
    excess = w_c * np.maximum(c - floor, 0.0)
    acc_base = w_c * np.minimum(c, floor) + row[:, kp.W_FEEDBACK] * feedback - row[:, kp.W_INCONSISTENCY] * inc
    static = (
        row[:, kp.BETA] * row[:, kp.ACCESS_WEIGHT] * np.log1p(access_count.astype(np.float64))
        + row[:, kp.GAMMA] * utility
        - row[:, kp.DELTA] * stored_bytes.astype(np.float64) / cost_budget_bytes
    )
    timed = np.isfinite(touched)
    t = np.minimum(np.where(timed, touched, anchor), latest)
    cap = kp.DECAY_EXPONENT_MAX
    rel_term = np.where(timed, np.exp2(np.minimum((t - anchor) / row[:, kp.HALF_LIFE], cap)), 0.0)
    conf_decay = np.exp2(np.minimum((t - anchor) / row[:, kp.CONFIDENCE_DECAY_HALF_LIFE], cap))
    conf_term = np.where(timed, excess * conf_decay, 0.0)
    acc_base = np.where(timed, acc_base, acc_base + excess)
    static = np.where(timed, static, static + row[:, kp.BETA])
    return acc_base, conf_term, rel_term, static


def sweep(
    state: npt.NDArray[np.uint8],
    kind: npt.NDArray[np.uint8],
    acc_base: npt.NDArray[np.float32],
    conf_term: npt.NDArray[np.float32],
    rel_term: npt.NDArray[np.float32],
    static: npt.NDArray[np.float32],
    since: npt.NDArray[np.float32],
    below: npt.NDArray[np.float32],
    now: float,
    params: F64,
    margin: float = 0.0,
) -> tuple[F64, npt.NDArray[np.uint8], F64, npt.NDArray[np.uint8]]:
    """Reference for memevo.kernels.sweep.sweep: (value, next_state, next_below, near), float64 arithmetic.

    ``now`` is the offset from the terms' anchor; the per-kind decay factors are exp2 of it, per item.
    """
    row = params[_row_of(kind, params)]
    decay = np.minimum(rel_term * np.exp2(-now / row[:, kp.HALF_LIFE]), 1.0)
    confidence_part = conf_term * np.exp2(-now / row[:, kp.CONFIDENCE_DECAY_HALF_LIFE])
    accuracy = np.clip(acc_base.astype(np.float64) + confidence_part, 0.0, 1.0)
    value = row[:, kp.ALPHA] * accuracy + row[:, kp.BETA] * decay + static
    # The lifecycle step on the float32 value, with times as given (float32 offsets).
    v32 = value.astype(np.float32)
    next_state, next_below = propose_transitions(
        v32, state, kind, since.astype(np.float64), below.astype(np.float64), now, params
    )
    thresholds = row.astype(np.float32)
    active = state == STATE_ACTIVE
    archived = state == STATE_ARCHIVED
    near = (
        (active & (v32 < thresholds[:, kp.ARCHIVE_BELOW] + np.float32(margin)))
        | (archived & (v32 > thresholds[:, kp.REACTIVATE_ABOVE] - np.float32(margin)))
        | (archived & (v32 < thresholds[:, kp.EVICT_BELOW] + np.float32(margin)))
        | ((active | archived) & np.isfinite(next_below))
    ) & (next_state != STATE_EVICTED)
    return value, next_state, next_below, near.astype(np.uint8)


_FIRST_LENGTHS = list(range(64)) + [(16 + m) << (e - 4) for e in range(6, 18) for m in range(16)]
"""The first (smallest) length of each one-byte length code: every length below 64, then 16 steps per doubling."""


def length_code(length: int) -> int:
    """Twin of memevo.kernels.lexical.length_code: the last code whose first length is not above ``length``."""
    return max(code for code, first in enumerate(_FIRST_LENGTHS) if first <= max(length, 0))


def decoded_length(code: int) -> float:
    """Twin of memevo.kernels.lexical.DECODED_LENGTHS: the middle of the lengths a code stands for."""
    last = _FIRST_LENGTHS[code + 1] - 1 if code + 1 < len(_FIRST_LENGTHS) else 2 * _FIRST_LENGTHS[-16] - 1
    return (_FIRST_LENGTHS[code] + last) / 2.0


def bm25(
    postings: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16], float]],
    lengths: npt.NDArray[np.float64],
    average: float,
    k1: float,
    b: float,
    common: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16], float]] | None = None,
    *,
    count_unit: float = 1.0,
) -> tuple[npt.NDArray[np.int64], F64]:
    """Twin of memevo.kernels.lexical.bm25 given the lengths its codes stand for: documents in order of first
    appearance, scores summed per document; ``common`` words score only the documents ``postings`` met; a count is
    ``count_unit`` occurrences."""
    order: dict[int, float] = {}
    for position, (ids, counts, idf) in enumerate([*postings, *(common or [])]):
        tf = counts.astype(np.float64) * count_unit
        norm = k1 * (1.0 - b + b * lengths[ids.astype(np.int64)].astype(np.float64) / average)
        for doc, score in zip(ids.tolist(), (idf * tf * (k1 + 1.0) / (tf + norm)).tolist(), strict=True):
            if position < len(postings) or doc in order:
                order[doc] = order.get(doc, 0.0) + score
    return np.asarray(list(order), dtype=np.int64), np.asarray(list(order.values()), dtype=np.float64)


def top_indices(scores: npt.NDArray[np.float32], m: int) -> npt.NDArray[np.int64]:
    """Twin of memevo.kernels.lexical.top_indices: the m largest non-NaN scores, ties to the earlier position."""
    valid = np.flatnonzero(~np.isnan(scores))
    order = valid[np.argsort(-scores[valid].astype(np.float64), kind="stable")]
    return order[: max(m, 0)]


def row_checksums(words: npt.NDArray[np.uint64], seed: int, columns: int | None = None) -> npt.NDArray[np.uint64]:
    """Twin of memevo.kernels.checksum.row_checksums: every row's first ``columns`` words hashed one by one, all rows
    at once."""
    from memevo.kernels.checksum import FINAL_SHIFT, LENGTH_MULTIPLIER, MULTIPLIER, SHIFT

    width = words.shape[1] if columns is None else columns
    with np.errstate(over="ignore"):  # the arithmetic is modulo 2**64 on purpose
        start = np.uint64(seed) ^ (np.uint64(width) * LENGTH_MULTIPLIER)
    h = np.full(words.shape[0], start, dtype=np.uint64)
    for col in range(width):
        h = (h ^ words[:, col]) * MULTIPLIER
        h ^= h >> SHIFT
    return h ^ (h >> FINAL_SHIFT)


def rows_dot(block: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], query: npt.NDArray[np.float32]) -> F64:
    """Twin of memevo.kernels.cosine.rows_dot: the chosen rows' dot products with the query, in float64."""
    return np.asarray(block[rows].astype(np.float64) @ query.astype(np.float64), dtype=np.float64)
