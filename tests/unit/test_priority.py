"""Keeping background work off the requests' way: lower-priority builder and review threads, frozen start-up objects."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from memevo.sidecar.config import EmbedderConfig, GovernanceConfig, IndexConfig, SidecarConfig
from memevo.sidecar.priority import MAX_NICE, lower_thread_priority, set_thread_nice, thread_nice
from memevo.sidecar.service.server import Sidecar
from memevo.sidecar.store.vector_index import VectorIndex, _BuilderPriority

DIMENSION = 16
DRAIN_DEADLINE_S = 120.0

T = TypeVar("T")

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _drained(index: VectorIndex) -> None:
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    while index.tail_count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert index.tail_count == 0, "the builder did not move the tail into the graph"


def _started(tmp_path: Path, nice: int) -> tuple[VectorIndex, int]:
    index = VectorIndex(tmp_path, DIMENSION, IndexConfig(builder_nice=nice))
    index.start(lambda: 0)
    vectors = np.random.default_rng(0).standard_normal((50, DIMENSION)).astype(np.float32)
    index.add(np.arange(1, 51, dtype=np.int64), vectors)
    _drained(index)
    assert index._builder is not None
    assert index._builder.native_id is not None
    return index, index._builder.native_id


@linux_only
def test_builder_thread_runs_at_a_lower_priority_and_still_fills_the_graph(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    index, builder = _started(tmp_path, nice=5)
    try:
        assert os.getpriority(os.PRIO_PROCESS, builder) == min(ours + 5, 19)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours  # only the builder changed
        assert index.graph_count == 50
        query = np.random.default_rng(0).standard_normal((50, DIMENSION)).astype(np.float32)[7:8]
        found = index.search(query / np.linalg.norm(query), 1, with_tail=False)
        assert found.ids.tolist() == [8]
    finally:
        index.close(save=False)


@linux_only
def test_builder_nice_zero_leaves_the_priority_alone(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    index, builder = _started(tmp_path, nice=0)
    try:
        assert os.getpriority(os.PRIO_PROCESS, builder) == ours
    finally:
        index.close(save=False)


def _on_a_new_thread(work: Callable[[], T]) -> T:
    """What ``work`` returns, run on a thread of its own (priority changes stay with that thread)."""
    box: list[T] = []
    thread = threading.Thread(target=lambda: box.append(work()))
    thread.start()
    thread.join()
    return box[0]


def _in_thread(increment: int) -> tuple[bool, int]:
    def run() -> tuple[bool, int]:
        done = lower_thread_priority(increment, what="a test thread")
        return done, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    return _on_a_new_thread(run)


@linux_only
def test_lower_thread_priority_changes_the_calling_thread_only_and_caps_at_19() -> None:
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert _in_thread(3) == (True, min(ours + 3, MAX_NICE))
    assert _in_thread(100) == (True, MAX_NICE)
    assert _in_thread(0) == (False, ours)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours


@linux_only
def test_review_worker_of_a_sidecar_runs_at_the_configured_lower_priority(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    config = SidecarConfig(
        data_dir=tmp_path / "data",
        listen=(),
        embedder=EmbedderConfig(kind="none"),
        dimension=DIMENSION,
        governance=GovernanceConfig(review_nice=4),
    )
    sidecar = Sidecar(config)
    sidecar.start()
    try:
        worker = sidecar.servicer._review_worker
        deadline = time.monotonic() + DRAIN_DEADLINE_S
        while os.getpriority(os.PRIO_PROCESS, worker.native_id or 0) == ours and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker lowers its priority as it starts
        assert os.getpriority(os.PRIO_PROCESS, worker.native_id or 0) == min(ours + 4, MAX_NICE)
        assert worker.is_alive()
    finally:
        sidecar.stop()


def _may_raise_priority() -> bool:
    """Whether this process may lower a thread's nice value again (root, or a generous RLIMIT_NICE)."""

    def run() -> bool:
        base = thread_nice()
        assert base is not None
        lower_thread_priority(1, what="a probe")
        return set_thread_nice(base, what="a probe")

    return _on_a_new_thread(run)


@linux_only
def test_builder_returns_to_normal_priority_while_the_index_is_behind_and_lowers_it_again_after() -> None:
    # Tail sizes against backlog_vectors 100: behind from 100, back to lowered below 50 (hysteresis).
    config = IndexConfig(builder_nice=5, backlog_vectors=100)
    seen: list[int] = []

    def run() -> None:
        base = thread_nice()
        assert base is not None
        lower_thread_priority(config.builder_nice, what="a test builder")
        priority = _BuilderPriority(config, base)
        for tail in (10, 99, 100, 5_000, 60, 50, 49, 10, 100):
            priority.follow(tail)
            seen.append((thread_nice() or 0) - base)

    _on_a_new_thread(run)
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    lowered = min(ours + 5, MAX_NICE) - ours
    if _may_raise_priority():
        assert seen == [lowered, lowered, 0, 0, 0, 0, lowered, lowered, 0]
    else:  # refused once: the builder stays lowered and stops asking
        assert seen == [lowered] * 9


def test_a_builder_that_never_lowered_its_priority_leaves_it_alone() -> None:
    priority = _BuilderPriority(IndexConfig(builder_nice=5, backlog_vectors=1), None)
    before = thread_nice()
    priority.follow(1_000)
    priority.follow(0)
    assert thread_nice() == before


def test_a_running_sidecar_keeps_its_start_up_objects_out_of_garbage_collection(tmp_path: Path) -> None:
    config = SidecarConfig(
        data_dir=tmp_path / "data", listen=(), embedder=EmbedderConfig(kind="none"), dimension=DIMENSION
    )
    sidecar = Sidecar(config)
    sidecar.start()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        sidecar.stop()
    assert gc.get_freeze_count() == 0  # released at stop, collectable again
