"""BM25 scoring of posting lists, summed per document without sorting.

A query's words each have a posting list (document ids and term counts);
a document's score is the sum over the words it contains of
``idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · length / average))``.
Summing per document is where NumPy is slow: a common word (a speaker's
name in a conversation) has tens of thousands of postings, and grouping
them needs a sort. Here each posting adds into a dense scratch array
indexed by document id, and the ids touched are listed the first time
they are met, so the work is linear in the postings read and nothing the
size of the store is allocated or cleared per query.

The scratch array belongs to the caller, who must not share it between
concurrent calls; it is left zeroed on return.

Document lengths are read as one-byte codes (:func:`length_code`), as
Lucene stores its norms: exact below ``EXACT_LENGTHS``, within 1/32 above.
A posting's length read is as scattered as its sum's, and a million
lengths in one byte each stay in a core's L2 cache where four bytes each
do not: over a million chat turns the rarer words' pass took 0.32 -> 0.25 ms
and the whole word search 0.96 -> 0.89 ms (medians of 900 LoCoMo questions,
three runs each, alternated; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba import types

from memevo.kernels._simd import prefetch

U64 = npt.NDArray[np.uint64]
U16 = npt.NDArray[np.uint16]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

EXACT_LENGTHS = 64
"""Lengths below this have a code of their own; above, a code keeps the 4 bits after the leading one."""
_MANTISSA_BITS = 4
_FIRST_EXPONENT = EXACT_LENGTHS.bit_length() - 1


def length_code(length: int) -> int:
    """The one-byte code of a document length (any unit; negative counts as 0, beyond ~2.6e5 as the last code)."""
    if length < EXACT_LENGTHS:
        return max(length, 0)
    exponent = length.bit_length() - 1
    mantissa = (length >> (exponent - _MANTISSA_BITS)) & ((1 << _MANTISSA_BITS) - 1)
    return min(EXACT_LENGTHS + ((exponent - _FIRST_EXPONENT) << _MANTISSA_BITS) + mantissa, 255)


def _decoded_lengths() -> F64:
    out = np.arange(256, dtype=np.float64)
    for code in range(EXACT_LENGTHS, 256):
        exponent = _FIRST_EXPONENT + ((code - EXACT_LENGTHS) >> _MANTISSA_BITS)
        mantissa = (code - EXACT_LENGTHS) & ((1 << _MANTISSA_BITS) - 1)
        step = 1 << (exponent - _MANTISSA_BITS)
        # The middle of the lengths the code stands for: half the error of its lowest.
        out[code] = ((1 << _MANTISSA_BITS) + mantissa) * step + (step - 1) / 2.0
    return out


DECODED_LENGTHS = _decoded_lengths()
"""The length each code stands for (read-only)."""
DECODED_LENGTHS.flags.writeable = False


PREFETCH_AHEAD = 24
"""The rarer words' pass and the collection ask for the sums and lengths of the document this many postings ahead.

Their reads are scattered over the whole id range, and inside a recall (after the vector search and the other
requests' work) they mostly come from memory, not cache: over a million chat turns the word search took 0.84-0.98
ms of CPU there against 0.43 ms in a loop of word searches alone. Asked for ahead, two dozen of them are on their
way at once: with the caches flushed between questions the rarer words' pass took 0.26 -> 0.17 ms and the
collection 0.15 -> 0.13 ms; the common words' pass gained nothing and is left as it was (RESULTS.md).
"""


def _ro(dtype: types.Type) -> types.Array:
    return types.Array(dtype, 1, "C", readonly=True)


@numba.njit(
    [
        types.int64(
            _ro(types.uint64),
            _ro(types.uint16),
            _ro(types.uint8),
            _ro(types.float32),
            types.float64,
            types.float64,
            types.float32[:],
            types.int64[:],
            types.int64,
            types.boolean,
        ),
    ],
    nogil=True,
    cache=True,
)
def _accumulate(
    ids: U64,
    counts: U16,
    length_codes: U8,
    norms: F32,
    gain: float,
    unit: float,
    scratch: F32,
    touched: I64,
    n_touched: int,
    only_met: bool,
) -> int:  # pragma: no cover - compiled; tested against tests/naive.py
    # Single precision halves the accumulators' cache footprint (the reads are scattered over the
    # store's ids), and a sum still at zero marks a document not met yet: every contribution is
    # positive (idf > 0, tf >= 1), so no separate "seen" array is read and written per posting.
    # ``only_met`` (a common word): add only to documents already met, which costs one read per posting
    # and a write for the few met, instead of a read-modify-write and a list append each.
    # ``norms`` holds k1 · (1 − b + b · length / average) per length code: 1 kB, always in L1.
    gain32 = np.float32(gain)
    per_count = np.float32(unit)
    limit = min(length_codes.shape[0], scratch.shape[0])
    if only_met:
        for j in range(ids.shape[0]):
            doc = np.int64(ids[j])
            if doc < 0 or doc >= limit:
                return -1
            before = scratch[doc]
            if before == 0.0:
                continue
            tf = np.float32(counts[j]) * per_count
            scratch[doc] = before + gain32 * tf / (tf + norms[length_codes[doc]])
        return n_touched
    n = ids.shape[0]
    for j in range(n):
        if j + PREFETCH_AHEAD < n:
            ahead = np.int64(ids[j + PREFETCH_AHEAD])
            if ahead >= 0 and ahead < limit:
                prefetch(scratch, ahead)
                prefetch(length_codes, ahead)
        doc = np.int64(ids[j])
        if doc < 0 or doc >= limit:
            return -1
        before = scratch[doc]
        tf = np.float32(counts[j]) * per_count
        scratch[doc] = before + gain32 * tf / (tf + norms[length_codes[doc]])
        # Written always, kept only when new: no branch on whether an earlier word met the document, which
        # is unpredictable from the second word on (rarer words' pass over a million chat turns 0.14 -> 0.10 ms
        # with its data in cache, 0.40 -> 0.37 ms without; RESULTS.md). In bounds: touched holds a slot per
        # posting of the words that list documents, and fewer documents than postings have been met.
        touched[n_touched] = doc
        n_touched += before == 0.0
    return n_touched


@numba.njit(
    [types.void(_ro(types.int64), types.float32[:], types.float32[:])],
    nogil=True,
    cache=True,
)
def _collect(
    touched: I64, scratch: F32, out: F32
) -> None:  # pragma: no cover - compiled; tested against tests/naive.py
    n = touched.shape[0]
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(scratch, touched[i + PREFETCH_AHEAD])
        doc = touched[i]
        out[i] = scratch[doc]
        scratch[doc] = 0.0


class Scratch:
    """Per-document accumulators for :func:`bm25`, grown on demand; one caller at a time."""

    def __init__(self) -> None:
        self.sums = np.zeros(0, dtype=np.float32)

    def fit(self, size: int) -> None:
        """Make room for document ids below ``size`` (amortised: grows by half again)."""
        if size > self.sums.size:
            grown = max(size, self.sums.size + self.sums.size // 2, 1024)
            self.sums = np.zeros(grown, dtype=np.float32)

    def clear(self) -> None:
        """Zero everything (after a call that stopped half-way)."""
        self.sums[:] = 0.0


def bm25(
    postings: list[tuple[U64, U16, float]],
    length_codes: U8,
    average: float,
    k1: float,
    b: float,
    scratch: Scratch,
    common: list[tuple[U64, U16, float]] | None = None,
    *,
    count_unit: float = 1.0,
) -> tuple[I64, F32]:
    """Every document in ``postings`` and its BM25 score, in order of first appearance.

    ``postings`` holds, per query word, its document ids, its term counts and its idf;
    ``length_codes`` is every document's length as :func:`length_code` gives it (indexed by id, covering every
    posting); ``average`` is the documents' mean length (exact, not decoded).
    ``common`` words (same form) add to the scores of the documents ``postings`` met and find no others:
    the document set is the rarer words', the scores are every word's.
    A term count of c stands for c × ``count_unit`` occurrences (an index that weighs some words by halves stores
    counts in half-occurrences, and its lengths in the same unit). A document listed twice under one word counts
    twice. Raises ValueError for an id outside ``length_codes``, mismatched ids and counts, an idf that is not
    positive (BM25's never is, see ``sidecar/retrieval/lexical.py``), or an average length or count unit that is not.
    """
    common = common or []
    total = sum(ids.size for ids, _, _ in postings)
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    scratch.fit(length_codes.size)
    touched = np.empty(total, dtype=np.int64)
    n = 0
    for ids, counts, idf in (*postings, *common):
        if ids.size != counts.size:
            raise ValueError(f"{ids.size} ids but {counts.size} counts in one posting list")
        if not (idf > 0.0 and np.isfinite(idf)):  # the kernel takes a zero sum for a document not met yet
            raise ValueError(f"idf must be positive and finite, got {idf}")
    if not (count_unit > 0.0 and np.isfinite(count_unit)):
        raise ValueError(f"count_unit must be positive and finite, got {count_unit}")
    if not (average > 0.0 and np.isfinite(average)):
        raise ValueError(f"average must be a positive finite length, got {average}")
    norms = (k1 * (1.0 - b + b * DECODED_LENGTHS / average)).astype(np.float32)
    for position, (ids, counts, idf) in enumerate((*postings, *common)):
        n = _accumulate(
            ids,
            counts,
            length_codes,
            norms,
            idf * (k1 + 1.0),
            count_unit,
            scratch.sums,
            touched,
            n,
            position >= len(postings),
        )
        if n < 0:
            scratch.clear()
            raise ValueError(f"a posting's document id is not below the lengths' size {length_codes.size}")
    touched = touched[:n]
    scores = np.empty(n, dtype=np.float32)
    _collect(touched, scratch.sums, scores)
    return touched, scores


@numba.njit([types.int64[:](_ro(types.float32), types.int64)], nogil=True, cache=True)
def _top_indices(scores: F32, m: int) -> I64:  # pragma: no cover - compiled; tested against tests/naive.py
    # A min-heap of the m best seen so far: once it is full, one comparison per score against its root's
    # value, kept in a local (reloading it through the heap every time cost a third of the pass).
    heap = np.empty(m, dtype=np.int64)
    size = 0
    n = scores.shape[0]
    i = 0
    while i < n and size < m:
        value = scores[i]
        if value == value:  # NaN never ranks
            position = size
            size += 1
            while position > 0:
                parent = (position - 1) >> 1
                if scores[heap[parent]] <= value:
                    break
                heap[position] = heap[parent]
                position = parent
            heap[position] = i
        i += 1
    if size < m:
        return heap[:size]
    floor = scores[heap[0]]
    while i < n:
        value = scores[i]
        if value > floor:  # False for NaN too
            position = 0
            while True:
                child = 2 * position + 1
                if child >= m:
                    break
                if child + 1 < m and scores[heap[child + 1]] < scores[heap[child]]:
                    child += 1
                if scores[heap[child]] >= value:
                    break
                heap[position] = heap[child]
                position = child
            heap[position] = i
            floor = scores[heap[0]]
        i += 1
    return heap


def top_indices(scores: F32, m: int) -> I64:
    """Positions of the ``m`` largest ``scores`` (all non-NaN ones when fewer), in no particular order.

    One pass with a heap of ``m``: for a common word's tens of thousands of matches and a pool of a few
    dozen, several times cheaper than ``np.argpartition``. Ties at the cut keep the earlier position.
    """
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    return _top_indices(np.ascontiguousarray(scores, dtype=np.float32), int(m))
