"""Likeness alone doubts an older statement of the entity only when no reranker orders the answers at read time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.v1 import memory_pb2

DIMENSION = 8


def _near(axis: int, amount: float) -> np.ndarray:
    vector = np.zeros(DIMENSION, dtype=np.float32)
    vector[0], vector[axis] = 1.0, amount
    return vector


@pytest.mark.parametrize(("rerank", "doubted"), [("none", True), ("local", False)])
def test_a_near_statement_of_the_entity_doubts_the_older_only_without_a_reranker(
    tmp_path: Path, rerank: str, doubted: bool
) -> None:
    config = SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION, rerank=rerank)
    engine = Engine(config)
    try:
        older, newer = (
            w.memory.id
            for w in engine.remember(
                [
                    NewMemory(content="Compass primary on-call this week: Jenna Fields.", vector=_near(1, 0.1),
                              kind=memory_pb2.MEMORY_KIND_FACT, entity="team:compass"),
                    NewMemory(content="Compass has a secondary on-call this week as well: Andre backs up Jenna.",
                              vector=_near(2, 0.2), kind=memory_pb2.MEMORY_KIND_FACT, entity="team:compass"),
                ]
            )
        )  # fmt: skip
        assert bool(engine.columns.doubted[older]) is doubted
        assert not engine.columns.doubted[newer]
    finally:
        engine.close()
