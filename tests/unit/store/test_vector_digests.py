"""Vector digests: written and deleted with the vector, per namespace, and absent from stores written before them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rocksdict

from memevo.sidecar.store import rocks
from memevo.sidecar.store.rocks import CF_MEMORIES, CF_VECTOR_DIGESTS, CF_VECTORS, RocksStore, Txn, u64_key
from memevo.sidecar.store.vector_digests import delete_vector, ids_with_vector, put_vector, unit_row

DIMENSION = 8


def _open(path: Path) -> RocksStore:
    return RocksStore(path, dimension=DIMENSION, embedder_identity="none")


def _raw(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIMENSION).astype(np.float32) * 3.0


def _found(store: RocksStore, namespace: str, vector: np.ndarray, limit: int = 10) -> list[int]:
    return [int(i) for i in ids_with_vector(store, namespace, unit_row(vector), limit=limit)]


def test_a_vector_is_found_in_its_namespace_until_deleted(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        vector, other = _raw(1), _raw(2)

        def write(txn: Txn) -> None:
            put_vector(txn, "a", 1, vector)
            put_vector(txn, "a", 2, other)
            put_vector(txn, "b", 3, vector)  # the same vector in another namespace
            put_vector(txn, "a", 4, vector)  # and a second memory of "a" with it

        store.apply(write)
        # Stored as given (not normalised): what the index and perception read back.
        assert store.get(CF_VECTORS, u64_key(1)) == vector.astype("<f4").tobytes()
        assert _found(store, "a", vector) == [1, 4]  # in id order
        assert _found(store, "a", vector, limit=1) == [1]
        assert _found(store, "b", vector) == [3]
        assert _found(store, "a", other) == [2]
        assert _found(store, "c", vector) == []
        assert _found(store, "a", vector * 0.5) == [1, 4]  # any length: the unit vector is what counts
        assert _found(store, "a", vector + np.float32(1e-3)) == []
        store.apply(lambda txn: delete_vector(txn, "a", 1))
        assert store.get(CF_VECTORS, u64_key(1)) is None
        assert _found(store, "a", vector) == [4]
        assert _found(store, "b", vector) == [3]
        store.apply(lambda txn: delete_vector(txn, "a", 99))  # no vector: nothing to delete
    finally:
        store.close()


def test_a_write_and_delete_in_one_group_leave_no_digest(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        vector = _raw(3)

        def write_then_delete(txn: Txn) -> None:
            put_vector(txn, "a", 1, vector)
            delete_vector(txn, "a", 1)  # reads the vector this mutation wrote

        store.apply(write_then_delete)
        assert _found(store, "a", vector) == []
        assert store.prefix_keys(CF_VECTOR_DIGESTS, b"") == []
    finally:
        store.close()


def test_the_query_normalisation_gives_the_digest_of_the_stored_vector() -> None:
    rows = np.random.default_rng(4).standard_normal((200, 384)).astype(np.float32) * 7.0
    for row in rows:
        unit = unit_row(row)
        assert unit.dtype == np.float32
        assert np.linalg.norm(unit) == pytest.approx(1.0, abs=1e-6)
        assert unit_row(row.copy()).tobytes() == unit.tobytes()


def _old_store(path: Path) -> None:
    """A data directory as a memevo before vector digests wrote it: every other column family, one memory."""
    store = _open(path)
    store.apply(lambda txn: txn.put(CF_MEMORIES, u64_key(1), b"m1"))
    store.apply(lambda txn: txn.put(CF_VECTORS, u64_key(1), _raw(5).astype("<f4").tobytes()))
    store.close()
    options = rocksdict.Options(raw_mode=True)
    families = {name: rocksdict.Options(raw_mode=True) for name in rocks.COLUMN_FAMILIES}
    db = rocksdict.Rdict(str(path / "rocksdb"), options, column_families=families)
    db.drop_column_family(CF_VECTOR_DIGESTS)
    db.close()
    assert CF_VECTOR_DIGESTS not in rocksdict.Rdict.list_cf(str(path / "rocksdb"))


def test_a_store_written_before_digests_opens_and_works(tmp_path: Path) -> None:
    _old_store(tmp_path)
    store = _open(tmp_path)
    try:
        assert store.get(CF_MEMORIES, u64_key(1)) == b"m1"
        assert _found(store, "a", _raw(5)) == []  # written before: no digest (found through the graph only)
        store.apply(lambda txn: put_vector(txn, "a", 2, _raw(6)))
        assert _found(store, "a", _raw(6)) == [2]
        store.apply(lambda txn: delete_vector(txn, "a", 1))  # a memory without a digest is deleted all the same
        assert store.get(CF_VECTORS, u64_key(1)) is None
    finally:
        store.close()


def test_a_store_written_before_digests_opens_read_only_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _old_store(tmp_path)
    opened = RocksStore._open

    def full_disk(self: RocksStore, *, read_only: bool = False) -> None:
        if not read_only:
            raise RuntimeError("IO error: No space left on device")
        opened(self, read_only=True)

    monkeypatch.setattr(RocksStore, "_open", full_disk)
    store = _open(tmp_path)
    try:
        assert store.write_refusal is not None
        assert store.get(CF_MEMORIES, u64_key(1)) == b"m1"
        assert _found(store, "a", _raw(5)) == []  # the column family it could not create reads as empty
        assert store.multi_get(CF_VECTOR_DIGESTS, [b"x", b"y"]) == [None, None]
        assert list(store.iterate(CF_VECTOR_DIGESTS)) == []
    finally:
        store.close()
