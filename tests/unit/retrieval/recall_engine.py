"""A real engine without a server for the recall ranking tests, and vectors at a chosen angle to the query."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.recall import Recaller
from memevo.v1 import memory_pb2

DIMENSION = 8


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))
    yield engine
    engine.close()


def near(axis: int, amount: float) -> npt.NDArray[np.float32]:
    """The query direction (axis 0) tilted towards ``axis`` (> 0): cosine to the query is 1 / sqrt(1 + amount**2)."""
    vector = np.zeros(DIMENSION, dtype=np.float32)
    vector[0] = 1.0
    vector[axis] = amount
    return vector


def write(engine: Engine, *items: NewMemory) -> list[int]:
    """Remember ``items``; their ids."""
    return [w.memory.id for w in engine.remember(list(items))]


def fact(engine: Engine, content: str, *, entity: str, attribute: str, value: str, axis: int, tilt: float) -> int:
    """Remember one fact at ``near(axis, tilt)``; its id."""
    item = NewMemory(
        content=content,
        vector=near(axis, tilt),
        kind=memory_pb2.MEMORY_KIND_FACT,
        entity=entity,
        fact_attribute=attribute,
        fact_value=value,
    )
    [memory_id] = write(engine, item)
    return memory_id


def recall_scores(engine: Engine, text: str) -> dict[int, float]:
    """Recall scores by memory id for ``text`` with the query vector on axis 0 (k 10)."""
    hits = Recaller(engine).recall(RecallQuery(vector=near(1, 0.0), text=text, k=10))
    return {hit.memory.id: hit.score for hit in hits}
