"""The vectorisable helpers: exp2f and logf accuracy over their whole domain, and float32 pair packing."""

from __future__ import annotations

import numba
import numpy as np

from memevo.kernels._simd import exp2f, high_f32, logf, low_f32, pack_f32_pairs


@numba.njit
def _exp2_all(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = exp2f(x[i])
    return out


@numba.njit
def _log_all(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = logf(x[i])
    return out


@numba.njit
def _unpack_all(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low = np.empty(words.shape[0], dtype=np.float32)
    high = np.empty(words.shape[0], dtype=np.float32)
    for i in range(words.shape[0]):
        low[i] = low_f32(words[i])
        high[i] = high_f32(words[i])
    return low, high


def test_exp2f_relative_error_over_its_whole_range() -> None:
    x = np.concatenate([np.linspace(-126, 127, 1_000_001), np.arange(-126, 128), [0.0, -0.0, 1e-30, -1e-30]])
    x = x.astype(np.float32)
    want = np.exp2(x.astype(np.float64))
    got = _exp2_all(x)
    assert np.max(np.abs(got - want) / want) < 3e-7
    assert _exp2_all(np.array([0.0], dtype=np.float32))[0] == 1.0


def test_exp2f_clamps_instead_of_overflowing() -> None:
    got = _exp2_all(np.array([-1e30, -np.inf, -127, 128, 1e30, np.inf], dtype=np.float32))
    assert np.isfinite(got).all()
    assert (got[:3] <= 2.0**-126).all()
    assert (got[3:] >= 2.0**127).all()


def test_logf_of_one_plus_any_uint32_count() -> None:
    counts = np.concatenate([np.arange(0, 100_000), np.geomspace(1, 2**32 - 1, 100_000).astype(np.int64)])
    x = (1.0 + counts).astype(np.float32)
    want = np.log(x.astype(np.float64))
    got = _log_all(x)
    assert got[0] == 0.0  # log(1): zero counts add exactly nothing
    assert np.max(np.abs(got - want)) < 3e-6  # 22 * 1.2e-7 at the top of the range
    assert np.max(np.abs(got[1:] - want[1:]) / want[1:]) < 3e-7


def test_pack_f32_pairs_round_trips() -> None:
    rng = np.random.default_rng(0)
    low = np.concatenate([rng.normal(size=1000), [0.0, -0.0, 1e-30, 1e30, np.inf, -np.inf]])
    high = rng.normal(size=low.size) * 1e5
    words = pack_f32_pairs(low, high)
    assert words.dtype == np.uint64
    got_low, got_high = _unpack_all(words)
    np.testing.assert_array_equal(got_low, low.astype(np.float32))
    np.testing.assert_array_equal(got_high, high.astype(np.float32))
    # The layout is arithmetic, not memory order: low bits hold the first float on any byte order.
    assert int(pack_f32_pairs(np.array([1.0]), np.array([0.0]))[0]) == 0x3F800000
    assert int(pack_f32_pairs(np.array([0.0]), np.array([1.0]))[0]) == 0x3F800000 << 32
