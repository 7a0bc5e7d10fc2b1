"""Recall's merge of the memories stored with exactly the query's vector into the graph's candidates."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.sidecar.retrieval.recall import SAME_VECTOR_COMPARED, _with_same_vector


def _naive(ids: np.ndarray, sims: np.ndarray, same: np.ndarray) -> dict[int, float]:
    merged = {int(i): float(s) for i, s in zip(ids, sims, strict=True)}
    merged.update({int(i): 1.0 for i in same})
    return merged


@pytest.mark.parametrize("count", [0, 1, 3, SAME_VECTOR_COMPARED, SAME_VECTOR_COMPARED + 1, 200])
def test_same_vector_ids_join_at_similarity_one(count: int) -> None:
    rng = np.random.default_rng(count)
    ids = rng.choice(1_000, size=300, replace=False).astype(np.int64)
    sims = rng.uniform(-1, 1, size=300).astype(np.float32)
    same = rng.choice(1_000, size=count, replace=False).astype(np.int64)  # some in ids, some missed by the graph
    before = sims.copy()
    merged_ids, merged_sims = _with_same_vector(ids, sims, same)
    assert merged_sims.dtype == np.float32
    assert merged_ids.size == len(set(ids.tolist()) | set(same.tolist()))
    assert dict(zip(merged_ids.tolist(), merged_sims.tolist(), strict=True)) == pytest.approx(_naive(ids, sims, same))
    assert np.array_equal(sims, before)  # the graph's arrays are shared between rounds: never written
