"""Background consolidation passes give way to a burst of writes: they wait while the fresh tail is large."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.inprocess import InProcessContext
from memevo.sidecar.config import GovernanceConfig, SidecarConfig
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.governance.consolidation import MAX_TAIL_FOR_PASS
from memevo.sidecar.service.server import Sidecar
from memevo.sidecar.store.vector_index import VectorIndex
from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 8
WAIT_S = 30.0


@pytest.mark.parametrize("behind", [1, 5_000])
def test_consolidation_passes_wait_while_the_fresh_tail_is_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behind: int
) -> None:
    # Even one vector: passes that started with ~4k vectors left (the bound was 4,096) slowed the builder 5-10x at
    # the end of every bulk load (issue 41, item 7).
    tail = [behind]
    monkeypatch.setattr(VectorIndex, "tail_count", property(lambda self: tail[0]))
    config = SidecarConfig(
        data_dir=tmp_path / "data",
        listen=(),
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        governance=GovernanceConfig(sweep_interval_s=0.01),
    )
    sidecar = Sidecar(config)
    sidecar.start()
    try:
        vector = np.ones(DIMENSION, dtype="<f4").tobytes()
        request = memory_service_pb2.RememberBatchRequest(
            memories=[memory_pb2.MemoryInput(content=f"note {i}", vector=vector) for i in range(5)]
        )
        sidecar.servicer.RememberBatch(request, InProcessContext())
        finder = sidecar.servicer.review.finder
        time.sleep(2.5)  # two review ticks
        assert finder.watermark == 0, "a consolidation pass ran while the fresh tail was large"
        tail[0] = MAX_TAIL_FOR_PASS  # at the bound: passes run
        deadline = time.monotonic() + WAIT_S
        while finder.watermark < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert finder.watermark == 5
    finally:
        sidecar.stop()
