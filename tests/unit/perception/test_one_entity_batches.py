"""A batch about one entity: each item compares with a bounded window of its group's earlier items (issue 42).

Within the window a batch is perceived as before the bound (test_conflicts_caches); this is the bound itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.perception.conflicts import SOFT_CONFLICT_CANDIDATES, unit_rows
from memevo.v1 import memory_pb2

DIMENSION = 384


def _engine(data_dir: Path) -> Engine:
    return Engine(SidecarConfig(data_dir=data_dir, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))


def _about_one(number: int, vector: npt.NDArray[np.float32]) -> NewMemory:
    return NewMemory(
        content=f"remark {number} on the garden", vector=vector, kind=memory_pb2.MEMORY_KIND_FACT, entity="e0"
    )


def test_an_item_compares_with_the_newest_window_of_its_group(tmp_path: Path) -> None:
    """A rewording of a batch's first item changes it (doubt, retirement or inconsistency) while fewer than
    SOFT_CONFLICT_CANDIDATES items about the entity lie between them in the batch, and not beyond: sent alone, a
    write compares with as many of the entity's stored memories."""
    rng = np.random.default_rng(1)
    # Wide random vectors: unrelated to each other (cosine below 0.3), so only the rewording may touch the first.
    vectors = unit_rows(rng.standard_normal((2 * SOFT_CONFLICT_CANDIDATES, DIMENSION)).astype(np.float32))
    for between, seen in ((SOFT_CONFLICT_CANDIDATES - 1, True), (SOFT_CONFLICT_CANDIDATES + 10, False)):
        engine = _engine(tmp_path / f"between-{between}")
        try:
            first = vectors[0]
            batch = [_about_one(n, vectors[n]) for n in range(between + 1)]
            batch.append(_about_one(between + 1, (first + 0.01 * vectors[-1]).astype(np.float32)))
            written = engine.remember(batch, rpc="batch")
            assert len({w.memory.id for w in written}) == len(batch)
            (stored,), _ = engine.get([written[0].memory.id])
            changed = (
                stored.state != memory_pb2.MEMORY_STATE_ACTIVE or stored.possibly_outdated_by or stored.inconsistency
            )
            assert bool(changed) is seen
            others, _ = engine.get([w.memory.id for w in written[1:-1]])
            assert all(o.state == memory_pb2.MEMORY_STATE_ACTIVE and not o.possibly_outdated_by for o in others)
        finally:
            engine.close()
