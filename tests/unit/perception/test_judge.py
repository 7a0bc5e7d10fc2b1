"""The shipped pair judge loads from the package and keeps its decisions on a fixed set of pairs."""

from __future__ import annotations

import pytest

from memevo.sidecar.perception.conflicts import JUDGE_DOUBT, JUDGE_SURE
from memevo.sidecar.perception.judge import BATCH, MODEL_PATH, PairJudge, shipped

# (older, newer, what the shipped model decides): "retire" from JUDGE_SURE, "keep" under JUDGE_DOUBT.
PINNED = [
    ("Ana works at Shopify as a product designer.",
     "Ana left Shopify last month; she has joined Canva as a senior designer.", "retire"),
    ("The staging database runs Postgres 12 on db1.",
     "Staging was upgraded: it now runs Postgres 15 on db3.", "retire"),
    ("Ana lives in Toronto with her partner.",
     "Ana left Shopify last month; she has joined Canva as a senior designer.", "keep"),
    ("Lena speaks German fluently; she grew up in Hamburg.",
     "Lena is also learning Spanish and can hold a basic conversation.", "keep"),
]  # fmt: skip


@pytest.fixture(scope="module")
def judge() -> PairJudge:
    found = shipped()
    assert found is not None, f"the package holds no judge at {MODEL_PATH}"
    return found


@pytest.mark.parametrize(("older", "newer", "decision"), PINNED)
def test_the_shipped_model_keeps_its_decisions(judge: PairJudge, older: str, newer: str, decision: str) -> None:
    (p,) = judge.replaces([older], [newer])
    if decision == "retire":
        assert p >= JUDGE_SURE
    else:
        assert p < JUDGE_DOUBT


def test_a_pair_gets_the_same_answer_whatever_is_judged_beside_it(judge: PairJudge) -> None:
    older = [o for o, _, _ in PINNED] * 3
    newer = [n for _, n, _ in PINNED] * 3
    together = judge.replaces(older, newer)
    assert len(together) == len(older) > BATCH
    alone = [judge.replaces([o], [n])[0] for o, n, _ in PINNED]
    for i, p in enumerate(together):
        assert p == pytest.approx(alone[i % len(PINNED)], abs=1e-6)
    assert judge.identity.startswith("judge:")
