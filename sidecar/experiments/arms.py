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
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_service_pb2, policy_pb2

from ..errors import InvalidArgument, NotFound
from ..idempotency import RequestKey
from ..policy import params_from_policy, validate_policy
from ..store.rocks import CF_META, RocksStore, Txn

if TYPE_CHECKING:
    from ..domain import RecallQuery
    from ..engine import Engine

META_EXPERIMENT = b"experiment"
"""The running Experiment message (absent when none runs)."""
META_EXPERIMENT_COUNTS = b"experiment_counts"
"""JSON: {"generation": int, "arms": {name: [retrievals, outcomes, successes, failures]}}."""
MAX_ARMS = 16
MIN_ARMS = 2
MAX_NAME_BYTES = 64
WILSON_Z = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


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


@dataclass
class _Running:
    experiment: policy_pb2.Experiment
    generation: int
    arms: list[Arm]
    cumulative: list[float]
    counts: dict[str, _Counts] = field(default_factory=dict)


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
    return _Running(experiment, generation, arms, [float(c) for c in cumulative], {a.name: _Counts() for a in arms})


class Experiments:
    """The running experiment of one data directory: assignment, per-arm counts, persistence. Thread-safe."""

    def __init__(self, store: RocksStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        raw = store.meta(META_EXPERIMENT)
        counts_raw = store.meta(META_EXPERIMENT_COUNTS)
        saved: dict[str, Any] = json.loads(counts_raw) if counts_raw else {"generation": 0, "arms": {}}
        self._generation = int(saved["generation"])
        self._running = _resolve(policy_pb2.Experiment.FromString(raw), self._generation) if raw else None
        if self._running is not None:
            for name, values in saved["arms"].items():
                if name in self._running.counts:
                    self._running.counts[name] = _Counts(int(values[0]), int(values[1]), values[2], values[3])

    @property
    def generation(self) -> int:
        """Increases with every SetExperiment; an outcome counts only for its retrieval's generation."""
        return self._generation

    def assign(self, retrieval_id: str) -> Arm | None:
        """The arm that ranks this retrieval, or None when no experiment runs."""
        running = self._running
        if running is None:
            return None
        return running.arms[arm_position(running.experiment.name, retrieval_id, running.cumulative)]

    def note_retrieval(self, arm: Arm, generation: int) -> None:
        """Count one retrieval ranked by ``arm`` (in memory; persisted with the next outcome)."""
        with self._lock:
            running = self._running
            if running is not None and running.generation == generation and arm.name in running.counts:
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
        with self._lock:
            snapshot = {
                n: _Counts(c.retrievals, c.outcomes, c.successes, c.failures) for n, c in running.counts.items()
            }
        entry = snapshot[name]
        entry.outcomes += 1
        entry.successes += success
        entry.failures += failure
        txn.put(CF_META, META_EXPERIMENT_COUNTS, self._encode(running.generation, snapshot))

        def publish() -> None:
            with self._lock:
                counts = running.counts[name]
                counts.outcomes += 1
                counts.successes += success
                counts.failures += failure

        txn.on_commit(publish)

    @staticmethod
    def _encode(generation: int, counts: dict[str, _Counts]) -> bytes:
        arms = {n: [c.retrievals, c.outcomes, c.successes, c.failures] for n, c in counts.items()}
        return json.dumps({"generation": generation, "arms": arms}).encode()

    def snapshot(self) -> policy_pb2.ExperimentStats | None:
        """The running experiment's per-arm outcomes, or None."""
        running = self._running
        if running is None:
            return None
        stats = policy_pb2.ExperimentStats(name=running.experiment.name)
        with self._lock:
            for arm in running.arms:
                counts = running.counts[arm.name]
                trials = counts.successes + counts.failures
                low, high = wilson_interval(counts.successes, trials)
                stats.arms.add(
                    name=arm.name,
                    share=arm.share,
                    retrieval_count=counts.retrievals,
                    outcome_count=counts.outcomes,
                    successes=counts.successes,
                    failures=counts.failures,
                    success_rate=counts.successes / trials if trials > 0 else 0.0,
                    success_low=low,
                    success_high=high,
                )
        return stats

    def fill_stats(self, response: memory_service_pb2.GetStatsResponse) -> None:
        """Add the running experiment to a GetStats answer."""
        stats = self.snapshot()
        if stats is not None:
            response.experiment.CopyFrom(stats)

    # ---- changes ---------------------------------------------------------------------------

    def set(self, experiment: policy_pb2.Experiment, *, request: RequestKey | None = None) -> policy_pb2.Experiment:
        """Replace the running experiment (no arms: end it); INVALID_ARGUMENT naming every bad field."""
        problems = validate_experiment(experiment)
        if problems:
            raise InvalidArgument(problems)

        def mutation(txn: Txn) -> policy_pb2.Experiment:
            previous = request.previous(txn) if request is not None else None
            if previous is not None:
                return policy_pb2.Experiment.FromString(previous)
            generation = self._generation + 1
            running = _resolve(experiment, generation)
            if running is None:
                txn.delete(CF_META, META_EXPERIMENT)
            else:
                txn.put(CF_META, META_EXPERIMENT, experiment.SerializeToString())
            txn.put(CF_META, META_EXPERIMENT_COUNTS, self._encode(generation, running.counts if running else {}))
            if request is not None:
                request.record(txn, experiment.SerializeToString())

            def publish() -> None:
                with self._lock:
                    self._generation = generation
                    self._running = running

            txn.on_commit(publish)
            return experiment

        return self._store.apply(mutation)

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
        final = self.snapshot() or policy_pb2.ExperimentStats()
        policy = policy_pb2.Policy()
        policy.CopyFrom(arm.policy)
        policy = engine.update_policy(policy, request=request.derived("promote-policy") if request else None)
        self.set(policy_pb2.Experiment())
        if request is not None:
            self._remember_promotion(request, policy, final)
        return policy, final

    def _remember_promotion(
        self, request: RequestKey, policy: policy_pb2.Policy, final: policy_pb2.ExperimentStats
    ) -> None:
        answer = memory_service_pb2.PromoteArmResponse(policy=policy, final_stats=final)

        def mutation(txn: Txn) -> None:
            request.record(txn, answer.SerializeToString())

        self._store.apply(mutation)


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
    arm = engine.experiments.assign(retrieval_id)
    generation = engine.experiments.generation
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
