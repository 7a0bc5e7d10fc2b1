"""A consolidation pass looks at the stop flag between blocks of seeds, so a shutdown does not wait for it.

A pass over a large store's new memories searches the ANN index for every seed; before this check it ran to
the end while the sidecar stopped (the review worker's 30 s join timeout was most of a 28-31 s stop).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.inprocess import InProcessContext
from memevo.sidecar.config import EmbedderConfig, GovernanceConfig, SidecarConfig
from memevo.sidecar.governance.consolidation import SEEDS_PER_BLOCK
from memevo.sidecar.service.server import Sidecar
from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 8


def test_a_pass_ends_between_blocks_once_stopping_and_the_next_pass_sees_the_same_memories(tmp_path: Path) -> None:
    config = SidecarConfig(
        data_dir=tmp_path / "data",
        listen=(),
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        governance=GovernanceConfig(sweep_interval_s=0),  # no background pass: this test runs them
    )
    sidecar = Sidecar(config)
    sidecar.start()
    try:
        count = 3 * SEEDS_PER_BLOCK
        rng = np.random.default_rng(0)
        request = memory_service_pb2.RememberBatchRequest(
            memories=[
                memory_pb2.MemoryInput(
                    content=f"note {i}", vector=rng.standard_normal(DIMENSION).astype("<f4").tobytes()
                )
                for i in range(count)
            ]
        )
        sidecar.servicer.RememberBatch(request, InProcessContext())
        review = sidecar.servicer.review
        looks: list[int] = []

        def stopping() -> bool:
            looks.append(1)
            return len(looks) > 1  # the stop arrives while the first block is searched

        stopped = review.consolidation_pass(stopping=stopping)
        # Before the first block and the second (where it ended), and once more after the search.
        assert len(looks) == 3, "the pass did not end at the second block"
        assert stopped.seeds_examined == 0
        assert stopped.groups_found == 0
        assert review.finder.watermark == 0, "a pass cut short must leave its seeds for the next one"

        finished = review.consolidation_pass()
        assert finished.seeds_examined == count
        assert review.finder.watermark == count
    finally:
        sidecar.stop()
