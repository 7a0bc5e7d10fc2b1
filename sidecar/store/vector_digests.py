"""Exact lookup of stored vectors: which memories of a namespace hold exactly the query's vector (issue 41 item 2).

The HNSW graph is approximate: on 1M unit Gaussian 384-d memories, 17 % were not found by their own vector at
recall's search expansion (benchmarks/own_vector.py). Beside each memory's vector RocksDB keeps a key
``namespace \\0 digest id`` (column family ``vector_digests``), where the digest is 16 bytes of BLAKE2b over the
unit vector exactly as recall normalises a query (:func:`unit_row`). It is written and deleted in the same
write batch as the vector (:func:`put_vector`, :func:`delete_vector`), so it is crash-consistent and needs no
rebuild at start-up; recall asks it with one seek per search (:func:`ids_with_vector`, ~3 us) and treats what it
finds as candidates of similarity 1.0, which then pass the same filters as the graph's.

A seek over (namespace, digest) rather than a point read of an id list: writes stay blind (no read-modify-write
of a list in the committer), and any number of memories may share a vector (a client's placeholder vector) at no
cost to writes. The namespace leads the key and the digest and id have fixed lengths, so a namespace's keys
never match another's prefix. Memories written before this column family existed have no digest: their own
vector finds them through the graph only, as before.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from .rocks import CF_VECTOR_DIGESTS, CF_VECTORS, RocksStore, Txn, u64_key
from .vector_index import normalize_rows

DIGEST_BYTES = 16
"""BLAKE2b digest size: a collision between two distinct vectors of one namespace is ~2^-64 likely at 2^32
vectors, and recall's filters and ranking would still see the colliding memory's real record."""

IdArray = npt.NDArray[np.int64]


def unit_row(vector: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """``vector`` scaled to unit length as float32: the one normalisation queries and digests use, so that a
    query equal to a stored vector gives the same bytes (callers reject zero vectors before)."""
    unit: npt.NDArray[np.float32] = normalize_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
    return unit


def digest_of(unit: npt.NDArray[np.float32]) -> bytes:
    """The digest of a unit vector (as :func:`unit_row` gives it)."""
    return hashlib.blake2b(np.ascontiguousarray(unit, dtype="<f4").tobytes(), digest_size=DIGEST_BYTES).digest()


def _prefix(namespace: str, digest: bytes) -> bytes:
    return namespace.encode() + b"\0" + digest


def put_vector(txn: Txn, namespace: str, memory_id: int, vector: npt.NDArray[np.floating]) -> None:
    """Store a new memory's vector as given and the digest of its unit vector, in ``txn`` (one write batch)."""
    txn.put(CF_VECTORS, u64_key(memory_id), np.asarray(vector, dtype="<f4").tobytes())
    txn.put(CF_VECTOR_DIGESTS, _prefix(namespace, digest_of(unit_row(vector))) + u64_key(memory_id), b"")


def delete_vector(txn: Txn, namespace: str, memory_id: int) -> None:
    """Delete a memory's vector and its digest in ``txn``; nothing when it has no vector."""
    raw = txn.get(CF_VECTORS, u64_key(memory_id))
    if raw is None:
        return
    unit = unit_row(np.frombuffer(raw, dtype="<f4"))
    txn.delete(CF_VECTOR_DIGESTS, _prefix(namespace, digest_of(unit)) + u64_key(memory_id))
    txn.delete(CF_VECTORS, u64_key(memory_id))


def ids_with_vector(store: RocksStore, namespace: str, unit: npt.NDArray[np.float32], *, limit: int) -> IdArray:
    """Ids of ``namespace``'s memories stored with exactly the unit vector ``unit``, oldest first, at most
    ``limit``. Durable writes only; the caller filters them (state, kind, entity, time) like any candidate."""
    prefix = _prefix(namespace, digest_of(unit))
    # Forward: a backward seek took 8-15 us against 4-5 (100k digests), and order only matters past ``limit``.
    keys = store.prefix_keys(CF_VECTOR_DIGESTS, prefix, limit=limit)
    # A longer namespace whose name continues with this one's digest would share the prefix, not the length.
    ids = [int.from_bytes(key[-8:], "big") for key in keys if len(key) == len(prefix) + 8]
    return np.asarray(ids, dtype=np.int64)
