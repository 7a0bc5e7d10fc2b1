"""Reading vectors back from the HNSW graph: rows in request order, missing and removed ids flagged."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memevo.sidecar.config import IndexConfig
from memevo.sidecar.store.vector_index import VectorIndex, normalize_rows


def test_graph_vectors_returns_unit_rows_in_order_and_flags_what_the_graph_lacks(tmp_path: Path) -> None:
    # The graph keeps half-precision vectors: rows match to ~1e-3.
    rng = np.random.default_rng(3)
    index = VectorIndex(tmp_path, 6, IndexConfig())
    vectors = rng.normal(size=(20, 6)).astype(np.float32)
    ids = np.arange(1, 21, dtype=np.int64)
    index.bulk_build(ids, vectors)
    index.remove_from_graph_now(np.asarray([5], dtype=np.int64))
    asked = np.asarray([7, 99, 1, 5, 20], dtype=np.int64)
    rows, found = index.graph_vectors(asked)
    assert found.tolist() == [True, False, True, False, True]
    expected = normalize_rows(vectors[[6, 0, 19]])
    np.testing.assert_allclose(rows[found], expected, rtol=0, atol=2e-3)
    assert not rows[~found].any()
    all_rows, all_found = index.graph_vectors(np.asarray([3, 4], dtype=np.int64))
    assert all_found.all()
    np.testing.assert_allclose(all_rows, normalize_rows(vectors[[2, 3]]), rtol=0, atol=2e-3)
    empty_rows, empty_found = index.graph_vectors(np.zeros(0, dtype=np.int64))
    assert empty_rows.shape == (0, 6)
    assert empty_found.size == 0
