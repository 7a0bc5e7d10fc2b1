"""A bulk load past the fresh tail's bound, over the wire, with the builder's large multi-threaded calls (issue 41,
item 7).

The builder inserts a backlog on both cores in add() calls sized to ``--index-bulk-call-s`` instead of 8 vectors
per thread. Whatever the call size, writes past ``--max-fresh-tail`` are refused with RESOURCE_EXHAUSTED and
nothing of a refused batch is written; a client that retries loads everything. What this test holds the large
calls to: every acknowledged write is found by a Recall right after its acknowledgement (the fresh tail), every
memory ends in the graph and is found there by a query near its vector (not its own vector, which the exact digest
lookup finds whatever the graph: see store/vector_digests.py), also after a SIGKILL in the middle of the build, and
a memory forgotten during the load is never returned. It asserts nothing on time.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from conftest import start_sidecar
from helpers import WAIT_S, memory, pack, stub, unit, vectors, wait_until

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

DIMENSION = 64
COUNT = 8_000
BATCH = 500
TAIL_BOUND = 2_000
"""``--max-fresh-tail``: a quarter of the load, as 200,000 is of 1M, so the load meets the bound."""
NOISE = 0.02
"""Per-dimension noise of the near queries (a distance of ~0.16 on unit vectors; another memory is ~1.3 away)."""
SAMPLE = 1_500
FORGOTTEN = 50


def _load(service: object, matrix: np.ndarray) -> tuple[list[int], int]:
    """Write every row in batches, retrying refused ones; the ids in row order and the refusals."""
    ids: list[int] = []
    refusals = 0
    for start in range(0, COUNT, BATCH):
        batch = memory_service_pb2.RememberBatchRequest(
            memories=[memory(f"m{start + i}", pack(row)) for i, row in enumerate(matrix[start : start + BATCH])]
        )
        while True:
            try:
                response = service.RememberBatch(batch)  # type: ignore[attr-defined]
                break
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                refusals += 1
                time.sleep(0.05)
        written = [result.memory.id for result in response.results]
        ids += written
        # Read-your-writes: the last of the batch is found at once, wherever it waits for the graph.
        found = service.Recall(  # type: ignore[attr-defined]
            memory_service_pb2.RecallRequest(query_vector=pack(matrix[start + BATCH - 1]), k=1, peek=True)
        )
        assert [m.memory.id for m in found.memories] == [written[-1]]
    return ids, refusals


def _nearest(service: object, query: np.ndarray) -> list[int]:
    response = service.Recall(  # type: ignore[attr-defined]
        memory_service_pb2.RecallRequest(query_vector=pack(query), k=1, peek=True)
    )
    return [m.memory.id for m in response.memories]


def test_a_bulk_load_past_the_tail_bound_ends_in_the_graph_whole_after_a_kill(data_dir: Path) -> None:
    matrix = unit(vectors(COUNT, DIMENSION, seed=47))
    args = ("--max-fresh-tail", str(TAIL_BOUND), "--index-bulk-threads", "2", "--index-bulk-call-s", "0.2")
    sidecar = start_sidecar(data_dir, *args, dimension=DIMENSION)
    try:
        service = stub(sidecar.unix_target)
        ids, refusals = _load(service, matrix)
        assert len(set(ids)) == COUNT  # a refused batch wrote nothing: no duplicates on retry
        rng = np.random.default_rng(47)
        forgotten = rng.choice(COUNT, size=FORGOTTEN, replace=False)
        service.Forget(memory_service_pb2.ForgetRequest(ids=[ids[row] for row in forgotten.tolist()]))
        tail = service.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count
        sidecar.kill()  # in the middle of the build when the tail is not empty yet; the graph is derived either way
        sidecar = start_sidecar(data_dir, *args, dimension=DIMENSION)
        service = stub(sidecar.unix_target)
        wait_until(
            lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count == 0,
            "the index builder to put every vector in the graph",
            timeout_s=WAIT_S * 5,
        )
        stats = service.GetStats(memory_service_pb2.GetStatsRequest())
        assert stats.index.indexed_count == COUNT - FORGOTTEN, (stats.index, refusals, tail)
        near = matrix + NOISE * rng.standard_normal(matrix.shape).astype(np.float32)
        gone = {ids[row] for row in forgotten.tolist()}
        for row in forgotten.tolist():
            assert not gone & set(_nearest(service, near[row]))
        kept = np.setdiff1d(np.arange(COUNT), forgotten)
        sample = rng.choice(kept, size=SAMPLE, replace=False).tolist()
        missed = [ids[row] for row in sample if _nearest(service, near[row]) != [ids[row]]]
        assert missed == [], f"{len(missed)} of {SAMPLE} memories not found in the graph by a query near their vector"
    finally:
        sidecar.stop()
