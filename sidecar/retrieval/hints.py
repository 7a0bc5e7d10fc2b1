"""How to read a recalled memory: the hint attached to each item."""

from __future__ import annotations

from memevo.v1 import memory_pb2

from ..domain import RecallQuery

HINT_CURRENT = "current"
HINT_ARCHIVED = "archived — still true, rarely needed"
HINT_HISTORICAL = "historical reference — the situation may have changed"
HINT_CONSOLIDATED = "absorbed into a pattern memory"
HINT_AS_OF = "valid at the requested time, replaced since"
HINT_COUNTER_EXAMPLE = "historical reference / counter-example"
HINT_OLD_FRAMEWORK = "formed under an older framework"


def hint_for(record: memory_pb2.Memory, query: RecallQuery, framework_version: str = "") -> str:
    """The English reading hint of ``record`` in the answer to ``query``.

    ``framework_version`` is the agent's current one: memories formed under
    another are flagged for re-interpretation.
    """
    hint = _state_hint(record, query)
    if record.demoted_by:
        hint = f"{HINT_COUNTER_EXAMPLE} (strategy {record.demoted_by} did better)"
    if framework_version and record.framework_version != framework_version:
        formed = record.framework_version or "an unversioned framework"
        hint = f"{hint}; {HINT_OLD_FRAMEWORK} ({formed})"
    return hint


def _state_hint(record: memory_pb2.Memory, query: RecallQuery) -> str:
    state = record.state
    if state == memory_pb2.MEMORY_STATE_OBSOLETE and query.as_of_s is not None:
        return HINT_AS_OF
    if state == memory_pb2.MEMORY_STATE_OBSOLETE:
        if record.superseded_by:
            return f"{HINT_HISTORICAL}; superseded by memory {record.superseded_by}"
        return HINT_HISTORICAL
    if state == memory_pb2.MEMORY_STATE_CONSOLIDATED:
        return f"{HINT_CONSOLIDATED} {record.consolidated_into}" if record.consolidated_into else HINT_CONSOLIDATED
    if state == memory_pb2.MEMORY_STATE_ARCHIVED:
        return HINT_ARCHIVED
    return HINT_CURRENT
