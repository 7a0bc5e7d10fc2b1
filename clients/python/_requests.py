"""Request messages built from client-method arguments, shared by the sync and asyncio clients.

Private. ``None`` and empty arguments map to the wire's "not set", so the
sidecar applies its documented defaults. ``ValueError`` for what the client can
tell is wrong on its own (shape of a vector, a naive datetime, a non-integer id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from memevo.v1 import memory_service_pb2 as pb

from . import _convert as cv
from ._channel import ids_list
from .types import (
    ChangeEventType,
    Experiment,
    Fact,
    FactKey,
    MemoryInput,
    MemoryKind,
    MemorySource,
    Outcome,
    Policy,
    ReasoningContext,
    RecallMode,
    VectorLike,
)

StreamItem = MemoryInput | tuple[MemoryInput, str]
"""An item of ``remember_stream``: a memory, or a memory with its own request id."""


def memory_input(
    content: str | None,
    *,
    vector: VectorLike | None,
    namespace: str | None,
    kind: MemoryKind | None,
    entity: str | None,
    topic: str | None,
    fact: tuple[str, str] | Fact | None,
    source: MemorySource | None,
    confidence: float | None,
    importance: int | None,
    tags: Iterable[str],
    metadata: Mapping[str, str] | None,
    valid_from: datetime | None,
    framework_version: str | None,
    reasoning_context: ReasoningContext | None,
    task_signature: str | None,
) -> MemoryInput:
    """The MemoryInput that ``remember``'s keyword arguments describe."""
    if isinstance(tags, str):
        raise ValueError("tags must be a sequence of strings, not one string")
    return MemoryInput(
        content=content or "",
        vector=vector,
        namespace=namespace or "",
        kind=kind,
        entity=entity or "",
        topic=topic or "",
        fact=fact,
        source=source,
        confidence=confidence,
        importance=importance,
        tags=tuple(tags),
        metadata=dict(metadata or {}),
        valid_from=valid_from,
        framework_version=framework_version or "",
        reasoning_context=reasoning_context,
        task_signature=task_signature or "",
    )


def remember(item: MemoryInput, *, request_id: str | None, turn: int | None) -> pb.RememberRequest:
    """RememberRequest for one memory."""
    msg = pb.RememberRequest(memory=cv.memory_input_to_proto(item), request_id=request_id or "")
    if turn is not None:
        msg.turn = turn
    return msg


def remember_batch(
    items: Iterable[MemoryInput], *, request_id: str | None, turn: int | None
) -> pb.RememberBatchRequest:
    """RememberBatchRequest for several memories, all or nothing."""
    msg = pb.RememberBatchRequest(
        memories=[cv.memory_input_to_proto(_check_input(i)) for i in items], request_id=request_id or ""
    )
    if turn is not None:
        msg.turn = turn
    return msg


STREAM_GROUP_ITEMS = 64
"""Items the client puts in one RememberStreamRequest at most.

Each message costs a hand-off between gRPC's threads and the handler's on both sides (about 0.1 ms of
Python); one memory per message capped a stream near 5,000 memories/s, tens per message lift the cap
to what the sidecar's writes cost. Nothing is acknowledged before the stream ends, so holding a few
items back until a group fills changes no answer.
"""
STREAM_GROUP_BYTES = 1 << 20
"""Serialized size at which a group is sent early (long texts or wide vectors), far below message limits."""


class StreamGroups:
    """Groups stream items into RememberStreamRequests of up to STREAM_GROUP_ITEMS items (or ~1 MiB)."""

    def __init__(self, turn: int | None) -> None:
        self._turn = turn
        self._items: list[pb.RememberStreamItem] = []
        self._bytes = 0

    def add(self, item: StreamItem) -> pb.RememberStreamRequest | None:
        """Take one item; a full group to send, or None."""
        request_id = ""
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[1], str):
                raise ValueError("a stream item is a MemoryInput or a (MemoryInput, request_id) pair")
            item, request_id = item
        entry = pb.RememberStreamItem(memory=cv.memory_input_to_proto(_check_input(item)), request_id=request_id)
        self._items.append(entry)
        self._bytes += entry.ByteSize()
        if len(self._items) >= STREAM_GROUP_ITEMS or self._bytes >= STREAM_GROUP_BYTES:
            return self.flush()
        return None

    def flush(self) -> pb.RememberStreamRequest | None:
        """The group so far (None when empty)."""
        if not self._items:
            return None
        msg = pb.RememberStreamRequest(items=self._items)
        if self._turn is not None:
            msg.turn = self._turn
        self._items, self._bytes = [], 0
        return msg


def _check_input(item: object) -> MemoryInput:
    if not isinstance(item, MemoryInput):
        raise ValueError(f"expected a MemoryInput, got {type(item).__name__}")
    return item


def recall_filter(
    *,
    namespace: str | None,
    kinds: Iterable[MemoryKind],
    entity: str | None,
    tags: Iterable[str],
    valid_from_after: datetime | None,
    valid_from_before: datetime | None,
) -> pb.RecallFilter:
    """The RecallFilter shared by recall and build_context; empty fields filter nothing."""
    if isinstance(tags, str):
        raise ValueError("tags must be a sequence of strings, not one string")
    msg = pb.RecallFilter(
        namespace=namespace or "", kinds=cv.kinds_to_proto(kinds), entity=entity or "", tags=list(tags)
    )
    if valid_from_after is not None:
        cv.time_to_proto(valid_from_after, msg.valid_from_after, "valid_from_after")
    if valid_from_before is not None:
        cv.time_to_proto(valid_from_before, msg.valid_from_before, "valid_from_before")
    return msg


def recall(
    query: str | None,
    *,
    vector: VectorLike | None,
    k: int,
    filter: pb.RecallFilter,
    mode: RecallMode | None,
    include_archived: bool,
    as_of: datetime | None,
    include_vectors: bool,
    turn: int | None,
    diversity: float = 0.0,
    peek: bool = False,
) -> pb.RecallRequest:
    """RecallRequest."""
    msg = pb.RecallRequest(
        query=query or "",
        k=k,
        filter=filter,
        mode=cv.recall_mode_to_proto(mode),
        include_archived=include_archived,
        include_vectors=include_vectors,
        diversity=diversity,
        peek=peek,
    )
    if vector is not None:
        msg.query_vector = cv.vector_to_bytes(vector)
    if as_of is not None:
        cv.time_to_proto(as_of, msg.as_of, "as_of")
    if turn is not None:
        msg.turn = turn
    return msg


def build_context(
    query: str | None,
    *,
    vector: VectorLike | None,
    token_budget: int | None,
    language: str | None,
    filter: pb.RecallFilter,
    mode: RecallMode | None,
    as_of: datetime | None,
    turn: int | None,
) -> pb.BuildContextRequest:
    """BuildContextRequest."""
    msg = pb.BuildContextRequest(
        query=query or "",
        token_budget=token_budget or 0,
        language=language or "",
        filter=filter,
        mode=cv.recall_mode_to_proto(mode),
    )
    if vector is not None:
        msg.query_vector = cv.vector_to_bytes(vector)
    if as_of is not None:
        cv.time_to_proto(as_of, msg.as_of, "as_of")
    if turn is not None:
        msg.turn = turn
    return msg


def report_outcome(
    retrieval_id: str,
    outcome: Outcome,
    *,
    used_memory_ids: Iterable[int],
    note: str,
    reward: float | None = None,
    request_id: str | None,
    turn: int | None,
    namespace: str | None = None,
) -> pb.ReportOutcomeRequest:
    """ReportOutcomeRequest."""
    if not isinstance(outcome, Outcome):
        raise ValueError(f"outcome must be an Outcome, got {outcome!r}")
    msg = pb.ReportOutcomeRequest(
        retrieval_id=retrieval_id,
        outcome=cv.outcome_to_proto(outcome),
        used_memory_ids=ids_list(used_memory_ids),
        note=note,
        request_id=request_id or "",
        namespace=namespace or "",
    )
    if turn is not None:
        msg.turn = turn
    if reward is not None:
        msg.reward = reward
    return msg


def get(ids: int | Iterable[int], *, include_vectors: bool) -> pb.GetRequest:
    """GetRequest."""
    return pb.GetRequest(ids=ids_list(ids), include_vectors=include_vectors)


def history(subject: int | FactKey) -> pb.HistoryRequest:
    """HistoryRequest for a memory's lineage (an id) or a fact key's versions."""
    if isinstance(subject, FactKey):
        return pb.HistoryRequest(fact_key=cv.fact_key_to_proto(subject))
    (memory_id,) = ids_list(subject)
    return pb.HistoryRequest(memory_id=memory_id)


def list_entities(namespace: str | None, *, query: str, limit: int | None) -> pb.ListEntitiesRequest:
    """ListEntitiesRequest."""
    return pb.ListEntitiesRequest(namespace=namespace or "", query=query, limit=limit or 0)


def beliefs(entity: str, *, namespace: str | None, as_of: datetime | None = None) -> pb.BeliefsRequest:
    """BeliefsRequest."""
    msg = pb.BeliefsRequest(entity=entity, namespace=namespace or "")
    if as_of is not None:
        cv.time_to_proto(as_of, msg.as_of, "as_of")
    return msg


def forget(
    ids: int | Iterable[int], *, reason: str, keep_history: bool, request_id: str | None, turn: int | None
) -> pb.ForgetRequest:
    """ForgetRequest."""
    msg = pb.ForgetRequest(ids=ids_list(ids), reason=reason, keep_history=keep_history, request_id=request_id or "")
    if turn is not None:
        msg.turn = turn
    return msg


def supersede(
    old_id: int, new: int | MemoryInput, *, reason: str, request_id: str | None, turn: int | None
) -> pb.SupersedeRequest:
    """SupersedeRequest: ``new`` is an existing memory's id or a new memory to store."""
    msg = pb.SupersedeRequest(old_id=old_id, reason=reason, request_id=request_id or "")
    if isinstance(new, MemoryInput):
        msg.new_memory.CopyFrom(cv.memory_input_to_proto(new))
    else:
        (msg.new_id,) = ids_list(new)
    if turn is not None:
        msg.turn = turn
    return msg


def govern(*, dry_run: bool, namespace: str | None, turn: int | None) -> pb.GovernRequest:
    """GovernRequest."""
    msg = pb.GovernRequest(dry_run=dry_run, namespace=namespace or "")
    if turn is not None:
        msg.turn = turn
    return msg


def watch(after_sequence: int | None, *, namespace: str | None, types: Iterable[ChangeEventType]) -> pb.WatchRequest:
    """WatchRequest; ``after_sequence=None`` asks only for events after the call."""
    msg = pb.WatchRequest(namespace=namespace or "", types=cv.event_types_to_proto(types))
    if after_sequence is not None:
        msg.after_sequence = after_sequence
    return msg


def restore(memory_id: int, *, reason: str, request_id: str | None, turn: int | None) -> pb.RestoreRequest:
    """RestoreRequest."""
    (one,) = ids_list(memory_id)
    msg = pb.RestoreRequest(memory_id=one, reason=reason, request_id=request_id or "")
    if turn is not None:
        msg.turn = turn
    return msg


def unconsolidate(abstraction_id: int, *, request_id: str | None) -> pb.UnconsolidateRequest:
    """UnconsolidateRequest."""
    return pb.UnconsolidateRequest(abstraction_id=abstraction_id, request_id=request_id or "")


def declare_framework(
    version: str, *, description: str, request_id: str | None, turn: int | None
) -> pb.DeclareFrameworkRequest:
    """DeclareFrameworkRequest."""
    msg = pb.DeclareFrameworkRequest(version=version, description=description, request_id=request_id or "")
    if turn is not None:
        msg.turn = turn
    return msg


def update_policy(policy: Policy, *, request_id: str | None) -> pb.UpdatePolicyRequest:
    """UpdatePolicyRequest."""
    return pb.UpdatePolicyRequest(policy=cv.policy_to_proto(policy), request_id=request_id or "")


def set_experiment(experiment: Experiment, *, request_id: str | None) -> pb.SetExperimentRequest:
    """SetExperimentRequest."""
    return pb.SetExperimentRequest(experiment=cv.experiment_to_proto(experiment), request_id=request_id or "")


def promote_arm(arm: str, *, request_id: str | None) -> pb.PromoteArmRequest:
    """PromoteArmRequest."""
    return pb.PromoteArmRequest(arm=arm, request_id=request_id or "")
