"""Cosines of chosen rows of a block against their NumPy twin, and the wrapper's checks."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.kernels.cosine import rows_dot
from tests import naive


@pytest.mark.parametrize(("rows", "width", "chosen"), [(1, 1, 1), (7, 3, 5), (300, 384, 120), (2_000, 383, 2_000)])
def test_matches_naive_on_random_inputs(rows: int, width: int, chosen: int) -> None:
    rng = np.random.default_rng(rows + width)
    block = rng.standard_normal((rows, width)).astype(np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    query = rng.standard_normal(width).astype(np.float32)
    query /= np.linalg.norm(query)
    positions = rng.choice(rows, chosen, replace=False).astype(np.int64)
    got = rows_dot(block, positions, query)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, naive.rows_dot(block, positions, query), atol=1e-6)


def test_no_rows_and_repeated_rows() -> None:
    block = np.eye(4, dtype=np.float32)
    query = np.array([0.5, -1.0, 0.0, 2.0], dtype=np.float32)
    assert rows_dot(block, np.zeros(0, dtype=np.int64), query).shape == (0,)
    np.testing.assert_array_equal(rows_dot(block, np.array([3, 3, 1]), query), [2.0, 2.0, -1.0])


def test_nan_and_extremes_pass_through() -> None:
    block = np.array([[np.nan, 0.0], [3e38, 3e38], [1e-40, 0.0]], dtype=np.float32)
    got = rows_dot(block, np.arange(3), np.array([1.0, 1.0], dtype=np.float32))
    assert np.isnan(got[0])
    assert np.isinf(got[1])  # float32 overflow, as BLAS gives
    assert got[2] == pytest.approx(1e-40, abs=1e-44)


def test_a_read_only_block_is_taken() -> None:
    block = np.ones((3, 2), dtype=np.float32)
    block.flags.writeable = False
    np.testing.assert_array_equal(rows_dot(block, np.array([0, 2]), np.ones(2, np.float32)), [2.0, 2.0])


@pytest.mark.parametrize(
    ("block", "rows", "query", "says"),
    [
        (np.ones((2, 3), np.float64), [0], np.ones(3, np.float32), "float32 matrix"),
        (np.ones((4, 3), np.float32)[::2], [0], np.ones(3, np.float32), "C-contiguous"),
        (np.ones((2, 3), np.float32), [0], np.ones(2, np.float32), "one row of 3"),
        (np.ones((2, 3), np.float32), [2], np.ones(3, np.float32), "in [0, 2)"),
        (np.ones((2, 3), np.float32), [-1], np.ones(3, np.float32), "in [0, 2)"),
        (np.ones((2, 3), np.float32), [[0]], np.ones(3, np.float32), "1-d array"),
    ],
)
def test_bad_arguments_say_what_to_pass(block: np.ndarray, rows: list[int], query: np.ndarray, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        rows_dot(block, np.asarray(rows), query)
