"""Export, replay and tune against a log a real sidecar wrote.

The scenario has one clear winner. Each topic has a decoy (very similar to the
topic's query, fails whenever it is used) and a good memory (less similar,
succeeds whenever used, and always returned by its own query). The sidecar
runs the default policy with no sweeps, so it returns the decoy to every topic
query. A policy that archives a memory as soon as its accuracy drops (value =
accuracy, archive below 0.5, no minimum time in state) would have dropped each
decoy after its first failure and returned the good memory instead: its
replay must score higher, and ``memevo tune`` must pick it out of decoy
policies and random ones, with local processes and on a Ray instance.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import start_sidecar
from helpers import memory, pack, stub

from memevo.sidecar.replay.export import policy_from_json, policy_to_json
from memevo.sidecar.replay.replay import ReplayOptions, load_log, replay
from memevo.sidecar.replay.tune import tune
from memevo.v1 import memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

TOPICS = 4
ROUNDS = 4
DIMENSION = 8
CLI_TIMEOUT_S = 120


def _topic_vectors(topic: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query, decoy, good) of a topic: cosine 0.95 and 0.7 to the query, 0 to every other topic's."""
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[topic] = 1.0
    side = np.zeros(DIMENSION, dtype=np.float32)
    side[TOPICS + topic] = 1.0
    decoy = 0.95 * query + np.sqrt(1.0 - 0.95**2) * side
    good = 0.7 * query - np.sqrt(1.0 - 0.7**2) * side
    return query, decoy.astype(np.float32), good.astype(np.float32)


def winner_policy(base: policy_pb2.Policy) -> policy_pb2.Policy:
    """The policy that archives a memory once it fails: value = accuracy, archive below 0.5, no wait."""
    policy = policy_pb2.Policy()
    policy.CopyFrom(base)
    policy.name = "winner"
    for kind in policy.kinds:
        kind.alpha, kind.beta, kind.gamma, kind.delta = 1.0, 0.0, 0.0, 0.0
        kind.archive_below, kind.reactivate_above, kind.evict_below = 0.5, 0.55, 0.05
        kind.min_time_in_state_s = 0.0
    return policy


def decoy_policy(base: policy_pb2.Policy, name: str, half_life_s: float) -> policy_pb2.Policy:
    """A policy that differs from the default but archives nothing in the scenario's time span."""
    policy = policy_pb2.Policy()
    policy.CopyFrom(base)
    policy.name = name
    for kind in policy.kinds:
        kind.decay_half_life_s = half_life_s
        kind.feedback_weight = 0.9
    return policy


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data directory, replay log) of the scenario, exported after the sidecar stopped."""
    root = tmp_path_factory.mktemp("replay")
    data = root / "data"
    sidecar = start_sidecar(data, "--sweep-interval-s", "0", dimension=DIMENSION)
    try:
        service = stub(sidecar.unix_target)
        topics = []
        for topic in range(TOPICS):
            query, decoy, good = _topic_vectors(topic)
            ids = []
            for name, vector in (("decoy", decoy), ("good", good)):
                request = memory_service_pb2.RememberRequest(
                    memory=memory(f"topic {topic} {name}", pack(vector), namespace="replay")
                )
                ids.append(service.Remember(request).result.memory.id)
            topics.append((query, good, ids[0], ids[1]))
        for _ in range(ROUNDS):
            for query, good, decoy_id, good_id in topics:
                for vector, expected, outcome in (
                    (query, decoy_id, memory_service_pb2.OUTCOME_FAILURE),
                    (good, good_id, memory_service_pb2.OUTCOME_SUCCESS),
                ):
                    found = service.Recall(
                        memory_service_pb2.RecallRequest(
                            query_vector=pack(vector), k=1, filter=memory_service_pb2.RecallFilter(namespace="replay")
                        )
                    )
                    assert [m.memory.id for m in found.memories] == [expected]
                    service.ReportOutcome(
                        memory_service_pb2.ReportOutcomeRequest(retrieval_id=found.retrieval_id, outcome=outcome)
                    )
    finally:
        assert sidecar.stop() == 0
    log = root / "log.jsonl"
    run = _cli("export", "--data", str(data), "--out", str(log))
    assert "retrievals" in run.stdout
    return data, log


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [sys.executable, "-m", "memevo.sidecar.cli", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run


def _write_policy(path: Path, policy: policy_pb2.Policy) -> Path:
    path.write_text(json.dumps(policy_to_json(policy)))
    return path


def test_export_holds_every_retrieval_and_outcome(exported: tuple[Path, Path]) -> None:
    _, log_path = exported
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert lines[0]["type"] == "header"
    assert lines[0]["version"] == 1
    retrievals = [line for line in lines if line["type"] == "retrieval"]
    outcomes = [line for line in lines if line["type"] == "outcome"]
    memories = [line for line in lines if line["type"] == "memory"]
    assert len(retrievals) == len(outcomes) == 2 * TOPICS * ROUNDS
    assert len(memories) == 2 * TOPICS
    assert {m["task"] for m in memories} == {""}  # each memory's task signature, for ranking strategies per task
    # Every retrieval logged its candidate pool (for k=1: the two nearest, its topic's decoy and good
    # memory, and any other memory still in the fresh tail, which is scanned whole: how many depends on
    # the index builder's timing) with their match (the cosine: no query text), and what it returned.
    for retrieval in retrievals:
        assert len(retrieval["returned"]) == 1
        matches = sorted(round(c[1], 2) for c in retrieval["candidates"])[-2:]
        assert retrieval["returned"][0] in [c[0] for c in retrieval["candidates"]]
        assert matches in ([0.44, 1.0], [0.7, 0.95])
    assert {o["retrieval"] for o in outcomes} == {r["id"] for r in retrievals}
    # Confidence as stored: the outcomes' effect undone (every memory here started at the same confidence).
    assert max(m["confidence0"] for m in memories) - min(m["confidence0"] for m in memories) < 1e-3


def test_replay_of_the_winner_beats_the_logged_policy(exported: tuple[Path, Path], tmp_path: Path) -> None:
    _, log_path = exported
    log = load_log(log_path)
    options = ReplayOptions(sweep_interval_s=0.0)
    baseline = replay(log, log.policy, options)
    # The logged policy replays to what happened: half the retrievals (the decoys') failed.
    assert baseline.success_share == pytest.approx(0.5)
    assert baseline.coverage == 1.0
    assert replay(log, log.policy, options) == baseline  # deterministic
    winner = _write_policy(tmp_path / "winner.json", winner_policy(log.policy))
    run = _cli("replay", "--log", str(log_path), "--policy", str(winner), "--sweep-interval-s", "0", "--json")
    report = json.loads(run.stdout)
    assert report["policy_name"] == "winner"
    assert report["success_share"] > baseline.success_share + 0.2
    assert report["coverage"] == 1.0
    # It archived the decoys: fewer ACTIVE memories at the end.
    assert report["active_final"] == TOPICS


def test_tune_picks_the_winner_with_local_processes(exported: tuple[Path, Path], tmp_path: Path) -> None:
    _, log_path = exported
    base = load_log(log_path).policy
    candidates = [
        _write_policy(tmp_path / "slow.json", decoy_policy(base, "slow", 86_400.0 * 60)),
        _write_policy(tmp_path / "winner.json", winner_policy(base)),
        _write_policy(tmp_path / "fast.json", decoy_policy(base, "fast", 3_600.0)),
    ]
    out = tmp_path / "best.json"
    args = ["tune", "--log", str(log_path), "--trials", "6", "--workers", "2", "--sweep-interval-s", "0"]
    for path in candidates:
        args += ["--candidate", str(path)]
    run = _cli(*args, "--out", str(out))
    summary = json.loads(run.stdout)
    assert summary["best"]["policy"] == "winner"
    assert summary["gain"] > 0.2
    assert summary["evaluated"] == 1 + len(candidates) + 6
    best = policy_from_json(json.loads(out.read_text()))
    assert best.name == "winner"
    assert best.kinds[0].archive_below == pytest.approx(0.5)
    assert "tune" in run.stderr  # the progress bar


def _start_local_ray(ray: Any, monkeypatch: pytest.MonkeyPatch, attempts: int = 3) -> None:
    """Start a local Ray instance, retried: Ray gives its raylet a fixed 30 s to register and its GCS server 30 s
    to write its port file, which a loaded 2-core machine can miss (the failure is Ray's start-up, not the code
    under test). The GCS wait can be raised through Ray's own variable; the raylet's cannot, hence the retries."""
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "120")
    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
            return
        except Exception as error:  # Ray raises a bare Exception or RuntimeError for these
            ray.shutdown()
            if "timed out" not in str(error).lower() or attempt == attempts:
                raise


def test_tune_picks_the_winner_on_ray(exported: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import ray  # the test extra installs it

    _, log_path = exported
    base = load_log(log_path).policy
    _start_local_ray(ray, monkeypatch)
    try:
        result = tune(
            log_path,
            candidates=[decoy_policy(base, "slow", 86_400.0 * 60), winner_policy(base)],
            trials=4,
            use_ray=True,
            options=ReplayOptions(sweep_interval_s=0.0),
            progress=False,
        )
    finally:
        ray.shutdown()
    assert result.best_policy.name == "winner"
    assert result.gain > 0.2
    assert len(result.reports) == 1 + 2 + 4
