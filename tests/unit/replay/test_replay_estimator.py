"""Replay and tuning on hand-built logs: the estimator, the lifecycle, staleness, determinism, the search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memevo.sidecar.errors import InvalidArgument
from memevo.sidecar.perception.feedback import apply_outcome
from memevo.sidecar.policy import default_policy, validate_policy
from memevo.sidecar.replay.export import _undo_outcomes, policy_from_json, policy_to_json
from memevo.sidecar.replay.replay import ReplayOptions, parse_log, replay
from memevo.sidecar.replay.tune import sample_policy, tune
from memevo.sidecar.store.columns import NO_CODE
from memevo.v1 import memory_pb2, policy_pb2

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
EVERY_RETRIEVAL = ReplayOptions(sweep_interval_s=0.0)


def _header(policy: policy_pb2.Policy | None = None) -> dict[str, Any]:
    return {
        "type": "header",
        "format": "memevo-replay-log",
        "version": 1,
        "policy": policy_to_json(policy or default_policy()),
    }


def _memory(memory_id: int, t: float = 0.0, confidence: float = 0.6, tokens: int = 5) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": memory_id,
        "kind": memory_pb2.MEMORY_KIND_FACT,
        "importance": 0,
        "content_bytes": 20,
        "tokens": tokens,
        "stored_bytes": 300,
        "confidence0": confidence,
        "created_s": t,
        "created_turn": 0,
    }


def _created(memory_id: int, t: float, seq: int) -> dict[str, Any]:
    return {
        "type": "event",
        "seq": seq,
        "t": t,
        "turn": 0,
        "event": "created",
        "id": memory_id,
        "to": ACTIVE,
        "governance": False,
        "related": [],
    }


def _retrieval(rid: str, t: float, candidates: list[tuple[int, float]], returned: list[int]) -> dict[str, Any]:
    return {
        "type": "retrieval",
        "id": rid,
        "t": t,
        "turn": 0,
        "returned": returned,
        "arm": "",
        "mode": 0,
        "candidates": [[i, m, 0.0, False] for i, m in candidates],
    }


def _outcome(rid: str, t: float, used: list[int], success: float) -> dict[str, Any]:
    return {
        "type": "outcome",
        "seq": 0,
        "t": t,
        "turn": 0,
        "retrieval": rid,
        "used": used,
        "success": success,
        "failure": 1.0 - success,
    }


def decoy_log(rounds: int = 4) -> list[dict[str, Any]]:
    """Memory 1 (match 0.95) always fails, memory 2 (match 0.7) always succeeds via its own query."""
    lines = [_header(), _memory(1), _memory(2), _created(1, 0.0, 1), _created(2, 0.0, 2)]
    t = 10.0
    for r in range(rounds):
        lines += [_retrieval(f"d{r}", t, [(1, 0.95), (2, 0.7)], [1]), _outcome(f"d{r}", t + 1, [1], 0.0)]
        lines += [_retrieval(f"g{r}", t + 2, [(2, 1.0), (1, 0.44)], [2]), _outcome(f"g{r}", t + 3, [2], 1.0)]
        t += 10.0
    return lines


def archiving_policy() -> policy_pb2.Policy:
    """Value = accuracy; archive below 0.5 at once: drops a memory after its first failure."""
    policy = default_policy()
    policy.name = "archiving"
    for kind in policy.kinds:
        kind.alpha, kind.beta, kind.gamma, kind.delta = 1.0, 0.0, 0.0, 0.0
        kind.archive_below, kind.reactivate_above, kind.min_time_in_state_s = 0.5, 0.55, 0.0
    return policy


def test_the_logged_policy_replays_to_what_happened() -> None:
    log = parse_log(decoy_log())
    report = replay(log, log.policy, EVERY_RETRIEVAL)
    assert report.retrievals == report.outcome_retrievals == 8
    assert report.success_share == pytest.approx(0.5)
    assert report.observed_share == pytest.approx(0.5)
    assert report.coverage == 1.0
    assert report.tokens_per_retrieval == 5.0
    assert report.store_final == 2
    assert report.active_final == 2
    assert report.stale_share == 0.0


def test_a_policy_that_drops_the_failing_memory_scores_by_its_posterior() -> None:
    log = parse_log(decoy_log(rounds=4))
    report = replay(log, archiving_policy(), EVERY_RETRIEVAL)
    # Round 1's topic query still returns the decoy (no outcome yet): observed failure, 0.
    # Rounds 2-4 return memory 2, unobserved there: Beta posterior of its 4 successes elsewhere, 5/6.
    # Its own queries: observed successes, 1.
    expected = (0.0 + 3 * (5 / 6) + 4 * 1.0) / 8
    assert report.success_share == pytest.approx(expected)
    assert report.observed_share == pytest.approx(4 / 5)
    assert report.active_final == 1
    assert report.objective > replay(log, log.policy, EVERY_RETRIEVAL).objective


def test_replay_is_deterministic_and_does_not_change_the_log() -> None:
    log = parse_log(decoy_log())
    first = replay(log, archiving_policy(), EVERY_RETRIEVAL)
    assert replay(log, archiving_policy(), EVERY_RETRIEVAL) == first
    assert replay(log, log.policy, EVERY_RETRIEVAL).success_share == pytest.approx(0.5)


def test_a_sweep_interval_longer_than_the_log_leaves_the_lifecycle_alone() -> None:
    log = parse_log(decoy_log())
    report = replay(log, archiving_policy(), ReplayOptions(sweep_interval_s=1e9))
    assert report.active_final == 2  # one sweep, at the first retrieval, before any failure


def test_governance_moves_in_the_log_are_decided_again_but_world_changes_are_kept() -> None:
    lines = decoy_log(rounds=1)
    archived_by_sweep = {**_created(2, 5.0, 3), "event": "state", "to": ARCHIVED, "governance": True}
    superseded = {**_created(1, 5.0, 4), "event": "superseded", "to": OBSOLETE, "related": [2]}
    log = parse_log([*lines[:5], archived_by_sweep, superseded, *lines[5:]])
    report = replay(log, log.policy, EVERY_RETRIEVAL)
    assert report.active_final == 1  # memory 2 stays ACTIVE under the default policy; memory 1 is OBSOLETE
    # Memory 2 is returned to both queries: unobserved in the first (posterior of 1 success, 2/3), observed in the
    # second (1).
    assert report.success_share == pytest.approx((2 / 3 + 1.0) / 2)


def test_obsolete_memories_count_as_stale_in_history_mode() -> None:
    lines = decoy_log(rounds=1)
    superseded = {**_created(1, 5.0, 4), "event": "superseded", "to": OBSOLETE, "related": [2]}
    history = {**lines[5], "mode": 2}
    log = parse_log([*lines[:5], superseded, history, *lines[6:]])
    report = replay(log, log.policy, EVERY_RETRIEVAL)
    assert report.stale_share == pytest.approx(1 / 2)
    assert report.stale_retrievals == pytest.approx(1 / 2)


def test_an_invalid_policy_or_log_is_rejected() -> None:
    log = parse_log(decoy_log())
    bad = default_policy()
    bad.kinds[0].decay_half_life_s = -1.0
    with pytest.raises(InvalidArgument) as caught:
        replay(log, bad)
    assert caught.value.violations[0][0] == "policy.kinds[0].decay_half_life_s"
    with pytest.raises(InvalidArgument):
        parse_log([{"type": "memory", "id": 1}])
    with pytest.raises(InvalidArgument):
        parse_log([{**_header(), "version": 99}])


def test_policy_json_round_trips_and_accepts_a_get_policy_body() -> None:
    policy = archiving_policy()
    assert policy_from_json(policy_to_json(policy)) == policy
    assert policy_from_json({"policy": policy_to_json(policy)}) == policy


def test_undoing_outcomes_inverts_apply_outcome() -> None:
    record = memory_pb2.Memory(confidence=0.6)
    steps = [(1.0, 0.0), (0.0, 1.0), (0.5, 0.5), (0.25, 0.0)]
    for success, failure in steps:
        apply_outcome(record, success, failure)
    assert _undo_outcomes(record.confidence, steps) == pytest.approx(0.6, abs=1e-6)


def test_random_policies_are_valid_and_reproducible() -> None:
    import numpy as np

    base = default_policy()
    first = [sample_policy(base, np.random.default_rng(5), f"t{i}") for i in range(3)]
    again = [sample_policy(base, np.random.default_rng(5), f"t{i}") for i in range(3)]
    assert [p.SerializeToString() for p in first] == [p.SerializeToString() for p in again]
    for policy in first:
        assert validate_policy(policy) == []
        assert policy != base


def test_tune_in_process_finds_the_planted_winner(tmp_path: Path) -> None:
    import json

    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in decoy_log()) + "\n")
    decoy = default_policy()
    decoy.name = "decoy"
    decoy.kinds[0].feedback_weight = 0.9
    result = tune(
        path, candidates=[decoy, archiving_policy()], trials=5, workers=1, options=EVERY_RETRIEVAL, progress=False
    )
    assert result.best_policy.name == "archiving"
    assert result.gain == pytest.approx(result.best.objective - result.baseline.objective)
    assert result.gain > 0.2
    assert [r.policy_name for r in result.reports[:3]] == ["default", "decoy", "archiving"]


def test_task_signatures_become_codes_and_a_log_without_them_reads_as_one_untasked_group() -> None:
    memories = [{**_memory(i), "task": task} for i, task in enumerate(["deploy:a", "", "deploy:b", "deploy:a"], 1)]
    log = parse_log([_header(), *memories, {**_memory(9)}])
    codes = log.task.tolist()
    assert codes[0] == codes[3] != codes[2]
    assert codes[1] == codes[4] == NO_CODE
    assert NO_CODE not in (codes[0], codes[2])
