"""MemoryColumns: rows by id, growth, state changes, counts."""

from __future__ import annotations

import numpy as np

from memevo.sidecar.domain import to_timestamp
from memevo.sidecar.store.columns import NO_CODE, STATE_ACTIVE, STATE_EVICTED, STATE_OBSOLETE, MemoryColumns
from memevo.v1 import memory_pb2


def _row(columns: MemoryColumns, memory_id: int, *, namespace: str = "default", tags: tuple[str, ...] = ()) -> None:
    columns.set_record(
        memory_pb2.Memory(
            id=memory_id,
            state=STATE_ACTIVE,
            kind=memory_pb2.MEMORY_KIND_EPISODE,
            namespace=namespace,
            entity="e",
            valid_from=to_timestamp(float(memory_id)),
            recorded_at=to_timestamp(float(memory_id)),
            tags=tags,
            content="x" * memory_id,
            confidence=0.5,
        )
    )


def test_rows_grow_past_capacity_and_keep_old_values() -> None:
    columns = MemoryColumns(capacity=16)
    for memory_id in range(1, 100):
        _row(columns, memory_id, namespace=f"ns{memory_id % 3}")
    assert columns.size == 100
    assert columns.valid_from[42] == 42.0
    assert columns.content_bytes[42] == 42
    assert columns.confidence[42] == np.float32(0.5)
    assert columns.namespaces.string(int(columns.namespace[42])) == "ns0"
    assert list(columns.live_ids()) == list(range(1, 100))


def test_a_memory_given_its_entity_later_is_listed_under_it_once() -> None:
    columns = MemoryColumns()
    text = memory_pb2.Memory(id=1, state=STATE_ACTIVE, kind=memory_pb2.MEMORY_KIND_FACT, content="Ana likes tea")
    columns.set_record(text)
    assert columns.entity[1] == NO_CODE
    text.inferred.entity = "user:ana"  # perception attaches a text that named an entity declared after it
    columns.set_record(text)
    columns.set_record(text)
    code = columns.entities.lookup("user:ana")
    assert columns.entity[1] == code
    assert list(columns.entity_ids(code)) == [1]


def test_an_entitys_newest_ids_are_the_tail_of_its_list() -> None:
    columns = MemoryColumns()
    for memory_id in range(1, 8):
        columns.set_record(memory_pb2.Memory(id=memory_id, state=STATE_ACTIVE, entity=f"user:{memory_id % 2}"))
    code = columns.entities.lookup("user:1")
    assert list(columns.entity_ids(code)) == [1, 3, 5, 7]
    assert list(columns.entity_ids(code, newest=2)) == [5, 7]
    assert list(columns.entity_ids(code, newest=9)) == [1, 3, 5, 7]
    assert list(columns.entity_ids(columns.entities.lookup("user:9"), newest=2)) == []


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


def test_record_access_of_distinct_ids_counts_as_add_at() -> None:
    # Distinct ids (a recall's) are counted by indexing, which keeps the interpreter lock; the counts, the terms
    # and the ids to checkpoint are those np.add.at gave, a count at its largest included (it wraps, as add.at).
    counted, reference = MemoryColumns(), MemoryColumns()
    for columns in (counted, reference):
        for memory_id in range(1, 6):
            _row(columns, memory_id)
        columns.access_count[4] = np.iinfo(np.uint32).max
    ids = np.array([4, 1, 3], dtype=np.int64)
    counted.record_access(ids, now_s=60.0, turn=3)
    with reference.lock:
        np.add.at(reference.access_count, ids, 1)
        reference.last_access_at[ids] = 60.0
        reference.last_access_turn[ids] = 3
        reference._refresh(ids, 60.0)
        reference.accessed.update(ids.tolist())
    assert list(counted.access_count[1:6]) == list(reference.access_count[1:6]) == [1, 0, 1, 0, 0]
    for mine, theirs in zip(counted.terms(), reference.terms(), strict=True):
        np.testing.assert_array_equal(mine[:6], theirs[:6])
    assert counted.accessed == reference.accessed == {1, 3, 4}
