"""Invariants of the evolving-world generator (benchmarks/quality/world.py): its ground truth must be right."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import string
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import memevo.client as mc  # noqa: E402
from benchmarks.quality import phrasing_heldout as heldout  # noqa: E402
from benchmarks.quality import phrasing_validation as validation  # noqa: E402
from benchmarks.quality.evolving_world import (  # noqa: E402
    KEYED_TARGETS,
    TEXT_TARGETS,
    SizeResult,
    Tally,
    classify_retirements,
    format_table,
    memory_input,
    parse_args,
    phrasings,
    target_check,
)
from benchmarks.quality.phrasing_heldout import AttributePhrasing  # noqa: E402
from benchmarks.quality.world import (  # noqa: E402
    ATTRIBUTES,
    FILLERS,
    FORMS,
    KEYED,
    MENTION_TEMPLATES,
    PHRASINGS,
    Category,
    Query,
    World,
    WorldShape,
    generate_world,
    phrasing_for,
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


# ---- phrasing halves and text-only changes -------------------------------------------------------------------


def _world_digest(world: World) -> str:
    """A hash of every memory's text and truth, every execution and every question, in order."""
    h = hashlib.sha256()
    for m in world.memories:
        h.update(
            f"{m.index}|{int(m.category)}|{m.entity}|{m.key}|{m.value}|{m.template}|{m.importance}|"
            f"{m.time_h!r}|{m.valid_from_h!r}|{m.text}\n".encode()
        )
    for e in world.executions:
        h.update(f"E|{e.at}|{e.signature}|{e.query}\n".encode())
    for c in world.checkpoints:
        for q in c.queries:
            h.update(f"Q|{q.at}|{q.kind}|{q.key}|{q.signature}|{q.template}|{q.text}\n".encode())
    return h.hexdigest()


@pytest.mark.parametrize(
    ("size", "digest"),
    [
        (1_000, "9dc793252a80b0bda99215d8f7aa97368485459139f00a840946ae72ae0c2e51"),
        (3_000, "35c9309b88b70a8c730d46c6e12035def75f6518ad2ceda17a072dbac4fad18e"),
    ],
)
def test_the_tuning_world_without_text_share_is_the_world_from_before_the_phrasing_halves(
    size: int, digest: str
) -> None:
    # Pinned before phrasing and text_share existed: the default world must not move.
    world = generate_world(size, seed=7)
    assert (world.phrasing, world.text_share) == ("tuning", 0.0)
    assert _world_digest(world) == digest
    assert _world_digest(generate_world(size, seed=7, phrasing="tuning", text_share=0.0)) == digest
    assert all(m.form == "keyed" for m in world.memories if m.category in KEYED)
    assert all(m.form == "" for m in world.memories if m.category not in KEYED)


def _pattern(template: str, slots: dict[str, str]) -> re.Pattern[str]:
    """A regex matching ``template`` filled in with ``slots`` (regex pieces), first letter in any case."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(slots.get(name, ".+"))
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


class _Half(NamedTuple):
    """A phrasing half written in a module of its own, as that module spells it."""

    wordings: dict[str, AttributePhrasing]
    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    service_domains: tuple[str, ...]
    codenames: tuple[str, ...]
    mentions: tuple[str, ...]


def _half(module: ModuleType, prefix: str) -> _Half:
    """The public names every such module shares, spelt with its prefix (``HELDOUT_FIRST_NAMES``, ...)."""
    names = ("PHRASING", "FIRST_NAMES", "LAST_NAMES", "SERVICE_DOMAINS", "CODENAMES", "MENTION_TEMPLATES")
    return _Half(*(getattr(module, f"{prefix}_{name}") for name in names))


_APART = {"heldout": _half(heldout, "HELDOUT"), "validation": _half(validation, "VALIDATION")}
"""The halves written apart from world.py, in the order they were written."""

_TUNING_TEMPLATES = [
    *(t for a in ATTRIBUTES for t in (*a.statements, *a.restatements, *a.late, *a.questions)),
    *MENTION_TEMPLATES,
    "Reminder: {s}",
    "Double-checked today and it still holds: {s}",
    "As noted before, {s}",
]


def _templates(half: _Half) -> list[str]:
    return [t for p in half.wordings.values() for t in (*p.statements, *p.restatements, *p.late, *p.questions)] + [
        *half.mentions
    ]


@pytest.fixture(scope="module", params=list(_APART))
def apart_world(request: pytest.FixtureRequest) -> World:
    return generate_world(3_000, seed=7, phrasing=request.param, text_share=0.5, n_checkpoints=4, n_queries=200)


def test_worlds_of_a_half_written_apart_use_only_its_templates(apart_world: World) -> None:
    world = apart_world
    half = _APART[world.phrasing]
    words = phrasing_for(world.phrasing)
    for memory in world.memories:
        if memory.category in KEYED:
            wording = half.wordings[ATTRIBUTES[world.keys[memory.key].attribute].name]
            section, offset = {
                Category.FACT: (wording.statements, 0),
                Category.RESTATEMENT: (wording.restatements, 100),
                Category.LATE_FACT: (wording.late, 200),
            }[memory.category]
            aliases = "|".join(re.escape(a) for a in world.entities[memory.entity].aliases)
            template = section[memory.template - offset]
            assert _pattern(template, {"e": f"(?:{aliases})", "v": re.escape(memory.value)}).fullmatch(memory.text)
        elif memory.category == Category.MENTION:
            template = words.mention_templates[memory.template]
            assert template in half.mentions
            assert _pattern(template, {}).fullmatch(memory.text)
    questions = [q for c in world.checkpoints for q in c.queries]
    for query in questions:
        if query.kind == "fact":
            wording = half.wordings[ATTRIBUTES[world.keys[query.key].attribute].name]
            assert _pattern(wording.questions[query.template], {}).fullmatch(query.text)
    every_text = [m.text for m in world.memories] + [q.text for q in questions] + [e.query for e in world.executions]
    assert not [t for t in every_text if "{" in t or "}" in t]
    # No text is worded by a template of a half written before this one (attributes, restatement wrappers, remarks).
    earlier = list(_TUNING_TEMPLATES)
    for name, other in _APART.items():
        if name == world.phrasing:
            break
        earlier += _templates(other)
    patterns = [_pattern(t, {}) for t in earlier]
    texts = [m.text for m in world.memories if m.category in (*KEYED, Category.MENTION)]
    texts += [q.text for q in questions if q.kind == "fact"]
    assert not [(p.pattern, t) for t in texts for p in patterns if p.fullmatch(t)]


def test_worlds_of_a_half_written_apart_name_entities_from_its_pools(apart_world: World) -> None:
    half = _APART[apart_world.phrasing]
    by_type = Counter(e.type for e in apart_world.entities)
    assert min(by_type.values()) >= 2
    for entity in apart_world.entities:
        if entity.type == "user":
            first, last = entity.name.split(" ")
            assert first in half.first_names
            assert last in half.last_names
        elif entity.type == "service":
            assert any(entity.slug.startswith(f"{d}-") for d in half.service_domains), entity.slug
        else:
            assert entity.name.removeprefix("Project ").split(" ")[0] in half.codenames


_FILLED = {"user", "svc", "svc_slug", "proj", "ts", "n", "n2", "pct", "sec", "ms", *FILLERS}
"""The slots world.py fills in a remark naming an entity."""


@pytest.mark.parametrize("name", list(_APART))
def test_every_template_of_a_half_written_apart_has_the_slots_it_is_filled_with(name: str) -> None:
    half = _APART[name]
    assert set(half.wordings) == {a.name for a in ATTRIBUTES}
    for attribute, wording in half.wordings.items():
        for section, slots in (
            (wording.statements, {"e", "v"}),
            (wording.restatements, {"e", "v"}),
            (wording.late, {"e", "v", "d"}),
            (wording.questions, {"e"}),
        ):
            assert section, attribute
            for template in section:
                assert {f for _, f, _, _ in string.Formatter().parse(template) if f is not None} == slots, template
    for template in half.mentions:
        slots = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        assert slots <= _FILLED, template
        named = [kind for kind in ("user", "svc", "proj") if any(s.startswith(kind) for s in slots)]
        assert len(named) == 1, template
    kinds = {kind: len(t) for kind, t in phrasing_for(name).mentions_by_type.items()}
    assert min(kinds.values()) >= 2, kinds


def test_the_validation_half_is_no_smaller_than_the_other_halves() -> None:
    half = _APART["validation"]
    for wording in half.wordings.values():
        assert len(wording.statements) >= 8
        assert len(wording.restatements) >= 4
        assert len(wording.late) >= 3
        assert len(wording.questions) >= 6
    for other in ("tuning", "heldout"):
        words = phrasing_for(other)
        assert len(half.first_names) >= len(words.first_names)
        assert len(half.last_names) >= len(words.last_names)
        assert len(half.service_domains) >= len(words.service_domains)
        assert len(half.codenames) >= len(words.codenames)
    assert len(half.mentions) >= len(heldout.HELDOUT_MENTION_TEMPLATES)


def _names(phrasing: str) -> set[str]:
    words = phrasing_for(phrasing)
    return {n.lower() for n in (*words.first_names, *words.last_names, *words.service_domains, *words.codenames)}


@pytest.mark.parametrize(("one", "other"), list(itertools.combinations(PHRASINGS, 2)))
def test_the_name_pools_of_two_halves_share_no_name(one: str, other: str) -> None:
    # Entity ids are made from these names, case folded: one shared word could give two halves the same entity.
    assert not _names(one) & _names(other)
    ids = [{e.id for e in generate_world(3_000, seed=7, phrasing=p).entities} for p in (one, other)]
    assert not ids[0] & ids[1]


def test_an_unknown_phrasing_or_share_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown phrasing"):
        generate_world(1_000, seed=7, phrasing="other")
    with pytest.raises(ValueError, match="text_share"):
        generate_world(1_000, seed=7, text_share=1.5)


def test_the_share_of_text_forms_is_near_text_share_half_of_each_kind() -> None:
    world = generate_world(6_000, seed=11, text_share=0.3, n_checkpoints=2, n_queries=20)
    counts = world.form_counts()
    keyed = sum(counts.values())
    assert keyed == sum(1 for m in world.memories if m.category in KEYED) > 500
    text = counts["text_entity"] + counts["text_named"]
    assert abs(text / keyed - 0.3) < 0.06
    assert abs(counts["text_entity"] / text - 0.5) < 0.1
    assert world.text_share == 0.3
    assert set(generate_world(1_000, seed=3, text_share=1.0).form_counts()) == set(FORMS)
    assert generate_world(1_000, seed=3, text_share=1.0).form_counts()["keyed"] == 0


@pytest.mark.parametrize("phrasing", PHRASINGS)
def test_texts_questions_and_truth_are_the_same_whatever_the_text_share(phrasing: str) -> None:
    worlds = [generate_world(2_000, seed=5, phrasing=phrasing, text_share=s) for s in (0.0, 0.3, 0.6, 1.0)]
    first = worlds[0]
    for other in worlds[1:]:
        assert [(m.text, m.key, m.value, m.entity, m.valid_from_h) for m in other.memories] == [
            (m.text, m.key, m.value, m.entity, m.valid_from_h) for m in first.memories
        ]
        assert other.checkpoints == first.checkpoints
        assert other.executions == first.executions
        for checkpoint in first.checkpoints:
            for query in checkpoint.queries:
                assert other.answers(query) == first.answers(query)
    # A larger share turns more memories into text, never fewer: the forms are nested.
    text_only = [{m.index for m in w.memories if m.form.startswith("text")} for w in worlds]
    assert all(a <= b for a, b in itertools.pairwise(text_only))
    assert text_only[0] == set()


def test_memory_input_drops_the_key_and_entity_by_form() -> None:
    world = generate_world(1_000, seed=7, text_share=0.5)
    vector = np.zeros(384, dtype=np.float32)
    seen: set[str] = set()
    for memory in world.memories:
        item = memory_input(world, memory.index, vector)
        entity = world.entities[memory.entity].id if memory.entity >= 0 else ""
        if memory.form == "keyed":
            assert item.fact == mc.Fact(ATTRIBUTES[world.keys[memory.key].attribute].name, memory.value)
            assert item.entity == entity != ""
        elif memory.form == "text_entity":
            assert item.fact is None
            assert item.entity == entity != ""
        elif memory.form == "text_named":
            assert item.fact is None
            assert item.entity == ""
        else:
            assert item.fact is None
            assert item.entity == entity
        assert item.content == memory.text
        seen.add(memory.form)
    assert seen == {"", *FORMS}


def test_hit_at_1_is_split_by_how_the_asked_fact_last_changed() -> None:
    world = generate_world(1_000, seed=7, text_share=0.5)
    by_form: dict[str, list[tuple[Query, int]]] = {form: [] for form in FORMS}
    noise = next(m.index for m in world.memories if m.category == Category.NOISE)
    for checkpoint in world.checkpoints:
        for query in checkpoint.queries:
            if query.kind == "fact":
                form = world.memories[world.current_index(query.key, query.at)].form
                by_form[form].append((query, world.answers(query)[0]))
    tally = Tally()
    # keyed: 2 of 3 right; text_entity: 1 of 2; text_named: 0 of 1.
    plan = {"keyed": (True, True, False), "text_entity": (True, False), "text_named": (False,)}
    for form, hits in plan.items():
        assert len(by_form[form]) >= len(hits)
        for (query, answer), hit in zip(by_form[form], hits, strict=False):
            tally.add_query(world, query, [answer if hit else noise])
    strategy = next(q for c in world.checkpoints for q in c.queries if q.kind == "strategy")
    tally.add_query(world, strategy, [world.answers(strategy)[0]])
    metrics, counts = tally.metrics(), tally.counts()
    assert metrics["hit_at_1_keyed"] == pytest.approx(2 / 3)
    assert metrics["hit_at_1_text_entity"] == pytest.approx(0.5)
    assert metrics["hit_at_1_text_named"] == 0.0
    assert (counts["hit_at_1_keyed"], counts["hit_at_1_text_entity"], counts["hit_at_1_text_named"]) == (3, 2, 1)
    assert metrics["hit_at_1_fact"] == pytest.approx(3 / 6)
    assert metrics["hit_at_1"] == pytest.approx(4 / 7)
    assert math.isnan(Tally().metrics()["hit_at_1_text_named"])


def test_retirements_are_counted_inferred_and_judged() -> None:
    world = generate_world(1_000, seed=7, text_share=0.5)
    by_key: dict[int, list[int]] = {}
    for memory in world.memories:
        if memory.category in KEYED:
            by_key.setdefault(memory.key, []).append(memory.index)
    keyed_pair = next(
        (a, b)
        for v in by_key.values()
        for a, b in itertools.pairwise(v)
        if world.memories[a].form == world.memories[b].form == "keyed"
    )
    text_pair = next(
        (a, b) for v in by_key.values() for a, b in itertools.pairwise(v) if world.memories[b].form == "text_named"
    )
    other_key = next(
        m.index
        for m in world.memories
        if m.category in KEYED and m.key != world.memories[keyed_pair[0]].key and m.form != "keyed"
    )
    noise = next(m.index for m in world.memories if m.category == Category.NOISE)
    strategy_pair = next(
        (v[0], v[1]) for v in (world.signature_versions(s.index) for s in world.signatures) if len(v) > 1
    )
    id_to_index = {index + 1: index for index in range(len(world.memories))}

    def record(old: int, new: int | None, state: mc.MemoryState = mc.MemoryState.OBSOLETE) -> mc.Memory:
        return mc.Memory(id=old + 1, state=state, superseded_by=None if new is None else new + 1)

    records = [
        record(*keyed_pair),  # explicit, right
        record(*text_pair),  # inferred, right
        record(keyed_pair[0], other_key),  # inferred, another fact: wrong
        record(text_pair[0], noise),  # inferred, a noise memory: wrong
        record(noise, 10_000),  # superseder the benchmark never wrote: wrong (and inferred)
        record(*strategy_pair),  # an older strategy version by a newer one: right (inferred: no fact key)
        record(keyed_pair[0], None),  # obsolete without a superseder: not a retirement
        record(*keyed_pair, state=mc.MemoryState.ACTIVE),  # not obsolete
    ]
    counts = classify_retirements(world, records, id_to_index)
    assert counts["retirements"] == 6
    assert counts["inferred_retirements"] == 5
    assert counts["wrong_retirements"] == 3
    assert counts["wrong_inferred_share"] == pytest.approx(3 / 5)
    assert sum(counts["wrong_by_kind"].values()) == 3
    assert "not_written_by_the_benchmark" in counts["wrong_by_kind"]
    assert any(kind.endswith("_by_noise") for kind in counts["wrong_by_kind"])
    assert classify_retirements(world, records[:1], id_to_index)["wrong_inferred_share"] is None


def _result(n: int, phrasing: str, text_share: float, hit: float) -> SizeResult:
    metrics = {name: float("nan") for name in ("stale_top5", *(f"hit_at_1_{f}" for f in FORMS))}
    metrics.update(hit_at_1=hit, stale_top5=0.01)
    retirements = {"wrong_inferred_share": 0.02 if phrasing == "tuning" else 0.0}
    return SizeResult(
        n,
        "real",
        {"memevo": metrics},
        {"memevo": {}},
        {},
        {"memevo": {"retirements": retirements}},
        phrasing,
        text_share,
    )


def test_targets_depend_on_the_text_share_and_the_table_names_the_phrasing() -> None:
    results = [_result(n, p, 0.5, hit) for p in ("tuning", "heldout") for n, hit in ((1_000, 0.95), (10_000, 0.925))]
    checks = {c["phrasing"]: c for c in target_check(results)}
    assert checks["heldout"]["counts"]
    assert not checks["tuning"]["counts"]
    assert checks["heldout"]["targets"]["hit_at_1"] == TEXT_TARGETS.hit_at_1
    assert checks["heldout"]["hit_at_1_met"]
    assert checks["heldout"]["drop_met"]
    assert checks["heldout"]["wrong_inferred_met"]
    assert not checks["tuning"]["wrong_inferred_met"]
    (keyed,) = target_check([_result(n, "heldout", 0.0, hit) for n, hit in ((1_000, 0.96), (10_000, 0.93))])
    assert keyed["targets"]["hit_at_1"] == KEYED_TARGETS.hit_at_1
    assert not keyed["hit_at_1_met"]
    assert not keyed["drop_met"]
    assert "wrong_inferred_met" not in keyed
    table = format_table(results).splitlines()
    assert table[0].split()[:4] == ["n_memories", "vectors", "phrasing", "system"]
    assert {line.split()[2] for line in table[2:]} == {"tuning", "heldout"}
    (checked,) = target_check([_result(n, "validation", 0.5, hit) for n, hit in ((1_000, 0.95), (10_000, 0.925))])
    assert not checked["counts"]


def test_the_command_line_runs_the_validation_half_alone_and_both_leaves_it_out() -> None:
    assert parse_args(["--phrasing", "validation"]).phrasing == "validation"
    assert phrasings("validation") == ("validation",)
    assert phrasings("both") == ("tuning", "heldout")
    assert set(PHRASINGS) == {"tuning", "heldout", "validation"}
