"""Conversions between the client's domain objects and protobuf, and the request builders."""

from __future__ import annotations

import dataclasses
import enum
import struct
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from google.protobuf import timestamp_pb2

from memevo.client import _convert as cv
from memevo.client import _requests as rq
from memevo.client._channel import channel_options, check_target, ids_list
from memevo.client.types import (
    ChangeEvent,
    ChangeEventType,
    ContextItem,
    ContextResult,
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
    WriteOutcome,
    WriteResult,
    WriteStats,
)
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

UTC = timezone.utc
T0 = datetime(2024, 5, 17, 8, 30, 12, 345678, tzinfo=UTC)

# Floats below are exact in float32, so a trip through a proto float field keeps them equal.


def full_memory(memory_id: int = 7, *, with_vector: bool = True) -> Memory:
    return Memory(
        id=memory_id,
        namespace="agent-1",
        kind=MemoryKind.FACT,
        state=MemoryState.OBSOLETE,
        content="alice prefers Python",
        vector=np.array([0.5, -1.0, 0.25, 2.0], dtype="<f4") if with_vector else None,
        entity="user:alice",
        topic="languages",
        fact=Fact("preferred_language", "Python"),
        source=MemorySource.USER_STATEMENT,
        confidence=0.75,
        importance=8,
        tags=("pref", "lang"),
        metadata={"origin": "chat", "lang": "en"},
        valid_from=T0,
        valid_to=T0 + timedelta(days=3),
        recorded_at=T0 + timedelta(seconds=1),
        updated_at=T0 + timedelta(days=3, seconds=1),
        turn=42,
        framework_version="planner-v1",
        reasoning_context=ReasoningContext(memory_ids=(1, 2), text="while planning"),
        task_signature="deploy:python-service",
        supersedes=(3, 4),
        superseded_by=9,
        consolidated_into=11,
        members=(5, 6),
        access_count=12,
        last_access_at=T0 + timedelta(hours=5),
        last_access_turn=40,
        successes=3.0,
        failures=1.5,
        inconsistency=0.25,
        demoted_by=17,
        scores=MemoryScores(accuracy=0.5, relevance=0.25, utility=0.75, cost=0.125, value=0.375),
        sequence=99,
        state_since=T0 + timedelta(days=3),
        state_since_turn=41,
        confirmed_valid_at=T0 + timedelta(days=2),
        inferred=InferredSlot(
            entity="user:ana", attribute="language", value="french", confidence=0.75, method="template"
        ),
        possibly_outdated_by=23,
    )


def full_input() -> MemoryInput:
    return MemoryInput(
        content="alice prefers Python",
        vector=[0.5, -1.0, 0.25, 2.0],
        namespace="agent-1",
        kind=MemoryKind.PREFERENCE,
        entity="user:alice",
        topic="languages",
        fact=("preferred_language", "Python"),
        source=MemorySource.TOOL_RESULT,
        confidence=0.5,
        importance=3,
        tags=("a", "b"),
        metadata={"k": "v"},
        valid_from=T0,
        framework_version="v2",
        reasoning_context=ReasoningContext(memory_ids=(8,), text="ctx"),
        task_signature="sig",
    )


def full_event(sequence: int = 5) -> ChangeEvent:
    return ChangeEvent(
        sequence=sequence,
        type=ChangeEventType.SUPERSEDED,
        memory_id=7,
        namespace="agent-1",
        from_state=MemoryState.ACTIVE,
        to_state=MemoryState.OBSOLETE,
        recorded_at=T0,
        reason="superseded",
        related_ids=(9,),
        detail="d",
        request_id="req-1",
        kind=MemoryKind.FACT,
        turn=4,
    )


def full_sweep() -> SweepStats:
    return SweepStats(
        started_at=T0,
        evaluated_count=1000,
        transitions=(TransitionCount(MemoryState.ACTIVE, MemoryState.ARCHIVED, 12),),
        kernel_ms=1.5,
        total_ms=7.25,
        trigger="request",
    )


# --- enums ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("py_enum", "proto_enum", "prefix"),
    [
        (MemoryKind, memory_pb2.MemoryKind, "MEMORY_KIND_"),
        (MemoryState, memory_pb2.MemoryState, "MEMORY_STATE_"),
        (MemorySource, memory_pb2.MemorySource, "MEMORY_SOURCE_"),
        (RecallMode, memory_service_pb2.RecallMode, "RECALL_MODE_"),
        (WriteOutcome, memory_service_pb2.WriteOutcome, "WRITE_OUTCOME_"),
        (ChangeEventType, events_pb2.ChangeEventType, "CHANGE_EVENT_TYPE_"),
        (Outcome, memory_service_pb2.Outcome, "OUTCOME_"),
        (TimeMode, policy_pb2.TimeMode, "TIME_MODE_"),
    ],
)
def test_enum_members_mirror_the_contract(py_enum: type[enum.Enum], proto_enum: object, prefix: str) -> None:
    proto_members = {v.name.removeprefix(prefix): v.number for v in proto_enum.DESCRIPTOR.values}  # type: ignore[attr-defined]
    assert {m.name: m.value for m in py_enum} == proto_members


def test_unknown_enum_value_reads_as_unspecified() -> None:
    assert cv.enum_from_proto(MemoryKind, 77) is MemoryKind.UNSPECIFIED
    msg = memory_pb2.Memory(id=1)
    msg.state = 42  # type: ignore[assignment]
    assert cv.memory_from_proto(msg).state is MemoryState.UNSPECIFIED


# --- vectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        [1.0, 2.5, -3.0],
        (1.0, 2.5, -3.0),
        np.array([1.0, 2.5, -3.0]),
        np.array([1.0, 2.5, -3.0], dtype=np.float32),
        np.array([1.0, 2.5, -3.0], dtype=">f4"),
        np.array([1.0, 2.5, -3.0], dtype=np.float16),
    ],
)
def test_vector_packs_as_little_endian_float32(value: object) -> None:
    assert cv.vector_to_bytes(value) == struct.pack("<3f", 1.0, 2.5, -3.0)  # type: ignore[arg-type]


def test_integer_vector_packs_as_float32() -> None:
    assert cv.vector_to_bytes([1, 2, -3]) == struct.pack("<3f", 1.0, 2.0, -3.0)


def test_vector_bytes_round_trip() -> None:
    v = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    back = cv.vector_from_bytes(cv.vector_to_bytes(v))
    assert back is not None
    assert back.dtype == np.dtype("<f4")
    assert np.array_equal(back, v)
    assert not back.flags.writeable


def test_empty_vector_bytes_is_none() -> None:
    assert cv.vector_from_bytes(b"") is None


@pytest.mark.parametrize("bad", [[[1.0, 2.0], [3.0, 4.0]], 3.0, "abc", ["a", "b"]])
def test_vector_that_is_not_1d_numeric_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="vector"):
        cv.vector_to_bytes(bad)  # type: ignore[arg-type]


def test_vector_bytes_of_odd_length_are_rejected() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        cv.vector_from_bytes(b"\x00\x00\x80")


# --- timestamps -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        T0,
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 5, 17, 10, 30, tzinfo=timezone(timedelta(hours=2))),
    ],
)
def test_timestamp_round_trip_is_exact_and_utc(value: datetime) -> None:
    ts = timestamp_pb2.Timestamp()
    cv.time_to_proto(value, ts)
    back = cv.time_from_proto(ts)
    assert back == value
    assert back.tzinfo is not None
    assert back.utcoffset() == timedelta(0)


def test_timestamp_matches_protobuf_own_conversion() -> None:
    ts = timestamp_pb2.Timestamp()
    cv.time_to_proto(T0, ts)
    reference = timestamp_pb2.Timestamp()
    reference.FromDatetime(T0)
    assert (ts.seconds, ts.nanos) == (reference.seconds, reference.nanos)


def test_timestamp_nanoseconds_truncate_to_microseconds() -> None:
    ts = timestamp_pb2.Timestamp(seconds=1, nanos=123456789)
    assert cv.time_from_proto(ts) == datetime(1970, 1, 1, 0, 0, 1, 123456, tzinfo=UTC)


def test_naive_datetime_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        cv.time_to_proto(datetime(2024, 1, 1), timestamp_pb2.Timestamp(), "as_of")
    with pytest.raises(ValueError, match="valid_from"):
        MemoryInput(content="x", valid_from=datetime(2024, 1, 1))


def test_unset_timestamps_read_as_none() -> None:
    memory = cv.memory_from_proto(memory_pb2.Memory(id=1))
    assert memory.valid_from is None
    assert memory.valid_to is None
    assert memory.last_access_at is None


# --- round trips of every domain type ----------------------------------------------------------------


def test_memory_round_trip() -> None:
    memory = full_memory()
    msg = cv.memory_to_proto(memory)
    assert msg.vector == np.array([0.5, -1.0, 0.25, 2.0], "<f4").tobytes()
    assert msg.kind == memory_pb2.MEMORY_KIND_FACT
    assert msg.state == memory_pb2.MEMORY_STATE_OBSOLETE
    back = cv.memory_from_proto(msg)
    assert back == memory
    assert back.valid_from is not None
    assert back.valid_from.tzinfo is not None
    assert isinstance(back.vector, np.ndarray)
    assert cv.memory_to_proto(back) == msg


def test_every_memory_field_has_a_place_in_the_dataclass() -> None:
    """A field added to the proto Memory must reach Python users (full_memory then sets it, so it round-trips)."""
    proto_fields = {f.name for f in memory_pb2.Memory.DESCRIPTOR.fields}
    assert proto_fields - {f.name for f in dataclasses.fields(Memory)} == set()
    msg = cv.memory_to_proto(full_memory())
    assert [f.name for f in memory_pb2.Memory.DESCRIPTOR.fields if not _is_set(msg, f)] == []


def _is_set(msg: memory_pb2.Memory, field: Any) -> bool:
    if field.is_repeated:
        return len(getattr(msg, field.name)) > 0
    if field.has_presence:
        return msg.HasField(field.name)
    return getattr(msg, field.name) != field.default_value


def test_proto_memory_round_trip() -> None:
    msg = cv.memory_to_proto(full_memory())
    assert cv.memory_to_proto(cv.memory_from_proto(msg)).SerializeToString(deterministic=True) == (
        msg.SerializeToString(deterministic=True)
    )


def test_minimal_memory_round_trip() -> None:
    memory = Memory(id=1, kind=MemoryKind.EPISODE, state=MemoryState.ACTIVE, content="hi")
    back = cv.memory_from_proto(cv.memory_to_proto(memory))
    assert back == memory
    assert back.vector is None
    assert back.fact is None
    assert back.superseded_by is None
    assert back.scores is None


def test_memory_equality_and_hash() -> None:
    a, b = full_memory(), full_memory()
    assert a == b
    assert hash(a) == hash(b)
    assert a != full_memory(with_vector=False)
    assert a != full_memory(memory_id=8)
    assert {a, b} == {a}


def test_memory_input_round_trip() -> None:
    item = full_input()
    msg = cv.memory_input_to_proto(item)
    assert msg.fact.attribute == "preferred_language"
    assert msg.HasField("confidence")
    assert msg.vector == np.asarray([0.5, -1.0, 0.25, 2.0], "<f4").tobytes()
    assert cv.memory_input_from_proto(msg) == item


def test_minimal_memory_input_leaves_defaults_to_the_sidecar() -> None:
    item = MemoryInput(content="hello")
    msg = cv.memory_input_to_proto(item)
    assert msg == memory_pb2.MemoryInput(content="hello")
    assert not msg.HasField("confidence")
    assert not msg.HasField("valid_from")
    assert not msg.HasField("fact")
    assert cv.memory_input_from_proto(msg) == item


def test_memory_input_normalises_its_fields() -> None:
    item = MemoryInput(vector=[1, 2, 3], fact=("a", "b"), tags=["x", "y"], metadata={"k": "v"})  # type: ignore[arg-type]
    assert isinstance(item.vector, np.ndarray)
    assert item.vector.dtype == np.dtype("<f4")
    assert not item.vector.flags.writeable
    assert item.fact == Fact("a", "b")
    assert item.tags == ("x", "y")
    assert item == MemoryInput(
        vector=np.array([1.0, 2.0, 3.0]), fact=Fact("a", "b"), tags=("x", "y"), metadata={"k": "v"}
    )
    with pytest.raises(ValueError, match="1-D"):
        MemoryInput(vector=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="tags"):
        MemoryInput(tags="oops")  # type: ignore[arg-type]


def test_memory_input_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        MemoryInput("positional")  # type: ignore[call-arg]


def test_write_result_round_trip() -> None:
    result = WriteResult(full_memory(with_vector=False), WriteOutcome.SUPERSEDED_PREVIOUS, (3,), replayed=True)
    msg = cv.write_result_to_proto(result)
    assert cv.write_result_from_proto(msg, replayed=True) == result
    assert result.id == 7


def test_stream_result_round_trip() -> None:
    result = StreamResult(ids=[1, 2, 2], created_count=2, replayed_count=1)
    assert cv.stream_result_from_proto(cv.stream_result_to_proto(result)) == result


def test_recall_result_round_trip_and_sequence_protocol() -> None:
    result = RecallResult(
        memories=[
            RecalledMemory(full_memory(1), similarity=1.0, score=0.875, hint="current"),
            RecalledMemory(full_memory(2), similarity=0.5, score=0.25, hint="historical reference"),
        ],
        retrieval_id="r-1",
    )
    assert cv.recall_result_from_proto(cv.recall_result_to_proto(result)) == result
    assert len(result) == 2
    assert [r.memory.id for r in result] == [1, 2]
    assert result[0].similarity == 1.0
    assert result[:1] == result.memories[:1]
    assert result.ids == [1, 2]


def test_context_result_round_trip() -> None:
    result = ContextResult(
        text="## facts\n- alice prefers Python",
        items=[ContextItem(full_memory(), group="facts", hint="current", tokens=9)],
        tokens_used=12,
        retrieval_id="r-2",
    )
    assert cv.context_result_from_proto(cv.context_result_to_proto(result)) == result


def test_forget_supersede_framework_round_trips() -> None:
    forget = ForgetResult(forgotten_ids=[1, 2], missing_ids=[3])
    assert cv.forget_result_from_proto(cv.forget_result_to_proto(forget)) == forget
    supersede = SupersedeResult(full_memory(1), full_memory(2))
    assert cv.supersede_result_from_proto(cv.supersede_result_to_proto(supersede)) == supersede
    declared = FrameworkDeclared(previous_version="v1", flagged_count=10)
    assert cv.framework_declared_from_proto(cv.framework_declared_to_proto(declared)) == declared
    key = FactKey(entity="user:alice", attribute="lang", namespace="ns")
    assert cv.fact_key_from_proto(cv.fact_key_to_proto(key)) == key


def test_change_event_round_trip() -> None:
    event = full_event()
    msg = cv.change_event_to_proto(event)
    assert msg.type == events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED
    assert cv.change_event_from_proto(msg) == event


def test_created_event_has_unspecified_from_state() -> None:
    msg = events_pb2.ChangeEvent(
        sequence=1, type=events_pb2.CHANGE_EVENT_TYPE_CREATED, to_state=memory_pb2.MEMORY_STATE_ACTIVE
    )
    event = cv.change_event_from_proto(msg)
    assert event.type is ChangeEventType.CREATED
    assert event.from_state is MemoryState.UNSPECIFIED
    assert event.to_state is MemoryState.ACTIVE
    assert event.recorded_at is None


def test_history_round_trip() -> None:
    result = HistoryResult(versions=[full_memory(1), full_memory(2)], events=[full_event(1), full_event(2)])
    assert cv.history_from_proto(cv.history_to_proto(result)) == result


def test_stats_round_trip_and_count() -> None:
    stats = Stats(
        counts=(
            StateKindCount(MemoryState.ACTIVE, MemoryKind.FACT, 5),
            StateKindCount(MemoryState.ACTIVE, MemoryKind.EPISODE, 7),
            StateKindCount(MemoryState.ARCHIVED, MemoryKind.FACT, 2),
        ),
        total_count=14,
        index=IndexStats(indexed_count=10, fresh_tail_count=4, saved_sequence=8, saved_at=T0),
        last_sequence=20,
        embedder="none",
        dimension=8,
        schema_version=1,
        recent_sweeps=(full_sweep(),),
        framework_version="v1",
        writes=WriteStats(refused=True, reason="DISK_FULL", message="the disk is full", refused_since=T0),
    )
    assert cv.stats_from_proto(cv.stats_to_proto(stats)) == stats
    assert stats.count() == 14
    assert stats.count(state=MemoryState.ACTIVE) == 12
    assert stats.count(kind=MemoryKind.FACT) == 7
    assert stats.count(MemoryState.ARCHIVED, MemoryKind.EPISODE) == 0


def test_sweep_round_trip() -> None:
    assert cv.sweep_from_proto(cv.sweep_to_proto(full_sweep())) == full_sweep()
    assert cv.sweep_from_proto(memory_service_pb2.SweepStats()).started_at is None


def test_policy_round_trip() -> None:
    policy = Policy(
        name="arm-b",
        time_mode=TimeMode.AGENT_TURNS,
        kinds=(KindPolicy(), KindPolicy(kind=MemoryKind.FACT, alpha=0.5, evict_grace_s=60.0)),
        source_confidence=SourceConfidence(imported=0.5),
        soft_conflict_similarity=0.875,
        duplicate_similarity=0.96875,
        strategy_upgrade_probability=0.9,
        cost_budget_bytes=2048.0,
        multi_valued_attributes=("*/email",),
    )
    msg = cv.policy_to_proto(policy)
    assert msg.source_confidence.imported == 0.5
    assert msg.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS
    assert cv.policy_from_proto(msg) == policy


# --- request builders -------------------------------------------------------------------------------


def test_remember_request_carries_turn_and_request_id_only_when_given() -> None:
    item = MemoryInput(content="x")
    plain = rq.remember(item, request_id=None, turn=None)
    assert not plain.HasField("turn")
    assert plain.request_id == ""
    full = rq.remember(item, request_id="r", turn=0)
    assert full.HasField("turn")
    assert full.turn == 0
    assert full.request_id == "r"


def test_remember_keywords_build_the_same_input_as_memory_input() -> None:
    built = rq.memory_input(
        "alice prefers Python",
        vector=[0.5, -1.0, 0.25, 2.0],
        namespace="agent-1",
        kind=MemoryKind.PREFERENCE,
        entity="user:alice",
        topic="languages",
        fact=Fact("preferred_language", "Python"),
        source=MemorySource.TOOL_RESULT,
        confidence=0.5,
        importance=3,
        tags=["a", "b"],
        metadata={"k": "v"},
        valid_from=T0,
        framework_version="v2",
        reasoning_context=ReasoningContext(memory_ids=(8,), text="ctx"),
        task_signature="sig",
    )
    assert built == full_input()


def test_stream_items_may_carry_their_own_request_id() -> None:
    groups = rq.StreamGroups(turn=3)
    item = MemoryInput(content="x")
    assert groups.add(item) is None
    assert groups.add((item, "req-9")) is None
    message = groups.flush()
    assert message is not None
    assert [entry.request_id for entry in message.items] == ["", "req-9"]
    assert message.turn == 3
    assert not message.HasField("memory")
    assert groups.flush() is None
    with pytest.raises(ValueError, match="MemoryInput"):
        groups.add("text")  # type: ignore[arg-type]


def test_stream_groups_close_at_the_item_count_or_the_byte_size() -> None:
    groups = rq.StreamGroups(turn=None)
    sent = [groups.add(MemoryInput(content=f"m{i}")) for i in range(rq.STREAM_GROUP_ITEMS * 2 + 5)]
    full = [m for m in sent if m is not None]
    assert [len(m.items) for m in full] == [rq.STREAM_GROUP_ITEMS, rq.STREAM_GROUP_ITEMS]
    assert not full[0].HasField("turn")
    rest = groups.flush()
    assert rest is not None
    assert [e.memory.content for e in rest.items] == [f"m{i}" for i in range(128, 133)]
    big = "w" * (rq.STREAM_GROUP_BYTES // 3)
    by_size = [groups.add(MemoryInput(content=big)) for _ in range(3)]
    assert by_size[:2] == [None, None]
    assert by_size[2] is not None
    assert len(by_size[2].items) == 3


def test_recall_request() -> None:
    request = rq.recall(
        None,
        vector=[1.0, 0.0],
        k=5,
        filter=rq.recall_filter(
            namespace="ns",
            kinds=[MemoryKind.FACT, MemoryKind.STRATEGY],
            entity="e",
            tags=("t",),
            valid_from_after=T0,
            valid_from_before=None,
        ),
        mode=RecallMode.HISTORY,
        include_archived=True,
        as_of=T0,
        include_vectors=True,
        turn=None,
    )
    assert request.query == ""
    assert request.query_vector == np.asarray([1.0, 0.0], "<f4").tobytes()
    assert request.k == 5
    assert list(request.filter.kinds) == [memory_pb2.MEMORY_KIND_FACT, memory_pb2.MEMORY_KIND_STRATEGY]
    assert request.filter.HasField("valid_from_after")
    assert not request.filter.HasField("valid_from_before")
    assert request.mode == memory_service_pb2.RECALL_MODE_HISTORY
    assert request.HasField("as_of")
    assert not request.HasField("turn")


def test_watch_request_distinguishes_unset_from_zero() -> None:
    assert not rq.watch(None, namespace=None, types=()).HasField("after_sequence")
    zero = rq.watch(0, namespace="ns", types=[ChangeEventType.CREATED])
    assert zero.HasField("after_sequence")
    assert list(zero.types) == [events_pb2.CHANGE_EVENT_TYPE_CREATED]


def test_history_supersede_and_forget_requests() -> None:
    assert rq.history(5).memory_id == 5
    by_key = rq.history(FactKey("user:alice", "lang"))
    assert by_key.WhichOneof("subject") == "fact_key"
    assert rq.supersede(1, 2, reason="", request_id=None, turn=None).WhichOneof("replacement") == "new_id"
    new = rq.supersede(1, MemoryInput(content="y"), reason="r", request_id="q", turn=None)
    assert new.WhichOneof("replacement") == "new_memory"
    assert list(rq.forget(3, reason="", keep_history=True, request_id=None, turn=None).ids) == [3]


def test_report_outcome_request_requires_an_outcome() -> None:
    request = rq.report_outcome("r-1", Outcome.PARTIAL, used_memory_ids=[1], note="n", request_id=None, turn=None)
    assert request.outcome == memory_service_pb2.OUTCOME_PARTIAL
    with pytest.raises(ValueError, match="Outcome"):
        rq.report_outcome("r-1", "success", used_memory_ids=(), note="", request_id=None, turn=None)  # type: ignore[arg-type]


def test_ids_list() -> None:
    assert ids_list(3) == [3]
    assert ids_list([1, np.int64(2)]) == [1, 2]  # type: ignore[list-item]
    for bad in ("12", [1.5], [True]):
        with pytest.raises(ValueError, match="ids"):
            ids_list(bad)  # type: ignore[arg-type]


def test_channel_options_and_targets() -> None:
    options = dict(channel_options([("grpc.keepalive_time_ms", 1000), ("grpc.custom", 1)]))
    assert options["grpc.max_receive_message_length"] == 64 * 1024 * 1024
    assert options["grpc.max_send_message_length"] == 64 * 1024 * 1024
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.custom"] == 1
    assert check_target("unix:///tmp/x.sock") == "unix:///tmp/x.sock"
    assert check_target("127.0.0.1:5000") == "127.0.0.1:5000"
    for bad in ("", "unix://relative/x.sock"):
        with pytest.raises(ValueError, match=r"target|unix"):
            check_target(bad)
