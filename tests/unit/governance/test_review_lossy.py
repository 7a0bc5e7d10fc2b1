"""A consolidation proposal whose suggested text would lose a member's details is never applied by the policy.

Such proposals were opened before suggestions had to keep every member's date, number and name (issue 42): a data
directory may still hold them. At the deadline extractive mode drops them; a reviewer may still accept one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memevo.sidecar.config import GovernanceConfig, SidecarConfig
from memevo.sidecar.domain import NewMemory, to_timestamp
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.governance.review import ReviewBroker
from memevo.v1 import memory_pb2, policy_pb2, review_pb2

DIMENSION = 8
ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
CONSOLIDATED = memory_pb2.MEMORY_STATE_CONSOLIDATED
DATED = [f"On 2026-05-{day:02d} Wendy scheduled a meeting about Falcon" for day in (14, 15, 18, 21, 25)]
REPEATED = [
    "Ran the Falcon test suite; it passed",
    "Ran the Falcon test suite again; it passed",
    "Ran the whole Falcon test suite; it passed",
    "Ran the Falcon test suite and it passed",
    "Ran the Falcon test suite once more; it passed",
]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    config = SidecarConfig(
        data_dir=tmp_path / "data",
        dimension=DIMENSION,
        embedder=EmbedderConfig(kind="none"),
        governance=GovernanceConfig(sweep_interval_s=0, checkpoint_interval_s=0),
    )
    opened = Engine(config)
    policy = policy_pb2.Policy()
    policy.CopyFrom(opened.policy)
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE
    opened.update_policy(policy)
    yield opened
    opened.close()


def write(engine: Engine, texts: list[str], seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=DIMENSION)
    vectors = (centre + 0.01 * rng.normal(size=(len(texts), DIMENSION))).astype(np.float32)
    items = [
        NewMemory(
            content=text,
            vector=vector,
            namespace="agent",
            kind=memory_pb2.MEMORY_KIND_EPISODE,
            entity="person:wendy",
        )
        for text, vector in zip(texts, vectors, strict=True)
    ]
    return [w.memory.id for w in engine.remember(items)]


def open_as_before(broker: ReviewBroker, ids: list[int], text: str) -> str:
    """A proposal as an older sidecar stored it (suggesting one member's text), already past its deadline."""
    proposal = broker._propose(review_pb2.PROPOSAL_KIND_CONSOLIDATE, ids, "5 episode memories", text)
    proposal.proposal.deadline.CopyFrom(to_timestamp(0.0))
    return proposal.proposal.id


def states(engine: Engine, ids: list[int]) -> list[int]:
    records, _ = engine.get(ids)
    return [r.state for r in records]


def test_at_the_deadline_extractive_mode_drops_a_proposal_that_would_lose_events(engine: Engine) -> None:
    broker = ReviewBroker(engine)
    dated = write(engine, DATED, seed=1)
    repeated = write(engine, REPEATED, seed=2)
    open_as_before(broker, dated, DATED[0])
    open_as_before(broker, repeated, REPEATED[0])
    assert broker.expire() == 2
    assert states(engine, dated) == [ACTIVE] * 5, "four meetings would have been lost"
    assert states(engine, repeated) == [CONSOLIDATED] * 5
    assert broker.stats().open_consolidations == 0


def test_a_reviewer_may_still_accept_it(engine: Engine) -> None:
    broker = ReviewBroker(engine)
    dated = write(engine, DATED, seed=3)
    reviewer = broker.attach("planner", [review_pb2.PROPOSAL_KIND_CONSOLIDATE])
    proposal_id = open_as_before(broker, dated, DATED[0])
    text = "Wendy scheduled Falcon meetings on 2026-05-14, 15, 18, 21 and 25"
    broker.decide(
        reviewer,
        review_pb2.Decision(proposal_id=proposal_id, verdict=review_pb2.VERDICT_ACCEPT, abstraction_text=text),
    )
    assert states(engine, dated) == [CONSOLIDATED] * 5
