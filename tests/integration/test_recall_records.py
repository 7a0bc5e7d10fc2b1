"""Retrieval records and access statistics written off the recall's path, over the wire.

A recall's retrieval record and observation are queued for a thread of their own
(``sidecar/store/retrieval_log.py``) and its access statistics are checkpointed by the
governance daemon. What the caller sees must not change: a ReportOutcome right after its
Recall, from many callers at once, finds the retrieval and counts for the arm that ranked
it; a clean stop writes every queued record and the access counts, so after a restart the
outcomes still link to the retrievals and Get shows how often each memory was returned.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import start_sidecar
from helpers import memory, pack, stub

from memevo.v1 import memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

DIMENSION = 8
CALLERS = 8
RECALLS_EACH = 25


def _remember(service: object, count: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    items = [memory(f"note {i}", pack(rng.standard_normal(DIMENSION))) for i in range(count)]
    response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items))  # type: ignore[attr-defined]
    return [r.memory.id for r in response.results]


def _recall(service: object, seed: int) -> memory_service_pb2.RecallResponse:
    vector = np.random.default_rng(seed).standard_normal(DIMENSION)
    return service.Recall(memory_service_pb2.RecallRequest(query_vector=pack(vector), k=3))  # type: ignore[attr-defined, no-any-return]


def test_outcomes_right_after_concurrent_recalls_find_their_retrievals(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
    try:
        service = stub(sidecar.unix_target)
        _remember(service, 40, seed=1)
        base = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
        trust, other = policy_pb2.Policy(), policy_pb2.Policy()
        trust.CopyFrom(base)
        other.CopyFrom(base)
        other.kinds[0].feedback_weight = 0.0
        arms = [policy_pb2.ExperimentArm(name="a", policy=trust), policy_pb2.ExperimentArm(name="b", policy=other)]
        experiment = policy_pb2.Experiment(name="log", arms=arms)
        service.SetExperiment(memory_service_pb2.SetExperimentRequest(experiment=experiment))

        def caller(index: int) -> Counter[str]:
            arms: Counter[str] = Counter()
            for j in range(RECALLS_EACH):
                recalled = _recall(service, seed=1_000 * index + j)
                assert recalled.retrieval_id
                assert len(recalled.memories) == 3
                reported = service.ReportOutcome(
                    memory_service_pb2.ReportOutcomeRequest(
                        retrieval_id=recalled.retrieval_id, outcome=memory_service_pb2.OUTCOME_SUCCESS
                    )
                )
                assert reported.updated_count == 3
                arms[recalled.arm] += 1
            return arms

        with ThreadPoolExecutor(CALLERS) as pool:
            seen = sum(pool.map(caller, range(CALLERS)), Counter())
        stats = service.GetStats(memory_service_pb2.GetStatsRequest()).experiment
        by_name = {arm.name: arm for arm in stats.arms}
        assert sum(seen.values()) == CALLERS * RECALLS_EACH
        for name, retrievals in seen.items():
            # Each outcome found its retrieval's observation (the arm is read from it): none was missed.
            assert by_name[name].retrieval_count == retrievals
            assert by_name[name].outcome_count == retrievals
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def test_a_clean_stop_keeps_queued_retrievals_and_access_counts(data_dir: Path) -> None:
    # No checkpoint while serving: what survives is what the stop writes.
    args = ("--sweep-interval-s", "0", "--checkpoint-interval-s", "3600")
    first = start_sidecar(data_dir, *args, dimension=DIMENSION)
    returned: Counter[int] = Counter()
    retrievals: dict[str, list[int]] = {}
    try:
        service = stub(first.unix_target)
        ids = _remember(service, 30, seed=2)
        for j in range(60):
            recalled = _recall(service, seed=j)
            hits = [m.memory.id for m in recalled.memories]
            returned.update(hits)
            retrievals[recalled.retrieval_id] = hits
    finally:
        assert first.stop() == 0, first.log()  # right after the last Recall: its records may still be queued
    second = start_sidecar(data_dir, *args, dimension=DIMENSION)
    try:
        service = stub(second.unix_target)
        got = service.Get(memory_service_pb2.GetRequest(ids=ids))
        assert {m.id: m.access_count for m in got.memories} == {i: returned[i] for i in ids}
        for retrieval_id, hits in retrievals.items():
            reported = service.ReportOutcome(
                memory_service_pb2.ReportOutcomeRequest(
                    retrieval_id=retrieval_id, used_memory_ids=hits[:1], outcome=memory_service_pb2.OUTCOME_SUCCESS
                )
            )
            assert reported.updated_count == 1
    finally:
        assert second.stop() == 0, second.log()


def test_access_counts_written_by_a_checkpoint_survive_a_crash(data_dir: Path) -> None:
    """Killed (no stop) well after the last Recall: the checkpoints wrote the counts the next start shows."""
    first = start_sidecar(data_dir, "--sweep-interval-s", "0", "--checkpoint-interval-s", "0.1", dimension=DIMENSION)
    returned: Counter[int] = Counter()
    try:
        service = stub(first.unix_target)
        ids = _remember(service, 20, seed=3)
        for j in range(30):
            returned.update(m.memory.id for m in _recall(service, seed=100 + j).memories)
        time.sleep(2.0)  # twenty checkpoint intervals: the last accesses are checkpointed
    finally:
        first.kill()
    second = start_sidecar(data_dir, "--sweep-interval-s", "0", dimension=DIMENSION)
    try:
        got = stub(second.unix_target).Get(memory_service_pb2.GetRequest(ids=ids))
        assert {m.id: m.access_count for m in got.memories} == {i: returned[i] for i in ids}
        assert all(m.last_access_at.seconds > 0 for m in got.memories if returned[m.id])
    finally:
        assert second.stop() == 0, second.log()
