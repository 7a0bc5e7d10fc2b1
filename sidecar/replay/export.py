"""``memevo export``: a data directory's change log, retrievals and outcomes as a replay log (JSON lines).

The data directory is opened read-only (RocksDB's read-only mode takes no
lock), so export works on a stopped data directory and beside a running
sidecar; beside a running one it sees what was durable when it opened.

Format ``memevo-replay-log`` version 1, one JSON object per line, each with a
``type``:

- ``header`` (first line): ``format``, ``version``, ``exported_at_s``,
  ``dimension``, ``embedder``, ``last_sequence`` and ``policy`` (the
  data directory's policy as proto3 JSON with field names as in the proto).
- ``memory`` (one per memory ever created, by id): ``id``, ``namespace``,
  ``kind`` and ``source`` (enum numbers), ``importance`` (0-10),
  ``content_bytes``, ``tokens`` (estimated tokens of its text),
  ``stored_bytes``, ``confidence0`` (its confidence when stored: the current
  one with the logged outcomes undone), ``created_s`` (system time,
  seconds), ``created_turn`` (0 = unknown) and ``final_state``. Evicted
  memories have no record left: their size fields are 0 and
  ``confidence0`` is the policy's starting confidence for imported memories.
- then, in time order (``t``, system time in seconds; ``turn``, 0 = unknown):
  ``event`` (``seq``, ``id``, ``event``: created / state / superseded /
  evicted / consolidated / unconsolidated / policy / framework, ``to``:
  the MemoryState number, ``governance``: true when a sweep made the change,
  so a replay under another policy decides it again, ``related``);
  ``retrieval`` (``id``, ``returned``: ids in rank order, ``arm``, ``mode``,
  ``candidates``: [[id, match, inconsistency, demoted], ...] in match order,
  or null when the retrieval has no observation record); ``outcome``
  (``seq``, ``retrieval`` id or "", ``used``: the ids it updated, ``success``
  and ``failure`` weights as ReportOutcome applied them).

Retrieval records expire (ReportOutcome can no longer name them), so a log
holds the retrievals of the retention window only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocksdict
from google.protobuf import json_format

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, policy_pb2

from ..errors import FailedPrecondition
from ..perception.feedback import FAILURE_LOSS, SUCCESS_GAIN, outcome_weights, unpack_retrieval
from ..policy import default_policy
from ..retrieval.tokens import estimate_tokens
from ..store.columns import RECORD_OVERHEAD_BYTES
from ..store.rocks import (
    CF_CHANGELOG,
    CF_MEMORIES,
    CF_META,
    CF_RETRIEVALS,
    COLUMN_FAMILIES,
    META_DIMENSION,
    META_EMBEDDER,
    META_LAST_SEQUENCE,
)
from .capture import OBSERVATION_SUFFIX, parse_observation

LOG_FORMAT = "memevo-replay-log"
LOG_VERSION = 1
META_POLICY = b"policy"

_EVENT_NAMES = {
    events_pb2.CHANGE_EVENT_TYPE_CREATED: "created",
    events_pb2.CHANGE_EVENT_TYPE_STATE_CHANGED: "state",
    events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED: "superseded",
    events_pb2.CHANGE_EVENT_TYPE_EVICTED: "evicted",
    events_pb2.CHANGE_EVENT_TYPE_CONSOLIDATED: "consolidated",
    events_pb2.CHANGE_EVENT_TYPE_UNCONSOLIDATED: "unconsolidated",
    events_pb2.CHANGE_EVENT_TYPE_POLICY_UPDATED: "policy",
    events_pb2.CHANGE_EVENT_TYPE_FRAMEWORK_DECLARED: "framework",
}


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote."""

    memories: int
    events: int
    retrievals: int
    outcomes: int
    path: Path


def policy_to_json(policy: policy_pb2.Policy) -> dict[str, Any]:
    """A policy as proto3 JSON (field names as in the proto, zeros included)."""
    return json_format.MessageToDict(
        policy, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def policy_from_json(data: Any) -> policy_pb2.Policy:
    """A policy from proto3 JSON: the Policy message, or a GetPolicy/UpdatePolicy body ``{"policy": ...}``."""
    if isinstance(data, dict) and set(data) == {"policy"}:
        data = data["policy"]
    return json_format.ParseDict(data, policy_pb2.Policy())


class _ReadOnly:
    """The data directory's RocksDB, read-only (no lock: works beside a running sidecar)."""

    def __init__(self, data_dir: Path) -> None:
        if not (data_dir / "rocksdb").is_dir():
            raise FailedPrecondition(f"{data_dir} is not a memevo data directory (no rocksdb/ inside)")
        options = rocksdict.Options(raw_mode=True)
        self._db = rocksdict.Rdict(
            str(data_dir / "rocksdb"),
            options,
            column_families={name: rocksdict.Options(raw_mode=True) for name in COLUMN_FAMILIES},
            access_type=rocksdict.AccessType.read_only(),
        )
        self._cfs = {name: self._db.get_column_family(name) for name in COLUMN_FAMILIES}

    def get(self, cf: str, key: bytes) -> bytes | None:
        value = self._cfs[cf].get(key)
        return None if value is None else bytes(value)

    def items(self, cf: str) -> Iterator[tuple[bytes, bytes]]:
        it = self._cfs[cf].iter()
        it.seek_to_first()
        while it.valid():
            yield bytes(it.key()), bytes(it.value())
            it.next()

    def close(self) -> None:
        for cf in self._cfs.values():
            cf.close()
        self._cfs.clear()
        self._db.close()


def _outcome_of(event: events_pb2.ChangeEvent) -> tuple[str, float, float]:
    """(retrieval id, success weight, failure weight) of an OUTCOME_REPORTED event's detail."""
    words = event.detail.split()
    retrieval_id = ""
    if words and not words[0].startswith(("OUTCOME_", "reward")):
        retrieval_id = words.pop(0)
    if len(words) >= 2 and words[0] == "reward":
        return retrieval_id, *outcome_weights(0, float(words[1]))
    name = words[0] if words else "OUTCOME_PARTIAL"
    outcome = memory_service_pb2.Outcome.Value(name) if name in memory_service_pb2.Outcome.keys() else 3  # noqa: SIM118
    return retrieval_id, *outcome_weights(outcome, None)


def _undo_outcomes(confidence: float, steps: list[tuple[float, float]]) -> float:
    """The confidence before ``steps`` of outcome feedback (the inverse of feedback.apply_outcome)."""
    for success, failure in reversed(steps):
        keep = 1.0 - FAILURE_LOSS * failure
        if keep > 0:
            confidence = confidence / keep
        gain = SUCCESS_GAIN * success
        if gain < 1.0:
            confidence = (confidence - gain) / (1.0 - gain)
        confidence = min(1.0, max(0.0, confidence))
    return confidence


def export_log(data_dir: Path, out: Path) -> ExportSummary:
    """Write ``data_dir``'s replay log to ``out``; FailedPrecondition when it is not a data directory."""
    db = _ReadOnly(data_dir)
    try:
        raw_policy = db.get(CF_META, META_POLICY)
        policy = policy_pb2.Policy.FromString(raw_policy) if raw_policy else default_policy()
        dimension = int((db.get(CF_META, META_DIMENSION) or b"0").decode())
        header = {
            "type": "header",
            "format": LOG_FORMAT,
            "version": LOG_VERSION,
            "exported_at_s": time.time(),
            "dimension": dimension,
            "embedder": (db.get(CF_META, META_EMBEDDER) or b"").decode(),
            "last_sequence": int((db.get(CF_META, META_LAST_SEQUENCE) or b"0").decode()),
            "policy": policy_to_json(policy),
        }
        timeline: list[tuple[float, int, int, dict[str, Any]]] = []
        created: dict[int, events_pb2.ChangeEvent] = {}
        outcome_steps: dict[int, list[tuple[float, float]]] = {}
        events = outcomes = 0
        event = events_pb2.ChangeEvent()
        for _, raw in db.items(CF_CHANGELOG):
            event.ParseFromString(raw)
            t = event.recorded_at.seconds + event.recorded_at.nanos * 1e-9
            if event.type == events_pb2.CHANGE_EVENT_TYPE_OUTCOME_REPORTED:
                retrieval_id, success, failure = _outcome_of(event)
                used = list(event.related_ids)
                for memory_id in used:
                    outcome_steps.setdefault(memory_id, []).append((success, failure))
                entry: dict[str, Any] = {
                    "type": "outcome",
                    "seq": event.sequence,
                    "t": t,
                    "turn": event.turn,
                    "retrieval": retrieval_id,
                    "used": used,
                    "success": success,
                    "failure": failure,
                }
                outcomes += 1
            elif event.type in _EVENT_NAMES:
                if event.type == events_pb2.CHANGE_EVENT_TYPE_CREATED:
                    created[event.memory_id] = events_pb2.ChangeEvent.FromString(raw)
                entry = {
                    "type": "event",
                    "seq": event.sequence,
                    "t": t,
                    "turn": event.turn,
                    "event": _EVENT_NAMES[event.type],
                    "id": event.memory_id,
                    "to": int(event.to_state),
                    "governance": event.reason.startswith("sweep"),
                    "related": list(event.related_ids),
                }
                events += 1
            else:
                continue  # UPDATED: statistics a replay recomputes itself
            timeline.append((t, 0, event.sequence, entry))
        retrievals = 0
        observations: dict[bytes, bytes] = {}
        records: list[tuple[bytes, bytes]] = []
        for key, raw in db.items(CF_RETRIEVALS):
            if key.endswith(OBSERVATION_SUFFIX):
                observations[key[: -len(OBSERVATION_SUFFIX)]] = raw
            else:
                records.append((key, raw))
        for key, raw in records:
            recorded_at_s, turn, ids = unpack_retrieval(raw)
            seen = observations.get(key)
            observation = parse_observation(seen) if seen is not None else None
            entry = {
                "type": "retrieval",
                "id": key.decode(),
                "t": recorded_at_s,
                "turn": turn or 0,
                "returned": ids,
                "arm": observation.arm if observation else "",
                "mode": observation.mode if observation else 0,
                "candidates": [list(c) for c in observation.candidates] if observation else None,
            }
            timeline.append((recorded_at_s, 1, retrievals, entry))
            retrievals += 1
        memories: dict[int, dict[str, Any]] = {}
        record = memory_pb2.Memory()
        for _, raw in db.items(CF_MEMORIES):
            record.ParseFromString(raw)
            content_bytes = len(record.content.encode())
            memories[record.id] = {
                "type": "memory",
                "id": record.id,
                "namespace": record.namespace,
                "kind": int(record.kind),
                "source": int(record.source),
                "importance": record.importance,
                "task": record.task_signature,
                "content_bytes": content_bytes,
                "tokens": estimate_tokens(record.content),
                "stored_bytes": content_bytes + 4 * dimension + RECORD_OVERHEAD_BYTES,
                "confidence0": round(_undo_outcomes(record.confidence, outcome_steps.get(record.id, [])), 6),
                "created_s": record.recorded_at.seconds + record.recorded_at.nanos * 1e-9,
                "created_turn": record.turn,
                "final_state": int(record.state),
            }
        for memory_id, event in created.items():
            if memory_id in memories:
                continue
            memories[memory_id] = {
                "type": "memory",
                "id": memory_id,
                "namespace": event.namespace,
                "kind": int(event.kind),
                "source": 0,
                "importance": 0,
                "content_bytes": 0,
                "tokens": 0,
                "stored_bytes": 0,
                "confidence0": policy.source_confidence.imported,
                "created_s": event.recorded_at.seconds + event.recorded_at.nanos * 1e-9,
                "created_turn": event.turn,
                "final_state": int(memory_pb2.MEMORY_STATE_EVICTED),
            }
    finally:
        db.close()
    timeline.sort(key=lambda item: item[:3])
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", encoding="utf-8") as sink:
        sink.write(json.dumps(header, separators=(",", ":")) + "\n")
        for memory_id in sorted(memories):
            sink.write(json.dumps(memories[memory_id], separators=(",", ":")) + "\n")
        for *_, entry in timeline:
            sink.write(json.dumps(entry, separators=(",", ":")) + "\n")
    partial.replace(out)
    return ExportSummary(len(memories), events, retrievals, outcomes, out)
