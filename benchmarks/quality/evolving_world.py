"""Quality benchmark (a) "Evolving world": does retrieval stay current as an agent's memory grows?

Usage (from the repository root)::

    python benchmarks/quality/evolving_world.py [--sizes 1000,10000,100000] [--json PATH] [--seed N]
        [--phrasing tuning|heldout|validation|both] [--text-share 0.5]

The defaults (1k, 10k and 100k memories, all with real embeddings) take about
3-6 minutes on a 2-core machine, most of it embedding ~50,000 distinct texts;
``--sizes 1000,10000,100000,1000000 --synthetic-all`` adds 1M memories and
synthetic runs at every size (about an hour, most of it the 1M sidecar run).

A seeded generator (``world.py`` beside this file) writes the life of a
long-running agent: users, services and projects whose attributes change over
world time, strategies for tasks whose later versions are better (which only
outcome feedback reveals), topic drift, and a large majority of irrelevant
memories. At eight moments of the life it asks questions whose correct answer
is known then ("Which port does the billing API listen on?", "How should I
deploy the billing API?"). Between them the agent performs tasks: it retrieves
strategies, uses one (mostly the first, sometimes another: exploration) and
succeeds with that version's true success rate.

Phrasing halves (``--phrasing``, default ``heldout``): the generator words
facts, questions and remarks naming an entity, and names users, services and
projects, from one of three disjoint halves. ``tuning`` is the half the system
may have been tuned on (world.py's own templates and names); ``heldout``
(phrasing_heldout.py) was never looked at while tuning, so the held-out
figure is the one that counts — a system that learnt the tuning wording
would do worse on it. Strategies, task logs, noise and value pools are shared.
``both`` runs every size in both halves, so the gap can be read directly.
``validation`` (phrasing_validation.py) is a third half written apart from
the other two, to check that a change generalises beyond the tuning wording
before the held-out run is spent; its figures are not held-out figures (and
``both`` leaves it out). Every row says which phrasing it used.

Text-only changes (``--text-share``, default 0.5): an agent does not always
know that what it writes changes a fact. That share of the fact changes,
restatements and late facts is written without a fact key: half with the
entity declared (``text_entity``), half naming the entity only in the text
(``text_named``); the rest with their key as before (``keyed``). The texts,
questions and answers are the same whatever the share; only what memevo is
told changes, so it must infer which memory a text-only change replaces.
hit@1 of fact questions is also split by how the asked fact last changed
(``hit_at_1_keyed``, ``hit_at_1_text_entity``, ``hit_at_1_text_named``).
After the memevo run every memory is read back: a *retirement* is a memory
made OBSOLETE by a superseder; it is *inferred* unless both were written with
a fact key, and *wrong* unless both are versions of the same fact (or
strategy versions of the same task) (``retirements``, ``inferred_retirements``, ``wrong_retirements``,
``wrong_inferred_share`` in the run details). The targets depend on the
share: with text-only changes hit@1 >= 0.90 and stale top-5 <= 5 % at every
size, a drop of at most 3 points over the sizes and at most 1 % of inferred
retirements wrong; without them hit@1 >= 0.95, stale <= 2 %, drop <= 2 points.

Three systems see the same memories, the same vectors and the same questions,
in the same run:

- ``plain``: an append-only vector store, exact cosine top-k over every memory
  ever written (NumPy).
- ``generative_agents``: Park et al. (2023) retrieval over the same memories:
  recency (0.995 per world hour since last retrieval) + importance (the
  agent's 1-10 rating) + cosine relevance, each min-max normalised over the
  candidates, equal weights; retrieval refreshes the last-access time.
- ``memevo``: a real sidecar process (``memevo serve``) written to as an agent
  using memevo would: fact keys ``(entity, attribute) = value`` and world
  ``valid_from`` on factual memories, ``task_signature`` on strategies,
  ``report_outcome`` after every task, a governance sweep (``govern``) every
  1/20 of the life; answers come from ``recall`` (k=5), or for the context
  from ``build_context`` when the sidecar implements it. Text-only memories
  (see above) carry no fact key, and ``text_named`` ones no entity either.

Metrics, per system and size (``--json`` rows use these names):

- ``hit_at_1``: share of questions whose first result holds the currently
  true answer (for a task: the best strategy version written so far).
- ``stale_top5``: share of returned top-5 items that are outdated — a fact
  value that is no longer current, or a strategy with a better newer version
  (counted even when memevo flags it as a counter-example;
  ``stale_top5_unflagged`` counts only items presented as current).
- ``context_tokens``: mean tokens of the context the agent would put in its
  prompt: the top-5 texts joined by newlines, or for memevo build_context's
  text (``--context-budget`` tokens, default 128) when the sidecar implements
  it. Tokens are estimated as ceil(chars / 4). ``context_tokens_top5`` is the
  top-5 figure for every system; ``answer_in_context`` and
  ``stale_in_context`` say whether that context holds the answer and what
  share of its items is outdated.
- also ``hit_at_1_fact``, ``hit_at_1_strategy``, ``recall_at_5`` (answer
  anywhere in the top 5), ``task_success`` (share of tasks that succeeded
  with the strategy the agent picked from its retrieval) and the split
  ``hit_at_1_keyed`` / ``hit_at_1_text_entity`` / ``hit_at_1_text_named``.

Vectors: sizes up to ``--real-max`` (default 100,000) use real text embeddings
(the sidecar's bundled all-MiniLM-L6-v2, computed once in this process and
sent to every system); larger sizes use synthetic vectors with the same
structure (``world.synthetic_vectors``; the sidecar runs with ``--embedder
none``). ``--synthetic-all`` adds synthetic runs at the real sizes too, so the
trend from 1k to 1M can be read within one vector regime. Every row says
which vectors it used; the output also prints, per regime, how often each
group of memories outranks the answer by cosine, so the regimes can be
compared (``--fit-synthetic`` re-fits the synthetic weights to the real
embeddings of the tuning phrasing). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import memevo.client as mc

try:
    from benchmarks.quality import common
    from benchmarks.quality.world import (
        ATTRIBUTES,
        FORMS,
        KEYED,
        PHRASINGS,
        Category,
        Execution,
        MemoryRecord,
        Query,
        SyntheticWeights,
        World,
        generate_world,
        synthetic_vectors,
    )
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.quality import common
    from benchmarks.quality.world import (
        ATTRIBUTES,
        FORMS,
        KEYED,
        PHRASINGS,
        Category,
        Execution,
        MemoryRecord,
        Query,
        SyntheticWeights,
        World,
        generate_world,
        synthetic_vectors,
    )

REPO_ROOT = Path(__file__).resolve().parents[2]


BENCHMARK = "evolving_world"
SYSTEMS = ("plain", "generative_agents", "memevo")
DIMENSION = 384
TOP_K = 5
DEFAULT_SEED = 7
DEFAULT_QUERIES = 800
DEFAULT_CHECKPOINTS = 8
DEFAULT_CONTEXT_BUDGET = 128
"""The command line's defaults, which benchmarks/structured_latency.py reuses to ask the same questions."""
DEFAULT_TEXT_SHARE = 0.5
"""Share of keyed memories written as text only, by default (``--text-share``)."""
GA_DECAY_PER_HOUR = 0.995
"""Park et al. 2023: recency decays by this factor per (game) hour since the memory was last retrieved."""
EXPLORATION = 0.2
"""Chance that the agent tries a retrieved strategy other than its first choice."""
GOVERN_FRACTION = 20
"""A governance sweep every 1/GOVERN_FRACTION of the life."""
WRITE_BATCH = 2_000
GET_CHUNK = 1_000
"""Ids per ``get`` call when reading every memory back after the run."""
EVENT_BLOCK = 64
"""Retrievals whose cosine rows are computed in one matrix product (plain and generative_agents)."""
STARTUP_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 600.0
"""Deadline of each client call: a recall scanning a large fresh tail on a busy 2-core machine is slow."""
CHARS_PER_TOKEN = 4
"""Token estimate: ceil(chars / 4), the usual rule of thumb for English with GPT-style tokenizers."""

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` estimated as ceil(chars / 4)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# ---- scoring -------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Running metrics of one system on one world."""

    queries: int = 0
    hits: int = 0
    fact_queries: int = 0
    fact_hits: int = 0
    strategy_queries: int = 0
    strategy_hits: int = 0
    in_top5: int = 0
    returned: int = 0
    outdated: int = 0
    outdated_unflagged: int = 0
    tokens: int = 0
    tokens_top5: int = 0
    context_answered: int = 0
    context_items: int = 0
    context_outdated: int = 0
    executions: int = 0
    successes: int = 0
    retrieval_s: float = 0.0
    outdated_by_category: dict[str, int] = field(default_factory=dict)
    """Outdated top-5 items by what they are: which kind of staleness a system lets through."""
    form_queries: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FORMS, 0))
    """Fact questions by the form of the memory that set the asked value (how the fact last changed)."""
    form_hits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FORMS, 0))

    def add_query(
        self,
        world: World,
        query: Query,
        ranked: Sequence[int],
        hints: Sequence[str] | None = None,
        context: tuple[str, Sequence[int]] | None = None,
    ) -> None:
        """Score one answered question.

        ``ranked`` are memory indices best first (-1 for an id the benchmark
        did not write); ``hints`` the system's reading hints, if any;
        ``context`` the built context's text and the memories in it, when the
        system builds one (otherwise the context is the top-5 texts).
        """
        self.queries += 1
        hit = bool(ranked) and world.is_answer(ranked[0], query)
        self.hits += hit
        if query.kind == "fact":
            self.fact_queries += 1
            self.fact_hits += hit
            form = world.memories[world.current_index(query.key, query.at)].form
            self.form_queries[form] += 1
            self.form_hits[form] += hit
        else:
            self.strategy_queries += 1
            self.strategy_hits += hit
        top = list(ranked[:TOP_K])
        self.in_top5 += any(world.is_answer(i, query) for i in top)
        self.returned += len(top)
        for position, index in enumerate(top):
            if index >= 0 and world.is_outdated(index, query.at):
                self.outdated += 1
                category = world.memories[index].category.name.lower()
                self.outdated_by_category[category] = self.outdated_by_category.get(category, 0) + 1
                hint = hints[position] if hints is not None else ""
                if not _flagged(hint):
                    self.outdated_unflagged += 1
        top_text = "\n".join(world.memories[i].text for i in top if i >= 0)
        self.tokens_top5 += estimate_tokens(top_text)
        text, items = context if context is not None else (top_text, top)
        self.tokens += estimate_tokens(text)
        self.context_answered += any(world.is_answer(i, query) for i in items)
        self.context_items += len(items)
        self.context_outdated += sum(1 for i in items if i >= 0 and world.is_outdated(i, query.at))

    def metrics(self) -> dict[str, float]:
        """The metrics, named as in the JSON rows."""

        def share(part: int, whole: int) -> float:
            return part / whole if whole else float("nan")

        return {
            "hit_at_1": share(self.hits, self.queries),
            "stale_top5": share(self.outdated, self.returned),
            "context_tokens": share(self.tokens, self.queries),
            "hit_at_1_fact": share(self.fact_hits, self.fact_queries),
            "hit_at_1_strategy": share(self.strategy_hits, self.strategy_queries),
            "recall_at_5": share(self.in_top5, self.queries),
            "stale_top5_unflagged": share(self.outdated_unflagged, self.returned),
            "context_tokens_top5": share(self.tokens_top5, self.queries),
            "answer_in_context": share(self.context_answered, self.queries),
            "stale_in_context": share(self.context_outdated, self.context_items),
            "task_success": share(self.successes, self.executions),
            **{f"hit_at_1_{form}": share(self.form_hits[form], self.form_queries[form]) for form in FORMS},
        }

    def counts(self) -> dict[str, int]:
        """How many questions (or tasks, or items) each metric averages over."""
        return {
            "hit_at_1": self.queries,
            "stale_top5": self.returned,
            "context_tokens": self.queries,
            "hit_at_1_fact": self.fact_queries,
            "hit_at_1_strategy": self.strategy_queries,
            "recall_at_5": self.queries,
            "stale_top5_unflagged": self.returned,
            "context_tokens_top5": self.queries,
            "answer_in_context": self.queries,
            "stale_in_context": self.context_items,
            "task_success": self.executions,
            **{f"hit_at_1_{form}": self.form_queries[form] for form in FORMS},
        }


def _flagged(hint: str) -> bool:
    """Whether a memevo hint tells the reader not to take the item as current."""
    return bool(hint) and not hint.startswith("current")


def choose_strategy(
    world: World, execution: Execution, ranked: Sequence[int], hints: Sequence[str] | None = None
) -> int:
    """The strategy memory the agent uses from a retrieval, or -1 when none for this task was retrieved.

    The agent takes the first retrieved strategy for the task — the first not
    flagged as a counter-example when the system gives hints — except that
    with probability EXPLORATION it tries one of the others (exploration).
    """
    candidates: list[tuple[int, bool]] = []
    for position, index in enumerate(ranked):
        if index < 0:
            continue
        memory = world.memories[index]
        if memory.category == Category.STRATEGY and memory.signature == execution.signature:
            flagged = hints is not None and _flagged(hints[position])
            candidates.append((index, flagged))
    if not candidates:
        return -1
    ordered = [i for i, flagged in candidates if not flagged] + [i for i, flagged in candidates if flagged]
    if len(ordered) > 1 and execution.u_explore < EXPLORATION:
        others = ordered[1:]
        return others[min(len(others) - 1, int(execution.u_pick * len(others)))]
    return ordered[0]


def task_succeeds(world: World, execution: Execution, used: int) -> bool:
    """The outcome of a task performed with memory ``used`` (-1: without any strategy)."""
    if used < 0:
        return execution.u_outcome < world.shape.unguided_success
    memory = world.memories[used]
    return execution.u_outcome < world.signatures[memory.signature].rates[memory.version]


# ---- the timeline --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A retrieval moment: a task execution or a checkpoint question, in life order."""

    at: int
    time_h: float
    vector_row: int
    """Row in the event vector matrix."""
    execution: Execution | None = None
    query: Query | None = None
    checkpoint: int = -1


def timeline(world: World) -> list[Event]:
    """Executions and checkpoint questions in the order the agent meets them (executions first at equal ``at``)."""
    items: list[tuple[int, int, int, Event]] = []
    for row, execution in enumerate(world.executions):
        items.append((execution.at, 0, row, Event(execution.at, execution.time_h, row, execution=execution)))
    row = len(world.executions)
    for c, checkpoint in enumerate(world.checkpoints):
        for query in checkpoint.queries:
            items.append((query.at, 1, row, Event(query.at, query.time_h, row, query=query, checkpoint=c)))
            row += 1
    items.sort(key=lambda item: item[:3])
    return [item[3] for item in items]


# ---- vectors -------------------------------------------------------------------------------------------------


@dataclass
class Vectors:
    """Vectors of one world: memories, then events (executions, then checkpoint questions in order)."""

    memories: FloatMatrix
    events: FloatMatrix
    regime: str
    """"real" or "synthetic"."""
    seconds: float
    texts_embedded: int = 0


def real_vectors(world: World, cache_dir: Path | None) -> Vectors:
    """Embed every distinct text once with the sidecar's bundled model (optionally cached on disk)."""
    from memevo.sidecar.embedding.local import LocalEmbedder

    queries = [q.text for c in world.checkpoints for q in c.queries]
    texts = [m.text for m in world.memories] + [e.query for e in world.executions] + queries
    unique = sorted(set(texts))
    started = time.perf_counter()
    embedder = LocalEmbedder()
    digest = hashlib.sha256(("\0".join([embedder.identity, *unique])).encode()).hexdigest()[:24]
    cached = cache_dir / f"evolving-world-{digest}.npy" if cache_dir is not None else None
    if cached is not None and cached.exists():
        matrix = np.load(cached)
        embedded = 0
    else:
        embedder.load()
        matrix = np.empty((len(unique), DIMENSION), dtype=np.float32)
        step = 2_048
        for start in range(0, len(unique), step):
            matrix[start : start + step] = embedder.embed(unique[start : start + step])
            done = min(start + step, len(unique))
            elapsed = time.perf_counter() - started
            _progress(f"  embedding {done:,}/{len(unique):,} texts ({done / max(elapsed, 1e-9):.0f}/s)")
        embedder.close()
        embedded = len(unique)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.save(cached, matrix)
    row = {text: i for i, text in enumerate(unique)}
    indices = np.fromiter((row[t] for t in texts), dtype=np.int64, count=len(texts))
    n = len(world.memories)
    return Vectors(
        memories=np.ascontiguousarray(matrix[indices[:n]]),
        events=np.ascontiguousarray(matrix[indices[n:]]),
        regime="real",
        seconds=time.perf_counter() - started,
        texts_embedded=embedded,
    )


def fake_vectors(world: World) -> Vectors:
    """Synthetic vectors with the world's structure (see ``world.synthetic_vectors``)."""
    started = time.perf_counter()
    memories, queries, executions = synthetic_vectors(world, DIMENSION)
    return Vectors(memories, np.concatenate([executions, queries]), "synthetic", time.perf_counter() - started)


@dataclass(frozen=True)
class Probe:
    """One question and the groups of memories that compete with its answer (independent of the vectors)."""

    row: int
    """Row of the question in the event vectors."""
    kind: str
    at: int
    answers: IntArray
    groups: dict[str, IntArray]
    """Small groups, as memory indices."""
    irrelevant_exclude: IntArray
    """The irrelevant group is every unrelated memory before ``at`` except these."""


def structure_probes(world: World, per_kind: int = 200) -> list[Probe]:
    """Up to ``per_kind`` questions of each kind, spread over the checkpoints, with their competitor groups.

    Groups for facts: outdated versions of the key, current facts of the same
    entity, the same attribute of other entities, remarks naming the entity,
    irrelevant memories; for tasks: older versions, task logs, strategies of
    other tasks, facts of the entity, remarks naming it, irrelevant memories.
    """
    n = len(world.memories)
    category = np.fromiter((m.category for m in world.memories), dtype=np.int64, count=n)
    key = np.fromiter((m.key for m in world.memories), dtype=np.int64, count=n)
    entity = np.fromiter((m.entity for m in world.memories), dtype=np.int64, count=n)
    signature = np.fromiter((m.signature for m in world.memories), dtype=np.int64, count=n)
    attribute = np.asarray([k.attribute for k in world.keys] + [-1], dtype=np.int64)[key]
    keyed = np.flatnonzero(np.isin(category, [int(c) for c in KEYED]))
    strategies = np.flatnonzero(category == Category.STRATEGY)
    logs = np.flatnonzero(category == Category.TASK_LOG)
    mentions = np.flatnonzero(category == Category.MENTION)
    by_entity: dict[int, IntArray] = {}
    order = np.argsort(entity, kind="stable")
    bounds = np.searchsorted(entity[order], np.arange(len(world.entities) + 1))
    for e in range(len(world.entities)):
        by_entity[e] = np.sort(order[bounds[e] : bounds[e + 1]])

    def before(indices: IntArray, at: int) -> IntArray:
        return indices[: int(np.searchsorted(indices, at))]

    rows: list[tuple[int, Query]] = []
    row = len(world.executions)
    for checkpoint in world.checkpoints:
        for query in checkpoint.queries:
            rows.append((row, query))
            row += 1
    probes: list[Probe] = []
    for kind in ("fact", "strategy"):
        picked = [item for item in rows if item[1].kind == kind]
        for row, query in picked[:: max(1, len(picked) // per_kind)][:per_kind]:
            at = query.at
            answers = np.asarray(world.answers(query), dtype=np.int64)
            if kind == "fact":
                fact = world.keys[query.key]
                own = before(by_entity[fact.entity], at)
                own_keyed = own[np.isin(own, keyed)]
                same_key = own_keyed[key[own_keyed] == query.key]
                other_keyed = before(keyed, at)
                groups = {
                    "outdated_version": np.setdiff1d(same_key, answers),
                    "same_entity_fact": np.asarray(
                        [i for i in own_keyed[key[own_keyed] != query.key] if not world.is_outdated(int(i), at)],
                        dtype=np.int64,
                    ),
                    "same_attribute_other_entity": other_keyed[
                        (attribute[other_keyed] == fact.attribute) & (entity[other_keyed] != fact.entity)
                    ],
                    "mention_of_entity": own[category[own] == Category.MENTION],
                }
                exclude = own
            else:
                sig = world.signatures[query.signature]
                own = before(by_entity[sig.entity], at)
                written = before(strategies, at)
                task_logs = before(logs, at)
                groups = {
                    "older_version": np.setdiff1d(written[signature[written] == query.signature], answers),
                    "task_log": task_logs[signature[task_logs] == query.signature],
                    "other_task_strategy": written[signature[written] != query.signature],
                    "entity_fact": own[np.isin(own, keyed)],
                    "mention_of_entity": own[np.isin(own, mentions)],
                }
                exclude = np.union1d(own, task_logs)
            probes.append(Probe(row, kind, at, answers, groups, exclude))
    return probes


def competitor_margins(
    world: World, probes: Sequence[Probe], memories: FloatMatrix, events: FloatMatrix
) -> dict[tuple[str, str], npt.NDArray[np.float64]]:
    """Per (kind, group): the best member's cosine minus the best answer's, one value per question.

    ``(kind, "answer")`` holds the best answer's cosine itself.
    """
    unrelated = np.fromiter(
        (m.category in (Category.NOISE, Category.MENTION, Category.TASK_LOG) for m in world.memories),
        dtype=bool,
        count=len(world.memories),
    )
    out: dict[tuple[str, str], list[float]] = {}
    for probe in probes:
        sims = memories[: probe.at] @ events[probe.row]
        best = float(sims[probe.answers].max())
        out.setdefault((probe.kind, "answer"), []).append(best)
        for name, members in probe.groups.items():
            if members.size:
                out.setdefault((probe.kind, name), []).append(float(sims[members].max()) - best)
        masked = np.where(unrelated[: probe.at], sims, -np.inf)
        masked[probe.irrelevant_exclude] = -np.inf
        top = float(masked.max())
        if math.isfinite(top):
            out.setdefault((probe.kind, "irrelevant"), []).append(top - best)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def similarity_profile(world: World, vectors: Vectors, per_kind: int = 200) -> dict[str, dict[str, float]]:
    """How often each group's best memory outranks the answer under plain cosine (see ``structure_probes``).

    Per kind of question: the mean cosine of the best answer and, per group,
    the share of questions where the group beats it (``beats:<group>``).
    Comparing these between vector regimes shows whether synthetic vectors
    are as hard as real ones.
    """
    margins = competitor_margins(world, structure_probes(world, per_kind), vectors.memories, vectors.events)
    profile: dict[str, dict[str, float]] = {}
    for (kind, group), values in margins.items():
        summary = profile.setdefault(kind, {})
        if group == "answer":
            summary["questions"] = float(values.size)
            summary["answer_cosine"] = float(values.mean())
        else:
            summary[f"beats:{group}"] = float((values > 0).mean())
    return profile


NOISE_FIELDS = (
    "rank", "common", "isotropic", "noise_spread", "name_share", "fact_noise", "ask_noise", "how_noise",
    "mention_entity", "mention_noise", "noise_topic", "noise_noise",
)  # fmt: skip
"""The weights that shape how the competition grows with size (the tails); the rest shape one size."""


def fit_synthetic_weights(
    worlds: Sequence[tuple[World, Vectors]],
    *,
    start: SyntheticWeights | None = None,
    fields: Sequence[str] | None = None,
    rounds: int = 4,
    per_kind: int = 400,
) -> SyntheticWeights:
    """Fit ``SyntheticWeights`` so that synthetic vectors compete with answers as real ones do.

    ``worlds`` pairs worlds with their real vectors (several sizes fit how
    the competition grows). Coordinate descent from ``start`` (default: the
    current defaults) over ``fields`` (default: all; each weight tried at
    x0.6, x0.8, x1.25, x1.6, the rank at 12, 16, 24, 32, 48) on the squared
    differences of, per world and (kind, group), the share of questions where
    the group beats the answer and the mean and spread of the margin; fact
    questions weigh 3x. Slow: ~15 minutes per round at 10k with every field.
    """
    probes = [(world, structure_probes(world, per_kind), real) for world, real in worlds]
    targets = [competitor_margins(world, ps, real.memories, real.events) for world, ps, real in probes]

    def loss(weights: SyntheticWeights) -> float:
        total = 0.0
        for (world, ps, _), target in zip(probes, targets, strict=True):
            memories, questions, executions = synthetic_vectors(world, DIMENSION, weights)
            got = competitor_margins(world, ps, memories, np.concatenate([executions, questions]))
            for name, want in target.items():
                have = got.get(name, np.zeros(1))
                weight = 3.0 if name[0] == "fact" else 1.0
                spread = (have.std() - want.std()) ** 2
                if name[1] == "answer":
                    total += weight * (4 * (have.mean() - want.mean()) ** 2 + spread)
                else:
                    beats = float((have > 0).mean() - (want > 0).mean())
                    total += weight * (2 * beats**2 + (have.mean() - want.mean()) ** 2 + spread)
        return float(total)

    best = start or SyntheticWeights()
    best_loss = loss(best)
    names = [f.name for f in dataclasses.fields(best) if fields is None or f.name in fields]
    for round_number in range(rounds):
        improved = False
        for name in names:
            if name == "rank":
                candidates = [dataclasses.replace(best, rank=r) for r in (12, 16, 24, 32, 48) if r != best.rank]
            else:
                value = getattr(best, name)
                candidates = [dataclasses.replace(best, **{name: round(value * f, 3)}) for f in (0.6, 0.8, 1.25, 1.6)]
            for candidate in candidates:
                value = loss(candidate)
                if value < best_loss - 1e-6:
                    best, best_loss, improved = candidate, value, True
        _log(f"  fit round {round_number + 1}: loss {best_loss:.4f}")
        if not improved:
            break
    return best


# ---- plain and generative_agents -----------------------------------------------------------------------------


def _min_max(values: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
    low = float(values.min())
    high = float(values.max())
    if high - low <= 1e-12:
        return np.zeros(values.shape, dtype=np.float64)
    return (values.astype(np.float64) - low) / (high - low)


def _top(scores: npt.NDArray[np.floating[Any]], k: int) -> list[int]:
    if scores.size <= k:
        return [int(i) for i in np.argsort(-scores, kind="stable")]
    part = np.argpartition(-scores, k)[:k]
    return [int(i) for i in part[np.argsort(-scores[part], kind="stable")]]


def run_baselines(world: World, vectors: Vectors, events: Sequence[Event]) -> dict[str, Tally]:
    """plain and generative_agents over the same timeline, exactly (no index)."""
    n = len(world.memories)
    importance = np.fromiter((m.importance for m in world.memories), dtype=np.float64, count=n)
    created_h = np.fromiter((m.time_h for m in world.memories), dtype=np.float64, count=n)
    last_access_h = created_h.copy()
    tallies = {"plain": Tally(), "generative_agents": Tally()}
    for start in range(0, len(events), EVENT_BLOCK):
        block = events[start : start + EVENT_BLOCK]
        upto = max(e.at for e in block)
        t0 = time.perf_counter()
        rows = vectors.events[[e.vector_row for e in block]]
        sims_block = rows @ vectors.memories[:upto].T
        shared_s = (time.perf_counter() - t0) / 2
        for e, sims_full in zip(block, sims_block, strict=True):
            sims = sims_full[: e.at]
            t1 = time.perf_counter()
            plain = _top(sims, TOP_K)
            t2 = time.perf_counter()
            recency = np.power(GA_DECAY_PER_HOUR, np.maximum(e.time_h - last_access_h[: e.at], 0.0))
            score = _min_max(recency) + _min_max(importance[: e.at]) + _min_max(sims)
            agents = _top(score, TOP_K)
            last_access_h[agents] = e.time_h
            t3 = time.perf_counter()
            tallies["plain"].retrieval_s += t2 - t1
            tallies["generative_agents"].retrieval_s += t3 - t2
            for name, ranked in (("plain", plain), ("generative_agents", agents)):
                tally = tallies[name]
                if e.execution is not None:
                    used = choose_strategy(world, e.execution, ranked)
                    tally.executions += 1
                    tally.successes += task_succeeds(world, e.execution, used)
                elif e.query is not None:
                    tally.add_query(world, e.query, ranked)
        for tally in tallies.values():
            tally.retrieval_s += shared_s
    return tallies


# ---- memevo --------------------------------------------------------------------------------------------------


@dataclass
class MemevoRun:
    """What the memevo run measured besides the tally."""

    tally: Tally
    write_s: float = 0.0
    govern_s: float = 0.0
    sweeps: int = 0
    transitions: dict[str, int] = field(default_factory=dict)
    outcomes_reported: int = 0
    build_context: str = "not tried"
    states: dict[str, int] = field(default_factory=dict)
    write_outcomes: dict[str, int] = field(default_factory=dict)
    wait_s: float = 0.0
    retirements: dict[str, Any] = field(default_factory=dict)
    """See :func:`classify_retirements`."""


SERVE_EXTRA: list[str] = []
"""Further ``memevo serve`` arguments of this run (``--rerank``)."""


@contextlib.contextmanager
def sidecar(regime: str, data: Path | None) -> Iterator[mc.MemoryClient]:
    """A ``memevo serve`` process on a unix socket in a temporary directory, and a client of it.

    ``data`` keeps the data directory there instead of in the temporary
    directory. The sidecar is stopped (SIGTERM, then SIGKILL after two
    minutes) on exit; if the run fails, the end of its log goes to stderr.
    """
    root = Path(tempfile.mkdtemp(prefix="memevo-evolving-world-"))
    ready = root / "ready.json"
    log_path = root / "sidecar.log"
    embedder = ["--embedder", "local"] if regime == "real" else ["--embedder", "none", "--dimension", str(DIMENSION)]
    args = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data or root / "data"),
        "--listen", f"unix://{root / 'memevo.sock'}", *embedder, "--ready-file", str(ready),
        "--sweep-interval-s", "0", *SERVE_EXTRA,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _ready(ready):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("memevo serve did not start")
            time.sleep(0.05)
        with mc.MemoryClient(f"unix://{root / 'memevo.sock'}", timeout_s=CALL_TIMEOUT_S) as client:
            yield client
    except BaseException:
        with contextlib.suppress(OSError):
            _log(f"sidecar log (end):\n{log_path.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _ready(path: Path) -> bool:
    """Whether the ready file exists and holds JSON (it may be seen half-written)."""
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


_KINDS = {"fact": "FACT", "preference": "PREFERENCE", "strategy": "STRATEGY", "episode": "EPISODE"}
_SOURCES = {"user": "USER_STATEMENT", "tool": "TOOL_RESULT", "agent": "AGENT_INFERENCE", "reflection": "REFLECTION"}


def memory_input(world: World, index: int, vector: FloatMatrix) -> mc.MemoryInput:
    """The MemoryInput an agent using memevo would write for memory ``index``.

    A keyed memory of form "keyed" carries its fact key and entity; "text_entity"
    its entity only; "text_named" neither (the entity is only named in the text).
    """
    memory = world.memories[index]
    entity = world.entities[memory.entity].id if memory.entity >= 0 else ""
    fact = None
    if memory.category in KEYED and memory.form == "keyed":
        fact = (ATTRIBUTES[world.keys[memory.key].attribute].name, memory.value)
    if memory.form == "text_named":
        entity = ""
    signature = world.signatures[memory.signature].id if memory.category == Category.STRATEGY else ""
    topic = world.topics[memory.topic] if memory.topic >= 0 else ""
    return mc.MemoryInput(
        content=memory.text,
        vector=vector,
        kind=getattr(mc.MemoryKind, _KINDS[memory.kind]),
        entity=entity,
        topic=topic,
        fact=fact,
        source=getattr(mc.MemorySource, _SOURCES[memory.source]),
        importance=memory.importance,
        valid_from=world.time_of(memory.valid_from_h),
        task_signature=signature,
    )


def run_memevo(world: World, vectors: Vectors, events: Sequence[Event], keep: Path | None, budget: int) -> MemevoRun:
    """Drive a real sidecar through the life; see the module docstring."""
    run = MemevoRun(Tally())
    n = len(world.memories)
    id_to_index: dict[int, int] = {}
    govern_every = max(1, n // GOVERN_FRACTION)
    next_govern = govern_every
    written = 0
    context_available: bool | None = None
    with sidecar(vectors.regime, keep) as client:

        def write_until(at: int) -> None:
            nonlocal written, next_govern
            while written < at:
                stop = min(at, written + WRITE_BATCH, next_govern)
                items = [memory_input(world, i, vectors.memories[i]) for i in range(written, stop)]
                t0 = time.perf_counter()
                results = _remember_batch(client, items, f"w{written}", stop, run)
                run.write_s += time.perf_counter() - t0
                for offset, result in enumerate(results):
                    id_to_index.setdefault(result.id, written + offset)
                    outcome = result.outcome.name.lower()
                    run.write_outcomes[outcome] = run.write_outcomes.get(outcome, 0) + 1
                written = stop
                if written >= next_govern:
                    t0 = time.perf_counter()
                    sweep = client.govern(turn=written)
                    run.govern_s += time.perf_counter() - t0
                    run.sweeps += 1
                    for transition in sweep.transitions:
                        name = f"{transition.from_state.name.lower()}->{transition.to_state.name.lower()}"
                        run.transitions[name] = run.transitions.get(name, 0) + transition.count
                    next_govern += govern_every
                _progress(f"  memevo: {written:,}/{n:,} written")

        for e in events:
            write_until(e.at)
            query_text = e.execution.query if e.execution is not None else e.query.text if e.query else ""
            vector = vectors.events[e.vector_row]
            t0 = time.perf_counter()
            result = client.recall(query_text, vector=vector, k=TOP_K, turn=max(e.at, 1))
            run.tally.retrieval_s += time.perf_counter() - t0
            ranked = [id_to_index.get(r.memory.id, -1) for r in result]
            hints = [r.hint for r in result]
            if e.execution is not None:
                used = choose_strategy(world, e.execution, ranked, hints)
                success = task_succeeds(world, e.execution, used)
                run.tally.executions += 1
                run.tally.successes += success
                if used >= 0:
                    memory_id = result[ranked.index(used)].memory.id
                    outcome = mc.Outcome.SUCCESS if success else mc.Outcome.FAILURE
                    client.report_outcome(result.retrieval_id, outcome, used_memory_ids=[memory_id], turn=e.at)
                    run.outcomes_reported += 1
            elif e.query is not None:
                context: tuple[str, list[int]] | None = None
                if context_available is not False:
                    try:
                        built = client.build_context(e.query.text, vector=vector, token_budget=budget, turn=e.at)
                        context = (built.text, [id_to_index.get(item.memory.id, -1) for item in built.items])
                        context_available = True
                        run.build_context = f"build_context (token_budget={budget})"
                    except mc.UnimplementedError:
                        context_available = False
                        run.build_context = "recall top 5 (BuildContext is UNIMPLEMENTED)"
                run.tally.add_query(world, e.query, ranked, hints, context)
        write_until(n)
        stats = client.stats()
        for count in stats.counts:
            name = count.state.name.lower()
            run.states[name] = run.states.get(name, 0) + count.count
        ids = sorted(id_to_index)
        records: list[mc.Memory] = []
        for start in range(0, len(ids), GET_CHUNK):
            records.extend(client.get(ids[start : start + GET_CHUNK], include_vectors=False))
        run.retirements = classify_retirements(world, records, id_to_index)
    return run


_RIGHT_RETIREMENTS = ("same_key", "same_signature")


def classify_retirements(world: World, records: Sequence[mc.Memory], id_to_index: dict[int, int]) -> dict[str, Any]:
    """Count the retirements among ``records`` (memevo's memories after the run) and how many were wrong.

    A retirement is a record in state OBSOLETE with a ``superseded_by``. It is
    *inferred* unless both it and its superseder were written with a fact key
    (form "keyed"); it is *wrong* unless both are keyed-category world
    memories of the same fact key (a retirement by another attribute, another
    entity, a remark, noise or a memory the benchmark did not write is
    wrong) — or, the one other right case, an older strategy version retired
    by a newer one of the same task signature. ``wrong_inferred_share`` is wrong inferred / inferred (None when
    none was inferred); ``wrong_by_kind`` says what the wrong ones were.
    """
    retirements = inferred = wrong = wrong_inferred = 0
    wrong_by_kind: dict[str, int] = {}
    for record in records:
        if record.state != mc.MemoryState.OBSOLETE or not record.superseded_by:
            continue
        retirements += 1
        old = id_to_index.get(record.id, -1)
        new = id_to_index.get(record.superseded_by, -1)
        old_memory = world.memories[old] if old >= 0 else None
        new_memory = world.memories[new] if new >= 0 else None
        keyed_both = (
            old_memory is not None
            and new_memory is not None
            and old_memory.form == "keyed"
            and new_memory.form == "keyed"
        )
        inferred += not keyed_both
        kind = _retirement_kind(world, old_memory, new_memory)
        if kind not in _RIGHT_RETIREMENTS:
            wrong += 1
            wrong_inferred += not keyed_both
            wrong_by_kind[kind] = wrong_by_kind.get(kind, 0) + 1
    return {
        "retirements": retirements,
        "inferred_retirements": inferred,
        "wrong_retirements": wrong,
        "wrong_inferred_retirements": wrong_inferred,
        "wrong_inferred_share": wrong_inferred / inferred if inferred else None,
        "wrong_by_kind": wrong_by_kind,
    }


def _retirement_kind(world: World, old: MemoryRecord | None, new: MemoryRecord | None) -> str:
    """What a retired memory and its superseder are to each other; "same_key" and "same_signature" are right.

    Wrong kinds: "not_written_by_the_benchmark", "<old category>_by_<new category>" when either is not a
    keyed fact (e.g. "mention_by_mention", "fact_by_noise"), "other_attribute_same_entity",
    "same_attribute_other_entity" and "other_fact".
    """
    if old is None or new is None:
        return "not_written_by_the_benchmark"
    if old.category == new.category == Category.STRATEGY and old.signature == new.signature:
        return "same_signature"  # an older strategy version retired by a newer one of the same task
    if old.category not in KEYED or new.category not in KEYED:
        return f"{old.category.name.lower()}_by_{new.category.name.lower()}"
    if old.key == new.key:
        return "same_key"
    if old.entity == new.entity:
        return "other_attribute_same_entity"
    if world.keys[old.key].attribute == world.keys[new.key].attribute:
        return "same_attribute_other_entity"
    return "other_fact"


def _remember_batch(
    client: mc.MemoryClient, items: list[mc.MemoryInput], request_id: str, turn: int, run: MemevoRun
) -> list[mc.WriteResult]:
    """remember_batch, waiting out back-pressure (the fresh tail full) and retrying with the same request id."""
    while True:
        try:
            return client.remember_batch(items, request_id=request_id, turn=turn)
        except mc.ResourceExhaustedError:
            t0 = time.perf_counter()
            time.sleep(1.0)
            run.wait_s += time.perf_counter() - t0


# ---- driver --------------------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    """Everything measured for one size and vector regime."""

    n_memories: int
    regime: str
    metrics: dict[str, dict[str, float]]
    counts: dict[str, dict[str, int]]
    """Per system and metric: the questions, tasks or items the value averages over."""
    timings_s: dict[str, float]
    details: dict[str, Any]
    phrasing: str = "tuning"
    text_share: float = 0.0


def run_size(n: int, regime: str, args: argparse.Namespace, phrasing: str = "heldout") -> SizeResult:
    """Generate the world of size ``n`` in ``phrasing``, build its vectors and run every system on it."""
    t0 = time.perf_counter()
    world = generate_world(
        n,
        args.seed,
        n_checkpoints=args.checkpoints,
        n_queries=args.queries,
        phrasing=phrasing,
        text_share=args.text_share,
    )
    generate_s = time.perf_counter() - t0
    _log(
        f"n={n:,} ({regime} vectors, {phrasing} phrasing, text share {args.text_share:g}): "
        f"{len(world.entities)} entities, {len(world.keys)} fact keys, "
        f"{len(world.signatures)} task signatures, {len(world.executions)} task executions, "
        f"{sum(len(c.queries) for c in world.checkpoints)} questions; generated in {generate_s:.1f} s"
    )
    vectors = real_vectors(world, args.embed_cache) if regime == "real" else fake_vectors(world)
    if regime == "real" and vectors.texts_embedded == 0:
        _log(f"  vectors: real, read from the cache in {vectors.seconds:.1f} s")
    elif regime == "real":
        rate = vectors.texts_embedded / vectors.seconds
        _log(f"  vectors: {vectors.texts_embedded:,} distinct texts embedded in {vectors.seconds:.1f} s ({rate:.0f}/s)")
    else:
        _log(f"  vectors: synthetic, built in {vectors.seconds:.1f} s")
    events = timeline(world)
    metrics: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    stale_kinds: dict[str, dict[str, int]] = {}
    timings: dict[str, float] = {"generate": generate_s, "vectors": vectors.seconds}
    details: dict[str, Any] = {
        "entities": len(world.entities),
        "fact_keys": len(world.keys),
        "task_signatures": len(world.signatures),
        "task_executions": len(world.executions),
        "questions": sum(len(c.queries) for c in world.checkpoints),
        "checkpoints": [c.at for c in world.checkpoints],
        "categories": world.category_counts(),
        "forms": world.form_counts(),
        "world_span_days": round(world.memories[-1].time_h / 24.0, 1),
        "texts_embedded": vectors.texts_embedded,
    }
    t0 = time.perf_counter()
    details["similarity_profile"] = similarity_profile(world, vectors)
    timings["profile"] = time.perf_counter() - t0
    if "plain" in args.systems or "generative_agents" in args.systems:
        t0 = time.perf_counter()
        tallies = run_baselines(world, vectors, events)
        timings["baselines"] = time.perf_counter() - t0
        for name, tally in tallies.items():
            if name in args.systems:
                metrics[name] = tally.metrics()
                counts[name] = tally.counts()
                stale_kinds[name] = tally.outdated_by_category
                timings[f"{name}_retrieval"] = tally.retrieval_s
        _log(f"  plain + generative_agents: {timings['baselines']:.1f} s")
    if "memevo" in args.systems:
        t0 = time.perf_counter()
        # One phrasing keeps the directory name "<size>-<vectors>" that benchmarks/structured_latency.py expects.
        name = f"{n}-{regime}" if args.phrasing != "both" else f"{n}-{regime}-{phrasing}"
        keep = args.keep_data / name if args.keep_data is not None else None
        run = run_memevo(world, vectors, events, keep, args.context_budget)
        timings["memevo"] = time.perf_counter() - t0
        timings["memevo_write"] = run.write_s
        timings["memevo_recall"] = run.tally.retrieval_s
        timings["memevo_govern"] = run.govern_s
        timings["memevo_backpressure_wait"] = run.wait_s
        metrics["memevo"] = run.tally.metrics()
        counts["memevo"] = run.tally.counts()
        stale_kinds["memevo"] = run.tally.outdated_by_category
        details["memevo"] = {
            "build_context": run.build_context,
            "sweeps": run.sweeps,
            "transitions": run.transitions,
            "outcomes_reported": run.outcomes_reported,
            "states_at_end": run.states,
            "write_outcomes": run.write_outcomes,
            "retirements": run.retirements,
        }
        _log(f"  memevo: {timings['memevo']:.1f} s (writes {run.write_s:.1f} s, recall {run.tally.retrieval_s:.1f} s)")
    details["outdated_top5_by_category"] = stale_kinds
    return SizeResult(n, regime, metrics, counts, timings, details, phrasing, args.text_share)


_COLUMNS = (
    ("hit_at_1", "hit@1", "{:.3f}"),
    ("stale_top5", "stale top5", "{:.1%}"),
    ("context_tokens", "ctx tokens", "{:.0f}"),
    ("hit_at_1_fact", "hit@1 fact", "{:.3f}"),
    ("hit_at_1_strategy", "hit@1 strat", "{:.3f}"),
    ("recall_at_5", "recall@5", "{:.3f}"),
    ("stale_top5_unflagged", "stale unflagged", "{:.1%}"),
    ("context_tokens_top5", "top5 tokens", "{:.0f}"),
    ("answer_in_context", "ans in ctx", "{:.3f}"),
    ("stale_in_context", "stale in ctx", "{:.1%}"),
    ("task_success", "task success", "{:.3f}"),
    ("hit_at_1_keyed", "h@1 keyed", "{:.3f}"),
    ("hit_at_1_text_entity", "h@1 txt+ent", "{:.3f}"),
    ("hit_at_1_text_named", "h@1 txt named", "{:.3f}"),
)
_LEFT_COLUMNS = 4
"""n_memories, vectors, phrasing, system: left-aligned; the metrics are right-aligned."""


def format_table(results: Sequence[SizeResult]) -> str:
    """The system x size x metric table, one row per (size, vectors, phrasing, system)."""
    header = ["n_memories", "vectors", "phrasing", "system", *(title for _, title, _ in _COLUMNS)]
    rows = [header]
    for result in results:
        for system in SYSTEMS:
            values = result.metrics.get(system)
            if values is None:
                continue
            cells = [f"{result.n_memories:,}", result.regime, result.phrasing, system]
            for name, _, fmt in _COLUMNS:
                value = values.get(name, float("nan"))
                cells.append("-" if math.isnan(value) else fmt.format(value))
            rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for position, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.rjust(width) if i >= _LEFT_COLUMNS else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            )
        )
        if position == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


@dataclass(frozen=True)
class TargetSet:
    """Targets for memevo: hit@1 at every size, stale top-5 at every size, the hit@1 drop over the sizes."""

    name: str
    hit_at_1: float
    stale_top5: float
    drop: float
    wrong_inferred_share: float | None = None
    """Wrong inferred retirements / inferred retirements at every size; None: not a target."""


KEYED_TARGETS = TargetSet("every change keyed (text share 0)", 0.95, 0.02, 0.02)
"""Issue 5's targets, for worlds where the agent writes every fact change with its key."""
TEXT_TARGETS = TargetSet("text-only changes (text share > 0)", 0.90, 0.05, 0.03, 0.01)
"""Targets when part of the fact changes are written as text only, on the held-out phrasing."""
COUNTING_PHRASING = "heldout"
"""The phrasing whose figures count; the tuning half is what a system may have been tuned on."""


def target_set(text_share: float) -> TargetSet:
    """The targets that apply to worlds with ``text_share`` of the keyed memories written as text only."""
    return TEXT_TARGETS if text_share > 0 else KEYED_TARGETS


def target_check(results: Sequence[SizeResult]) -> list[dict[str, Any]]:
    """The targets for memevo (``target_set``), checked per vector regime, phrasing and text share.

    hit@1 and stale_top5 at every size; hit@1 falling by at most ``drop``
    from the smallest to the largest size; with text-only changes, the share
    of wrong inferred retirements at every size (met when nothing was
    inferred); and whether the plain store's hit@1 falls over the same
    sizes. ``counts`` is true on the held-out phrasing, the one that counts.
    """
    checks: list[dict[str, Any]] = []
    groups = sorted({(r.regime, r.phrasing, r.text_share) for r in results})
    for regime, phrasing, text_share in groups:
        runs = sorted(
            (
                r
                for r in results
                if (r.regime, r.phrasing, r.text_share) == (regime, phrasing, text_share) and "memevo" in r.metrics
            ),
            key=lambda r: r.n_memories,
        )
        if not runs:
            continue
        targets = target_set(text_share)
        hits = {r.n_memories: r.metrics["memevo"]["hit_at_1"] for r in runs}
        stale = {r.n_memories: r.metrics["memevo"]["stale_top5"] for r in runs}
        check: dict[str, Any] = {
            "vectors": regime,
            "phrasing": phrasing,
            "text_share": text_share,
            "counts": phrasing == COUNTING_PHRASING,
            "targets": dataclasses.asdict(targets),
            "sizes": [r.n_memories for r in runs],
            "memevo_hit_at_1_min": min(hits.values()),
            "hit_at_1_met": all(v >= targets.hit_at_1 for v in hits.values()),
            "memevo_stale_top5_max": max(stale.values()),
            "stale_top5_met": all(v <= targets.stale_top5 for v in stale.values()),
        }
        if targets.wrong_inferred_share is not None:
            shares = [r.details.get("memevo", {}).get("retirements", {}).get("wrong_inferred_share") for r in runs]
            known = [float(v) for v in shares if v is not None]
            check["memevo_wrong_inferred_share_max"] = max(known) if known else None
            check["wrong_inferred_met"] = all(v <= targets.wrong_inferred_share for v in known)
        if len(runs) > 1:
            drop = runs[0].metrics["memevo"]["hit_at_1"] - runs[-1].metrics["memevo"]["hit_at_1"]
            check["memevo_hit_at_1_drop"] = drop
            check["memevo_hit_at_1_first_last"] = [runs[0].metrics["memevo"]["hit_at_1"], hits[runs[-1].n_memories]]
            check["drop_met"] = drop <= targets.drop
            if all("plain" in r.metrics for r in (runs[0], runs[-1])):
                plain_drop = runs[0].metrics["plain"]["hit_at_1"] - runs[-1].metrics["plain"]["hit_at_1"]
                check["plain_hit_at_1_drop"] = plain_drop
                check["plain_hit_at_1_first_last"] = [r.metrics["plain"]["hit_at_1"] for r in (runs[0], runs[-1])]
                check["plain_degrades"] = plain_drop > 0
        checks.append(check)
    return checks


def format_targets(checks: Sequence[dict[str, Any]]) -> str:
    """Which target set applies, then one line per (regime, phrasing, text share): each target, met or missed."""

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    lines = []
    for c in checks:
        t = TargetSet(**c["targets"])
        sizes = "/".join(f"{n:,}" for n in c["sizes"])
        parts = [
            f"hit@1 >= {t.hit_at_1:.2f}: {mark(c['hit_at_1_met'])} (min {c['memevo_hit_at_1_min']:.3f})",
            f"stale <= {t.stale_top5:.0%}: {mark(c['stale_top5_met'])} (max {c['memevo_stale_top5_max']:.1%})",
        ]
        if "drop_met" in c:
            first, last = c["memevo_hit_at_1_first_last"]
            parts.append(f"drop <= {t.drop * 100:.0f} points: {mark(c['drop_met'])} ({first:.3f} -> {last:.3f})")
        if "wrong_inferred_met" in c and t.wrong_inferred_share is not None:
            worst = c["memevo_wrong_inferred_share_max"]
            shown = "none inferred" if worst is None else f"max {worst:.1%}"
            parts.append(f"wrong inferred <= {t.wrong_inferred_share:.0%}: {mark(c['wrong_inferred_met'])} ({shown})")
        if "plain_degrades" in c:
            first, last = c["plain_hit_at_1_first_last"]
            parts.append(f"plain degrades: {'yes' if c['plain_degrades'] else 'NO'} ({first:.3f} -> {last:.3f})")
        weight = "counts" if c["counts"] else "for reference only"
        lines.append(
            f"  {c['vectors']:<9} {c['phrasing']:<7} text share {c['text_share']:g} {sizes} "
            f"[{t.name}; {weight}]: " + "; ".join(parts)
        )
    return "\n".join(lines)


def format_retirements(results: Sequence[SizeResult]) -> str:
    """One line per memevo run: its retirements (OBSOLETE with a superseder), inferred ones and wrong ones."""
    lines = []
    for r in results:
        counts = r.details.get("memevo", {}).get("retirements")
        if not counts:
            continue
        share = counts["wrong_inferred_share"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts["wrong_by_kind"].items())) or "none"
        lines.append(
            f"  {r.n_memories:>9,} {r.regime:<9} {r.phrasing:<7} retirements {counts['retirements']:,}, "
            f"inferred {counts['inferred_retirements']:,}, wrong {counts['wrong_retirements']:,} "
            f"(wrong inferred {counts['wrong_inferred_retirements']:,} = "
            f"{'-' if share is None else f'{share:.1%}'} of inferred; wrong: {kinds})"
        )
    return "\n".join(lines)


def _parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        multiplier = 1
        if part.endswith("k"):
            multiplier, part = 1_000, part[:-1]
        elif part.endswith("m"):
            multiplier, part = 1_000_000, part[:-1]
        sizes.append(int(float(part) * multiplier))
    if any(s < 100 for s in sizes):
        raise argparse.ArgumentTypeError("every size must be at least 100")
    return sizes


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("the text share must be in [0, 1]")
    return value


BOTH = ("tuning", "heldout")
"""What ``--phrasing both`` runs: the tuning half and the one that counts (not the validation half)."""


def phrasings(choice: str) -> tuple[str, ...]:
    """The phrasing halves to run for a ``--phrasing`` choice."""
    return BOTH if choice == "both" else (choice,)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--sizes", type=_parse_sizes, default=_parse_sizes("1000,10000,100000"), help="memories per life (1k, 1M ok)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--phrasing",
        choices=(*PHRASINGS, "both"),
        default="heldout",
        help="phrasing half of the worlds: tuning, heldout (the figure that counts), validation (checked before "
        "spending the held-out run) or both (tuning and heldout)",
    )
    parser.add_argument(
        "--text-share",
        type=_share,
        default=DEFAULT_TEXT_SHARE,
        help="share of fact changes, restatements and late facts written as text only (no fact key)",
    )
    parser.add_argument("--json", type=Path, help="write the rows and run details here")
    parser.add_argument("--rerank", choices=("local", "none"), default="none", help="the sidecar's --rerank")
    parser.add_argument(
        "--real-max", type=int, default=100_000, help="largest size embedded with the real model (above: synthetic)"
    )
    parser.add_argument("--synthetic-all", action="store_true", help="also run synthetic vectors at the real sizes")
    parser.add_argument(
        "--queries", type=int, default=DEFAULT_QUERIES, help="questions per life, spread over the checkpoints"
    )
    parser.add_argument("--checkpoints", type=int, default=DEFAULT_CHECKPOINTS)
    parser.add_argument(
        "--systems", type=lambda s: tuple(x.strip() for x in s.split(",")), default=SYSTEMS, help="subset of systems"
    )
    parser.add_argument(
        "--context-budget",
        type=int,
        default=DEFAULT_CONTEXT_BUDGET,
        help="token budget of build_context when available",
    )
    parser.add_argument("--embed-cache", type=Path, help="cache real embeddings in this directory")
    parser.add_argument(
        "--keep-data",
        type=Path,
        help="keep memevo's data directories here, one per size (<size>-<vectors>[-<phrasing> with both])",
    )
    parser.add_argument(
        "--fit-synthetic",
        action="store_true",
        help="only fit the synthetic vector weights to real embeddings at --sizes (all real), and print them",
    )
    parser.add_argument(
        "--fit-fields",
        type=lambda s: tuple(x.strip() for x in s.split(",")),
        help="with --fit-synthetic: the weights to fit (default all; 'noise' for the size-dependent ones)",
    )
    args = parser.parse_args(argv)
    if args.fit_fields == ("noise",):
        args.fit_fields = NOISE_FIELDS
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; pick from {', '.join(SYSTEMS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; prints the table and writes JSON with ``--json``."""
    args = parse_args(argv)
    SERVE_EXTRA[:] = ["--rerank", args.rerank]
    if args.fit_synthetic:
        worlds = []
        for n in args.sizes:  # fitted on the tuning phrasing: the held-out half stays unseen
            world = generate_world(n, args.seed, n_checkpoints=args.checkpoints, n_queries=args.queries)
            worlds.append((world, real_vectors(world, args.embed_cache)))
        print(fit_synthetic_weights(worlds, fields=args.fit_fields))
        return 0
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    machine = common.machine()
    plan: list[tuple[int, str, str]] = []
    for n in args.sizes:
        for phrasing in phrasings(args.phrasing):
            if n <= args.real_max:
                plan.append((n, "real", phrasing))
                if args.synthetic_all:
                    plan.append((n, "synthetic", phrasing))
            else:
                plan.append((n, "synthetic", phrasing))
    results: list[SizeResult] = []
    for n, regime, phrasing in plan:
        t0 = time.perf_counter()
        result = run_size(n, regime, args, phrasing)
        result.timings_s["total"] = time.perf_counter() - t0
        results.append(result)
        _log(f"  size {n:,} ({regime}, {phrasing}) done in {result.timings_s['total']:.1f} s")
    total_s = time.perf_counter() - started

    print()
    print(f"Text share {args.text_share:g}: that share of keyed memories is written as text only (h@1 columns:")
    print("hit@1 of fact questions by how the asked fact last changed: keyed, text with entity, text naming it).")
    print(format_table(results))
    checks = target_check(results)
    print()
    applies = target_set(args.text_share)
    print(
        f"Targets for memevo that apply: {applies.name}: hit@1 >= {applies.hit_at_1:.2f} and stale top5 <= "
        f"{applies.stale_top5:.0%} at every size, hit@1 drop <= {applies.drop * 100:.0f} points "
        "from the smallest to the largest size"
        + (
            f", wrong inferred retirements <= {applies.wrong_inferred_share:.0%} of inferred ones"
            if applies.wrong_inferred_share is not None
            else ""
        )
        + f". The {COUNTING_PHRASING} phrasing is the one that counts:"
    )
    print(format_targets(checks))
    retirements = format_retirements(results)
    if retirements:
        print()
        print("memevo retirements (OBSOLETE with a superseder; inferred: not both written with a fact key; wrong:")
        print("not two versions of one fact or of one task's strategy; the client exposes no possibly-outdated mark):")
        print(retirements)
    print()
    print("Vectors: 'real' = all-MiniLM-L6-v2 (int8 ONNX, the sidecar's bundled model) embeddings of the texts;")
    print("'synthetic' = structured random vectors (world.synthetic_vectors), sidecar with --embedder none.")
    print(f"Tokens are estimated as ceil(chars / {CHARS_PER_TOKEN}). memevo context: ", end="")
    print("; ".join(sorted({r.details.get("memevo", {}).get("build_context", "-") for r in results})))
    print()
    print("Vector structure: share of questions where a group's best memory outranks the answer by cosine")
    for r in results:
        for kind, summary in r.details["similarity_profile"].items():
            cells = ", ".join(f"{k.removeprefix('beats:')} {v:.2f}" for k, v in summary.items() if k != "questions")
            print(f"  {r.n_memories:>9,} {r.regime:<9} {r.phrasing:<7} {kind:<8} {cells}")
    print()
    print("Times (s):")
    for r in results:
        timing = ", ".join(f"{k} {v:.1f}" for k, v in r.timings_s.items())
        print(f"  {r.n_memories:>9,} {r.regime:<9} {r.phrasing:<7} {timing}")
    print(f"Total: {total_s:.1f} s on {machine['cores']} cores ({machine['cpu']}), load {machine['load_average']}")

    if args.json is not None:
        rows = [
            {
                "benchmark": BENCHMARK,
                "system": system,
                "n_memories": r.n_memories,
                "metric": metric,
                "value": None if math.isnan(value) else round(value, 6),
                "n_queries": r.counts[system][metric],
                "vectors": r.regime,
                "phrasing": r.phrasing,
                "text_share": r.text_share,
            }
            for r in results
            for system, values in r.metrics.items()
            for metric, value in values.items()
        ]
        document = {
            "rows": rows,
            "command": common.command_line(argv),
            "date": date,
            "machine": machine,
            "versions": common.versions(),
            "settings": {
                "seed": args.seed,
                "sizes": args.sizes,
                "phrasings": list(phrasings(args.phrasing)),
                "text_share": args.text_share,
                "real_max": args.real_max,
                "queries": args.queries,
                "checkpoints": args.checkpoints,
                "top_k": TOP_K,
                "exploration": EXPLORATION,
                "generative_agents_decay_per_hour": GA_DECAY_PER_HOUR,
                "governance_sweeps_per_life": GOVERN_FRACTION,
                "token_estimate": f"ceil(chars / {CHARS_PER_TOKEN})",
                "context_budget": args.context_budget,
            },
            "targets": checks,
            "runs": [
                {
                    "n_memories": r.n_memories,
                    "vectors": r.regime,
                    "phrasing": r.phrasing,
                    "text_share": r.text_share,
                    "timings_s": r.timings_s,
                    "details": r.details,
                }
                for r in results
            ],
            "total_s": total_s,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        _log(f"wrote {args.json}")
    return 0


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_last_progress = [0.0]


def _progress(message: str) -> None:
    """A progress line on stderr, at most every 5 s."""
    now = time.monotonic()
    if now - _last_progress[0] >= 5.0:
        _last_progress[0] = now
        _log(message)


if __name__ == "__main__":
    raise SystemExit(main())
