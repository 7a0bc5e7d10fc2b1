"""Recall's word search beside its vector search: on a helper thread when one is free, else in the caller."""

from __future__ import annotations

import multiprocessing
import threading
import time
import types

import numpy as np
import pytest
import recall_engine
from recall_engine import near, write

from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.engine import Engine
from memevo.sidecar.evaluation import scoring
from memevo.sidecar.retrieval import recall
from memevo.sidecar.retrieval.recall import Recaller, _Beside

engine = recall_engine.engine  # the fixture


def test_a_task_runs_on_a_helper_and_its_result_comes_back() -> None:
    beside = _Beside(1)
    wait = beside.start(threading.get_ident)
    assert wait() != threading.get_ident()


def test_with_every_helper_busy_the_task_runs_in_the_caller_without_waiting() -> None:
    beside = _Beside(1)
    release = threading.Event()
    busy = beside.start(lambda: release.wait(10))
    try:
        # The one helper is blocked: the next task must not queue behind it.
        assert beside.start(threading.get_ident)() == threading.get_ident()
    finally:
        release.set()
    assert busy() is True
    # The helper is free again once its task has ended.
    assert beside.start(threading.get_ident)() != threading.get_ident()


def test_what_the_task_raised_is_raised_by_the_wait_and_frees_the_helper() -> None:
    beside = _Beside(1)

    def fail() -> None:
        raise ValueError("bad postings")

    wait = beside.start(fail)
    with pytest.raises(ValueError, match="bad postings"):
        wait()
    assert beside.start(threading.get_ident)() != threading.get_ident()


def _use_the_helpers_and_exit() -> None:
    assert recall._BESIDE.start(lambda: 2)() == 2


def test_a_forked_child_gets_helpers_of_its_own() -> None:
    # The child inherits the pool's bookkeeping but not its threads: with the parent's pool its task never ran.
    assert recall._BESIDE.start(threading.get_ident)() != threading.get_ident()
    child = multiprocessing.get_context("fork").Process(target=_use_the_helpers_and_exit)
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0


def test_recall_answers_the_same_with_the_searches_side_by_side_or_in_turn(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    words = ["harbour", "lantern", "copper", "meadow", "violin", "glacier"]
    write(
        engine,
        *(
            NewMemory(content=" ".join(rng.choice(words, size=4)), vector=near(1 + i % 5, float(rng.uniform(0, 3))))
            for i in range(300)
        ),
    )
    queries = [RecallQuery(vector=near(1 + i % 5, 0.5), text=f"{words[i]} {words[-1 - i]}", k=10) for i in range(6)]
    # The words hold ~400 postings together: under the threshold the searches run in turn, at 0 side by side.
    assert 0 < engine.lexical.postings("default", ["harbour", "glacier"]) < recall.BESIDE_MIN_POSTINGS
    deadline = time.monotonic() + 30.0
    while engine.index.tail_count and time.monotonic() < deadline:  # the builder moves the tail into the graph
        time.sleep(0.01)
    assert engine.index.tail_count == 0
    # Both passes see the same store at the same moment: the first one's accesses and the clock's advance would
    # otherwise nudge the second's scores (and swap near ties).
    monkeypatch.setattr(engine.columns, "record_access", lambda *args: None)
    moment = time.time()
    monkeypatch.setattr(scoring, "time", types.SimpleNamespace(time=lambda: moment))
    in_turn = [[(h.memory.id, h.score) for h in Recaller(engine).recall(q)] for q in queries]
    monkeypatch.setattr(recall, "BESIDE_MIN_POSTINGS", 0)
    side_by_side = [[(h.memory.id, h.score) for h in Recaller(engine).recall(q)] for q in queries]
    assert all(len(hits) == 10 for hits in in_turn)
    assert side_by_side == in_turn
