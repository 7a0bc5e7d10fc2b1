"""Invariants of the evolving-world generator (benchmarks/quality/world.py): its ground truth must be right."""

from __future__ import annotations

import itertools
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks.quality.world import (  # noqa: E402
    KEYED,
    Category,
    World,
    WorldShape,
    generate_world,
    synthetic_vectors,
)


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(6_000, seed=11, n_checkpoints=6, n_queries=300)


def _brute_force_current(world: World, key: int, at: int) -> str | None:
    """The value with the latest valid_from (then the latest write) among the key's memories before ``at``."""
    versions = [m for m in world.memories[:at] if m.category in KEYED and m.key == key]
    if not versions:
        return None
    return max(versions, key=lambda m: (m.valid_from_h, m.index)).value


def test_same_seed_same_world_other_seed_other_world() -> None:
    a = generate_world(1_500, seed=5)
    b = generate_world(1_500, seed=5)
    c = generate_world(1_500, seed=6)
    assert [m.text for m in a.memories] == [m.text for m in b.memories]
    assert a.executions == b.executions
    assert a.checkpoints == b.checkpoints
    assert [m.text for m in a.memories] != [m.text for m in c.memories]


def test_exact_size_order_and_world_time(world: World) -> None:
    assert len(world.memories) == 6_000
    assert [m.index for m in world.memories] == list(range(6_000))
    times = [m.time_h for m in world.memories]
    assert all(b >= a for a, b in itertools.pairwise(times))
    assert all(m.valid_from_h <= m.time_h for m in world.memories)
    assert all(m.valid_from_h < m.time_h for m in world.memories if m.category == Category.LATE_FACT)
    assert all(1 <= m.importance <= 10 for m in world.memories)


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.61, 1.0])
def test_ground_truth_is_the_latest_value_at_every_moment(world: World, fraction: float) -> None:
    at = max(1, round(len(world.memories) * fraction))
    for key in world.keys:
        assert world.current_value(key.index, at) == _brute_force_current(world, key.index, at)


def test_ground_truth_at_every_checkpoint_and_after_every_keyed_write(world: World) -> None:
    moments = {c.at for c in world.checkpoints} | {m.index + 1 for m in world.memories if m.category in KEYED}
    for at in sorted(moments)[::7]:
        for key in world.keys:
            assert world.current_value(key.index, at) == _brute_force_current(world, key.index, at)


def test_late_facts_are_history_from_the_start_and_restatements_repeat_the_current_value(world: World) -> None:
    late = [m for m in world.memories if m.category == Category.LATE_FACT]
    restated = [m for m in world.memories if m.category == Category.RESTATEMENT]
    assert late
    assert restated
    for memory in late:
        assert world.current_index(memory.key, memory.index + 1) != memory.index
        assert world.is_outdated(memory.index, memory.index + 1)
    for memory in restated:
        assert memory.value == world.current_value(memory.key, memory.index)
        assert not world.is_outdated(memory.index, memory.index + 1)


def test_facts_change_and_older_values_become_outdated(world: World) -> None:
    changes = Counter(m.key for m in world.memories if m.category == Category.FACT)
    assert max(changes.values()) >= 3
    end = len(world.memories)
    for key, count in changes.items():
        current = world.current_value(key, end)
        for index in world.key_versions(key):
            memory = world.memories[index]
            assert world.is_outdated(index, end) == (memory.value != current)
        assert count >= 1


def test_values_are_in_the_text_and_questions_do_not_leak_the_answer(world: World) -> None:
    for memory in world.memories:
        if memory.category in KEYED:
            assert memory.value.casefold() in memory.text.casefold()  # a sentence may start with the value
    for checkpoint in world.checkpoints:
        for query in checkpoint.queries:
            if query.kind == "fact":
                value = world.current_value(query.key, query.at)
                assert value is not None
                assert value not in query.text


def test_every_question_has_an_answer_written_before_it(world: World) -> None:
    kinds: Counter[str] = Counter()
    for checkpoint in world.checkpoints:
        for query in checkpoint.queries:
            kinds[query.kind] += 1
            answers = world.answers(query)
            assert answers, query
            assert all(i < query.at and world.is_answer(i, query) for i in answers)
            assert not any(world.is_outdated(i, query.at) for i in answers)
    assert kinds["fact"] > kinds["strategy"] > 0


def test_later_strategy_versions_are_better_and_the_newest_is_the_answer(world: World) -> None:
    assert any(len(s.rates) > 1 for s in world.signatures)
    for signature in world.signatures:
        assert all(b > a for a, b in zip(signature.rates, signature.rates[1:], strict=False))
        versions = world.signature_versions(signature.index)
        assert [world.memories[i].version for i in versions] == list(range(len(versions)))
        for version, index in enumerate(versions):
            assert world.best_version(signature.index, index + 1) == version
            assert world.best_version(signature.index, index) == version - 1
            for older in versions[:version]:
                assert world.is_outdated(older, index + 1)


def test_executions_follow_their_first_strategy_and_are_in_order(world: World) -> None:
    ats = [e.at for e in world.executions]
    assert ats == sorted(ats)
    assert len(world.executions) >= 10 * len(world.signatures) // 2
    for execution in world.executions:
        assert world.best_version(execution.signature, execution.at) >= 0
        assert 0.0 <= execution.u_explore < 1.0
        assert 0.0 <= execution.u_outcome < 1.0


def test_checkpoints_cover_the_life(world: World) -> None:
    ats = [c.at for c in world.checkpoints]
    assert ats == sorted(ats)
    assert len(set(ats)) == len(ats)
    assert ats[-1] == len(world.memories)
    assert sum(len(c.queries) for c in world.checkpoints) == 300


def test_irrelevant_memories_dominate_and_topics_drift(world: World) -> None:
    counts = world.category_counts()
    irrelevant = counts["noise"] + counts["mention"] + counts["task_log"]
    assert irrelevant / len(world.memories) > 0.7
    n = len(world.memories)
    early = Counter(m.topic for m in world.memories[: n // 5] if m.category == Category.NOISE)
    late = Counter(m.topic for m in world.memories[-n // 5 :] if m.category == Category.NOISE)
    top_early = {t for t, _ in early.most_common(3)}
    top_late = {t for t, _ in late.most_common(3)}
    assert top_early.isdisjoint(top_late)


def test_longer_lives_have_more_entities_and_more_changes_per_fact() -> None:
    small = WorldShape.for_size(1_000)
    large = WorldShape.for_size(1_000_000)
    assert large.n_entities > small.n_entities
    assert large.n_signatures > small.n_signatures
    assert large.span_h > small.span_h
    # Versions per key grow: fact memories grow linearly, keys sub-linearly.
    assert 1_000_000 / large.n_entities > 10 * (1_000 / small.n_entities)
    with pytest.raises(ValueError, match="at least 100"):
        WorldShape.for_size(50)


def test_synthetic_vectors_have_the_structure(world: World) -> None:
    memories, questions, executions = synthetic_vectors(world)
    again, _, _ = synthetic_vectors(world)
    assert np.array_equal(memories, again)
    assert memories.shape == (len(world.memories), 384)
    assert memories.dtype == np.float32
    assert questions.shape[0] == sum(len(c.queries) for c in world.checkpoints)
    assert executions.shape[0] == len(world.executions)
    assert np.allclose(np.linalg.norm(memories, axis=1), 1.0, atol=1e-4)
    first: dict[str, int] = {}
    repeated = 0
    for memory in world.memories:
        earlier = first.setdefault(memory.text, memory.index)
        if earlier != memory.index:
            repeated += 1
            assert np.array_equal(memories[earlier], memories[memory.index])
    assert repeated > 0
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, len(world.memories), size=(2_000, 2))
    random_cosine = float(np.mean(np.sum(memories[pairs[:, 0]] * memories[pairs[:, 1]], axis=1)))
    version_cosines = []
    for key in world.keys:
        versions = world.key_versions(key.index)
        if len(versions) >= 2:
            version_cosines.append(float(memories[versions[0]] @ memories[versions[-1]]))
    assert np.mean(version_cosines) > random_cosine + 0.3
    row = 0
    closer = 0
    total = 0
    noise_rows = [m.index for m in world.memories if m.category == Category.NOISE][:500]
    for checkpoint in world.checkpoints:
        for query in checkpoint.queries:
            if query.kind == "fact":
                answer = world.answers(query)[0]
                total += 1
                closer += float(questions[row] @ memories[answer]) > float(
                    np.mean(memories[noise_rows] @ questions[row])
                )
            row += 1
    assert closer / total > 0.95
    assert not math.isnan(random_cosine)
