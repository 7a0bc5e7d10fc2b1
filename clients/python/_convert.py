"""Conversions between the client's domain objects and the ``memevo.v1`` protobuf messages, both ways.

Private: the public API speaks only in :mod:`memevo.client.types`. Every
``*_to_proto`` raises ``ValueError`` for what the client can tell is wrong
without asking the sidecar (a vector that is not 1-D, a naive datetime).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import TypeVar

import numpy as np
from google.protobuf import timestamp_pb2

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

from .types import (
    AdaptiveSettings,
    AllocationMode,
    ArmStats,
    Belief,
    BeliefsResult,
    ChangeEvent,
    ChangeEventType,
    ConsolidationStats,
    ContextItem,
    ContextResult,
    EntityList,
    EntitySummary,
    Experiment,
    ExperimentArm,
    ExperimentDecision,
    ExperimentDecisionKind,
    ExperimentPhase,
    ExperimentStats,
    Fact,
    FactKey,
    ForgetResult,
    FrameworkDeclared,
    HistoryResult,
    IndexStats,
    InferredSlot,
    KindPolicy,
    Memory,
    MemoryInput,
    MemoryKind,
    MemoryScores,
    MemorySource,
    MemoryState,
    Outcome,
    ParameterBound,
    Policy,
    ReasoningContext,
    RecalledMemory,
    RecallMode,
    RecallResult,
    SourceConfidence,
    StateKindCount,
    Stats,
    StreamResult,
    SupersedeResult,
    SweepStats,
    TimeMode,
    TransitionCount,
    Vector,
    VectorLike,
    WriteOutcome,
    WriteResult,
    WriteStats,
    _as_vector,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_E = TypeVar("_E", bound=enum.Enum)


# --- scalars -------------------------------------------------------------------------------------


def vector_to_bytes(vector: VectorLike) -> bytes:
    """Pack a vector as little-endian float32 bytes, the wire format; ``ValueError`` unless 1-D numeric."""
    return _as_vector(vector).tobytes()


def vector_from_bytes(data: bytes) -> Vector | None:
    """Unpack little-endian float32 bytes into a read-only array; ``None`` for empty bytes (no vector)."""
    if not data:
        return None
    if len(data) % 4:
        raise ValueError(f"a packed float32 vector has a multiple of 4 bytes, got {len(data)}")
    # frombuffer over immutable bytes gives a read-only array without a copy.
    return np.frombuffer(data, dtype="<f4")


def time_to_proto(value: datetime, out: timestamp_pb2.Timestamp, name: str = "time") -> None:
    """Write an aware datetime into ``out``; ``ValueError`` naming ``name`` for a naive one."""
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, e.g. datetime.now(timezone.utc)")
    # Exact integer arithmetic: float timestamps lose microseconds far from 1970.
    delta = value - _EPOCH
    out.seconds = delta.days * 86400 + delta.seconds
    out.nanos = delta.microseconds * 1000


def time_from_proto(ts: timestamp_pb2.Timestamp) -> datetime:
    """A UTC datetime from a Timestamp; nanoseconds are truncated to microseconds."""
    return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def enum_from_proto(cls: type[_E], value: int) -> _E:
    """The member of ``cls`` with wire value ``value``; UNSPECIFIED for a value this client does not know."""
    try:
        return cls(value)
    except ValueError:
        return cls["UNSPECIFIED"]


def _opt_enum(value: enum.Enum | None) -> int:
    return 0 if value is None else int(value.value)


def _kind(value: MemoryKind | None) -> memory_pb2.MemoryKind.ValueType:
    return memory_pb2.MemoryKind.ValueType(_opt_enum(value))


def _state(value: MemoryState | None) -> memory_pb2.MemoryState.ValueType:
    return memory_pb2.MemoryState.ValueType(_opt_enum(value))


def _source(value: MemorySource | None) -> memory_pb2.MemorySource.ValueType:
    return memory_pb2.MemorySource.ValueType(_opt_enum(value))


def recall_mode_to_proto(value: RecallMode | None) -> memory_service_pb2.RecallMode.ValueType:
    """The wire value of a recall mode; ``None`` is UNSPECIFIED (the sidecar's default, CURRENT)."""
    return memory_service_pb2.RecallMode.ValueType(_opt_enum(value))


def outcome_to_proto(value: Outcome) -> memory_service_pb2.Outcome.ValueType:
    """The wire value of an outcome."""
    return memory_service_pb2.Outcome.ValueType(_opt_enum(value))


def kinds_to_proto(kinds: Iterable[MemoryKind]) -> list[memory_pb2.MemoryKind.ValueType]:
    """Wire values of a kind filter."""
    return [_kind(k) for k in kinds]


def event_types_to_proto(types: Iterable[ChangeEventType]) -> list[events_pb2.ChangeEventType.ValueType]:
    """Wire values of an event-type filter."""
    return [events_pb2.ChangeEventType.ValueType(_opt_enum(t)) for t in types]


def _opt_time(msg: object, name: str) -> datetime | None:
    return time_from_proto(getattr(msg, name)) if msg.HasField(name) else None  # type: ignore[attr-defined]


def _zero_is_none(value: int) -> int | None:
    return value or None


# --- memory ----------------------------------------------------------------------------------------


def fact_to_proto(fact: Fact) -> memory_pb2.Fact:
    """Fact -> proto."""
    return memory_pb2.Fact(attribute=fact.attribute, value=fact.value)


def fact_from_proto(msg: memory_pb2.Fact) -> Fact:
    """Proto -> Fact."""
    return Fact(attribute=msg.attribute, value=msg.value)


def reasoning_context_to_proto(ctx: ReasoningContext) -> memory_pb2.ReasoningContext:
    """ReasoningContext -> proto."""
    return memory_pb2.ReasoningContext(memory_ids=list(ctx.memory_ids), text=ctx.text)


def reasoning_context_from_proto(msg: memory_pb2.ReasoningContext) -> ReasoningContext:
    """Proto -> ReasoningContext."""
    return ReasoningContext(memory_ids=tuple(msg.memory_ids), text=msg.text)


def scores_to_proto(scores: MemoryScores) -> memory_pb2.MemoryScores:
    """MemoryScores -> proto (float32 on the wire)."""
    return memory_pb2.MemoryScores(
        accuracy=scores.accuracy,
        relevance=scores.relevance,
        utility=scores.utility,
        cost=scores.cost,
        value=scores.value,
    )


def scores_from_proto(msg: memory_pb2.MemoryScores) -> MemoryScores:
    """Proto -> MemoryScores."""
    return MemoryScores(
        accuracy=msg.accuracy, relevance=msg.relevance, utility=msg.utility, cost=msg.cost, value=msg.value
    )


def memory_input_to_proto(item: MemoryInput) -> memory_pb2.MemoryInput:
    """MemoryInput -> proto; ``ValueError`` for a fact that is not a Fact or pair, or a naive valid_from."""
    msg = memory_pb2.MemoryInput(
        content=item.content,
        namespace=item.namespace,
        kind=_kind(item.kind),
        entity=item.entity,
        topic=item.topic,
        source=_source(item.source),
        importance=item.importance or 0,
        tags=list(item.tags),
        metadata=dict(item.metadata),
        framework_version=item.framework_version,
        task_signature=item.task_signature,
    )
    if item.vector is not None:
        msg.vector = vector_to_bytes(item.vector)
    if item.fact is not None:
        fact = item.fact if isinstance(item.fact, Fact) else Fact(*item.fact)
        msg.fact.CopyFrom(fact_to_proto(fact))
    if item.confidence is not None:
        msg.confidence = item.confidence
    if item.valid_from is not None:
        time_to_proto(item.valid_from, msg.valid_from, "valid_from")
    if item.reasoning_context is not None:
        msg.reasoning_context.CopyFrom(reasoning_context_to_proto(item.reasoning_context))
    return msg


def memory_input_from_proto(msg: memory_pb2.MemoryInput) -> MemoryInput:
    """Proto -> MemoryInput; wire defaults (0, UNSPECIFIED, unset) become ``None``."""
    return MemoryInput(
        content=msg.content,
        vector=vector_from_bytes(msg.vector),
        namespace=msg.namespace,
        kind=MemoryKind(msg.kind) if msg.kind else None,
        entity=msg.entity,
        topic=msg.topic,
        fact=fact_from_proto(msg.fact) if msg.HasField("fact") else None,
        source=MemorySource(msg.source) if msg.source else None,
        confidence=msg.confidence if msg.HasField("confidence") else None,
        importance=msg.importance or None,
        tags=tuple(msg.tags),
        metadata=dict(msg.metadata),
        valid_from=_opt_time(msg, "valid_from"),
        framework_version=msg.framework_version,
        reasoning_context=(
            reasoning_context_from_proto(msg.reasoning_context) if msg.HasField("reasoning_context") else None
        ),
        task_signature=msg.task_signature,
    )


def memory_to_proto(memory: Memory) -> memory_pb2.Memory:
    """Memory -> proto."""
    msg = memory_pb2.Memory(
        id=memory.id,
        namespace=memory.namespace,
        kind=_kind(memory.kind),
        state=_state(memory.state),
        content=memory.content,
        entity=memory.entity,
        topic=memory.topic,
        source=_source(memory.source),
        confidence=memory.confidence,
        importance=memory.importance,
        tags=list(memory.tags),
        metadata=dict(memory.metadata),
        turn=memory.turn,
        framework_version=memory.framework_version,
        task_signature=memory.task_signature,
        supersedes=list(memory.supersedes),
        superseded_by=memory.superseded_by or 0,
        consolidated_into=memory.consolidated_into or 0,
        members=list(memory.members),
        access_count=memory.access_count,
        last_access_turn=memory.last_access_turn,
        successes=memory.successes,
        failures=memory.failures,
        sequence=memory.sequence,
        inconsistency=memory.inconsistency,
        demoted_by=memory.demoted_by or 0,
        state_since_turn=memory.state_since_turn,
        possibly_outdated_by=memory.possibly_outdated_by or 0,
    )
    if memory.inferred is not None:
        msg.inferred.CopyFrom(memory_pb2.InferredSlot(**dataclasses.asdict(memory.inferred)))
    if memory.vector is not None:
        msg.vector = vector_to_bytes(memory.vector)
    if memory.fact is not None:
        msg.fact.CopyFrom(fact_to_proto(memory.fact))
    for name in _MEMORY_TIMES:
        value = getattr(memory, name)
        if value is not None:
            time_to_proto(value, getattr(msg, name), name)
    if memory.reasoning_context is not None:
        msg.reasoning_context.CopyFrom(reasoning_context_to_proto(memory.reasoning_context))
    if memory.scores is not None:
        msg.scores.CopyFrom(scores_to_proto(memory.scores))
    return msg


_MEMORY_TIMES = (
    "valid_from",
    "valid_to",
    "recorded_at",
    "updated_at",
    "last_access_at",
    "state_since",
    "confirmed_valid_at",
)
"""Timestamp fields of Memory, the same name in the proto and the dataclass."""


def memory_from_proto(msg: memory_pb2.Memory) -> Memory:
    """Proto -> Memory."""
    return Memory(
        id=msg.id,
        namespace=msg.namespace,
        kind=enum_from_proto(MemoryKind, msg.kind),
        state=enum_from_proto(MemoryState, msg.state),
        content=msg.content,
        vector=vector_from_bytes(msg.vector),
        entity=msg.entity,
        topic=msg.topic,
        fact=fact_from_proto(msg.fact) if msg.HasField("fact") else None,
        source=enum_from_proto(MemorySource, msg.source),
        confidence=msg.confidence,
        importance=msg.importance,
        tags=tuple(msg.tags),
        metadata=dict(msg.metadata),
        valid_from=_opt_time(msg, "valid_from"),
        valid_to=_opt_time(msg, "valid_to"),
        recorded_at=_opt_time(msg, "recorded_at"),
        updated_at=_opt_time(msg, "updated_at"),
        turn=msg.turn,
        framework_version=msg.framework_version,
        reasoning_context=(
            reasoning_context_from_proto(msg.reasoning_context) if msg.HasField("reasoning_context") else None
        ),
        task_signature=msg.task_signature,
        supersedes=tuple(msg.supersedes),
        superseded_by=_zero_is_none(msg.superseded_by),
        consolidated_into=_zero_is_none(msg.consolidated_into),
        members=tuple(msg.members),
        access_count=msg.access_count,
        last_access_at=_opt_time(msg, "last_access_at"),
        last_access_turn=msg.last_access_turn,
        successes=msg.successes,
        failures=msg.failures,
        scores=scores_from_proto(msg.scores) if msg.HasField("scores") else None,
        sequence=msg.sequence,
        inconsistency=msg.inconsistency,
        demoted_by=_zero_is_none(msg.demoted_by),
        state_since=_opt_time(msg, "state_since"),
        state_since_turn=msg.state_since_turn,
        confirmed_valid_at=_opt_time(msg, "confirmed_valid_at"),
        inferred=(
            InferredSlot(
                entity=msg.inferred.entity,
                attribute=msg.inferred.attribute,
                value=msg.inferred.value,
                confidence=msg.inferred.confidence,
                method=msg.inferred.method,
            )
            if msg.HasField("inferred")
            else None
        ),
        possibly_outdated_by=_zero_is_none(msg.possibly_outdated_by),
    )


# --- writes ----------------------------------------------------------------------------------------


def write_result_to_proto(result: WriteResult) -> memory_service_pb2.WriteResult:
    """WriteResult -> proto (``replayed`` lives on the response, not here)."""
    return memory_service_pb2.WriteResult(
        memory=memory_to_proto(result.memory),
        outcome=memory_service_pb2.WriteOutcome.ValueType(result.outcome.value),
        affected_ids=list(result.affected_ids),
    )


def write_result_from_proto(msg: memory_service_pb2.WriteResult, *, replayed: bool = False) -> WriteResult:
    """Proto -> WriteResult; ``replayed`` comes from the enclosing response."""
    return WriteResult(
        memory=memory_from_proto(msg.memory),
        outcome=enum_from_proto(WriteOutcome, msg.outcome),
        affected_ids=tuple(msg.affected_ids),
        replayed=replayed,
    )


def stream_result_to_proto(result: StreamResult) -> memory_service_pb2.RememberStreamResponse:
    """StreamResult -> proto."""
    return memory_service_pb2.RememberStreamResponse(
        ids=list(result.ids),
        created_count=result.created_count,
        replayed_count=result.replayed_count,
        confirmed_count=result.confirmed_count,
    )


def stream_result_from_proto(msg: memory_service_pb2.RememberStreamResponse) -> StreamResult:
    """Proto -> StreamResult."""
    return StreamResult(
        ids=list(msg.ids),
        created_count=msg.created_count,
        replayed_count=msg.replayed_count,
        confirmed_count=msg.confirmed_count,
    )


def forget_result_to_proto(result: ForgetResult) -> memory_service_pb2.ForgetResponse:
    """ForgetResult -> proto."""
    return memory_service_pb2.ForgetResponse(
        forgotten_ids=list(result.forgotten_ids), missing_ids=list(result.missing_ids)
    )


def forget_result_from_proto(msg: memory_service_pb2.ForgetResponse) -> ForgetResult:
    """Proto -> ForgetResult."""
    return ForgetResult(forgotten_ids=list(msg.forgotten_ids), missing_ids=list(msg.missing_ids))


def supersede_result_to_proto(result: SupersedeResult) -> memory_service_pb2.SupersedeResponse:
    """SupersedeResult -> proto."""
    return memory_service_pb2.SupersedeResponse(
        old_memory=memory_to_proto(result.old_memory), new_memory=memory_to_proto(result.new_memory)
    )


def supersede_result_from_proto(msg: memory_service_pb2.SupersedeResponse) -> SupersedeResult:
    """Proto -> SupersedeResult."""
    return SupersedeResult(old_memory=memory_from_proto(msg.old_memory), new_memory=memory_from_proto(msg.new_memory))


def framework_declared_to_proto(result: FrameworkDeclared) -> memory_service_pb2.DeclareFrameworkResponse:
    """FrameworkDeclared -> proto."""
    return memory_service_pb2.DeclareFrameworkResponse(
        previous_version=result.previous_version, flagged_count=result.flagged_count
    )


def framework_declared_from_proto(msg: memory_service_pb2.DeclareFrameworkResponse) -> FrameworkDeclared:
    """Proto -> FrameworkDeclared."""
    return FrameworkDeclared(previous_version=msg.previous_version, flagged_count=msg.flagged_count)


# --- reads -----------------------------------------------------------------------------------------


def recalled_to_proto(item: RecalledMemory) -> memory_service_pb2.RecalledMemory:
    """RecalledMemory -> proto."""
    return memory_service_pb2.RecalledMemory(
        memory=memory_to_proto(item.memory), similarity=item.similarity, score=item.score, hint=item.hint
    )


def recalled_from_proto(msg: memory_service_pb2.RecalledMemory) -> RecalledMemory:
    """Proto -> RecalledMemory."""
    return RecalledMemory(
        memory=memory_from_proto(msg.memory), similarity=msg.similarity, score=msg.score, hint=msg.hint
    )


def recall_result_to_proto(result: RecallResult) -> memory_service_pb2.RecallResponse:
    """RecallResult -> proto."""
    return memory_service_pb2.RecallResponse(
        memories=[recalled_to_proto(m) for m in result.memories], retrieval_id=result.retrieval_id
    )


def recall_result_from_proto(msg: memory_service_pb2.RecallResponse) -> RecallResult:
    """Proto -> RecallResult."""
    return RecallResult(
        memories=[recalled_from_proto(m) for m in msg.memories], retrieval_id=msg.retrieval_id, arm=msg.arm
    )


def context_item_to_proto(item: ContextItem) -> memory_service_pb2.ContextItem:
    """ContextItem -> proto."""
    return memory_service_pb2.ContextItem(
        memory=memory_to_proto(item.memory), group=item.group, hint=item.hint, tokens=item.tokens
    )


def context_item_from_proto(msg: memory_service_pb2.ContextItem) -> ContextItem:
    """Proto -> ContextItem."""
    return ContextItem(memory=memory_from_proto(msg.memory), group=msg.group, hint=msg.hint, tokens=msg.tokens)


def context_result_to_proto(result: ContextResult) -> memory_service_pb2.BuildContextResponse:
    """ContextResult -> proto."""
    return memory_service_pb2.BuildContextResponse(
        text=result.text,
        items=[context_item_to_proto(i) for i in result.items],
        tokens_used=result.tokens_used,
        retrieval_id=result.retrieval_id,
    )


def context_result_from_proto(msg: memory_service_pb2.BuildContextResponse) -> ContextResult:
    """Proto -> ContextResult."""
    return ContextResult(
        text=msg.text,
        items=[context_item_from_proto(i) for i in msg.items],
        tokens_used=msg.tokens_used,
        retrieval_id=msg.retrieval_id,
        arm=msg.arm,
    )


def fact_key_to_proto(key: FactKey) -> memory_service_pb2.FactKey:
    """FactKey -> proto."""
    return memory_service_pb2.FactKey(namespace=key.namespace, entity=key.entity, attribute=key.attribute)


def fact_key_from_proto(msg: memory_service_pb2.FactKey) -> FactKey:
    """Proto -> FactKey."""
    return FactKey(namespace=msg.namespace, entity=msg.entity, attribute=msg.attribute)


def change_event_to_proto(event: ChangeEvent) -> events_pb2.ChangeEvent:
    """ChangeEvent -> proto."""
    msg = events_pb2.ChangeEvent(
        sequence=event.sequence,
        type=events_pb2.ChangeEventType.ValueType(event.type.value),
        memory_id=event.memory_id,
        namespace=event.namespace,
        from_state=_state(event.from_state),
        to_state=_state(event.to_state),
        reason=event.reason,
        related_ids=list(event.related_ids),
        detail=event.detail,
        request_id=event.request_id,
        kind=_kind(event.kind),
        turn=event.turn,
    )
    if event.recorded_at is not None:
        time_to_proto(event.recorded_at, msg.recorded_at, "recorded_at")
    return msg


def change_event_from_proto(msg: events_pb2.ChangeEvent) -> ChangeEvent:
    """Proto -> ChangeEvent."""
    return ChangeEvent(
        sequence=msg.sequence,
        type=enum_from_proto(ChangeEventType, msg.type),
        memory_id=msg.memory_id,
        namespace=msg.namespace,
        from_state=enum_from_proto(MemoryState, msg.from_state),
        to_state=enum_from_proto(MemoryState, msg.to_state),
        recorded_at=_opt_time(msg, "recorded_at"),
        reason=msg.reason,
        related_ids=tuple(msg.related_ids),
        detail=msg.detail,
        request_id=msg.request_id,
        kind=enum_from_proto(MemoryKind, msg.kind),
        turn=msg.turn,
        experiment_decision=(
            experiment_decision_from_proto(msg.experiment_decision) if msg.HasField("experiment_decision") else None
        ),
    )


def history_to_proto(result: HistoryResult) -> memory_service_pb2.HistoryResponse:
    """HistoryResult -> proto."""
    return memory_service_pb2.HistoryResponse(
        versions=[memory_to_proto(m) for m in result.versions],
        events=[change_event_to_proto(e) for e in result.events],
    )


def history_from_proto(msg: memory_service_pb2.HistoryResponse) -> HistoryResult:
    """Proto -> HistoryResult."""
    return HistoryResult(
        versions=[memory_from_proto(m) for m in msg.versions],
        events=[change_event_from_proto(e) for e in msg.events],
    )


def entity_list_from_proto(msg: memory_service_pb2.ListEntitiesResponse) -> EntityList:
    """Proto -> EntityList."""
    return EntityList(
        entities=[
            EntitySummary(
                entity=e.entity,
                memory_count=e.memory_count,
                current_count=e.current_count,
                belief_count=e.belief_count,
                doubted_count=e.doubted_count,
                last_changed_at=_opt_time(e, "last_changed_at"),
            )
            for e in msg.entities
        ],
        total_count=msg.total_count,
    )


def beliefs_from_proto(msg: memory_service_pb2.BeliefsResponse) -> BeliefsResult:
    """Proto -> BeliefsResult."""
    return BeliefsResult(
        entity=msg.entity,
        beliefs=[
            Belief(
                attribute=b.attribute,
                value=b.value,
                read_from_text=b.read_from_text,
                memory=memory_from_proto(b.memory),
                possibly_outdated_by=tuple(b.possibly_outdated_by),
                also_current=[memory_from_proto(m) for m in b.also_current],
                history_key=FactKey(
                    entity=b.history_key.entity, attribute=b.history_key.attribute, namespace=b.history_key.namespace
                ),
                version_count=b.version_count,
            )
            for b in msg.beliefs
        ],
        unattributed_count=msg.unattributed_count,
        last_changed_at=_opt_time(msg, "last_changed_at"),
        as_of=_opt_time(msg, "as_of"),
    )


# --- governance and stats --------------------------------------------------------------------------


def transition_to_proto(item: TransitionCount) -> memory_service_pb2.TransitionCount:
    """TransitionCount -> proto."""
    return memory_service_pb2.TransitionCount(
        from_state=_state(item.from_state), to_state=_state(item.to_state), count=item.count
    )


def transition_from_proto(msg: memory_service_pb2.TransitionCount) -> TransitionCount:
    """Proto -> TransitionCount."""
    return TransitionCount(
        from_state=enum_from_proto(MemoryState, msg.from_state),
        to_state=enum_from_proto(MemoryState, msg.to_state),
        count=msg.count,
    )


def sweep_to_proto(sweep: SweepStats) -> memory_service_pb2.SweepStats:
    """SweepStats -> proto."""
    msg = memory_service_pb2.SweepStats(
        evaluated_count=sweep.evaluated_count,
        transitions=[transition_to_proto(t) for t in sweep.transitions],
        kernel_ms=sweep.kernel_ms,
        total_ms=sweep.total_ms,
        trigger=sweep.trigger,
    )
    if sweep.started_at is not None:
        time_to_proto(sweep.started_at, msg.started_at, "started_at")
    return msg


def sweep_from_proto(msg: memory_service_pb2.SweepStats) -> SweepStats:
    """Proto -> SweepStats."""
    return SweepStats(
        started_at=_opt_time(msg, "started_at"),
        evaluated_count=msg.evaluated_count,
        transitions=tuple(transition_from_proto(t) for t in msg.transitions),
        kernel_ms=msg.kernel_ms,
        total_ms=msg.total_ms,
        trigger=msg.trigger,
    )


def govern_from_proto(msg: memory_service_pb2.GovernResponse) -> SweepStats:
    """Proto -> SweepStats with the consolidation pass that ran with the sweep (None for a dry run)."""
    if not msg.HasField("consolidation"):
        return sweep_from_proto(msg.sweep)
    pass_ = msg.consolidation
    return dataclasses.replace(
        sweep_from_proto(msg.sweep),
        consolidation=ConsolidationStats(
            seeds_examined=pass_.seeds_examined,
            groups_found=pass_.groups_found,
            proposals_opened=pass_.proposals_opened,
            consolidated_count=pass_.consolidated_count,
            expired_count=pass_.expired_count,
            total_ms=pass_.total_ms,
        ),
    )


def stats_to_proto(stats: Stats) -> memory_service_pb2.GetStatsResponse:
    """Stats -> proto."""
    index = memory_service_pb2.IndexStats(
        indexed_count=stats.index.indexed_count,
        fresh_tail_count=stats.index.fresh_tail_count,
        saved_sequence=stats.index.saved_sequence,
    )
    if stats.index.saved_at is not None:
        time_to_proto(stats.index.saved_at, index.saved_at, "saved_at")
    writes = memory_service_pb2.WriteStats(
        refused=stats.writes.refused,
        reason=stats.writes.reason,
        message=stats.writes.message,
        restart_required=stats.writes.restart_required,
    )
    if stats.writes.refused_since is not None:
        time_to_proto(stats.writes.refused_since, writes.refused_since, "refused_since")
    return memory_service_pb2.GetStatsResponse(
        counts=[
            memory_service_pb2.StateKindCount(state=_state(c.state), kind=_kind(c.kind), count=c.count)
            for c in stats.counts
        ],
        total_count=stats.total_count,
        index=index,
        last_sequence=stats.last_sequence,
        embedder=stats.embedder,
        dimension=stats.dimension,
        schema_version=stats.schema_version,
        recent_sweeps=[sweep_to_proto(s) for s in stats.recent_sweeps],
        framework_version=stats.framework_version,
        writes=writes,
    )


def stats_from_proto(msg: memory_service_pb2.GetStatsResponse) -> Stats:
    """Proto -> Stats."""
    return Stats(
        counts=tuple(
            StateKindCount(
                state=enum_from_proto(MemoryState, c.state),
                kind=enum_from_proto(MemoryKind, c.kind),
                count=c.count,
            )
            for c in msg.counts
        ),
        total_count=msg.total_count,
        index=IndexStats(
            indexed_count=msg.index.indexed_count,
            fresh_tail_count=msg.index.fresh_tail_count,
            saved_sequence=msg.index.saved_sequence,
            saved_at=_opt_time(msg.index, "saved_at"),
        ),
        last_sequence=msg.last_sequence,
        embedder=msg.embedder,
        dimension=msg.dimension,
        schema_version=msg.schema_version,
        recent_sweeps=tuple(sweep_from_proto(s) for s in msg.recent_sweeps),
        framework_version=msg.framework_version,
        experiment=experiment_stats_from_proto(msg.experiment) if msg.HasField("experiment") else None,
        writes=WriteStats(
            refused=msg.writes.refused,
            reason=msg.writes.reason,
            message=msg.writes.message,
            refused_since=_opt_time(msg.writes, "refused_since"),
            restart_required=msg.writes.restart_required,
        ),
    )


_KIND_POLICY_FIELDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "confidence_weight",
    "feedback_weight",
    "inconsistency_weight",
    "decay_half_life_s",
    "decay_half_life_turns",
    "access_weight",
    "archive_below",
    "reactivate_above",
    "evict_below",
    "evict_grace_s",
    "min_time_in_state_s",
    "evict_grace_turns",
    "min_time_in_state_turns",
    "confidence_floor",
    "confidence_decay_half_life_s",
    "confidence_decay_half_life_turns",
)


def kind_policy_to_proto(policy: KindPolicy) -> policy_pb2.KindPolicy:
    """KindPolicy -> proto."""
    msg = policy_pb2.KindPolicy(kind=_kind(policy.kind))
    for name in _KIND_POLICY_FIELDS:
        setattr(msg, name, getattr(policy, name))
    return msg


def kind_policy_from_proto(msg: policy_pb2.KindPolicy) -> KindPolicy:
    """Proto -> KindPolicy."""
    values = {name: getattr(msg, name) for name in _KIND_POLICY_FIELDS}
    return KindPolicy(kind=enum_from_proto(MemoryKind, msg.kind), **values)


def policy_to_proto(policy: Policy) -> policy_pb2.Policy:
    """Policy -> proto."""
    sc = policy.source_confidence
    source_confidence = policy_pb2.SourceConfidence(
        tool_result=sc.tool_result,
        user_statement=sc.user_statement,
        agent_inference=sc.agent_inference,
        reflection=sc.reflection,
        imported=sc.imported,
    )
    return policy_pb2.Policy(
        name=policy.name,
        time_mode=policy_pb2.TimeMode.ValueType(policy.time_mode.value),
        kinds=[kind_policy_to_proto(k) for k in policy.kinds],
        source_confidence=source_confidence,
        soft_conflict_similarity=policy.soft_conflict_similarity,
        duplicate_similarity=policy.duplicate_similarity,
        strategy_upgrade_probability=policy.strategy_upgrade_probability,
        cost_budget_bytes=policy.cost_budget_bytes,
        multi_valued_attributes=list(policy.multi_valued_attributes),
        tuning_bounds=[
            policy_pb2.ParameterBound(parameter=b.parameter, min=b.min, max=b.max) for b in policy.tuning_bounds
        ],
    )


def policy_from_proto(msg: policy_pb2.Policy) -> Policy:
    """Proto -> Policy."""
    sc = msg.source_confidence
    return Policy(
        name=msg.name,
        time_mode=enum_from_proto(TimeMode, msg.time_mode),
        kinds=tuple(kind_policy_from_proto(k) for k in msg.kinds),
        source_confidence=SourceConfidence(
            tool_result=sc.tool_result,
            user_statement=sc.user_statement,
            agent_inference=sc.agent_inference,
            reflection=sc.reflection,
            imported=sc.imported,
        ),
        soft_conflict_similarity=msg.soft_conflict_similarity,
        duplicate_similarity=msg.duplicate_similarity,
        strategy_upgrade_probability=msg.strategy_upgrade_probability,
        cost_budget_bytes=msg.cost_budget_bytes,
        multi_valued_attributes=tuple(msg.multi_valued_attributes),
        tuning_bounds=tuple(ParameterBound(parameter=b.parameter, min=b.min, max=b.max) for b in msg.tuning_bounds),
    )


def adaptive_to_proto(a: AdaptiveSettings) -> policy_pb2.AdaptiveSettings:
    """AdaptiveSettings -> proto."""
    return policy_pb2.AdaptiveSettings(
        allocation=policy_pb2.AllocationMode.ValueType(a.allocation.value),
        floor_share=a.floor_share,
        snapshot_outcomes=a.snapshot_outcomes,
        control_arm=a.control_arm,
        promote_probability=a.promote_probability,
        min_outcomes=a.min_outcomes,
        min_promotion_interval_s=a.min_promotion_interval_s,
        tunable_parameters=list(a.tunable_parameters),
        replay_tolerance=a.replay_tolerance,
    )


def adaptive_from_proto(msg: policy_pb2.AdaptiveSettings) -> AdaptiveSettings:
    """Proto -> AdaptiveSettings."""
    return AdaptiveSettings(
        allocation=enum_from_proto(AllocationMode, msg.allocation),
        floor_share=msg.floor_share,
        snapshot_outcomes=msg.snapshot_outcomes,
        control_arm=msg.control_arm,
        promote_probability=msg.promote_probability,
        min_outcomes=msg.min_outcomes,
        min_promotion_interval_s=msg.min_promotion_interval_s,
        tunable_parameters=tuple(msg.tunable_parameters),
        replay_tolerance=msg.replay_tolerance,
    )


def experiment_to_proto(experiment: Experiment) -> policy_pb2.Experiment:
    """Experiment -> proto."""
    msg = policy_pb2.Experiment(
        name=experiment.name,
        arms=[
            policy_pb2.ExperimentArm(name=a.name, policy=policy_to_proto(a.policy), weight=a.weight)
            for a in experiment.arms
        ],
    )
    if experiment.adaptive is not None:
        msg.adaptive.CopyFrom(adaptive_to_proto(experiment.adaptive))
    return msg


def experiment_from_proto(msg: policy_pb2.Experiment) -> Experiment:
    """Proto -> Experiment."""
    return Experiment(
        name=msg.name,
        arms=tuple(ExperimentArm(name=a.name, policy=policy_from_proto(a.policy), weight=a.weight) for a in msg.arms),
        adaptive=adaptive_from_proto(msg.adaptive) if msg.HasField("adaptive") else None,
    )


def arm_stats_from_proto(a: policy_pb2.ArmStats) -> ArmStats:
    """Proto -> ArmStats."""
    return ArmStats(
        name=a.name,
        share=a.share,
        retrieval_count=a.retrieval_count,
        outcome_count=a.outcome_count,
        successes=a.successes,
        failures=a.failures,
        success_rate=a.success_rate,
        success_low=a.success_low,
        success_high=a.success_high,
        probability_best=a.probability_best,
        probability_beats_control=a.probability_beats_control,
    )


def experiment_decision_from_proto(d: policy_pb2.ExperimentDecision) -> ExperimentDecision:
    """Proto -> ExperimentDecision."""
    return ExperimentDecision(
        kind=enum_from_proto(ExperimentDecisionKind, d.kind),
        arm=d.arm,
        control_arm=d.control_arm,
        decided_at_s=d.decided_at_s,
        probability_better=d.probability_better,
        arm_stats=arm_stats_from_proto(d.arm_stats) if d.HasField("arm_stats") else None,
        control_stats=arm_stats_from_proto(d.control_stats) if d.HasField("control_stats") else None,
        promoted_stats=arm_stats_from_proto(d.promoted_stats) if d.HasField("promoted_stats") else None,
        replay_candidate_objective=d.replay_candidate_objective,
        replay_current_objective=d.replay_current_objective,
        replay_retrievals=d.replay_retrievals,
        previous_policy=policy_from_proto(d.previous_policy),
        reason=d.reason,
    )


def experiment_stats_from_proto(msg: policy_pb2.ExperimentStats) -> ExperimentStats:
    """Proto -> ExperimentStats."""
    return ExperimentStats(
        name=msg.name,
        arms=tuple(arm_stats_from_proto(a) for a in msg.arms),
        allocation=enum_from_proto(AllocationMode, msg.allocation),
        phase=enum_from_proto(ExperimentPhase, msg.phase),
        control_arm=msg.control_arm,
        promoted_arm=msg.promoted_arm,
        promoted_stats=arm_stats_from_proto(msg.promoted_stats) if msg.HasField("promoted_stats") else None,
        snapshot=msg.snapshot,
        decisions=tuple(experiment_decision_from_proto(d) for d in msg.decisions),
    )
