"""Self-tuning experiments as pure functions: Thompson shares, assignment, promotion and rollback rules.

Everything here is deterministic and free of I/O, so the sidecar
(:mod:`memevo.sidecar.experiments.arms`) and the simulation benchmark
(``benchmarks/self_tuning.py``) run the very same code.

Thompson sampling, replayably. Per-retrieval Thompson sampling draws a
success rate from every arm's Beta posterior and picks the largest; the
probability that arm *i* is picked is exactly P(arm *i* has the best rate).
So instead of drawing, the sidecar computes those probabilities once per
*posterior snapshot* (every ``snapshot_outcomes`` outcomes), raises every
share to the floor, and maps a 64-bit hash of (experiment name, snapshot
number, retrieval id) into the cumulative shares. A retrieval's arm is then a
function of its id and the snapshot: replaying the captured traffic with the
same snapshots gives the same arms, and the split follows Thompson's. The
probabilities are integrated on a grid (no random draws at all), so two
sidecars with the same counts compute the same shares.

Looking repeatedly. Automatic decisions are taken only at snapshots, not on
every outcome, and the promotion probability should be set with the number of
looks in mind: with 0.95 and a hundred looks, an arm no better than the
control is promoted far more often than 5 % of the time (the benchmark
measures it; see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memevo.v1 import policy_pb2

GRID_POINTS = 2048
"""Points of the quadrature grid over the arms' posterior mass."""
GRID_SIGMAS = 10.0
"""The grid spans each posterior's mean +- this many standard deviations (the rest is below 1e-20)."""
DEFAULT_FLOOR_SHARE = 0.05
DEFAULT_SNAPSHOT_OUTCOMES = 20
DEFAULT_MIN_OUTCOMES = 100
DEFAULT_MIN_PROMOTION_INTERVAL_S = 3600.0


@dataclass(frozen=True)
class ArmCounts:
    """One arm's outcome weights (SUCCESS = 1, PARTIAL = 0.5 each side, rewards by size)."""

    successes: float
    failures: float
    outcomes: int
    """ReportOutcome calls counted (the minimum-outcomes rules count these)."""


@dataclass(frozen=True)
class AdaptiveRules:
    """An experiment's adaptive settings with defaults applied (see AdaptiveSettings in policy.proto)."""

    thompson: bool = False
    """Outcome-driven shares instead of the weights."""
    floor_share: float = DEFAULT_FLOOR_SHARE
    """Smallest share of any arm under Thompson allocation, in (0, 1 / arms)."""
    snapshot_outcomes: int = DEFAULT_SNAPSHOT_OUTCOMES
    """Outcomes between posterior snapshots (count)."""
    control: int = 0
    """Index of the control arm."""
    promote_probability: float = 0.0
    """P(arm beats control) needed to promote automatically; 0 = never."""
    min_outcomes: int = DEFAULT_MIN_OUTCOMES
    """Outcomes the candidate and the control need before a promotion, the promoted policy before a rollback."""
    min_promotion_interval_s: float = DEFAULT_MIN_PROMOTION_INTERVAL_S
    """Seconds between automatic promotions at least."""
    replay_tolerance: float = 0.0
    """How much lower the candidate's replay objective may be than the current policy's."""

    @classmethod
    def from_proto(cls, experiment: policy_pb2.Experiment) -> AdaptiveRules:
        """The rules of ``experiment`` (already validated), defaults filled in."""
        a = experiment.adaptive
        names = [arm.name for arm in experiment.arms]
        return cls(
            thompson=a.allocation == policy_pb2.ALLOCATION_MODE_THOMPSON,
            floor_share=a.floor_share or DEFAULT_FLOOR_SHARE,
            snapshot_outcomes=a.snapshot_outcomes or DEFAULT_SNAPSHOT_OUTCOMES,
            control=names.index(a.control_arm) if a.control_arm in names else 0,
            promote_probability=a.promote_probability,
            min_outcomes=a.min_outcomes or DEFAULT_MIN_OUTCOMES,
            min_promotion_interval_s=a.min_promotion_interval_s or DEFAULT_MIN_PROMOTION_INTERVAL_S,
            replay_tolerance=a.replay_tolerance,
        )


# ---- posteriors ------------------------------------------------------------------------------


def _posteriors(counts: Sequence[ArmCounts]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(pdf, cdf) of every arm's Beta(1 + s, 1 + f) on one shared grid; rows are arms, pdf pre-multiplied by dx."""
    a = np.array([1.0 + max(c.successes, 0.0) for c in counts])
    b = np.array([1.0 + max(c.failures, 0.0) for c in counts])
    mean = a / (a + b)
    sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    low = float(max(0.0, np.min(mean - GRID_SIGMAS * sd)))
    high = float(min(1.0, np.max(mean + GRID_SIGMAS * sd)))
    # Midpoints: the pdf is never evaluated at 0 or 1, where Beta(1, b) and Beta(a, 1) have their edges.
    dx = (high - low) / GRID_POINTS
    x = low + dx * (np.arange(GRID_POINTS) + 0.5)
    log_norm = np.array([math.lgamma(ai + bi) - math.lgamma(ai) - math.lgamma(bi) for ai, bi in zip(a, b, strict=True)])
    log_pdf = log_norm[:, None] + (a[:, None] - 1.0) * np.log(x)[None, :] + (b[:, None] - 1.0) * np.log1p(-x)[None, :]
    mass = np.exp(log_pdf) * dx
    mass /= mass.sum(axis=1, keepdims=True)  # the grid's rounding, not the posterior's tails, is what this removes
    # P(theta <= x) at each midpoint: the mass of the cells below plus half of its own.
    cdf = np.cumsum(mass, axis=1) - 0.5 * mass
    return mass, cdf


def probability_best(counts: Sequence[ArmCounts]) -> list[float]:
    """P(arm i has the highest success rate) for every arm, summing to 1 (uniform for one arm)."""
    if len(counts) == 0:
        return []
    if len(counts) == 1:
        return [1.0]
    mass, cdf = _posteriors(counts)
    log_cdf = np.log(np.maximum(cdf, 1e-300))
    others = log_cdf.sum(axis=0)[None, :] - log_cdf
    best = (mass * np.exp(others)).sum(axis=1)
    best = np.maximum(best, 0.0)
    return [float(p) for p in best / best.sum()]


def probability_better(arm: ArmCounts, control: ArmCounts) -> float:
    """P(arm's success rate > control's) under both Beta(1 + s, 1 + f) posteriors, in [0, 1]."""
    mass, cdf = _posteriors([arm, control])
    return float(min(max((mass[0] * cdf[1]).sum(), 0.0), 1.0))


def thompson_shares(counts: Sequence[ArmCounts], floor_share: float) -> list[float]:
    """Each arm's share: P(best) scaled into what the floors leave, plus the floor; sums to 1."""
    n = len(counts)
    floor = min(max(floor_share, 0.0), 1.0 / n)
    return [floor + (1.0 - n * floor) * p for p in probability_best(counts)]


def snapshot_due(outcomes_total: int, snapshot: int, snapshot_outcomes: int) -> bool:
    """True when enough outcomes arrived since snapshot number ``snapshot`` to take the next one."""
    return outcomes_total >= (snapshot + 1) * max(snapshot_outcomes, 1)


# ---- assignment ------------------------------------------------------------------------------


def assignment_point(experiment_name: str, snapshot: int, retrieval_id: str) -> float:
    """A uniform point in [0, 1) from a 64-bit hash of (name, snapshot number, retrieval id).

    Snapshot 0 hashes like the fixed split always did (name and id only), so an
    experiment's fixed assignments did not change when snapshots were added.
    """
    key = f"{experiment_name}\0{retrieval_id}" if snapshot == 0 else f"{experiment_name}\0{snapshot}\0{retrieval_id}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def pick(point: float, shares: Sequence[float]) -> int:
    """The index whose slice of the cumulative shares holds ``point`` (in [0, 1))."""
    total = float(sum(shares))
    edge = 0.0
    for index, share in enumerate(shares):
        edge += share
        if point * total < edge:
            return index
    return len(shares) - 1


# ---- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromotionCall:
    """The posterior rule says: promote ``arm`` (before the replay check)."""

    arm: int
    probability_better: float
    reason: str


def promotion_call(
    counts: Sequence[ArmCounts], rules: AdaptiveRules, *, now_s: float, last_promotion_s: float | None
) -> PromotionCall | None:
    """The arm to promote at this snapshot, or None.

    Rules: automatic promotion is on; the interval since the last automatic
    promotion has passed; the control has ``min_outcomes``; among the other arms
    with ``min_outcomes``, the one most likely to beat the control does so with
    probability >= :func:`required_probability` (``promote_probability``,
    tightened for several candidates).
    """
    if rules.promote_probability <= 0.0:
        return None
    if last_promotion_s is not None and now_s - last_promotion_s < rules.min_promotion_interval_s:
        return None
    control = counts[rules.control]
    if control.outcomes < rules.min_outcomes:
        return None
    best: tuple[float, int] | None = None
    for index, arm in enumerate(counts):
        if index == rules.control or arm.outcomes < rules.min_outcomes:
            continue
        p = probability_better(arm, control)
        if best is None or p > best[0]:
            best = (p, index)
    required = required_probability(rules.promote_probability, len(counts))
    if best is None or best[0] < required:
        return None
    return PromotionCall(
        best[1],
        best[0],
        f"P(better than control) {best[0]:.5f} >= {required:.5f} over >= {rules.min_outcomes} outcomes",
    )


def required_probability(promote_probability: float, arms: int) -> float:
    """What one candidate needs: the stated probability holds for the experiment, not for each comparison.

    With ``arms - 1`` candidates each compared with the control, a chance
    winner is ``arms - 1`` times as likely; Bonferroni's split of the error,
    ``1 - (1 - p) / (arms - 1)``, keeps the experiment's to ``1 - p`` per look.
    """
    return 1.0 - (1.0 - promote_probability) / max(arms - 1, 1)


def replay_allows(candidate_objective: float, current_objective: float, tolerance: float) -> bool:
    """The offline check: the candidate's replay must not be worse than the current policy's (minus tolerance).

    NaN on either side (no captured traffic to judge by) allows: the online
    evidence is then all there is, and the check must not block every new data
    directory.
    """
    if math.isnan(candidate_objective) or math.isnan(current_objective):
        return True
    return candidate_objective >= current_objective - tolerance


def rollback_call(promoted: ArmCounts, control_low: float, rules: AdaptiveRules) -> str | None:
    """Why the promoted policy should be rolled back, or None.

    Rolls back once the promoted policy has ``min_outcomes`` outcomes since its
    promotion and its success rate is below the low end of the control's 95 %
    interval at the promotion.
    """
    if promoted.outcomes < rules.min_outcomes:
        return None
    trials = promoted.successes + promoted.failures
    if trials <= 0:
        return None
    rate = promoted.successes / trials
    if rate >= control_low:
        return None
    return (
        f"success rate {rate:.4f} over {promoted.outcomes} outcomes since promotion "
        f"< {control_low:.4f}, the low end of the control's interval"
    )


# ---- limited adaptivity ----------------------------------------------------------------------

TUNABLE_POLICY_FIELDS = ("soft_conflict_similarity", "duplicate_similarity", "strategy_upgrade_probability")
"""Policy-level numbers an experiment may tune (the rest are structure, not knobs)."""
TUNABLE_KIND_FIELDS = tuple(f.name for f in policy_pb2.KindPolicy.DESCRIPTOR.fields if f.type == f.TYPE_DOUBLE)
"""Every number of KindPolicy; a name covers that field in every kind's entry."""
TUNABLE_PARAMETERS = frozenset(TUNABLE_POLICY_FIELDS + TUNABLE_KIND_FIELDS)


def tuning_bound_problems(policy: policy_pb2.Policy, field: str = "policy") -> list[tuple[str, str]]:
    """Problems of ``policy.tuning_bounds``: unknown or repeated parameters, non-finite or inverted ranges."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for position, bound in enumerate(policy.tuning_bounds):
        path = f"{field}.tuning_bounds[{position}]"
        if bound.parameter not in TUNABLE_PARAMETERS:
            problems.append((f"{path}.parameter", f"{bound.parameter!r}: not a number of Policy or KindPolicy"))
        elif bound.parameter in seen:
            problems.append((f"{path}.parameter", f"{bound.parameter!r} appears twice"))
        seen.add(bound.parameter)
        if not (math.isfinite(bound.min) and math.isfinite(bound.max)) or bound.min > bound.max:
            problems.append((path, f"[{bound.min}, {bound.max}]: finite, min <= max"))
    return problems


def _values(policy: policy_pb2.Policy, parameter: str) -> list[float]:
    if parameter in TUNABLE_POLICY_FIELDS:
        return [float(getattr(policy, parameter))]
    return [float(getattr(entry, parameter)) for entry in policy.kinds]


def _without(policy: policy_pb2.Policy, reference: policy_pb2.Policy, parameters: Sequence[str]) -> policy_pb2.Policy:
    """``policy`` with the named parameters set to ``reference``'s; name, bounds and consolidation cleared.

    Consolidation does not rank retrievals and a promotion keeps the policy in
    force's (see :func:`promoted_policy`), so an arm need not repeat it.
    """
    out = policy_pb2.Policy()
    out.CopyFrom(policy)
    out.name = ""
    del out.tuning_bounds[:]
    out.ClearField("consolidation")
    by_kind = {entry.kind: entry for entry in reference.kinds}
    for parameter in parameters:
        if parameter in TUNABLE_POLICY_FIELDS:
            setattr(out, parameter, getattr(reference, parameter))
            continue
        for entry in out.kinds:
            source = by_kind.get(entry.kind)
            if source is not None:
                setattr(entry, parameter, getattr(source, parameter))
    return out


def adaptivity_problems(
    arm: policy_pb2.Policy, current: policy_pb2.Policy, parameters: Sequence[str], field: str
) -> list[tuple[str, str]]:
    """Why ``arm`` may not be promoted automatically over ``current``; empty when it may.

    The arm may differ from the policy in force only in ``parameters`` (the
    experiment's tunable parameters), each of which needs an operator bound in
    ``current.tuning_bounds`` that every one of the arm's values respects.
    """
    problems: list[tuple[str, str]] = []
    bounds = {b.parameter: b for b in current.tuning_bounds}
    for parameter in parameters:
        bound = bounds.get(parameter)
        if bound is None:
            problems.append((field, f"{parameter!r} has no bound in the policy's tuning_bounds"))
            continue
        outside = [v for v in _values(arm, parameter) if not bound.min <= v <= bound.max]
        if outside:
            problems.append((field, f"{parameter} = {outside[0]} is outside the bound [{bound.min}, {bound.max}]"))
    reference = _without(current, current, ())
    if _without(arm, current, parameters) != reference:
        problems.append((field, "differs from the policy in force in parameters the experiment does not name"))
    return problems


def promoted_policy(arm: policy_pb2.Policy, current: policy_pb2.Policy, parameters: Sequence[str]) -> policy_pb2.Policy:
    """The policy a promotion installs: the policy in force with the named parameters taken from ``arm``.

    Everything else (consolidation, the operator's bounds) stays as the operator set it.
    """
    out = _without(current, arm, parameters)
    out.consolidation.CopyFrom(current.consolidation)
    out.tuning_bounds.extend(current.tuning_bounds)
    out.name = arm.name or current.name
    return out
