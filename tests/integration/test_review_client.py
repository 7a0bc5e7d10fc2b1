"""The Python client's reviewer session against a real sidecar: decide a consolidation with the agent's text."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from helpers import stub, unit, wait_until

from memevo.client import MemoryClient, MemoryInput, MemoryKind, MemoryState
from memevo.v1 import memory_service_pb2, review_pb2

pytestmark = pytest.mark.integration

DIM = 8


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", dimension=DIM)
    yield process
    process.stop()


def test_a_reviewer_session_writes_the_abstraction_and_unconsolidate_undoes_it(sidecar: Sidecar) -> None:
    rng = np.random.default_rng(3)
    centre = unit(rng.normal(size=DIM))
    with MemoryClient(sidecar.unix_target) as client:
        written = client.remember_batch(
            [
                MemoryInput(
                    content=f"Retry the flaky upload with backoff, attempt {i}",
                    vector=unit(centre + 0.02 * rng.normal(size=DIM)),
                    kind=MemoryKind.STRATEGY,
                    task_signature="upload",
                )
                for i in range(6)
            ]
        )
        members = sorted(w.memory.id for w in written)
        proposals: list[review_pb2.Proposal] = []
        with client.reviewer("agent-llm", kinds=[review_pb2.PROPOSAL_KIND_CONSOLIDATE], timeout_s=60) as session:

            def review() -> None:
                for proposal in session.proposals():
                    proposals.append(proposal)
                    session.accept(proposal.id, text="Uploads: retry with exponential backoff.", note="llm")

            reader = threading.Thread(target=review, daemon=True)
            reader.start()
            # Govern until the session has attached and received the group's proposal.
            wait_until(lambda: client.govern() is not None and bool(proposals), "a proposal", timeout_s=30)
            wait_until(lambda: proposals[0].id in session.settled, "its settlement", timeout_s=30)
        swept = client.govern()
        assert swept.consolidation is not None  # the pass that ran with this sweep
        assert swept.consolidation.total_ms >= 0.0
        assert client.govern(dry_run=True).consolidation is None  # a dry run changes nothing, runs no pass
        assert sorted(m.id for m in proposals[0].memories) == members
        assert {m.state for m in client.get(members)} == {MemoryState.CONSOLIDATED}
        recalled = client.recall(vector=centre, k=3)
        top = recalled.memories[0]
        assert top.memory.kind == MemoryKind.ABSTRACTION
        assert top.memory.content == "Uploads: retry with exponential backoff."
        assert top.hint == "pattern distilled from 6 experiences"  # no outcome was reported for them
        assert sorted(client.unconsolidate(top.memory.id)) == members
        assert {m.state for m in client.get(members)} == {MemoryState.ACTIVE}


def test_a_reviewer_decides_whether_a_newer_statement_replaces_a_doubted_one(sidecar: Sidecar) -> None:
    rng = np.random.default_rng(5)
    base = unit(rng.normal(size=DIM))
    other = rng.normal(size=DIM)
    other -= other.dot(base) * base
    tilted = unit(0.8 * base + 0.6 * unit(other))  # cosine 0.8: close, worded apart: a soft conflict

    def doubt(client: MemoryClient, who: str, old_text: str, new_text: str) -> tuple[int, int]:
        older = client.remember(old_text, vector=base, kind=MemoryKind.FACT, entity=who).id
        newer = client.remember(new_text, vector=tilted, kind=MemoryKind.FACT, entity=who).id
        assert client.get([older])[0].possibly_outdated_by == newer
        return older, newer

    with MemoryClient(sidecar.unix_target) as client:
        pairs = [
            doubt(client, "user:ana-lee", "Ana keeps notes in a paper notebook", "these days Ana writes in Obsidian"),
            doubt(client, "user:bo-kim", "Bo commutes by bike", "on rainy weeks Bo takes the tram to work"),
        ]
        proposals: list[review_pb2.Proposal] = []
        kinds = [review_pb2.PROPOSAL_KIND_SUPERSEDE]
        with client.reviewer("agent-llm", kinds=kinds, timeout_s=60) as session:

            def review() -> None:
                for proposal in session.proposals():
                    proposals.append(proposal)
                    older = proposal.memories[0].id
                    if older == pairs[0][0]:
                        session.accept(proposal.id, note="the notebook was replaced")
                    else:
                        session.reject(proposal.id, note="both hold")

            reader = threading.Thread(target=review, daemon=True)
            reader.start()
            wait_until(lambda: client.govern() is not None and len(proposals) == 2, "two proposals", timeout_s=30)
            wait_until(lambda: all(p.id in session.settled for p in proposals), "their settlement", timeout_s=30)
        assert all(p.kind == review_pb2.PROPOSAL_KIND_SUPERSEDE for p in proposals)
        assert sorted([m.id for m in p.memories] for p in proposals) == sorted([list(pair) for pair in pairs])
        (replaced, replacer), (kept, _) = pairs
        retired = client.get([replaced])[0]
        assert retired.state == MemoryState.OBSOLETE
        assert retired.superseded_by == replacer
        cleared = client.get([kept])[0]
        assert cleared.state == MemoryState.ACTIVE
        assert cleared.possibly_outdated_by is None
        # Settled: nothing stays open, and a new pass offers nothing again.
        client.govern()
        raw = stub(sidecar.unix_target).GetStats(memory_service_pb2.GetStatsRequest())
        assert raw.review.open_supersessions == 0
