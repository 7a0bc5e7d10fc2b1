"""What the sidecar logs about each retrieval for offline replay: its arm and its scored candidate pool.

Beside each retrieval record (key ``retrieval id``) the sidecar writes a
second record under ``retrieval id + "|x"`` in the same column family, so
the two expire together. Version 3 (written now) is binary, little-endian:

    u8 3 | u64 generation | u32 returned count k | u8 mode | u16 arm length | arm (UTF-8)
    | u16 namespace length | namespace (UTF-8)
    | per candidate: i64 id, f32 match, f32 inconsistency, u8 demoted

The namespace is the one the retrieval searched: ReportOutcome confines an
outcome to it. Version 2 (still read) had no namespace; version 1 (still read)
was JSON ``{"v": 1, "arm", "g", "k", "mode", "c": [[id, match,
inconsistency, demoted], ...]}``; encoding it cost a tenth of a recall.

The candidates are the re-ranked pool of the recall in match order, each
candidate's ``match`` being the policy-free part of its ranking score (see
RecallRequest) exactly as recall computed it (recall hands it over; nothing
is recomputed here). ``mode`` is 0 for current-only retrieval, 1 when
ARCHIVED memories were asked for, 2 for history and as-of queries.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memevo.v1 import memory_service_pb2

from ..store.rocks import CF_RETRIEVALS, RocksStore

if TYPE_CHECKING:
    from ..domain import RecallQuery
    from ..engine import ScoredPool
    from ..experiments.arms import Observation

OBSERVATION_SUFFIX = b"|x"
OBSERVATION_VERSION = 3
_HEADER = struct.Struct("<BQIBH")
_NAMESPACE_LENGTH = struct.Struct("<H")
_CANDIDATE = np.dtype([("id", "<i8"), ("match", "<f4"), ("inconsistency", "<f4"), ("demoted", "u1")])
MODE_CURRENT = 0
MODE_WITH_ARCHIVED = 1
MODE_HISTORY = 2


def observation_key(retrieval_id: str) -> bytes:
    """The key of a retrieval's observation record (sorts right after the retrieval record)."""
    return retrieval_id.encode() + OBSERVATION_SUFFIX


@dataclass(frozen=True)
class StoredObservation:
    """An observation record as read back: the arm and generation, and the candidates."""

    arm: str
    generation: int
    k: int
    mode: int
    candidates: list[tuple[int, float, float, bool]]
    """(memory id, match, inconsistency, demoted) in the pool's match order."""
    namespace: str = ""
    """The namespace the retrieval searched; "" in records written before version 3."""


def parse_observation(raw: bytes) -> StoredObservation:
    """Decode an observation record (either version)."""
    if raw[:1] == b"{":
        data = json.loads(raw)
        return StoredObservation(
            arm=str(data.get("arm", "")),
            generation=int(data.get("g", 0)),
            k=int(data.get("k", 0)),
            mode=int(data.get("mode", MODE_CURRENT)),
            candidates=[(int(c[0]), float(c[1]), float(c[2]), bool(c[3])) for c in data.get("c", [])],
        )
    version, generation, k, mode, arm_length = _HEADER.unpack_from(raw)
    if version not in (2, OBSERVATION_VERSION):
        raise ValueError(f"unknown observation record version {version}")
    arm_end = _HEADER.size + arm_length
    namespace, rows_start = _namespace_at(raw, version, arm_end)
    rows = np.frombuffer(raw, dtype=_CANDIDATE, offset=rows_start)
    return StoredObservation(
        arm=raw[_HEADER.size : arm_end].decode(),
        namespace=namespace,
        generation=generation,
        k=k,
        mode=mode,
        candidates=[
            (int(i), float(m), float(x), bool(d))
            for i, m, x, d in zip(
                rows["id"].tolist(),
                rows["match"].tolist(),
                rows["inconsistency"].tolist(),
                rows["demoted"].tolist(),
                strict=True,
            )
        ],
    )


def _namespace_at(raw: bytes, version: int, offset: int) -> tuple[str, int]:
    """The namespace stored at ``offset`` (none before version 3) and where the candidates start."""
    if version < OBSERVATION_VERSION:
        return "", offset
    (length,) = _NAMESPACE_LENGTH.unpack_from(raw, offset)
    start = offset + _NAMESPACE_LENGTH.size
    return raw[start : start + length].decode(), start + length


def read_namespace(store: RocksStore, retrieval_id: str) -> str | None:
    """The namespace a retrieval searched, without decoding its candidates.

    None when there is no observation record (unknown, expired, lost in a crash); "" for a record
    written before version 3, which did not keep it.
    """
    raw = store.get(CF_RETRIEVALS, observation_key(retrieval_id))
    if raw is None:
        return None
    if raw[:1] == b"{":
        return ""
    version, _, _, _, arm_length = _HEADER.unpack_from(raw)
    return _namespace_at(raw, version, _HEADER.size + arm_length)[0]


def read_observation(store: RocksStore, retrieval_id: str) -> StoredObservation | None:
    """The observation record of a retrieval, or None (unknown, expired, or lost in a crash)."""
    raw = store.get(CF_RETRIEVALS, observation_key(retrieval_id))
    return None if raw is None else parse_observation(raw)


def _mode(query: RecallQuery) -> int:
    if query.mode == memory_service_pb2.RECALL_MODE_HISTORY or query.as_of_s is not None:
        return MODE_HISTORY
    return MODE_WITH_ARCHIVED if query.include_archived else MODE_CURRENT


def encode_observation(arm: str, generation: int, k: int, mode: int, pool: ScoredPool, namespace: str = "") -> bytes:
    """The version-3 record of a pool (candidates in match order, each id once: its first noting)."""
    arm_bytes = arm.encode()
    namespace_bytes = namespace.encode()
    ids, first = np.unique(pool.ids, return_index=True)
    rows = np.empty(ids.size, dtype=_CANDIDATE)
    rows["id"] = ids
    rows["match"] = pool.matches[first]
    rows["inconsistency"] = pool.inconsistency[first]
    rows["demoted"] = pool.demoted[first]
    rows = rows[np.argsort(-rows["match"], kind="stable")]
    header = _HEADER.pack(OBSERVATION_VERSION, generation, k, mode, len(arm_bytes))
    return header + arm_bytes + _NAMESPACE_LENGTH.pack(len(namespace_bytes)) + namespace_bytes + rows.tobytes()


def observation_entry(
    query: RecallQuery,
    observation: Observation,
    pool: ScoredPool,
    generation: int,
) -> tuple[bytes, Callable[[], bytes]]:
    """The observation record of one retrieval, as a key and its encoder, for the retrieval log (unsynced, queued
    with the retrieval record: see :meth:`Engine.record_retrieval`).

    The candidates are the pool recall ranked, each with the match recall computed for it (handed over
    through the scoring block, so nothing is recomputed here); encoded by the log's thread.
    """
    arm, k, mode, namespace = observation.arm, len(observation.returned_ids), _mode(query), query.namespace
    return observation_key(observation.retrieval_id), lambda: encode_observation(
        arm, generation, k, mode, pool, namespace
    )
