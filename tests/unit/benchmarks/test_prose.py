"""The natural-prose benchmark: its scenario files hold what FORMAT.md promises, and its scoring reads them right."""

from __future__ import annotations

import datetime as dt
import importlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

prose: Any = importlib.import_module("benchmarks.quality.prose")

from memevo.client import Memory, MemoryState  # noqa: E402

SPLITS = ("tuning", "validation", "heldout")


def _scenario(category: str, roles: list[tuple[str, int | None]], answers: list[int], **extra: Any) -> Any:
    memories = [
        {"text": f"statement {i}", "entity": "person:ana", "fact": None, "kind": "fact", "role": role,
         "replaced_by": by}
        for i, (role, by) in enumerate(roles)
    ]  # fmt: skip
    line = {"id": "t-1", "lang": "en", "category": category, "memories": memories, "question": "q?", "answers": answers}
    line.update(extra)
    return prose.parse(json.dumps(line))


@pytest.mark.parametrize("split", SPLITS)
def test_every_scenario_file_holds_what_the_format_promises(split: str) -> None:
    scenarios = prose.load(split)
    assert len(scenarios) >= 200
    assert len({s.id for s in scenarios}) == len(scenarios)
    for s in scenarios:
        roles = [m.role for m in s.memories]
        assert set(roles) <= {"stale", "current", "holds", "distractor"}, s.id
        assert 2 <= roles.count("distractor") <= 5, s.id
        for i, m in enumerate(s.memories):
            assert (m.replaced_by is not None) == (m.role == "stale"), s.id
            if m.replaced_by is not None:
                assert i < m.replaced_by < len(s.memories), s.id
        assert all(0 <= a < len(s.memories) for a in s.answers), s.id
        if s.category in prose.UPDATES:
            assert [s.memories[a].role for a in s.answers] == ["current"], s.id
            assert roles.count("stale") == (2 if s.category == "chain" else 1), s.id
        else:
            assert (roles.count("holds"), roles.count("current")) == (1, 1), s.id
        if s.category == "prose_no_entity" or (s.category == "chain" and not s.entity_set):
            assert not any(m.entity for m in s.memories), s.id
        keyed = [m for m in s.memories if m.fact]
        if s.category == "keyed_to_prose":
            assert [(m.role, bool(m.entity)) for m in keyed] == [("stale", True)], s.id
        else:
            assert not keyed, s.id


def test_the_splits_share_no_entity() -> None:
    names = {split: {m.entity for s in prose.load(split) for m in s.memories if m.entity} for split in SPLITS}
    for one, other in itertools.combinations(SPLITS, 2):
        assert not names[one] & names[other], (one, other)


def test_a_chain_is_replaced_by_every_later_version() -> None:
    s = _scenario("chain", [("stale", 2), ("distractor", None), ("stale", 3), ("current", None),
                            ("distractor", None)], [3])  # fmt: skip
    assert s.chain_after(0) == {2, 3}
    assert s.chain_after(2) == {3}
    assert s.chain_after(3) == set()


def test_ranking_scores_read_the_top_five() -> None:
    s = _scenario("prose_entity", [("stale", 1), ("current", None), ("distractor", None), ("distractor", None)], [1])
    assert prose.rank_outcome(s, [1, 0, 2]) == prose.Outcome(current_first=True, stale_above=False)
    assert prose.rank_outcome(s, [0, 1, 2]) == prose.Outcome(current_first=False, stale_above=True)
    assert prose.rank_outcome(s, [2, 3, 0]) == prose.Outcome(current_first=False, stale_above=True)
    assert prose.rank_outcome(s, [2, 3, 3, 3, 3, 1, 0]) == prose.Outcome(current_first=False, stale_above=False)


def _stored(states: list[tuple[MemoryState, int | None, int | None]]) -> list[Memory]:
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return [
        Memory(id=100 + i, state=state, superseded_by=by, possibly_outdated_by=doubt, valid_from=at)
        for i, (state, by, doubt) in enumerate(states)
    ]


def test_perception_counts_the_right_retirement_and_every_wrong_touch() -> None:
    s = _scenario("addition", [("holds", None), ("distractor", None), ("current", None)], [0, 2])
    index = {100 + i: i for i in range(3)}
    active = MemoryState.ACTIVE
    clean = prose.perception(s, _stored([(active, None, None)] * 3), index)
    assert (clean.wrong, clean.stale) == (False, 0)
    doubted = prose.perception(s, _stored([(active, None, 102), (active, None, None), (active, None, None)]), index)
    assert (doubted.wrong, doubted.notes) == (True, ["holds 0 doubted by 2"])

    u = _scenario("prose_entity", [("stale", 2), ("distractor", None), ("current", None)], [2])
    right = prose.perception(u, _stored([(MemoryState.OBSOLETE, 102, None), (active, None, None),
                                         (active, None, None)]), index)  # fmt: skip
    assert (right.stale, right.perceived, right.retired, right.wrong) == (1, 1, 1, False)
    wrong = prose.perception(u, _stored([(MemoryState.OBSOLETE, 101, None), (active, None, None),
                                         (active, None, None)]), index)  # fmt: skip
    assert (wrong.perceived, wrong.wrong) == (0, True)
