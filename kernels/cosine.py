"""Cosines of chosen rows of a block of unit vectors to a unit query: an entity's memories in filtered recall.

An entity's vectors are held as one contiguous block (``sidecar/store/entity_vectors.py``); a filtered recall
scores the rows that pass its filter. NumPy would gather those rows into a new matrix and hand it to BLAS,
whose gemv starts its worker threads for a few thousand rows: on two shared cores that hand-off, not the
arithmetic, made the slow calls (mean 0.64 ms against a median of 0.05 ms for the same scan, at load 4).
Here one thread reads each chosen row in place, with the interpreter lock released.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba import types

from memevo.kernels.params import FASTMATH

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

_SIGNATURE = types.float32[::1](
    types.Array(types.float32, 2, "C", readonly=True),
    types.Array(types.int64, 1, "C", readonly=True),
    types.Array(types.float32, 1, "C", readonly=True),
)


@numba.njit([_SIGNATURE], nogil=True, cache=True, fastmath=set(FASTMATH))
def _rows_dot(block: F32, rows: I64, query: F32) -> F32:  # pragma: no cover - compiled; tested against tests/naive.py
    out = np.empty(rows.shape[0], dtype=np.float32)
    width = query.shape[0]
    for j in range(rows.shape[0]):
        row = rows[j]
        total = np.float32(0.0)
        for i in range(width):  # reassociated by fastmath: vectorised
            total += block[row, i] * query[i]
        out[j] = total
    return out


def rows_dot(block: F32, rows: I64, query: F32) -> F32:
    """``block[rows] @ query`` in float32 without gathering the rows: one dot product per chosen row.

    ``block``: a C-contiguous float32 matrix; ``rows``: positions in it (each in range); ``query``: one float32
    row as wide as ``block``. Sums are reassociated (SIMD), so a result may differ from BLAS's in its last bits.
    """
    if block.ndim != 2 or block.dtype != np.float32 or not block.flags.c_contiguous:
        raise ValueError(f"block: pass a C-contiguous float32 matrix, not {block.dtype} {block.shape}")
    query = np.ascontiguousarray(query, dtype=np.float32)
    if query.shape != (block.shape[1],):
        raise ValueError(f"query: pass one row of {block.shape[1]} values, not shape {query.shape}")
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if rows.ndim != 1:
        raise ValueError(f"rows: pass a 1-d array of positions, not shape {rows.shape}")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= block.shape[0]):
        raise ValueError(f"rows: every position must be in [0, {block.shape[0]})")
    return _rows_dot(block, rows, query)
