"""Cluster detection over ANN neighbours: which memories are close enough, and alike enough, to consolidate.

The caller numbers every memory it looked at with a local node index
(0..n_nodes-1), gives each node a group code (memories may only be
consolidated with memories of the same group: namespace, kind, entity or
strategy signature; -1 = not eligible) and, for each *seed* (a new or changed
memory), its nearest neighbours with their cosine similarities. The kernel
links a seed to a neighbour when both are eligible, share the group code and
their similarity is at least ``threshold``, then returns each node's
connected component as the smallest node index in it.

Only the seeds' neighbour lists are read, so the work is proportional to the
new memories times the neighbour count, never to the store.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba import types

I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]


def _ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    return types.Array(dtype, ndim, "C", readonly=True)


@numba.njit(
    [
        types.void(
            _ro(types.int64),
            _ro(types.int64, 2),
            _ro(types.float32, 2),
            _ro(types.int64),
            types.float64,
            types.int64[:],
        ),
    ],
    nogil=True,
    cache=True,
)
def _link(
    seeds: I64, neighbours: I64, similarities: F32, groups: I64, threshold: float, parent: I64
) -> None:  # pragma: no cover - compiled; tested against tests/naive.py
    n_nodes = parent.shape[0]
    for i in range(n_nodes):
        parent[i] = i
    for row in range(seeds.shape[0]):
        a = seeds[row]
        if a < 0 or a >= n_nodes or groups[a] < 0:
            continue
        for col in range(neighbours.shape[1]):
            b = neighbours[row, col]
            if b < 0 or b >= n_nodes or b == a or groups[b] != groups[a]:
                continue
            if not similarities[row, col] >= threshold:  # NaN never links
                continue
            # Union by smallest index, with path halving: the root of a component is its smallest node.
            ra = a
            while parent[ra] != ra:
                parent[ra] = parent[parent[ra]]
                ra = parent[ra]
            rb = b
            while parent[rb] != rb:
                parent[rb] = parent[parent[rb]]
                rb = parent[rb]
            if ra < rb:
                parent[rb] = ra
            elif rb < ra:
                parent[ra] = rb
    for i in range(n_nodes):
        root = i
        while parent[root] != root:
            root = parent[root]
        parent[i] = root


def link_neighbours(seeds: I64, neighbours: I64, similarities: F32, groups: I64, threshold: float) -> I64:
    """Component label (smallest node index in it) of every node.

    ``seeds``: int64[n_seeds], node index of each seed. ``neighbours``:
    int64[n_seeds, k], node indices of each seed's neighbours, -1 for none.
    ``similarities``: float32[n_seeds, k], cosine similarity of each pair.
    ``groups``: int64[n_nodes], group code per node, -1 when the node may
    not be consolidated. Raises ValueError on shapes or dtypes that do not fit.
    """
    seeds = np.ascontiguousarray(seeds)
    neighbours = np.ascontiguousarray(neighbours)
    similarities = np.ascontiguousarray(similarities)
    groups = np.ascontiguousarray(groups)
    for name, array, dtype, ndim in (
        ("seeds", seeds, np.int64, 1),
        ("neighbours", neighbours, np.int64, 2),
        ("similarities", similarities, np.float32, 2),
        ("groups", groups, np.int64, 1),
    ):
        if array.dtype != dtype or array.ndim != ndim:
            raise ValueError(
                f"{name} must be a {ndim}-d {np.dtype(dtype).name} array, got {array.ndim}-d {array.dtype}; "
                f"convert with np.asarray(..., dtype=np.{np.dtype(dtype).name})"
            )
    if neighbours.shape[0] != seeds.shape[0] or similarities.shape != neighbours.shape:
        raise ValueError(
            f"neighbours {neighbours.shape} and similarities {similarities.shape} must both have one row per seed "
            f"({seeds.shape[0]}) and the same number of columns"
        )
    if not np.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    labels = np.empty(groups.shape[0], dtype=np.int64)
    _link(seeds, neighbours, similarities, groups, float(threshold), labels)
    return labels


def components(labels: I64) -> list[I64]:
    """The node indices of each component with two or more nodes, smallest label first."""
    if labels.size == 0:
        return []
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    ends = np.r_[starts[1:], sorted_labels.size]
    return [order[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True) if e - s >= 2]
