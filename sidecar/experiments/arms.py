"""Online experiments: several policies rank retrievals side by side, and outcomes are counted per arm.

Each retrieval gets an arm from a hash of its retrieval id (salted with the
experiment's name), in proportion to the arms' weights: stateless, stable and
uniform. The arm's policy scores the candidates of that retrieval (the trust
part of the ranking); the data directory's own policy still governs writes and
sweeps. A ReportOutcome naming the retrieval id adds its success and failure
weights to the arm, and GetStats shows each arm's success rate with a 95%
Wilson score interval. Promoting an arm makes its policy the data directory's
and ends the experiment.

The experiment and its counts live in the data directory's metadata: the
counts are written with each outcome (durable), the retrieval counts ride
along (a crash may lose the last few). Which arm ranked a retrieval is kept
beside the retrieval record (see :mod:`memevo.sidecar.replay.capture`), with
the experiment's generation, so outcomes of an older experiment's retrievals
do not count for a newer one.

Self-tuning (``Experiment.adaptive``; the rules are pure functions in
:mod:`memevo.sidecar.experiments.adaptive`): every ``snapshot_outcomes``
outcomes a review runs on a background thread, off ReportOutcome's path. It
takes a posterior snapshot (Thompson shares), and when automatic promotion is
on and the posterior rule fires, it checks that the candidate moves only the
named parameters within the policy's bounds, replays the captured traffic
(``memevo export`` + ``memevo replay``, in process) under the candidate and the
policy in force, and promotes or holds. A promotion makes the arm's policy the
data directory's (keeping the operator's bounds) and the experiment watches
it: every retrieval uses it, and once it has ``min_outcomes`` outcomes below
the control's interval at promotion, the previous policy is restored. Each
decision is a CHANGE_EVENT_TYPE_EXPERIMENT_DECISION event carrying its
evidence and the policy it replaced (UpdatePolicy with it reverses it), and is
listed in GetStats. An operator's UpdatePolicy while a promotion is watched
ends the watch: from then on retrievals use the policy in force, and the next
review (started by the next Recall or GetStats) records a ROLLED_BACK decision
that leaves the policy as the operator set it. Promotion and rollback bump the
generation, so outcomes of retrievals ranked before a decision do not count
after it.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import math
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memevo.v1 import events_pb2, memory_service_pb2, policy_pb2

from ..domain import now_s, to_timestamp
from ..errors import InvalidArgument, NotFound
from ..idempotency import RequestKey
from ..policy import params_from_policy, validate_policy
from ..store.rocks import CF_META, RocksStore, Txn
from .adaptive import (
    TUNABLE_PARAMETERS,
    AdaptiveRules,
    ArmCounts,
    adaptivity_problems,
    assignment_point,
    pick,
    probability_best,
    probability_better,
    promoted_policy,
    promotion_call,
    replay_allows,
    rollback_call,
    snapshot_due,
    thompson_shares,
)

if TYPE_CHECKING:
    from ..domain import RecallQuery
    from ..engine import Engine

META_EXPERIMENT = b"experiment"
"""The running Experiment message (absent when none runs)."""
META_EXPERIMENT_COUNTS = b"experiment_counts"
"""JSON: {"generation": int, "arms": {name: [retrievals, outcomes, successes, failures]}, "adaptive": {...}}."""
META_EXPERIMENT_DECISIONS = b"experiment_decisions"
"""An ExperimentStats holding only the running experiment's last decisions; written only with a decision, so
the JSON written with every outcome stays small."""
MAX_DECISIONS = 32
"""Decisions GetStats lists (the newest); the change log keeps every one."""
MAX_ARMS = 16
MIN_ARMS = 2
MAX_NAME_BYTES = 64
WILSON_Z = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""

log = logging.getLogger(__name__)


def wilson_interval(successes: float, trials: float, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a success rate; (0, 1) when there is no trial.

    ``successes`` may be fractional (PARTIAL outcomes and rewards count by weight).
    """
    if trials <= 0:
        return 0.0, 1.0
    rate = min(max(successes / trials, 0.0), 1.0)
    denominator = 1.0 + z * z / trials
    centre = (rate + z * z / (2.0 * trials)) / denominator
    half = z * math.sqrt(rate * (1.0 - rate) / trials + z * z / (4.0 * trials * trials)) / denominator
    # Clamped to contain the rate itself, which rounding can push just outside at 0 and 1.
    return max(0.0, min(centre - half, rate)), min(1.0, max(centre + half, rate))


def arm_position(experiment_name: str, retrieval_id: str, cumulative_weights: list[float]) -> int:
    """The arm (index) of a retrieval: a 64-bit hash of (experiment name, retrieval id) into the weights."""
    digest = hashlib.blake2b(f"{experiment_name}\0{retrieval_id}".encode(), digest_size=8).digest()
    point = int.from_bytes(digest, "big") / 2.0**64 * cumulative_weights[-1]
    return min(bisect.bisect_right(cumulative_weights, point), len(cumulative_weights) - 1)


def validate_experiment(experiment: policy_pb2.Experiment, field: str = "experiment") -> list[tuple[str, str]]:
    """Every problem of ``experiment`` as (field path, description); empty when it can run."""
    problems: list[tuple[str, str]] = []
    if len(experiment.name.encode()) > MAX_NAME_BYTES:
        problems.append((f"{field}.name", f"at most {MAX_NAME_BYTES} bytes"))
    arms = experiment.arms
    if len(arms) == 0:
        return problems  # ends the experiment
    if not MIN_ARMS <= len(arms) <= MAX_ARMS:
        problems.append((f"{field}.arms", f"{len(arms)} arms; between {MIN_ARMS} and {MAX_ARMS}, or none to end it"))
    names: set[str] = set()
    for position, arm in enumerate(arms):
        path = f"{field}.arms[{position}]"
        if not arm.name or len(arm.name.encode()) > MAX_NAME_BYTES:
            problems.append((f"{path}.name", f"1 to {MAX_NAME_BYTES} bytes required"))
        elif arm.name in names:
            problems.append((f"{path}.name", f"{arm.name!r} appears twice"))
        names.add(arm.name)
        if not math.isfinite(arm.weight) or arm.weight < 0.0:
            problems.append((f"{path}.weight", f"{arm.weight}; a finite weight >= 0 (0 means 1)"))
        if not arm.HasField("policy"):
            problems.append((f"{path}.policy", "required"))
        else:
            problems += validate_policy(arm.policy, f"{path}.policy")
    if experiment.HasField("adaptive"):
        problems += _adaptive_problems(experiment, f"{field}.adaptive")
    return problems


def _adaptive_problems(experiment: policy_pb2.Experiment, field: str) -> list[tuple[str, str]]:
    a = experiment.adaptive
    problems: list[tuple[str, str]] = []
    arms = len(experiment.arms)
    if a.allocation not in policy_pb2.AllocationMode.values():
        problems.append((f"{field}.allocation", f"unknown AllocationMode value {a.allocation}"))
    if a.floor_share != 0.0 and not (0.0 < a.floor_share < 1.0 / max(arms, 1)):
        problems.append((f"{field}.floor_share", f"{a.floor_share}; in (0, 1/{arms}) for {arms} arms, or 0 for 0.05"))
    if a.control_arm and a.control_arm not in {arm.name for arm in experiment.arms}:
        problems.append((f"{field}.control_arm", f"{a.control_arm!r} is not an arm of the experiment"))
    if a.promote_probability != 0.0 and not (0.5 < a.promote_probability < 1.0):
        problems.append((f"{field}.promote_probability", f"{a.promote_probability}; in (0.5, 1), or 0 for never"))
    for name in ("min_promotion_interval_s", "replay_tolerance"):
        value = getattr(a, name)
        if not math.isfinite(value) or value < 0.0:
            problems.append((f"{field}.{name}", f"{value}; finite and >= 0"))
    for position, parameter in enumerate(a.tunable_parameters):
        if parameter not in TUNABLE_PARAMETERS:
            problems.append(
                (f"{field}.tunable_parameters[{position}]", f"{parameter!r}: not a number of Policy or KindPolicy")
            )
    if a.promote_probability != 0.0 and not a.tunable_parameters:
        problems.append((f"{field}.tunable_parameters", "required with promote_probability"))
    return problems


def limited_adaptivity_problems(
    experiment: policy_pb2.Experiment, current: policy_pb2.Policy, field: str = "experiment"
) -> list[tuple[str, str]]:
    """With automatic promotion: the control must be the policy in force, the others move only named parameters."""
    a = experiment.adaptive
    if a.promote_probability == 0.0 or not experiment.arms:
        return []
    control = a.control_arm or experiment.arms[0].name
    problems: list[tuple[str, str]] = []
    for position, arm in enumerate(experiment.arms):
        path = f"{field}.arms[{position}].policy"
        if arm.name == control:
            for _, why in adaptivity_problems(arm.policy, current, (), path):
                problems.append((path, f"the control arm must have the policy in force: {why}"))
        else:
            problems += adaptivity_problems(arm.policy, current, list(a.tunable_parameters), path)
    return problems


@dataclass(frozen=True)
class Arm:
    """One arm, resolved for ranking: its policy and the kernels' matrix of it."""

    name: str
    policy: policy_pb2.Policy
    params: npt.NDArray[np.float64]
    share: float


@dataclass
class _Counts:
    retrievals: int = 0
    outcomes: int = 0
    successes: float = 0.0
    failures: float = 0.0

    def copy(self) -> _Counts:
        return _Counts(self.retrievals, self.outcomes, self.successes, self.failures)

    def encode(self) -> list[float]:
        return [self.retrievals, self.outcomes, self.successes, self.failures]

    @staticmethod
    def decode(values: list[Any]) -> _Counts:
        return _Counts(int(values[0]), int(values[1]), float(values[2]), float(values[3]))

    def posterior(self) -> ArmCounts:
        return ArmCounts(self.successes, self.failures, self.outcomes)


@dataclass
class _Adaptive:
    """The self-tuning state of a running experiment (persisted with the counts)."""

    rules: AdaptiveRules
    snapshot: int = 0
    shares: list[float] = field(default_factory=list)
    phase: int = policy_pb2.EXPERIMENT_PHASE_RUNNING
    promoted: str = ""
    promoted_counts: _Counts = field(default_factory=_Counts)
    control_low: float = 0.0
    decisions: list[policy_pb2.ExperimentDecision] = field(default_factory=list)
    held_until_outcomes: int = 0
    """After a HELD decision, the next promotion check waits until this many outcomes (no event per snapshot)."""

    def encode(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot,
            "shares": self.shares,
            "phase": int(self.phase),
            "promoted": self.promoted,
            "promoted_counts": self.promoted_counts.encode(),
            "control_low": self.control_low,
            "held_until_outcomes": self.held_until_outcomes,
        }

    def load(self, saved: dict[str, Any]) -> None:
        self.snapshot = int(saved.get("snapshot", 0))
        self.shares = [float(x) for x in saved.get("shares", self.shares)]
        self.phase = int(saved.get("phase", self.phase))
        self.promoted = str(saved.get("promoted", ""))
        self.promoted_counts = _Counts.decode(saved.get("promoted_counts", [0, 0, 0.0, 0.0]))
        self.control_low = float(saved.get("control_low", 0.0))
        self.held_until_outcomes = int(saved.get("held_until_outcomes", 0))

    def copy(self) -> _Adaptive:
        return _Adaptive(
            self.rules,
            self.snapshot,
            list(self.shares),
            self.phase,
            self.promoted,
            self.promoted_counts.copy(),
            self.control_low,
            list(self.decisions),
            self.held_until_outcomes,
        )


@dataclass
class _Running:
    experiment: policy_pb2.Experiment
    generation: int
    arms: list[Arm]
    cumulative: list[float]
    counts: dict[str, _Counts] = field(default_factory=dict)
    adaptive: _Adaptive = field(default_factory=lambda: _Adaptive(AdaptiveRules()))
    installed: policy_pb2.Policy | None = None
    """While watching: the policy the promotion installed, once known (the engine's own object when possible)."""

    def outcomes_total(self) -> int:
        return sum(c.outcomes for c in self.counts.values()) + self.adaptive.promoted_counts.outcomes

    def posteriors(self) -> list[ArmCounts]:
        return [self.counts[arm.name].posterior() for arm in self.arms]


def _resolve(experiment: policy_pb2.Experiment, generation: int) -> _Running | None:
    if not experiment.arms:
        return None
    weights = [arm.weight or 1.0 for arm in experiment.arms]
    if sum(weights) <= 0.0:
        weights = [1.0] * len(weights)
    total = sum(weights)
    arms = []
    for arm, weight in zip(experiment.arms, weights, strict=True):
        policy = policy_pb2.Policy()
        policy.CopyFrom(arm.policy)
        if not policy.name:
            policy.name = arm.name
        arms.append(Arm(arm.name, policy, params_from_policy(policy), weight / total))
    cumulative = list(np.cumsum(weights, dtype=np.float64))
    rules = AdaptiveRules.from_proto(experiment)
    adaptive = _Adaptive(rules, shares=[1.0 / len(arms)] * len(arms) if rules.thompson else [a.share for a in arms])
    return _Running(
        experiment, generation, arms, [float(c) for c in cumulative], {a.name: _Counts() for a in arms}, adaptive
    )


def _arm_stats(name: str, share: float, counts: _Counts) -> policy_pb2.ArmStats:
    trials = counts.successes + counts.failures
    low, high = wilson_interval(counts.successes, trials)
    return policy_pb2.ArmStats(
        name=name,
        share=share,
        retrieval_count=counts.retrievals,
        outcome_count=counts.outcomes,
        successes=counts.successes,
        failures=counts.failures,
        success_rate=counts.successes / trials if trials > 0 else 0.0,
        success_low=low,
        success_high=high,
    )


class Experiments:
    """The running experiment of one data directory: assignment, per-arm counts, persistence. Thread-safe."""

    def __init__(self, store: RocksStore, *, engine: Engine | None = None) -> None:
        self._store = store
        self._engine = engine
        self._lock = threading.Lock()
        self._review_lock = threading.Lock()
        self._reviewing = False
        raw = store.meta(META_EXPERIMENT)
        counts_raw = store.meta(META_EXPERIMENT_COUNTS)
        saved: dict[str, Any] = json.loads(counts_raw) if counts_raw else {"generation": 0, "arms": {}}
        self._generation = int(saved["generation"])
        self._last_promotion_s: float | None = saved.get("last_promotion_s")
        self._running = _resolve(policy_pb2.Experiment.FromString(raw), self._generation) if raw else None
        if self._running is not None:
            for name, values in saved["arms"].items():
                if name in self._running.counts:
                    self._running.counts[name] = _Counts.decode(values)
            self._running.adaptive.load(saved.get("adaptive", {}))
            decisions = store.meta(META_EXPERIMENT_DECISIONS)
            if decisions:
                self._running.adaptive.decisions = list(policy_pb2.ExperimentStats.FromString(decisions).decisions)

    @property
    def generation(self) -> int:
        """Increases with every SetExperiment, promotion and rollback; an outcome counts only for its generation."""
        return self._generation

    def assign(self, retrieval_id: str) -> Arm | None:
        """The arm that ranks this retrieval, or None when no experiment runs (or it was rolled back)."""
        return self.assignment(retrieval_id)[0]

    def assignment(self, retrieval_id: str) -> tuple[Arm | None, int]:
        """The arm that ranks this retrieval and the generation it belongs to, read together.

        A promotion may publish between two separate reads: an arm drawn by
        the running split would then be logged under the promoted generation
        and its outcome counted as the promoted policy's.
        """
        with self._lock:
            return self._assign(retrieval_id), self._generation

    def _assign(self, retrieval_id: str) -> Arm | None:
        running = self._running
        if running is None:
            return None
        adaptive = running.adaptive
        if adaptive.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING:
            if not self._promotion_in_force(running):
                # The operator replaced the promoted policy (UpdatePolicy undoes a promotion): the policy in force
                # ranks, unlabelled, and a review ends the watch. (For a moment after a promotion commits, the
                # engine still holds the old policy: that retrieval goes unlabelled and the review finds no change.)
                self._start_review(running)
                return None
            return next(a for a in running.arms if a.name == adaptive.promoted)
        if adaptive.phase == policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK:
            return None
        if adaptive.rules.thompson:
            point = assignment_point(running.experiment.name, adaptive.snapshot, retrieval_id)
            return running.arms[pick(point, adaptive.shares)]
        return running.arms[arm_position(running.experiment.name, retrieval_id, running.cumulative)]

    def note_retrieval(self, arm: Arm, generation: int) -> None:
        """Count one retrieval ranked by ``arm`` (in memory; persisted with the next outcome)."""
        with self._lock:
            running = self._running
            if running is None or running.generation != generation:
                return
            if running.adaptive.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING:
                running.adaptive.promoted_counts.retrievals += 1
            elif arm.name in running.counts:
                running.counts[arm.name].retrievals += 1

    def on_outcome(self, txn: Txn, retrieval_id: str, success: float, failure: float) -> None:
        """Inside a ReportOutcome mutation: add the outcome to the arm that ranked ``retrieval_id``."""
        from ..replay.capture import read_observation

        observation = read_observation(self._store, retrieval_id)
        running = self._running
        if observation is None or running is None or not observation.arm:
            return
        if observation.generation != running.generation or observation.arm not in running.counts:
            return
        name = observation.arm
        watching = running.adaptive.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING
        with self._lock:
            snapshot = {n: c.copy() for n, c in running.counts.items()}
            adaptive = running.adaptive.copy()
        entry = adaptive.promoted_counts if watching else snapshot[name]
        entry.outcomes += 1
        entry.successes += success
        entry.failures += failure
        txn.put(CF_META, META_EXPERIMENT_COUNTS, self._encode(running.generation, snapshot, adaptive))

        def publish() -> None:
            with self._lock:
                counts = running.adaptive.promoted_counts if watching else running.counts[name]
                counts.outcomes += 1
                counts.successes += success
                counts.failures += failure
            self._maybe_review(running)

        txn.on_commit(publish)

    def _encode(
        self,
        generation: int,
        counts: dict[str, _Counts],
        adaptive: _Adaptive | None = None,
        last_promotion_s: float | None = None,
    ) -> bytes:
        arms = {n: c.encode() for n, c in counts.items()}
        last = self._last_promotion_s if last_promotion_s is None else last_promotion_s
        # The last promotion's time outlives the experiment: the interval holds across experiments.
        data: dict[str, Any] = {"generation": generation, "arms": arms, "last_promotion_s": last}
        if adaptive is not None:
            data["adaptive"] = adaptive.encode()
        return json.dumps(data).encode()

    def snapshot(self) -> policy_pb2.ExperimentStats | None:
        """The running experiment's per-arm outcomes, posteriors and decisions, or None."""
        running = self._running
        if running is None:
            return None
        adaptive = running.adaptive
        stats = policy_pb2.ExperimentStats(
            name=running.experiment.name,
            allocation=policy_pb2.ALLOCATION_MODE_THOMPSON
            if adaptive.rules.thompson
            else policy_pb2.ALLOCATION_MODE_FIXED,
            phase=adaptive.phase,  # type: ignore[arg-type]
            control_arm=running.arms[adaptive.rules.control].name,
            promoted_arm=adaptive.promoted,
            snapshot=adaptive.snapshot,
            decisions=adaptive.decisions,
        )
        with self._lock:
            counts = [running.counts[arm.name].copy() for arm in running.arms]
            promoted = adaptive.promoted_counts.copy()
            shares = list(adaptive.shares)
        posteriors = [c.posterior() for c in counts]
        best = probability_best(posteriors)
        control = posteriors[adaptive.rules.control]
        for position, arm in enumerate(running.arms):
            entry = stats.arms.add()
            entry.CopyFrom(_arm_stats(arm.name, shares[position], counts[position]))
            entry.probability_best = best[position]
            entry.probability_beats_control = (
                0.5 if position == adaptive.rules.control else probability_better(posteriors[position], control)
            )
        if adaptive.promoted:
            stats.promoted_stats.CopyFrom(_arm_stats(adaptive.promoted, 1.0, promoted))
        return stats

    def fill_stats(self, response: memory_service_pb2.GetStatsResponse) -> None:
        """Add the running experiment to a GetStats answer (a watch whose policy was replaced gets its review)."""
        running = self._running
        if running is not None and running.adaptive.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING:
            with self._lock:
                if not self._promotion_in_force(running):
                    self._start_review(running)
        stats = self.snapshot()
        if stats is not None:
            response.experiment.CopyFrom(stats)

    # ---- self-tuning -----------------------------------------------------------------------

    def _maybe_review(self, running: _Running) -> None:
        """After an outcome: start a review on a background thread when a snapshot is due (one at a time)."""
        adaptive = running.adaptive
        if not (adaptive.rules.thompson or adaptive.rules.promote_probability > 0.0) or self._engine is None:
            return
        if adaptive.phase == policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK:
            return
        if not snapshot_due(running.outcomes_total(), adaptive.snapshot, adaptive.rules.snapshot_outcomes):
            return
        self._start_review(running)

    def _start_review(self, running: _Running) -> None:
        """Run :meth:`review` on a background thread unless one is running."""
        if self._engine is None:
            return
        with self._review_lock:
            if self._reviewing:
                return
            self._reviewing = True
        threading.Thread(
            target=self._review_thread, args=(running,), name="memevo-experiment-review", daemon=True
        ).start()

    def _review_thread(self, running: _Running) -> None:
        try:
            self.review(running)
        except Exception:  # a failed review must not take the sidecar down; the next snapshot tries again
            log.exception("experiment review failed")
        finally:
            with self._review_lock:
                self._reviewing = False

    def _promotion_in_force(self, running: _Running, current: policy_pb2.Policy | None = None) -> bool:
        """While watching: whether ``current`` (default: the engine's policy) is the one the promotion installed.

        The engine's policy is compared by identity after the first look (the engine keeps the object it was
        given), by value otherwise, against the promotion recomputed from its decision after a restart.
        """
        engine = self._engine
        if engine is None:
            return True
        mine = current is None
        current = engine.policy if current is None else current
        if running.installed is current:
            return True
        if running.installed is None:
            promotion = next(
                (
                    d
                    for d in reversed(running.adaptive.decisions)
                    if d.kind == policy_pb2.EXPERIMENT_DECISION_KIND_PROMOTED
                ),
                None,
            )
            arm = next((a for a in running.arms if a.name == running.adaptive.promoted), None)
            if promotion is None or arm is None:
                return True  # nothing to compare with: the watch goes on as before
            parameters = list(running.experiment.adaptive.tunable_parameters)
            running.installed = promoted_policy(arm.policy, promotion.previous_policy, parameters)
            running.installed.name = arm.name
        if current != running.installed:
            return False
        if mine:
            running.installed = current
        return True

    def _stored_policy(self) -> policy_pb2.Policy | None:
        """The data directory's policy as committed (the engine publishes its copy a moment after a commit)."""
        from ..engine import META_POLICY

        raw = self._store.meta(META_POLICY)
        return policy_pb2.Policy.FromString(raw) if raw else None

    def review(self, running: _Running | None = None) -> None:
        """Take a posterior snapshot and apply the promotion or rollback rule (see the module docstring)."""
        running = running or self._running
        if running is None or running is not self._running or self._engine is None:
            return
        adaptive = running.adaptive
        rules = adaptive.rules
        if adaptive.phase == policy_pb2.EXPERIMENT_PHASE_WATCHING:
            self._review_watch(running)
            return
        if adaptive.phase != policy_pb2.EXPERIMENT_PHASE_RUNNING:
            return
        with self._lock:
            posteriors = running.posteriors()
            total = running.outcomes_total()
            counts = {n: c.copy() for n, c in running.counts.items()}
        shares = thompson_shares(posteriors, rules.floor_share) if rules.thompson else list(adaptive.shares)
        call = None
        if total >= adaptive.held_until_outcomes:
            call = promotion_call(posteriors, rules, now_s=now_s(), last_promotion_s=self._last_promotion_s)
        if call is None:
            self._save_snapshot(running, shares, total, counts)
            return
        self._promote_or_hold(running, call.arm, call.probability_better, call.reason, counts, total)

    def _save_snapshot(self, running: _Running, shares: list[float], total: int, counts: dict[str, _Counts]) -> None:
        snapshot = max(running.adaptive.snapshot + 1, total // max(running.adaptive.rules.snapshot_outcomes, 1))

        def mutation(txn: Txn) -> None:
            if running is not self._running:
                return
            with self._lock:
                current = {n: c.copy() for n, c in running.counts.items()}
                adaptive = running.adaptive.copy()
            adaptive.snapshot = snapshot
            adaptive.shares = shares
            txn.put(CF_META, META_EXPERIMENT_COUNTS, self._encode(running.generation, current, adaptive))

            def publish() -> None:
                with self._lock:
                    running.adaptive.snapshot = snapshot
                    running.adaptive.shares = shares

            txn.on_commit(publish)

        self._store.apply(mutation)

    def _decision(
        self,
        running: _Running,
        kind: int,
        arm: str,
        probability: float,
        reason: str,
        counts: dict[str, _Counts],
    ) -> policy_pb2.ExperimentDecision:
        adaptive = running.adaptive
        control = running.arms[adaptive.rules.control].name
        engine = self._engine
        assert engine is not None
        decision = policy_pb2.ExperimentDecision(
            kind=kind,  # type: ignore[arg-type]
            arm=arm,
            control_arm=control,
            decided_at_s=now_s(),
            probability_better=probability,
            arm_stats=_arm_stats(arm, 0.0, counts[arm]),
            control_stats=_arm_stats(control, 0.0, counts[control]),
            replay_candidate_objective=math.nan,
            replay_current_objective=math.nan,
            previous_policy=engine.policy,
            reason=reason,
        )
        for stats in (decision.arm_stats, decision.control_stats):
            position = next(i for i, a in enumerate(running.arms) if a.name == stats.name)
            stats.share = adaptive.shares[position] if position < len(adaptive.shares) else 0.0
        return decision

    def _emit_decision(self, txn: Txn, decision: policy_pb2.ExperimentDecision) -> None:
        engine = self._engine
        assert engine is not None
        engine.emit(
            txn,
            events_pb2.ChangeEvent(
                sequence=txn.next_sequence(),
                type=events_pb2.CHANGE_EVENT_TYPE_EXPERIMENT_DECISION,
                recorded_at=to_timestamp(decision.decided_at_s),
                reason=decision.reason,
                detail=decision.arm,
                experiment_decision=decision,
            ),
        )

    def _replay_check(self, candidate: policy_pb2.Policy, current: policy_pb2.Policy) -> tuple[float, float, int]:
        """(candidate objective, current objective, retrievals) of the captured traffic; NaNs without traffic."""
        from pathlib import Path

        from ..replay.export import export_log
        from ..replay.replay import load_log, replay

        engine = self._engine
        assert engine is not None
        with tempfile.TemporaryDirectory(prefix="memevo-replay-check-") as scratch:
            path = Path(scratch) / "log.jsonl"
            export_log(Path(engine.config.data_dir), path)
            captured = load_log(path)
        if captured.retrieval_count == 0:
            return math.nan, math.nan, 0
        mine = replay(captured, candidate)
        theirs = replay(captured, current)
        return mine.objective, theirs.objective, mine.retrievals

    def _promote_or_hold(
        self, running: _Running, index: int, probability: float, reason: str, counts: dict[str, _Counts], total: int
    ) -> None:
        engine = self._engine
        assert engine is not None
        adaptive = running.adaptive
        arm = running.arms[index]
        current = engine.policy
        parameters = list(running.experiment.adaptive.tunable_parameters)
        # Checked again: the policy in force may have changed since SetExperiment.
        problems = adaptivity_problems(arm.policy, current, parameters, "arm")
        candidate = promoted_policy(arm.policy, current, parameters)
        candidate.name = arm.name  # named after the arm, as GetStats and the decisions name it
        decision = self._decision(
            running, policy_pb2.EXPERIMENT_DECISION_KIND_PROMOTED, arm.name, probability, reason, counts
        )
        if problems:
            decision.kind = policy_pb2.EXPERIMENT_DECISION_KIND_HELD
            decision.reason = f"{reason}; held: {problems[0][1]}"
        else:
            try:
                mine, theirs, retrievals = self._replay_check(candidate, current)
            except Exception as error:  # no promotion without the offline check; held, and tried again later
                log.exception("experiment: the replay check failed")
                decision.kind = policy_pb2.EXPERIMENT_DECISION_KIND_HELD
                decision.reason = f"{reason}; held: the replay check failed ({type(error).__name__}: {error})"
                self._apply_decision(running, decision, total, promote=None)
                return
            decision.replay_candidate_objective = mine
            decision.replay_current_objective = theirs
            decision.replay_retrievals = retrievals
            if not replay_allows(mine, theirs, adaptive.rules.replay_tolerance):
                decision.kind = policy_pb2.EXPERIMENT_DECISION_KIND_HELD
                decision.reason = (
                    f"{reason}; held: replay objective {mine:.4f} under the candidate < {theirs:.4f} under the "
                    f"policy in force - {adaptive.rules.replay_tolerance} over {retrievals} retrievals"
                )
        if decision.kind == policy_pb2.EXPERIMENT_DECISION_KIND_HELD:
            self._apply_decision(running, decision, total, promote=None)
            return
        decision.reason = (
            f"{reason}; replay {decision.replay_candidate_objective:.4f} >= {decision.replay_current_objective:.4f}"
        )
        control = decision.control_stats
        self._apply_decision(running, decision, total, promote=(candidate, control.success_low))

    def _apply_decision(
        self,
        running: _Running,
        decision: policy_pb2.ExperimentDecision,
        total: int,
        *,
        promote: tuple[policy_pb2.Policy, float] | None,
        rollback: policy_pb2.Policy | None = None,
    ) -> None:
        """Write ``decision`` (with the policy it sets, if any) and the experiment's new state in one transaction."""
        engine = self._engine
        assert engine is not None
        with self._lock:
            adaptive = running.adaptive.copy()
            counts = {n: c.copy() for n, c in running.counts.items()}
        adaptive.decisions = [*adaptive.decisions, decision][-MAX_DECISIONS:]
        generation = running.generation
        last_promotion = self._last_promotion_s
        if decision.kind == policy_pb2.EXPERIMENT_DECISION_KIND_HELD:
            adaptive.held_until_outcomes = total + adaptive.rules.min_outcomes
            adaptive.snapshot += 1
        elif promote is not None:
            adaptive.phase = policy_pb2.EXPERIMENT_PHASE_WATCHING
            adaptive.promoted = decision.arm
            adaptive.promoted_counts = _Counts()
            adaptive.control_low = promote[1]
            adaptive.snapshot += 1
            generation = self._generation + 1
            last_promotion = decision.decided_at_s
        else:
            adaptive.phase = policy_pb2.EXPERIMENT_PHASE_ROLLED_BACK
            generation = self._generation + 1

        def also(txn: Txn) -> None:
            self._emit_decision(txn, decision)
            kept = policy_pb2.ExperimentStats(decisions=adaptive.decisions)
            txn.put(CF_META, META_EXPERIMENT_DECISIONS, kept.SerializeToString())
            txn.put(CF_META, META_EXPERIMENT_COUNTS, self._encode(generation, counts, adaptive, last_promotion))

            def publish() -> None:
                with self._lock:
                    if running is not self._running:
                        return
                    running.adaptive = adaptive
                    running.generation = generation
                    running.installed = promote[0] if promote is not None else None
                    self._generation = generation
                    self._last_promotion_s = last_promotion

            txn.on_commit(publish)

        if promote is not None:
            engine.update_policy(promote[0], also=also)
        elif rollback is not None:
            engine.update_policy(rollback, also=also)
        else:
            self._store.apply(also)

    def _review_watch(self, running: _Running) -> None:
        adaptive = running.adaptive
        engine = self._engine
        assert engine is not None
        with self._lock:
            promoted = adaptive.promoted_counts.copy()
            counts = {n: c.copy() for n, c in running.counts.items()}
            total = running.outcomes_total()
            # Decided by the committed policy: a promotion's own commit publishes the engine's copy after the phase.
            in_force = self._stored_policy() or engine.policy
            replaced = not self._promotion_in_force(running, in_force)
        why = rollback_call(promoted.posterior(), adaptive.control_low, adaptive.rules)
        if replaced:
            # Restoring the previous policy now would overwrite the operator's: the watch ends, the policy stays.
            why = (
                f"the promoted policy was replaced by UpdatePolicy ({in_force.name!r}); the watch ends and "
                "the policy in force stays"
            )
        if why is None:
            # A review started by a Recall or GetStats that found the policy replaced may find nothing due.
            if snapshot_due(total, adaptive.snapshot, adaptive.rules.snapshot_outcomes):
                self._save_snapshot(running, list(adaptive.shares), total, counts)
            return
        promotion = next(
            (d for d in reversed(adaptive.decisions) if d.kind == policy_pb2.EXPERIMENT_DECISION_KIND_PROMOTED), None
        )
        if promotion is None:
            return
        decision = self._decision(
            running, policy_pb2.EXPERIMENT_DECISION_KIND_ROLLED_BACK, adaptive.promoted, 0.0, why, counts
        )
        decision.control_stats.CopyFrom(promotion.control_stats)
        decision.arm_stats.CopyFrom(promotion.arm_stats)
        decision.promoted_stats.CopyFrom(_arm_stats(adaptive.promoted, 1.0, promoted))
        decision.probability_better = promotion.probability_better
        rollback = None if replaced else promotion.previous_policy
        self._apply_decision(running, decision, total, promote=None, rollback=rollback)

    # ---- changes ---------------------------------------------------------------------------

    def set(self, experiment: policy_pb2.Experiment, *, request: RequestKey | None = None) -> policy_pb2.Experiment:
        """Replace the running experiment (no arms: end it); INVALID_ARGUMENT naming every bad field."""
        problems = validate_experiment(experiment)
        if not problems and self._engine is not None:
            problems = limited_adaptivity_problems(experiment, self._engine.policy)
        if problems:
            raise InvalidArgument(problems)

        def mutation(txn: Txn) -> policy_pb2.Experiment:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                return policy_pb2.Experiment.FromString(previous)
            self._replace(txn, experiment)
            if request is not None:
                request.record(txn, experiment.SerializeToString())
            return experiment

        return self._store.apply(mutation)

    def _replace(self, txn: Txn, experiment: policy_pb2.Experiment) -> None:
        """Inside ``txn``: ``experiment`` (no arms: none) runs from the next generation, with fresh counts."""
        generation = self._generation + 1
        running = _resolve(experiment, generation)
        if running is None:
            txn.delete(CF_META, META_EXPERIMENT)
        else:
            txn.put(CF_META, META_EXPERIMENT, experiment.SerializeToString())
        txn.delete(CF_META, META_EXPERIMENT_DECISIONS)
        txn.put(
            CF_META,
            META_EXPERIMENT_COUNTS,
            self._encode(generation, running.counts if running else {}, running.adaptive if running else None),
        )

        def publish() -> None:
            with self._lock:
                self._generation = generation
                self._running = running

        txn.on_commit(publish)

    def promote(
        self, engine: Engine, arm_name: str, *, request: RequestKey | None = None
    ) -> tuple[policy_pb2.Policy, policy_pb2.ExperimentStats]:
        """Make ``arm_name``'s policy the data directory's and end the experiment; returns (policy, final stats).

        NOT_FOUND when no running arm has that name (unless ``request`` repeats a promotion that worked).
        """
        previous = request.previous(self._store) if request is not None else None
        if previous is not None:
            answer = memory_service_pb2.PromoteArmResponse.FromString(previous)
            return answer.policy, answer.final_stats
        running = self._running
        arm = None if running is None else next((a for a in running.arms if a.name == arm_name), None)
        if arm is None:
            raise NotFound(
                f"arm: no arm {arm_name!r} in the running experiment",
                reason="UNKNOWN_ARM",
                metadata={"field": "arm"},
            )
        assert running is not None
        final = self.snapshot() or policy_pb2.ExperimentStats()
        policy = policy_pb2.Policy()
        policy.CopyFrom(arm.policy)
        with self._lock:
            counts = {n: c.copy() for n, c in running.counts.items()}
        # On the change log like the automatic decisions, so that an audit sees who changed the policy and on what.
        decision = self._decision(
            running, policy_pb2.EXPERIMENT_DECISION_KIND_PROMOTED, arm.name, 0.0, "promoted by PromoteArm", counts
        )
        chosen = next((a for a in final.arms if a.name == arm.name), None)
        if chosen is not None:
            decision.probability_better = chosen.probability_beats_control

        def also(txn: Txn) -> None:
            # The policy, the decision and the experiment's end land in one transaction: a crash between them
            # would leave the experiment splitting traffic under a policy it already replaced.
            self._emit_decision(txn, decision)
            self._replace(txn, policy_pb2.Experiment())
            if request is not None:
                answer = memory_service_pb2.PromoteArmResponse(policy=policy, final_stats=final)
                request.record(txn, answer.SerializeToString())

        return engine.update_policy(policy, also=also), final


@dataclass
class Observation:
    """What a retrieval scope learns: its id, its arm, and (set by the caller) what it returned."""

    retrieval_id: str
    arm: str
    returned_ids: list[int] = field(default_factory=list)


@contextmanager
def observed_retrieval(engine: Engine, query: RecallQuery) -> Iterator[Observation]:
    """Wrap one Recall or BuildContext: assign an arm, rank with its policy, log the retrieval.

    The caller ranks inside the block and fills ``returned_ids``;
    on a clean exit the retrieval record (for ReportOutcome) and its candidate
    log (for replay) are written.
    """
    from ..replay.capture import observation_entry

    retrieval_id = engine.new_retrieval_id()
    arm, generation = engine.experiments.assignment(retrieval_id)
    observation = Observation(retrieval_id, arm.name if arm is not None else "")
    with engine.scoring_policy(
        arm.policy if arm is not None else None, arm.params if arm is not None else None
    ) as pool:
        yield observation
    engine.record_retrieval(
        observation.returned_ids,
        query.turn,
        retrieval_id=retrieval_id,
        beside=[observation_entry(query, observation, pool, generation)],
    )
    if arm is not None:
        engine.experiments.note_retrieval(arm, generation)
