"""Outcome feedback: what using a memory taught us, and strategies that beat strategies.

A report moves the used memories' confidence (success raises it, failure
lowers it more) and their weighted success/failure record. Strategies for the
same task signature are compared by the posterior probability that one's
success rate exceeds the other's (Beta(1 + successes, 1 + failures)); a newer
strategy that is reliably better demotes the older to a counter-example.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from memevo.v1 import memory_pb2, memory_service_pb2

SUCCESS_GAIN = 0.15
"""A full success moves confidence this share of the way to 1."""
FAILURE_LOSS = 0.3
"""A full failure removes this share of the confidence: failure teaches more than success."""
POSTERIOR_DRAWS = 20_000
_RETRIEVAL_HEADER = struct.Struct(">dq")


def outcome_weights(outcome: int, reward: float | None) -> tuple[float, float]:
    """(success weight, failure weight) of one report."""
    if reward is not None:
        return max(reward, 0.0), max(-reward, 0.0)
    if outcome == memory_service_pb2.OUTCOME_SUCCESS:
        return 1.0, 0.0
    if outcome == memory_service_pb2.OUTCOME_FAILURE:
        return 0.0, 1.0
    return 0.5, 0.5


def apply_outcome(record: memory_pb2.Memory, success: float, failure: float) -> None:
    """Update one used memory's record and confidence."""
    record.successes += success
    record.failures += failure
    confidence = record.confidence
    confidence += (1.0 - confidence) * SUCCESS_GAIN * success
    confidence -= confidence * FAILURE_LOSS * failure
    record.confidence = min(1.0, max(0.0, confidence))


def probability_better(a: memory_pb2.Memory, b: memory_pb2.Memory) -> float:
    """P(success rate of ``a`` > that of ``b``) under Beta(1 + successes, 1 + failures) posteriors.

    Monte Carlo with a fixed seed, so the same records always give the same answer.
    """
    rng = np.random.default_rng(a.id * 1_000_003 + b.id)
    draws_a = rng.beta(1.0 + a.successes, 1.0 + a.failures, POSTERIOR_DRAWS)
    draws_b = rng.beta(1.0 + b.successes, 1.0 + b.failures, POSTERIOR_DRAWS)
    return float(np.mean(draws_a > draws_b))


@dataclass(frozen=True)
class Demotion:
    """A strategy's demotion changing: ``demoted_by`` 0 means restored."""

    record: memory_pb2.Memory
    demoted_by: int
    probability: float


def strategy_changes(strategies: Sequence[memory_pb2.Memory], level: float) -> list[Demotion]:
    """Demotions and restorations among the live strategies of one task signature.

    Each strategy is demoted by the newest strategy that beats it with
    probability >= ``level``. A demoted strategy is restored only when the
    evidence has turned (its demoter beats it with probability below
    1 - level), so the ranking does not flap.
    """
    changes: list[Demotion] = []
    by_age = sorted(strategies, key=lambda r: r.id)
    for position, older in enumerate(by_age):
        best: tuple[int, float] | None = None
        for newer in reversed(by_age[position + 1 :]):
            probability = probability_better(newer, older)
            if probability >= level:
                best = (newer.id, probability)
                break
        if best is not None and older.demoted_by != best[0]:
            changes.append(Demotion(older, best[0], best[1]))
        elif best is None and older.demoted_by:
            demoter = next((r for r in by_age if r.id == older.demoted_by), None)
            probability = probability_better(demoter, older) if demoter is not None else 0.0
            if probability < 1.0 - level:
                changes.append(Demotion(older, 0, probability))
    return changes


def pack_retrieval(ids: Iterable[int], recorded_at_s: float, turn: int | None) -> bytes:
    """The stored form of a retrieval: when, at which turn, which ids (in rank order)."""
    values = list(ids)
    return _RETRIEVAL_HEADER.pack(recorded_at_s, -1 if turn is None else turn) + struct.pack(
        f">{len(values)}Q", *values
    )


def unpack_retrieval(raw: bytes) -> tuple[float, int | None, list[int]]:
    """Inverse of :func:`pack_retrieval`."""
    recorded_at_s, turn = _RETRIEVAL_HEADER.unpack_from(raw)
    body = raw[_RETRIEVAL_HEADER.size :]
    ids = list(struct.unpack(f">{len(body) // 8}Q", body))
    return recorded_at_s, (None if turn < 0 else turn), ids


def is_finite_reward(reward: float) -> bool:
    """A usable reward: finite and in [-1, 1]."""
    return math.isfinite(reward) and -1.0 <= reward <= 1.0
