"""Observability against a live sidecar: the Prometheus endpoint after real RPCs, and JSON logs with request ids."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from conftest import start_sidecar
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import channel, memory, stub, vec, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

SERVICE = "memevo.v1.MemoryService"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(address: str) -> tuple[str, Samples]:
    """The exposition text at http://address/metrics and its samples by (name, labels)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match is not None, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}``; 0 when absent (a counter that never moved)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_endpoint_after_rpcs(data_dir: Path) -> None:
    process = start_sidecar(data_dir, "--metrics-listen", "127.0.0.1:0", "--sweep-interval-s", "0.2")
    try:
        ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
        address = ready["metrics"]
        assert address.startswith("127.0.0.1:")
        service = stub(process.unix_target)
        for i in range(3):
            service.Remember(memory_service_pb2.RememberRequest(memory=memory(f"m{i}", vec(i))))
        for _ in range(2):
            service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(0), k=3))
        with pytest.raises(grpc.RpcError) as caught:
            service.Remember(memory_service_pb2.RememberRequest(memory=memory("bad", b"\x00\x01")))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError):
            service.Get(memory_service_pb2.GetRequest(ids=[]))
        service.Govern(memory_service_pb2.GovernRequest())
        health_pb2_grpc.HealthStub(channel(process.unix_target)).Check(health_pb2.HealthCheckRequest())

        text, samples = scrape(address)
        calls = "memevo_rpc_calls_total"
        assert value(samples, calls, service=SERVICE, method="Remember", code="OK") == 3
        assert value(samples, calls, service=SERVICE, method="Remember", code="INVALID_ARGUMENT") == 1
        assert value(samples, calls, service=SERVICE, method="Recall", code="OK") == 2
        assert value(samples, calls, service=SERVICE, method="Get", code="INVALID_ARGUMENT") == 1
        assert value(samples, calls, service=SERVICE, method="Govern", code="OK") == 1
        assert value(samples, calls, service="grpc.health.v1.Health", method="Check", code="OK") == 1
        # Latency histograms count every call, failed ones too, and their buckets are cumulative.
        histogram = "memevo_rpc_duration_seconds"
        assert value(samples, histogram + "_count", service=SERVICE, method="Remember") == 4
        buckets = [
            (float(dict(labels)["le"]), count)
            for (name, labels), count in samples.items()
            if name == histogram + "_bucket" and dict(labels).get("method") == "Recall"
        ]
        ordered = [count for _, count in sorted(buckets)]
        assert ordered == sorted(ordered)
        assert ordered[-1] == 2
        assert value(samples, histogram + "_sum", service=SERVICE, method="Recall") > 0
        # The state of the store.
        assert value(samples, "memevo_memories", state="active", kind="episode") == 3
        assert ("memevo_index_fresh_tail_vectors", frozenset()) in samples
        assert value(samples, "memevo_changelog_last_sequence") == 3
        assert value(samples, "memevo_rocksdb_size_bytes") > 0
        assert value(samples, "memevo_sweep_duration_seconds_count", trigger="request") == 1
        wait_until(
            lambda: any(
                name == "memevo_sweep_duration_seconds_count" and dict(labels)["trigger"].startswith("schedule")
                for (name, labels) in scrape(address)[1]
            ),
            "a scheduled sweep to be timed",
        )
        # Every family is declared once, before its samples.
        declared = re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE)
        assert len(declared) == len(set(declared))
        with pytest.raises(urllib.error.HTTPError) as not_found:
            urllib.request.urlopen(f"http://{address}/other", timeout=10)
        assert not_found.value.code == 404
    finally:
        assert process.stop() == 0, process.log()


def test_metrics_endpoint_is_off_by_default_and_loopback_only(data_dir: Path, tmp_path: Path) -> None:
    process = start_sidecar(data_dir)
    try:
        ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
        assert "metrics" not in ready
    finally:
        process.stop()
    command = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(tmp_path / "other"), "--embedder", "none",
        "--dimension", "8", "--listen", f"unix://{tmp_path / 's.sock'}", "--metrics-listen", "0.0.0.0:0",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "loopback" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_json_logs_carry_the_request_id(data_dir: Path) -> None:
    process = start_sidecar(data_dir, "--log-format", "json")
    try:
        service = stub(process.unix_target)
        with pytest.raises(grpc.RpcError):
            service.Remember(
                memory_service_pb2.RememberRequest(memory=memory("bad", b"\x00")),
                metadata=(("x-request-id", "trace-4711"),),
            )
        with pytest.raises(grpc.RpcError):
            service.Remember(memory_service_pb2.RememberRequest(memory=memory("bad", b"\x00"), request_id="rid-42"))
        service.Remember(memory_service_pb2.RememberRequest(memory=memory("good", vec(1))))
    finally:
        assert process.stop() == 0, process.log()
    lines = [line for line in process.log().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in entries)
    failures = [e for e in entries if e.get("method") == "Remember"]
    assert [(e["request_id"], e["code"]) for e in failures] == [
        ("trace-4711", "INVALID_ARGUMENT"),
        ("rid-42", "INVALID_ARGUMENT"),
    ]
    assert all(e["rpc"] == "Remember" and e["duration_ms"] >= 0 for e in failures)
    assert any("memevo serving" in e["message"] for e in entries)


def test_pair_judge_metrics_count_what_it_judged(data_dir: Path) -> None:
    process = start_sidecar(data_dir, "--metrics-listen", "127.0.0.1:0", embedder="local", judge="local")
    try:
        ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
        service = stub(process.unix_target)
        for text in ("Ana works at Shopify as a designer.", "Ana left Shopify; she has joined Canva."):
            item = memory(text, namespace="judged", entity="person:ana", kind=memory_pb2.MEMORY_KIND_FACT)
            service.Remember(memory_service_pb2.RememberRequest(memory=item))
        service.Govern(memory_service_pb2.GovernRequest(namespace="judged"))  # waits for the judge
        _, samples = scrape(ready["metrics"])
        assert value(samples, "memevo_judge_pairs_total") == 1
        assert value(samples, "memevo_judge_pending_pairs") == 0
        assert value(samples, "memevo_judge_dropped_pairs_total") == 0
        assert value(samples, "memevo_judge_model_seconds_total") > 0
        assert value(samples, "memevo_judge_lag_seconds_count") == 1
        assert value(samples, "memevo_judge_lag_seconds", quantile="0.99") > 0
    finally:
        process.stop()


def test_no_pair_judge_metrics_without_the_judge(data_dir: Path) -> None:
    process = start_sidecar(data_dir, "--metrics-listen", "127.0.0.1:0")
    try:
        ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
        text, _ = scrape(ready["metrics"])
        assert "memevo_judge_" not in text
    finally:
        process.stop()
