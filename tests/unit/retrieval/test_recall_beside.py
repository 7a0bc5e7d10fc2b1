"""Recall's word search beside its vector search: on a helper thread when one is free, else in the caller."""

from __future__ import annotations

import threading

import pytest

from memevo.sidecar.retrieval.recall import _Beside


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
