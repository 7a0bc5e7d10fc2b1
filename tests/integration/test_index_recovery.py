"""The ANN index after a crash or a damaged file: the sidecar serves at once and recall stays exact.

After a SIGKILL the saved graph lacks what was written since its last save. Start-up puts those vectors in
the fresh tail as a rebuild: recall scans them exactly while the builder inserts them (GetStats says
REBUILDING with the count left), and the builder saves while it works, so a kill during a rebuild resumes
it. A saved file whose content does not match its checksum is not loaded. The builder's rate cap
(``--index-build-rate``) holds a rebuild open while the tests look, so nothing here depends on timing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import channel, memory, pack, stub, unit, vectors, wait_indexed, wait_until

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

DIMENSION = 32
"""Random 32-d vectors are never near-duplicates of each other, so no write is merged into another."""
SAVED = 600
"""Memories in the graph of the last clean stop."""
UNSAVED = 400
"""Memories written after it, then the process is killed: the saved graph lacks them."""
SELF_HIT = 0.999
REBUILDING = memory_service_pb2.INDEX_STATE_REBUILDING
READY = memory_service_pb2.INDEX_STATE_READY


def _start(data_dir: Path, *args: str) -> Sidecar:
    return start_sidecar(data_dir, *args, dimension=DIMENSION)


def _write(service: Any, matrix: np.ndarray[Any, Any], first: int, namespace: str = "") -> list[int]:
    ids: list[int] = []
    for start in range(0, matrix.shape[0], 200):
        rows = enumerate(matrix[start : start + 200], start)
        batch = memory_service_pb2.RememberBatchRequest(
            memories=[memory(f"m{first + i}", pack(row), namespace=namespace) for i, row in rows]
        )
        ids += [r.memory.id for r in service.RememberBatch(batch).results]
    return ids


def _stats(service: Any) -> Any:
    return service.GetStats(memory_service_pb2.GetStatsRequest()).index


def _assert_each_finds_itself(service: Any, ids: list[int], matrix: np.ndarray[Any, Any]) -> None:
    """Recall by each memory's own vector: the memory first (similarity >= SELF_HIT), every score a number."""
    lost: list[tuple[int, int, float]] = []
    for memory_id, row in zip(ids, matrix, strict=True):
        response = service.Recall(memory_service_pb2.RecallRequest(query_vector=pack(row), k=5))
        sims = [m.similarity for m in response.memories] + [m.score for m in response.memories]
        assert all(math.isfinite(value) for value in sims), (memory_id, sims)
        top = response.memories[0] if response.memories else None
        if top is None or top.memory.id != memory_id or top.similarity < SELF_HIT:
            lost.append((memory_id, top.memory.id if top else 0, top.similarity if top else 0.0))
    assert not lost, f"{len(lost)} of {len(ids)} memories not found by their own vector (id, got, sim): {lost[:10]}"


@pytest.fixture
def behind(data_dir: Path) -> tuple[Path, list[int], np.ndarray[Any, Any]]:
    """A data directory whose saved graph holds SAVED memories and lacks the UNSAVED written before a SIGKILL."""
    return _behind(data_dir, in_files=False)


@pytest.fixture
def behind_in_files(data_dir: Path) -> tuple[Path, list[int], np.ndarray[Any, Any]]:
    """:func:`behind`, killed only once the fresh-tail files hold every UNSAVED vector (they are written by a
    thread of their own, so a kill right after the writes may find some still queued: read from RocksDB)."""
    return _behind(data_dir, in_files=True)


def _records_in_files(data_dir: Path) -> int:
    record = 8 * (1 + DIMENSION // 2 + 1)
    return sum((path.stat().st_size - 64) // record for path in (data_dir / "tail").glob("*.vectors"))


def _behind(
    data_dir: Path, *, in_files: bool, seed: int = 41, small: int = 0
) -> tuple[Path, list[int], np.ndarray[Any, Any]]:
    """The directory, ids and vectors of SAVED memories in the saved graph and UNSAVED written after it, then a kill;
    the last ``small`` of those in a namespace of their own ("small")."""
    matrix = vectors(SAVED + UNSAVED, DIMENSION, seed=seed)
    sidecar = _start(data_dir)
    try:
        service = stub(sidecar.unix_target)
        ids = _write(service, matrix[:SAVED], 0)
        wait_indexed(service)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    sidecar = _start(data_dir, "--index-save-interval-s", "3600")
    service = stub(sidecar.unix_target)
    last = SAVED + UNSAVED - small
    ids += _write(service, matrix[SAVED:last], SAVED)
    ids += _write(service, matrix[last:], last, namespace="small")
    if in_files:
        wait_until(lambda: _records_in_files(data_dir) >= UNSAVED, "the fresh-tail files to hold the unsaved vectors")
    sidecar.kill()
    return data_dir, ids, matrix


def test_serves_during_the_rebuild_and_recall_finds_every_acknowledged_write(
    behind: tuple[Path, list[int], np.ndarray[Any, Any]],
) -> None:
    data_dir, ids, matrix = behind
    sidecar = _start(data_dir, "--index-build-rate", "2")
    try:
        service = stub(sidecar.unix_target)
        health = health_pb2_grpc.HealthStub(channel(sidecar.unix_target))
        assert health.Check(health_pb2.HealthCheckRequest(service="")).status == health_pb2.HealthCheckResponse.SERVING
        first = _stats(service)
        assert first.state == REBUILDING
        assert first.rebuild_total == UNSAVED
        assert first.rebuild_reason == "saved index behind RocksDB"
        _assert_each_finds_itself(service, ids, matrix)
        # Still rebuilding after every recall above: they were answered before the graph had the vectors.
        after = _stats(service)
        assert after.state == REBUILDING, after
        assert after.rebuild_remaining > 0, after
        assert after.indexed_count + after.fresh_tail_count == SAVED + UNSAVED
        # Writes are not refused for the rebuild's sake, and are found at once too.
        extra = vectors(5, DIMENSION, seed=42)
        _assert_each_finds_itself(service, _write(service, extra, 10_000), extra)
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def test_a_kill_during_the_rebuild_resumes_it_from_the_last_save(
    behind: tuple[Path, list[int], np.ndarray[Any, Any]],
) -> None:
    data_dir, ids, matrix = behind
    sidecar = _start(data_dir, "--index-build-rate", "50", "--index-save-interval-s", "0.2")
    service = stub(sidecar.unix_target)
    saved_before = _stats(service).saved_at.ToNanoseconds()

    def saved_some() -> bool:
        stats = _stats(service)
        return stats.saved_at.ToNanoseconds() > saved_before and stats.rebuild_remaining < UNSAVED

    wait_until(saved_some, "a save during the rebuild")
    sidecar.kill()
    sidecar = _start(data_dir)
    try:
        service = stub(sidecar.unix_target)
        resumed = _stats(service)
        assert 0 <= resumed.rebuild_total < UNSAVED, resumed
        wait_until(lambda: _stats(service).state == READY, "the rebuild to finish")
        done = _stats(service)
        assert done.rebuild_remaining == 0, done
        assert done.indexed_count == SAVED + UNSAVED, done
        _assert_each_finds_itself(service, ids, matrix)
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def test_damaged_index_content_is_detected_and_never_scores_nan(data_dir: Path) -> None:
    matrix = vectors(SAVED, DIMENSION, seed=43)
    sidecar = _start(data_dir)
    try:
        service = stub(sidecar.unix_target)
        ids = _write(service, matrix, 0)
        wait_indexed(service)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    path = data_dir / "index.usearch"
    content = bytearray(path.read_bytes())
    # usearch writes the vectors first, after two 4-byte counts: all-ones bytes there are half-precision NaNs,
    # while the keys and links that follow stay intact and the size is unchanged (a silent load before checksums).
    vector_bytes = SAVED * DIMENSION * 2
    content[8 : 8 + vector_bytes] = b"\xff" * vector_bytes
    path.write_bytes(bytes(content))
    sidecar = _start(data_dir, "--index-build-rate", "2")
    try:
        service = stub(sidecar.unix_target)
        stats = _stats(service)
        assert stats.state == REBUILDING, stats
        assert stats.rebuild_total == SAVED, stats
        assert "checksum mismatch" in stats.rebuild_reason
        _assert_each_finds_itself(service, ids, matrix)
        queries = unit(vectors(20, DIMENSION, seed=44))
        for query in queries:
            response = service.Recall(memory_service_pb2.RecallRequest(query_vector=pack(query), k=20))
            assert len(response.memories) == 20
            assert all(math.isfinite(m.similarity) and math.isfinite(m.score) for m in response.memories)
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def test_a_start_maps_the_unsaved_vectors_from_the_fresh_tail_files(
    behind_in_files: tuple[Path, list[int], np.ndarray[Any, Any]],
) -> None:
    data_dir, ids, matrix = behind_in_files
    log = _restart_finding_every_write(data_dir, ids, matrix)
    assert f"{UNSAVED} of them mapped from the fresh-tail files, 0 read from RocksDB" in log


def test_damaged_and_torn_fresh_tail_files_fall_back_to_rocksdb(
    behind_in_files: tuple[Path, list[int], np.ndarray[Any, Any]],
) -> None:
    data_dir, ids, matrix = behind_in_files
    segment = max((data_dir / "tail").glob("*.vectors"), key=lambda path: path.stat().st_size)
    header, record = 64, 8 * (1 + DIMENSION // 2 + 1)
    content = bytearray(segment.read_bytes())
    assert (len(content) - header) // record == UNSAVED
    for row in (10, 200):  # an exponent bit flipped in two vectors (a bad sector, a stray write): far off if used
        content[header + row * record + 8 + 4 * 5 + 3] ^= 0x40
    segment.write_bytes(bytes(content[: len(content) - record // 3]))  # and the last record torn by a kill
    log = _restart_finding_every_write(data_dir, ids, matrix)
    assert f"{UNSAVED - 3} of them mapped from the fresh-tail files, 3 read from RocksDB" in log


def test_a_rebuild_read_in_place_answers_forgets_filters_and_writes_then_drains(data_dir: Path) -> None:
    # The unsaved vectors are scanned where the files hold them (not copied): a forget hides one at once, a
    # namespace's exact scan reads them by id, writes join the tail behind them, and the builder drains them.
    _, ids, matrix = _behind(data_dir, in_files=True, seed=43, small=20)
    small_ids = ids[-20:]
    sidecar = _start(data_dir, "--index-build-rate", "2")
    try:
        service = stub(sidecar.unix_target)
        assert _stats(service).rebuild_total == UNSAVED
        assert f"{UNSAVED} of them mapped from the fresh-tail files, 0 read from RocksDB" in sidecar.log()
        gone = ids[SAVED : SAVED + 5]
        service.Forget(memory_service_pb2.ForgetRequest(ids=gone, reason="test"))
        for memory_id, row in zip(gone, matrix[SAVED : SAVED + 5], strict=True):
            found = service.Recall(memory_service_pb2.RecallRequest(query_vector=pack(row), k=5)).memories
            assert memory_id not in [m.memory.id for m in found]
        kept = SAVED + 5
        _assert_each_finds_itself(service, ids[kept:-20], matrix[kept:-20])
        for memory_id, row in zip(small_ids, matrix[-20:], strict=True):  # exact scan of a small namespace
            request = memory_service_pb2.RecallRequest(
                query_vector=pack(row), k=3, filter=memory_service_pb2.RecallFilter(namespace="small")
            )
            top = service.Recall(request).memories[0]
            assert (top.memory.id, top.similarity >= SELF_HIT) == (memory_id, True)
        extra = vectors(5, DIMENSION, seed=44)
        _assert_each_finds_itself(service, _write(service, extra, 20_000), extra)
    finally:
        assert sidecar.stop() == 0, sidecar.log()

    sidecar = _start(data_dir)
    try:
        service = stub(sidecar.unix_target)
        wait_until(lambda: _stats(service).state == READY, "the rebuild to finish")
        assert _stats(service).indexed_count == SAVED + UNSAVED - len(gone) + len(extra)
        everyone = ids[:SAVED] + ids[kept:-20]
        _assert_each_finds_itself(service, everyone, np.concatenate([matrix[:SAVED], matrix[kept:-20]]))
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def _restart_finding_every_write(data_dir: Path, ids: list[int], matrix: np.ndarray[Any, Any]) -> str:
    """Start on the killed directory: the rebuild holds what the saved graph lacked, every memory finds itself.
    Returns the sidecar's log."""
    sidecar = _start(data_dir, "--index-build-rate", "2")
    try:
        service = stub(sidecar.unix_target)
        assert _stats(service).rebuild_total == UNSAVED
        _assert_each_finds_itself(service, ids, matrix)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    return sidecar.log()
