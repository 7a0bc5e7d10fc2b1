"""SIGTERM on a live sidecar: NOT_SERVING, new calls refused, in-flight calls drained, checkpoint, exit 0."""

from __future__ import annotations

import json
import signal
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import DEADLINE_S, channel, counts, memory, stub, vec, wait_until

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

STREAM_METHOD = 'memevo_rpc_in_flight{service="memevo.v1.MemoryService",method="RememberStream"} 1'


class HeldStream:
    """A RememberStream whose request iterator sends ``first`` items, then waits for ``release``, then ``rest``."""

    def __init__(self, first: int, rest: int) -> None:
        self.release = threading.Event()
        self.sent_first = threading.Event()
        self._first, self._rest = first, rest

    def __iter__(self) -> Iterator[memory_service_pb2.RememberStreamRequest]:
        for i in range(self._first):
            yield memory_service_pb2.RememberStreamRequest(memory=memory(f"early {i}", vec(10 + i)))
        self.sent_first.set()
        self.release.wait(DEADLINE_S)
        for i in range(self._rest):
            yield memory_service_pb2.RememberStreamRequest(memory=memory(f"late {i}", vec(20 + i)))


def _metrics_address(process: Sidecar) -> str:
    ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
    return str(ready["metrics"])


def _stream_in_flight(address: str) -> bool:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return STREAM_METHOD in response.read().decode()


def _refused(target: str) -> bool:
    try:
        stub(target).GetPolicy(memory_service_pb2.GetPolicyRequest(), timeout=5)
    except grpc.RpcError as error:
        return bool(error.code() == grpc.StatusCode.UNAVAILABLE)
    return False


def test_sigterm_drains_in_flight_calls_refuses_new_ones_and_checkpoints(data_dir: Path) -> None:
    process = start_sidecar(
        data_dir, "--grace-s", "60", "--metrics-listen", "127.0.0.1:0", "--checkpoint-interval-s", "3600"
    )
    service = stub(process.unix_target)
    touched = service.Remember(memory_service_pb2.RememberRequest(memory=memory("touched", vec(1)))).result.memory.id
    recalled = service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(1), k=1))
    assert [m.memory.id for m in recalled.memories] == [touched]
    # Access statistics live in memory until a checkpoint; the hourly one will not come before the stop.
    health = health_pb2_grpc.HealthStub(channel(process.unix_target)).Watch(
        health_pb2.HealthCheckRequest(service=""), timeout=DEADLINE_S
    )
    statuses = iter(health)
    assert next(statuses).status == health_pb2.HealthCheckResponse.SERVING

    held = HeldStream(first=3, rest=2)
    in_flight = service.RememberStream.future(iter(held))
    assert held.sent_first.wait(DEADLINE_S)
    wait_until(lambda: _stream_in_flight(_metrics_address(process)), "the stream to be running in the sidecar")

    process.process.send_signal(signal.SIGTERM)
    assert next(statuses).status == health_pb2.HealthCheckResponse.NOT_SERVING
    health.cancel()
    wait_until(lambda: _refused(process.unix_target), "new calls to be refused")
    assert process.process.poll() is None, "the sidecar exited with a call still in flight"

    held.release.set()
    response = in_flight.result(timeout=DEADLINE_S)
    assert response.created_count == 5
    assert process.process.wait(timeout=60) == 0, process.log()
    assert "Traceback" not in process.log(), process.log()

    again = start_sidecar(data_dir)
    try:
        service = stub(again.unix_target)
        assert counts(service) == (6, 6)
        record = service.Get(memory_service_pb2.GetRequest(ids=[touched])).memories[0]
        assert record.access_count == 1, "the access statistics were not checkpointed at shutdown"
        stored = {m.content for m in service.Get(memory_service_pb2.GetRequest(ids=list(response.ids))).memories}
        assert stored == {"early 0", "early 1", "early 2", "late 0", "late 1"}
    finally:
        again.stop()


def test_a_call_outliving_the_grace_period_is_cancelled_and_the_exit_is_clean(data_dir: Path) -> None:
    process = start_sidecar(data_dir, "--grace-s", "1", "--metrics-listen", "127.0.0.1:0")
    service = stub(process.unix_target)
    held = HeldStream(first=2, rest=1)
    in_flight = service.RememberStream.future(iter(held))
    try:
        assert held.sent_first.wait(DEADLINE_S)
        wait_until(lambda: _stream_in_flight(_metrics_address(process)), "the stream to be running in the sidecar")
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(timeout=60) == 0, process.log()
        with pytest.raises(grpc.RpcError) as caught:
            in_flight.result(timeout=DEADLINE_S)
        assert caught.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE), caught.value
    finally:
        held.release.set()
    assert "Traceback" not in process.log(), process.log()
    # An unfinished stream commits nothing it had not acknowledged, and the directory reopens.
    again = start_sidecar(data_dir)
    try:
        assert counts(stub(again.unix_target)) == (0, 0)
    finally:
        again.stop()
