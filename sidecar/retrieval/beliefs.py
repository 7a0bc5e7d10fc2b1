"""What the agent believes: the entities of a namespace, and one entity's value of each attribute, now or at an instant.

Both views are read from the hot columns (entity index, state, validity, interned fields) and touch records only
for the memories they return, so listing a namespace or an entity costs a scan of its ids, not of its records.
A value counts whether it was keyed (``Memory.fact``) or read from prose (``Memory.inferred``), as History does.
"As of" an instant (world time) a memory held when it was valid then by Recall's rule (``valid_from <= T <
valid_to``) and is ACTIVE, ARCHIVED or OBSOLETE now: a version superseded since still held, a later one did not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2, memory_service_pb2

from ..domain import from_timestamp, now_s, set_timestamp
from ..engine import Engine
from ..store.columns import (
    NO_CODE,
    STATE_ACTIVE,
    STATE_ARCHIVED,
    STATE_EVICTED,
    STATE_OBSOLETE,
    STATE_UNSPECIFIED,
    MemoryColumns,
    field_attribute,
)

DEFAULT_ENTITY_LIMIT = 100
"""ListEntities' answer when the request gives no limit: a page a person reads, not the whole namespace."""


@dataclass(frozen=True)
class _Rows:
    """Stored, not evicted rows of one namespace, with what both views derive from the columns."""

    ids: npt.NDArray[np.int64]
    current: npt.NDArray[np.bool_]
    """The row holds: now (ACTIVE or ARCHIVED with no end of validity), or at the instant asked about."""
    attribute: npt.NDArray[np.int64]
    """Index into ``names`` of the attribute the row states (declared or read); -1 for none."""
    names: list[str]
    changed_at: npt.NDArray[np.float64]
    """System time of the row's last write or state change (epoch seconds)."""


def _rows(
    columns: MemoryColumns, ids: npt.NDArray[np.int64], namespace_code: int, *, as_of_s: float | None = None
) -> _Rows:
    ids = ids[ids < columns.size]  # a row is complete once the size counts it
    state = columns.state[ids]
    keep = (columns.namespace[ids] == namespace_code) & (state != STATE_UNSPECIFIED) & (state != STATE_EVICTED)
    ids = ids[keep]
    state = state[keep]
    valid_to = columns.valid_to[ids]
    if as_of_s is None:
        current = ((state == STATE_ACTIVE) | (state == STATE_ARCHIVED)) & np.isnan(valid_to)
    else:
        # Recall's as_of rule: the versions valid then, which may be obsolete now.
        held = (state == STATE_ACTIVE) | (state == STATE_ARCHIVED) | (state == STATE_OBSOLETE)
        valid_from = columns.valid_from[ids]
        current = held & (valid_from <= as_of_s) & (np.isnan(valid_to) | (valid_to > as_of_s))
    present, inverse = np.unique(columns.fields[ids], return_inverse=True)
    field_names = [field_attribute(columns.field_sets.string(int(c))) if c != NO_CODE else "" for c in present]
    names = sorted({n for n in field_names if n})
    position = {n: i for i, n in enumerate(names)}
    by_field = np.asarray([position.get(n, -1) for n in field_names], dtype=np.int64)
    attribute = by_field[inverse.reshape(-1)] if ids.size else np.zeros(0, dtype=np.int64)
    changed_at = np.fmax(columns.recorded_at[ids], columns.state_since[ids])
    return _Rows(ids=ids, current=current, attribute=attribute, names=names, changed_at=changed_at)


def list_entities(
    engine: Engine, namespace: str, *, query: str = "", limit: int = DEFAULT_ENTITY_LIMIT
) -> memory_service_pb2.ListEntitiesResponse:
    """The entities of ``namespace`` whose id contains ``query`` (any case), most recently changed first."""
    columns = engine.columns
    namespace_code = columns.namespaces.lookup(namespace)
    response = memory_service_pb2.ListEntitiesResponse()
    if namespace_code == NO_CODE:
        return response
    rows = _rows(columns, columns.namespace_ids(namespace_code), namespace_code)
    entity = columns.entity[rows.ids]
    about = entity != NO_CODE
    codes, inverse = np.unique(entity[about], return_inverse=True)
    inverse = inverse.reshape(-1)
    names = [columns.entities.string(int(c)) for c in codes]
    wanted = np.asarray([query.casefold() in n.casefold() for n in names], dtype=np.bool_)
    if not wanted.any():
        return response
    count = codes.size
    current = rows.current[about]
    attribute = rows.attribute[about]
    changed_at = np.nan_to_num(rows.changed_at[about], nan=0.0)
    doubted = columns.doubted[rows.ids[about]] & current
    memories = np.bincount(inverse, minlength=count)
    currents = np.bincount(inverse, weights=current, minlength=count)
    doubts = np.bincount(inverse, weights=doubted, minlength=count)
    last = np.zeros(count, dtype=np.float64)
    np.maximum.at(last, inverse, changed_at)
    believed = current & (attribute >= 0)
    pairs = np.unique(inverse[believed] * (len(rows.names) + 1) + attribute[believed])
    beliefs = np.bincount(pairs // (len(rows.names) + 1), minlength=count)
    chosen = np.flatnonzero(wanted)
    chosen = chosen[np.lexsort((chosen, -last[chosen]))]  # newest change first; ties by code (first seen)
    response.total_count = int(chosen.size)
    for i in chosen[:limit].tolist():
        summary = response.entities.add(
            entity=names[i],
            memory_count=int(memories[i]),
            current_count=int(currents[i]),
            belief_count=int(beliefs[i]),
            doubted_count=int(doubts[i]),
        )
        if last[i] > 0:
            set_timestamp(summary.last_changed_at, float(last[i]))
    return response


def beliefs(
    engine: Engine, namespace: str, entity: str, *, as_of_s: float | None = None
) -> memory_service_pb2.BeliefsResponse:
    """Each attribute's value of ``entity`` in ``namespace``, keyed or read from prose, by attribute name.

    The current values, or with ``as_of_s`` (world time, epoch seconds) the values held then. Doubts in an
    "as of" answer are those between memories that both held then.
    """
    columns = engine.columns
    response = memory_service_pb2.BeliefsResponse(entity=entity)
    set_timestamp(response.as_of, now_s() if as_of_s is None else as_of_s)
    entity_code = columns.entities.lookup(entity)
    namespace_code = columns.namespaces.lookup(namespace)
    if entity_code == NO_CODE or namespace_code == NO_CODE:
        return response
    rows = _rows(columns, columns.entity_ids(entity_code), namespace_code, as_of_s=as_of_s)
    if rows.ids.size == 0:
        return response
    changed_at = rows.changed_at[~np.isnan(rows.changed_at)]
    if changed_at.size:
        set_timestamp(response.last_changed_at, float(changed_at.max()))
    response.unattributed_count = int(np.count_nonzero(rows.current & (rows.attribute < 0)))
    versions = np.bincount(rows.attribute[rows.attribute >= 0], minlength=len(rows.names))
    holding = rows.current & (rows.attribute >= 0)
    held_then = frozenset(rows.ids[rows.current].tolist()) if as_of_s is not None else frozenset()
    attribute_of = dict(zip(rows.ids[holding].tolist(), rows.attribute[holding].tolist(), strict=True))
    records, _ = engine.get(list(attribute_of))
    by_attribute: dict[int, list[memory_pb2.Memory]] = {}
    for record in records:
        by_attribute.setdefault(attribute_of[record.id], []).append(record)
    for attribute in sorted(by_attribute, key=lambda a: rows.names[a]):
        held = _ranked(by_attribute[attribute])
        name = rows.names[attribute]
        first = held[0]
        belief = response.beliefs.add(
            attribute=name,
            value=first.fact.value if first.fact.attribute else first.inferred.value,
            read_from_text=not first.fact.attribute,
            memory=first,
            also_current=held[1:],
            version_count=int(versions[attribute]),
        )
        doubter = first.possibly_outdated_by
        if doubter and (as_of_s is None or doubter in held_then):
            belief.possibly_outdated_by.append(doubter)
        belief.history_key.namespace = namespace
        belief.history_key.entity = entity
        belief.history_key.attribute = name
    return response


def _ranked(held: list[memory_pb2.Memory]) -> list[memory_pb2.Memory]:
    """One attribute's current memories, the believed value first: undoubted by the others, then newest.

    A memory another current one doubts is the older value that one may replace (a soft conflict): the newer
    statement is what the agent would act on, as recall ranks the doubted one lower.
    """
    ids = {m.id for m in held}
    return sorted(
        held,
        key=lambda m: (m.possibly_outdated_by in ids, -from_timestamp(m.valid_from), -m.id),
    )
