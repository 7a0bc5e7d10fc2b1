"""The governance policy: defaults, validation, and the lookups perception needs.

The policy travels as the ``memevo.v1.Policy`` message and is stored in the
data directory's metadata, so a restart keeps what ``UpdatePolicy`` set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from memevo.kernels import params as kp
from memevo.v1 import memory_pb2, policy_pb2

from .experiments.adaptive import tuning_bound_problems

# KindPolicy field -> (kernel column, clock) : the wire names of the kernels' policy matrix.
_KIND_FIELDS: dict[str, tuple[int, str | None]] = {
    "alpha": (kp.ALPHA, None),
    "beta": (kp.BETA, None),
    "gamma": (kp.GAMMA, None),
    "delta": (kp.DELTA, None),
    "confidence_weight": (kp.W_CONFIDENCE, None),
    "feedback_weight": (kp.W_FEEDBACK, None),
    "inconsistency_weight": (kp.W_INCONSISTENCY, None),
    "decay_half_life_s": (kp.HALF_LIFE, "wall"),
    "decay_half_life_turns": (kp.HALF_LIFE, "turns"),
    "access_weight": (kp.ACCESS_WEIGHT, None),
    "archive_below": (kp.ARCHIVE_BELOW, None),
    "reactivate_above": (kp.REACTIVATE_ABOVE, None),
    "evict_below": (kp.EVICT_BELOW, None),
    "evict_grace_s": (kp.EVICT_GRACE, "wall"),
    "min_time_in_state_s": (kp.MIN_TIME_IN_STATE, "wall"),
    "evict_grace_turns": (kp.EVICT_GRACE, "turns"),
    "min_time_in_state_turns": (kp.MIN_TIME_IN_STATE, "turns"),
    "confidence_floor": (kp.CONFIDENCE_FLOOR, None),
    "confidence_decay_half_life_s": (kp.CONFIDENCE_DECAY_HALF_LIFE, "wall"),
    "confidence_decay_half_life_turns": (kp.CONFIDENCE_DECAY_HALF_LIFE, "turns"),
}


def default_policy() -> policy_pb2.Policy:
    """The policy a new data directory starts with; per-kind numbers come from the kernels' defaults."""
    policy = policy_pb2.Policy(
        name="default",
        time_mode=policy_pb2.TIME_MODE_WALL_CLOCK,
        source_confidence=policy_pb2.SourceConfidence(
            tool_result=0.9, user_statement=0.8, agent_inference=0.6, reflection=0.6, imported=0.7
        ),
        soft_conflict_similarity=0.9,
        duplicate_similarity=0.98,
        strategy_upgrade_probability=0.95,
        cost_budget_bytes=kp.DEFAULT_COST_BUDGET_BYTES,
        consolidation=policy_pb2.ConsolidationPolicy(
            similarity=CONSOLIDATION_DEFAULTS.similarity,
            min_group_size=CONSOLIDATION_DEFAULTS.min_group_size,
            max_group_size=CONSOLIDATION_DEFAULTS.max_group_size,
            kinds=cast(Any, sorted(CONSOLIDATION_DEFAULTS.kinds)),
            without_reviewer=cast(Any, CONSOLIDATION_DEFAULTS.without_reviewer),
            review_timeout_s=CONSOLIDATION_DEFAULTS.review_timeout_s,
            review_evictions_above=CONSOLIDATION_DEFAULTS.review_evictions_above,
        ),
    )
    matrices = {"wall": kp.default_params("wall"), "turns": kp.default_params("turns")}
    for kind in memory_pb2.MemoryKind.values():
        entry = policy.kinds.add(kind=kind)
        for name, (column, clock) in _KIND_FIELDS.items():
            setattr(entry, name, float(matrices[clock or "wall"][kind, column]))
    return policy


def params_from_policy(policy: policy_pb2.Policy) -> npt.NDArray[np.float64]:
    """The kernels' policy matrix (N_KINDS x N_PARAMS) for ``policy`` in its own time mode.

    Kinds without an entry take the UNSPECIFIED entry, or the kernels' defaults.
    """
    clock: kp.Clock = "turns" if policy.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS else "wall"
    params = kp.default_params(clock)
    entries: dict[int, policy_pb2.KindPolicy] = {int(entry.kind): entry for entry in policy.kinds}
    for kind in range(kp.N_KINDS):
        entry = entries.get(kind) or entries.get(memory_pb2.MEMORY_KIND_UNSPECIFIED)
        if entry is None:
            continue
        for name, (column, field_clock) in _KIND_FIELDS.items():
            if field_clock in (None, clock):
                params[kind, column] = getattr(entry, name)
    return params


def validate_policy(policy: policy_pb2.Policy, field: str = "policy") -> list[tuple[str, str]]:
    """Every problem of ``policy`` as (field path, description); empty when it is usable."""
    problems: list[tuple[str, str]] = []

    def check(name: str, value: float, low: float, high: float, *, open_low: bool = False) -> None:
        bad = not math.isfinite(value) or value < low or value > high or (open_low and value == low)
        if bad:
            bracket = "(" if open_low else "["
            problems.append((f"{field}.{name}", f"{value} is outside {bracket}{low}, {high}]"))

    if len(policy.name.encode()) > 64:
        problems.append((f"{field}.name", "at most 64 bytes"))
    if policy.time_mode not in policy_pb2.TimeMode.values():
        problems.append((f"{field}.time_mode", f"unknown TimeMode value {policy.time_mode}"))
    confidence = policy.source_confidence
    for name in ("tool_result", "user_statement", "agent_inference", "reflection", "imported"):
        check(f"source_confidence.{name}", getattr(confidence, name), 0.0, 1.0)
    check("soft_conflict_similarity", policy.soft_conflict_similarity, 0.0, 1.0, open_low=True)
    check("duplicate_similarity", policy.duplicate_similarity, 0.0, 1.0, open_low=True)
    check("strategy_upgrade_probability", policy.strategy_upgrade_probability, 0.5, 1.0, open_low=True)
    check("cost_budget_bytes", policy.cost_budget_bytes, 0.0, math.inf, open_low=True)
    seen: set[int] = set()
    for position, kind in enumerate(policy.kinds):
        path = f"kinds[{position}]"
        if kind.kind not in memory_pb2.MemoryKind.values():
            problems.append((f"{field}.{path}.kind", f"unknown MemoryKind value {kind.kind}"))
        elif kind.kind in seen:
            problems.append((f"{field}.{path}.kind", "appears twice"))
        seen.add(kind.kind)
        for name in ("alpha", "beta", "gamma", "delta", "confidence_weight", "feedback_weight"):
            check(f"{path}.{name}", getattr(kind, name), 0.0, math.inf)
        check(f"{path}.inconsistency_weight", kind.inconsistency_weight, 0.0, math.inf)
        check(f"{path}.access_weight", kind.access_weight, 0.0, math.inf)
        check(f"{path}.decay_half_life_s", kind.decay_half_life_s, 0.0, math.inf, open_low=True)
        check(f"{path}.decay_half_life_turns", kind.decay_half_life_turns, 0.0, math.inf, open_low=True)
        for name in ("evict_grace_s", "min_time_in_state_s", "evict_grace_turns", "min_time_in_state_turns"):
            check(f"{path}.{name}", getattr(kind, name), 0.0, math.inf)
        check(f"{path}.confidence_floor", kind.confidence_floor, 0.0, 1.0)
        for name in ("confidence_decay_half_life_s", "confidence_decay_half_life_turns"):
            check(f"{path}.{name}", getattr(kind, name), 0.0, math.inf, open_low=True)
        for name in ("archive_below", "reactivate_above", "evict_below"):
            check(f"{path}.{name}", getattr(kind, name), -math.inf, math.inf)
        if not (kind.evict_below <= kind.archive_below <= kind.reactivate_above):
            problems.append(
                (f"{field}.{path}", "thresholds must satisfy evict_below <= archive_below <= reactivate_above")
            )
    for position, entry in enumerate(policy.multi_valued_attributes):
        if entry.count("/") != 1 or not all(entry.split("/")):
            problems.append((f"{field}.multi_valued_attributes[{position}]", "expected 'namespace/attribute'"))
    problems += _consolidation_problems(policy.consolidation, f"{field}.consolidation")
    problems += tuning_bound_problems(policy, field)
    return problems


def _consolidation_problems(c: policy_pb2.ConsolidationPolicy, field: str) -> list[tuple[str, str]]:
    # 0 means "the default" for every field, so only set values are checked.
    problems: list[tuple[str, str]] = []
    if c.similarity != 0 and not (math.isfinite(c.similarity) and 0.0 < c.similarity <= 1.0):
        problems.append((f"{field}.similarity", f"{c.similarity} is outside (0, 1]"))
    if c.min_group_size == 1:
        problems.append((f"{field}.min_group_size", "must be at least 2"))
    if c.max_group_size > MAX_GROUP_SIZE:
        problems.append((f"{field}.max_group_size", f"must be at most {MAX_GROUP_SIZE}"))
    settings = ConsolidationSettings.from_policy(c)
    if settings.max_group_size < settings.min_group_size:
        problems.append(
            (
                f"{field}.max_group_size",
                f"{settings.max_group_size} is below min_group_size {settings.min_group_size}",
            )
        )
    for position, kind in enumerate(c.kinds):
        if kind not in memory_pb2.MemoryKind.values() or kind in (
            memory_pb2.MEMORY_KIND_UNSPECIFIED,
            memory_pb2.MEMORY_KIND_ABSTRACTION,
        ):
            problems.append((f"{field}.kinds[{position}]", f"kind {kind} cannot be consolidated"))
    if c.without_reviewer not in policy_pb2.ConsolidationMode.values():
        problems.append((f"{field}.without_reviewer", f"unknown ConsolidationMode value {c.without_reviewer}"))
    if c.review_timeout_s != 0 and not (math.isfinite(c.review_timeout_s) and c.review_timeout_s > 0):
        problems.append((f"{field}.review_timeout_s", f"{c.review_timeout_s} must be a positive number of seconds"))
    if not math.isfinite(c.review_evictions_above):
        problems.append((f"{field}.review_evictions_above", "must be finite"))
    return problems


MAX_GROUP_SIZE = 1000
"""The largest group one proposal may hold (its members travel in one message)."""


@dataclass(frozen=True)
class ConsolidationSettings:
    """The consolidation part of the policy with its defaults filled in."""

    similarity: float = 0.9
    min_group_size: int = 5
    max_group_size: int = 50
    kinds: frozenset[int] = frozenset({memory_pb2.MEMORY_KIND_STRATEGY, memory_pb2.MEMORY_KIND_EPISODE})
    without_reviewer: int = policy_pb2.CONSOLIDATION_MODE_WAIT
    review_timeout_s: float = 300.0
    review_evictions_above: float = 0.01

    @classmethod
    def from_policy(cls, c: policy_pb2.ConsolidationPolicy) -> ConsolidationSettings:
        """Resolve ``c``: unset (0) fields take the defaults."""
        d = CONSOLIDATION_DEFAULTS
        return cls(
            similarity=c.similarity or d.similarity,
            min_group_size=c.min_group_size or d.min_group_size,
            max_group_size=c.max_group_size or max(d.max_group_size, c.min_group_size),
            kinds=frozenset(int(k) for k in c.kinds) or d.kinds,
            without_reviewer=c.without_reviewer or d.without_reviewer,
            review_timeout_s=c.review_timeout_s or d.review_timeout_s,
            review_evictions_above=c.review_evictions_above if c.review_evictions_above else d.review_evictions_above,
        )


CONSOLIDATION_DEFAULTS = ConsolidationSettings()


@dataclass(frozen=True)
class PerceptionSettings:
    """The parts of the policy the write path reads, resolved for fast lookups."""

    source_confidence: dict[int, float]
    soft_conflict_similarity: float
    duplicate_similarity: float
    strategy_upgrade_probability: float
    multi_valued: frozenset[tuple[str, str]]

    @classmethod
    def from_policy(cls, policy: policy_pb2.Policy) -> PerceptionSettings:
        """Resolve ``policy`` (assumed valid)."""
        confidence = policy.source_confidence
        return cls(
            source_confidence={
                memory_pb2.MEMORY_SOURCE_TOOL_RESULT: confidence.tool_result,
                memory_pb2.MEMORY_SOURCE_USER_STATEMENT: confidence.user_statement,
                memory_pb2.MEMORY_SOURCE_AGENT_INFERENCE: confidence.agent_inference,
                memory_pb2.MEMORY_SOURCE_REFLECTION: confidence.reflection,
                memory_pb2.MEMORY_SOURCE_IMPORT: confidence.imported,
            },
            soft_conflict_similarity=policy.soft_conflict_similarity,
            duplicate_similarity=policy.duplicate_similarity,
            strategy_upgrade_probability=policy.strategy_upgrade_probability,
            multi_valued=frozenset(
                (ns, attribute) for ns, attribute in (e.split("/", 1) for e in policy.multi_valued_attributes)
            ),
        )

    def is_multi_valued(self, namespace: str, attribute: str) -> bool:
        """Whether an attribute may hold several values at once in ``namespace``."""
        return (namespace, attribute) in self.multi_valued or ("*", attribute) in self.multi_valued
