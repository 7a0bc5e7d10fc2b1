"""Domain objects of the memevo client: frozen dataclasses and enums, never raw protobufs.

Time fields are timezone-aware ``datetime`` objects (UTC when they come from the
sidecar). Each says whether it is *world time* (when something was true) or
*system time* (when the sidecar learned or changed it). Vectors are 1-D
``numpy.ndarray`` of little-endian float32; the sidecar returns them only when a
call asks for them (``include_vectors=True``), otherwise they are ``None``.

Enum members are named as in the wire contract without the prefix
(``MEMORY_KIND_FACT`` is ``MemoryKind.FACT``) and keep the wire value. Every
enum has an ``UNSPECIFIED`` member: it stands for "not set" and for a value that
a newer sidecar sends and this client does not know yet.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias, overload

import numpy as np
import numpy.typing as npt

VectorLike: TypeAlias = Sequence[float] | npt.NDArray[Any]
"""What a caller may pass as a vector: a sequence of floats or a 1-D array of any real dtype."""

Vector: TypeAlias = npt.NDArray[np.float32]
"""A vector as the client returns it: a read-only 1-D little-endian float32 array."""


class MemoryKind(enum.Enum):
    """What a memory is about; policies may differ per kind."""

    UNSPECIFIED = 0
    FACT = 1
    PREFERENCE = 2
    EPISODE = 3
    STRATEGY = 4
    ABSTRACTION = 5


class MemoryState(enum.Enum):
    """The lifecycle state of a memory (DESIGN §3)."""

    UNSPECIFIED = 0
    ACTIVE = 1
    ARCHIVED = 2
    CONSOLIDATED = 3
    OBSOLETE = 4
    EVICTED = 5


class MemorySource(enum.Enum):
    """Where a memory came from; each source maps to a starting confidence by policy."""

    UNSPECIFIED = 0
    TOOL_RESULT = 1
    USER_STATEMENT = 2
    AGENT_INFERENCE = 3
    REFLECTION = 4
    IMPORT = 5


class RecallMode(enum.Enum):
    """Which versions recall considers: current ones (default) or every stored version."""

    UNSPECIFIED = 0
    CURRENT = 1
    HISTORY = 2


class WriteOutcome(enum.Enum):
    """How a write was applied."""

    UNSPECIFIED = 0
    CREATED = 1
    CONFIRMED = 2
    SUPERSEDED_PREVIOUS = 3
    BACKDATED = 4


class ChangeEventType(enum.Enum):
    """What happened to a memory (or to the sidecar's configuration)."""

    UNSPECIFIED = 0
    CREATED = 1
    UPDATED = 2
    STATE_CHANGED = 3
    SUPERSEDED = 4
    EVICTED = 5
    CONSOLIDATED = 6
    UNCONSOLIDATED = 7
    FRAMEWORK_DECLARED = 8
    POLICY_UPDATED = 9
    OUTCOME_REPORTED = 10
    EXPERIMENT_DECISION = 11


class Outcome(enum.Enum):
    """Whether using a retrieval's memories worked; ``UNSPECIFIED`` is rejected by the sidecar."""

    UNSPECIFIED = 0
    SUCCESS = 1
    FAILURE = 2
    PARTIAL = 3


class TimeMode(enum.Enum):
    """How decay measures time since last use; ``UNSPECIFIED`` keeps the data directory's mode."""

    UNSPECIFIED = 0
    WALL_CLOCK = 1
    AGENT_TURNS = 2


def _values_equal(a: Any, b: Any) -> bool:
    """Compare two field values, arrays by content (``==`` on arrays is elementwise)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if a is None or b is None:
            return False
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b)


def _dataclass_equal(a: Any, b: Any) -> bool:
    return all(_values_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))


def _as_vector(value: VectorLike) -> Vector:
    """A read-only 1-D float32 copy of value; ``ValueError`` when it is not 1-D or not numeric."""
    try:
        array = np.array(value, dtype="<f4")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"vector must be a 1-D sequence of numbers, not {type(value).__name__}") from exc
    if array.ndim != 1:
        raise ValueError(f"vector must be 1-D, got shape {array.shape}: pass one vector per memory")
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class InferredSlot:
    """What the sidecar inferred a plain-text memory states: the slot (entity, attribute) it fills.

    Set when the memory was written without a fact key (or without an entity) and its text said one.
    """

    entity: str = ""
    """The entity it is about: the declared one, or one whose name the text says."""
    attribute: str = ""
    """The attribute it sets, as the namespace's keyed facts name it; empty when only its entity is known, or
    when it is known only to be the same slot as another statement."""
    value: str = ""
    """The value it gives (the span that differs from its template, in lower case); empty when unknown."""
    confidence: float = 0.0
    """In [0, 1]: how sure the sidecar is of the slot."""
    method: str = ""
    """"template", "same template", "similarity" or "name" (only the entity, found by its name)."""


@dataclass(frozen=True)
class Fact:
    """A structured fact: an attribute of the memory's entity and its value.

    With the memory's namespace and entity it forms the fact key
    ``(namespace, entity, attribute)``; a new value for the same key supersedes the old one.
    """

    attribute: str
    """Attribute name, e.g. ``"preferred_language"``; at most 256 bytes."""
    value: str
    """The attribute's value as text, e.g. ``"Python"``; at most 4 KiB."""


@dataclass(frozen=True)
class FactKey:
    """A fact key ``(namespace, entity, attribute)``, the subject of a history query."""

    entity: str
    """Required."""
    attribute: str
    """Required."""
    namespace: str = ""
    """Empty means the sidecar's default namespace, ``"default"``."""


@dataclass(frozen=True)
class ReasoningContext:
    """The reasoning context a memory was formed in; recall's word search counts its words at half weight."""

    memory_ids: tuple[int, ...] = ()
    """Ids of the working-memory items that produced the memory (e.g. the conversation turn a reply answers);
    the text of the first four in the memory's own namespace counts in word search."""
    text: str = ""
    """A short free-text description of the context; at most 4 KiB."""


@dataclass(frozen=True)
class MemoryScores:
    """The derived scores of a memory at its last evaluation (DESIGN §4); all unitless."""

    accuracy: float = 0.0
    """In [0, 1]: confidence and feedback, less inconsistency."""
    relevance: float = 0.0
    """>= 0: recency of use (decaying) plus frequency of use."""
    utility: float = 0.0
    """In [0, 1]: information density times uniqueness."""
    cost: float = 0.0
    """>= 0: stored bytes over the configured budget."""
    value: float = 0.0
    """V = alpha*accuracy + beta*relevance + gamma*utility - delta*cost."""


@dataclass(frozen=True, kw_only=True, eq=False)
class MemoryInput:
    """What to store as one memory. Only ``content`` or ``vector`` is required.

    ``vector`` is converted to a read-only float32 array and ``fact`` given as
    ``(attribute, value)`` to a :class:`Fact` on construction; a vector that is not 1-D
    raises ``ValueError``, as does a naive ``valid_from``. Everything else is
    validated by the sidecar (``InvalidArgumentError`` naming the field).
    """

    content: str = ""
    """The memory's text (UTF-8, at most the sidecar's max_content_bytes, default 64 KiB)."""
    vector: VectorLike | None = None
    """Its embedding, of exactly the data directory's dimension; ``None`` lets the sidecar embed content."""
    namespace: str = ""
    """Tenant / scope; empty means ``"default"``. At most 128 bytes of ``[A-Za-z0-9_.:-]``."""
    kind: MemoryKind | None = None
    """``None`` means :attr:`MemoryKind.EPISODE`."""
    entity: str = ""
    """The entity the memory is about, e.g. ``"user:alice"``; required with ``fact``."""
    topic: str = ""
    """A topic label."""
    fact: Fact | tuple[str, str] | None = None
    """A structured fact about ``entity``, as a :class:`Fact` or ``(attribute, value)``."""
    source: MemorySource | None = None
    """``None`` means :attr:`MemorySource.AGENT_INFERENCE`."""
    confidence: float | None = None
    """In [0, 1]; ``None`` uses the policy's starting confidence for ``source``."""
    importance: int | None = None
    """1 (trivial) to 10 (critical); ``None`` when not given."""
    tags: tuple[str, ...] = ()
    """Free labels; at most 32 of at most 64 bytes each."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Free key/value pairs kept with the memory; at most 32 entries, 4 KiB in total."""
    valid_from: datetime | None = None
    """World time: when this became true; ``None`` means when the sidecar stores it."""
    framework_version: str = ""
    """The framework version it was formed under; empty means the sidecar's current one."""
    reasoning_context: ReasoningContext | None = None
    """The reasoning context it was formed in."""
    task_signature: str = ""
    """For :attr:`MemoryKind.STRATEGY`: the task it solves, e.g. ``"deploy:python-service"``."""

    def __post_init__(self) -> None:
        # Normalised here so that equal inputs compare equal and a bad vector fails at the caller's line.
        if self.vector is not None:
            object.__setattr__(self, "vector", _as_vector(self.vector))
        if isinstance(self.fact, tuple):
            if len(self.fact) != 2:
                raise ValueError("fact must be (attribute, value) or a Fact")
            object.__setattr__(self, "fact", Fact(attribute=self.fact[0], value=self.fact[1]))
        if not isinstance(self.tags, tuple):
            if isinstance(self.tags, str):
                raise ValueError("tags must be a sequence of strings, not one string")
            object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "metadata", dict(self.metadata))
        if self.valid_from is not None and self.valid_from.utcoffset() is None:
            raise ValueError("valid_from must be timezone-aware, e.g. datetime.now(timezone.utc)")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryInput):
            return NotImplemented
        return _dataclass_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True, eq=False)
class Memory:
    """A stored memory as the sidecar knows it.

    Equality compares every field (vectors by content); the hash uses
    ``(id, sequence)``, which identifies one version of one memory.
    """

    id: int = 0
    """Sidecar-assigned, unique in the data directory, increasing with write order; never 0 when stored."""
    namespace: str = ""
    kind: MemoryKind = MemoryKind.UNSPECIFIED
    state: MemoryState = MemoryState.UNSPECIFIED
    content: str = ""
    vector: Vector | None = None
    """Present only when the call asked for vectors."""
    entity: str = ""
    topic: str = ""
    fact: Fact | None = None
    source: MemorySource = MemorySource.UNSPECIFIED
    confidence: float = 0.0
    """Current confidence in [0, 1]."""
    importance: int = 0
    """1..10, or 0 when not given."""
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    valid_from: datetime | None = None
    """World time: when this became true."""
    valid_to: datetime | None = None
    """World time: when this stopped being true (set when superseded); ``None`` while still true."""
    recorded_at: datetime | None = None
    """System time: when the sidecar stored it."""
    updated_at: datetime | None = None
    """System time: when the sidecar last changed its record."""
    turn: int = 0
    """The agent's turn counter at write; 0 when the writer gave none."""
    framework_version: str = ""
    reasoning_context: ReasoningContext | None = None
    task_signature: str = ""
    supersedes: tuple[int, ...] = ()
    """Ids of memories this one replaced."""
    superseded_by: int | None = None
    """Id of the memory that replaced this one."""
    consolidated_into: int | None = None
    """For CONSOLIDATED members: the abstraction that absorbed it."""
    members: tuple[int, ...] = ()
    """For ABSTRACTION memories: the ids of the members it absorbed."""
    access_count: int = 0
    """Times it was returned by recall or context building."""
    last_access_at: datetime | None = None
    """System time of the last access; ``None`` when never accessed."""
    last_access_turn: int = 0
    """The agent's turn at the last access; 0 when never accessed or not given."""
    successes: float = 0.0
    """Weighted successful uses reported by ``report_outcome`` (SUCCESS 1, PARTIAL 0.5, reward r > 0 adds r)."""
    failures: float = 0.0
    """Weighted failed uses reported by ``report_outcome``."""
    scores: MemoryScores | None = None
    """Derived scores at the last evaluation; ``None`` when the sidecar sent none."""
    sequence: int = 0
    """The change-log sequence number of the last change to this memory."""
    inconsistency: float = 0.0
    """In [0, 1]: how much newer near-duplicates about the same entity disagree with it."""
    demoted_by: int | None = None
    """For strategies: the newer strategy that did reliably better; ``None`` when none."""
    state_since: datetime | None = None
    """System time the memory entered its current state."""
    state_since_turn: int = 0
    """The agent's turn when it entered its current state; 0 when unknown."""
    confirmed_valid_at: datetime | None = None
    """World time of the latest restatement that confirmed it still held; ``None`` when none did."""
    inferred: InferredSlot | None = None
    """What the sidecar inferred it states when it was written without a fact key; ``None`` when nothing."""
    possibly_outdated_by: int | None = None
    """A newer memory that may replace it (a soft conflict, ranked below that one); ``None`` when none."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Memory):
            return NotImplemented
        return _dataclass_equal(self, other)

    def __hash__(self) -> int:
        return hash((self.id, self.sequence))


@dataclass(frozen=True)
class WriteResult:
    """The result of storing one memory."""

    memory: Memory
    """The stored (or confirmed) memory, without its vector."""
    outcome: WriteOutcome
    affected_ids: tuple[int, ...] = ()
    """Other memories the write changed, e.g. the one it superseded."""
    replayed: bool = False
    """True when the request id matched an earlier call and this is that call's result."""

    @property
    def id(self) -> int:
        """The stored memory's id."""
        return self.memory.id


@dataclass(frozen=True)
class StreamResult:
    """The result of ``remember_stream``."""

    ids: list[int]
    """The id of each streamed item, in stream order (the first id for replayed items)."""
    created_count: int
    """Items stored by this stream."""
    replayed_count: int
    """Items whose request id had been seen before; nothing was written for them."""
    confirmed_count: int = 0
    """Items that restated a stored memory, which was confirmed instead of duplicated."""


@dataclass(frozen=True)
class RecalledMemory:
    """One recalled memory with how well it matched and how to read it."""

    memory: Memory
    similarity: float
    """Cosine similarity to the query, in [-1, 1]."""
    score: float
    """The ranking score; higher ranks first."""
    hint: str = ""
    """How to read it, e.g. ``"current"`` or ``"historical reference — the situation may have changed"``."""


@dataclass(frozen=True)
class RecallResult:
    """The memories that answer a recall, best first; iterable, indexable and sized."""

    memories: list[RecalledMemory]
    retrieval_id: str = ""
    """Identifies this retrieval for ``report_outcome``."""
    arm: str = ""
    """The experiment arm that ranked this retrieval; empty when no experiment runs."""

    def __iter__(self) -> Iterator[RecalledMemory]:
        return iter(self.memories)

    def __len__(self) -> int:
        return len(self.memories)

    @overload
    def __getitem__(self, index: int) -> RecalledMemory: ...
    @overload
    def __getitem__(self, index: slice) -> list[RecalledMemory]: ...
    def __getitem__(self, index: int | slice) -> RecalledMemory | list[RecalledMemory]:
        return self.memories[index]

    @property
    def ids(self) -> list[int]:
        """The ids of the recalled memories, best first."""
        return [r.memory.id for r in self.memories]


@dataclass(frozen=True)
class ContextItem:
    """One memory placed in a built context."""

    memory: Memory
    group: str
    """The group it was placed in: ``"facts"``, ``"strategies"``, ``"episodes"`` or ``"patterns"``."""
    hint: str = ""
    """How to read it, in the requested language."""
    tokens: int = 0
    """Estimated tokens of its rendered line."""


@dataclass(frozen=True)
class ContextResult:
    """An annotated context block for a prompt, fitted to a token budget."""

    text: str
    """The rendered context block."""
    items: list[ContextItem]
    """The memories placed, in rendering order."""
    tokens_used: int = 0
    """Estimated tokens of ``text``."""
    retrieval_id: str = ""
    """Identifies this retrieval for ``report_outcome``."""
    arm: str = ""
    """The experiment arm that ranked this retrieval; empty when no experiment runs."""


@dataclass(frozen=True)
class ForgetResult:
    """What ``forget`` did."""

    forgotten_ids: list[int]
    """Ids forgotten by this call."""
    missing_ids: list[int]
    """Ids that did not exist or were already evicted."""


@dataclass(frozen=True)
class SupersedeResult:
    """Both sides of a supersession."""

    old_memory: Memory
    """The replaced memory, now OBSOLETE."""
    new_memory: Memory
    """The replacement, now current."""


@dataclass(frozen=True)
class ChangeEvent:
    """One entry of the sidecar's append-only change log."""

    sequence: int
    """Monotonically increasing and gap-free within a data directory, from 1."""
    type: ChangeEventType
    memory_id: int = 0
    """The memory concerned; 0 for events about the sidecar itself."""
    namespace: str = ""
    """The namespace of the memory concerned; empty for sidecar-wide events."""
    from_state: MemoryState = MemoryState.UNSPECIFIED
    """The state before the change; UNSPECIFIED for CREATED."""
    to_state: MemoryState = MemoryState.UNSPECIFIED
    recorded_at: datetime | None = None
    """System time of the change."""
    reason: str = ""
    related_ids: tuple[int, ...] = ()
    """Other memories involved (replacement, members, abstraction)."""
    detail: str = ""
    request_id: str = ""
    """The request id of the mutating request that caused it; empty when none."""
    kind: MemoryKind = MemoryKind.UNSPECIFIED
    turn: int = 0
    """The agent's turn at the change; 0 when not given."""
    experiment_decision: ExperimentDecision | None = None
    """EXPERIMENT_DECISION events: the decision and its evidence."""


@dataclass(frozen=True)
class HistoryResult:
    """The versions of a fact key or the lineage of a memory, oldest first, with their events."""

    versions: list[Memory]
    events: list[ChangeEvent]
    """The change-log events about these memories, in sequence order."""


@dataclass(frozen=True)
class EntitySummary:
    """One entity of a namespace at a glance: counts of its memories there and when they last changed."""

    entity: str
    memory_count: int
    """Memories in any state but EVICTED (history included)."""
    current_count: int
    """Memories that hold now: ACTIVE or ARCHIVED with no end of validity."""
    belief_count: int
    """Distinct attributes with a current value (what :meth:`MemoryClient.beliefs` returns)."""
    doubted_count: int
    """Current memories with an open doubt (``possibly_outdated_by``)."""
    last_changed_at: datetime | None
    """System time of the latest write or state change among its memories."""


@dataclass(frozen=True)
class EntityList:
    """The entities of a namespace, most recently changed first."""

    entities: list[EntitySummary]
    total_count: int
    """Entities matching the query; more than ``len(entities)`` when the limit cut the list."""


@dataclass(frozen=True)
class Belief:
    """The current value of one attribute of an entity, keyed or read from prose."""

    attribute: str
    value: str
    """The fact's value or the span the sidecar read in the text; empty when no span was isolated."""
    read_from_text: bool
    """True when the memory was written without a fact key (``memory.inferred`` says how it was read)."""
    memory: Memory
    """The memory holding the value: ``valid_from`` (when it became true), ``source``, ``confidence``."""
    possibly_outdated_by: tuple[int, ...]
    """Open doubts: newer memories that may replace this value."""
    also_current: list[Memory]
    """Other current memories stating the attribute (an older value only doubted, or a second value)."""
    history_key: FactKey
    """Pass to :meth:`MemoryClient.history` for the attribute's versions, keyed and prose."""
    version_count: int
    """Memories stating this attribute of the entity, any state but EVICTED."""


@dataclass(frozen=True)
class BeliefsResult:
    """What the agent believes about an entity now (or held at ``as_of``), one belief per attribute, by name."""

    entity: str
    beliefs: list[Belief]
    unattributed_count: int
    """Current memories about the entity that state no attribute (episodes, notes)."""
    last_changed_at: datetime | None
    """System time of the latest change to any of the entity's memories; None for an unknown entity."""
    as_of: datetime | None = None
    """World time the answer is for: the ``as_of`` asked, or the time of answering (the current values)."""


@dataclass(frozen=True)
class TransitionCount:
    """How many memories moved from one state to another in a sweep."""

    from_state: MemoryState
    to_state: MemoryState
    count: int


@dataclass(frozen=True)
class SweepStats:
    """Statistics of one governance sweep."""

    started_at: datetime | None
    """System time the sweep started."""
    evaluated_count: int = 0
    transitions: tuple[TransitionCount, ...] = ()
    kernel_ms: float = 0.0
    """Time spent in the value kernel, milliseconds."""
    total_ms: float = 0.0
    """Wall time of the whole sweep, milliseconds."""
    trigger: str = ""
    """What triggered it: ``"request"``, ``"schedule"``, ``"writes"`` or ``"event"``."""
    consolidation: ConsolidationStats | None = None
    """The consolidation pass run with it (``govern()`` answers only; None elsewhere)."""


@dataclass(frozen=True)
class ConsolidationStats:
    """What one consolidation pass looked at and did."""

    seeds_examined: int = 0
    """New or changed memories whose neighbourhood was examined."""
    groups_found: int = 0
    proposals_opened: int = 0
    """Proposals opened for review (or waiting for a reviewer)."""
    consolidated_count: int = 0
    """Abstractions written by policy without a reviewer."""
    expired_count: int = 0
    """Proposals decided by policy because their deadline passed."""
    total_ms: float = 0.0
    """Wall time of the pass, milliseconds."""


@dataclass(frozen=True)
class StateKindCount:
    """Memories in one (state, kind) cell."""

    state: MemoryState
    kind: MemoryKind
    count: int


@dataclass(frozen=True)
class IndexStats:
    """The ANN index's status."""

    indexed_count: int = 0
    """Vectors in the graph."""
    fresh_tail_count: int = 0
    """Vectors acknowledged but not yet in the graph (recall scans them exactly)."""
    saved_sequence: int = 0
    """The change-log sequence the saved index file covers."""
    saved_at: datetime | None = None
    """System time of the last save; ``None`` if never saved."""


@dataclass(frozen=True)
class WriteStats:
    """Whether the sidecar takes writes: a full or read-only disk refuses them (reads are served meanwhile)."""

    refused: bool = False
    """True while every write is refused; writes resume by themselves once the disk takes them again."""
    reason: str = ""
    """The refused calls' reason code, e.g. ``"DISK_FULL"``; empty while writes are taken."""
    message: str = ""
    """What happened and what to do; empty while writes are taken."""
    refused_since: datetime | None = None
    """System time writes started being refused; ``None`` while they are taken."""
    restart_required: bool = False
    """True when only a restart resumes writes."""


@dataclass(frozen=True)
class Stats:
    """Counts, index status and the last sweeps of a sidecar."""

    counts: tuple[StateKindCount, ...] = ()
    total_count: int = 0
    """Memories not EVICTED."""
    index: IndexStats = field(default_factory=IndexStats)
    last_sequence: int = 0
    """The last change-log sequence number."""
    embedder: str = ""
    """The embedder's identity, or ``"none"``."""
    dimension: int = 0
    """Vector dimension of the data directory."""
    schema_version: int = 0
    recent_sweeps: tuple[SweepStats, ...] = ()
    """The most recent sweeps, newest first."""
    framework_version: str = ""
    """The current declared framework version."""
    experiment: ExperimentStats | None = None
    """The running experiment with per-arm outcomes; ``None`` when none runs."""
    writes: WriteStats = field(default_factory=WriteStats)
    """Whether writes are taken now."""

    def count(self, state: MemoryState | None = None, kind: MemoryKind | None = None) -> int:
        """Memories in the given state and/or of the given kind; ``None`` matches any."""
        return sum(
            c.count for c in self.counts if (state is None or c.state == state) and (kind is None or c.kind == kind)
        )


@dataclass(frozen=True)
class FrameworkDeclared:
    """The result of declaring a framework version."""

    previous_version: str
    """The version that was current before."""
    flagged_count: int
    """Memories formed under older versions, now flagged for re-interpretation."""


@dataclass(frozen=True, kw_only=True)
class KindPolicy:
    """Weights and thresholds that govern one memory kind (DESIGN §4).

    Value ``V = alpha*accuracy + beta*relevance + gamma*utility - delta*cost``.
    Defaults are the documented defaults of the wire contract.
    """

    kind: MemoryKind = MemoryKind.UNSPECIFIED
    """The kind this applies to; UNSPECIFIED is the default for kinds without their own entry."""
    alpha: float = 0.4
    beta: float = 0.3
    gamma: float = 0.2
    delta: float = 0.1
    confidence_weight: float = 0.6
    feedback_weight: float = 0.4
    inconsistency_weight: float = 0.5
    decay_half_life_s: float = 604800.0
    """Relevance half-life in wall-clock mode, seconds."""
    decay_half_life_turns: float = 200.0
    """Relevance half-life in agent-turn mode, turns."""
    access_weight: float = 0.1
    archive_below: float = 0.2
    reactivate_above: float = 0.3
    """Must be >= archive_below (hysteresis)."""
    evict_below: float = 0.05
    """Must be <= archive_below."""
    evict_grace_s: float = 2592000.0
    """Seconds V must stay below evict_below before eviction."""
    min_time_in_state_s: float = 3600.0
    """Minimum seconds in a state before governance moves it again."""
    evict_grace_turns: float = 2000.0
    """Turns V must stay below evict_below before eviction (agent-turn mode)."""
    min_time_in_state_turns: float = 20.0
    """Minimum turns in a state before governance moves it again (agent-turn mode)."""
    confidence_floor: float = 0.02
    """Confidence of an unused, unverified memory decays toward this, in [0, 1]."""
    confidence_decay_half_life_s: float = 2592000.0
    """Half-life of that decay, seconds."""
    confidence_decay_half_life_turns: float = 1000.0
    """Half-life of that decay, turns (agent-turn mode)."""


@dataclass(frozen=True, kw_only=True)
class SourceConfidence:
    """Starting confidence per source, each in [0, 1]."""

    tool_result: float = 0.9
    user_statement: float = 0.8
    agent_inference: float = 0.6
    reflection: float = 0.6
    imported: float = 0.7


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The governance policy of a data directory; ``update_policy`` replaces it whole."""

    name: str = "default"
    """At most 64 bytes."""
    time_mode: TimeMode = TimeMode.UNSPECIFIED
    kinds: tuple[KindPolicy, ...] = ()
    """One entry per kind with its own settings, optionally one with kind UNSPECIFIED for the rest."""
    source_confidence: SourceConfidence = field(default_factory=SourceConfidence)
    soft_conflict_similarity: float = 0.9
    """Cosine similarity above which an unkeyed near-duplicate about the same entity is a soft conflict."""
    duplicate_similarity: float = 0.98
    """Cosine similarity above which a new memory is merged into an existing identical one."""
    strategy_upgrade_probability: float = 0.95
    """Posterior probability that a newer strategy is better before the older is demoted."""
    cost_budget_bytes: float = 1048576.0
    """Stored bytes at which cost reaches 1."""
    multi_valued_attributes: tuple[str, ...] = ()
    """Attributes that may hold several values at once, as ``"namespace/attribute"`` or ``"*/attribute"``."""
    tuning_bounds: tuple[ParameterBound, ...] = ()
    """The operator's bounds on what an experiment may tune automatically; none: nothing may move."""


@dataclass(frozen=True, kw_only=True)
class ParameterBound:
    """The range an experiment may give one policy parameter before its arm is promoted automatically."""

    parameter: str
    """A KindPolicy number (e.g. ``"beta"``; every kind's entry) or a Policy number (``"soft_conflict_similarity"``)."""
    min: float = 0.0
    """Smallest value allowed, in the parameter's unit."""
    max: float = 0.0
    """Largest value allowed, >= min."""


class AllocationMode(enum.Enum):
    """How an experiment splits retrievals between its arms."""

    UNSPECIFIED = 0
    FIXED = 1
    """In proportion to the arms' weights."""
    THOMPSON = 2
    """Each arm's share is the posterior probability that it is best, at least the floor share."""


class ExperimentPhase(enum.Enum):
    """Where an experiment stands."""

    UNSPECIFIED = 0
    RUNNING = 1
    WATCHING = 2
    """An arm was promoted automatically; its success rate is watched against the control's."""
    ROLLED_BACK = 3


class ExperimentDecisionKind(enum.Enum):
    """What an automatic decision did."""

    UNSPECIFIED = 0
    PROMOTED = 1
    ROLLED_BACK = 2
    HELD = 3
    """The posterior called for a promotion; the replay or bounds check held it back."""


@dataclass(frozen=True, kw_only=True)
class AdaptiveSettings:
    """Outcome-driven allocation and automatic promotion of an experiment; 0 takes the sidecar's default."""

    allocation: AllocationMode = AllocationMode.FIXED
    floor_share: float = 0.0
    """Smallest share of any arm under Thompson allocation, in (0, 1/arms); 0 means 0.05."""
    snapshot_outcomes: int = 0
    """Outcomes between posterior snapshots (and automatic decisions); 0 means 20."""
    control_arm: str = ""
    """The arm with the policy in force; empty: the first arm."""
    promote_probability: float = 0.0
    """P(arm beats the control) at which it is promoted automatically, in (0.5, 1); 0: never."""
    min_outcomes: int = 0
    """Outcomes the arm and the control need before a promotion (the promoted policy before a rollback); 0 means 100."""
    min_promotion_interval_s: float = 0.0
    """Seconds between automatic promotions at least; 0 means 3600."""
    tunable_parameters: tuple[str, ...] = ()
    """Parameters the arms may differ in (each needs a bound in the policy's tuning_bounds)."""
    replay_tolerance: float = 0.0
    """How much lower the candidate's replay objective may be than the policy in force's."""


@dataclass(frozen=True, kw_only=True)
class ExperimentArm:
    """One arm of an online experiment: a policy that ranks the retrievals assigned to it."""

    name: str
    """1 to 64 bytes, unique within the experiment."""
    policy: Policy
    weight: float = 0.0
    """Relative share of retrievals, >= 0; 0 means 1 (an equal split)."""


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """Several policies ranking retrievals side by side; each retrieval's arm is a hash of its id."""

    name: str = ""
    """At most 64 bytes; part of the assignment hash."""
    arms: tuple[ExperimentArm, ...] = ()
    """2 to 16 arms; none ends the experiment."""
    adaptive: AdaptiveSettings | None = None
    """Outcome-driven allocation and automatic promotion; None: a fixed split, promotion by promote_arm only."""


@dataclass(frozen=True)
class ArmStats:
    """How one arm has done so far."""

    name: str
    share: float
    """Its share of retrievals in [0, 1]."""
    retrieval_count: int
    outcome_count: int
    successes: float
    """Sum of success weights (SUCCESS 1, PARTIAL 0.5, reward r > 0 counts r)."""
    failures: float
    success_rate: float
    """successes / (successes + failures); 0 without outcomes."""
    success_low: float
    """Lower bound of the 95% Wilson interval."""
    success_high: float
    """Upper bound of the 95% Wilson interval."""
    probability_best: float = 0.0
    """Posterior probability that this arm's success rate is the best."""
    probability_beats_control: float = 0.0
    """Posterior probability that it beats the control arm's (0.5 for the control)."""


@dataclass(frozen=True)
class ExperimentDecision:
    """One automatic decision of an experiment with its evidence."""

    kind: ExperimentDecisionKind
    arm: str
    control_arm: str
    decided_at_s: float
    """System time, seconds since the Unix epoch."""
    probability_better: float
    arm_stats: ArmStats | None
    control_stats: ArmStats | None
    promoted_stats: ArmStats | None
    """The promoted policy's outcomes since its promotion (rollbacks)."""
    replay_candidate_objective: float
    """NaN when no replay ran."""
    replay_current_objective: float
    replay_retrievals: int
    previous_policy: Policy
    """The policy in force before: ``update_policy`` with it reverses the decision."""
    reason: str


@dataclass(frozen=True)
class ExperimentStats:
    """The running experiment's per-arm outcomes, posteriors and automatic decisions."""

    name: str
    arms: tuple[ArmStats, ...]
    allocation: AllocationMode = AllocationMode.FIXED
    phase: ExperimentPhase = ExperimentPhase.RUNNING
    control_arm: str = ""
    promoted_arm: str = ""
    """The arm promoted automatically; empty before any promotion."""
    promoted_stats: ArmStats | None = None
    snapshot: int = 0
    """Posterior snapshots taken."""
    decisions: tuple[ExperimentDecision, ...] = ()

    def arm(self, name: str) -> ArmStats:
        """The stats of the arm called ``name``; KeyError when there is none."""
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)


@dataclass(frozen=True)
class PromotedArm:
    """The result of promoting an arm: the policy now in force and the experiment's final stats."""

    policy: Policy
    final_stats: ExperimentStats
