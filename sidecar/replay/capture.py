"""What the sidecar logs about each retrieval for offline replay: its arm and its scored candidate pool.

Beside each retrieval record (key ``retrieval id``) the sidecar writes a
second record under ``retrieval id + "|x"`` in the same column family, so
the two expire together. Version 2 (written now) is binary, little-endian:

    u8 2 | u64 generation | u32 returned count k | u8 mode | u16 arm length | arm (UTF-8)
    | per candidate: i64 id, f32 match, f32 inconsistency, u8 demoted

Version 1 (still read) was JSON ``{"v": 1, "arm", "g", "k", "mode", "c": [[id, match,
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
OBSERVATION_VERSION = 2
_HEADER = struct.Struct("<BQIBH")
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
    if version != OBSERVATION_VERSION:
        raise ValueError(f"unknown observation record version {version}")
    arm_end = _HEADER.size + arm_length
    rows = np.frombuffer(raw, dtype=_CANDIDATE, offset=arm_end)
    return StoredObservation(
        arm=raw[_HEADER.size : arm_end].decode(),
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


def read_observation(store: RocksStore, retrieval_id: str) -> StoredObservation | None:
    """The observation record of a retrieval, or None (unknown, expired, or lost in a crash)."""
    raw = store.get(CF_RETRIEVALS, observation_key(retrieval_id))
    return None if raw is None else parse_observation(raw)


def _mode(query: RecallQuery) -> int:
    if query.mode == memory_service_pb2.RECALL_MODE_HISTORY or query.as_of_s is not None:
        return MODE_HISTORY
    return MODE_WITH_ARCHIVED if query.include_archived else MODE_CURRENT


def encode_observation(arm: str, generation: int, k: int, mode: int, pool: ScoredPool) -> bytes:
    """The version-2 record of a pool (candidates in match order, each id once: its first noting)."""
    arm_bytes = arm.encode()
    ids, first = np.unique(pool.ids, return_index=True)
    rows = np.empty(ids.size, dtype=_CANDIDATE)
    rows["id"] = ids
    rows["match"] = pool.matches[first]
    rows["inconsistency"] = pool.inconsistency[first]
    rows["demoted"] = pool.demoted[first]
    rows = rows[np.argsort(-rows["match"], kind="stable")]
    header = _HEADER.pack(OBSERVATION_VERSION, generation, k, mode, len(arm_bytes))
    return header + arm_bytes + rows.tobytes()


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
    arm, k, mode = observation.arm, len(observation.returned_ids), _mode(query)
    return observation_key(observation.retrieval_id), lambda: encode_observation(arm, generation, k, mode, pool)
