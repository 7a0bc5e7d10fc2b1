"""Change detection at write time: hard conflicts on fact keys, soft conflicts and duplicates.

Runs under the store's commit lock (one mutation at a time), so its reads and
the writes it decides are serial. It decides deterministically where the
structure allows (a fact key), and only nudges scores where it does not (a
near-duplicate that disagrees raises the older memory's inconsistency).

Because it runs in the serial section of every write, it keeps what never
changes about a memory in RAM: the unit vectors of recently written entity
memories (the soft-conflict candidates of hot entities) and, per fact version,
its world time and normalised value. Both are keyed by memory id and filled
only with durable ids (an id of a write that failed is handed out again), and
everything that can change (state, links, confidence) is still read from the
record or the hot columns.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2

from ..domain import from_timestamp, to_timestamp
from ..policy import PerceptionSettings
from ..retrieval.attributes import attribute_phrase
from ..store.columns import NO_CODE, MemoryColumns
from ..store.rocks import CF_DEDUP, CF_ENTITIES, CF_FACT_VERSIONS, CF_FACTS, CF_MEMORIES, CF_VECTORS, Txn, key_u64
from .judging import JudgeQueue
from .slots import (
    CLAUSE_MARK,
    ENTITY_MARK,
    MAX_VALUE_TOKENS,
    NAME_MARGIN,
    PAIR_MIN_FIXED,
    SHAPE_SAID_IN_PASSING,
    AttributeCentroids,
    AttributeNames,
    AttributeWords,
    Embed,
    EntityNames,
    TemplateMatch,
    Templates,
    Values,
    ValueShapes,
    clause_words,
    differing_spans,
    fits,
    last_clause_spans,
    masked,
    name_of,
    normalise_text,
    template_of,
    type_of,
    words,
)

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
ARCHIVED = memory_pb2.MEMORY_STATE_ARCHIVED
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
CURRENT_STATES = (ACTIVE, ARCHIVED)
REPEATABLE_KINDS = (memory_pb2.MEMORY_KIND_EPISODE,)
"""Kinds whose identical text is a new event, not a restatement: never merged by text alone."""

SOFT_CONFLICT_CANDIDATES = 256
"""Most recent memories of an entity compared with a new one: bounds the write's cost."""
VECTOR_CACHE_BYTES = 32 * 2**20
"""RAM for unit vectors of recently written entity memories (soft-conflict candidates skip RocksDB)."""
PENDING_UNITS = "perception.unit"
"""Group slot (``Txn.add_pending``, keyed by id) of the unit vectors of entity memories written earlier in the group:
the next items of a batch about the entity compare with them without reading and scaling them again (issue 42)."""
VERSION_CACHE_ENTRIES = 500_000
"""Fact versions whose world time and normalised value are kept in RAM (about 150 bytes each)."""
INCONSISTENCY_STEP = 0.5
"""Inconsistency added by a soft conflict at similarity 1 (scaled down linearly to the threshold)."""
CONFIRM_CONFIDENCE_GAIN = 0.2
"""A restatement moves confidence this share of the way to 1."""
SLOT_KINDS = (
    memory_pb2.MEMORY_KIND_FACT,
    memory_pb2.MEMORY_KIND_PREFERENCE,
    memory_pb2.MEMORY_KIND_EPISODE,
    memory_pb2.MEMORY_KIND_UNSPECIFIED,
)
"""Kinds whose text may state a slot (strategies are governed by their task, abstractions by their members)."""
SLOT_CANDIDATES = 12
"""Nearest current memories of the entity whose slots a new statement is compared with.

Each costs ~0.1 ms of Python on the write path. Statements of one slot share the entity and the attribute's words,
so they are near: on the tuning world 12 gave the same answers as 24, 8 lost 4 questions of 800 at 10k.
"""
MASKED_CACHE_ENTRIES = 200_000
"""Memories whose masked words are kept in RAM (about 300 bytes each)."""
SLOT_MIN_SIMILARITY = 0.3
"""A memory of the entity below this cosine to a new statement is never the same slot's statement."""
SURE = 0.9
"""Inferred same-slot confidence at which a statement retires the slot's older one (as a fact key would)."""
PAIR_CONFIDENCE = 0.95
"""Confidence that two statements of one entity that differ in one short span are two values of one slot."""
SIMILARITY_SURE = 0.9
"""Cosine to the slot's statement plus the attribute margin (``AttributeCentroids.margin``) that retires it.

Vector evidence alone: two statements of one slot share the entity and the attribute's words, so their cosine is
high, and the new one lies nearer the attribute's keyed facts than any other attribute's. The margin leaves out the
judged entity's own facts, and counts 0 while no other entity's facts give a direction. Measured on the tuning half
of the evolving world (10k, pairs of one entity's statements): from 0.9, 298 right and 1 wrong; from 1.0, 220 and 0.
On held-out phrasing (with the other changes of c3c625f) wrong inferred retirements stayed under 0.5 %.
"""
NEAR_DOUBT = 0.75
"""Two statements of one entity whose slots nothing tells: the cosine from which the newer doubts the older."""
DISAGREEMENT_MARGIN = 0.1
"""A template or a keyed fact's own wording names an attribute unless the text lies this much nearer another
attribute's keyed facts (a wording two attributes share: "<e> was migrated to <v>" for a region and a database)."""
SIMILARITY_DOUBT = 0.7
"""The same sum from which the older statement is only doubted (a soft conflict: it ranks below the newer one).

Measured 0.8 -> 0.7 (seventeenth session, RESULTS.md): on the tuning half of the evolving world the stale share of
the top 5 fell 6.7 -> 5.0 % and 8.8 -> 7.0 % at 10k (seeds 7, 8) with hit@1 +1.0 / +0.5 points; then the held-out
half, run once, fell in every seed and size. A doubt is cheap to get wrong but not free: at the end of the tuning
world (seed 7, 10k) 3 of the 32 current memories doubted were doubted by another slot's statement (1 of 24 at 0.8),
each a history statement ("From February 16, 2023, Cascade had been tracked in ...")."""
TEXT_PAIR_SIMILARITY = 0.6
"""Texts without an entity: the cosine from which two same-template statements are a soft conflict.

Low, because what pairs them is their words (all but an ending said in their last clause, found by head keys);
the cosine only keeps apart endings of unrelated kinds."""
TEXT_PAIR_SURE = 0.9
"""... and from which the newer retires the older."""
TEXT_PAIR_LONG_HEAD = 6
"""Words two such statements share (outside the differing span) from which TEXT_PAIR_SIMILARITY already retires.

A question or a whole clause said twice with another ending in its last clause is one thing answered anew ("who
is the highest paid player in the nba? LeBron James" / "... Stephen Curry"); cosine under-rates such pairs when the
ending is a long share of the text. A short shared head ("the user likes ...") may head several true values, so
it keeps needing TEXT_PAIR_SURE. On SituatedQA, 97.8 % (train) and 96.3 % (dev) of changed answers retire their
predecessor this way, against 39 % by cosine 0.9 alone, and no two different questions pair (the difference of
"How many seasons of Nurse Jackie? 7" / "... of Dexter? 9" lies in an earlier clause).
"""
RELATIVE_SURE = 0.5
"""Entity-relative cosine (see ``_entity_relative``) from which a statement retires an older one of its entity.

Pairs of one entity's statements in the tuning half of the evolving world (1k, seed 8): 40 % of same-slot pairs
reach 0.5 and none of 365 pairs of two keyed slots, none of 2,191 keyed-against-other pairs; raw cosine (with no
attribute margin) keeps no other slot out until 0.8, where it holds 35 % of same-slot pairs. On the five tuning
seeds at 1k, 0.6 kept hit@1 within 0.2 points and let up to 0.5 points more stale statements into the top 5."""
RELATIVE_DOUBT = 0.3
"""... and from which it only doubts it (a soft conflict). At 0.3: 58 % of same-slot pairs, 0.0 % of other slots',
0.5 % of keyed-against-other; 0.4 let more stale statements into the top 5 on two of three tuning seeds."""
RELATIVE_MAX_SHARED = 0.95
"""A statement whose cosine to its entity's mean is above this says nothing beyond the entity that a vector shows
(the rest is noise): no entity-relative evidence for or against it. Real statements measured here lie at most
0.93 from their entity's mean (median 0.74)."""
RELATIVE_MIN_MEMORIES = 4
"""Current memories of an entity needed before their mean stands for "about this entity"."""
UNATTACHED_RECENT = 512
"""Latest statements without an entity also searched when an entity is first declared (see ``_unattached``)."""
ATTACH_CANDIDATES = 64
"""Best word matches of a newly declared entity's name searched for texts that named it before (see
``Perceiver._attach_named_before``): it runs once per entity and namespace."""
NAMED_ATTRIBUTES = 64
"""Attributes per entity type whose names are read (the first met): bounds a write's cosines to names."""
LEARNT_EARLY_MAX = 1_024
"""Ids of keyed facts learnt before they were stored, kept until stored (a bound for writes that then failed)."""
SLOT_BUILD_LIMIT = 5_000
"""Newest keyed facts of a namespace read to learn its templates and attribute directions after a start."""
LINEAGE_DEPTH = 4
"""Generations of predecessors searched for the attribute of the slot a statement took over (see ``_lineage``)."""
SECOND_LOOK_TRACKED = 4_096
"""Per namespace, the newest statements stored unread that are kept for a second look (see ``second_look``)."""
SECOND_LOOK_GROWTH = 1.25
"""A statement stored unread is read again once its namespace knows this many times the keyed facts it knew at the
last reading (and one more at least): each is read a few dozen times over a namespace's life, not at every sweep."""


def fact_key(namespace: str, entity: str, attribute: str) -> bytes:
    """Key of the fact-key index: (namespace, entity, attribute) -> current memory id."""
    return f"{namespace}\0{entity}\0{attribute}".encode()


def entity_prefix(namespace: str, entity: str) -> bytes:
    """Prefix of the entity index keys of one entity."""
    return f"{namespace}\0{entity}\0".encode()


HEAD_PREFIX = b"\0head\0"
"""Head keys live in the dedup column family behind this prefix (no dedup key starts with a NUL)."""


def head_keys(namespace: str, tokens: Sequence[str]) -> list[bytes]:
    """Keys of a statement's heads: its words without the last 1..MAX_VALUE_TOKENS (a value said at the end),
    each head at least PAIR_MIN_FIXED words long. Two statements that differ only in their ending share one."""
    keys = []
    for cut in range(1, min(MAX_VALUE_TOKENS, len(tokens) - PAIR_MIN_FIXED) + 1):
        digest = hashlib.blake2b(" ".join(tokens[:-cut]).encode(), digest_size=12).digest()
        keys.append(HEAD_PREFIX + namespace.encode() + b"\0" + digest)
    return keys


def dedup_key(namespace: str, kind: int, content: str) -> bytes:
    """Key of the exact-duplicate index."""
    digest = hashlib.blake2b(normalise_text(content).encode(), digest_size=16).digest()
    return f"{namespace}\0{kind}\0".encode() + digest


@dataclass
class Decision:
    """What perception decided for one new memory."""

    confirm: memory_pb2.Memory | None = None
    """An existing memory the write restates: confirm it instead of storing a new one."""
    outcome: str = "created"
    """"created", "superseded", "backdated" or "confirmed"."""
    updated: list[tuple[memory_pb2.Memory, int, str]] = field(default_factory=list)
    """Other memories changed: (new record, state before, reason)."""


def _load(txn: Txn, memory_id: int) -> memory_pb2.Memory | None:
    raw = txn.get(CF_MEMORIES, memory_id.to_bytes(8, "big"))
    return None if raw is None else memory_pb2.Memory.FromString(raw)


def _confirm(existing: memory_pb2.Memory, restatement: memory_pb2.Memory, decision: Decision, now: float) -> Decision:
    before = existing.state
    existing.confidence = existing.confidence + (1.0 - existing.confidence) * CONFIRM_CONFIDENCE_GAIN
    existing.updated_at.CopyFrom(to_timestamp(now))  # the access it counts as is recorded by the engine
    said_at = from_timestamp(restatement.valid_from)
    if said_at > _confirmed_at(existing):
        existing.confirmed_valid_at.CopyFrom(restatement.valid_from)
    decision.confirm = existing
    decision.outcome = "confirmed"
    decision.updated.append((existing, before, "confirmed by restatement"))
    return decision


def _confirmed_at(record: memory_pb2.Memory) -> float:
    """World time up to which the record is known to hold: its latest confirmation, else its start."""
    start = from_timestamp(record.valid_from)
    return max(start, from_timestamp(record.confirmed_valid_at)) if record.HasField("confirmed_valid_at") else start


def unit_rows(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to length 1, in float32 (the same numbers whether a row comes alone or with others)."""
    out: npt.NDArray[np.float32] = matrix.astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """One vector scaled to length 1, in float32 (a zero vector stays zero)."""
    unit: npt.NDArray[np.float32] = (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)
    return unit


class RecentVectors:
    """Unit vectors of recently stored memories, by id: a direct-mapped ring over the dense ids.

    Slot ``id % capacity`` holds the newest id put there, so the ring keeps about
    the last ``capacity`` ids (older ids that were looked up stay until a newer id
    needs their slot). Vectors never change once stored, so an entry stays valid;
    callers put only durable ids. Not thread-safe: used under the commit lock.
    """

    def __init__(self, budget_bytes: int = VECTOR_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._ids = np.zeros(0, dtype=np.int64)
        self._vectors = np.zeros((0, 0), dtype=np.float32)

    def _ready(self, dimension: int) -> bool:
        if self._vectors.shape[1] != dimension:
            capacity = self.budget_bytes // max(4 * dimension, 1)
            if capacity <= 0:
                return False
            self._ids = np.full(capacity, -1, dtype=np.int64)
            self._vectors = np.zeros((capacity, dimension), dtype=np.float32)  # pages are touched on first use
        return True

    def put(self, ids: npt.NDArray[np.int64], units: npt.NDArray[np.float32]) -> None:
        """Remember the unit vectors of durable ``ids`` (a newer id keeps its slot)."""
        if ids.size == 0 or not self._ready(units.shape[1]):
            return
        slots = ids % self._ids.size
        newer = self._ids[slots] <= ids
        self._ids[slots[newer]] = ids[newer]
        self._vectors[slots[newer]] = units[newer]

    def get(self, ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32]]:
        """Which ``ids`` are held, and their vectors (rows of the misses are garbage)."""
        if self._ids.size == 0:
            return np.zeros(ids.size, dtype=bool), np.zeros((ids.size, 0), dtype=np.float32)
        slots = ids % self._ids.size
        return self._ids[slots] == ids, self._vectors[slots]


class _Version:
    """One version of a fact key, its record read only when a decision needs more than time and value."""

    __slots__ = ("_record", "_txn", "memory_id", "state", "valid_from_s", "value")

    def __init__(
        self,
        txn: Txn,
        memory_id: int,
        valid_from_s: float,
        value: str,
        state: int,
        record: memory_pb2.Memory | None = None,
    ) -> None:
        self._txn = txn
        self.memory_id = memory_id
        self.valid_from_s = valid_from_s
        self.value = value
        self.state = state
        """From the record when it was read, else from the hot columns (which mirror it once published)."""
        self._record = record

    def record(self) -> memory_pb2.Memory:
        """The full record (read once; perception changes it in place)."""
        if self._record is None:
            self._record = _load(self._txn, self.memory_id)
            if self._record is None:  # pragma: no cover - the version index and the records are written together
                raise KeyError(f"fact version {self.memory_id} has no record")
            self.state = self._record.state
        return self._record


@dataclass
class _Slots:
    """What a namespace's data says about slots: its entities' names, its keyed facts' templates and directions."""

    names: EntityNames = field(default_factory=EntityNames)
    templates: Templates = field(default_factory=Templates)
    values: Values = field(default_factory=Values)
    shapes: ValueShapes = field(default_factory=ValueShapes)
    centroids: AttributeCentroids = field(default_factory=AttributeCentroids)
    attributes: dict[str, list[str]] = field(default_factory=dict)
    """Per entity type, the attributes its keyed facts have named, in the order met."""
    attribute_names: AttributeNames | None = None
    """The embedded attribute names (shared by every namespace); None without an embedder."""
    learnt_early: set[int] = field(default_factory=set)
    """Keyed facts learnt before they were stored (see ``Perceiver._keyed_over_text``): not counted again."""
    keyed: int = 0
    """Keyed facts learnt: how much the namespace knows that a reading draws on (see ``Perceiver.second_look``)."""
    _words: dict[str, AttributeWords] = field(default_factory=dict)
    """Per entity type, what reads its attributes' names in a text (made again when the type gains one)."""

    def learn(self, record: memory_pb2.Memory, vector: npt.NDArray[np.float32] | None) -> None:
        """Count a stored record: its entity's name and, for a keyed fact, its template and direction."""
        if record.id in self.learnt_early:
            self.learnt_early.discard(record.id)
            return
        entity = record.entity or record.inferred.entity
        if entity:
            self.names.add(entity)
        if record.entity and record.fact.attribute:
            tokens = words(record.content)
            mentions = self.names.mentions(record.content, only=record.entity)
            value = words(record.fact.value)
            self.templates.learn(masked(tokens, mentions, record.entity), value, record.fact.attribute)
            self.values.learn(value, record.fact.attribute)
            self.shapes.learn(type_of(record.entity), record.fact.value, record.fact.attribute)
            self.keyed += 1
            known = self.attributes.setdefault(type_of(record.entity), [])
            if record.fact.attribute not in known and len(known) < NAMED_ATTRIBUTES:
                known.append(record.fact.attribute)
            if vector is not None:
                unit = _unit(vector)
                self.centroids.add(type_of(record.entity), record.fact.attribute, unit, record.entity)

    def agrees(self, kind: str, attribute: str, unit: npt.NDArray[np.float32], entity: str = "") -> bool:
        """Whether a text (about ``entity``) does not contradict ``attribute``: it lies no nearer another
        attribute's keyed facts of other entities (true while the type has too few keyed facts to tell)."""
        margin = self.centroids.margin(kind, attribute, unit, entity)
        return margin is None or margin >= -DISAGREEMENT_MARGIN

    def read(
        self,
        tokens: list[str],
        kind: str,
        unit: npt.NDArray[np.float32],
        entity: str = "",
        text: str = "",
        *,
        by_name: bool = True,
    ) -> TemplateMatch | None:
        """Which attribute a text (``tokens``: its words, entity masked; ``text``: as written) states: a keyed
        template it fits, else a known value it says when the text also lies nearer that attribute's keyed facts
        than any other's, else (believed as a name is, see read_name) a value shape only that attribute's keyed
        values had (``ValueShapes``), else the attribute every word of whose name it says (``AttributeWords``),
        else (unless not ``by_name``) the attribute whose embedded name it lies clearly nearest (``NAME_MARGIN``).
        The value is unknown but for the first two."""
        found = self.templates.match(tokens)
        if found is not None:
            return found
        found = self.values.match(tokens)
        if found is not None and self._directions_allow(kind, found.attribute, unit, entity, required=True):
            return found
        found = self.shapes.match(kind, text) if text else None
        # A clock time is also said in passing ("no meetings before 10:00"): the directions must agree, as for a
        # known value. A URL or an address is seldom anything but itself.
        required = found is not None and found.method == SHAPE_SAID_IN_PASSING
        if found is not None and self._directions_allow(kind, found.attribute, unit, entity, required=required):
            return TemplateMatch(found.attribute, (), SURE, 0, "value shape")
        said = self.read_words(tokens, kind, unit, entity)
        if said is not None:
            return said
        return self.read_name(kind, unit, entity) if by_name else None

    def read_words(
        self, tokens: list[str], kind: str, unit: npt.NDArray[np.float32], entity: str = ""
    ) -> TemplateMatch | None:
        """The attribute of the type whose name a word of the text says, believed as a name is (see read_name)."""
        known = self.attributes.get(kind, ())
        reader = self._words.get(kind)
        if reader is None or reader.size != len(known):
            reader = self._words[kind] = AttributeWords(known)
        attribute = reader.named(tokens)
        if attribute is None or not self._directions_allow(kind, attribute, unit, entity, required=False):
            return None
        return TemplateMatch(attribute, (), SURE, 0, "attribute word")

    def _directions_allow(
        self, kind: str, attribute: str, unit: npt.NDArray[np.float32], entity: str, *, required: bool
    ) -> bool:
        """Whether the attribute directions let a reading as ``attribute`` stand: the text lies nearer its keyed
        facts (of other entities) than any other attribute's; while the type has too few to tell, only when the
        directions are not ``required``."""
        margin = self.centroids.margin(kind, attribute, unit, entity)
        return margin > 0 if margin is not None else not required

    def read_name(self, kind: str, unit: npt.NDArray[np.float32], entity: str = "") -> TemplateMatch | None:
        """The attribute whose embedded name the text clearly means (see ``AttributeNames``), or None.

        Like a known value, a name is believed only where the attribute directions agree (the text lies nearer
        that attribute's keyed facts than any other's), or while there are none: "Caleb prefers a calendar invite
        with context for anything urgent" lies nearest the name "the user's meeting preference" but among other
        users' contact facts, and read by its name it retired Caleb's meeting preference.
        """
        if self.attribute_names is None:
            return None
        found = self.attribute_names.read(kind, self.attributes.get(kind, ()), unit)
        if found is None or found[1] < NAME_MARGIN:
            return None
        if not self._directions_allow(kind, found[0], unit, entity, required=False):
            return None
        return TemplateMatch(found[0], (), SURE, 0, "attribute name")


@dataclass
class _Slot:
    """A stored memory's slot as a new statement is compared with it."""

    record: memory_pb2.Memory
    similarity: float
    attribute: str
    value: tuple[str, ...] | None
    """The value's words, None when unknown."""
    tokens: list[str]
    """Its words with its entity's name masked."""
    unit: npt.NDArray[np.float32]
    relative: float = -1.0
    """Its cosine to the new statement once what every statement of the entity shares is taken out (see
    ``_entity_relative``); -1 while the entity has too few memories to tell."""
    read_as: str = ""
    """How its attribute was inferred (``InferredSlot.method``), at its write or now; empty for a keyed fact."""


def _entity_relative(
    matrix: npt.NDArray[np.float32], unit: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Cosines of ``unit`` to ``matrix[rows]`` in the complement of the entity's mean direction.

    Every statement about one entity shares its name and kind, so their raw cosines are high whatever they say;
    the mean of the entity's current memories carries that shared part, and what is left after projecting it out
    is what a statement says of the entity. Two statements of one slot stay alike there, two of different slots
    do not (tuning half, 1k: same slot median 0.38, other slots' 90th percentile 0.14, against 0.74 / 0.65 raw).
    """
    out = np.full(rows.size, -1.0)
    if matrix.shape[0] < RELATIVE_MIN_MEMORIES or rows.size == 0:
        return out
    mean = matrix.mean(axis=0, dtype=np.float64)
    norm = float(np.linalg.norm(mean))
    if norm == 0.0:
        return out
    mean /= norm
    own = float(unit @ mean)
    if own > RELATIVE_MAX_SHARED:
        return out
    theirs = np.asarray(matrix[rows] @ mean, dtype=np.float64)
    spread = np.sqrt(1.0 - own * own) * np.sqrt(np.maximum(1.0 - theirs * theirs, 1e-12))
    relative = (matrix[rows] @ unit - own * theirs) / spread
    return np.where(theirs > RELATIVE_MAX_SHARED, -1.0, relative)


def is_sure(confidence: float) -> bool:
    """Whether a stored inference's confidence is SURE or more. Records keep it as float32, where SURE (0.9) reads
    back as 0.8999999761581421: compared with the float64 constant, no inference stored as sure ever was."""
    return confidence >= float(np.float32(SURE))


def _reading(
    slots: _Slots,
    record: memory_pb2.Memory,
    tokens: list[str],
    kind: str,
    unit: npt.NDArray[np.float32],
    entity: str,
    *,
    by_name: bool = True,
) -> TemplateMatch | None:
    """Which attribute of ``entity`` an unkeyed statement states, as far as its namespace's data tells (templates
    any kind of memory; values, shapes and names only a statement that is not an event)."""
    match = slots.templates.match(tokens)
    if match is not None and not slots.agrees(kind, match.attribute, unit, entity):
        match = None  # a template two attributes' statements share ("<e> was migrated to <v>")
    if match is None and record.kind not in REPEATABLE_KINDS:
        match = slots.read(tokens, kind, unit, entity, record.content, by_name=by_name)
    return match


def _unread(record: memory_pb2.Memory) -> bool:
    """Whether a current statement (not an event) was stored without a key or an inferred attribute."""
    return (
        record.kind in SLOT_KINDS
        and record.kind not in REPEATABLE_KINDS
        and record.state in CURRENT_STATES
        and not record.fact.attribute
        and not record.inferred.attribute
    )


def _says(tokens: Sequence[str], value: Sequence[str]) -> bool:
    """Whether ``value``'s words stand in a row among ``tokens``."""
    size = len(value)
    return any(tuple(tokens[i : i + size]) == tuple(value) for i in range(len(tokens) - size + 1))


def _restates(tokens: Sequence[str], holder: _Slot) -> bool:
    """Whether a statement says again what ``holder`` says: its value's words in a row among the statement's
    (or, its value unknown, every word of its text, entity aside) ("Double-checked today and it still holds: Kofi
    relocated to Melbourne"). Likeness alone then does not make the older one outdated."""
    if holder.value:
        return _says(tokens, holder.value)
    own = collections.Counter(t for t in holder.tokens if t != ENTITY_MARK)
    return bool(own) and not own - collections.Counter(tokens)


JUDGE_SURE = 0.9
"""The pair judge's P(REPLACES) from which a newer statement retires the older one (reason "judged")."""
JUDGE_DOUBT = 0.75
"""... and from which it only doubts it (the older ranks below the newer, its hint says it may be outdated)."""
JUDGE_ASK = 0.5
"""Where a second judge decides (a reviewer taking supersessions, or the chat endpoint in policy mode LLM): from this
P(REPLACES) the pair is doubted and put to it, and the local judge retires nothing itself."""
JUDGED_DOUBTS_KEPT = 100_000
"""Doubts whose judged likelihood perception remembers (see ``Perceiver._judged_doubts``)."""
JUDGE_CANDIDATES = 4
"""Nearest candidates of one statement that the judge reads: a statement replaces one slot, and the slot it replaces
is among its nearest statements of the entity; farther ones would only add chances of a wrong call."""
JUDGE_TEXT_CANDIDATES = 16
"""Best word matches of a statement about no known entity that are searched for its judge candidates."""


class Perceiver:
    """Decides how a new memory relates to what is stored."""

    def __init__(
        self,
        settings: PerceptionSettings,
        columns: MemoryColumns | None = None,
        *,
        vector_cache_bytes: int = VECTOR_CACHE_BYTES,
        version_cache_entries: int = VERSION_CACHE_ENTRIES,
        embed: Embed | None = None,
        judgements: JudgeQueue | None = None,
        doubt_by_likeness: bool = True,
    ) -> None:
        self.settings = settings
        self.columns = columns
        """The hot columns, when available: candidates come from them instead of a prefix scan."""
        self.recent_vectors = RecentVectors(vector_cache_bytes)
        """Unit vectors of recent entity memories, so soft-conflict checks of busy entities skip RocksDB."""
        self._version_keys: dict[int, tuple[float, str]] = {}
        """Durable fact version id -> (valid_from in seconds, normalised value): neither ever changes."""
        self.version_cache_entries = version_cache_entries
        """Most entries of ``_version_keys`` (0 = read every version's record at every keyed write)."""
        self._masked: dict[int, list[str]] = {}
        """Durable memory id -> its words with its entity masked (see ``_masked_words``)."""
        self._slots: dict[str, _Slots] = {}
        """Per namespace, built on its first write after a start, then kept current by ``register``."""
        self.attribute_names = AttributeNames(embed, attribute_phrase) if embed is not None else None
        """Embedded attribute names, with an embedder (see ``AttributeNames``)."""
        self.find_words: Callable[[str, str], npt.NDArray[np.int64]] | None = None
        """Ids of a namespace's memories that hold words of a text, best match first (the engine's word index)."""
        self._unread: dict[str, dict[int, int]] = {}
        """Per namespace, statements about an entity stored without an attribute -> the keyed facts the namespace
        knew at their last reading, oldest first (see ``second_look``). In RAM; a start hands the stored ones
        over again (``seed_unread``)."""
        self.judgements = judgements
        """Where pairs no exact evidence settles go to be judged off the write path; None leaves them to vector
        likeness alone (no judge)."""
        self.doubt_by_likeness = doubt_by_likeness
        """Whether two statements of one entity whose slots nothing tells doubt each other by vector likeness alone
        (``NEAR_DOUBT``, ``SIMILARITY_DOUBT``, ``RELATIVE_DOUBT``). Such a doubt only orders recall; with a reranker,
        which puts the newer of two answers first at read time, it adds nothing there and marks additions ("Compass
        has a secondary on-call as well") as possibly outdated (RESULTS, twenty-ninth session)."""
        self._judged_doubts: dict[int, float] = {}
        """Doubted id -> the judge's P(REPLACES) for the statement that doubts it (latest JUDGED_DOUBTS_KEPT): a
        likelier replacement judged later takes the doubt over. Lost at a restart, when the doubt stays as it is."""
        self._unattached: collections.deque[tuple[str, int]] = collections.deque(maxlen=UNATTACHED_RECENT)
        """(namespace, id) of the latest statements stored without an entity: the word index holds a memory only
        once its write is durable, and a batch may name an entity in one item and declare it in the next."""

    def _recent_about(self, txn: Txn, namespace_name: str, entity_name: str) -> list[int]:
        """The most recent current memories about an entity in a namespace (durable ones), newest first."""
        columns = self.columns
        if columns is None:
            prefix = entity_prefix(namespace_name, entity_name)
            keys = txn.prefix_keys(CF_ENTITIES, prefix, newest_first=True, limit=SOFT_CONFLICT_CANDIDATES)
            return [key_u64(k[-8:]) for k in keys]
        entity = columns.entities.lookup(entity_name)
        namespace = columns.namespaces.lookup(namespace_name)
        if entity == NO_CODE or namespace == NO_CODE:
            return []
        # Newest first, from the newest ids only, more of them while too few are current here: a busy entity has
        # tens of thousands of ids, and copying them all at every write made its writes slower as it grew (issue 42).
        newest = 2 * SOFT_CONFLICT_CANDIDATES
        while True:
            ids = columns.entity_ids(entity, newest=newest)
            listed = ids.size
            ids = ids[ids < columns.size][::-1]
            state = columns.state[ids]
            ids = ids[(columns.namespace[ids] == namespace) & ((state == ACTIVE) | (state == ARCHIVED))]
            if ids.size >= SOFT_CONFLICT_CANDIDATES or listed < newest:
                recent: list[int] = ids[:SOFT_CONFLICT_CANDIDATES].tolist()
                return recent
            newest *= 4

    @staticmethod
    def _pending_about(txn: Txn, namespace: str, entity: str, durable: Sequence[int]) -> list[int]:
        """The memories about an entity written earlier in this write's group (not durable yet), oldest first: the
        newest SOFT_CONFLICT_CANDIDATES, as many as it compares with among the durable ones.

        Sent alone, a write sees only the durable window; a batch of thousands about one entity made each of its
        items compare with every earlier one, quadratic in the batch (issue 42). Within that many, a batch is
        perceived as before.
        """
        known = set(durable)
        newest = txn.pending(CF_ENTITIES, entity_prefix(namespace, entity), newest=SOFT_CONFLICT_CANDIDATES)
        return [i for i in newest if i not in known]

    def perceive(self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float) -> Decision:
        """Classify ``record`` (not yet stored, id assigned) and adjust it and its neighbours."""
        decision = Decision()
        if record.entity:
            self._attach_named_before(txn, record, now, decision)
        if record.fact.attribute and record.entity:
            self._hard(txn, record, now, decision)
            if decision.confirm is None and record.state in CURRENT_STATES:
                self._keyed_over_text(txn, record, vector, now, decision)
            return decision
        duplicate = self._exact_duplicate(txn, record) if record.kind not in REPEATABLE_KINDS else None
        if duplicate is not None:
            return _confirm(duplicate, record, decision, now)
        if record.kind in SLOT_KINDS:
            slots = self._namespace(txn, record.namespace)
            entity = record.entity or self._named_entity(slots, record.content, vector)
            if entity:
                if not record.entity:
                    record.inferred.entity = entity
                    record.inferred.method = "name"
                self._infer(txn, record, entity, vector, now, decision, slots)
                if decision.confirm is not None or decision.outcome != "created" or record.state not in CURRENT_STATES:
                    return decision
            elif record.kind not in REPEATABLE_KINDS:
                self._textual(txn, record, vector, now, decision)
                return decision
        if record.entity:
            return self._soft(txn, record, vector, now, decision)
        return decision

    def _attach_named_before(self, txn: Txn, record: memory_pb2.Memory, now: float, decision: Decision) -> None:
        """The first memory to declare an entity: statements that named it before it was known are about it now.

        A text naming an entity no memory had declared yet ("the analytics-scheduler service is served on port
        9090") was stored without one, so no later statement of the entity could retire it. The word index finds
        such texts (up to ``ATTACH_CANDIDATES``, best match first); those that name the entity get it as their
        inferred entity, recorded as a change of each.
        """
        columns, find = self.columns, self.find_words
        slots = self._namespace(txn, record.namespace)
        entity = record.entity
        if columns is None or find is None or entity in slots.names:
            return
        slots.names.add(entity)
        if entity not in slots.names:
            return  # a name without letters is never learnt (see EntityNames.add)
        # Only what the word index cannot hold yet: written, not yet published (this batch, or one committing).
        recent = [i for name, i in self._unattached if name == record.namespace and i >= columns.size]
        ids = np.zeros(0, dtype=np.int64)
        namespace = columns.namespaces.lookup(record.namespace)
        if namespace != NO_CODE:  # else nothing of the namespace is durable yet
            ids = find(record.namespace, " ".join(name_of(entity)))[:ATTACH_CANDIDATES]
            ids = ids[ids < columns.size]
            current = np.isin(columns.state[ids], CURRENT_STATES)
            ids = ids[current & (columns.entity[ids] == NO_CODE) & (columns.namespace[ids] == namespace)]
        prefix = entity_prefix(record.namespace, entity)
        for memory_id in dict.fromkeys(ids.tolist() + recent):
            existing = _load(txn, memory_id)
            if existing is None or existing.entity or existing.inferred.entity or existing.kind not in SLOT_KINDS:
                continue
            if existing.state not in CURRENT_STATES or existing.fact.attribute:
                continue
            if not slots.names.mentions(existing.content, only=entity):
                continue
            existing.inferred.entity = entity
            existing.inferred.method = "name"
            existing.updated_at.CopyFrom(to_timestamp(now))
            txn.put(CF_ENTITIES, prefix + memory_id.to_bytes(8, "big"), b"")
            decision.updated.append((existing, existing.state, f"names {entity}, which a later memory declared"))

    def register(self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32] | None = None) -> None:
        """Index a stored record for later perception (dedup key, fact versions, entity).

        ``vector``, the record's vector when the caller has it at hand, is kept in RAM once the write is durable.
        """
        entity = record.entity or record.inferred.entity
        if entity and vector is not None:
            ids = np.asarray([record.id], dtype=np.int64)
            units = unit_rows(vector.reshape(1, -1))
            txn.on_commit(lambda: self.recent_vectors.put(ids, units))
            txn.add_pending(PENDING_UNITS, record.id, units[0])
        slots = self._slots.get(record.namespace)
        if slots is not None and entity:
            # At once, not on commit: the next statement of the same batch may name this entity or use this
            # template. A write that then fails leaves one count too many, which no decision hinges on.
            slots.learn(record, vector)
        if not entity and record.kind in SLOT_KINDS and not record.fact.attribute:
            self._unattached.append((record.namespace, record.id))
        if entity and _unread(record):
            unread = self._unread.setdefault(record.namespace, {})
            unread[record.id] = slots.keyed if slots is not None else 0
            if len(unread) > SECOND_LOOK_TRACKED:
                del unread[next(iter(unread))]
        if not record.fact.attribute and record.kind not in REPEATABLE_KINDS:
            txn.put(CF_DEDUP, dedup_key(record.namespace, record.kind, record.content), record.id.to_bytes(8, "big"))
            if not entity and record.kind in SLOT_KINDS and record.state in CURRENT_STATES:
                for key in head_keys(record.namespace, words(record.content)):
                    txn.put(CF_DEDUP, key, record.id.to_bytes(8, "big"))
        if entity:
            prefix = entity_prefix(record.namespace, entity)
            txn.put(CF_ENTITIES, prefix + record.id.to_bytes(8, "big"), b"")
            txn.add_pending(CF_ENTITIES, prefix, record.id)
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            txn.put(CF_FACT_VERSIONS, key + b"\0" + record.id.to_bytes(8, "big"), b"")
            txn.add_pending(CF_FACT_VERSIONS, key, record.id)
            if record.state in CURRENT_STATES:
                txn.put(CF_FACTS, key, record.id.to_bytes(8, "big"))

    def seed_unread(self, records: Iterable[memory_pb2.Memory]) -> None:
        """Keep for a second look the statements stored unread before this start (how much their namespace knew at
        their last reading is unknown: each is read at the next sweep). Call it where writes run."""
        for record in records:
            if (record.entity or record.inferred.entity) and _unread(record):
                unread = self._unread.setdefault(record.namespace, {})
                if len(unread) < SECOND_LOOK_TRACKED:
                    unread.setdefault(record.id, -1)

    def second_look_due(self, txn: Txn, limit: int) -> list[int]:
        """Ids of statements stored unread whose namespace has learnt enough since their last reading (oldest
        first, at most ``limit``). Call it where writes run (a store mutation): registering changes the lists."""
        due: list[int] = []
        for namespace, unread in self._unread.items():
            slots = self._namespace(txn, namespace)
            for memory_id, known in unread.items():
                if slots.keyed > known and slots.keyed >= known * SECOND_LOOK_GROWTH:
                    due.append(memory_id)
                    if len(due) >= limit:
                        return due
        return due

    @property
    def unread_tracked(self) -> int:
        """Statements stored unread that are kept for a second look."""
        return sum(len(unread) for unread in self._unread.values())

    def drop_unread(self, memory_id: int) -> None:
        """Forget a statement kept for a second look (gone from the store)."""
        for unread in self._unread.values():
            unread.pop(memory_id, None)

    def second_look(
        self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float, decision: Decision
    ) -> bool:
        """Read again a statement stored unread, with what its namespace has learnt since, and settle it against
        the current holders of the slot it states; returns whether it was read (``record.inferred`` then says as
        what, and ``decision`` what changed: either may now be the other's history, by world time).

        At its write a statement is read only with the templates, values and names of the keyed facts stored
        before it. "Astrid is on 6:00-14:00 now" written before any working hours were keyed was stored unread,
        and nothing compared it with the keyed hours it replaced: a later statement of the entity reads it again
        (``_slot_candidates``) only to settle it against itself. Run off the write path (governance sweeps).
        """
        unread = self._unread.get(record.namespace, {})
        entity = record.entity or record.inferred.entity
        if not entity or not _unread(record):
            unread.pop(record.id, None)
            return False
        slots = self._namespace(txn, record.namespace)
        unread[record.id] = slots.keyed
        unit = _unit(vector)
        tokens = self._masked_words(slots, record, entity)
        # Only what the namespace's own data says (templates, values, shapes, attribute words), not an embedded
        # name, which learns nothing from the keyed facts written since: a retirement this late hits a memory the
        # agent has used for a while ("The best way to reach Kofi is a calendar invite" read by name as his
        # meeting preference, tuning half seed 8).
        match = _reading(slots, record, tokens, type_of(entity), unit, entity, by_name=False)
        if match is None and record.supersedes:
            match = self._lineage(txn, slots, record, entity, by_name=False)
        if match is None or not is_sure(match.confidence):
            return False
        unread.pop(record.id, None)
        attribute = match.attribute
        inferred = record.inferred
        inferred.entity, inferred.attribute, inferred.value = entity, attribute, " ".join(match.value)
        inferred.confidence, inferred.method = match.confidence, match.method
        if self.settings.is_multi_valued(record.namespace, attribute):
            return True
        holders = [
            holder.record
            for holder in self._slot_candidates(txn, record.namespace, entity, unit, slots, keyed=True)
            if holder.record.id != record.id and holder.attribute == attribute and not _restates(tokens, holder)
        ]
        # The keyed value of the slot, however far its wording lies from this statement's.
        raw = txn.get(CF_FACTS, fact_key(record.namespace, entity, attribute))
        keyed = _load(txn, key_u64(raw)) if raw is not None else None
        if (
            keyed is not None
            and keyed.state in CURRENT_STATES
            and all(h.id != keyed.id for h in holders)
            and not _says(tokens, words(keyed.fact.value))
        ):
            holders.append(keyed)
        for holder in holders:
            why = f"inferred on a second look: {match.method} of {attribute}"
            self._settle(txn, record, holder, now, decision, why)
            if record.state not in CURRENT_STATES:
                break
        return True

    def unregister(self, txn: Txn, record: memory_pb2.Memory) -> None:
        """Drop a deleted record from the perception indexes."""
        key_id = record.id.to_bytes(8, "big")
        if not record.fact.attribute and record.kind not in REPEATABLE_KINDS:
            dedup = dedup_key(record.namespace, record.kind, record.content)
            if txn.get(CF_DEDUP, dedup) == key_id:
                txn.delete(CF_DEDUP, dedup)
            for key in head_keys(record.namespace, words(record.content)):
                if txn.get(CF_DEDUP, key) == key_id:
                    txn.delete(CF_DEDUP, key)
        if record.entity or record.inferred.entity:
            txn.delete(CF_ENTITIES, entity_prefix(record.namespace, record.entity or record.inferred.entity) + key_id)
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            txn.delete(CF_FACT_VERSIONS, key + b"\0" + key_id)

    def release_current(self, txn: Txn, record: memory_pb2.Memory) -> None:
        """If ``record`` was its fact key's current value, the key has no current value any more."""
        if record.entity and record.fact.attribute:
            key = fact_key(record.namespace, record.entity, record.fact.attribute)
            if txn.get(CF_FACTS, key) == record.id.to_bytes(8, "big"):
                txn.delete(CF_FACTS, key)

    # ---- hard conflicts ---------------------------------------------------------------------

    def versions(self, txn: Txn, key: bytes) -> list[memory_pb2.Memory]:
        """Every stored version of a fact key, oldest valid_from first."""
        ids = [key_u64(k[-8:]) for k in txn.prefix_keys(CF_FACT_VERSIONS, key + b"\0")]
        ids += [i for i in txn.pending(CF_FACT_VERSIONS, key) if i not in ids]
        records = [r for r in (_load(txn, i) for i in ids) if r is not None]
        return sorted(records, key=lambda r: (from_timestamp(r.valid_from), r.id))

    def _versions(self, txn: Txn, key: bytes) -> list[_Version]:
        """Every version of a fact key, oldest valid_from first, reading records only where needed.

        A version this group wrote is read from the overlay; a durable one takes its
        time and value from RAM (read once) and its state from the hot columns.
        """
        durable = [key_u64(k[-8:]) for k in txn.prefix_keys(CF_FACT_VERSIONS, key + b"\0")]
        known = set(durable)
        pending = [i for i in txn.pending(CF_FACT_VERSIONS, key) if i not in known]
        columns = self.columns
        cache = self._version_keys
        out: list[_Version] = []
        for memory_id in durable + pending:
            slot = memory_id.to_bytes(8, "big")
            cached = cache.get(memory_id)
            if (
                cached is not None
                and columns is not None
                and memory_id < columns.size
                and not txn.in_group(CF_MEMORIES, slot)
            ):
                out.append(_Version(txn, memory_id, cached[0], cached[1], int(columns.state[memory_id])))
                continue
            loaded = _load(txn, memory_id)
            if loaded is None:
                continue
            valid_from_s, value = from_timestamp(loaded.valid_from), normalise_text(loaded.fact.value)
            if memory_id in known and self.version_cache_entries > 0:
                cache[memory_id] = (valid_from_s, value)
            out.append(_Version(txn, memory_id, valid_from_s, value, loaded.state, loaded))
        if len(cache) > self.version_cache_entries:
            for stale in list(itertools.islice(cache, len(cache) // 2)):  # oldest entries first
                del cache[stale]
        out.sort(key=lambda v: (v.valid_from_s, v.memory_id))
        return out

    def _hard(self, txn: Txn, record: memory_pb2.Memory, now: float, decision: Decision) -> Decision:
        key = fact_key(record.namespace, record.entity, record.fact.attribute)
        versions = self._versions(txn, key)
        value = normalise_text(record.fact.value)
        new_from = from_timestamp(record.valid_from)
        multi = self.settings.is_multi_valued(record.namespace, record.fact.attribute)
        for version in versions:
            # The same value restated: confirm it (current) or the identical historical entry.
            if version.value != value or not (version.state in CURRENT_STATES or version.valid_from_s == new_from):
                continue
            existing = version.record()  # authoritative state: confirm only what the record says
            if existing.state in CURRENT_STATES or version.valid_from_s == new_from:
                return _confirm(existing, record, decision, now)
        if multi:
            return decision
        raw_current = txn.get(CF_FACTS, key)
        current = _load(txn, key_u64(raw_current)) if raw_current else None
        if current is not None and current.state not in CURRENT_STATES:
            current = None
        if current is None:
            return decision
        current_from = from_timestamp(current.valid_from)
        if current_from < new_from < _confirmed_at(current):
            return self._overruled(record, current, now, decision)
        if new_from > current_from or (new_from == current_from and record.confidence > current.confidence):
            before = current.state
            current.state = OBSOLETE
            current.valid_to.CopyFrom(record.valid_from)
            current.superseded_by = record.id
            current.updated_at.CopyFrom(to_timestamp(now))
            record.supersedes.append(current.id)
            decision.outcome = "superseded"
            decision.updated.append((current, before, f"superseded by memory {record.id}"))
            return decision
        return self._backdate(record, versions, new_from, now, decision)

    def _overruled(
        self, record: memory_pb2.Memory, current: memory_pb2.Memory, now: float, decision: Decision
    ) -> Decision:
        """A late value from after the current one started but before a restatement said the current one held.

        "It turns out Olga took over on the 22nd" after "Double-checked on the 24th: Jana leads it": Olga's
        value held at most until the 24th. History, closed at that confirmation, superseded by the current.
        """
        record.state = OBSOLETE
        record.valid_to.CopyFrom(current.confirmed_valid_at)
        record.superseded_by = current.id
        current.supersedes.append(record.id)
        current.updated_at.CopyFrom(to_timestamp(now))
        decision.updated.append((current, current.state, f"now supersedes late fact {record.id}"))
        decision.outcome = "backdated"
        return decision

    def _backdate(
        self,
        record: memory_pb2.Memory,
        versions: list[_Version],
        new_from: float,
        now: float,
        decision: Decision,
    ) -> Decision:
        """A late-arriving older value: history, closed by the next newer version, never current."""
        later = [v for v in versions if v.valid_from_s >= new_from]
        first_from = min(v.valid_from_s for v in later)
        tied = [v.record() for v in later if v.valid_from_s == first_from]
        # Among versions of the same world time, the one that won (current, else most trusted) closes it.
        successor = next((v for v in tied if v.state in CURRENT_STATES), max(tied, key=lambda v: v.confidence))
        record.state = OBSOLETE
        record.valid_to.CopyFrom(successor.valid_from)
        record.superseded_by = successor.id
        earlier = [v for v in versions if v.valid_from_s < new_from]
        # Links stay two-way: the successor now supersedes the late fact, in place of its old predecessor.
        replaced = [i for i in successor.supersedes if not earlier or i != earlier[-1].memory_id]
        if earlier and earlier[-1].record().superseded_by != successor.id:
            replaced.append(earlier[-1].memory_id)  # the predecessor was not linked to the successor: keep its link
        del successor.supersedes[:]
        successor.supersedes.extend([*replaced, record.id])
        successor.updated_at.CopyFrom(to_timestamp(now))
        decision.updated.append((successor, successor.state, f"now supersedes late fact {record.id}"))
        if earlier:
            predecessor = earlier[-1].record()
            closes_after = not predecessor.HasField("valid_to") or from_timestamp(predecessor.valid_to) > new_from
            if closes_after:
                before = predecessor.state
                predecessor.valid_to.CopyFrom(record.valid_from)
                predecessor.superseded_by = record.id
                predecessor.updated_at.CopyFrom(to_timestamp(now))
                record.supersedes.append(predecessor.id)
                decision.updated.append((predecessor, before, f"validity closed by late fact {record.id}"))
        decision.outcome = "backdated"
        return decision

    # ---- duplicates and soft conflicts ------------------------------------------------------

    def _unit_vectors(self, txn: Txn, ids: list[int], durable: int) -> tuple[list[int], npt.NDArray[np.float32]]:
        """The ids that have a vector, in order, and their unit vectors (one row each).

        The first ``durable`` ids are published, hence durable: their vectors come
        from RAM when held there, and those read from RocksDB are kept for the next
        write. (One evicted earlier in this group may still come from RAM; its record
        is gone from the overlay, so it is skipped like a missing vector would be.)
        """
        wanted = np.asarray(ids, dtype=np.int64)
        held, rows = self.recent_vectors.get(wanted)
        held[durable:] = False  # this group's own writes: not in RAM, but as ``register`` kept them
        kept = [(position, txn.pending(PENDING_UNITS, ids[position])) for position in range(durable, len(ids))]
        kept = [(position, units[-1]) for position, units in kept if units]
        if kept:
            positions = np.asarray([position for position, _ in kept], dtype=np.int64)
            units = np.stack([unit for _, unit in kept])
            if rows.shape[1] != units.shape[1]:
                rows = np.zeros((wanted.size, units.shape[1]), dtype=np.float32)
            rows[positions] = units
            held[positions] = True
        missing = np.flatnonzero(~held).tolist()
        if not missing:
            return ids, rows
        raws = txn.get_many(CF_VECTORS, [ids[i].to_bytes(8, "big") for i in missing])
        read = [(i, raw) for i, raw in zip(missing, raws, strict=True) if raw is not None]
        if read:
            positions = np.asarray([i for i, _ in read], dtype=np.int64)
            units = unit_rows(np.stack([np.frombuffer(raw, dtype="<f4") for _, raw in read]))
            if rows.shape[1] != units.shape[1]:
                rows = np.zeros((wanted.size, units.shape[1]), dtype=np.float32)
            rows[positions] = units
            held[positions] = True
            durable_read = positions[positions < durable]
            self.recent_vectors.put(wanted[durable_read], rows[durable_read])
        present = np.flatnonzero(held)
        return wanted[present].tolist(), rows[present]

    def _exact_duplicate(self, txn: Txn, record: memory_pb2.Memory) -> memory_pb2.Memory | None:
        raw = txn.get(CF_DEDUP, dedup_key(record.namespace, record.kind, record.content))
        if raw is None:
            return None
        existing = _load(txn, key_u64(raw))
        if existing is None or existing.state not in CURRENT_STATES or existing.entity != record.entity:
            return None
        return existing

    def _soft(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        vector: npt.NDArray[np.float32],
        now: float,
        decision: Decision,
    ) -> Decision:
        durable = self._recent_about(txn, record.namespace, record.entity)
        ids = durable + self._pending_about(txn, record.namespace, record.entity, durable)
        if not ids:
            return decision
        # Vectors first (RAM, else one database call; no parsing); records only for the close ones.
        present, matrix = self._unit_vectors(txn, ids, len(durable))
        if not present:
            return decision
        unit = vector / np.linalg.norm(vector)
        close_enough = min(self.settings.soft_conflict_similarity, self.settings.duplicate_similarity)
        candidates: list[memory_pb2.Memory] = []
        close: list[float] = []
        # A record this write already changed (a doubt) is changed further in place: one object, one save.
        changing = {other.id: other for other, _, _ in decision.updated}
        for memory_id, similarity in zip(present, (matrix @ unit).tolist(), strict=True):
            if similarity < close_enough:
                continue
            existing = changing.get(memory_id) or _load(txn, memory_id)
            if existing is None or existing.state not in CURRENT_STATES or existing.fact.attribute:
                continue  # keyed facts are governed by their key, not by similarity
            candidates.append(existing)
            close.append(similarity)
        if not candidates:
            return decision
        similarities = np.asarray(close, dtype=np.float32)
        text = normalise_text(record.content)
        best = int(np.argmax(similarities))
        if (
            similarities[best] >= self.settings.duplicate_similarity
            and normalise_text(candidates[best].content) == text
        ):
            return _confirm(candidates[best], record, decision, now)
        threshold = self.settings.soft_conflict_similarity
        for existing, similarity in zip(candidates, similarities.tolist(), strict=True):
            if similarity < threshold or normalise_text(existing.content) == text:
                continue
            strength = INCONSISTENCY_STEP * max((similarity - threshold) / max(1.0 - threshold, 1e-6), 0.1)
            if from_timestamp(existing.valid_from) > from_timestamp(record.valid_from):
                # The stored one is newer in world time: the late arrival is the older, doubtful one.
                if record.kind not in REPEATABLE_KINDS:
                    record.inconsistency = min(1.0, record.inconsistency + strength)
                continue
            if existing.kind in REPEATABLE_KINDS:
                # An event that happened stays true: a later statement alike in words (the same meeting on another
                # date, the next stand-up) is another event, not evidence that this one is outdated.
                continue
            before = existing.state
            existing.inconsistency = min(1.0, existing.inconsistency + strength)
            existing.updated_at.CopyFrom(to_timestamp(now))
            if existing.id not in changing:
                decision.updated.append((existing, before, f"soft conflict with memory {record.id}"))
        return decision

    # ---- slots of plain-text statements (see slots.py) -----------------------------------------

    def _namespace(self, txn: Txn, namespace: str) -> _Slots:
        """The namespace's slot evidence, learnt from its stored entities and newest keyed facts on first use."""
        slots = self._slots.get(namespace)
        if slots is not None:
            return slots
        slots = self._slots[namespace] = _Slots(attribute_names=self.attribute_names)
        columns = self.columns
        if columns is None:
            return slots
        code = columns.namespaces.lookup(namespace)
        if code == NO_CODE:
            return slots
        ids = columns.namespace_ids(code)
        ids = ids[ids < columns.size]
        for entity in np.unique(columns.entity[ids]).tolist():
            if entity != NO_CODE:
                slots.names.add(columns.entities.string(int(entity)))
        with_fields = ids[columns.fields[ids] != NO_CODE][-SLOT_BUILD_LIMIT:]
        if with_fields.size == 0:
            return slots
        keys = [int(i).to_bytes(8, "big") for i in with_fields.tolist()]
        records = [memory_pb2.Memory.FromString(raw) for raw in txn.get_many(CF_MEMORIES, keys) if raw is not None]
        records = [r for r in records if r.fact.attribute and r.entity]
        for record in records:
            if record.inferred.entity:
                slots.names.add(record.inferred.entity)
        raws = txn.get_many(CF_VECTORS, [r.id.to_bytes(8, "big") for r in records])
        for record, raw in zip(records, raws, strict=True):
            slots.learn(record, None if raw is None else np.frombuffer(raw, dtype="<f4"))
        return slots

    @staticmethod
    def _named_entity(slots: _Slots, content: str, vector: npt.NDArray[np.float32]) -> str:
        """The entity the text names, or "". Of several ("Page Ana if the billing service breaks"), the one whose
        type's keyed facts the text resembles most (the first named while no type tells)."""
        mentions = slots.names.mentions(content)
        # Of two things of one kind, the one named whole is meant, not the one a single word of its name may name
        # ("Gateway config: the ingest worker allows 5000 requests per second" is about the ingest worker, not
        # the notifications gateway). Across kinds, a person is called by one word: what is said decides (below).
        whole = {m.entity for m in mentions if m.end - m.start == len(slots.names.name(m.entity))}
        kinds = {type_of(entity) for entity in whole}
        found = list(dict.fromkeys(m.entity for m in mentions if m.entity in whole or type_of(m.entity) not in kinds))
        if len(found) < 2:
            return found[0] if found else ""
        unit = _unit(vector)
        fits = [slots.centroids.resemblance(type_of(entity), unit) for entity in found]
        known = [(fit, -position) for position, fit in enumerate(fits) if fit is not None]
        if not known or len({type_of(entity) for entity in found}) < 2:
            return found[0]
        return found[-max(known)[1]]

    def _slot_candidates(
        self,
        txn: Txn,
        namespace: str,
        entity: str,
        unit: npt.NDArray[np.float32],
        slots: _Slots,
        *,
        keyed: bool,
        floor: float = SLOT_MIN_SIMILARITY,
    ) -> list[_Slot]:
        """The current memories of ``entity`` nearest ``unit`` (cosine ``floor`` or more) that may hold a slot (keyed
        ones too unless not ``keyed``), nearest first, with their slot as far as known."""
        durable = self._recent_about(txn, namespace, entity)
        ids = durable + self._pending_about(txn, namespace, entity, durable)
        if not ids:
            return []
        present, matrix = self._unit_vectors(txn, ids, len(durable))
        if not present:
            return []
        similarities = matrix @ unit
        order = np.argsort(-similarities)[:SLOT_CANDIDATES]
        order = order[similarities[order] >= floor]
        relative = _entity_relative(matrix, unit, order)
        out: list[_Slot] = []
        for rank, position in enumerate(order.tolist()):
            existing = _load(txn, present[position])
            if existing is None or existing.state not in CURRENT_STATES:
                continue
            if existing.kind not in SLOT_KINDS or (existing.fact.attribute and not keyed):
                continue
            tokens = self._masked_words(slots, existing, entity)
            value: tuple[str, ...] | None
            read_as = ""
            if existing.fact.attribute:
                attribute, value = existing.fact.attribute, tuple(words(existing.fact.value))
            else:
                attribute, read_as = existing.inferred.attribute, existing.inferred.method
                value = tuple(existing.inferred.value.split()) if existing.inferred.value else None
                if not attribute and existing.kind not in REPEATABLE_KINDS:
                    # Templates, values and attribute names learnt since it was written may say now what it states.
                    late = slots.read(tokens, type_of(entity), matrix[position], entity, existing.content)
                    if late is None and existing.supersedes:
                        late = self._lineage(txn, slots, existing, entity)
                    if late is not None:
                        attribute, value, read_as = late.attribute, late.value or None, late.method
            out.append(
                _Slot(
                    existing,
                    float(similarities[position]),
                    attribute,
                    value,
                    tokens,
                    matrix[position],
                    float(relative[rank]),
                    read_as,
                )
            )
        return out

    def _lineage(
        self, txn: Txn, slots: _Slots, record: memory_pb2.Memory, entity: str, *, by_name: bool = True
    ) -> TemplateMatch | None:
        """The attribute of the slot an unread statement took over, from the statements it retired or made history.

        Its predecessors held its slot, so what one of them states (keyed, inferred, or read now) it states too:
        "Milestone changed on Tufa: the dogfood release" reads as a milestone once milestones are keyed, and "The
        Tufa project is still working towards the dogfood release", which took its place by likeness, is that
        milestone's holder though it names none.
        """
        columns = self.columns
        seen = {record.id}
        generation = [i for i in record.supersedes if i not in seen]
        for _ in range(LINEAGE_DEPTH):
            older_ids: list[int] = []
            for memory_id in generation:
                seen.add(memory_id)
                older = _load(txn, memory_id)
                if older is None or (older.entity or older.inferred.entity) != entity:
                    continue
                attribute = older.fact.attribute or older.inferred.attribute
                if not attribute and older.kind not in REPEATABLE_KINDS:
                    durable = int(columns is not None and memory_id < columns.size)
                    present, units = self._unit_vectors(txn, [memory_id], durable)
                    tokens = self._masked_words(slots, older, entity)
                    found = (
                        slots.read(tokens, type_of(entity), units[0], entity, older.content, by_name=by_name)
                        if present
                        else None
                    )
                    attribute = found.attribute if found is not None else ""
                if attribute:
                    return TemplateMatch(attribute, (), SURE, 0, "lineage")
                older_ids.extend(i for i in older.supersedes if i not in seen)
            generation = older_ids
        return None

    def _masked_words(self, slots: _Slots, record: memory_pb2.Memory, entity: str) -> list[str]:
        """A stored memory's words with its entity masked, kept in RAM (text and entity never change)."""
        cached = self._masked.get(record.id)
        if cached is None:
            cached = masked(words(record.content), slots.names.mentions(record.content, only=entity), entity)
            if self.columns is None or record.id >= self.columns.size:
                return cached  # not yet published: its id may still be handed out again
            if len(self._masked) >= MASKED_CACHE_ENTRIES:
                for stale in list(itertools.islice(self._masked, len(self._masked) // 2)):  # oldest first
                    del self._masked[stale]
            self._masked[record.id] = cached
        return cached

    def _infer(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        entity: str,
        vector: npt.NDArray[np.float32],
        now: float,
        decision: Decision,
        slots: _Slots,
    ) -> None:
        """Infer the slot of an unkeyed statement about ``entity`` and settle it against the slot's holders."""
        unit = _unit(vector)
        mentions = slots.names.mentions(record.content, only=entity)
        tokens = masked(words(record.content), mentions, entity)
        kind = type_of(entity)
        match = _reading(slots, record, tokens, kind, unit, entity)
        inferred = record.inferred
        inferred.entity = entity
        if match is not None:
            inferred.attribute, inferred.value = match.attribute, " ".join(match.value)
            inferred.confidence, inferred.method = match.confidence, match.method
        retire: list[tuple[_Slot, float, str]] = []
        doubt: list[_Slot] = []
        against: list[_Slot] = []
        judged: list[_Slot] = []
        # The judge reads the entity's nearest statements however far apart the vectors put them: a change said in
        # other words is often below the rules' floor ("Elena works at Brightline Analytics as a firmware engineer"
        # and "Elena handed in her notice at Brightline and started at Kinetiq": 0.29).
        floor = -1.0 if self.judgements is not None else SLOT_MIN_SIMILARITY
        for holder in self._slot_candidates(txn, record.namespace, entity, unit, slots, keyed=True, floor=floor):
            if holder.attribute and self.settings.is_multi_valued(record.namespace, holder.attribute):
                continue
            if holder.similarity < SLOT_MIN_SIMILARITY:
                if record.kind not in REPEATABLE_KINDS and holder.record.kind not in REPEATABLE_KINDS:
                    judged.append(holder)
                continue
            if match is not None and holder.attribute:
                if holder.attribute == match.attribute:
                    retire.append((holder, match.confidence, match.method))
                continue
            if match is not None and match.confidence >= SURE and record.kind not in REPEATABLE_KINDS:
                against.append(holder)  # its slot unknown: judged as a keyed fact of the attribute would judge it
                continue
            # Events repeat with other details ("Coffee chat with Ana about hiking / about chess"): an episode's
            # slot comes only from the keyed facts' templates, never from its likeness to another text.
            events = record.kind in REPEATABLE_KINDS or holder.record.kind in REPEATABLE_KINDS
            spans = None if events else differing_spans(tokens, holder.tokens)
            if spans is not None:
                if not inferred.attribute:
                    inferred.attribute, inferred.value = holder.attribute, " ".join(spans[0])
                    inferred.confidence, inferred.method = PAIR_CONFIDENCE, "same template"
                if inferred.attribute == holder.attribute:
                    retire.append((holder, PAIR_CONFIDENCE, "same template"))
                    continue
            if events:
                continue
            if self.judgements is not None:
                # The judge reads restatements too ("Ana left Shopify" says the old value without restating it).
                if inferred.attribute in ("", holder.attribute) or not holder.attribute:
                    judged.append(holder)
                continue
            if _restates(tokens, holder):
                continue
            if not holder.attribute:
                # No attribute on either side: only a close likeness says they may be one slot's statements.
                if not inferred.attribute and holder.relative >= RELATIVE_SURE:
                    retire.append((holder, SURE, "entity-relative similarity"))
                elif not inferred.attribute and (holder.similarity >= NEAR_DOUBT or holder.relative >= RELATIVE_DOUBT):
                    doubt.append(holder)
                continue
            # No direction learnt from other entities' facts: the likeness alone decides, at the same bar.
            direction = slots.centroids.margin(kind, holder.attribute, unit, entity)
            evidence = holder.similarity + (direction or 0.0)
            if inferred.attribute not in ("", holder.attribute):
                continue
            # Alike relative to the entity, unless the text lies nearer another attribute's keyed facts.
            agrees = direction is None or direction >= -DISAGREEMENT_MARGIN
            relative_sure = holder.relative >= RELATIVE_SURE and agrees
            if evidence >= SIMILARITY_SURE or relative_sure:
                method = "similarity" if evidence >= SIMILARITY_SURE else "entity-relative similarity"
                if not inferred.attribute:
                    inferred.attribute, inferred.confidence, inferred.method = holder.attribute, SURE, method
                retire.append((holder, SURE, method))
            elif evidence >= SIMILARITY_DOUBT or holder.relative >= RELATIVE_DOUBT:
                doubt.append(holder)
        if record.entity and not inferred.attribute and not inferred.value:
            record.ClearField("inferred")  # nothing inferred beyond what the client said
        for holder, confidence, method in retire:
            same_value = holder.value is not None and inferred.value and tuple(inferred.value.split()) == holder.value
            if same_value and decision.confirm is None and not decision.updated:
                _confirm(holder.record, record, decision, now)
                return
            self._settle(txn, record, holder.record, now, decision, f"inferred: {method}, confidence {confidence:.2f}")
            if record.state not in CURRENT_STATES:
                return
        own = template_of(tokens, match.value) if match is not None else None
        for holder in against:
            if record.state not in CURRENT_STATES:
                return
            if holder.record.id not in {r.id for r, _, _ in decision.updated}:
                self._against(txn, record, holder, unit, inferred.attribute, own, tokens, slots, now, decision)
        for holder in doubt if self.doubt_by_likeness else []:
            if holder.record.id not in {r.id for r, _, _ in decision.updated}:
                self._doubt(record, holder.record, now, decision)
        if record.state in CURRENT_STATES:
            settled = {r.id for r, _, _ in decision.updated}
            self._queue(txn, record, [holder for holder in judged if holder.record.id not in settled])

    def _queue(self, txn: Txn, record: memory_pb2.Memory, holders: Sequence[_Slot]) -> None:
        """Hand the judge ``record`` and its nearest candidates (``JUDGE_CANDIDATES``) once the write is durable."""
        queue = self.judgements
        if queue is None or not holders:
            return
        nearest = sorted(holders, key=lambda holder: -holder.similarity)[:JUDGE_CANDIDATES]
        newer, older = record.id, tuple(holder.record.id for holder in nearest)
        txn.on_commit(lambda: queue.put(newer, older))

    def _keyed_over_text(
        self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float, decision: Decision
    ) -> None:
        """A current keyed fact retires (or doubts) the text statements of its slot, as they would retire it."""
        if record.kind not in SLOT_KINDS or self.settings.is_multi_valued(record.namespace, record.fact.attribute):
            return
        slots = self._namespace(txn, record.namespace)
        if len(slots.learnt_early) >= LEARNT_EARLY_MAX:
            slots.learnt_early.clear()  # writes that failed after perception: at worst one fact counted twice
        # What the fact teaches (its attribute's name and value shape) reads its own slot's texts already: the
        # first status a namespace keys retires "Glacier status: in code freeze".
        slots.learn(record, vector)
        slots.learnt_early.add(record.id)
        unit = _unit(vector)
        entity, attribute = record.entity, record.fact.attribute
        tokens = masked(words(record.content), slots.names.mentions(record.content, only=entity), entity)
        own = template_of(tokens, words(record.fact.value))
        for holder in self._slot_candidates(txn, record.namespace, entity, unit, slots, keyed=False):
            if holder.record.id in {r.id for r, _, _ in decision.updated}:
                continue
            self._against(txn, record, holder, unit, attribute, own, tokens, slots, now, decision)
            if record.state not in CURRENT_STATES:
                return

    def _against(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        holder: _Slot,
        unit: npt.NDArray[np.float32],
        attribute: str,
        own: tuple[tuple[str, ...], tuple[str, ...]] | None,
        tokens: list[str],
        slots: _Slots,
        now: float,
        decision: Decision,
    ) -> None:
        """A statement whose attribute is known (keyed, or a sure inference) against an unkeyed holder of its
        entity: retire it when it states the same attribute, doubt it when it only may."""
        inferred = holder.record.inferred
        entity = record.entity or record.inferred.entity
        kind = type_of(entity)
        agrees = slots.agrees(kind, attribute, holder.unit, entity)
        sure = is_sure(inferred.confidence) or inferred.attribute != attribute
        if holder.attribute == attribute and agrees and sure:
            # Inferred surely at its write, or read now by a template, value or name learnt since.
            how = holder.read_as or "template"
            self._settle(txn, record, holder.record, now, decision, f"inferred: {how} of {attribute}")
        elif own is not None and agrees and fits(own, holder.tokens):
            self._settle(txn, record, holder.record, now, decision, f"inferred: template of {attribute}")
        elif holder.record.kind in REPEATABLE_KINDS:
            return  # an episode whose slot no template named (see _infer)
        elif not inferred.attribute and differing_spans(tokens, holder.tokens) is not None:
            self._settle(txn, record, holder.record, now, decision, "inferred: same template")
        elif holder.attribute in ("", attribute) and self.judgements is not None:
            self._queue(txn, record, [holder])  # restatements too: the judge tells them from changes
        elif holder.attribute in ("", attribute) and not _restates(tokens, holder):
            margin = slots.centroids.margin(kind, attribute, holder.unit, entity) or 0.0
            evidence = holder.similarity + margin
            if evidence >= SIMILARITY_SURE or (holder.relative >= RELATIVE_SURE and agrees):
                how = "similarity" if evidence >= SIMILARITY_SURE else "entity-relative similarity"
                self._settle(txn, record, holder.record, now, decision, f"inferred: {how} to {attribute}")
            elif evidence >= SIMILARITY_DOUBT or holder.relative >= RELATIVE_DOUBT:
                self._doubt(record, holder.record, now, decision)

    def _textual(
        self, txn: Txn, record: memory_pb2.Memory, vector: npt.NDArray[np.float32], now: float, decision: Decision
    ) -> None:
        """A statement about no entity: a near-identical one that differs in one span is the same question
        answered again; world time decides, and above TEXT_PAIR_SURE the older is retired."""
        tokens = words(record.content)
        found = [txn.get(CF_DEDUP, key) for key in head_keys(record.namespace, tokens)]
        clauses = clause_words(record.content)
        ids = list(dict.fromkeys(key_u64(raw) for raw in found if raw is not None))
        unit = _unit(vector)
        self._same_head(txn, record, unit, ids, clauses, now, decision)
        if record.state in CURRENT_STATES and decision.outcome == "created":
            self._queue_unattached(txn, record, unit, set(ids))

    def _same_head(
        self,
        txn: Txn,
        record: memory_pb2.Memory,
        unit: npt.NDArray[np.float32],
        ids: list[int],
        clauses: list[str],
        now: float,
        decision: Decision,
    ) -> None:
        """Statements about no entity that share all but their last clause's ending with ``record``'s (``ids``)."""
        if not ids:
            return
        present, matrix = self._unit_vectors(txn, ids, 0)
        similarities = (matrix @ unit).tolist() if present else []
        for memory_id, similarity in zip(present, similarities, strict=True):
            if similarity < TEXT_PAIR_SIMILARITY:
                continue
            existing = _load(txn, memory_id)
            if existing is None or existing.state not in CURRENT_STATES or existing.fact.attribute:
                continue
            if existing.namespace != record.namespace or existing.entity or existing.inferred.entity:
                continue
            other = clause_words(existing.content)
            spans = last_clause_spans(clauses, other)
            if spans is None or from_timestamp(existing.valid_from) == from_timestamp(record.valid_from):
                # Without an entity only world time orders two statements: said as of the same moment (the items
                # of one batch: "step 3" / "step 4"), neither is the newer value of the other.
                continue
            record.inferred.value = " ".join(spans[0])
            record.inferred.method = "same template"
            shared = min(
                len(clauses) - clauses.count(CLAUSE_MARK) - len(spans[0]),
                len(other) - other.count(CLAUSE_MARK) - len(spans[1]),
            )
            if similarity >= TEXT_PAIR_SURE or shared >= TEXT_PAIR_LONG_HEAD:
                record.inferred.confidence = PAIR_CONFIDENCE
                self._settle(txn, record, existing, now, decision, "inferred: same template, no entity")
            else:
                record.inferred.confidence = max(record.inferred.confidence, 0.5)
                self._doubt(record, existing, now, decision)
            if record.state not in CURRENT_STATES:
                return

    def _queue_unattached(
        self, txn: Txn, record: memory_pb2.Memory, unit: npt.NDArray[np.float32], seen: set[int]
    ) -> None:
        """A statement about no known entity: its best word matches about none either go to the judge.

        Candidates are statements the word index finds (names and the words of the subject are what two
        statements of one fact share); a memory about a known entity is never touched from here.
        """
        columns, find = self.columns, self.find_words
        if self.judgements is None or columns is None or find is None or record.kind in REPEATABLE_KINDS:
            return
        namespace = columns.namespaces.lookup(record.namespace)
        if namespace == NO_CODE:
            return
        ids = find(record.namespace, record.content)[:JUDGE_TEXT_CANDIDATES]
        ids = ids[ids < columns.size]
        keep = (columns.namespace[ids] == namespace) & (columns.entity[ids] == NO_CODE)
        ids = ids[keep & np.isin(columns.state[ids], CURRENT_STATES)]
        candidates = [i for i in ids.tolist() if i not in seen and i != record.id]
        if not candidates:
            return
        present, matrix = self._unit_vectors(txn, candidates, len(candidates))
        holders: list[_Slot] = []
        for memory_id, row in zip(present, matrix, strict=True):
            # No cosine floor: the shared words chose them, and a change said in other words lies far in the
            # vectors ("User wants code examples in Java" / "Switch my examples to Kotlin": 0.24).
            existing = _load(txn, memory_id)
            if existing is None or existing.state not in CURRENT_STATES or existing.fact.attribute:
                continue
            if existing.entity or existing.inferred.entity or existing.kind not in SLOT_KINDS:
                continue
            if existing.kind in REPEATABLE_KINDS or existing.valid_from == record.valid_from:
                continue  # events repeat; two statements of one moment are not two values in time
            holders.append(_Slot(existing, float(row @ unit), "", None, [], row))
        self._queue(txn, record, holders)

    def settle_judged(
        self,
        txn: Txn,
        newer: memory_pb2.Memory,
        older: memory_pb2.Memory,
        replaces: float,
        now: float,
        decision: Decision,
        *,
        escalates: bool = False,
    ) -> None:
        """Apply the judge's P(REPLACES) of ``newer`` over ``older``: from JUDGE_SURE the older (in world time) is
        retired, from JUDGE_DOUBT doubted; never while either is no longer current or already settled otherwise.

        ``escalates``: a second judge decides doubts (see JUDGE_ASK); every pair from JUDGE_ASK is doubted for it."""
        if newer.state not in CURRENT_STATES or older.state not in CURRENT_STATES:
            return
        if older.id in newer.supersedes or older.superseded_by:
            return
        if not escalates and replaces >= JUDGE_SURE:
            self._settle(txn, newer, older, now, decision, f"judged: replaces, confidence {replaces:.2f}")
        elif replaces >= (JUDGE_ASK if escalates else JUDGE_DOUBT):
            in_order = from_timestamp(newer.valid_from) >= from_timestamp(older.valid_from)
            doubted, by = (older, newer) if in_order else (newer, older)  # as ``_doubt`` decides
            # One doubt per statement: the likeliest replacement judged so far names it, so that a distractor judged
            # first does not keep the real change from the reviewer; a doubt of the rules gives way to the judge.
            if doubted.possibly_outdated_by == by.id or replaces <= self._judged_doubts.get(doubted.id, 0.0):
                return
            self._doubt(newer, older, now, decision)
            self._judged_doubts.pop(doubted.id, None)
            self._judged_doubts[doubted.id] = replaces
            if len(self._judged_doubts) > JUDGED_DOUBTS_KEPT:
                del self._judged_doubts[next(iter(self._judged_doubts))]

    def _settle(
        self, txn: Txn, record: memory_pb2.Memory, existing: memory_pb2.Memory, now: float, decision: Decision, why: str
    ) -> None:
        """Two statements of one slot: the newer in world time stays current, the older becomes its history."""
        new_from, old_from = from_timestamp(record.valid_from), from_timestamp(existing.valid_from)
        before = existing.state
        if new_from > old_from or (new_from == old_from and record.confidence >= existing.confidence):
            existing.state = OBSOLETE
            existing.valid_to.CopyFrom(record.valid_from)
            existing.superseded_by = record.id
            existing.possibly_outdated_by = 0
            existing.updated_at.CopyFrom(to_timestamp(now))
            record.supersedes.append(existing.id)
            self.release_current(txn, existing)
            decision.outcome = "superseded"
            decision.updated.append((existing, before, f"superseded by memory {record.id} ({why})"))
            return
        # A late statement: history at once, closed where the current one began.
        record.state = OBSOLETE
        record.valid_to.CopyFrom(existing.valid_from)
        record.superseded_by = existing.id
        existing.supersedes.append(record.id)
        existing.updated_at.CopyFrom(to_timestamp(now))
        decision.outcome = "backdated"
        decision.updated.append((existing, before, f"now supersedes late statement {record.id} ({why})"))

    def _doubt(self, record: memory_pb2.Memory, existing: memory_pb2.Memory, now: float, decision: Decision) -> None:
        """A soft conflict: the older in world time may be outdated by the newer; recall ranks it lower."""
        if from_timestamp(record.valid_from) >= from_timestamp(existing.valid_from):
            before = existing.state
            existing.possibly_outdated_by = record.id
            existing.updated_at.CopyFrom(to_timestamp(now))
            decision.updated.append((existing, before, f"possibly outdated by memory {record.id}"))
        else:
            record.possibly_outdated_by = existing.id
