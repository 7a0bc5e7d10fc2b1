"""The cluster-linking kernel against its NumPy twin, and its edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.kernels.clusters import components, link_neighbours
from tests import naive


def _random_case(rng: np.random.Generator, n_nodes: int, n_seeds: int, k: int, n_groups: int):
    seeds = rng.choice(n_nodes, size=n_seeds, replace=n_seeds > n_nodes).astype(np.int64)
    neighbours = rng.integers(-1, n_nodes, size=(n_seeds, k)).astype(np.int64)
    similarities = rng.uniform(0.5, 1.0, size=(n_seeds, k)).astype(np.float32)
    similarities[rng.random((n_seeds, k)) < 0.05] = np.nan
    groups = rng.integers(-1, n_groups, size=n_nodes).astype(np.int64)
    return seeds, neighbours, similarities, groups


@pytest.mark.parametrize(
    ("n_nodes", "n_seeds", "k", "n_groups"), [(1, 1, 1, 1), (7, 3, 2, 2), (200, 60, 8, 3), (1000, 999, 16, 5)]
)
def test_matches_naive_on_random_inputs(n_nodes: int, n_seeds: int, k: int, n_groups: int) -> None:
    rng = np.random.default_rng(n_nodes)
    for threshold in (0.6, 0.85, 0.99):
        case = _random_case(rng, n_nodes, n_seeds, k, n_groups)
        np.testing.assert_array_equal(link_neighbours(*case, threshold), naive.link_neighbours(*case, threshold))


def test_chain_through_seeds_is_one_component_with_the_smallest_label() -> None:
    seeds = np.array([3, 1], dtype=np.int64)
    neighbours = np.array([[2, -1], [3, 0]], dtype=np.int64)
    similarities = np.array([[0.95, 0.0], [0.91, 0.99]], dtype=np.float32)
    groups = np.array([0, 0, 0, 0, 0], dtype=np.int64)
    labels = link_neighbours(seeds, neighbours, similarities, groups, 0.9)
    assert labels.tolist() == [0, 0, 0, 0, 4]
    assert [c.tolist() for c in components(labels)] == [[0, 1, 2, 3]]


def test_other_group_ineligible_below_threshold_and_nan_do_not_link() -> None:
    seeds = np.array([0, 0, 0, 0], dtype=np.int64)
    neighbours = np.array([[1], [2], [3], [4]], dtype=np.int64)
    similarities = np.array([[0.99], [0.99], [0.5], [np.nan]], dtype=np.float32)
    groups = np.array([7, 8, -1, 7, 7], dtype=np.int64)
    labels = link_neighbours(seeds, neighbours, similarities, groups, 0.9)
    assert labels.tolist() == [0, 1, 2, 3, 4]
    assert components(labels) == []


def test_empty_inputs() -> None:
    empty = np.zeros(0, dtype=np.int64)
    labels = link_neighbours(empty, np.zeros((0, 4), dtype=np.int64), np.zeros((0, 4), dtype=np.float32), empty, 0.9)
    assert labels.size == 0
    assert components(labels) == []


def test_wrapper_rejects_wrong_dtype_and_shape() -> None:
    seeds = np.zeros(2, dtype=np.int64)
    groups = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="similarities"):
        link_neighbours(seeds, np.zeros((2, 2), dtype=np.int64), np.zeros((2, 2), dtype=np.float64), groups, 0.9)
    with pytest.raises(ValueError, match="one row per seed"):
        link_neighbours(seeds, np.zeros((3, 2), dtype=np.int64), np.zeros((3, 2), dtype=np.float32), groups, 0.9)
    with pytest.raises(ValueError, match="threshold"):
        link_neighbours(seeds, np.zeros((2, 2), dtype=np.int64), np.zeros((2, 2), dtype=np.float32), groups, np.nan)
