"""A 64-bit checksum per row of 64-bit words: what tells a file's intact records from torn or damaged ones.

Each row is hashed on its own (multiply and xor-shift per word, seeded), so a
reader checks a million fixed-size records in one pass over their bytes and
keeps every intact one when a few are not. Not cryptographic: it guards
against torn writes, zeroed pages and flipped bits, not against someone who
can write the file (that person can write RocksDB as well).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba import types

U64 = npt.NDArray[np.uint64]

MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
"""Odd, so that multiplying by it is a bijection: a change of one word always changes the running hash."""
LENGTH_MULTIPLIER = np.uint64(0xC2B2AE3D27D4EB4F)
SHIFT = np.uint64(31)
FINAL_SHIFT = np.uint64(29)


@numba.njit(
    [types.void(types.Array(types.uint64, 2, "C", readonly=True), types.int64, types.uint64, types.uint64[:])],
    nogil=True,
    cache=True,
)
def _row_checksums(
    words: U64, columns: int, seed: np.uint64, out: U64
) -> None:  # pragma: no cover - compiled; see tests/naive.py
    width = np.uint64(columns)
    for row in range(words.shape[0]):
        h = seed ^ (width * LENGTH_MULTIPLIER)
        for col in range(columns):
            h = (h ^ words[row, col]) * MULTIPLIER
            h ^= h >> SHIFT
        out[row] = h ^ (h >> FINAL_SHIFT)


def row_checksums(words: U64, seed: int, *, columns: int | None = None) -> U64:
    """The checksum of each row of ``words`` (uint64[n, width]) over its first ``columns`` words (default: all),
    seeded with ``seed`` (0 <= seed < 2**64).

    ``columns`` lets a record's own checksum word sit in its last column without copying the rest out. Raises
    ValueError for another dtype, shape, column count or seed. Releases the GIL while it runs.
    """
    if not isinstance(words, np.ndarray) or words.dtype != np.uint64 or words.ndim != 2:
        got = f"{getattr(words, 'ndim', '?')}-d {getattr(words, 'dtype', type(words).__name__)}"
        raise ValueError(
            f"words must be a 2-d uint64 array, got {got}; view the records' bytes with .view(np.uint64).reshape(n, -1)"
        )
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must fit in 64 unsigned bits, got {seed}")
    width = words.shape[1] if columns is None else columns
    if not 0 <= width <= words.shape[1]:
        raise ValueError(f"columns must be between 0 and the {words.shape[1]} columns of words, got {columns}")
    out = np.empty(words.shape[0], dtype=np.uint64)
    if words.shape[0]:
        _row_checksums(_read_only(np.ascontiguousarray(words)), width, np.uint64(seed), out)
    return out


def _read_only(words: U64) -> U64:
    """A read-only view (the compiled signature takes read-only arrays, so writable and mapped ones share it)."""
    view = words.view()
    view.flags.writeable = False
    return view
