"""Limits against a real sidecar: sizes, counts, deadlines, a full disk and a data directory that turns read-only.

Each limit is refused with a clear status naming what was too big, and a
refused call writes nothing. The disk tests use real file systems: a small
tmpfs that fills up, and an ext4 loop file system that the kernel remounts
read-only after an error (``errors=remount-ro`` plus ext4's
``trigger_fs_error``); they skip only where mounting is impossible. The
kernel's per-process file size limit (RLIMIT_FSIZE) produces the same
refusal without any mount.
(The second sidecar on one data directory is tested in test_server_surface.py.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar, start_sidecar_with_file_size_limit
from helpers import (
    assert_all_readable,
    bad_fields,
    counts,
    memory,
    pack,
    status_details,
    stub,
    vec,
    vectors,
    wait_until,
    write_until_refused,
)

from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MIB = 1024 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 64 * MIB
DEFAULT_MAX_K = 1000
MAX_CONTENT_BYTES = 64
MAX_BATCH_ITEMS = 5
MAX_MEMORIES = 10


@contextlib.contextmanager
def nothing_written(service: Any) -> Iterator[None]:
    """The change log and the memory count do not move inside the block."""
    before = counts(service)
    yield
    assert counts(service) == before, "a refused request wrote something"


def refused(call: Callable[[], object], code: grpc.StatusCode) -> grpc.RpcError:
    """Run ``call``; it must fail with ``code`` and a message."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert error.code() == code, (error.code(), error.details())
    assert error.details(), f"{code} without a message"
    return error


def invalid(call: Callable[[], object], field: str) -> grpc.RpcError:
    """Run ``call``; it must fail with INVALID_ARGUMENT naming ``field``."""
    error = refused(call, grpc.StatusCode.INVALID_ARGUMENT)
    assert field in bad_fields(error), (bad_fields(error), error.details())
    return error


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """A sidecar with small content and batch limits (other limits at their defaults)."""
    sidecar = start_sidecar(
        tmp_path_factory.mktemp("limited"),
        "--max-content-bytes",
        str(MAX_CONTENT_BYTES),
        "--max-batch-items",
        str(MAX_BATCH_ITEMS),
        "--workers",
        "2",
    )
    yield sidecar
    sidecar.stop()


# ---- message size, content, batch, k -------------------------------------------------------------


def test_message_over_the_size_limit_is_resource_exhausted(limited: Sidecar) -> None:
    service = stub(limited.unix_target)
    with nothing_written(service):
        error = refused(
            lambda: service.Remember(
                memory_service_pb2.RememberRequest(memory=memory("big", b"\0" * (DEFAULT_MAX_MESSAGE_BYTES + 8)))
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
        assert "larger than max" in error.details(), error.details()
        # Just under the limit the message is read, and validation names the field.
        invalid(
            lambda: service.Remember(
                memory_service_pb2.RememberRequest(memory=memory("big", b"\0" * (DEFAULT_MAX_MESSAGE_BYTES - MIB)))
            ),
            "memory.vector",
        )
    assert limited.process.poll() is None


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_content_and_query_over_max_content_bytes(limited: Sidecar, transport: str) -> None:
    service = stub(limited.unix_target if transport == "unix" else limited.tcp_target)
    over = "é" * (MAX_CONTENT_BYTES // 2) + "x"  # the limit counts UTF-8 bytes, not characters
    with nothing_written(service):
        invalid(
            lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory(over, vec(1)))), "memory.content"
        )
        invalid(
            lambda: service.RememberBatch(
                memory_service_pb2.RememberBatchRequest(memories=[memory("fine", vec(1)), memory(over, vec(2))])
            ),
            "memories[1].content",
        )
        invalid(
            lambda: service.RememberStream(
                iter([memory_service_pb2.RememberStreamRequest(memory=memory(over, vec(3)))])
            ),
            "[0].memory.content",
        )
        invalid(lambda: service.Recall(memory_service_pb2.RecallRequest(query=over, query_vector=vec(1), k=1)), "query")
    at_limit = "x" * MAX_CONTENT_BYTES
    service.Remember(memory_service_pb2.RememberRequest(memory=memory(at_limit, vec(4))))


def test_batch_over_max_batch_items_is_refused_whole(limited: Sidecar) -> None:
    service = stub(limited.unix_target)
    rows = [pack(row) for row in vectors(MAX_BATCH_ITEMS + 1, seed=21)]
    items = [memory(f"batch limit {i}", rows[i]) for i in range(MAX_BATCH_ITEMS + 1)]
    with nothing_written(service):
        error = invalid(
            lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)), "memories"
        )
        assert f"at most {MAX_BATCH_ITEMS}" in error.details()
    response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items[:MAX_BATCH_ITEMS]))
    assert len(response.results) == MAX_BATCH_ITEMS


def test_k_and_id_lists_over_max_k(limited: Sidecar) -> None:
    service = stub(limited.unix_target)
    too_many = list(range(1, DEFAULT_MAX_K + 2))
    with nothing_written(service):
        invalid(lambda: service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(1), k=DEFAULT_MAX_K + 1)), "k")
        invalid(lambda: service.Get(memory_service_pb2.GetRequest(ids=too_many)), "ids")
        invalid(lambda: service.Forget(memory_service_pb2.ForgetRequest(ids=too_many)), "ids")
        invalid(
            lambda: service.ReportOutcome(
                memory_service_pb2.ReportOutcomeRequest(
                    used_memory_ids=too_many, outcome=memory_service_pb2.OUTCOME_SUCCESS
                )
            ),
            "used_memory_ids",
        )
    # At the limit the calls are answered (with what exists).
    service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(1), k=DEFAULT_MAX_K))
    found = service.Get(memory_service_pb2.GetRequest(ids=too_many[:DEFAULT_MAX_K]))
    assert len(found.memories) + len(found.missing_ids) == DEFAULT_MAX_K


# ---- maximum memories per data directory -----------------------------------------------------------


def _send_batch(service: Any, start: int, count: int, request_id: str = "") -> Any:
    rows = [pack(row) for row in vectors(count, seed=1000 + start)]
    # Facts, not episodes: an identical fact restated confirms the stored one instead of adding another.
    items = [memory(f"capacity memory {start + i}", rows[i], kind=memory_pb2.MEMORY_KIND_FACT) for i in range(count)]
    return service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items, request_id=request_id))


def _batch(service: Any, start: int, count: int, request_id: str = "") -> list[int]:
    return [r.memory.id for r in _send_batch(service, start, count, request_id).results]


def _full(call: Callable[[], object]) -> None:
    error = refused(call, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "--max-memories" in error.details(), error.details()
    assert status_details(error)[1].get("limit") == str(MAX_MEMORIES)


def test_max_memories_refuses_whole_writes_and_lets_replays_through(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir, "--max-memories", str(MAX_MEMORIES))
    try:
        service = stub(sidecar.unix_target)
        first = _batch(service, 0, MAX_MEMORIES - 2, request_id="fill")
        with nothing_written(service):
            # Three do not fit in the two places left: none is stored.
            _full(lambda: _batch(service, 100, 3))
        two = _batch(service, 200, 2)
        assert counts(service)[1] == MAX_MEMORIES
        with nothing_written(service):
            _full(lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("one more", vec(300)))))
            _full(
                lambda: service.RememberStream(
                    iter([memory_service_pb2.RememberStreamRequest(memory=memory("streamed", vec(301)))])
                )
            )
            _full(
                lambda: service.Supersede(
                    memory_service_pb2.SupersedeRequest(old_id=first[0], new_memory=memory("newer", vec(302)))
                )
            )
            # Nothing new: a retried call replays, a restatement confirms, superseding by an existing id works.
            again = _send_batch(service, 0, MAX_MEMORIES - 2, request_id="fill")
            assert again.replayed
            assert [r.memory.id for r in again.results] == first
        confirmed = _send_batch(service, 200, 1).results[0]  # the same text and vector as two[0]
        assert confirmed.outcome == memory_service_pb2.WRITE_OUTCOME_CONFIRMED
        assert confirmed.memory.id == two[0]
        assert counts(service)[1] == MAX_MEMORIES
        # Forgetting makes room again.
        service.Forget(memory_service_pb2.ForgetRequest(ids=first[:1]))
        added = service.Remember(memory_service_pb2.RememberRequest(memory=memory("fits now", vec(400))))
        assert added.result.memory.id > two[-1]
        _full(lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("full again", vec(401)))))
    finally:
        sidecar.kill()
    # The limit holds after a crash and restart (the count is rebuilt from RocksDB).
    restarted = start_sidecar(data_dir, "--max-memories", str(MAX_MEMORIES))
    try:
        service = stub(restarted.unix_target)
        assert counts(service)[1] == MAX_MEMORIES
        with nothing_written(service):
            _full(lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("after crash", vec(402)))))
    finally:
        restarted.stop()


# ---- deadlines ----------------------------------------------------------------------------------------


def test_watch_ends_at_its_deadline_and_frees_its_worker(limited: Sidecar) -> None:
    """The limited sidecar has 2 worker threads: two Watches past their deadline must give them back."""
    service = stub(limited.unix_target)
    codes: list[grpc.StatusCode] = []

    def watch() -> None:
        try:
            for _ in service.Watch(memory_service_pb2.WatchRequest(), timeout=1.0):
                pass
        except grpc.RpcError as error:
            codes.append(error.code())

    threads = [threading.Thread(target=watch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED] * 2
    for _ in range(4):  # would wait for a worker until its own deadline if the watches still held them
        service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=30)


def test_stalled_stream_is_cut_at_its_deadline_and_writes_nothing(limited: Sidecar) -> None:
    service = stub(limited.unix_target)
    release = threading.Event()

    def stalled() -> Iterator[memory_service_pb2.RememberStreamRequest]:
        yield memory_service_pb2.RememberStreamRequest(memory=memory("stalled 1", vec(51)), request_id="stall-1")
        yield memory_service_pb2.RememberStreamRequest(memory=memory("stalled 2", vec(52)), request_id="stall-2")
        release.wait(60)  # the client stops sending without closing the stream

    try:
        with nothing_written(service):
            error = refused(lambda: service.RememberStream(stalled(), timeout=1.5), grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        release.set()
    # The sidecar answered before the deadline, though the client had gone quiet: it says nothing was stored.
    metadata = status_details(error)[1]
    assert (metadata.get("committed_count"), metadata.get("failed_index")) == ("0", "0"), metadata
    # The same items, sent again in full, are stored once each (nothing of the cut stream lingered).
    again = service.RememberStream(
        iter(
            [
                memory_service_pb2.RememberStreamRequest(memory=memory("stalled 1", vec(51)), request_id="stall-1"),
                memory_service_pb2.RememberStreamRequest(memory=memory("stalled 2", vec(52)), request_id="stall-2"),
            ]
        )
    )
    assert again.created_count == 2
    assert again.replayed_count == 0


def test_a_stream_still_sending_at_its_deadline_says_which_items_were_stored(limited: Sidecar) -> None:
    service = stub(limited.unix_target)
    items = [
        memory_service_pb2.RememberStreamRequest(memory=memory(f"flowing {i}", vec(1000 + i)), request_id=f"flow-{i}")
        for i in range(20_000)
    ]

    def flowing() -> Iterator[memory_service_pb2.RememberStreamRequest]:
        for item in items:
            yield item
            time.sleep(0.001)  # still sending when the deadline comes

    before = counts(service)[1]
    error = refused(lambda: service.RememberStream(flowing(), timeout=2.0), grpc.StatusCode.DEADLINE_EXCEEDED)
    metadata = status_details(error)[1]
    # Before, the client's own deadline fired and nothing said what the sidecar had stored.
    stored = int(metadata["committed_count"])
    assert metadata["failed_index"] == str(stored)
    assert f"items [0, {stored}) are stored" in error.details()
    assert 0 < stored < len(items)
    assert counts(service)[1] == before + stored
    # Exactly that prefix: resent with the next hundred, the prefix is replayed and only the hundred are new.
    again = service.RememberStream(iter(items[: stored + 100]))
    assert (again.replayed_count, again.created_count) == (stored, 100)


def test_a_stream_without_a_deadline_is_served_to_its_end(limited: Sidecar) -> None:
    # gRPC reports "no deadline" as a huge time remaining: it must not become a wait the platform cannot time.
    raw = memory_service_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(limited.unix_target))
    items = [memory_service_pb2.RememberStreamRequest(memory=memory(f"open {i}", vec(3000 + i))) for i in range(3)]
    assert len(raw.RememberStream(iter(items)).ids) == 3


# ---- full disk and read-only data directory ---------------------------------------------------------


def _mount(command: list[str], what: str) -> None:
    if shutil.which(command[0]) is None:
        pytest.skip(f"mounting is impossible here: no {command[0]} command ({what} needs a real mount)")
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"mounting is impossible here ({done.stderr.strip() or done.returncode}): {what} needs one")


@contextlib.contextmanager
def mounted(command: list[str], target: Path, what: str) -> Iterator[Path]:
    """Mount with ``command`` (whose last argument is ``target``); unmount afterwards."""
    target.mkdir(parents=True, exist_ok=True)
    _mount(command, what)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, timeout=60)


def _reads_work(service: Any, acked: dict[int, str]) -> None:
    ids = sorted(acked)[-100:]
    found = service.Get(memory_service_pb2.GetRequest(ids=ids))
    assert [m.content for m in found.memories] == [acked[i] for i in ids]
    assert service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(7), k=5)).memories
    assert counts(service)[1] == len(acked)


def _all_there(data_dir: Path, acked: dict[int, str]) -> None:
    restarted = start_sidecar(data_dir)
    try:
        service = stub(restarted.unix_target)
        assert_all_readable(service, acked)
        service.Remember(memory_service_pb2.RememberRequest(memory=memory("writes work again", vec(8))))
    finally:
        restarted.stop()


def test_full_disk_refuses_writes_cleanly_keeps_reads_and_loses_nothing(tmp_path: Path) -> None:
    with mounted(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(tmp_path / "small")], tmp_path / "small", "a full disk"
    ) as small:
        sidecar = start_sidecar(small / "data")
        try:
            service = stub(sidecar.unix_target)
            acked, error = write_until_refused(service)
            assert acked, "the disk was full before the first write"
            assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED), error.details()
            assert "disk is full" in error.details(), error.details()
            assert status_details(error)[1].get("retryable") == "true"
            with nothing_written(service):
                refused(
                    lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("no room", vec(9)))),
                    error.code(),
                )
            _reads_work(service, acked)
        finally:
            assert sidecar.stop() == 0, sidecar.log()
        assert "Traceback" not in sidecar.log(), sidecar.log()
        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True, timeout=60)
        _all_there(small / "data", acked)


def test_file_size_limit_refuses_writes_cleanly_without_a_mount(tmp_path: Path) -> None:
    """The same refusal with no mount at all: the kernel's per-process file size limit (RLIMIT_FSIZE)."""
    data_dir = tmp_path / "data"
    sidecar = start_sidecar_with_file_size_limit(data_dir, 2 * MIB)
    try:
        service = stub(sidecar.unix_target)
        acked, error = write_until_refused(service)
        assert acked, "the limit was hit before the first write"
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert "file size limit" in error.details(), error.details()
        _reads_work(service, acked)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    assert "Traceback" not in sidecar.log(), sidecar.log()
    _all_there(data_dir, acked)


def test_data_dir_turning_read_only_refuses_writes_cleanly_and_keeps_reads(tmp_path: Path) -> None:
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mounting an ext4 loop file system is impossible here: no mkfs.ext4")
    image = tmp_path / "ext4.img"
    with image.open("wb") as file:
        file.truncate(64 * MIB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, timeout=120)
    target = tmp_path / "ext4"
    command = ["mount", "-o", "loop,errors=remount-ro", str(image), str(target)]
    with mounted(command, target, "a data directory that turns read-only"):
        device = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(target)], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
        trigger = Path("/sys/fs/ext4") / os.path.basename(device) / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"this kernel has no {trigger}: cannot make a mounted ext4 read-only under a running sidecar")
        sidecar = start_sidecar(target / "data")
        try:
            service = stub(sidecar.unix_target)
            rows = [pack(row) for row in vectors(60, seed=5)]
            acked = {}
            for start in range(0, 60, 20):
                response = service.RememberBatch(
                    memory_service_pb2.RememberBatchRequest(
                        memories=[memory(f"before read-only {i}", rows[i]) for i in range(start, start + 20)]
                    )
                )
                acked.update({r.memory.id: r.memory.content for r in response.results})
            # The kernel remounts the file system read-only, as after a disk error: RocksDB's open files included.
            trigger.write_text("memevo read-only test\n")
            with nothing_written(service):
                error = refused(
                    lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("refused", vec(10)))),
                    grpc.StatusCode.UNAVAILABLE,
                )
                assert "read-only" in error.details(), error.details()
            _reads_work(service, acked)
        finally:
            assert sidecar.stop() == 0, sidecar.log()
        assert "Traceback" not in sidecar.log(), sidecar.log()
    subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True, check=False, timeout=120)
    with mounted(["mount", "-o", "loop", str(image), str(target)], target, "reopening the data directory"):
        _all_there(target / "data", acked)


# ---- back-pressure from the ANN index -----------------------------------------------------------------

MAX_FRESH_TAIL = 20


def test_writes_past_the_fresh_tail_bound_are_refused_whole_and_accepted_once_there_is_room(data_dir: Path) -> None:
    # The bound counts the vectors acknowledged but not yet in the graph: with an empty tail a write of
    # more than MAX_FRESH_TAIL memories can never fit and is refused before anything is stored.
    sidecar = start_sidecar(data_dir, "--max-fresh-tail", str(MAX_FRESH_TAIL))
    try:
        service = stub(sidecar.unix_target)
        rows = [pack(row) for row in vectors(MAX_FRESH_TAIL + 1, seed=77)]
        items = [memory(f"backlog memory {i}", rows[i]) for i in range(MAX_FRESH_TAIL + 1)]
        with nothing_written(service):
            error = refused(
                lambda: service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items)),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
            assert "behind" in error.details(), error.details()
            assert "fresh_tail" in status_details(error)[1]
            error = refused(
                lambda: service.RememberStream(iter(memory_service_pb2.RememberStreamRequest(memory=m) for m in items)),
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
            metadata = status_details(error)[1]
            assert (metadata.get("committed_count"), metadata.get("failed_index")) == ("0", "0"), metadata
        wait_until(
            lambda: service.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count == 0,
            "an empty fresh tail",
        )
        written = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items[:MAX_FRESH_TAIL]))
        assert len(written.results) == MAX_FRESH_TAIL
        found = service.Recall(memory_service_pb2.RecallRequest(query_vector=rows[MAX_FRESH_TAIL - 1], k=1))
        assert found.memories[0].memory.id == written.results[-1].memory.id
    finally:
        sidecar.stop()
