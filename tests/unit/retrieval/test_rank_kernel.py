"""Recall's compiled ranking step gives, bit for bit, what rank_factors, trust_of and a stable sort give."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memevo.sidecar.retrieval import recall
from memevo.sidecar.retrieval.rank_kernel import CONSTANTS, rank_pool
from memevo.v1 import memory_pb2

STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY
EPISODE = memory_pb2.MEMORY_KIND_EPISODE


def _constants() -> np.ndarray:
    return np.asarray([getattr(recall, name) for name in CONSTANTS], dtype=np.float64)


def _pool(rng: np.random.Generator, n: int) -> dict[str, Any]:
    match = rng.random(n)
    if n > 3:
        match[: n // 2] = match[0]  # ties: the order among equal scores must be the stable one
    return {
        "match": match,
        "accuracy": (rng.random(n) * 1.2 - 0.1).astype(np.float32),
        "relevance": (rng.random(n) * 2.0).astype(np.float32),
        "inconsistency": ((rng.random(n) * 1.5) * (rng.random(n) < 0.3)).astype(np.float32),
        "importance": rng.integers(0, 12, n).astype(np.uint8),
        "kind": rng.choice([EPISODE, STRATEGY, memory_pb2.MEMORY_KIND_FACT, 0], n).astype(np.uint8),
        "demoted": rng.random(n) < 0.2,
        "signature": rng.integers(-1, 4, n).astype(np.int32),  # strategies of a few tasks, some without one
    }


def _numpy_twin(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    factor = recall.rank_factors(
        p["accuracy"], p["relevance"], p["inconsistency"], p["importance"], p["kind"], p["demoted"], p["signature"]
    )
    trust = recall.trust_of(p["accuracy"], p["relevance"], p["kind"], p["signature"])
    scores = p["match"] * factor
    return factor, trust, scores, np.argsort(-scores, kind="stable")


@pytest.mark.parametrize("n", [1, 2, 5, 40, 200])
def test_same_numbers_and_order_as_rank_factors(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(200):
        p = _pool(rng, n)
        got = rank_pool(**p, constants=_constants(), strategy=STRATEGY, episode=EPISODE)
        for name, mine, theirs in zip(("factor", "trust", "scores", "ranked"), got, _numpy_twin(p), strict=True):
            np.testing.assert_array_equal(mine, theirs, err_msg=name)


def test_strategies_of_one_task_are_shifted_together() -> None:
    # Two strategies of task 7 (accuracies 0.2 and 0.5) and one without a task (0.1): the best of each group counts
    # as 1, the other keeps its distance (0.2 -> 0.7); an episode is left as is.
    p: dict[str, Any] = {
        "match": np.ones(4),
        "accuracy": np.array([0.2, 0.5, 0.1, 0.3], dtype=np.float32),
        "relevance": np.zeros(4, dtype=np.float32),
        "inconsistency": np.zeros(4, dtype=np.float32),
        "importance": np.zeros(4, dtype=np.uint8),
        "kind": np.array([STRATEGY, STRATEGY, STRATEGY, EPISODE], dtype=np.uint8),
        "demoted": np.zeros(4, dtype=bool),
        "signature": np.array([7, 7, -1, 7], dtype=np.int32),
    }
    _, trust, _, ranked = rank_pool(**p, constants=_constants(), strategy=STRATEGY, episode=EPISODE)
    np.testing.assert_allclose(trust, 0.6 * np.array([0.7, 1.0, 1.0, 0.3]), rtol=1e-6)
    assert ranked.tolist() == [1, 2, 0, 3]
    np.testing.assert_array_equal(trust, _numpy_twin(p)[1])


def test_an_empty_pool() -> None:
    empty = _pool(np.random.default_rng(0), 0)
    factor, trust, scores, ranked = rank_pool(**empty, constants=_constants(), strategy=STRATEGY, episode=EPISODE)
    assert factor.size == trust.size == scores.size == ranked.size == 0
