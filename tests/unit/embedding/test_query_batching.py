"""The query embedder: concurrent callers share runs in arrival order, errors reach their own caller, a cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.embedding.batching import QueryEmbedder
from memevo.sidecar.errors import FailedPrecondition, Unavailable

WAIT_S = 10.0


def row(text: str) -> npt.NDArray[np.float32]:
    """A distinct vector per text."""
    rng = np.random.default_rng([ord(c) for c in text])
    return rng.standard_normal(4).astype(np.float32)


class FakeModel:
    """Records each run's texts; the first run can be held until released; texts with "bad" fail their run."""

    def __init__(self, *, hold_first: bool = False, failure: Callable[[str], Exception] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hold_first = hold_first
        self.failure = failure or (lambda text: FailedPrecondition(f"cannot embed {text!r}"))
        self.lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self.lock:
            self.calls.append(list(texts))
            first = len(self.calls) == 1
        if first and self.hold_first:
            self.entered.set()
            assert self.release.wait(WAIT_S)
        for text in texts:
            if "bad" in text:
                raise self.failure(text)
        return np.stack([row(t) for t in texts]) if texts else np.zeros((0, 4), np.float32)


class Caller(threading.Thread):
    def __init__(self, embedder: QueryEmbedder, text: str) -> None:
        super().__init__(daemon=True)
        self.embedder, self.text = embedder, text
        self.vector: npt.NDArray[np.float32] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.vector = self.embedder.embed_one(self.text)
        except BaseException as exc:
            self.error = exc


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def queue_behind_a_held_run(model: FakeModel, embedder: QueryEmbedder, texts: Sequence[str]) -> list[Caller]:
    """Start a caller of ``texts[0]`` whose run is held, then one caller per other text, each queued in turn."""
    callers = [Caller(embedder, texts[0])]
    callers[0].start()
    assert model.entered.wait(WAIT_S)
    for i, text in enumerate(texts[1:], start=1):
        caller = Caller(embedder, text)
        caller.start()
        callers.append(caller)
        wait_until(lambda i=i: embedder.stats().waiting == i)  # type: ignore[misc]
    return callers


def finish(model: FakeModel, callers: Sequence[Caller]) -> None:
    model.release.set()
    for caller in callers:
        caller.join(WAIT_S)
        assert not caller.is_alive()


def test_a_lone_caller_runs_at_once_with_its_own_text() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model)
    vector = embedder.embed_one("alpha")
    np.testing.assert_array_equal(vector, row("alpha"))
    assert model.calls == [["alpha"]]
    stats = embedder.stats()
    assert (stats.requests, stats.batches, stats.texts_embedded, stats.waiting) == (1, 1, 1, 0)
    assert stats.batch_sizes[0] == 1


def test_callers_arriving_during_a_run_share_the_next_one_in_arrival_order() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model)
    texts = ["first", "b", "c", "d", "e", "f"]
    callers = queue_behind_a_held_run(model, embedder, texts)
    finish(model, callers)
    assert model.calls == [["first"], ["b", "c", "d", "e", "f"]]
    for caller in callers:
        assert caller.error is None
        np.testing.assert_array_equal(caller.vector, row(caller.text))
    stats = embedder.stats()
    assert (stats.batches, stats.texts_embedded, stats.waiting) == (2, 6, 0)
    assert stats.batch_sizes[:4] == (1, 0, 0, 1)  # one run of 1, one of 5 (bucket <= 8)


def test_a_run_takes_at_most_max_batch_and_the_rest_follow() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model, max_batch=2)
    callers = queue_behind_a_held_run(model, embedder, ["a", "b", "c", "d", "e"])
    finish(model, callers)
    assert model.calls == [["a"], ["b", "c"], ["d", "e"]]
    assert all(c.error is None for c in callers)


def test_equal_texts_asked_together_are_embedded_once() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model, cache_size=0)
    callers = queue_behind_a_held_run(model, embedder, ["a", "same", "other", "same"])
    finish(model, callers)
    assert model.calls == [["a"], ["same", "other"]]
    np.testing.assert_array_equal(callers[1].vector, callers[3].vector)


def test_a_failing_text_fails_only_its_own_caller() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model)
    callers = queue_behind_a_held_run(model, embedder, ["a", "b", "bad one", "c"])
    finish(model, callers)
    assert model.calls == [["a"], ["b", "bad one", "c"], ["b"], ["bad one"], ["c"]]
    by_text = {c.text: c for c in callers}
    assert isinstance(by_text["bad one"].error, FailedPrecondition)
    assert "bad one" in str(by_text["bad one"].error)
    for text in ("a", "b", "c"):
        assert by_text[text].error is None
        np.testing.assert_array_equal(by_text[text].vector, row(text))


def test_an_unavailable_endpoint_fails_the_whole_batch_without_asking_again() -> None:
    model = FakeModel(hold_first=True, failure=lambda text: Unavailable("endpoint down"))
    embedder = QueryEmbedder(model)
    callers = queue_behind_a_held_run(model, embedder, ["a", "b", "bad", "c"])
    finish(model, callers)
    assert model.calls == [["a"], ["b", "bad", "c"]]
    assert callers[0].error is None
    assert all(isinstance(c.error, Unavailable) for c in callers[1:])


def test_a_failure_is_not_cached_and_a_later_call_asks_again() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model)
    for _ in range(2):
        with pytest.raises(FailedPrecondition):
            embedder.embed_one("bad")
    assert model.calls == [["bad"], ["bad"]]
    assert embedder.stats().cache_hits == 0


def test_a_cache_hit_returns_the_same_vector_without_a_run() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model)
    first = embedder.embed_one("alpha")
    again = embedder.embed_one("alpha")
    assert again is first
    assert not first.flags.writeable
    assert model.calls == [["alpha"]]
    stats = embedder.stats()
    assert (stats.requests, stats.cache_hits, stats.batches) == (2, 1, 1)


def test_the_cache_keeps_the_most_recently_used_texts() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model, cache_size=2)
    embedder.embed_one("a")
    embedder.embed_one("b")
    embedder.embed_one("a")  # a is now the most recent
    embedder.embed_one("c")  # evicts b
    embedder.embed_one("a")
    embedder.embed_one("b")
    assert model.calls == [["a"], ["b"], ["c"], ["b"]]


def test_cache_size_zero_turns_the_cache_off() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model, cache_size=0)
    embedder.embed_one("a")
    embedder.embed_one("a")
    assert model.calls == [["a"], ["a"]]


def test_many_threads_each_get_their_own_vector() -> None:
    model = FakeModel()
    embedder = QueryEmbedder(model, cache_size=0, max_batch=8)
    callers = [Caller(embedder, f"text {i % 40}") for i in range(200)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(WAIT_S)
        assert caller.error is None
        np.testing.assert_array_equal(caller.vector, row(caller.text))
    stats = embedder.stats()
    assert stats.waiting == 0
    assert sum(len(call) for call in model.calls) == stats.texts_embedded
    assert stats.requests == 200


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        QueryEmbedder(FakeModel(), max_batch=-1)
    with pytest.raises(ValueError, match="cache_size"):
        QueryEmbedder(FakeModel(), cache_size=-1)


def test_max_batch_zero_runs_every_caller_alone_and_at_once() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model, max_batch=0)
    first = Caller(embedder, "first")
    first.start()
    assert model.entered.wait(WAIT_S)
    second = embedder.embed_one("second")  # not queued behind the held run
    np.testing.assert_array_equal(second, row("second"))
    finish(model, [first])
    assert model.calls == [["first"], ["second"]]
    assert embedder.embed_one("first") is first.vector  # cached all the same


def test_a_cached_vector_is_a_row_of_its_own() -> None:
    model = FakeModel(hold_first=True)
    embedder = QueryEmbedder(model)
    callers = queue_behind_a_held_run(model, embedder, ["a", "b", "c"])
    finish(model, callers)
    b = embedder.embed_one("b")
    assert b.base is None  # not a view keeping the run's whole array alive
    assert b.shape == (4,)
