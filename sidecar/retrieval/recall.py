"""Recall: candidates from the ANN index (or an exact scan when filters are selective), filtered by state.

Standard (CURRENT) recall never returns OBSOLETE, EVICTED or CONSOLIDATED
memories and returns ARCHIVED ones only when asked. Candidates from the
vector index are joined by the best word matches (BM25), then re-ranked by
match and trust (the formula is documented on RecallRequest in the proto).
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memevo.kernels.cosine import rows_dot
from memevo.kernels.lexical import top_indices
from memevo.kernels.value import Scores
from memevo.v1 import memory_pb2, memory_service_pb2

from ..domain import Hit, RecallQuery, now_s
from ..engine import Engine
from ..perception.conflicts import SLOT_KINDS
from ..perception.slots import type_of
from ..store.columns import (
    FIELD_SEPARATOR,
    NO_CODE,
    STATE_ACTIVE,
    STATE_ARCHIVED,
    STATE_CONSOLIDATED,
    STATE_OBSOLETE,
    MemoryColumns,
    field_attribute,
    live_mask,
)
from ..store.entity_vectors import EntityVectors, read_unit_vectors
from ..store.rocks import CF_MEMORIES, u64_key
from ..store.vector_digests import ids_with_vector
from ..store.vector_index import Neighbours
from .answer_type import WHEN_TYPES, ValueType, expected_types
from .attributes import EXAMPLES, EXAMPLES_MIN_ENTITIES, AttributeExamples, AttributeMatrices, AttributeMeanings
from .hints import hint_for
from .intent import asks_how
from .lexical import tokenize
from .rank_kernel import CONSTANTS as _RANK_CONSTANT_NAMES
from .rank_kernel import rank_pool

IdArray = npt.NDArray[np.int64]
MAX_OVERFETCH_ROUNDS = 4
DEMOTED_FACTOR = 0.5
"""A strategy demoted by a better one ranks as if half as similar."""
INCONSISTENCY_PENALTY = 0.5
"""Share of the score a fully contradicted memory (inconsistency 1) loses."""
LEXICAL_WEIGHT = 0.3
"""Share of the word-match (BM25) signal in a candidate's match when the query has text."""
TRUST_FLOOR = 0.75
"""Share of the score a candidate keeps whatever its trust: trust reorders close matches, not far ones."""
IMPORTANCE_WEIGHT = 0.2
"""Share of the score the client's importance rating moves: a 1 keeps 82 %, a 10 all of it."""
UNRATED_IMPORTANCE = 5.5
"""Rating assumed for a memory written without one (importance 0): mid-scale, so an unrated store ranks as before."""
FIELD_WEIGHT = 0.15
"""Added to the match times the field share: a memory whose structured fields name every query word gains 0.15.

The entity, fact attribute and task signature are what the client declared the memory to be about; a query
word that names one of them is stronger evidence than the same word in free text, where BM25 already counts it.
"""
ENTITY_MISMATCH_WEIGHT = 0.6
"""A candidate's match loses this times how much less of its entity's name the query says than of the best one's.

"What's the best way to reach Nadia Yilmaz?" is about Nadia Yilmaz: "The best way to reach Nadia Dubois is a
Loom video." shares more words with it than the answer does, and an embedding reads the two sentences alike.
Only entities of the same type (the part before ':' in "user:nadia-yilmaz") are compared: a project's memory
that a question about a person reaches ("What does Nadia lead?") is about something else, not someone else.
Services named alike ("Which version of the warehouse store is running?" against "Production now runs v2.8.2 of
warehouse-indexer.") differ by half a name: at 0.2 a memory worded like the question still won on that half.
Measured over five generated worlds (RESULTS.md, evolving world, thirteenth session): 0.2 -> 0.6 gained 3-8
questions per thousand at 10k in every one, 1k unchanged; 1.0 gave no more.
"""
ATTRIBUTE_WEIGHT = 0.3
"""Added to the match times the cosine (floored at 0) between the query and the embedded name of the fact attribute.

The meaning of what the client said a fact is about, for questions that paraphrase it ("What should I order for
Zane at the team lunch?" for ``diet``; see ``attributes.py``). Only when the sidecar embeds text (the names need
its model, in the query's vector space). Twice the field weight: a cosine to a two-word name runs 0.2 to 0.7
where the field share runs 0 to 1.
"""
ATTRIBUTE_MISMATCH_WEIGHT = 2.0
"""A fact's match loses this times how much less its attribute means to the query than the best candidate's does.

An attribute's meaning here is the mean of the query's cosines to its embedded name and to its facts' mean
direction (``attributes.py``; the facts' direction alone without an embedder), floored at 0, each reading compared
with the best candidate's on its own scale (:func:`_meaning_gaps`). Among one entity's facts, whose texts share its
name and whose BM25 and cosine often favour the wrong attribute ("Olga Lopez moved to Kate for editing." for "Where
is Olga Lopez based?" against "Olga works from Athens."; "What is Jana working toward right now?" against Jana's
working hours), this decides; a gap of 0.15 in meaning, common between the asked attribute and the next, costs 30 %
of the match. Measured 0.75 -> 2.0 (seventeenth session, RESULTS.md): tuning half +0.9 to +1.7 points of hit@1 at
10k on two seeds, level at 1k; then the held-out half, run once: +0.3 to +1.0 in each of seeds 7-9 at 1k and 10k.
The lift above stays on the name: every attribute of a domain is close to a question by its facts' direction (0.3 to
0.6), so that level says little about facts against strategies and remarks, and lifting facts by it cost strategy
questions 5 points.
"""
READING_MARGIN = 0.05
"""How much nearer one attribute's direction than the next a statement without an attribute must lie to be read as it
(see ``Recall._read_attributes``)."""
READING_MIN_ATTRIBUTES = 3
"""Attributes of a type with a direction before statements of that type are read: two are opposite once centred."""
KNOWN_REFRESH_GROWTH = 1.25
"""A namespace's known attributes are scanned again once it holds this many times the memories it held."""
ATTRIBUTE_SCAN_FIRST = 4_096
"""Drawing an attribute's examples scans the namespace's newest ids in chunks, this many first, then 4x each time."""
VALUE_TYPE_MISMATCH_WEIGHT = 0.2
"""Share of the match a memory loses when its answer has a shape the question cannot want (see ``answer_type.py``).

"Who should I page if the scheduler goes down?" is not answered by the scheduler's URL, nor "When is Quill due?"
by its budget. Applied only when some candidate holds a value of a wanted shape: a question whose answer the
candidates' values cannot show (no date among them for "When did Alice join?") judges none of them. Memories
without a fact value are judged the same way by "when" questions, on whether their text tells a time.
"""
FIELD_PREFIX_MIN = 4
"""A query word names a field word when one is a prefix of the other and the shorter has this many letters."""
EPISODE_FACTOR = 0.9
"""Share of the score an episode keeps: it records what happened, facts, preferences and strategies what holds."""
PROCEDURE_BOOST = 1.15
"""A strategy's match is multiplied by this when the query asks how to do something (see ``intent.asks_how``).

A strategy is the agent's lesson about a task; a fact about the task's subject ("billing runs v2.3")
names the same service with fewer other words, so it is often closer to "How do I deploy billing?"
by cosine and by BM25. The wording says which kind of memory is wanted; this prior says it a little
more strongly than the episode prior above, since the question asked for it outright.
"""
REPLACED_LESSON_FACTOR = 0.85
"""A strategy's match is multiplied by this when a newer strategy for its task leads (see :func:`prefer_newer_lessons`).

Enough to put the leader first among its task's strategies whatever their outcome records (their trust differs by
at most ~15 % of the score), not enough to push the older ones under unrelated memories.
"""
RERANK_DEPTH = 8
"""With a reranker (``memevo serve --rerank local``): the best this many candidates of a text Recall are read
together with the question and ordered by P(answers); a pair costs a few milliseconds of CPU."""
STATE_KINDS = (memory_pb2.MEMORY_KIND_FACT, memory_pb2.MEMORY_KIND_PREFERENCE)
"""Kinds that state what holds now, so that of two answers the one that became true later is the likelier current
one; an event or a lesson is not made current by being newer (perception reads episodes for slots too, but an
answer's newest-first order must not put "Emre reacted with :tada:" above "Emre is now SRE lead")."""
EPISODES_BY_JUDGE = True
"""Whether a newer event about the best answer's subject can come first too (agents store many changes as events:
"Noor emailed: Lumo Labs moved up to the Scale plan"): where the pair judge says it replaces the best answer and,
about a named entity, the reranker finds it answers the question at least as well. The second condition keeps out
remarks naming the entity that both models misread ("Note to self: thank Emre for the careful review comments"
against "Emre switched roles and is now serving as SRE lead": judge 0.75, reranker 0.99): with the judge alone the
step gained 17 points of prose updates and cost 6 of the generated world on the validation splits; with both, +11
and -1.3; asked of events about no entity too, it gave back 4.5 of the 11 and nothing of the world (RESULTS,
thirty-fourth session). With the judge retrained on remarks moved between subjects, dropping the second condition
still trades 6.6 points of prose for 3.7 of the world (RESULTS, thirty-fifth session)."""
REPLACES_AT = 0.5
"""A newer answer the pair judge gives at least this P(replaces) counts as the best answer's newer version (the
judge's decision boundary: more likely than not)."""
RERANK_POOL_FACTOR = 4
RERANK_POOL_MIN = 40
"""Candidates re-ranked with their records: max(k * factor, min)."""
GRAPH_READ_LIMIT = 256
"""Up to this many vectors are read from the HNSW graph (RAM); more come from RocksDB in one read."""
SHORTLIST_FACTOR = 4
"""Word matches filtered first, as a multiple of the pool (see :func:`_best_passing`)."""
HELPER_THREADS = 2
"""Threads that run recalls' vector searches beside their word searches (see :class:`_Beside`); 0: in the caller."""
BESIDE_MIN_POSTINGS = 30_000
"""The vector search runs beside the word search only when the query's words hold this many postings together.

A shorter word search (~5 ns a posting, so under ~0.15 ms) gains less from the overlap than the hand-off to the
helper and back costs: at 100k memories the overlap made a structured store's Recall 0.15 ms slower.
"""

_GRAPH_ROUNDING: dict[str, Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]]] = {
    "f16": lambda rows: rows.astype(np.float16).astype(np.float32),
    "f32": lambda rows: rows,
}
"""Unit rows as the graph holds them, per ``IndexConfig.dtype``: numpy's half rounds as usearch's does (checked on
100k stored vectors; tests/unit/retrieval/test_recall_entity_scan.py). Other types are read from the graph."""


class _Beside:
    """Runs a task on a helper thread while the caller does other work; in the caller when every helper is busy.

    A recall's ANN search and its BM25 search are independent and both release the GIL for their heavy part
    (usearch's C++, a Numba kernel), so on two cores one caller's recall takes about the longer of the two
    instead of their sum: at a million memories the pair took 2.2 ms in turn, 1.5 ms side by side, and Recall's
    p50 fell by a fifth (RESULTS.md). Under concurrent calls the helpers are taken and the work runs in the
    caller as before: never a queue, never a wait for a helper.
    """

    def __init__(self, threads: int) -> None:
        self._free = threading.Semaphore(threads)
        self._pool = ThreadPoolExecutor(max_workers=max(threads, 1), thread_name_prefix="memevo-recall")

    def start(self, task: Callable[[], Any]) -> Callable[[], Any]:
        """Start ``task``; returns the function that waits for its result (and raises what it raised)."""
        if not self._free.acquire(blocking=False):
            result = task()
            return lambda: result

        def run() -> Any:
            try:
                return task()
            finally:
                self._free.release()

        return self._pool.submit(run).result


_BESIDE = _Beside(HELPER_THREADS)


def _fresh_helpers_after_fork() -> None:
    # A forked child inherits the pool's bookkeeping but not its threads: its tasks would wait forever.
    global _BESIDE
    _BESIDE = _Beside(HELPER_THREADS)


os.register_at_fork(after_in_child=_fresh_helpers_after_fork)


@dataclass(frozen=True)
class _Filter:
    """A recall query compiled against the columns: codes instead of strings."""

    states: npt.NDArray[np.bool_]
    """Indexed by state code: whether that state passes (a table lookup is cheaper than ``np.isin``)."""
    namespace: int
    kinds: npt.NDArray[np.bool_] | None
    """Indexed by kind code, or None for every kind."""
    entity: int | None
    tags: frozenset[str]
    valid_from_after_s: float
    valid_from_before_s: float
    as_of_s: float | None

    @property
    def narrows(self) -> bool:
        """Whether anything beyond state and namespace restricts the candidates."""
        return bool(
            self.kinds is not None
            or self.entity is not None
            or self.tags
            or self.as_of_s is not None
            or self.valid_from_after_s > -math.inf
            or self.valid_from_before_s < math.inf
        )


def _compile(query: RecallQuery, columns: MemoryColumns) -> _Filter | None:
    """None when nothing can match (an unknown namespace or entity)."""
    namespace = columns.namespaces.lookup(query.namespace)
    if namespace == NO_CODE:
        return None
    entity: int | None = None
    if query.entity:
        entity = columns.entities.lookup(query.entity)
        if entity == NO_CODE:
            return None
    if query.mode == memory_service_pb2.RECALL_MODE_HISTORY:
        states = [STATE_ACTIVE, STATE_ARCHIVED, STATE_CONSOLIDATED, STATE_OBSOLETE]
    elif query.as_of_s is not None:
        # "As of" asks for the versions valid then, which may be obsolete now.
        states = [STATE_ACTIVE, STATE_ARCHIVED, STATE_OBSOLETE]
    else:
        states = [STATE_ACTIVE, STATE_ARCHIVED] if query.include_archived else [STATE_ACTIVE]
    return _Filter(
        states=_table(states),
        namespace=namespace,
        kinds=_table(query.kinds) if query.kinds else None,
        entity=entity,
        tags=query.tags,
        valid_from_after_s=query.valid_from_after_s,
        valid_from_before_s=query.valid_from_before_s,
        as_of_s=query.as_of_s,
    )


def _table(codes: Iterable[int]) -> npt.NDArray[np.bool_]:
    """A lookup table over uint8 codes: True for ``codes``."""
    table = np.zeros(256, dtype=bool)
    table[np.fromiter(codes, dtype=np.int64)] = True
    return table


_SLOT_KIND_TABLE = _table(int(kind) for kind in SLOT_KINDS)
"""Kinds of memory that state an attribute (perception's ``SLOT_KINDS``), as a lookup table."""


def _mask(columns: MemoryColumns, ids: IdArray, flt: _Filter) -> npt.NDArray[np.bool_]:
    """Which ids pass the filter (ids must be < columns.size)."""
    keep = flt.states[columns.state[ids]]
    keep &= columns.namespace[ids] == flt.namespace
    if flt.kinds is not None:
        keep &= flt.kinds[columns.kind[ids]]
    if flt.entity is not None:
        keep &= columns.entity[ids] == flt.entity
    if flt.valid_from_after_s > -math.inf or flt.valid_from_before_s < math.inf:
        valid_from = columns.valid_from[ids]
        keep &= (valid_from >= flt.valid_from_after_s) & (valid_from < flt.valid_from_before_s)
    if flt.as_of_s is not None:
        valid_from = columns.valid_from[ids]
        valid_to = columns.valid_to[ids]
        keep &= (valid_from <= flt.as_of_s) & (np.isnan(valid_to) | (valid_to > flt.as_of_s))
    if flt.tags:
        tagged = columns.tags
        for position in np.flatnonzero(keep):
            if not flt.tags <= tagged.get(int(ids[position]), frozenset()):
                keep[position] = False
    return keep


SAME_VECTOR_COMPARED = 16
"""Memories sharing the query's vector up to which :func:`_with_same_vector` compares ids pairwise (usually one)."""


def _with_same_vector(
    ids: IdArray, sims: npt.NDArray[np.float32], same: IdArray
) -> tuple[IdArray, npt.NDArray[np.float32]]:
    """The graph's candidates with ``same`` (memories stored with exactly the query's vector) at similarity 1.0:
    added where the graph missed them, raised where it rounded (its rows are half precision)."""
    if same.size == 0:
        return ids, sims
    if same.size <= SAME_VECTOR_COMPARED:
        equal = ids[None, :] == same[:, None]  # a few ids against a few hundred: far quicker than np.isin's sort
        known, found = equal.any(axis=0), equal.any(axis=1)
    else:
        known, found = np.isin(ids, same), np.isin(same, ids)
    missed = same[~found]
    sims = np.where(known, np.float32(1.0), sims)
    return np.concatenate([ids, missed]), np.concatenate([sims, np.ones(missed.size, dtype=np.float32)])


def _best_passing(
    columns: MemoryColumns, ids: IdArray, scores: npt.NDArray[np.float32], flt: _Filter, pool: int
) -> tuple[IdArray, npt.NDArray[np.float32]]:
    """The ``pool`` best-scored ids that pass the filter (all passing ids when fewer), unordered.

    A common word matches a large share of a namespace: filtering every match and then selecting would
    touch them all. Most matches pass, so the best few times ``pool`` are filtered first; only when too
    few of those pass is the whole list filtered. Either way the result is the same set.
    """
    size = columns.size  # the word index may hold ids a write has not yet put in the columns: they fail
    if ids.size > SHORTLIST_FACTOR * pool:
        top = top_indices(scores, SHORTLIST_FACTOR * pool)
        top = top[ids[top] < size]
        keep = _mask(columns, ids[top], flt)
        if int(keep.sum()) >= pool:
            ids, scores = ids[top[keep]], scores[top[keep]]
            top = top_indices(scores, pool)
            return ids[top], scores[top]
    inside = ids < size
    ids, scores = ids[inside], scores[inside]
    keep = _mask(columns, ids, flt)
    ids, scores = ids[keep], scores[keep]
    if ids.size > pool:
        top = top_indices(scores, pool)
        ids, scores = ids[top], scores[top]
    return ids, scores


def _meaning_gaps(*readings: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """How much less each attribute means to the query than the best one, from readings on different scales.

    Per reading (one value per attribute, NaN where the attribute has none), floored at 0: each attribute's deficit
    to that reading's best. An attribute's deficit is the mean of its deficits over the readings it has, so one
    without examples (fewer than three entities' facts) is judged by its name against the others' names, not
    against their examples, whose cosines run higher; the gap is the deficit above the smallest. NaN with no reading.
    """
    deficits = []
    for reading in readings:
        floored = np.maximum(reading, 0.0)
        known = ~np.isnan(floored)
        deficits.append(floored[known].max() - floored if known.any() else floored)
    stacked = np.vstack(deficits)
    counted = (~np.isnan(stacked)).sum(axis=0)
    deficit = np.where(counted > 0, np.nansum(stacked, axis=0) / np.maximum(counted, 1), np.nan)
    known = ~np.isnan(deficit)
    return np.asarray(deficit - deficit[known].min(), dtype=np.float64) if known.any() else deficit


def _with_attribute_evidence(
    match: npt.NDArray[np.float64], named: npt.NDArray[np.float64], gap: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``match`` with the attribute evidence: ``ATTRIBUTE_WEIGHT`` and ``ATTRIBUTE_MISMATCH_WEIGHT``.

    Per candidate, NaN for a memory without a fact attribute or without that reading (left alone): ``named`` the
    cosine to the attribute's name floored at 0, ``gap`` how much less its attribute means than the best one's
    (:func:`_meaning_gaps`).
    """
    lifted = match + ATTRIBUTE_WEIGHT * np.where(np.isnan(named), 0.0, named)
    return np.asarray(lifted * np.where(np.isnan(gap), 1.0, 1.0 - ATTRIBUTE_MISMATCH_WEIGHT * gap), dtype=np.float64)


def _value_type_factor(
    question: str, shapes: npt.NDArray[np.uint8], dated: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Per candidate, 1 - VALUE_TYPE_MISMATCH_WEIGHT when its answer has a shape ``question`` cannot want, else 1.

    A fact is judged by its value's shape (``shapes``), and only when some candidate's value has a wanted one. A
    memory without a fact value is judged only by a "when" question, by whether its text tells a time (``dated``),
    and only when some other such memory's does: facts are weighed against facts, the rest against the rest.
    """
    factor = np.ones(shapes.size, dtype=np.float64)
    expected = expected_types(question)
    if expected is None:
        return factor
    judged = shapes != ValueType.NONE
    fits = _table(int(shape) for shape in expected)[shapes]
    if (judged & fits).any():
        factor[judged & ~fits] = 1.0 - VALUE_TYPE_MISMATCH_WEIGHT
    if expected <= WHEN_TYPES and (~judged & dated).any():
        factor[~judged & ~dated] = 1.0 - VALUE_TYPE_MISMATCH_WEIGHT
    return factor


_READ_SHIFT = 32
"""A memory's reading is kept as (the reading's generation << _READ_SHIFT) | (1 + index in its ``known``), 0 unread."""
_READ_INDEX = (1 << _READ_SHIFT) - 1


@dataclass(frozen=True)
class _Reading:
    """How one namespace reads one entity type's statements without an attribute (``Recaller._reading``)."""

    size: int
    """The namespace's size when the directions were drawn."""
    known: tuple[str, ...]
    """The type's attributes known then."""
    directions: npt.NDArray[np.float32]
    """One unit row per attribute in ``rows``."""
    centre: npt.NDArray[np.float32]
    """Where the directions start (the examples' common mean; zero for names)."""
    rows: IdArray
    """Per direction, its attribute's index in ``known``."""
    generation: int
    """Tells this reading's verdicts in ``Recaller._read_as`` from an older reading's (never 0)."""


class Recaller:
    """Runs recall queries against one engine's columns, index and store."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._field_words: dict[int, frozenset[str]] = {}
        """Words of each interned field combination (columns.field_sets): few, and they never change."""
        self._entity_names: dict[int, tuple[str, frozenset[str]]] = {}
        """Type and name words of each interned entity (columns.entities), cached likewise."""
        self._attributes: dict[int, str] = {}
        """Fact attribute of each interned field combination, cached likewise."""
        self._examples = AttributeExamples(self._attribute_sample)
        """Mean directions of each attribute's facts, per namespace."""
        self._matrices = AttributeMatrices(None, self._examples, engine.dimension)
        """Per (namespace, entity type): its attributes' names and examples as one matrix (see ``_meanings``)."""
        self._meanings = AttributeMeanings(engine.embed) if engine.embedder is not None else None
        self._codes_lock = threading.Lock()
        self._codes_by_attribute: dict[str, list[int]] = {}
        """Interned field combinations of each fact attribute (columns.field_sets), filled as combinations appear."""
        self._codes_scanned = 0
        self._readings: dict[tuple[int, str], _Reading] = {}
        """Per (namespace, entity type): how its statements without an attribute are read (``_reading``)."""
        self._generations = itertools.count(1)
        self._read_as = np.zeros(0, dtype=np.int64)
        """Per memory id, what its namespace's reading of its type made of it (``_READ_SHIFT``): a memory's vector
        never changes, so a statement is read once per reading."""
        self._entity_types = np.zeros(1, dtype=np.int64)
        """Per interned entity code + 1, the index in ``_type_names`` of its type; -1 not yet looked up (0: none)."""
        self._known: dict[int, tuple[int, dict[str, tuple[str, ...]]]] = {}
        """Per namespace: its size when scanned, and its fact attributes per entity type (``_known_attributes``)."""
        self._type_names: list[str] = [""]
        """Entity types met so far ("user" of "user:nadia-yilmaz"); "" for none. Few, and never forgotten."""
        self._type_index: dict[str, int] = {"": 0}
        self._entity_vectors = EntityVectors(
            lambda ids: read_unit_vectors(engine.store, ids, engine.dimension),
            engine.dimension,
            engine.config.index.entity_vectors_mib << 20,
        )
        """Each entity's vectors as one block, for entity-filtered recall (see ``IndexConfig.entity_scan_limit``)."""

    @property
    def _meanings(self) -> AttributeMeanings | None:
        """Vectors of attribute names; None without an embedder (the names must be in the query's vector space)."""
        return self._matrices.meanings

    @_meanings.setter
    def _meanings(self, meanings: AttributeMeanings | None) -> None:
        # The matrices hold the names: other names (a test lends some to an engine without an embedder) start afresh.
        self._matrices = AttributeMatrices(meanings, self._examples, self.engine.dimension)

    def recall(self, query: RecallQuery) -> list[Hit]:
        """The best ``query.k`` memories passing the filters, best first (ranking: see RecallRequest)."""
        columns = self.engine.columns
        flt = _compile(query, columns)
        if flt is None:
            return []
        pool = max(query.k * RERANK_POOL_FACTOR, RERANK_POOL_MIN)
        terms = list(dict.fromkeys(tokenize(query.text))) if query.text else []
        if query.text:
            # A long word search runs in the caller with the vector search beside it, so the join rarely waits
            # for the helper; the query is tokenized first: pure Python, which the helper's start would hold up.
            long_search = self.engine.lexical.postings(query.namespace, terms) >= BESIDE_MIN_POSTINGS
            nearest = _BESIDE.start(lambda: self._candidates(query, flt)) if long_search else None
            words = self._word_matches(query, terms, flt, pool)
            ids, sims = nearest() if nearest is not None else self._candidates(query, flt)
            ids, sims, lexical = self._fuse_lexical(query, ids, sims, *words)
        else:
            ids, sims = self._candidates(query, flt)
            lexical = np.zeros(ids.size, dtype=np.float32)
        if ids.size == 0:
            return []
        lexical_norm = lexical / lexical.max() if lexical.size and lexical.max() > 0 else lexical
        weight = LEXICAL_WEIGHT if query.text else 0.0
        match = (1.0 - weight) * np.maximum(sims, 0.0) + weight * lexical_norm
        fields = np.zeros(ids.size, dtype=np.float64)
        if query.text:
            fields = self._field_match(query, terms, columns.fields[ids])
            match = match + FIELD_WEIGHT * fields
            named, gap = self._attribute_evidence(query, flt.namespace, ids, match, pool)
            match = _with_attribute_evidence(match, named, gap)
            match = match * self._entity_factor(query, terms, columns.entity[ids])
            match = match * _value_type_factor(query.text, columns.value_type[ids], columns.tells_time[ids])
        match = share_task_match(match, columns.signature[ids])
        match = prefer_newer_lessons(
            match,
            ids,
            columns.signature[ids],
            columns.successes[ids],
            columns.failures[ids],
            self.engine.policy.strategy_upgrade_probability,
        )
        if query.text and asks_how(query.text):
            # Inside the match, so that replay, which re-ranks logged matches, ranks as recall did.
            match = np.where(columns.kind[ids] == memory_pb2.MEMORY_KIND_STRATEGY, match * PROCEDURE_BOOST, match)
        order = np.argsort(-match, kind="stable")[:pool]
        ids, sims, match = ids[order], sims[order], match[order]
        word_share, fields = lexical_norm[order], fields[order]
        # Rank the pool from the hot columns and read only the records returned: reading, parsing and
        # annotating every pool member (4 x k of them) was most of a recall's time.
        scored = self.engine.score_rows(ids)
        factor, trust, scores, ranked, demoted = self._rank(ids, match, scored)
        if query.diversity > 0.0 and ranked.size > 1:
            ranked = ranked[self._diversify(ids[ranked], scores[ranked], query)]
        if query.text and self.engine.reranker is not None and ranked.size > 1:
            ranked = self._rerank(query, ids, ranked)
        ranked = self._doubted_after_doubters(ids, ranked, max(query.k, RERANK_DEPTH))
        terms_of = _Breakdowns(word_share, fields, match, trust, factor)
        hits = self._read_hits(query, ids, sims, scores, ranked, scored, terms_of)
        returned = np.asarray([h.memory.id for h in hits], dtype=np.int64)
        self.engine.note_pool(ids, match, columns.inconsistency[ids], demoted)
        if not query.peek:
            columns.record_access(returned, now_s(), query.turn)
        return hits

    def _rank(
        self, ids: IdArray, match: npt.NDArray[np.float64], scored: Scores
    ) -> tuple[
        npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], IdArray, npt.NDArray[np.bool_]
    ]:
        """Per candidate its factor (see :func:`rank_factors`), trust and score; the ranked order; which rank demoted.

        One compiled call (``rank_kernel``) gives the numbers :func:`rank_factors` and :func:`trust_of` give.
        """
        columns = self.engine.columns
        kind = columns.kind[ids]
        strategies = np.flatnonzero(kind == memory_pb2.MEMORY_KIND_STRATEGY)
        # A memory a newer one may replace (a soft conflict) ranks as a demoted strategy: below its successor.
        demoted = columns.doubted[ids]
        # Demotion lives on the record, and only strategies are demoted: read just those.
        if strategies.size:
            raws = self.engine.store.multi_get(CF_MEMORIES, [u64_key(int(i)) for i in ids[strategies]])
            for position, raw in zip(strategies.tolist(), raws, strict=True):
                if raw is not None and memory_pb2.Memory.FromString(raw).demoted_by != 0:
                    demoted[position] = True
        factor, trust, scores, ranked = rank_pool(
            np.ascontiguousarray(match, dtype=np.float64),
            np.ascontiguousarray(scored.accuracy, dtype=np.float32),
            np.ascontiguousarray(scored.relevance, dtype=np.float32),
            columns.inconsistency[ids],
            columns.importance[ids],
            kind,
            demoted,
            columns.signature[ids],
            # Read at each call, as rank_factors reads them: a tuning script may set them on this module.
            np.asarray([globals()[name] for name in _RANK_CONSTANT_NAMES], dtype=np.float64),
            memory_pb2.MEMORY_KIND_STRATEGY,
            memory_pb2.MEMORY_KIND_EPISODE,
        )
        return factor, trust, scores, ranked, demoted

    def _rerank(self, query: RecallQuery, ids: IdArray, ranked: IdArray) -> IdArray:
        """``ranked`` with those of its first RERANK_DEPTH the reranker says answer the question moved ahead.

        The reranker decides only whether a statement answers (P >= 0.5); answers keep the formula's order, but
        of the statements of state (facts, preferences) about one subject that answer one question, the one that
        became true last is the likeliest to hold now (an update perception did not read is still a newer
        answer): in CURRENT mode those about the subject of the best of them (its entity, or none) trade places
        so that the newest in world time comes first, leaving out those whose fact key or inferred attribute names
        another attribute than the first known among them. Lessons and events are not made current by being newer.
        """
        reranker = self.engine.reranker
        assert reranker is not None
        top = ranked[:RERANK_DEPTH]
        raws = self.engine.store.multi_get(CF_MEMORIES, [u64_key(int(i)) for i in ids[top]])
        records = [memory_pb2.Memory.FromString(raw) if raw is not None else memory_pb2.Memory() for raw in raws]
        texts = [record.content for record in records]
        said = [record.fact.attribute or record.inferred.attribute for record in records]
        relevance = np.asarray(reranker.relevance([query.text] * len(texts), texts), dtype=np.float64)
        answers = relevance >= 0.5
        first = top[answers]
        if query.mode == memory_service_pb2.RECALL_MODE_CURRENT and first.size > 1:
            at = np.flatnonzero(answers).tolist()
            first = first[
                self._newest_versions_first(
                    ids[first], [texts[p] for p in at], [said[p] for p in at], relevance[answers]
                )
            ]
        return np.concatenate([first, top[~answers], ranked[RERANK_DEPTH:]])

    def _newest_versions_first(
        self,
        answer_ids: IdArray,
        texts: list[str],
        said: list[str],
        relevance: npt.NDArray[np.float64],
    ) -> IdArray:
        """The order of ``answer_ids`` (best first) that puts the versions of the best statement of state newest first.

        Its versions: the statements of state (facts, preferences) about its entity, less those whose fact key or
        inferred attribute names another attribute than the first known among them (structured evidence outranks
        recency); and, where structure cannot say, any newer answer the pair judge says replaces it (P >= REPLACES_AT):
        when the best names no entity, a newer statement about none (no entity is no known subject: "when does the
        Big Bang Theory season end?" is no newer version of the Game of Thrones one); with EPISODES_BY_JUDGE, an event
        about the same subject too ("Noor emailed: Lumo Labs moved up to the Scale plan"), about the best's entity only
        if it answers no worse than the best (``relevance``, the reranker's P(answers) of each).
        """
        columns = self.engine.columns
        order = np.arange(answer_ids.size)
        kinds = columns.kind[answer_ids]
        states = np.flatnonzero(np.isin(kinds, STATE_KINDS))
        if states.size == 0:
            return order
        lead = int(states[0])
        entity = columns.entity[answer_ids]
        became_true = np.nan_to_num(columns.valid_from[answer_ids], nan=-np.inf)
        events = (kinds == memory_pb2.MEMORY_KIND_EPISODE) & EPISODES_BY_JUDGE
        newer = became_true > became_true[lead]
        if entity[lead] != NO_CODE:
            subject = states[entity[states] == entity[lead]]
            of_subject = [said[position] for position in subject.tolist()]
            asked = next((attribute for attribute in of_subject if attribute), "")
            subject = subject[[attribute in ("", asked) for attribute in of_subject]]
            # Every remark naming the entity reaches the pool by its name: of those, only one that answers no
            # worse than the best is asked about (judge and reranker both misread some remarks as changes).
            undecided = np.flatnonzero((entity == entity[lead]) & events & newer & (relevance >= relevance[lead]))
        else:
            subject = np.asarray([lead])
            undecided = np.flatnonzero((entity == NO_CODE) & (np.isin(kinds, STATE_KINDS) | events) & newer)
        judge = self.engine.recall_judge
        if undecided.size and judge is not None:
            p = np.asarray(judge.replaces([texts[lead]] * undecided.size, [texts[i] for i in undecided.tolist()]))
            subject = np.sort(np.concatenate([subject, undecided[p >= REPLACES_AT]]))
        order[subject] = subject[np.argsort(-became_true[subject], kind="stable")]
        return order

    def _doubted_after_doubters(self, ids: IdArray, ranked: IdArray, depth: int) -> IdArray:
        """``ranked`` with every doubted memory of its first ``depth`` placed after the newer memory that doubts it.

        A doubt says the newer statement may replace the older (``possibly_outdated_by``); ranking the older first
        would answer with what is probably stale. Retired memories never reach here; a doubter outside the pool
        leaves the order alone.
        """
        columns = self.engine.columns
        head = ranked[:depth]
        doubted = np.flatnonzero(columns.doubted[ids[head]])
        if doubted.size == 0:
            return ranked
        raws = self.engine.store.multi_get(CF_MEMORIES, [u64_key(int(ids[head[p]])) for p in doubted.tolist()])
        doubter_of = {
            int(ids[head[p]]): memory_pb2.Memory.FromString(raw).possibly_outdated_by
            for p, raw in zip(doubted.tolist(), raws, strict=True)
            if raw is not None
        }
        order = [int(i) for i in ids[ranked]]
        position_of = {memory: p for p, memory in enumerate(order)}
        # Each move puts a doubter before its doubted memory; a memory moves at most once per doubt, so a chain
        # of doubts (a -> b -> c) settles in as many passes as it is long.
        for _ in range(len(doubter_of)):
            moved = False
            for older, newer in doubter_of.items():
                at, doubter_at = position_of.get(older), position_of.get(newer)
                if at is None or doubter_at is None or doubter_at < at:
                    continue
                order.insert(at, order.pop(doubter_at))
                position_of = {memory: p for p, memory in enumerate(order)}
                moved = True
            if not moved:
                break
        index_of = {int(memory): p for p, memory in enumerate(ids.tolist())}
        return np.asarray([index_of[memory] for memory in order], dtype=ranked.dtype)

    def _field_match(
        self, query: RecallQuery, terms: list[str], codes: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.float64]:
        """Per candidate, the idf-weighted share of the query's words (``terms``) that name its structured fields."""
        if not terms or not (codes != NO_CODE).any():  # before np.unique: most stores' memories have no fields
            return np.zeros(codes.size, dtype=np.float64)
        present, inverse = np.unique(codes, return_inverse=True)
        words_of = [self._words_of(int(code)) for code in present.tolist()]
        vocabulary = frozenset().union(*words_of)
        ordered = sorted(vocabulary)
        named = [_named_words(term, vocabulary, ordered) for term in terms]
        idf, held = self.engine.lexical.idf(query.namespace, terms)
        # A word that no memory holds and no candidate's field names is evidence for none of them (BM25
        # ignores it too); counting it would only shrink every share.
        weights = [weight if held[i] or named[i] else 0.0 for i, weight in enumerate(idf)]
        total = sum(weights)
        if total <= 0.0:
            return np.zeros(codes.size, dtype=np.float64)
        share = np.asarray(
            [
                sum(w for w, names in zip(weights, named, strict=True) if not names.isdisjoint(words))
                for words in words_of
            ],
            dtype=np.float64,
        )
        return np.asarray(share[inverse] / total, dtype=np.float64)

    def _attribute_evidence(
        self, query: RecallQuery, namespace: int, ids: IdArray, match: npt.NDArray[np.float64], pool: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per candidate: its fact attribute's cosine to the query by bare name (floored at 0), and its meaning gap.

        The gap compares the name said of the candidate's entity type ("the project's tracker") and the
        attribute's examples with the best of every attribute the namespace knows of the candidates' types, not
        only of those some candidate holds: asked for a project's lead, a project's budget is not the best
        attribute merely because no candidate states a lead by key. A candidate without an attribute that is
        about an entity is read (:meth:`_read_attributes`); a reading counts for the gap, never for the lift.
        NaN without an attribute or reading (or, for the name, without an embedder).
        """
        columns = self.engine.columns
        codes = columns.fields[ids]
        missing = np.full(ids.size, np.nan, dtype=np.float64)
        if not (codes != NO_CODE).any():
            return missing, missing
        kinds = self._type_codes(columns.entity[ids])
        width = int(kinds.max()) + 1 if kinds.size else 1
        present, inverse = np.unique(codes.astype(np.int64) * width + kinds, return_inverse=True)
        held = [self._attribute_of(int(pair // width)) for pair in present.tolist()]
        held_types = [self._type_names[int(pair % width)] for pair in present.tolist()]
        size = columns.namespace_count(namespace)
        known = self._known_attributes(namespace, size)
        by_type: dict[str, list[str]] = {}
        for attribute, entity_type in zip(held, held_types, strict=True):
            found = by_type.setdefault(entity_type, [])
            if attribute:
                found.append(attribute)
        # Per type, its known attributes and then those only some candidate holds, side by side in ``cosines``;
        # the order of the attributes is no matter to the gaps.
        vector = np.asarray(query.vector, dtype=np.float32)
        norm = float(np.sqrt(vector @ vector))  # np.linalg.norm's number, without its dispatch
        unit = vector / norm if norm > 0.0 and np.isfinite(norm) else None
        offsets: dict[str, int] = {}
        position: dict[tuple[str, str], int] = {}
        parts: list[npt.NDArray[np.float64]] = []
        count = 0
        for entity_type, attributes in by_type.items():
            wanted = known.get(entity_type, ())
            others = [a for a in dict.fromkeys(attributes) if a not in wanted]
            if not wanted and not others:
                continue
            directions = self._matrices.get(namespace, size, entity_type, wanted, others)
            offsets[entity_type] = count
            for offset, attribute in enumerate([*wanted, *others], start=count):
                position[(attribute, entity_type)] = offset
            rows = len(wanted) + len(others)
            if unit is None:
                parts.append(np.full((3, rows), np.nan, dtype=np.float64))
            elif others:
                chosen = list(range(len(wanted))) + [directions.index[a] for a in others]
                parts.append(directions.cosines(unit)[:, chosen])
            else:
                parts.append(directions.cosines(unit)[:, : len(wanted)])
            count += rows
        if not count:
            return missing, missing
        cosines = np.hstack(parts) if len(parts) > 1 else parts[0]
        names, said, examples = cosines[0], cosines[1], cosines[2]
        gaps = _meaning_gaps(np.maximum(said, 0.0), examples)
        which = np.asarray(
            [position[(a, t)] if a else -1 for a, t in zip(held, held_types, strict=True)], dtype=np.int64
        )[inverse]
        named = np.where(which >= 0, np.maximum(names, 0.0)[np.maximum(which, 0)], np.nan)  # NaN stays NaN
        read = self._read_attributes(namespace, size, ids, match, pool, which, kinds, known, offsets)
        which = np.where(which >= 0, which, read)
        gap = np.where(which >= 0, gaps[np.maximum(which, 0)], np.nan)
        return np.asarray(named, dtype=np.float64), np.asarray(gap, dtype=np.float64)

    def _read_attributes(
        self,
        namespace: int,
        size: int,
        ids: IdArray,
        match: npt.NDArray[np.float64],
        pool: int,
        which: npt.NDArray[np.int64],
        kinds: npt.NDArray[np.int64],
        known: dict[str, tuple[str, ...]],
        offsets: dict[str, int],
    ) -> npt.NDArray[np.int64]:
        """Per candidate, the index of the attribute it reads as (``offsets`` of its type + the attribute's index in
        ``known`` of the type), -1 for none.

        Read are the best ``pool`` candidates by match that are about an entity, hold no attribute (declared or
        inferred by perception) and are of a kind that states one (perception's ``SLOT_KINDS``: not strategies,
        whose lessons about an entity's tasks read as its preferences). A statement reads as the attribute of its
        entity's type whose direction it lies clearly nearest (``READING_MARGIN``): the namespace's facts of each
        attribute centred on their common mean (``attributes.py``) once three attributes of the type have examples,
        the attributes' embedded names before that. Perception retires on such a likeness only when it is sure;
        ranking can use the weaker reading, since it only moves a statement below the memories that say what was
        asked.
        """
        read = np.full(ids.size, -1, dtype=np.int64)
        states = _SLOT_KIND_TABLE[self.engine.columns.kind[ids]]  # a lesson or an abstraction fills no slot
        unread = np.flatnonzero((which < 0) & (kinds > 0) & states)
        if unread.size > pool:
            unread = unread[np.argsort(-match[unread], kind="stable")[:pool]]
        if unread.size == 0:
            return read
        for kind in sorted(set(kinds[unread].tolist())):
            entity_type = self._type_names[kind]
            reading = self._reading(namespace, size, entity_type, known.get(entity_type, ()))
            if reading is None:
                continue
            rows = unread[kinds[unread] == kind]
            memories = ids[rows]
            verdicts = self._read_as
            if verdicts.size <= int(memories.max()):
                verdicts = self._grow_read_as(int(memories.max()) + 1)
            said = verdicts[memories]
            new = (said >> _READ_SHIFT) != reading.generation
            if new.any():
                fit = (self._unit_vectors(memories[new]) - reading.centre) @ reading.directions.T
                order = np.argsort(-fit, axis=1)
                best = np.take_along_axis(fit, order[:, :2], axis=1)
                clear = best[:, 0] - best[:, 1] >= READING_MARGIN
                said[new] = (reading.generation << _READ_SHIFT) | np.where(clear, reading.rows[order[:, 0]] + 1, 0)
                verdicts[memories[new]] = said[new]
            index = (said & _READ_INDEX) - 1
            reads = index >= 0
            read[rows[reads]] = offsets[entity_type] + index[reads]
        return read

    def _grow_read_as(self, needed: int) -> npt.NDArray[np.int64]:
        """``_read_as`` with room for ids below ``needed`` (a verdict written meanwhile to the old array is lost, and
        made again)."""
        with self._codes_lock:
            if self._read_as.size < needed:
                grown = np.zeros(max(needed, 2 * self._read_as.size, 1_024), dtype=np.int64)
                grown[: self._read_as.size] = self._read_as
                self._read_as = grown
            return self._read_as

    def _reading(self, namespace: int, size: int, entity_type: str, attributes: tuple[str, ...]) -> _Reading | None:
        """How statements of an entity type are read in a namespace (kept, with what it read, until the namespace
        grows by ``KNOWN_REFRESH_GROWTH``); None while fewer than ``READING_MIN_ATTRIBUTES`` attributes have a
        direction.

        The directions are the examples' means centred on their common mean when at least that many attributes
        have examples (centred, so that what every attribute's facts share, the domain and the entities' kind,
        reads as none of them), else the attributes' names said of the type (with an embedder).
        """
        key = (namespace, entity_type)
        kept = self._readings.get(key)
        if kept is not None and size < kept.size * KNOWN_REFRESH_GROWTH and kept.known == attributes:
            return kept if kept.rows.size >= READING_MIN_ATTRIBUTES else None
        matrix = self._matrices.get(namespace, size, entity_type, attributes)
        count = len(attributes)
        means, has_mean = matrix.block(2)
        rows = np.flatnonzero(has_mean[:count])
        directions = np.zeros((0, self.engine.dimension), dtype=np.float32)
        centre = np.zeros(self.engine.dimension, dtype=np.float32)
        if rows.size >= READING_MIN_ATTRIBUTES:
            found = means[rows]
            centre = found.mean(axis=0)
            centred = found - centre
            directions = centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)
        elif self._meanings is not None:
            said, has_name = matrix.block(1)
            rows = np.flatnonzero(has_name[:count])
            directions = said[rows]
        else:
            rows = np.zeros(0, dtype=np.int64)
        reading = _Reading(max(size, 1), attributes, directions, centre, rows, next(self._generations))
        self._readings[key] = reading
        return reading if rows.size >= READING_MIN_ATTRIBUTES else None

    def _known_attributes(self, namespace: int, size: int) -> dict[str, tuple[str, ...]]:
        """The fact attributes (declared or inferred) of a namespace's memories, per entity type.

        Scanned from the namespace's field column, again once the namespace has grown by a quarter (an attribute
        first stated since is still met as some candidate's own).
        """
        with self._codes_lock:
            cached = self._known.get(namespace)
        if cached is not None and size < cached[0] * KNOWN_REFRESH_GROWTH:
            return cached[1]
        columns = self.engine.columns
        ids = columns.namespace_ids(namespace)
        codes = np.unique(columns.fields[ids[ids < columns.size]])
        by_type: dict[str, list[str]] = {}
        for code in codes.tolist():
            attribute = self._attribute_of(int(code))
            if attribute:
                entity = columns.field_sets.string(int(code)).split(FIELD_SEPARATOR)[0]
                found = by_type.setdefault(type_of(entity), [])
                if attribute not in found:
                    found.append(attribute)
        known = {t: tuple(a) for t, a in by_type.items()}
        with self._codes_lock:
            self._known[namespace] = (max(size, 1), known)
        return known

    def _type_codes(self, entities: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
        """Per candidate, the index in ``_type_names`` of its entity's type (0, "", without an entity or a type)."""
        shifted = entities.astype(np.int64) - NO_CODE  # NO_CODE -> 0
        table = self._entity_types
        if shifted.size and int(shifted.max()) >= table.size:
            table = self._grow_entity_types(int(shifted.max()) + 1)
        kinds = table[shifted]
        if (kinds < 0).any():
            for code in np.unique(shifted[kinds < 0]).tolist():
                kind = self._entity_name(int(code) + NO_CODE)[0]
                with self._codes_lock:
                    index = self._type_index.get(kind)
                    if index is None:
                        index = self._type_index[kind] = len(self._type_names)
                        self._type_names.append(kind)
                table[code] = index
            kinds = table[shifted]
        return np.asarray(kinds, dtype=np.int64)

    def _grow_entity_types(self, needed: int) -> npt.NDArray[np.int64]:
        """``_entity_types`` with room for ``needed`` codes (-1 for those not looked up)."""
        with self._codes_lock:
            if self._entity_types.size < needed:
                grown = np.full(max(needed, 2 * self._entity_types.size, 1_024), -1, dtype=np.int64)
                grown[: self._entity_types.size] = self._entity_types
                self._entity_types = grown
            return self._entity_types

    def _attribute_sample(self, namespace: int, attribute: str) -> npt.NDArray[np.float32]:
        """Unit vectors of the namespace's newest live facts of ``attribute``, up to ``EXAMPLES`` of them."""
        codes = self._codes_of(attribute)
        columns = self.engine.columns
        if codes.size == 0:
            return np.zeros((0, self.engine.dimension), dtype=np.float32)
        ids = columns.namespace_ids(namespace)
        ids = ids[ids < columns.size]
        found: list[IdArray] = []
        count, end, step = 0, ids.size, ATTRIBUTE_SCAN_FIRST
        while end > 0 and count < EXAMPLES:
            chunk = ids[max(0, end - step) : end]
            chunk = chunk[np.isin(columns.fields[chunk], codes)]
            chunk = chunk[live_mask(columns.state[chunk])]
            found.insert(0, chunk)
            count += chunk.size
            end -= step
            step *= 4
        newest = np.concatenate(found)[-EXAMPLES:] if found else np.zeros(0, dtype=np.int64)
        if np.unique(columns.entity[newest]).size < EXAMPLES_MIN_ENTITIES:
            return np.zeros((0, self.engine.dimension), dtype=np.float32)
        return self._unit_vectors(newest)

    def _codes_of(self, attribute: str) -> npt.NDArray[np.int32]:
        """The interned field combinations whose fact attribute is ``attribute``."""
        with self._codes_lock:
            known = len(self.engine.columns.field_sets)
            for code in range(self._codes_scanned, known):
                named = self._attribute_of(code)
                if named:
                    self._codes_by_attribute.setdefault(named, []).append(code)
            self._codes_scanned = max(self._codes_scanned, known)
            return np.asarray(self._codes_by_attribute.get(attribute, ()), dtype=np.int32)

    def _attribute_of(self, code: int) -> str:
        """The fact attribute of an interned field combination ("" for none)."""
        if code == NO_CODE:
            return ""
        attribute = self._attributes.get(code)
        if attribute is None:
            attribute = self._attributes[code] = field_attribute(self.engine.columns.field_sets.string(code))
        return attribute

    def _entity_factor(
        self, query: RecallQuery, terms: list[str], codes: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.float64]:
        """Per candidate, 1 - ENTITY_MISMATCH_WEIGHT x (best share of an entity's name the query says - its own).

        The share is idf-weighted over the words of the entity's name; the best is taken among the
        candidates' entities of the same type. Candidates without an entity, and every candidate when the
        query names no candidate's entity, keep their match.
        """
        factor = np.ones(codes.size, dtype=np.float64)
        if not terms or not (codes != NO_CODE).any():
            return factor
        present, inverse = np.unique(codes, return_inverse=True)
        entities = [int(code) for code in present.tolist() if code != NO_CODE]
        names = {code: self._entity_name(code) for code in entities}
        vocabulary = frozenset().union(*(words for _, words in names.values()))
        ordered = sorted(vocabulary)
        said = frozenset().union(*(_named_words(term, vocabulary, ordered) for term in terms))
        if not said:
            return factor
        idf, _ = self.engine.lexical.idf(query.namespace, ordered)
        weight = dict(zip(ordered, idf, strict=True))
        share: dict[int, float] = {}
        for code, (_, words) in names.items():
            total = sum(weight[w] for w in words)
            share[code] = sum(weight[w] for w in words if w in said) / total if total > 0 else 0.0
        best: dict[str, float] = {}
        for code, (kind, _) in names.items():
            best[kind] = max(best.get(kind, 0.0), share[code])
        per_code = np.ones(present.size, dtype=np.float64)
        for position, code in enumerate(present.tolist()):
            if code != NO_CODE:
                kind = names[code][0]
                per_code[position] = 1.0 - ENTITY_MISMATCH_WEIGHT * (best[kind] - share[code])
        return np.asarray(per_code[inverse], dtype=np.float64)

    def _entity_name(self, code: int) -> tuple[str, frozenset[str]]:
        """An entity's type ("user" of "user:nadia-yilmaz"; empty without a colon) and the words of its name."""
        cached = self._entity_names.get(code)
        if cached is None:
            kind, colon, name = self.engine.columns.entities.string(code).partition(":")
            if not colon:  # no type: the whole string is the name
                kind, name = "", kind
            cached = self._entity_names[code] = (kind, frozenset(tokenize(name)))
        return cached

    def _words_of(self, code: int) -> frozenset[str]:
        """The words of an interned field combination (cached: few combinations, and they never change)."""
        if code == NO_CODE:
            return frozenset()
        words = self._field_words.get(code)
        if words is None:
            words = self._field_words[code] = frozenset(tokenize(self.engine.columns.field_sets.string(code)))
        return words

    def _read_hits(
        self,
        query: RecallQuery,
        ids: IdArray,
        sims: npt.NDArray[np.float32],
        scores: npt.NDArray[np.float64],
        ranked: IdArray,
        scored: Scores,
        terms_of: _Breakdowns,
    ) -> list[Hit]:
        """The records of the best ``query.k`` positions of ``ranked``, skipping any forgotten meanwhile."""
        framework = self.engine.framework_version
        hits: list[Hit] = []
        start = 0
        while len(hits) < query.k and start < ranked.size:
            take = ranked[start : start + query.k - len(hits)]
            start += take.size
            chosen = [int(i) for i in ids[take]]
            known = Scores(*(np.asarray(column)[take] for column in scored))
            records, _ = self.engine.get(chosen, include_vectors=query.include_vectors, scores=known)
            by_id = {r.id: r for r in records}
            for position in take.tolist():
                record = by_id.get(int(ids[position]))
                if record is None:  # forgotten between the candidate step and the read
                    continue
                hint = hint_for(record, query, framework)
                hits.append(Hit(record, float(sims[position]), float(scores[position]), hint, terms_of.at(position)))
        return hits

    def _word_matches(
        self, query: RecallQuery, terms: list[str], flt: _Filter, pool: int
    ) -> tuple[IdArray, npt.NDArray[np.float32]]:
        """The ``pool`` best BM25 matches of the query's words (``terms``) that pass the filter, and their scores."""
        columns = self.engine.columns
        lex_ids, lex_scores = self.engine.lexical.search_terms(query.namespace, terms)
        return _best_passing(columns, lex_ids, lex_scores, flt, pool)

    def _fuse_lexical(
        self,
        query: RecallQuery,
        ids: IdArray,
        sims: npt.NDArray[np.float32],
        lex_ids: IdArray,
        lex_scores: npt.NDArray[np.float32],
    ) -> tuple[IdArray, npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Add the best word matches to the vector candidates; returns ids, cosines and BM25 scores."""
        # np.setdiff1d's result (ascending), by a set: cheaper at these sizes (tens of ids).
        known = set(ids.tolist())
        extra = np.asarray(sorted(i for i in lex_ids.tolist() if i not in known), dtype=np.int64)
        if extra.size:
            ids = np.concatenate([ids, extra])
            sims = np.concatenate([sims, self._exact_similarities(extra, query.vector.reshape(1, -1))])
        lexical = np.zeros(ids.size, dtype=np.float32)
        if lex_ids.size:
            sorter = np.argsort(ids, kind="stable")
            lexical[sorter[np.searchsorted(ids, lex_ids, sorter=sorter)]] = lex_scores
        return ids, sims, lexical

    def _diversify(self, ids: IdArray, scores: npt.NDArray[np.float64], query: RecallQuery) -> IdArray:
        """Maximal marginal relevance over candidates in score order; returns the chosen positions, in order."""
        vectors = self._unit_vectors(ids)
        top = scores.max()
        scores = scores / top if top > 0 else scores
        lam = 1.0 - query.diversity
        chosen: list[int] = []
        remaining = list(range(ids.size))
        while remaining and len(chosen) < query.k:
            if chosen:
                redundancy = (vectors[remaining] @ vectors[chosen].T).max(axis=1)
            else:
                redundancy = np.zeros(len(remaining), dtype=np.float32)
            best = int(np.argmax(lam * scores[remaining] - (1.0 - lam) * redundancy))
            chosen.append(remaining.pop(best))
        return np.asarray(chosen, dtype=np.int64)

    def _candidates(self, query: RecallQuery, flt: _Filter) -> tuple[IdArray, npt.NDArray[np.float32]]:
        columns = self.engine.columns
        index = self.engine.index
        unit = query.vector.reshape(1, -1)
        size = columns.size
        total = int(index.graph_count + index.tail_count)
        selective = flt.narrows or len(columns.namespaces) > 1
        passing: IdArray | None = None
        if selective:  # the candidates are a subset: list them from the namespace's or entity's ids
            if flt.entity is not None:
                scanned = self._entity_scan(flt, unit)
                if scanned is not None:
                    return scanned
            passing = self._passing(flt)
            if passing.size <= self.engine.config.index.exact_scan_limit:
                return passing, self._exact_similarities(passing, unit)
            fraction = passing.size / max(total, 1)
        else:
            fraction = 1.0
        count = int(min(max(query.k * 2, math.ceil(query.k / max(fraction, 1e-6) * 1.5)), max(total, 1)))
        # The graph may miss a memory stored with exactly the query's vector (17 % of 1M random vectors at the
        # expansion below); RocksDB's digests name them with one seek, and they join the graph's candidates.
        same = ids_with_vector(self.engine.store, query.namespace, query.vector, limit=count)
        same = same[same < size]
        # One search of the graph's search expansion answers the rounds up to it (see Neighbours): its cost is the
        # expansion's, whatever the count, and superseded facts near a question often make a second round.
        near: Neighbours | None = None
        for _ in range(MAX_OVERFETCH_ROUNDS):
            if near is None or count > near.count:
                near = index.neighbours(unit, max(count, self.engine.config.index.expansion_search))
            matches = near.first(count)
            inside = matches.ids < size
            ids, sims = _with_same_vector(matches.ids[inside], matches.similarities[inside], same)
            keep = _mask(columns, ids, flt)
            exhaustive = count >= max(index.graph_count, index.tail_count)
            if int(keep.sum()) >= query.k or exhaustive:
                return ids[keep], sims[keep]
            count = min(count * 4, max(index.graph_count, index.tail_count))
        # The nearest neighbours are mostly filtered out: answer exactly rather than short.
        if passing is None:
            passing = self._passing(flt)
        return passing, self._exact_similarities(passing, unit)

    def _entity_scan(
        self, flt: _Filter, unit: npt.NDArray[np.float32]
    ) -> tuple[IdArray, npt.NDArray[np.float32]] | None:
        """An entity's passing ids and their exact cosines from its held block of vectors; None when not held.

        Up to ``exact_scan_limit`` passing ids the cosines are the same numbers :meth:`_exact_similarities` gives
        (the held rows stand in for RocksDB's only), so ranking is as before; past it, up to ``entity_scan_limit``
        memories, the whole block is scored at once instead of searching the graph.
        """
        columns = self.engine.columns
        config = self.engine.config.index
        assert flt.entity is not None
        listed = columns.entity_ids(flt.entity)
        listed = listed[listed < columns.size]
        if listed.size > config.entity_scan_limit:
            return None
        keep = _mask(columns, listed, flt)
        passing = listed[keep]
        if passing.size == 0:
            return passing, np.zeros(0, dtype=np.float32)
        block = self._entity_vectors.block(flt.entity, listed)
        if block is None:
            return None
        if passing.size <= config.exact_scan_limit:
            return passing, self._exact_similarities(passing, unit, held=block[keep])
        return passing, rows_dot(block, np.flatnonzero(keep), unit[0])

    def _passing(self, flt: _Filter) -> IdArray:
        """Every id that passes the filter: a scan of the entity's or namespace's ids, no vectors."""
        columns = self.engine.columns
        ids = columns.entity_ids(flt.entity) if flt.entity is not None else columns.namespace_ids(flt.namespace)
        ids = ids[ids < columns.size]
        return ids[_mask(columns, ids, flt)]

    def _exact_similarities(
        self, ids: IdArray, unit: npt.NDArray[np.float32], *, held: npt.NDArray[np.float32] | None = None
    ) -> npt.NDArray[np.float32]:
        """Cosine similarity of each id's vector to the query, exactly (``held``: see :meth:`_unit_vectors`)."""
        if ids.size == 0:
            return np.zeros(0, dtype=np.float32)
        return np.asarray(self._unit_vectors(ids, held=held) @ unit[0], dtype=np.float32)

    def _unit_vectors(self, ids: IdArray, *, held: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """Unit vectors of ids: from the fresh tail (already unit), the graph or RocksDB (normalised here).

        ``held``: the ids' rows as :func:`read_unit_vectors` gives them, used instead of reading RocksDB.
        """
        # Looked up, not snapshotted: after a crash the tail reads a million rows in place, and a snapshot of
        # them all would be a copy of over a gigabyte.
        vectors, in_tail = self.engine.index.tail_vectors(ids)
        rest = np.flatnonzero(~in_tail)
        if rest.size and rest.size <= GRAPH_READ_LIMIT:
            if held is not None and self.engine.config.index.dtype in _GRAPH_ROUNDING:
                # The graph's rows are the unit rows rounded to its scalar type: rounding the held rows gives the
                # same numbers without usearch's per-key arrays (0.3-0.5 ms for 256 keys).
                found = self.engine.index.graph_contains(ids[rest])
                vectors[rest[found]] = _GRAPH_ROUNDING[self.engine.config.index.dtype](held[rest[found]])
            else:
                from_graph, found = self.engine.index.graph_vectors(ids[rest])
                vectors[rest[found]] = from_graph[found]
            rest = rest[~found]
        if rest.size:
            # RocksDB holds every vector: for many ids one multi_get and one normalisation beat usearch's
            # get(), whose Python-level per-key conversion then costs more than the whole read. A forgotten
            # id's row is 0: similarity 0, dropped at the read.
            vectors[rest] = (
                held[rest]
                if held is not None
                else read_unit_vectors(self.engine.store, ids[rest], self.engine.dimension)
            )
        return vectors


def names_field(word: str, field_words: frozenset[str]) -> bool:
    """Whether a query word names one of a memory's field words.

    Fields are identifiers a developer wrote (``rate_limit``, ``repo``, ``oncall``, ``code_review``), so a
    word matches on a shared stem as an edge-n-gram field analyzer would: "leads" names ``lead``,
    "repo" names ``repository``; short words must match exactly.
    """
    return bool(_named_words(word, field_words, sorted(field_words)))


def _named_words(word: str, vocabulary: frozenset[str], ordered: list[str]) -> frozenset[str]:
    """The words of ``vocabulary`` (``ordered``: the same, sorted) that ``word`` names (see :func:`names_field`)."""
    named = {word} if word in vocabulary else set()
    if len(word) >= FIELD_PREFIX_MIN:
        named.update(word[:end] for end in range(FIELD_PREFIX_MIN, len(word)) if word[:end] in vocabulary)
        start = bisect.bisect_left(ordered, word)
        while start < len(ordered) and ordered[start].startswith(word):
            named.add(ordered[start])
            start += 1
    return frozenset(named)


def share_task_match(match: npt.NDArray[np.floating[Any]], signature: npt.NDArray[np.int32]) -> npt.NDArray[np.float64]:
    """Every candidate strategy of a task signature takes the best match among that signature's candidates.

    Strategies for one task answer the same question; which of them is the better lesson is for the
    evidence (outcomes, demotion, trust) to say, not for how close each one's wording happens to be.
    """
    shared: npt.NDArray[np.float64] = np.array(match, dtype=np.float64)
    groups = _task_groups(signature)
    if groups is None:
        return shared
    grouped, _, inverse = groups
    shared[grouped] = _group_best(shared[grouped], inverse)
    return shared


def _group_best(values: npt.NDArray[np.floating[Any]], group: IdArray) -> npt.NDArray[np.float64]:
    """Per value, the largest value of its group (``group``: dense group numbers from 0, one per value)."""
    best: npt.NDArray[np.float64] = np.full(int(group.max()) + 1, -np.inf)
    np.maximum.at(best, group, values)
    return best[group]


def _task_groups(signature: npt.NDArray[np.int32]) -> tuple[IdArray, npt.NDArray[np.int32], IdArray] | None:
    """Positions of the candidates with a task signature, the signatures met and each one's; None if no two share."""
    grouped = np.flatnonzero(signature != NO_CODE)
    if grouped.size < 2:
        return None
    codes, inverse = np.unique(signature[grouped], return_inverse=True)
    if codes.size == grouped.size:
        return None
    return grouped, codes, inverse


def prefer_newer_lessons(
    match: npt.NDArray[np.floating[Any]],
    ids: IdArray,
    signature: npt.NDArray[np.int32],
    successes: npt.NDArray[np.floating[Any]],
    failures: npt.NDArray[np.floating[Any]],
    level: float,
) -> npt.NDArray[np.float64]:
    """Within each task signature, the newest strategy that no other reliably beats leads; the others' match shrinks.

    An agent writes a new lesson for a task because the old one fell short. Until the outcomes say otherwise
    (another strategy of the task beats it with probability >= ``level``, the policy's strategy upgrade
    probability, judged as demotion judges), the newest is the one to try, before every older one that has been
    tried; untried older ones keep their rank by trust. Ranked by outcome records alone, a new lesson that
    failed once or twice sank under the old one, was rarely tried again, and never showed it was better. Pure
    arrays in, array out (the result is the logged match replay re-ranks).
    """
    shaped: npt.NDArray[np.float64] = np.array(match, dtype=np.float64)
    groups = _task_groups(signature)
    if groups is None:
        return shaped
    grouped, codes, inverse = groups
    alpha = 1.0 + np.asarray(successes, dtype=np.float64)
    beta = 1.0 + np.asarray(failures, dtype=np.float64)
    for group in range(codes.size):
        members = grouped[inverse == group]
        if members.size < 2:
            continue
        members = members[np.argsort(-ids[members], kind="stable")]  # newest first
        beats = beat_probabilities(alpha[members], beta[members])
        np.fill_diagonal(beats, 0.0)
        unbeaten = np.flatnonzero(~(beats >= level).any(axis=0))
        if unbeaten.size:
            lead = unbeaten[0]
            # Older ones give way only once tried: a lesson written after another's outcomes is the agent's answer
            # to them, while between lessons none has tried (two imported runbooks) there is nothing to answer.
            older = np.arange(members.size) > lead
            tried = (alpha[members] + beta[members]) > 2.0
            shaped[members[(~older & (np.arange(members.size) != lead)) | (older & tried)]] *= REPLACED_LESSON_FACTOR
    return shaped


def beat_probabilities(alpha: npt.NDArray[np.float64], beta: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """P(success rate of i > that of j) for Beta(alpha, beta) posteriors, as a matrix [i, j].

    The normal approximation of the difference of the two Betas: recall judges a handful of strategies per
    query and cannot afford demotion's Monte Carlo; the two agree within a few points of probability.
    """
    total = alpha + beta
    mean = alpha / total
    variance = alpha * beta / (total * total * (total + 1.0))
    spread = np.sqrt(variance[:, None] + variance[None, :])
    z = (mean[:, None] - mean[None, :]) / spread
    return np.asarray(0.5 * (1.0 + _erf(z / math.sqrt(2.0))), dtype=np.float64)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def rank_factors(
    accuracy: npt.NDArray[np.floating[Any]],
    relevance: npt.NDArray[np.floating[Any]],
    inconsistency: npt.NDArray[np.floating[Any]],
    importance: npt.NDArray[np.integer[Any]],
    kind: npt.NDArray[np.integer[Any]],
    demoted: npt.NDArray[np.bool_],
    signature: npt.NDArray[np.int32],
) -> npt.NDArray[np.float64]:
    """What recall multiplies each candidate's match by (the formula on RecallRequest); one row per candidate.

    ``signature`` codes each candidate's task signature (any integer; equal codes, one task).

    Pure arrays in, array out, so that replay ranks logged candidates exactly as recall did.
    """
    kind = np.asarray(kind)
    factor = TRUST_FLOOR + (1.0 - TRUST_FLOOR) * trust_of(accuracy, relevance, kind, signature)
    # The client's own rating of what matters (as in Generative Agents' retrieval): a fact or a lesson
    # outranks a passing remark that names the same entity and is as close to the query.
    rated = np.asarray(importance, dtype=np.float64)
    rating = np.where(rated > 0, np.minimum(rated, 10.0), UNRATED_IMPORTANCE) / 10.0
    factor *= 1.0 - IMPORTANCE_WEIGHT + IMPORTANCE_WEIGHT * rating
    factor *= 1.0 - INCONSISTENCY_PENALTY * np.minimum(np.asarray(inconsistency, dtype=np.float64), 1.0)
    factor[np.asarray(demoted, dtype=bool)] *= DEMOTED_FACTOR
    # An episode (a remark, a log line of a task) is evidence about an entity or a task; the fact, preference
    # or strategy distilled from such evidence is what a question about it wants. A store written without
    # kinds is all episodes, and ranks as before.
    factor[kind == memory_pb2.MEMORY_KIND_EPISODE] *= EPISODE_FACTOR
    return factor


def trust_of(
    accuracy: npt.NDArray[np.floating[Any]],
    relevance: npt.NDArray[np.floating[Any]],
    kind: npt.NDArray[np.integer[Any]],
    signature: npt.NDArray[np.int32],
) -> npt.NDArray[np.float64]:
    """Each candidate's trust in [0, 1]: 0.6 x accuracy + 0.4 x min(relevance, 1), strategies shifted per task."""
    accuracy = np.array(accuracy, dtype=np.float64)
    strategies = np.flatnonzero(np.asarray(kind) == memory_pb2.MEMORY_KIND_STRATEGY)
    if strategies.size:
        # A strategy's accuracy is mostly its outcome record, i.e. how hard its task is: it says which of
        # the task's strategies to prefer (see demotion), not how it compares with facts, episodes or another
        # task's strategies. Taken as is, a task that usually fails ranked its best strategy under every
        # untested log line about the task, and under an easier task's lesson that the question did not ask
        # for. Each task's strategies are shifted so that its best counts as 1 (those without a task
        # signature together): shifting keeps their differences, so the lift does not amplify thin evidence.
        _, task = np.unique(np.asarray(signature)[strategies], return_inverse=True)
        accuracy[strategies] += 1.0 - _group_best(accuracy[strategies], task)
    return np.clip(0.6 * accuracy + 0.4 * np.minimum(np.asarray(relevance, dtype=np.float64), 1.0), 0.0, 1.0)


@dataclass(frozen=True)
class _Breakdowns:
    """The terms of each pool member's score (positions as in the pool), for :class:`ScoreBreakdown`."""

    words: npt.NDArray[np.floating[Any]]
    fields: npt.NDArray[np.floating[Any]]
    match: npt.NDArray[np.floating[Any]]
    trust: npt.NDArray[np.floating[Any]]
    factor: npt.NDArray[np.floating[Any]]

    def at(self, position: int) -> memory_service_pb2.ScoreBreakdown:
        return memory_service_pb2.ScoreBreakdown(
            words=float(self.words[position]),
            fields=float(self.fields[position]),
            match=float(self.match[position]),
            trust=float(self.trust[position]),
            factor=float(self.factor[position]),
        )
