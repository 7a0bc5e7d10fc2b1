"""A real engine without a server for the recall ranking tests, and vectors at a chosen angle to the query."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine

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
