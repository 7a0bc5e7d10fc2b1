"""The synchronous client against a real sidecar process (dimension 8, no embedder: tests send vectors)."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memevo.client import (
    ChangeEventType,
    DeadlineExceededError,
    Fact,
    InvalidArgumentError,
    MemoryClient,
    MemoryInput,
    MemoryKind,
    MemorySource,
    MemoryState,
    NotFoundError,
    ReasoningContext,
    UnauthenticatedError,
    WriteOutcome,
)

pytestmark = pytest.mark.integration

DIM = 8


def _load_fixtures() -> ModuleType:
    # start_sidecar with extra arguments lives in conftest.py, which pytest does not make importable by name.
    spec = importlib.util.spec_from_file_location("memevo_it_fixtures", Path(__file__).with_name("conftest.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is being built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fixtures = _load_fixtures()


def vec(seed: int) -> npt.NDArray[np.float32]:
    """A unit vector of the sidecar's dimension, different for each seed."""
    v = np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def near(base: npt.NDArray[np.float32], seed: int, noise: float = 0.05) -> npt.NDArray[np.float32]:
    """A vector close to base (cosine well above 0.9)."""
    v = base + noise * np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def namespace_for(request: pytest.FixtureRequest) -> str:
    """A namespace of its own for each test, so tests sharing a sidecar do not see each other's memories."""
    return re.sub(r"[^A-Za-z0-9_.:-]", "-", request.node.name)[:128]


@pytest.fixture
def client(shared_sidecar: Any) -> Iterator[MemoryClient]:
    with MemoryClient(shared_sidecar.unix_target, timeout_s=10.0) as c:
        yield c


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> str:
    return namespace_for(request)


def take(events: Iterator[Any], n: int) -> list[Any]:
    return [next(events) for _ in range(n)]


# --- write and read -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_remember_then_recall_finds_it(shared_sidecar: Any, transport: str, ns: str) -> None:
    target = shared_sidecar.unix_target if transport == "unix" else shared_sidecar.tcp_target
    with MemoryClient(target) as client:
        written = client.remember("alice prefers Python", vector=vec(1), namespace=ns)
        client.remember("the build is green", vector=vec(2), namespace=ns)
        result = client.recall(vector=vec(1), namespace=ns, k=5)
    assert written.outcome is WriteOutcome.CREATED
    assert written.memory.id > 0
    assert len(result) >= 1
    top = result[0]
    assert top.memory.id == written.memory.id
    assert top.memory.content == "alice prefers Python"
    assert top.similarity == pytest.approx(1.0, abs=2e-3)  # the index holds half-precision vectors
    assert top.memory.state is MemoryState.ACTIVE
    assert top.memory.vector is None
    assert all(r.memory.namespace == ns for r in result)
    assert [r.score for r in result] == sorted((r.score for r in result), reverse=True)


def test_remember_returns_the_stored_memory_typed(client: MemoryClient, ns: str) -> None:
    valid_from = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
    result = client.remember(
        "alice's preferred language is Python",
        vector=vec(3),
        namespace=ns,
        kind=MemoryKind.FACT,
        entity="user:alice",
        topic="languages",
        fact=("preferred_language", "Python"),
        source=MemorySource.USER_STATEMENT,
        confidence=0.75,
        importance=7,
        tags=("pref", "lang"),
        metadata={"origin": "chat"},
        valid_from=valid_from,
        framework_version="planner-v1",
        reasoning_context=ReasoningContext(memory_ids=(), text="onboarding chat"),
        task_signature="",
        turn=12,
    )
    memory = result.memory
    assert memory.namespace == ns
    assert memory.kind is MemoryKind.FACT
    assert memory.entity == "user:alice"
    assert memory.topic == "languages"
    assert memory.fact == Fact("preferred_language", "Python")
    assert memory.source is MemorySource.USER_STATEMENT
    assert memory.confidence == pytest.approx(0.75)
    assert memory.importance == 7
    assert memory.tags == ("pref", "lang")
    assert dict(memory.metadata) == {"origin": "chat"}
    assert memory.valid_from == valid_from
    assert memory.framework_version == "planner-v1"
    assert memory.reasoning_context is not None
    assert memory.reasoning_context.text == "onboarding chat"
    assert memory.turn == 12
    assert memory.recorded_at is not None
    assert memory.recorded_at.tzinfo is not None
    assert abs(memory.recorded_at - datetime.now(timezone.utc)) < timedelta(minutes=5)
    # Scores are computed as of the read, with time-decayed relevance: a later read may differ in the last bit.
    again = client.get_one(memory.id)
    assert memory.scores is not None
    assert again.scores is not None
    assert again.scores.value == pytest.approx(memory.scores.value, abs=1e-4)
    assert replace(again, scores=None) == replace(memory, scores=None)


def test_default_kind_and_source_are_filled_in(client: MemoryClient, ns: str) -> None:
    memory = client.remember("something happened", vector=vec(4), namespace=ns).memory
    assert memory.kind is MemoryKind.EPISODE
    assert memory.source is MemorySource.AGENT_INFERENCE


def test_recall_can_return_vectors(client: MemoryClient, ns: str) -> None:
    v = vec(5)
    client.remember("with vector", vector=v, namespace=ns)
    top = client.recall(vector=v, namespace=ns, k=1, include_vectors=True)[0]
    assert top.memory.vector is not None
    assert top.memory.vector.dtype == np.float32
    # The sidecar may store vectors normalised; the direction must survive.
    assert float(np.dot(top.memory.vector, v) / np.linalg.norm(top.memory.vector)) == pytest.approx(1.0, abs=1e-5)


def test_recall_filters(client: MemoryClient, ns: str) -> None:
    base = vec(6)
    fact = client.remember(
        "fact about alice",
        vector=near(base, 1),
        namespace=ns,
        kind=MemoryKind.FACT,
        entity="user:alice",
        tags=("a", "b"),
    ).memory
    pref = client.remember(
        "pref of bob", vector=near(base, 2), namespace=ns, kind=MemoryKind.PREFERENCE, entity="user:bob", tags=("a",)
    ).memory
    episode = client.remember("episode with alice", vector=near(base, 3), namespace=ns, entity="user:alice").memory
    other = client.remember("elsewhere", vector=near(base, 4), namespace=ns + "-other").memory

    def ids(**filters: Any) -> set[int]:
        return {r.memory.id for r in client.recall(vector=base, k=10, **filters)}

    assert ids(namespace=ns) == {fact.id, pref.id, episode.id}
    assert ids(namespace=ns + "-other") == {other.id}
    assert ids(namespace=ns, kinds=[MemoryKind.FACT]) == {fact.id}
    assert ids(namespace=ns, kinds=[MemoryKind.FACT, MemoryKind.PREFERENCE]) == {fact.id, pref.id}
    assert ids(namespace=ns, entity="user:alice") == {fact.id, episode.id}
    assert ids(namespace=ns, tags=["a"]) == {fact.id, pref.id}
    assert ids(namespace=ns, tags=["a", "b"]) == {fact.id}
    assert ids(namespace=ns, entity="user:alice", kinds=[MemoryKind.EPISODE]) == {episode.id}


def test_recall_respects_k(client: MemoryClient, ns: str) -> None:
    base = vec(7)
    client.remember_batch([MemoryInput(content=f"m{i}", vector=near(base, i), namespace=ns) for i in range(6)])
    assert len(client.recall(vector=base, namespace=ns, k=3)) == 3


def test_remember_batch(client: MemoryClient, ns: str) -> None:
    items = [MemoryInput(content=f"item {i}", vector=vec(100 + i), namespace=ns, tags=(f"t{i}",)) for i in range(5)]
    results = client.remember_batch(items, turn=3)
    assert [r.memory.content for r in results] == [f"item {i}" for i in range(5)]
    assert all(r.outcome is WriteOutcome.CREATED for r in results)
    ids = [r.memory.id for r in results]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    got = client.get(ids)
    assert [m.id for m in got] == ids
    assert [m.tags for m in got] == [(f"t{i}",) for i in range(5)]


def test_remember_batch_with_request_id_is_replayed(client: MemoryClient, ns: str) -> None:
    items = [MemoryInput(content=f"b{i}", vector=vec(200 + i), namespace=ns) for i in range(3)]
    first = client.remember_batch(items, request_id=f"{ns}-batch")
    again = client.remember_batch(items, request_id=f"{ns}-batch")
    assert [r.memory.id for r in again] == [r.memory.id for r in first]
    assert not any(r.replayed for r in first)
    assert all(r.replayed for r in again)
    assert len(client.recall(vector=vec(200), namespace=ns, k=10)) == 3


def test_remember_with_request_id_is_replayed(client: MemoryClient, ns: str) -> None:
    first = client.remember("once", vector=vec(8), namespace=ns, request_id=f"{ns}-one")
    again = client.remember("once", vector=vec(8), namespace=ns, request_id=f"{ns}-one")
    assert again.memory.id == first.memory.id
    assert (first.replayed, again.replayed) == (False, True)


def test_remember_stream_with_per_item_request_ids_and_a_replayed_resend(client: MemoryClient, ns: str) -> None:
    items = [(MemoryInput(content=f"s{i}", vector=vec(300 + i), namespace=ns), f"{ns}-s{i}") for i in range(4)]
    first = client.remember_stream(iter(items))
    assert first.created_count == 4
    assert first.replayed_count == 0
    assert len(first.ids) == 4
    assert len(set(first.ids)) == 4

    # A client that lost the reply resends everything, plus one new item.
    extra = (MemoryInput(content="s4", vector=vec(304), namespace=ns), f"{ns}-s4")
    second = client.remember_stream([*items, extra])
    assert second.ids[:4] == first.ids
    assert second.created_count == 1
    assert second.replayed_count == 4
    assert {m.content for m in client.get(second.ids)} == {f"s{i}" for i in range(5)}


def test_remember_stream_accepts_plain_inputs(client: MemoryClient, ns: str) -> None:
    result = client.remember_stream(MemoryInput(content=f"p{i}", vector=vec(400 + i), namespace=ns) for i in range(3))
    assert result.created_count == 3
    assert [m.content for m in client.get(result.ids)] == ["p0", "p1", "p2"]


def test_a_long_stream_is_sent_in_groups_and_stored_in_order(client: MemoryClient, ns: str) -> None:
    """More items than one group (the client sends up to 64 per message): ids come back in stream order."""
    total = 3 * 64 + 7
    items = [
        (MemoryInput(content=f"long {i}", vector=vec(5000 + i), namespace=ns), f"{ns}-long-{i}") for i in range(total)
    ]
    result = client.remember_stream(items, turn=12)
    assert result.created_count == total
    assert [m.content for m in client.get(result.ids)] == [f"long {i}" for i in range(total)]
    assert {m.turn for m in client.get(result.ids)} == {12}
    again = client.remember_stream(items[:100])
    assert (again.replayed_count, list(again.ids)) == (100, list(result.ids[:100]))


def test_get_and_get_one(client: MemoryClient, ns: str) -> None:
    v = vec(9)
    written = client.remember("get me", vector=v, namespace=ns).memory
    missing = written.id + 1_000_000
    assert [m.id for m in client.get([written.id, missing])] == [written.id]
    assert client.get(written.id)[0].vector is None
    with_vector = client.get_one(written.id, include_vectors=True)
    assert with_vector.vector is not None
    assert with_vector.vector.shape == (DIM,)
    with pytest.raises(NotFoundError):
        client.get_one(missing)


def test_forget_then_recall_no_longer_returns_it(client: MemoryClient, ns: str) -> None:
    v = vec(10)
    gone = client.remember("forget me", vector=v, namespace=ns).memory
    kept = client.remember("keep me", vector=near(v, 1), namespace=ns).memory
    assert gone.id in client.recall(vector=v, namespace=ns).ids
    result = client.forget([gone.id], reason="user asked")
    assert result.forgotten_ids == [gone.id]
    assert result.missing_ids == []
    assert client.recall(vector=v, namespace=ns).ids == [kept.id]
    assert client.get([gone.id]) == []
    assert client.forget(gone.id).missing_ids == [gone.id]


def test_forget_keeping_history_makes_it_obsolete(client: MemoryClient, ns: str) -> None:
    v = vec(11)
    memory = client.remember("old news", vector=v, namespace=ns).memory
    assert client.forget(memory.id, keep_history=True).forgotten_ids == [memory.id]
    assert client.get_one(memory.id).state is MemoryState.OBSOLETE
    assert memory.id not in client.recall(vector=v, namespace=ns).ids


def test_stats(client: MemoryClient, ns: str) -> None:
    before = client.stats()
    client.remember("counted", vector=vec(12), namespace=ns)
    after = client.stats()
    assert after.dimension == DIM
    assert after.total_count == before.total_count + 1
    assert after.last_sequence > before.last_sequence
    assert after.count(state=MemoryState.ACTIVE) >= 1


# --- watch ---------------------------------------------------------------------------------------------


def test_watch_delivers_created_events_and_resumes_from_after_sequence(sidecar: Any) -> None:
    with MemoryClient(sidecar.unix_target) as client:
        ids = [client.remember(f"w{i}", vector=vec(500 + i)).memory.id for i in range(3)]
        with client.watch(0, timeout_s=30) as events:
            first = take(events, 3)
        assert [e.type for e in first] == [ChangeEventType.CREATED] * 3
        assert [e.memory_id for e in first] == ids
        sequences = [e.sequence for e in first]
        assert sequences == sorted(sequences)
        assert len(set(sequences)) == 3
        assert all(e.to_state is MemoryState.ACTIVE for e in first)
        assert all(e.from_state is MemoryState.UNSPECIFIED for e in first)
        assert all(e.recorded_at is not None and e.recorded_at.tzinfo is not None for e in first)

        with client.watch(after_sequence=first[0].sequence, timeout_s=30) as events:
            resumed = take(events, 2)
            assert [e.sequence for e in resumed] == sequences[1:]
            # Then live: an event written while the stream is open.
            live_id = client.remember("live", vector=vec(503)).memory.id
            live = next(events)
        assert live.memory_id == live_id
        assert live.sequence > sequences[-1]


def test_watch_filters_by_namespace_and_type(client: MemoryClient, ns: str) -> None:
    start = client.stats().last_sequence
    client.remember("elsewhere", vector=vec(13), namespace=ns + "-x")
    mine = client.remember("mine", vector=vec(14), namespace=ns).memory
    with client.watch(start, namespace=ns, types=[ChangeEventType.CREATED], timeout_s=30) as events:
        event = next(events)
    assert event.memory_id == mine.id
    assert event.namespace == ns


def test_watch_can_be_cancelled(client: MemoryClient) -> None:
    events = client.watch()
    events.cancel()
    assert list(events) == []


def test_watch_with_a_deadline_ends_with_deadline_exceeded(client: MemoryClient) -> None:
    events = client.watch(timeout_s=0.5)
    with pytest.raises(DeadlineExceededError):
        next(events)


@pytest.mark.parametrize("how", ["crash", "graceful"])
def test_watch_resumes_across_a_sidecar_restart(data_dir: Path, tmp_path: Path, how: str) -> None:
    socket = tmp_path / "fixed.sock"
    target = f"unix://{socket}"
    first = fixtures.start_sidecar(data_dir, "--listen", target)
    second = None
    try:
        with MemoryClient(target) as client:
            a = client.remember("before", vector=vec(600)).memory.id
            with client.watch(0, resume=True, timeout_s=60) as events:
                assert next(events).memory_id == a
                if how == "crash":
                    first.kill()
                else:
                    assert first.stop() == 0
                second = fixtures.start_sidecar(data_dir, "--listen", target)
                b = client.remember("after", vector=vec(601)).memory.id
                event = next(events)
            assert event.memory_id == b
            assert event.type is ChangeEventType.CREATED
    finally:
        first.stop()
        if second is not None:
            second.stop()


# --- errors and deadlines ------------------------------------------------------------------------------


def test_wrong_dimension_is_an_invalid_argument_naming_the_field(client: MemoryClient, ns: str) -> None:
    before = client.stats().total_count
    with pytest.raises(InvalidArgumentError) as info:
        client.remember("short vector", vector=[1.0, 0.0, 0.0], namespace=ns)
    err = info.value
    assert "memory.vector" in [f for f, _ in err.field_violations]
    assert err.retryable is False
    assert client.stats().total_count == before


def test_text_only_without_an_embedder_names_the_vector(client: MemoryClient, ns: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.remember("no vector", namespace=ns)
    assert "memory.vector" in [f for f, _ in info.value.field_violations]


def test_a_bad_batch_item_rejects_the_whole_batch(client: MemoryClient, ns: str) -> None:
    before = client.stats().total_count
    items = [
        MemoryInput(content="ok", vector=vec(15), namespace=ns),
        MemoryInput(content="bad", vector=[1.0, 2.0], namespace=ns),
    ]
    with pytest.raises(InvalidArgumentError) as info:
        client.remember_batch(items)
    fields = [f for f, _ in info.value.field_violations]
    assert any(f.startswith("memories[1]") and f.endswith("vector") for f in fields), fields
    assert client.stats().total_count == before


def test_a_bad_stream_item_reports_how_many_were_committed(client: MemoryClient, ns: str) -> None:
    good = [(MemoryInput(content=f"ok{i}", vector=vec(700 + i), namespace=ns), f"{ns}-{i}") for i in range(2)]
    bad = (MemoryInput(content="bad", vector=[1.0], namespace=ns), f"{ns}-2")
    with pytest.raises(InvalidArgumentError) as info:
        client.remember_stream([*good, bad])
    err = info.value
    assert any("[2]" in f and f.endswith("vector") for f, _ in err.field_violations), err.field_violations
    committed = int(err.metadata["committed_count"])
    # The sidecar commits in groups: items before the bad one may or may not be stored, and the count says which.
    assert 0 <= committed <= 2
    assert len(client.recall(vector=vec(700), namespace=ns, k=10)) == committed

    # The documented recovery: fix the item and resend everything; what was stored is replayed.
    fixed = (MemoryInput(content="fixed", vector=vec(702), namespace=ns), f"{ns}-2")
    result = client.remember_stream([*good, fixed])
    assert len(result.ids) == 3
    assert result.replayed_count == committed
    assert result.created_count == 3 - committed


def test_bad_namespace_is_an_invalid_argument(client: MemoryClient) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.remember("x", vector=vec(16), namespace="no spaces allowed")
    assert "memory.namespace" in [f for f, _ in info.value.field_violations]


def test_per_call_deadline(client: MemoryClient, ns: str) -> None:
    def slow_items() -> Iterator[MemoryInput]:
        yield MemoryInput(content="first", vector=vec(17), namespace=ns)
        time.sleep(1.5)
        yield MemoryInput(content="too late", vector=vec(18), namespace=ns)

    # The client's default deadline (10 s) would let this stream finish; the per-call one does not.
    with pytest.raises(DeadlineExceededError) as info:
        client.remember_stream(slow_items(), timeout_s=0.3)
    assert info.value.retryable
    # The default deadline still applies to the next call, which succeeds.
    client.recall(vector=vec(17), namespace=ns)


def test_client_default_deadline_applies(shared_sidecar: Any, ns: str) -> None:
    def slow_items() -> Iterator[MemoryInput]:
        yield MemoryInput(content="first", vector=vec(19), namespace=ns)
        time.sleep(1.5)

    with MemoryClient(shared_sidecar.unix_target, timeout_s=0.3) as client:
        with pytest.raises(DeadlineExceededError):
            client.remember_stream(slow_items())
        assert client.stats().dimension == DIM


def test_token_is_required_when_the_sidecar_has_one(data_dir: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-for-tests")
    sidecar = fixtures.start_sidecar(data_dir, "--token-file", str(token_file))
    try:
        with MemoryClient(sidecar.unix_target) as anonymous, pytest.raises(UnauthenticatedError):
            anonymous.stats()
        with MemoryClient(sidecar.unix_target, token="wrong") as wrong, pytest.raises(UnauthenticatedError):
            wrong.stats()
        with MemoryClient(sidecar.unix_target, token="t0ken-for-tests") as client:
            assert client.stats().dimension == DIM
    finally:
        sidecar.stop()


def test_close_is_idempotent(shared_sidecar: Any) -> None:
    client = MemoryClient(shared_sidecar.tcp_target)
    client.stats()
    client.close()
    client.close()
