"""How to read a recalled memory: the hint attached to each item."""

from __future__ import annotations

from memevo.v1 import memory_pb2

from ..domain import RecallQuery

HINT_CURRENT = "current"
HINT_ARCHIVED = "archived — still true, rarely needed"
HINT_HISTORICAL = "historical reference — the situation may have changed"
HINT_CONSOLIDATED = "absorbed into a pattern memory"
HINT_AS_OF = "valid at the requested time, replaced since"


def hint_for(record: memory_pb2.Memory, query: RecallQuery) -> str:
    """The English reading hint of ``record`` in the answer to ``query``."""
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
