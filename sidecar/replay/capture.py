"""What the sidecar logs about each retrieval for offline replay: its arm and its scored candidate pool.

Beside each retrieval record (key ``retrieval id``) the sidecar writes a
second record under ``retrieval id + "|x"`` in the same column family, so
the two expire together. It holds JSON::

    {"v": 1, "arm": "", "g": generation, "k": returned count, "mode": 0|1|2,
     "c": [[id, match, inconsistency, demoted], ...]}

``c`` is the re-ranked pool of the recall in match order, each candidate's
``match`` being the policy-free part of its ranking score (see RecallRequest)
exactly as recall computed it (recall hands it over; nothing is recomputed
here). ``mode`` is 0 for current-only retrieval, 1 when ARCHIVED
memories were asked for, 2 for history and as-of queries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memevo.v1 import memory_pb2, memory_service_pb2

from ..store.rocks import CF_RETRIEVALS, RocksStore

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
    """Write the observation record of one retrieval (unsynced, like the retrieval record).

    The candidates are the pool recall ranked, each with the match recall computed for it (handed over
    through the scoring block, so nothing is recomputed here); records scored without a match are not
    candidates.
    """
    exact: dict[int, float] = getattr(pool, "matches", {})
    candidates = []
    seen: set[int] = set()
    for record in pool:
        if record.id in seen or record.id not in exact:
            continue
        seen.add(record.id)
        candidates.append(
            [record.id, round(exact[record.id], 6), round(float(record.inconsistency), 6), int(bool(record.demoted_by))]
        )
    candidates.sort(key=lambda c: -c[1])
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
