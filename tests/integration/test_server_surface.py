"""The server's surface: health, reflection, token auth, lock, socket, shutdown, recall filters."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from helpers import (
    channel,
    counts,
    memory,
    pack,
    recall_ids,
    stub,
    unit,
    vec,
    vectors,
    wait_indexed,
    wait_until,
    watch_events,
)

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

SERVICE = "memevo.v1.MemoryService"


# ---- health and reflection ------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("service_name", ["", SERVICE])
def test_health_is_serving(shared_sidecar: Sidecar, transport: str, service_name: str) -> None:
    target = shared_sidecar.unix_target if transport == "unix" else shared_sidecar.tcp_target
    health = health_pb2_grpc.HealthStub(channel(target))
    response = health.Check(health_pb2.HealthCheckRequest(service=service_name))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_health_of_unknown_service_is_not_found(shared_sidecar: Sidecar) -> None:
    health = health_pb2_grpc.HealthStub(channel(shared_sidecar.unix_target))
    with pytest.raises(grpc.RpcError) as caught:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_describes_the_service(shared_sidecar: Sidecar) -> None:
    database = ProtoReflectionDescriptorDatabase(channel(shared_sidecar.tcp_target))
    services = set(database.get_services())
    assert SERVICE in services
    assert "grpc.health.v1.Health" in services
    pool = DescriptorPool(database)
    service = pool.FindServiceByName(SERVICE)
    remember = service.methods_by_name["Remember"]
    assert remember.input_type.full_name == "memevo.v1.RememberRequest"
    assert remember.output_type.full_name == "memevo.v1.RememberResponse"
    assert "memory" in remember.input_type.fields_by_name
    assert remember.input_type.fields_by_name["memory"].message_type.full_name == "memevo.v1.MemoryInput"
    # Every RPC of the contract is advertised.
    contract = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"]
    assert set(service.methods_by_name) == set(contract.methods_by_name)
    stream = service.methods_by_name["RememberStream"]
    assert stream.client_streaming
    assert not stream.server_streaming
    assert service.methods_by_name["Watch"].server_streaming


def test_reflection_resolves_methods_and_fields_by_name(shared_sidecar: Sidecar) -> None:
    """What ``grpcurl describe memevo.v1.MemoryService.Recall`` and ghz ask: the file of a method's (or a field's)
    full name. The runtime's default pool knows only top-level symbols; these used to be "Symbol not found"."""
    database = ProtoReflectionDescriptorDatabase(channel(shared_sidecar.tcp_target))
    for symbol in ("memevo.v1.MemoryService.Recall", "memevo.v1.RecallRequest.query"):
        assert database.FindFileContainingSymbol(symbol).name == "memevo/v1/memory_service.proto"
    # An unknown member is still unknown (asked raw: the client-side database would fall back on its own).
    stub = reflection_pb2_grpc.ServerReflectionStub(channel(shared_sidecar.tcp_target))
    asked = reflection_pb2.ServerReflectionRequest(file_containing_symbol="memevo.v1.MemoryService.NoSuchMethod")
    (answer,) = list(stub.ServerReflectionInfo(iter([asked]), timeout=10))
    assert answer.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


# ---- token auth -----------------------------------------------------------------------------

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def token_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Any:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    process = start_sidecar(tmp_path_factory.mktemp("token-data"), "--token-file", str(token_file))
    yield process
    process.stop()


def _expect_code(call: Callable[[], object], code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, (caught.value.code(), caught.value.details())


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", ""], ids=["none", "wrong", "longer", "empty"])
def test_calls_without_the_token_are_unauthenticated(token_sidecar: Sidecar, transport: str, token: str | None) -> None:
    target = token_sidecar.unix_target if transport == "unix" else token_sidecar.tcp_target
    service = stub(target, token)
    before = counts(stub(target, TOKEN))
    unauthenticated = grpc.StatusCode.UNAUTHENTICATED
    _expect_code(
        lambda: service.Remember(memory_service_pb2.RememberRequest(memory=memory("x", vec(1)))), unauthenticated
    )
    _expect_code(lambda: service.GetStats(memory_service_pb2.GetStatsRequest()), unauthenticated)
    _expect_code(
        lambda: service.RememberStream(
            iter([memory_service_pb2.RememberStreamRequest(memory=memory("x", vec(1))) for _ in range(3)])
        ),
        unauthenticated,
    )
    _expect_code(lambda: watch_events(service, 1, after_sequence=0, timeout_s=10), unauthenticated)
    # Nothing the refused calls carried was stored.
    assert counts(stub(target, TOKEN)) == before


def test_calls_with_the_token_succeed(token_sidecar: Sidecar) -> None:
    for target in (token_sidecar.unix_target, token_sidecar.tcp_target):
        service = stub(target, TOKEN)
        before_sequence, before_total = counts(service)
        written = service.Remember(memory_service_pb2.RememberRequest(memory=memory("with token", vec(2))))
        streamed = service.RememberStream(
            iter([memory_service_pb2.RememberStreamRequest(memory=memory(f"s{i}", vec(3 + i))) for i in range(2)])
        )
        assert streamed.created_count == 2
        events = watch_events(service, 3, after_sequence=before_sequence)
        assert [e.memory_id for e in events] == [written.result.memory.id, *streamed.ids]
        assert counts(service) == (before_sequence + 3, before_total + 3)


def test_health_needs_no_token(token_sidecar: Sidecar) -> None:
    for target in (token_sidecar.unix_target, token_sidecar.tcp_target):
        health = health_pb2_grpc.HealthStub(channel(target))
        response = health.Check(health_pb2.HealthCheckRequest(service=SERVICE))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


# ---- process: lock, socket, shutdown ---------------------------------------------------------


def test_second_sidecar_on_the_same_data_dir_is_refused(sidecar: Sidecar, tmp_path: Path) -> None:
    service = stub(sidecar.unix_target)
    service.Remember(memory_service_pb2.RememberRequest(memory=memory("first", vec(1))))
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "memevo.sidecar.cli",
            "serve",
            "--data",
            str(sidecar.data_dir),
            "--listen",
            f"unix://{tmp_path / 'second.sock'}",
            "--listen",
            "127.0.0.1:0",
            "--embedder",
            "none",
            "--dimension",
            "8",
            "--ready-file",
            str(tmp_path / "ready.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode != 0
    output = second.stdout + second.stderr
    assert "lock" in output.lower(), output
    assert str(sidecar.data_dir) in output, output
    assert "Traceback" not in output, output
    assert not (tmp_path / "ready.json").exists()
    # The first sidecar is unharmed.
    assert counts(service) == (1, 1)
    assert sidecar.process.poll() is None


def test_data_dir_keeps_its_dimension(data_dir: Path) -> None:
    first = start_sidecar(data_dir, dimension=8)
    first.stop()
    try:
        wrong = start_sidecar(data_dir, dimension=16)
    except RuntimeError as error:
        message = str(error)
    else:
        wrong.stop()
        pytest.fail("a data directory of 8-d vectors was opened for 16-d vectors")
    assert "8-d" in message, message
    assert "16-d" in message, message
    assert "Traceback" not in message, message


def test_unix_socket_is_private(sidecar: Sidecar) -> None:
    path = Path(sidecar.unix_target[len("unix://") :])
    mode = os.stat(path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600, oct(stat.S_IMODE(mode))


def test_sigterm_exits_cleanly_and_removes_the_socket(data_dir: Path) -> None:
    process = start_sidecar(data_dir)
    service = stub(process.unix_target)
    service.Remember(memory_service_pb2.RememberRequest(memory=memory("kept", vec(1))))
    path = Path(process.unix_target[len("unix://") :])
    assert path.exists()
    assert process.stop() == 0, process.log()
    assert not path.exists(), "the unix socket file was left behind"
    assert "Traceback" not in process.log(), process.log()
    # The clean stop kept what was written and saved the index.
    assert (data_dir / "index.usearch").exists()
    again = start_sidecar(data_dir)
    try:
        assert counts(stub(again.tcp_target)) == (1, 1)
    finally:
        again.stop()


def _serve_command(data_dir: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "memevo.sidecar.cli",
        "serve",
        "--data",
        str(data_dir),
        "--listen",
        f"unix://{run_dir / 'memevo.sock'}",
        "--embedder",
        "none",
        "--dimension",
        "8",
        "--ready-file",
        str(run_dir / "ready.json"),
    ]


def test_sigterm_right_after_ready_exits_cleanly(tmp_path: Path) -> None:
    """A supervisor may stop a sidecar the moment it reports ready; the signal must never be lost or hang."""

    def cycle(number: int) -> tuple[int | None, str]:
        run_dir = tmp_path / f"run{number}"
        run_dir.mkdir()
        log_path = run_dir / "log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                _serve_command(tmp_path / f"data{number}", run_dir), stdout=log, stderr=subprocess.STDOUT
            )
        try:
            deadline = time.monotonic() + 60
            while not (run_dir / "ready.json").exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=30), log_path.read_text()
            except subprocess.TimeoutExpired:
                return None, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)

    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(cycle, range(6)))
    hung = [log for code, log in outcomes if code is None]
    assert not hung, f"{len(hung)} of 6 sidecars did not exit within 30 s of SIGTERM; log:\n{hung[0]}"
    assert [code for code, _ in outcomes] == [0] * 6, outcomes


def test_second_sigterm_during_shutdown_does_not_hang(data_dir: Path) -> None:
    """SIGTERM twice (or Ctrl-C twice) while the first shutdown drains: the process still exits."""
    process = start_sidecar(data_dir, "--grace-s", "2")
    service = stub(process.unix_target)
    kept = _remember(service, memory("kept", vec(1)))
    release = threading.Event()
    chunk = 512  # the server commits a stream in groups of this size: seeing them stored proves the call is open

    def slow_stream() -> Iterator[memory_service_pb2.RememberStreamRequest]:
        for i in range(chunk):
            yield memory_service_pb2.RememberStreamRequest(memory=memory(f"streamed {i}", vec(10 + i)))
        release.wait(timeout=30)  # keeps the call open, so the first shutdown drains for its grace period

    stream = service.RememberStream.future(slow_stream(), timeout=40)
    try:
        wait_until(lambda: counts(service)[1] >= 1 + chunk, "the stream's first group to be stored")
        process.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # not a timing assertion: only makes the second signal land during the drain
        process.process.send_signal(signal.SIGTERM)
        try:
            process.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.process.kill()
            process.process.wait(timeout=30)
            pytest.fail(f"the sidecar hung after a second SIGTERM; log:\n{process.log()}")
    finally:
        release.set()
        stream.cancel()
    again = start_sidecar(data_dir)
    try:
        got = stub(again.unix_target).Get(memory_service_pb2.GetRequest(ids=[kept.id]))
        assert [m.content for m in got.memories] == ["kept"]
    finally:
        again.stop()


def test_stale_socket_of_a_killed_sidecar_is_replaced(data_dir: Path) -> None:
    first = start_sidecar(data_dir)
    socket_path = first.unix_target[len("unix://") :]
    first.kill()
    assert Path(socket_path).exists()
    second = start_sidecar(data_dir, "--listen", f"unix://{socket_path}")
    try:
        assert counts(stub(f"unix://{socket_path}")) == (0, 0)
    finally:
        second.stop()


# ---- recall filters -------------------------------------------------------------------------


def _remember(service: Any, item: memory_pb2.MemoryInput) -> memory_pb2.Memory:
    return service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory


def _recall(service: Any, query: bytes, **fields: Any) -> list[memory_service_pb2.RecalledMemory]:
    return list(service.Recall(memory_service_pb2.RecallRequest(query_vector=query, **fields)).memories)


def _filter(namespace: str, **fields: Any) -> memory_service_pb2.RecallFilter:
    return memory_service_pb2.RecallFilter(namespace=namespace, **fields)


def test_namespace_isolation(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    query = vec(100)
    in_a = _remember(service, memory("secret of a", query, namespace="iso-a"))
    in_b = _remember(service, memory("something of b", vec(101), namespace="iso-b"))
    assert in_a.namespace == "iso-a"
    ids_b = recall_ids(service, query, k=1000, filter=_filter("iso-b"))
    assert ids_b == [in_b.id]
    assert recall_ids(service, query, k=1000, filter=_filter("iso-a")) == [in_a.id]
    assert recall_ids(service, query, k=1000, filter=_filter("iso-never-written")) == []
    # The default namespace is its own namespace too.
    in_default = _remember(service, memory("default one", vec(102)))
    assert in_default.namespace == "default"
    default_ids = recall_ids(service, query, k=1000)
    assert in_a.id not in default_ids
    assert in_b.id not in default_ids
    assert in_default.id in default_ids


def test_kind_filter(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "kinds"
    fact = _remember(service, memory("fact", vec(200), namespace=ns, kind=memory_pb2.MEMORY_KIND_FACT))
    pref = _remember(service, memory("pref", vec(201), namespace=ns, kind=memory_pb2.MEMORY_KIND_PREFERENCE))
    episode = _remember(service, memory("episode (default kind)", vec(202), namespace=ns))
    assert episode.kind == memory_pb2.MEMORY_KIND_EPISODE
    query = vec(200)
    only_facts = _recall(service, query, k=100, filter=_filter(ns, kinds=[memory_pb2.MEMORY_KIND_FACT]))
    assert [m.memory.id for m in only_facts] == [fact.id]
    two = recall_ids(
        service,
        query,
        k=100,
        filter=_filter(ns, kinds=[memory_pb2.MEMORY_KIND_PREFERENCE, memory_pb2.MEMORY_KIND_EPISODE]),
    )
    assert sorted(two) == sorted([pref.id, episode.id])
    assert recall_ids(service, query, k=100, filter=_filter(ns, kinds=[memory_pb2.MEMORY_KIND_STRATEGY])) == []


def test_entity_filter(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "entities"
    alice = _remember(service, memory("alice likes tea", vec(300), namespace=ns, entity="user:alice"))
    _remember(service, memory("bob likes tea", vec(300), namespace=ns, entity="user:bob"))
    _remember(service, memory("nobody", vec(300), namespace=ns))
    # An entity used in another namespace does not leak in.
    _remember(service, memory("alice elsewhere", vec(300), namespace="entities-other", entity="user:alice"))
    assert recall_ids(service, vec(300), k=100, filter=_filter(ns, entity="user:alice")) == [alice.id]
    assert recall_ids(service, vec(300), k=100, filter=_filter(ns, entity="user:carol")) == []


def test_tag_filter_requires_all_tags(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "tags"
    both = _remember(service, memory("both", vec(400), namespace=ns, tags=["red", "round"]))
    red = _remember(service, memory("red", vec(401), namespace=ns, tags=["red"]))
    _remember(service, memory("round", vec(402), namespace=ns, tags=["round"]))
    _remember(service, memory("untagged", vec(403), namespace=ns))
    assert recall_ids(service, vec(400), k=100, filter=_filter(ns, tags=["red", "round"])) == [both.id]
    assert sorted(recall_ids(service, vec(400), k=100, filter=_filter(ns, tags=["red"]))) == sorted([both.id, red.id])
    assert recall_ids(service, vec(400), k=100, filter=_filter(ns, tags=["red", "blue"])) == []


def _stamp(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def test_valid_from_range(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "valid-from"
    y2020, y2021, y2022 = 1_577_836_800, 1_609_459_200, 1_640_995_200
    old = _remember(service, memory("2020", vec(500), namespace=ns, valid_from=_stamp(y2020)))
    mid = _remember(service, memory("2021", vec(501), namespace=ns, valid_from=_stamp(y2021)))
    new = _remember(service, memory("2022", vec(502), namespace=ns, valid_from=_stamp(y2022)))
    now = _remember(service, memory("now (default valid_from)", vec(503), namespace=ns))
    assert mid.valid_from.seconds == y2021
    assert now.valid_from.seconds > y2022

    def between(after: int | None, before: int | None) -> list[int]:
        flt = _filter(ns)
        if after is not None:
            flt.valid_from_after.CopyFrom(_stamp(after))
        if before is not None:
            flt.valid_from_before.CopyFrom(_stamp(before))
        return sorted(recall_ids(service, vec(500), k=100, filter=flt))

    # "after" is inclusive, "before" exclusive.
    assert between(y2021, y2022) == [mid.id]
    assert between(y2021, None) == sorted([mid.id, new.id, now.id])
    assert between(None, y2021) == [old.id]
    assert between(None, y2022 + 1) == sorted([old.id, mid.id, new.id])
    assert between(y2022 + 1, y2022 + 2) == []


def test_hard_forget(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "forget-hard"
    gone = _remember(service, memory("to forget", vec(600), namespace=ns))
    kept = _remember(service, memory("to keep", vec(601), namespace=ns))
    before_sequence, before_total = counts(service)
    response = service.Forget(memory_service_pb2.ForgetRequest(ids=[gone.id, 999_999], reason="test"))
    assert list(response.forgotten_ids) == [gone.id]
    assert list(response.missing_ids) == [999_999]
    assert counts(service) == (before_sequence + 1, before_total - 1)
    assert recall_ids(service, vec(600), k=100, filter=_filter(ns)) == [kept.id]
    assert recall_ids(service, vec(600), k=100, filter=_filter(ns), mode=memory_service_pb2.RECALL_MODE_HISTORY) == [
        kept.id
    ]
    got = service.Get(memory_service_pb2.GetRequest(ids=[gone.id, kept.id]))
    assert list(got.missing_ids) == [gone.id]
    assert [m.id for m in got.memories] == [kept.id]
    # The tombstone is in the change log.
    tombstone = watch_events(service, 1, after_sequence=before_sequence)[0]
    assert tombstone.memory_id == gone.id
    assert tombstone.to_state == memory_pb2.MEMORY_STATE_EVICTED
    # Forgetting again finds nothing.
    again = service.Forget(memory_service_pb2.ForgetRequest(ids=[gone.id]))
    assert list(again.forgotten_ids) == []
    assert list(again.missing_ids) == [gone.id]


def test_forget_keeping_history(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "forget-soft"
    old = _remember(service, memory("outdated", vec(700), namespace=ns))
    current = _remember(service, memory("current", vec(701), namespace=ns))
    response = service.Forget(memory_service_pb2.ForgetRequest(ids=[old.id], keep_history=True, reason="outdated"))
    assert list(response.forgotten_ids) == [old.id]
    got = service.Get(memory_service_pb2.GetRequest(ids=[old.id]))
    assert list(got.missing_ids) == []
    record = got.memories[0]
    assert record.state == memory_pb2.MEMORY_STATE_OBSOLETE
    assert record.content == "outdated"
    assert record.HasField("valid_to")
    assert recall_ids(service, vec(700), k=100, filter=_filter(ns)) == [current.id]
    history = _recall(service, vec(700), k=100, filter=_filter(ns), mode=memory_service_pb2.RECALL_MODE_HISTORY)
    assert [m.memory.id for m in history] == [old.id, current.id]
    assert history[0].memory.state == memory_pb2.MEMORY_STATE_OBSOLETE
    assert history[0].similarity == pytest.approx(1.0, abs=2e-3)  # the index holds half-precision vectors
    assert history[0].hint != history[1].hint, "an obsolete memory is annotated like a current one"


def test_include_vectors_returns_the_original_bytes(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "vectors"
    raw = pack(np.asarray([3.0, -4.0, 0.5, 0.0, 1e-3, 7.25, -0.125, 2.0]))  # not unit length
    stored = _remember(service, memory("v", raw, namespace=ns))
    assert stored.vector == b"", "the write result carries the vector although nobody asked"
    with_vectors = _recall(service, raw, k=1, filter=_filter(ns), include_vectors=True)
    assert with_vectors[0].memory.vector == raw
    without = _recall(service, raw, k=1, filter=_filter(ns))
    assert without[0].memory.vector == b""
    got = service.Get(memory_service_pb2.GetRequest(ids=[stored.id], include_vectors=True))
    assert got.memories[0].vector == raw
    assert service.Get(memory_service_pb2.GetRequest(ids=[stored.id])).memories[0].vector == b""


def test_recall_ranks_by_similarity(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    ns = "ranking"
    matrix = vectors(40, seed=800)
    ids = [_remember(service, memory(f"r{i}", pack(row), namespace=ns)).id for i, row in enumerate(matrix)]
    query = vectors(1, seed=801)[0]
    hits = _recall(service, pack(query), k=7, filter=_filter(ns))
    expected = unit(matrix) @ unit(query)
    order = np.argsort(-expected)[:7]
    assert [h.memory.id for h in hits] == [ids[i] for i in order]
    for hit, i in zip(hits, order, strict=True):
        assert hit.similarity == pytest.approx(float(expected[i]), abs=2e-3)  # half-precision index vectors
    assert len(_recall(service, pack(query), filter=_filter(ns))) == 10, "k=0 means 10"


# ---- filters on the ANN path (more matches than an exact scan takes) ------------------------

BIG = 5000  # above the exact-scan limit (4096): the filter is applied to ANN candidates
DECOYS = 2000


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Namespace "big": BIG memories tagged "t", and DECOYS untagged ones near query 2.

    Namespace "other": DECOYS memories near query 1. So for query 1 every nearest memory is outside
    "big", and for query 2 every nearest memory of "big" lacks the tag.
    """
    process = start_sidecar(tmp_path_factory.mktemp("crowded-data"))
    service = stub(process.unix_target)
    queries = vectors(2, seed=900)
    big = vectors(BIG, seed=901)
    big_ids: list[int] = []

    def write(items: list[memory_pb2.MemoryInput]) -> list[int]:
        response = service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items))
        return [r.memory.id for r in response.results]

    for start in range(0, BIG, 2500):
        big_ids += write(
            [memory(f"big {i}", pack(big[i]), namespace="big", tags=["t"]) for i in range(start, start + 2500)]
        )
    near_1 = queries[0] + 0.05 * vectors(DECOYS, seed=902)
    near_2 = queries[1] + 0.05 * vectors(DECOYS, seed=903)
    write([memory(f"other {i}", pack(row), namespace="other") for i, row in enumerate(near_1)])
    write([memory(f"untagged {i}", pack(row), namespace="big") for i, row in enumerate(near_2)])
    wait_indexed(service)
    exact = [[big_ids[i] for i in np.argsort(-(unit(big) @ unit(q)))[:10]] for q in queries]
    yield process, [pack(q) for q in queries], exact
    process.stop()


def test_namespace_filter_when_other_namespaces_are_nearer(crowded: Any) -> None:
    process, queries, exact = crowded
    service = stub(process.unix_target)
    assert len(_recall(service, queries[0], k=10, filter=_filter("other"))) == 10
    hits = _recall(service, queries[0], k=10, filter=_filter("big"))
    assert len(hits) == 10, f"{len(hits)} results for k=10 although {BIG + DECOYS} memories are in the namespace"
    assert all(h.memory.namespace == "big" for h in hits)
    assert [h.memory.id for h in hits][:3] == exact[0][:3]


def test_tag_filter_when_untagged_memories_are_nearer(crowded: Any) -> None:
    process, queries, exact = crowded
    service = stub(process.tcp_target)
    hits = _recall(service, queries[1], k=10, filter=_filter("big", tags=["t"]))
    assert len(hits) == 10, f"{len(hits)} results for k=10 although {BIG} memories match the filter"
    assert all("t" in h.memory.tags for h in hits)
    assert [h.memory.id for h in hits][:3] == exact[1][:3]


# ---- watch filters and shutdown ---------------------------------------------------------------


def test_watch_filters_by_namespace_and_type(shared_sidecar: Sidecar) -> None:
    service = stub(shared_sidecar.unix_target)
    start, _ = counts(service)
    one = _remember(service, memory("w1 first", vec(1000), namespace="watch-1"))
    _remember(service, memory("w2", vec(1001), namespace="watch-2"))
    two = _remember(service, memory("w1 second", vec(1002), namespace="watch-1"))
    service.Forget(memory_service_pb2.ForgetRequest(ids=[one.id]))
    marker = _remember(service, memory("w1 marker", vec(1003), namespace="watch-1"))
    created = watch_events(
        service, 3, after_sequence=start, namespace="watch-1", types=[events_pb2.CHANGE_EVENT_TYPE_CREATED]
    )
    assert [e.memory_id for e in created] == [one.id, two.id, marker.id]
    evicted = watch_events(
        service, 1, after_sequence=start, namespace="watch-1", types=[events_pb2.CHANGE_EVENT_TYPE_EVICTED]
    )
    assert [(e.memory_id, e.type) for e in evicted] == [(one.id, events_pb2.CHANGE_EVENT_TYPE_EVICTED)]
    assert evicted[0].from_state == memory_pb2.MEMORY_STATE_ACTIVE


def test_open_watch_ends_when_the_sidecar_stops(data_dir: Path) -> None:
    process = start_sidecar(data_dir)
    service = stub(process.unix_target)
    _remember(service, memory("one", vec(1)))
    call = service.Watch(memory_service_pb2.WatchRequest(after_sequence=0), timeout=45)
    stream = iter(call)
    assert next(stream).event.sequence == 1
    assert process.stop() == 0, process.log()
    code = None
    try:
        for _ in stream:
            pass
    except grpc.RpcError as error:
        code = error.code()
    assert code != grpc.StatusCode.DEADLINE_EXCEEDED, "the watch outlived the sidecar"
