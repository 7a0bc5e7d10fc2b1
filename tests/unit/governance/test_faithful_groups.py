"""Which groups may be folded into one member's text: those whose every date, number and name that text says."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.governance.abstraction import details, faithful_groups, keeps
from memevo.v1 import memory_pb2

EPISODE = memory_pb2.MEMORY_KIND_EPISODE
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY


def memories(texts: list[str], kind: int = EPISODE) -> list[memory_pb2.Memory]:
    return [memory_pb2.Memory(id=i + 1, content=t, kind=kind) for i, t in enumerate(texts)]  # type: ignore[arg-type]


def alike(count: int, seed: int = 0) -> npt.NDArray[np.float32]:
    """Unit vectors at cosine > 0.99 to each other, as the cluster pass hands a group over."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=16) + 0.01 * rng.normal(size=(count, 16))
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("On 2026-05-14 Wendy scheduled a meeting about Falcon", {"2026-05-14", "wendy", "falcon"}),
        ("Ran the test suite; it passed.", set()),
        ("Wendy's API broke on iOS 17!", {"api", "ios", "17"}),  # a name that opens a sentence is not read as one
        ("Dr. Smith met Kofi. Then I left", {"smith", "kofi"}),
        ("Daily stand-up of Falcon: Wendy closed 12 tickets", {"falcon", "wendy", "12"}),
        ("The weekly report for May went out", {"may"}),
    ],
)
def test_details_are_dates_numbers_and_names(text: str, expected: set[str]) -> None:
    assert details(text) == expected


def test_the_same_sentence_with_five_dates_is_five_events_and_is_not_offered() -> None:
    texts = [f"On 2026-05-{day:02d} Wendy scheduled a meeting about Falcon" for day in (14, 15, 18, 21, 25)]
    group = memories(texts)
    assert not keeps(group, texts[0])
    assert faithful_groups(group, alike(5), min_size=5) == []


@pytest.mark.parametrize(
    "texts",
    [
        [f"Wendy deployed Falcon build {n} to staging" for n in (101, 102, 103, 104, 105)],
        [f"Wendy met {name} to review the Falcon roadmap" for name in ("Arjun", "Mei", "Tomas", "Lena", "Kofi")],
    ],
)
def test_members_that_differ_in_a_number_or_a_name_are_not_offered(texts: list[str]) -> None:
    assert faithful_groups(memories(texts), alike(5), min_size=5) == []


def test_a_repeated_experience_is_offered_whole_as_before() -> None:
    texts = [
        "Ran the Falcon test suite; it passed",
        "Ran the Falcon test suite again; it passed",
        "Ran the whole Falcon test suite; it passed",
        "Falcon test suite: it passed",
        "Ran the Falcon test suite; it passed",
    ]
    group = memories(texts)
    [(indices, text)] = faithful_groups(group, alike(5), min_size=5)
    assert indices == [0, 1, 2, 3, 4]
    assert text in texts
    assert keeps(group, text)


def test_strategies_are_offered_whole_whatever_their_details() -> None:
    texts = [f"To deploy, run the migration first, then restart the workers (attempt {i})." for i in range(5)]
    [(indices, _)] = faithful_groups(memories(texts, STRATEGY), alike(5), min_size=5)
    assert indices == [0, 1, 2, 3, 4]


def test_a_mixed_group_offers_only_the_part_one_text_speaks_for() -> None:
    repeated = ["Checked the Falcon dashboards; nothing unusual"] * 5
    dated = [f"On 2026-05-{day:02d} Wendy scheduled a meeting about Falcon" for day in (14, 15, 18, 21)]
    group = memories(dated + repeated)
    vectors = alike(9)
    [(indices, text)] = faithful_groups(group, vectors, min_size=5)
    assert set(indices) >= {4, 5, 6, 7, 8}, "the repeated experience is still offered"
    assert len(set(indices) & {0, 1, 2, 3}) <= 1, "never two of the dated events"
    assert keeps([group[i] for i in indices], text)
    # A member with fewer details than the text it joins loses nothing: its details are all said.
    undated = memories(["Wendy scheduled a meeting about Falcon"] * 4 + [dated[0]])
    rng = np.random.default_rng(3)
    centre = rng.normal(size=16)
    rows = np.vstack([centre + 0.2 * rng.normal(size=(4, 16)), centre])  # the dated one is the representative
    around = np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)
    [(indices, text)] = faithful_groups(undated, around, min_size=5)
    assert text == dated[0]
    assert indices == [0, 1, 2, 3, 4]


def test_too_few_members_give_nothing() -> None:
    assert faithful_groups([], np.zeros((0, 16), dtype=np.float32), min_size=2) == []
    assert faithful_groups(memories(["a", "a"]), alike(2), min_size=3) == []
