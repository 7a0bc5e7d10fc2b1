"""Fuzzing every MemoryService RPC against a real sidecar: never a crash, never INTERNAL, refusals write nothing.

Each RPC starts from a valid request and hypothesis sets up to five fields
anywhere in it (nested messages, repeated and map fields included) to hostile
values: missing or empty, extreme and negative numbers, NaN and infinity,
huge strings, enum values no version defines (raw ints), vectors of the wrong
byte length or with NaN, overflowing or denormal components. Raw wire bytes
add what a typed client cannot send: invalid UTF-8 in string fields, corrupt
messages, a negative ``k``. Every answer must be OK or a clear refusal (a
status with a message, never INTERNAL or UNKNOWN), a refusal must leave
GetStats and the change log's last sequence as they were, and the process
must keep running.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf import descriptor as pb_descriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from helpers import memory, pack, stub, vec, vectors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2, review_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DIMENSION = 8
SERVICE = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"]
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.UNIMPLEMENTED,
}
"""Clear refusals. INTERNAL, UNKNOWN and UNAVAILABLE (a dead process) never are."""
WATCH_WAIT_S = 0.3
"""A valid Watch streams until cancelled: it is cut after this long (DEADLINE_EXCEEDED counts as accepted)."""
EXAMPLES = int(os.environ.get("MEMEVO_FUZZ_EXAMPLES", "40"))
"""Examples per RPC; the long run recorded in RESULTS.md sets MEMEVO_FUZZ_EXAMPLES."""
FD = pb_descriptor.FieldDescriptor

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sidecar, Any, list[int]]]:
    """One sidecar for the whole module (sweeps only on Govern), with a few memories to aim at."""
    sidecar = start_sidecar(tmp_path_factory.mktemp("fuzz"), "--sweep-interval-s", "0")
    service = stub(sidecar.unix_target)
    rows = [pack(row) for row in vectors(6, seed=3)]
    response = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(
            memories=[
                memory(f"fuzz seed {i}", rows[i], entity="alice", fact=memory_pb2.Fact(attribute=f"a{i}", value="v"))
                for i in range(6)
            ]
        )
    )
    yield sidecar, service, [r.memory.id for r in response.results]
    sidecar.stop()
    assert "Traceback" not in sidecar.log(), sidecar.log()[-5000:]


# ---- hostile values -----------------------------------------------------------------------------

HUGE_TEXTS = ["x" * 70_000, "é" * 40_000, "a" * 1_000_000, "\x00" * 300, "\u202e" * 100]
INT_EXTREMES = [0, 1, -1, 2**31 - 1, -(2**31), 2**32 - 1, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1]
FLOAT_EXTREMES = [0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 3.4e38, 1e-45]


def _floats_bytes(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def vector_bytes() -> st.SearchStrategy[bytes]:
    """Packed float32 vectors, mostly hostile: wrong lengths, NaN, infinity, zeros, overflow and denormals."""
    special = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 3.0e38, -3.0e38, 1e-45, 1e-30, 1e30])
    component = st.one_of(st.floats(-10, 10, allow_nan=False, width=32), special)
    return st.one_of(
        st.binary(max_size=40),
        st.lists(component, min_size=DIMENSION, max_size=DIMENSION).map(_floats_bytes),
        st.lists(special, min_size=DIMENSION, max_size=DIMENSION).map(_floats_bytes),
        st.just(b"\xff" * (4 * DIMENSION)),  # NaN payloads, and invalid UTF-8 where bytes are allowed
        st.just(vec(1) + b"\x00"),
        st.just(vec(1)[:-4]),
        st.just(b"\x00" * (4 * DIMENSION * 1000)),
    )


def text_values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(""),
        st.text(max_size=20),
        st.text(alphabet=st.characters(codec="utf-8", max_codepoint=0x1F), max_size=5),  # control characters
        st.sampled_from(HUGE_TEXTS),
        st.sampled_from(["alice", "default", "a/b", "ns:1", " ", "..", "SUCCESS", "en", "de"]),
    )


def scalar(field: FD) -> st.SearchStrategy[Any]:
    """Hostile values of one scalar field's type, including raw ints for enums."""
    kind = field.type
    if kind == FD.TYPE_STRING:
        return text_values()
    if kind == FD.TYPE_BYTES:
        return vector_bytes()
    if kind == FD.TYPE_BOOL:
        return st.booleans()
    if kind in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return st.one_of(st.sampled_from(FLOAT_EXTREMES), st.floats(-2, 12))
    if kind == FD.TYPE_ENUM:
        # Open enums take any int32: values from other versions, negatives, the extremes.
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 99, 2**31 - 1]))
    low, high = _int_range(kind)
    return st.one_of(
        st.sampled_from([i for i in INT_EXTREMES if low <= i <= high]), st.integers(max(low, -3), min(high, 30))
    )


def _int_range(kind: int) -> tuple[int, int]:
    if kind in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return 0, 2**32 - 1
    if kind in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return 0, 2**64 - 1
    if kind in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return -(2**31), 2**31 - 1
    return -(2**63), 2**63 - 1


def _not_huge(value: Any) -> bool:
    """Many copies of a megabyte string would only measure serialisation; one copy is tried elsewhere."""
    return not (isinstance(value, (str, bytes)) and len(value) > 100_000)


def _settable(message: Message) -> list[FD]:
    return list(message.DESCRIPTOR.fields)


def _mutate(data: st.DataObject, message: Message, depth: int = 0) -> None:
    """Set, clear or extend one field somewhere in ``message`` (at most four levels down)."""
    fields = _settable(message)
    if not fields:
        return
    field = data.draw(st.sampled_from(fields))
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    if data.draw(st.integers(0, 9)) == 0:
        message.ClearField(field.name)
        return
    if is_map:
        container = getattr(message, field.name)
        for _ in range(data.draw(st.integers(1, 40))):
            key = data.draw(text_values().filter(lambda t: len(t) < 100_000))
            value_field = field.message_type.fields_by_name["value"]
            if value_field.type == FD.TYPE_MESSAGE:
                container[key].SetInParent()
            else:
                container[key] = data.draw(scalar(value_field).filter(_not_huge))
        return
    if field.is_repeated:
        container = getattr(message, field.name)
        count = data.draw(st.sampled_from([0, 1, 2, 5, 40, 2000]))
        if field.type == FD.TYPE_MESSAGE:
            template = container[0] if len(container) else None
            for _ in range(min(count, 40)):
                item = container.add()
                if template is not None:
                    item.CopyFrom(template)
                if depth < 4 and data.draw(st.booleans()):
                    _mutate(data, item, depth + 1)
        else:
            values = data.draw(st.lists(scalar(field).filter(_not_huge), max_size=3))
            container.extend((values or [0 if field.type != FD.TYPE_STRING else ""]) * max(1, count // 3))
        return
    if field.type == FD.TYPE_MESSAGE:
        child = getattr(message, field.name)
        child.SetInParent()
        if field.message_type.full_name == "google.protobuf.Timestamp":
            child.seconds = data.draw(st.sampled_from([*INT_EXTREMES[:9], 253_402_300_800, -62_135_596_801]))
            child.nanos = data.draw(st.sampled_from([0, 1, 999_999_999, 1_000_000_000, -1, 2**31 - 1]))
        elif depth < 4:
            _mutate(data, child, depth + 1)
        return
    setattr(message, field.name, data.draw(scalar(field)))


# ---- valid starting points ---------------------------------------------------------------------


def _valid_memory(seed: int) -> memory_pb2.MemoryInput:
    return memory(
        f"fuzzed memory {seed}",
        vec(seed),
        kind=memory_pb2.MEMORY_KIND_FACT,
        entity="bob",
        fact=memory_pb2.Fact(attribute="city", value=f"c{seed}"),
        tags=["t"],
        metadata={"k": "v"},
        confidence=0.5,
        importance=3,
    )


def _policy(service: Any) -> policy_pb2.Policy:
    return service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy


def template(method: str, service: Any, ids: list[int], seed: int) -> Message:
    """A request to ``method`` that the sidecar accepts as it is."""
    ms = memory_service_pb2
    requests: dict[str, Callable[[], Message]] = {
        "Remember": lambda: ms.RememberRequest(memory=_valid_memory(seed), request_id=f"r{seed}", turn=1),
        "RememberBatch": lambda: ms.RememberBatchRequest(memories=[_valid_memory(seed), _valid_memory(seed + 1)]),
        "RememberStream": lambda: ms.RememberStreamRequest(memory=_valid_memory(seed), request_id=f"s{seed}"),
        "Recall": lambda: ms.RecallRequest(query_vector=vec(seed), k=5, filter=ms.RecallFilter(entity="alice")),
        "BuildContext": lambda: ms.BuildContextRequest(query_vector=vec(seed), token_budget=200),
        "ReportOutcome": lambda: ms.ReportOutcomeRequest(used_memory_ids=ids[:2], outcome=ms.OUTCOME_SUCCESS),
        "Get": lambda: ms.GetRequest(ids=ids, include_vectors=True),
        "History": lambda: ms.HistoryRequest(fact_key=ms.FactKey(entity="alice", attribute="a1")),
        "ListEntities": lambda: ms.ListEntitiesRequest(query="ali", limit=5),
        "Beliefs": lambda: ms.BeliefsRequest(entity="alice"),
        "Forget": lambda: ms.ForgetRequest(ids=[10**9], reason="fuzz", keep_history=True),
        "Supersede": lambda: ms.SupersedeRequest(old_id=ids[-1], new_memory=_valid_memory(seed), reason="fuzz"),
        "Govern": lambda: ms.GovernRequest(dry_run=True),
        "Watch": lambda: ms.WatchRequest(after_sequence=0, types=[1]),
        "Unconsolidate": lambda: ms.UnconsolidateRequest(abstraction_id=ids[0], request_id=f"u{seed}"),
        "DeclareFramework": lambda: ms.DeclareFrameworkRequest(version=f"v{seed % 3}", description="fuzz"),
        "GetPolicy": lambda: ms.GetPolicyRequest(),
        "UpdatePolicy": lambda: ms.UpdatePolicyRequest(policy=_policy(service)),
        "GetStats": lambda: ms.GetStatsRequest(),
    }
    if method in requests:
        return requests[method]()
    # An RPC added since: fuzz it from its empty request (every field is drawn by the mutations).
    return GetMessageClass(SERVICE.methods_by_name[method].input_type)()


# ---- calling and checking ----------------------------------------------------------------------


def _snapshot(service: Any) -> tuple[int, int, list[tuple[int, int, int]]]:
    stats = service.GetStats(memory_service_pb2.GetStatsRequest())
    return stats.last_sequence, stats.total_count, sorted((c.state, c.kind, c.count) for c in stats.counts)


def _call(service: Any, method: str, request: Message) -> None:
    rpc = getattr(service, method)
    shape = SERVICE.methods_by_name[method]
    if shape.client_streaming:
        # Twice when it carries a request id: the second copy must replay, not fail.
        rpc(iter([request, request]) if getattr(request, "request_id", "") else iter([request]))
    elif shape.server_streaming:
        call = rpc(request, timeout=WATCH_WAIT_S)
        try:
            for _ in call:
                pass
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # deadline: a valid Watch, still streaming
                raise
    else:
        rpc(request)


def check(sidecar: Sidecar, service: Any, method: str, request: Message) -> None:
    """Call ``method``; it must succeed or refuse clearly, and a refusal must change nothing."""
    before = _snapshot(service)
    error: grpc.RpcError | None = None
    try:
        _call(service, method, request)
    except grpc.RpcError as caught:
        error = caught
    if error is not None:
        assert error.code() in REFUSALS, f"{method} answered {error.code()}: {error.details()}\n{request}"[:3000]
        assert error.details(), f"{method} refused with {error.code()} but no message"
        assert _snapshot(service) == before, f"a refused {method} changed the store:\n{request}"[:3000]
    assert sidecar.process.poll() is None, sidecar.log()[-5000:]


FUZZED_METHODS = [m.name for m in SERVICE.methods if not (m.client_streaming and m.server_streaming)]
"""Every RPC but the bidirectional Review stream (fuzzed as whole streams below)."""


@pytest.mark.parametrize("method", FUZZED_METHODS)
@FUZZ
@given(data=st.data())
def test_fuzzed_requests_get_a_clear_answer(
    fuzzed: tuple[Sidecar, Any, list[int]], method: str, data: st.DataObject
) -> None:
    sidecar, service, ids = fuzzed
    seed = data.draw(st.integers(0, 10_000))
    request = template(method, service, ids, seed)
    for _ in range(data.draw(st.integers(0, 5))):
        _mutate(data, request)
    check(sidecar, service, method, request)


def test_every_rpc_is_fuzzed() -> None:
    assert {m.name for m in SERVICE.methods} - set(FUZZED_METHODS) == {"Review"}  # fuzzed as streams below


# ---- Review (bidirectional stream) ---------------------------------------------------------------


@FUZZ
@given(messages=st.deferred(lambda: review_requests()), kinds=st.lists(st.integers(-5, 2**31 - 1), max_size=3))
def test_fuzzed_review_streams_get_a_clear_answer(
    fuzzed: tuple[Sidecar, Any, list[int]], messages: list[memory_service_pb2.ReviewRequest], kinds: list[int]
) -> None:
    sidecar, service, _ = fuzzed
    messages[0].hello.kinds.extend(kinds)
    before = _snapshot(service)
    error: grpc.RpcError | None = None
    try:
        # The stream is half-closed after the last message: the sidecar answers and ends it.
        answers = [r.WhichOneof("message") for r in service.Review(iter(messages), timeout=10)]
    except grpc.RpcError as caught:
        error, answers = caught, []
    assert set(answers) <= {"proposal", "settled_proposal_id"}
    if error is not None:
        assert error.code() in REFUSALS, f"Review answered {error.code()}: {error.details()}\n{messages}"[:3000]
        assert error.details()
    # No proposal is open in this store, so no decision can change anything, accepted or refused.
    assert _snapshot(service) == before
    assert sidecar.process.poll() is None, sidecar.log()[-5000:]


def review_requests() -> st.SearchStrategy[list[memory_service_pb2.ReviewRequest]]:
    """Review streams: a hello, then up to five decisions with hostile proposal ids, verdicts and texts."""

    @st.composite
    def stream(draw: st.DrawFn) -> list[memory_service_pb2.ReviewRequest]:
        hello = memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer=draw(text_values())))
        messages = [hello]
        for _ in range(draw(st.integers(0, 5))):
            decision = review_pb2.Decision(
                proposal_id=draw(text_values()),
                verdict=draw(st.integers(-(2**31), 2**31 - 1)),
                abstraction_text=draw(text_values()),
                memory_ids=draw(st.lists(st.integers(0, 2**64 - 1), max_size=5)),
            )
            messages.append(memory_service_pb2.ReviewRequest(decision=decision))
        return messages

    return stream()


# ---- what a typed client cannot send -----------------------------------------------------------


def _raw(service_target: str, method: str, streaming: str = "unary") -> Callable[..., Any]:
    channel = grpc.insecure_channel(service_target)
    path = f"/{SERVICE.full_name}/{method}"
    if streaming == "client":
        return channel.stream_unary(path)
    if streaming == "server":
        return channel.unary_stream(path)
    return channel.unary_unary(path)


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _refused_raw(sidecar: Sidecar, service: Any, call: Callable[[], Any], code: grpc.StatusCode) -> grpc.RpcError:
    before = _snapshot(service)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, (caught.value.code(), caught.value.details())
    assert caught.value.details()
    assert _snapshot(service) == before
    assert sidecar.process.poll() is None
    return caught.value


def test_invalid_utf8_in_a_string_field_is_invalid_argument(fuzzed: tuple[Sidecar, Any, list[int]]) -> None:
    sidecar, service, _ = fuzzed
    valid = memory_service_pb2.RememberRequest(memory=memory("abc", vec(1))).SerializeToString()
    broken = valid.replace(b"abc", b"a\xff\xfe")
    error = _refused_raw(
        sidecar,
        service,
        lambda: _raw(sidecar.unix_target, "Remember")(broken, timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "UTF-8" in error.details()
    stream = memory_service_pb2.RememberStreamRequest(memory=memory("abc", vec(2))).SerializeToString()
    _refused_raw(
        sidecar,
        service,
        lambda: _raw(sidecar.unix_target, "RememberStream", "client")(
            iter([stream.replace(b"abc", b"abd"), stream.replace(b"abc", b"\xc3\x28c")]), timeout=10
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


def test_negative_k_on_the_wire_is_invalid_argument(fuzzed: tuple[Sidecar, Any, list[int]]) -> None:
    sidecar, service, _ = fuzzed
    # Field 3 (k, uint32) as the 10-byte varint a client writes for -1: it parses as 4294967295.
    request = memory_service_pb2.RecallRequest(query_vector=vec(1)).SerializeToString() + b"\x18" + _varint(-1)
    error = _refused_raw(
        sidecar,
        service,
        lambda: _raw(sidecar.unix_target, "Recall")(request, timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "k" in error.details()


@FUZZ
@given(method=st.sampled_from(FUZZED_METHODS), payload=st.binary(max_size=200))
def test_random_bytes_never_get_internal(fuzzed: tuple[Sidecar, Any, list[int]], method: str, payload: bytes) -> None:
    sidecar, service, _ = fuzzed
    shape = SERVICE.methods_by_name[method]
    kind = "client" if shape.client_streaming else "server" if shape.server_streaming else "unary"
    rpc = _raw(sidecar.unix_target, method, kind)
    before = _snapshot(service)
    error: grpc.RpcError | None = None
    try:
        if kind == "client":
            rpc(iter([payload]), timeout=10)
        elif kind == "server":
            for _ in rpc(payload, timeout=WATCH_WAIT_S):
                pass
        else:
            rpc(payload, timeout=10)
    except grpc.RpcError as caught:
        error = caught
    if error is not None and not (kind == "server" and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED):
        assert error.code() in REFUSALS, (method, error.code(), error.details(), payload)
        assert _snapshot(service) == before, (method, payload)
    assert sidecar.process.poll() is None


# ---- sizes -------------------------------------------------------------------------------------


def test_very_large_batch_is_refused_whole(fuzzed: tuple[Sidecar, Any, list[int]]) -> None:
    sidecar, service, _ = fuzzed
    items = [memory(f"big batch {i}", vec(i)) for i in range(10_001)]
    check(sidecar, service, "RememberBatch", memory_service_pb2.RememberBatchRequest(memories=items))
    with pytest.raises(grpc.RpcError) as caught:
        service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=items))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "components",
    [[3.0e38] * DIMENSION, [1e-30] * DIMENSION, [1e-44] + [0.0] * (DIMENSION - 1), [1e20] * DIMENSION],
    ids=["overflowing", "underflowing", "denormal", "too-long"],
)
def test_vectors_that_cannot_be_normalised_are_refused(
    fuzzed: tuple[Sidecar, Any, list[int]], components: list[float]
) -> None:
    sidecar, service, _ = fuzzed
    raw = pack(components)
    for method, request in [
        ("Remember", memory_service_pb2.RememberRequest(memory=memory("extreme", raw))),
        ("Recall", memory_service_pb2.RecallRequest(query_vector=raw, k=3)),
    ]:
        before = _snapshot(service)
        with pytest.raises(grpc.RpcError) as caught:
            getattr(service, method)(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert "normalised" in caught.value.details()
        assert _snapshot(service) == before
    assert sidecar.process.poll() is None


def test_recall_never_returns_nan_after_the_fuzzing(fuzzed: tuple[Sidecar, Any, list[int]]) -> None:
    _, service, _ = fuzzed
    for seed in range(20):
        for hit in service.Recall(memory_service_pb2.RecallRequest(query_vector=vec(seed), k=50)).memories:
            assert math.isfinite(hit.similarity), hit
            assert math.isfinite(hit.score), hit
