"""The shipped reranker loads from the package and keeps its decisions on a fixed set of questions."""

from __future__ import annotations

import pytest

from memevo.sidecar.retrieval.rerank import MODEL_PATH, Reranker, shipped

# (question, statement, whether the shipped model says the statement answers: P >= 0.5).
PINNED = [
    ("Who is Elena employed by these days?", "Elena now works at Kinetiq Robotics.", True),
    ("Who is Elena employed by these days?", "Elena has a border collie named Pepper.", False),
    ("Who is Elena employed by these days?", "Elena grew up in Porto and visits her parents every summer.", False),
    # A plain statement answers as well as one worded as a change (the first model learnt otherwise).
    ("Which company does Priya work for now?", "Priya works at Canva.", True),
    ("Which company does Priya work for now?", "Priya left Atlassian in May and joined Canva's design team.", True),
    ("Which company does Priya work for now?", "Priya has two cats and lives near the harbour.", False),
    ("What's the best way to reach Gregory about something that isn't urgent?",
     "Gregory asked us to stop emailing him: Slack DMs only from now on.", True),
    ("What's the best way to reach Gregory about something that isn't urgent?",
     "Gregory lives in Seattle with his two cats.", False),
    # An earlier version of the asked fact answers too (recall puts the newer first); another attribute does not.
    ("When is the Sorrel project due?", "The Sorrel project now has to land by March 3.", True),
    ("When is the Sorrel project due?", "The Sorrel project had to land by February 10.", True),
    ("When is the Sorrel project due?", "The Sorrel project lives in the sorrel-core repository.", False),
    # The issue's own change in prose (the model before this one left it below 0.5).
    ("Where does Maria work?", "Maria left Google last week; she has joined Stripe.", True),
]  # fmt: skip


@pytest.fixture(scope="module")
def reranker() -> Reranker:
    found = shipped()
    assert found is not None, f"the package holds no reranker at {MODEL_PATH}"
    return found


@pytest.mark.parametrize(("question", "statement", "answers"), PINNED)
def test_the_shipped_model_keeps_its_decisions(
    reranker: Reranker, question: str, statement: str, answers: bool
) -> None:
    (p,) = reranker.relevance([question], [statement])
    assert (p >= 0.5) is answers


def test_a_pair_gets_the_same_answer_whatever_is_read_beside_it(reranker: Reranker) -> None:
    together = reranker.relevance([q for q, _, _ in PINNED], [s for _, s, _ in PINNED])
    alone = [reranker.relevance([q], [s])[0] for q, s, _ in PINNED]
    assert together == pytest.approx(alone, abs=1e-6)
    assert reranker.identity.startswith("reranker:")
