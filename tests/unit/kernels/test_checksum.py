"""The row-checksum kernel against its NumPy twin, and what it must notice."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.kernels.checksum import row_checksums
from tests import naive


@pytest.mark.parametrize(("rows", "width"), [(0, 4), (1, 1), (3, 7), (257, 194)])
def test_matches_naive_on_random_words(rows: int, width: int) -> None:
    rng = np.random.default_rng(rows * 1000 + width)
    words = rng.integers(0, np.iinfo(np.uint64).max, size=(rows, width), dtype=np.uint64, endpoint=True)
    for seed in (0, 1, (1 << 64) - 1):
        np.testing.assert_array_equal(row_checksums(words, seed), naive.row_checksums(words, seed))
        for columns in (0, width - 1):
            np.testing.assert_array_equal(
                row_checksums(words, seed, columns=columns), naive.row_checksums(words, seed, columns)
            )


def test_any_change_of_one_word_zeroed_rows_and_the_seed_change_the_checksum() -> None:
    rng = np.random.default_rng(3)
    words = rng.integers(0, 1 << 62, size=(50, 12), dtype=np.uint64)
    base = row_checksums(words, 9)
    for col in range(words.shape[1]):
        changed = words.copy()
        changed[:, col] ^= np.uint64(1) << np.uint64(col)
        assert (row_checksums(changed, 9) != base).all()
    assert (row_checksums(np.zeros_like(words), 9) != 0).all()
    assert (row_checksums(words, 10) != base).all()
    # Rows are hashed on their own: the same row gives the same checksum wherever it sits.
    assert row_checksums(words[5:6], 9)[0] == base[5]


def test_reads_mapped_read_only_and_strided_input() -> None:
    words = np.arange(40, dtype=np.uint64).reshape(8, 5)
    expected = naive.row_checksums(words, 2)
    read_only = words.copy()
    read_only.flags.writeable = False
    np.testing.assert_array_equal(row_checksums(read_only, 2), expected)
    np.testing.assert_array_equal(row_checksums(np.asfortranarray(words), 2), expected)


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 3), dtype=np.int64), np.zeros(3, dtype=np.uint64), [[1, 2]]],
)
def test_refuses_what_is_not_a_uint64_matrix(bad: object) -> None:
    with pytest.raises(ValueError, match="2-d uint64"):
        row_checksums(bad, 0)  # type: ignore[arg-type]


def test_refuses_a_seed_beyond_64_bits_and_columns_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="seed"):
        row_checksums(np.zeros((1, 1), dtype=np.uint64), 1 << 64)
    with pytest.raises(ValueError, match="columns"):
        row_checksums(np.zeros((1, 2), dtype=np.uint64), 0, columns=3)
