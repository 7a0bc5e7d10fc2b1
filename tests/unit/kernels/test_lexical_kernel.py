"""The BM25 accumulation kernel against its NumPy twin, and its edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.kernels.lexical import (
    DECODED_LENGTHS,
    EXACT_LENGTHS,
    PREFETCH_AHEAD,
    Scratch,
    bm25,
    length_code,
    top_indices,
)
from tests import naive

K1, B = 1.2, 0.75


def _coded(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths as the kernel takes them (one-byte codes), and as the naive twin does (what the codes stand for)."""
    codes = np.array([length_code(int(x)) for x in lengths], dtype=np.uint8)
    return codes, np.array([naive.decoded_length(int(c)) for c in codes], dtype=np.float64)


def _postings(
    rng: np.random.Generator, n_docs: int, n_terms: int, max_postings: int
) -> list[tuple[np.ndarray, np.ndarray, float]]:
    out = []
    for _ in range(n_terms):
        size = int(rng.integers(0, max_postings + 1))
        ids = rng.choice(n_docs, size=min(size, n_docs), replace=False).astype(np.uint64)
        counts = rng.integers(1, 5, size=ids.size).astype(np.uint16)
        out.append((ids, counts, float(rng.uniform(0.01, 8.0))))
    return out


@pytest.mark.parametrize(("n_docs", "n_terms", "max_postings"), [(1, 1, 1), (10, 3, 10), (5000, 6, 3000)])
def test_matches_naive_on_random_inputs(n_docs: int, n_terms: int, max_postings: int) -> None:
    rng = np.random.default_rng(n_docs)
    scratch = Scratch()
    for _ in range(5):
        postings = _postings(rng, n_docs, n_terms, max_postings)
        lengths = rng.integers(0, 400, size=n_docs)
        codes, decoded = _coded(lengths)
        average = float(max(lengths.mean(), 1.0))
        ids, scores = bm25(postings, codes, average, K1, B, scratch)
        want_ids, want_scores = naive.bm25(postings, decoded, average, K1, B)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        # The scratch is left clean for the next caller.
        assert not scratch.sums.any()


@pytest.mark.parametrize("unit", [0.5, 0.25])
def test_counts_in_fractions_of_an_occurrence_match_the_naive_twin(unit: float) -> None:
    rng = np.random.default_rng(7)
    scratch = Scratch()
    postings = _postings(rng, 300, 4, 200)
    codes, decoded = _coded(rng.integers(0, 60, size=300))
    ids, scores = bm25(postings[:2], codes, 20.0, K1, B, scratch, postings[2:], count_unit=unit)
    want_ids, want_scores = naive.bm25(postings[:2], decoded, 20.0, K1, B, postings[2:], count_unit=unit)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
    # Halving every count and every length (the average with them) is a different document set, not the same one.
    _, whole = bm25(postings[:2], codes, 20.0, K1, B, scratch, postings[2:])
    assert not np.allclose(scores, whole)
    with pytest.raises(ValueError, match="count_unit"):
        bm25(postings, codes, 20.0, K1, B, scratch, count_unit=0.0)


@pytest.mark.parametrize("n_docs", [10, 5000])
def test_common_words_add_only_to_documents_met_as_the_naive_twin_does(n_docs: int) -> None:
    rng = np.random.default_rng(n_docs + 1)
    scratch = Scratch()
    for _ in range(5):
        postings = _postings(rng, n_docs, 5, n_docs)
        lengths = rng.integers(0, 200, size=n_docs)
        codes, decoded = _coded(lengths)
        average = float(max(lengths.mean(), 1.0))
        rare, common = postings[:2], postings[2:]
        ids, scores = bm25(rare, codes, average, K1, B, scratch, common)
        want_ids, want_scores = naive.bm25(rare, decoded, average, K1, B, common)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        assert set(ids.tolist()) == {int(i) for ids_, _, _ in rare for i in ids_}
        assert not scratch.sums.any()


def test_a_common_word_outside_the_lengths_is_refused_and_the_scratch_stays_clean() -> None:
    scratch = Scratch()
    codes = np.ones(4, dtype=np.uint8)
    rare = [(np.array([1], np.uint64), np.array([1], np.uint16), 1.0)]
    common = [(np.array([1, 9], np.uint64), np.array([1, 1], np.uint16), 0.5)]
    with pytest.raises(ValueError, match="not below"):
        bm25(rare, codes, 1.0, K1, B, scratch, common)
    assert not scratch.sums.any()


def test_empty_postings_and_no_words() -> None:
    scratch = Scratch()
    codes = np.ones(4, dtype=np.uint8)
    for postings in ([], [(np.zeros(0, np.uint64), np.zeros(0, np.uint16), 1.0)]):
        ids, scores = bm25(postings, codes, 1.0, K1, B, scratch)
        assert ids.size == 0
        assert scores.size == 0


def test_a_document_in_several_words_sums_and_keeps_its_first_place() -> None:
    codes = np.array([3, 3, 3], dtype=np.uint8)
    postings = [
        (np.array([2, 0], np.uint64), np.array([1, 1], np.uint16), 1.0),
        (np.array([1, 2], np.uint64), np.array([2, 1], np.uint16), 2.0),
    ]
    ids, scores = bm25(postings, codes, 3.0, K1, B, Scratch())
    assert ids.tolist() == [2, 0, 1]
    one = K1 + 1.0
    assert scores[0] == pytest.approx(1.0 * one / (1.0 + K1) + 2.0 * one / (1.0 + K1), rel=1e-6)
    assert scores[2] == pytest.approx(2.0 * 2.0 * one / (2.0 + K1), rel=1e-6)


def test_zero_length_document_and_huge_counts_stay_finite() -> None:
    codes = np.array([0, length_code(10_000_000)], dtype=np.uint8)
    postings = [(np.array([0, 1], np.uint64), np.array([65_535, 1], np.uint16), 5.0)]
    _, scores = bm25(postings, codes, 2.0, K1, B, Scratch())
    assert np.isfinite(scores).all()
    assert (scores > 0).all()


def test_an_id_outside_the_lengths_is_refused_and_the_scratch_stays_clean() -> None:
    scratch = Scratch()
    codes = np.ones(3, dtype=np.uint8)
    postings = [(np.array([1, 7], np.uint64), np.array([1, 1], np.uint16), 1.0)]
    with pytest.raises(ValueError, match="lengths"):
        bm25(postings, codes, 1.0, K1, B, scratch)
    assert not scratch.sums.any()
    ids, _ = bm25([(np.array([1], np.uint64), np.array([1], np.uint16), 1.0)], codes, 1.0, K1, B, scratch)
    assert ids.tolist() == [1]


@pytest.mark.parametrize("position", [0, PREFETCH_AHEAD - 1, PREFETCH_AHEAD, 3 * PREFETCH_AHEAD])
def test_an_id_outside_the_lengths_in_a_long_posting_is_refused_wherever_it_sits(position: int) -> None:
    # The pass asks for the document PREFETCH_AHEAD postings on before it reads it: an id out of range there is
    # not read ahead, and refused when its turn comes; repeats of a document in one word still count twice.
    scratch = Scratch()
    codes = np.ones(50, dtype=np.uint8)
    ids = np.arange(4 * PREFETCH_AHEAD, dtype=np.uint64) % 50
    ids[position] = 1_000_000
    postings = [(ids, np.ones(ids.size, np.uint16), 1.0)]
    with pytest.raises(ValueError, match="lengths"):
        bm25(postings, codes, 1.0, K1, B, scratch)
    assert not scratch.sums.any()
    ids[position] = position % 50
    got_ids, got_scores = bm25(postings, codes, 1.0, K1, B, scratch)
    want_ids, want_scores = naive.bm25(postings, codes.astype(np.float64), 1.0, K1, B)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-6)


def test_mismatched_ids_and_counts_are_refused() -> None:
    postings = [(np.array([0, 1], np.uint64), np.array([1], np.uint16), 1.0)]
    with pytest.raises(ValueError, match="counts"):
        bm25(postings, np.ones(2, dtype=np.uint8), 1.0, K1, B, Scratch())


@pytest.mark.parametrize(("n", "m"), [(0, 3), (1, 1), (5, 10), (1000, 40), (20_000, 160)])
def test_top_indices_match_naive(n: int, m: int) -> None:
    rng = np.random.default_rng(n + m)
    for ties in (False, True):
        scores = (rng.integers(0, 20, size=n) if ties else rng.random(n)).astype(np.float32)
        scores[rng.random(n) < 0.01] = np.nan
        got = top_indices(scores, m)
        want = naive.top_indices(scores, m)
        assert sorted(got.tolist()) == sorted(want.tolist())


def test_top_indices_of_nothing_and_of_all_nan() -> None:
    assert top_indices(np.zeros(5, np.float32), 0).size == 0
    assert top_indices(np.full(4, np.nan, np.float32), 2).size == 0


@pytest.mark.parametrize("idf", [0.0, -1.0, float("nan"), float("inf")])
def test_an_idf_that_is_not_positive_and_finite_is_refused_before_anything_is_summed(idf: float) -> None:
    scratch = Scratch()
    codes = np.ones(3, dtype=np.uint8)
    good = (np.array([0, 1], np.uint64), np.array([1, 1], np.uint16), 1.0)
    with pytest.raises(ValueError, match="idf"):
        bm25([good, (np.array([2], np.uint64), np.array([1], np.uint16), idf)], codes, 1.0, K1, B, scratch)
    assert not scratch.sums.any()


def test_length_codes_match_the_naive_twin_and_keep_short_lengths_exact() -> None:
    rng = np.random.default_rng(3)
    lengths = [*range(0, 300), *rng.integers(300, 1 << 20, size=300).tolist(), -5, 10**9]
    for length in lengths:
        assert length_code(length) == naive.length_code(length)
    assert all(DECODED_LENGTHS[length_code(n)] == n for n in range(EXACT_LENGTHS))
    np.testing.assert_array_equal(DECODED_LENGTHS, [naive.decoded_length(code) for code in range(256)])


def test_a_coded_length_is_within_a_thirty_second_and_codes_keep_the_order() -> None:
    lengths = np.arange(EXACT_LENGTHS, 1 << 18)
    codes = np.array([length_code(int(n)) for n in lengths])
    assert (np.diff(codes) >= 0).all()
    error = np.abs(DECODED_LENGTHS[codes] - lengths) / lengths
    assert error.max() <= 1.0 / 32
    assert length_code(10**12) == 255


@pytest.mark.parametrize("average", [0.0, -1.0, float("nan")])
def test_an_average_length_that_is_not_positive_is_refused(average: float) -> None:
    postings = [(np.array([0], np.uint64), np.array([1], np.uint16), 1.0)]
    with pytest.raises(ValueError, match="average"):
        bm25(postings, np.ones(1, dtype=np.uint8), average, K1, B, Scratch())
