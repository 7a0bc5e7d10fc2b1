"""decode_vector: client vectors are accepted unchanged, or refused with the reason, whichever path checks them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memevo.sidecar.service.validation import Violations, decode_vector

DIMENSION = 8


def _decode(values: list[float] | np.ndarray) -> tuple[np.ndarray | None, list[tuple[str, str]]]:
    v = Violations()
    vector = decode_vector(v, "memory.vector", np.asarray(values, dtype="<f4").tobytes(), DIMENSION)
    return vector, v.items


@pytest.mark.parametrize(
    "values",
    [
        [1.0] * DIMENSION,
        [0.0] * (DIMENSION - 1) + [-3.5],
        list(np.random.default_rng(0).standard_normal(DIMENSION)),
        [1e-9] * DIMENSION,  # small but its length is still normal
        [1e17] * DIMENSION,  # large, but its squares still fit in float32 (length about 2.8e17)
    ],
)
def test_usable_vectors_come_back_as_sent(values: list[float]) -> None:
    vector, problems = _decode(values)
    assert problems == []
    assert vector is not None
    assert vector.dtype == np.float32
    np.testing.assert_array_equal(vector, np.asarray(values, dtype=np.float32))


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([math.nan] + [1.0] * (DIMENSION - 1), "NaN or infinity"),
        ([math.inf] + [1.0] * (DIMENSION - 1), "NaN or infinity"),
        ([-math.inf, math.inf] + [0.0] * (DIMENSION - 2), "NaN or infinity"),
        ([0.0] * DIMENSION, "all zeros"),
        ([1e-25] * DIMENSION, "cannot be normalised"),  # the squares underflow to 0
        ([1e20] * DIMENSION, "cannot be normalised"),  # the squares overflow to inf
        ([3e38, 1.0] + [0.0] * (DIMENSION - 2), "cannot be normalised"),
        ([1.0] * (DIMENSION + 1), "dimension"),
    ],
)
def test_unusable_vectors_are_refused_with_the_reason(values: list[float], reason: str) -> None:
    vector, problems = _decode(values)
    assert vector is None
    assert len(problems) == 1
    assert problems[0][0] == "memory.vector"
    assert reason in problems[0][1]
