"""MemoryColumns: rows by id, growth, state changes, counts."""

from __future__ import annotations

import numpy as np

from memevo.sidecar.store.columns import STATE_ACTIVE, STATE_EVICTED, STATE_OBSOLETE, MemoryColumns


def _row(columns: MemoryColumns, memory_id: int, *, namespace: str = "default", tags: tuple[str, ...] = ()) -> None:
    columns.set_row(
        memory_id,
        state=STATE_ACTIVE,
        kind=3,
        namespace=namespace,
        entity="e",
        valid_from=float(memory_id),
        valid_to=float("nan"),
        recorded_at=float(memory_id),
        tags=tags,
    )


def test_rows_grow_past_capacity_and_keep_old_values() -> None:
    columns = MemoryColumns(capacity=16)
    for memory_id in range(1, 100):
        _row(columns, memory_id, namespace=f"ns{memory_id % 3}")
    assert columns.size == 100
    assert columns.valid_from[42] == 42.0
    assert columns.namespaces.string(int(columns.namespace[42])) == "ns0"
    assert list(columns.live_ids()) == list(range(1, 100))


def test_state_changes_and_counts() -> None:
    columns = MemoryColumns()
    for memory_id in range(1, 6):
        _row(columns, memory_id, tags=("a",))
    columns.set_state(2, STATE_OBSOLETE, valid_to=10.0)
    columns.set_state(3, STATE_EVICTED)
    assert columns.valid_to[2] == 10.0
    assert 3 not in columns.tags
    assert columns.count_by_state_kind() == {(STATE_ACTIVE, 3): 3, (STATE_OBSOLETE, 3): 1}
    assert list(columns.live_ids()) == [1, 2, 4, 5]


def test_record_access_counts_repeats() -> None:
    columns = MemoryColumns()
    for memory_id in range(1, 4):
        _row(columns, memory_id)
    columns.record_access(np.array([1, 2, 2], dtype=np.int64), now_s=50.0, turn=7)
    assert list(columns.access_count[1:4]) == [1, 2, 0]
    assert columns.last_access_turn[2] == 7
    assert np.isnan(columns.last_access_at[3])
