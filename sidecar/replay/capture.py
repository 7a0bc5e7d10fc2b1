"""What the sidecar logs about each retrieval for offline replay: its arm and its scored candidate pool.

Beside each retrieval record (key ``retrieval id``) the sidecar writes a
second record under ``retrieval id + "|x"`` in the same column family, so
the two expire together. It holds JSON::

    {"v": 1, "arm": "", "g": generation, "k": returned count, "mode": 0|1|2,
     "c": [[id, match, inconsistency, demoted], ...]}

``c`` is the re-ranked pool of the recall in match order, each candidate's
``match`` being the policy-free part of its ranking score (see RecallRequest):
for a returned memory it is recovered exactly from its score (score divided
by its trust, inconsistency and demotion factors); for the others it is
estimated as 0.7 x max(cosine, 0) + 0.3 x BM25 / best BM25 of the query's
namespace (cosine alone without query text), because the live ranking does
not keep them. ``mode`` is 0 for current-only retrieval, 1 when ARCHIVED
memories were asked for, 2 for history and as-of queries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memevo.v1 import memory_pb2, memory_service_pb2

from ..store.rocks import CF_RETRIEVALS, CF_VECTORS, RocksStore, u64_key

if TYPE_CHECKING:
    from ..domain import RecallQuery
    from ..engine import Engine
    from ..experiments.arms import Observation

OBSERVATION_SUFFIX = b"|x"
OBSERVATION_VERSION = 1
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
    """Decode an observation record."""
    data = json.loads(raw)
    return StoredObservation(
        arm=str(data.get("arm", "")),
        generation=int(data.get("g", 0)),
        k=int(data.get("k", 0)),
        mode=int(data.get("mode", MODE_CURRENT)),
        candidates=[(int(c[0]), float(c[1]), float(c[2]), bool(c[3])) for c in data.get("c", [])],
    )


def read_observation(store: RocksStore, retrieval_id: str) -> StoredObservation | None:
    """The observation record of a retrieval, or None (unknown, expired, or lost in a crash)."""
    raw = store.get(CF_RETRIEVALS, observation_key(retrieval_id))
    return None if raw is None else parse_observation(raw)


def _mode(query: RecallQuery) -> int:
    if query.mode == memory_service_pb2.RECALL_MODE_HISTORY or query.as_of_s is not None:
        return MODE_HISTORY
    return MODE_WITH_ARCHIVED if query.include_archived else MODE_CURRENT


def write_observation(
    engine: Engine,
    query: RecallQuery,
    observation: Observation,
    pool: list[memory_pb2.Memory],
    generation: int,
) -> None:
    """Write the observation record of one retrieval (unsynced, like the retrieval record)."""
    from ..retrieval.recall import LEXICAL_WEIGHT

    unique: dict[int, memory_pb2.Memory] = {}
    for record in pool:
        unique.setdefault(record.id, record)
    records = list(unique.values())
    # Recall hands over the exact match of every candidate it ranked; the estimate below is for pools
    # scored some other way.
    exact: dict[int, float] = getattr(pool, "matches", {})
    similarity = {memory_id: sim for memory_id, sim, _ in observation.hits}
    others = [r.id for r in records if r.id not in similarity and r.id not in exact]
    if others:
        raws = engine.store.multi_get(CF_VECTORS, [u64_key(i) for i in others])
        for memory_id, raw in zip(others, raws, strict=True):
            if raw is None:
                similarity[memory_id] = 0.0
                continue
            vector = np.frombuffer(raw, dtype="<f4")
            norm = float(np.linalg.norm(vector))
            similarity[memory_id] = float(vector @ query.vector) / norm if norm > 0 else 0.0
    lexical: dict[int, float] = {}
    weight = 0.0
    if query.text and any(r.id not in exact for r in records):
        weight = LEXICAL_WEIGHT
        lex_ids, lex_scores = engine.lexical.search(query.namespace, query.text)
        best = float(lex_scores.max()) if lex_scores.size else 0.0
        if best > 0:
            wanted = set(unique)
            lexical = {
                int(i): float(s) / best
                for i, s in zip(lex_ids.tolist(), lex_scores.tolist(), strict=True)
                if i in wanted
            }
    candidates = []
    for record in records:
        demoted = bool(record.demoted_by)
        inconsistency = float(record.inconsistency)
        if record.id in exact:
            match = exact[record.id]
        else:
            match = (1.0 - weight) * max(similarity[record.id], 0.0) + weight * lexical.get(record.id, 0.0)
        candidates.append([record.id, round(match, 6), round(inconsistency, 6), int(demoted)])
    body = {
        "v": OBSERVATION_VERSION,
        "arm": observation.arm,
        "g": generation,
        "k": len(observation.returned_ids),
        "mode": _mode(query),
        "c": candidates,
    }
    engine.store.put_unsynced(
        CF_RETRIEVALS, observation_key(observation.retrieval_id), json.dumps(body, separators=(",", ":")).encode()
    )
