"""The judge's queue: what perception hands over is taken in order, bounded, and waited for."""

from __future__ import annotations

import threading
import time

from memevo.sidecar.perception.judging import JudgeQueue


def test_take_gives_whole_judgements_oldest_first_up_to_the_pairs_asked() -> None:
    queue = JudgeQueue()
    queue.put(10, (1, 2))
    queue.put(11, (3,))
    queue.put(12, (4, 5, 6))
    queue.put(13, ())  # nothing to judge: not queued
    first = queue.take(3)
    assert [(j.newer, j.older) for j in first] == [(10, (1, 2)), (11, (3,))]
    assert queue.pending() == 6
    queue.done(first)
    assert queue.pending() == 3
    # A judgement larger than the batch still goes out whole, alone.
    second = queue.take(2)
    assert [(j.newer, j.older) for j in second] == [(12, (4, 5, 6))]
    queue.done(second)
    assert (queue.pending(), queue.judged) == (0, 6)
    assert queue.take(10) == []


def test_a_full_queue_drops_its_oldest_pairs_and_counts_them() -> None:
    queue = JudgeQueue(limit=4)
    for newer in range(5):
        queue.put(100 + newer, (newer, newer + 50))
    assert (queue.pending(), queue.dropped) == (4, 6)
    assert [j.newer for j in queue.take(10)] == [103, 104]


def test_wait_idle_returns_once_the_worker_is_done_and_times_out_otherwise() -> None:
    queue = JudgeQueue()
    queue.put(1, (2,))
    assert not queue.wait_idle(0.05)
    taken = queue.take(8)
    assert not queue.wait_idle(0.05)  # taken, not yet done: still busy

    def finish() -> None:
        time.sleep(0.1)
        queue.done(taken)

    worker = threading.Thread(target=finish)
    worker.start()
    assert queue.wait_idle(5.0)
    worker.join()
    assert len(queue.lag_s) == 1


def test_take_waits_for_a_judgement_when_asked() -> None:
    queue = JudgeQueue()
    threading.Timer(0.1, lambda: queue.put(7, (8,))).start()
    taken = queue.take(8, timeout_s=5.0)
    assert [j.newer for j in taken] == [7]
