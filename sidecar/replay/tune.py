"""``memevo tune``: search the policy space by replaying a log under many candidate policies.

Random search around the baseline (the log's policy, or one given): each
trial scales every per-kind weight, half-life and threshold of the baseline
by random factors (one factor per field, shared by all kinds, so the space
stays small), keeps the thresholds ordered and must pass policy validation.
Policies given explicitly (``candidates``) are evaluated too. Each candidate
is one :func:`~memevo.sidecar.replay.replay.replay`; the best objective wins,
ties going to the earlier candidate (the baseline first, then the given ones,
then the random ones), so the result is deterministic for a seed.

Replays run on all local cores by default (a process pool: each worker parses
the log once) or as Ray tasks on a cluster (``ray_address``; the log travels
once through Ray's object store). Ray is an optional dependency
(``pip install 'memevo[ray]'``).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memevo.v1 import policy_pb2

from ..errors import FailedPrecondition
from ..policy import validate_policy
from .replay import ReplayLog, ReplayOptions, ReplayReport, load_log, replay

_LOG_SCALED = ("decay_half_life_s", "decay_half_life_turns", "confidence_decay_half_life_s",
               "confidence_decay_half_life_turns")  # fmt: skip
_WEIGHTS = ("confidence_weight", "feedback_weight", "inconsistency_weight", "access_weight")
_VALUE_WEIGHTS = ("alpha", "beta", "gamma", "delta")
HALF_LIFE_RANGE = 16.0
"""Half-lives are scaled by a log-uniform factor in [1/16, 16]."""
WEIGHT_RANGE = 8.0
"""Accuracy and relevance weights: log-uniform factor in [1/8, 8]; a zero weight draws from [0, 1]."""
VALUE_WEIGHT_RANGE = 4.0
"""alpha, beta, gamma, delta: log-uniform factor in [1/4, 4]."""
THRESHOLD_RANGE = (0.25, 2.0)
"""archive_below and evict_below are scaled by a factor in this range (the hysteresis gap too)."""
MAX_DRAWS = 100
DEFAULT_OPTIONS = ReplayOptions()


def _factor(rng: np.random.Generator, spread: float) -> float:
    return float(math.exp(rng.uniform(-math.log(spread), math.log(spread))))


def sample_policy(base: policy_pb2.Policy, rng: np.random.Generator, name: str) -> policy_pb2.Policy:
    """One random policy around ``base`` (see the module docstring); valid by construction or by redraw."""
    for _ in range(MAX_DRAWS):
        policy = policy_pb2.Policy()
        policy.CopyFrom(base)
        policy.name = name
        factors = {f: _factor(rng, HALF_LIFE_RANGE) for f in _LOG_SCALED}
        factors |= {f: _factor(rng, WEIGHT_RANGE) for f in _WEIGHTS}
        factors |= {f: _factor(rng, VALUE_WEIGHT_RANGE) for f in _VALUE_WEIGHTS}
        fresh = {f: float(rng.uniform(0.0, 1.0)) for f in _WEIGHTS}
        archive = float(rng.uniform(*THRESHOLD_RANGE))
        gap = float(rng.uniform(*THRESHOLD_RANGE))
        evict = float(rng.uniform(*THRESHOLD_RANGE))
        for entry in policy.kinds:
            for name_ in (*_LOG_SCALED, *_VALUE_WEIGHTS):
                setattr(entry, name_, getattr(entry, name_) * factors[name_])
            for name_ in _WEIGHTS:
                value = getattr(entry, name_)
                setattr(entry, name_, value * factors[name_] if value > 0 else fresh[name_])
            base_gap = max(entry.reactivate_above - entry.archive_below, 0.0)
            entry.archive_below = entry.archive_below * archive
            entry.reactivate_above = entry.archive_below + base_gap * gap
            entry.evict_below = min(entry.evict_below * evict, entry.archive_below)
        if not validate_policy(policy):
            return policy
    raise FailedPrecondition("the baseline policy cannot be varied into a valid one", reason="UNTUNABLE_POLICY")


@dataclass(frozen=True)
class TuneResult:
    """The outcome of a search: the best policy, its replay, and the baseline's."""

    best_policy: policy_pb2.Policy
    best: ReplayReport
    baseline: ReplayReport
    reports: list[ReplayReport]
    """Every candidate's replay, in candidate order (baseline first)."""

    @property
    def gain(self) -> float:
        """Objective of the best minus that of the baseline (>= 0: the baseline is a candidate)."""
        return self.best.objective - self.baseline.objective


# ---- workers -------------------------------------------------------------------------------------

_worker_log: ReplayLog | None = None


def _init_worker(path: str) -> None:
    global _worker_log
    import numba

    numba.set_num_threads(1)  # one replay per core: parallelism comes from the pool
    _worker_log = load_log(Path(path))


def _run_in_worker(position: int, raw_policy: bytes, options: ReplayOptions) -> tuple[int, ReplayReport]:
    assert _worker_log is not None
    return position, replay(_worker_log, policy_pb2.Policy.FromString(raw_policy), options)


def _run_with_log(log: ReplayLog, position: int, raw_policy: bytes, options: ReplayOptions) -> tuple[int, ReplayReport]:
    return position, replay(log, policy_pb2.Policy.FromString(raw_policy), options)


def _local(
    path: Path,
    log: ReplayLog,
    policies: Sequence[policy_pb2.Policy],
    options: ReplayOptions,
    workers: int,
    done: Callable[[int, ReplayReport], None],
) -> None:
    if workers <= 1:
        for position, policy in enumerate(policies):
            done(*_run_with_log(log, position, policy.SerializeToString(), options))
        return
    # spawn, not fork: the parent may hold Numba's or gRPC's threads.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(str(path),)) as pool:
        futures = [
            pool.submit(_run_in_worker, position, policy.SerializeToString(), options)
            for position, policy in enumerate(policies)
        ]
        for future in as_completed(futures):
            done(*future.result())


def _ray(
    address: str | None,
    log: ReplayLog,
    policies: Sequence[policy_pb2.Policy],
    options: ReplayOptions,
    done: Callable[[int, ReplayReport], None],
) -> None:
    try:
        import ray
    except ImportError as exc:
        raise FailedPrecondition("Ray is not installed: pip install 'memevo[ray]'", reason="RAY_MISSING") from exc
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        started = True
    try:
        task = ray.remote(num_cpus=1)(_run_with_log)
        log_ref = ray.put(log)
        pending = [
            task.remote(log_ref, position, p.SerializeToString(), options) for position, p in enumerate(policies)
        ]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                done(*ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def tune(
    log_path: Path,
    *,
    baseline: policy_pb2.Policy | None = None,
    candidates: Sequence[policy_pb2.Policy] = (),
    trials: int = 64,
    seed: int = 0,
    workers: int = 0,
    ray_address: str | None = None,
    use_ray: bool = False,
    options: ReplayOptions = DEFAULT_OPTIONS,
    progress: bool = True,
) -> TuneResult:
    """Replay ``log_path`` under the baseline, ``candidates`` and ``trials`` random policies; return the best.

    ``workers`` 0 uses every local core; ``use_ray`` (or a ``ray_address``)
    runs the replays as Ray tasks instead, joining the cluster at
    ``ray_address`` (None: the one this process already started, or a new
    local one). InvalidArgument when the log or a candidate is invalid.
    """
    log = load_log(log_path)
    base = policy_pb2.Policy()
    base.CopyFrom(baseline if baseline is not None else log.policy)
    if not base.name:
        base.name = "baseline"
    rng = np.random.default_rng(seed)
    policies = [base, *candidates, *(sample_policy(base, rng, f"trial-{i}") for i in range(trials))]
    reports: list[ReplayReport | None] = [None] * len(policies)
    bar = tqdm(total=len(policies), desc="tune", unit="policy", file=sys.stderr, disable=not progress)

    def done(position: int, report: ReplayReport) -> None:
        reports[position] = report
        bar.update(1)
        best = max((r.objective for r in reports if r is not None), default=0.0)
        bar.set_postfix(best=f"{best:.4f}")

    try:
        if use_ray or ray_address:
            _ray(ray_address, log, policies, options, done)
        else:
            count = workers or os.cpu_count() or 1
            _local(log_path, log, policies, options, min(count, len(policies)), done)
    finally:
        bar.close()
    final = [r for r in reports if r is not None]
    if len(final) != len(policies):
        raise FailedPrecondition("some replays did not finish", reason="TUNE_INCOMPLETE")
    best_position = max(range(len(final)), key=lambda i: (final[i].objective, -i))
    return TuneResult(policies[best_position], final[best_position], final[0], final)


def describe(report: ReplayReport) -> dict[str, Any]:
    """The headline numbers of a replay, rounded for printing."""
    return {
        "policy": report.policy_name,
        "objective": round(report.objective, 4),
        "success_share": round(report.success_share, 4),
        "coverage": round(report.coverage, 4),
        "stale_share": round(report.stale_share, 4),
        "tokens_per_retrieval": round(report.tokens_per_retrieval, 1),
        "store_final": report.store_final,
    }
