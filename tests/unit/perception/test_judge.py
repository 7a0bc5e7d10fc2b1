"""The shipped pair judge loads from the package and keeps its decisions on a fixed set of pairs."""

from __future__ import annotations

import pytest

from memevo.sidecar.perception.conflicts import JUDGE_DOUBT, JUDGE_SURE
from memevo.sidecar.perception.judge import BATCH, MODEL_PATH, PairJudge, shipped
from memevo.sidecar.retrieval.recall import REPLACES_AT

# (older, newer, what the shipped model decides): "retire" from JUDGE_SURE (perception retires the older); "newer"
# from REPLACES_AT (recall puts the newer first); "keep" under both JUDGE_DOUBT and REPLACES_AT.
PINNED = [
    ("Ana works at Shopify as a product designer.",
     "Ana left Shopify last month; she has joined Canva as a senior designer.", "retire"),
    ("The staging database runs Postgres 12 on db1.",
     "Staging was upgraded: it now runs Postgres 15 on db3.", "retire"),
    ("Ana lives in Toronto with her partner.",
     "Ana left Shopify last month; she has joined Canva as a senior designer.", "keep"),
    ("Lena speaks German fluently; she grew up in Hamburg.",
     "Lena is also learning Spanish and can hold a basic conversation.", "keep"),
    # The issue's own example: a change told as an event is the fact's newer version.
    ("Maria works at Google as a data scientist.", "Maria left Google last week; she has joined Stripe.", "newer"),
    ("Ana works at Shopify.", "Ana now works at Canva.", "newer"),
    # A remark naming the subject replaces nothing, whichever fact it sits beside.
    ("Emre switched roles and is now serving as SRE lead.",
     "Emre reacted with :tada: to the announcement in #general.", "keep"),
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
    elif decision == "newer":
        assert p >= REPLACES_AT
    else:
        assert p < min(JUDGE_DOUBT, REPLACES_AT)


def test_a_pair_gets_the_same_answer_whatever_is_judged_beside_it(judge: PairJudge) -> None:
    older = [o for o, _, _ in PINNED] * 3
    newer = [n for _, n, _ in PINNED] * 3
    together = judge.replaces(older, newer)
    assert len(together) == len(older) > BATCH
    alone = [judge.replaces([o], [n])[0] for o, n, _ in PINNED]
    for i, p in enumerate(together):
        assert p == pytest.approx(alone[i % len(PINNED)], abs=1e-6)
    assert judge.identity.startswith("judge:")
