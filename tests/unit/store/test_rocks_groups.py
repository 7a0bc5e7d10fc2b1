"""RocksStore under a steady write stream: a pause gets in between two groups, and groups stay small."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from memevo.sidecar.store.rocks import CF_CHANGELOG, GROUP_MAX_ITEMS, RocksStore, Txn, u64_key

STREAM_S = 5.0
"""How long the writer keeps the commit queue from running dry when no pause gets in."""


def _open(path: Path) -> RocksStore:
    return RocksStore(path, dimension=8, embedder_identity="none")


def _slow_write(txn: Txn) -> int:
    time.sleep(0.005)  # a group of ~20 such takes 0.1 s, as perception of a few hundred memories does
    sequence = txn.next_sequence()
    txn.put(CF_CHANGELOG, u64_key(sequence), b"e")
    return sequence


def test_a_pause_gets_in_while_writes_keep_the_queue_from_running_dry(tmp_path: Path) -> None:
    store = _open(tmp_path)
    stop = threading.Event()

    def stream() -> None:
        end = time.monotonic() + STREAM_S
        while not stop.is_set() and time.monotonic() < end:
            if len(store._queue) < 20:
                store.submit(_slow_write)
            else:
                time.sleep(0.001)

    writer = threading.Thread(target=stream)
    writer.start()
    try:
        time.sleep(0.3)
        asked = time.monotonic()
        with store.paused():
            entered_s = time.monotonic() - asked
            streaming = writer.is_alive()
            sequence = store.last_sequence
            time.sleep(0.1)
            assert store.last_sequence == sequence, "a group committed during the pause"
        # It waited for the group in progress (~0.1 s), not for the stream to end (it used to wait all 5 s).
        assert streaming, f"the pause got in only after the stream ended ({entered_s:.2f} s)"
    finally:
        stop.set()
        writer.join()
        store.close()


def test_a_group_holds_at_most_group_max_items_memories(tmp_path: Path) -> None:
    store = _open(tmp_path)
    release = threading.Event()
    try:
        # Holds the committer, so the next submits queue up together as they do behind a long group.
        blocker = store.submit(lambda txn: release.wait(10))
        seen: list[int] = []

        def write(txn: Txn) -> None:
            seen.append(store.last_sequence)  # the durable sequence moves only between groups
            txn.put(CF_CHANGELOG, u64_key(txn.next_sequence()), b"e")

        chunk = GROUP_MAX_ITEMS // 2
        futures = [store.submit(write, items=chunk) for _ in range(5)]
        futures.append(store.submit(write, items=GROUP_MAX_ITEMS + 1))  # larger than a group: one of its own
        release.set()
        blocker.result(timeout=10)
        for future in futures:
            future.result(timeout=10)
        assert sorted(Counter(seen).values(), reverse=True) == [2, 2, 1, 1]
    finally:
        release.set()
        store.close()
