"""LangGraph's long-term memory store (``BaseStore``) over a running memevo sidecar.

:class:`MemevoStore` keeps each LangGraph item ``(namespace, key) -> value`` as
one memevo memory with a fact key, so the sidecar governs it like any fact:

- the store's memevo namespace (one per store, the tenant) holds every item;
- the LangGraph namespace becomes the memory's entity (``lg:users/alice``,
  labels percent-encoded; a digest when longer than 256 bytes) and the item
  key its fact attribute, so a ``put`` with a new value supersedes the old
  one (kept as OBSOLETE history, see ``MemoryClient.history``) and a ``put``
  of the same value confirms it;
- the value is stored as its JSON text (the memory's content, which the
  sidecar embeds and word-indexes); the namespace, key and creation time ride
  in the memory's metadata; each namespace prefix becomes a tag, so a search
  under a prefix is an exact filter in the sidecar;
- ``search(query=...)`` is a governed Recall (current memories first, trust-
  and recency-weighted), ``filter`` is applied to the decoded values.

What does not map exactly is listed in the README ("LangGraph store"). Needs
the ``langgraph`` extra and a sidecar that embeds text (any ``--embedder`` but
``none``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Coroutine, Generator, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from memevo.client import (
    AsyncMemoryClient,
    FactKey,
    Memory,
    MemoryClient,
    MemoryKind,
    MemorySource,
    MemoryState,
)

NAMESPACE_META = "langgraph.namespace"
KEY_META = "langgraph.key"
CREATED_META = "langgraph.created_at"
MAX_LISTED = 1000
"""Most items one Recall returns (the sidecar's limit): the bound of a query-less search and of list_namespaces."""
MAX_ENTITY_BYTES = 256
MAX_FACT_VALUE_BYTES = 4096
MAX_DEPTH = 31
"""Deepest namespace: one tag per prefix level plus the root tag, at most 32 tags a memory."""
FILTER_OVERFETCH = 4
"""With a value filter, a query search recalls this many times limit+offset before filtering."""
LISTING_QUERY = "item"
"""Recall needs a query; a listing ranks by this neutral one and then orders by time."""
CURRENT_STATES = (MemoryState.ACTIVE, MemoryState.ARCHIVED)

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A client method's name and arguments; a plan yields these and gets each call's result back."""
Plan = Generator[Call, Any, Result]


def _dump(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _digest(text: str, size: int = 32) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def entity_of(namespace: tuple[str, ...]) -> str:
    """The memevo entity of a LangGraph namespace."""
    entity = "lg:" + "/".join(quote(label, safe="") for label in namespace)
    if len(entity.encode()) > MAX_ENTITY_BYTES:
        return "lg:sha256:" + _digest("\x00".join(namespace), 64)
    return entity


def prefix_tag(prefix: tuple[str, ...]) -> str:
    """The tag every item under ``prefix`` carries (``()`` is the store's root: every item)."""
    return "lg:" + _digest("\x00".join(("", *prefix)), 24)


def _tags(namespace: tuple[str, ...]) -> list[str]:
    if len(namespace) > MAX_DEPTH:
        raise ValueError(
            f"namespace {namespace} is {len(namespace)} labels deep; MemevoStore keeps at most {MAX_DEPTH}"
        )
    return [prefix_tag(namespace[:depth]) for depth in range(len(namespace) + 1)]


def _utc(value: datetime | None) -> datetime:
    return value if value is not None else datetime.now(timezone.utc)


def _item_of(memory: Memory, score: float | None = None, *, search: bool = False) -> Item | SearchItem:
    namespace = tuple(json.loads(memory.metadata[NAMESPACE_META]))
    created = memory.metadata.get(CREATED_META)
    created_at = datetime.fromisoformat(created) if created else _utc(memory.recorded_at)
    updated_at = _utc(memory.updated_at or memory.recorded_at)
    value = json.loads(memory.content)
    key = memory.metadata[KEY_META]
    if search:
        return SearchItem(namespace, key, value, created_at, updated_at, score)
    return Item(value=value, key=key, namespace=namespace, created_at=created_at, updated_at=updated_at)


def _is_item(memory: Memory) -> bool:
    return NAMESPACE_META in memory.metadata and KEY_META in memory.metadata


def _current(versions: Iterable[Memory], namespace: tuple[str, ...], key: str) -> Memory | None:
    """The current version of an item among a fact key's versions (None after a delete)."""
    for memory in reversed(list(versions)):
        if (
            memory.state in CURRENT_STATES
            and _is_item(memory)
            and memory.metadata[KEY_META] == key
            and tuple(json.loads(memory.metadata[NAMESPACE_META])) == namespace
        ):
            return memory
    return None


def _matches_value(actual: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: equality, nested objects field by field, ``$eq``/``$ne``/``$gt``/... ."""
    if isinstance(wanted, dict):
        if any(name.startswith("$") for name in wanted):
            return all(_compare(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, dict) and all(_matches_value(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_matches_value(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _compare(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"filter operator {op!r} is not supported; use $eq, $ne, $gt, $gte, $lt or $lte")
    if actual is None:
        return False
    left, right = float(actual), float(operand)
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[op]


def _passes(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    return not flt or all(_matches_value(value.get(field), wanted) for field, wanted in flt.items())


def _condition_holds(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        window = namespace[: len(path)]
    elif condition.match_type == "suffix":
        window = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"match_type {condition.match_type!r}: use 'prefix' or 'suffix'")
    return all(want in ("*", have) for want, have in zip(path, window, strict=True))


def _advance(plan: Plan, sent: Any) -> tuple[Call | None, Result]:
    """Send a call's result into a plan: its next call, or (None, the operation's result) when it is done."""
    try:
        return plan.send(sent), None
    except StopIteration as done:
        return None, done.value


class MemevoStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are governed memevo memories of one sidecar namespace.

    ``target`` is the sidecar's address (``unix:///abs/path.sock`` or ``host:port``);
    ``namespace`` the memevo namespace holding every item of this store; ``token``
    the sidecar's bearer token. Items are written as ``kind`` (default FACT) from
    ``source``. ``delete`` retires an item's current version and keeps its history
    (``keep_history_on_delete=True``) or erases every stored version of it.

    Sync methods use a :class:`~memevo.client.MemoryClient`, async ones an
    :class:`~memevo.client.AsyncMemoryClient` (one per event loop). Sidecar
    failures raise :class:`~memevo.client.MemevoError` subclasses; TTLs are not
    supported (``put(..., ttl=...)`` raises NotImplementedError).
    """

    supports_ttl = False

    def __init__(
        self,
        target: str,
        *,
        namespace: str = "default",
        token: str | None = None,
        timeout_s: float = 10.0,
        kind: MemoryKind = MemoryKind.FACT,
        source: MemorySource = MemorySource.AGENT_INFERENCE,
        keep_history_on_delete: bool = True,
    ) -> None:
        self._target, self._token, self._timeout_s = target, token, timeout_s
        self._namespace = namespace or "default"
        self._kind, self._source = kind, source
        self._keep_history = keep_history_on_delete
        self._client = MemoryClient(target, token=token, timeout_s=timeout_s)
        self._async: tuple[asyncio.AbstractEventLoop, AsyncMemoryClient] | None = None

    @property
    def namespace(self) -> str:
        """The memevo namespace of every item."""
        return self._namespace

    def close(self) -> None:
        """Close the sync client's channel (the async one closes with its event loop)."""
        self._client.close()

    def __enter__(self) -> MemevoStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- BaseStore ---

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, each against the sidecar; results in the same order."""
        results: list[Result] = []
        for op in ops:
            plan = self._plan(op)
            call, result = _advance(plan, None)
            while call is not None:
                name, args, kwargs = call
                call, result = _advance(plan, getattr(self._client, name)(*args, **kwargs))
            results.append(result)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order with the asyncio client; results in the same order."""
        client = self._async_client()
        results: list[Result] = []
        for op in ops:
            plan = self._plan(op)
            call, result = _advance(plan, None)
            while call is not None:
                name, args, kwargs = call
                pending: Coroutine[Any, Any, Any] = getattr(client, name)(*args, **kwargs)
                call, result = _advance(plan, await pending)
            results.append(result)
        return results

    def _async_client(self) -> AsyncMemoryClient:
        # A grpc.aio channel belongs to the loop it was made on; a store outlives loops (asyncio.run per test).
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, AsyncMemoryClient(self._target, token=self._token, timeout_s=self._timeout_s))
        return self._async[1]

    # --- one plan per operation: the client calls it needs, written once for both clients ---

    def _plan(self, op: Op) -> Plan:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op) if op.value is not None else self._delete(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _versions(self, namespace: tuple[str, ...], key: str) -> Generator[Call, Any, list[Memory]]:
        key_of = FactKey(entity=entity_of(namespace), attribute=key, namespace=self._namespace)
        result = yield ("history", (key_of,), {})
        return list(result.versions)

    def _get(self, op: GetOp) -> Plan:
        current = _current((yield from self._versions(op.namespace, op.key)), op.namespace, op.key)
        return None if current is None else _item_of(current)

    def _put(self, op: PutOp) -> Plan:
        if op.ttl is not None:
            raise NotImplementedError("MemevoStore does not support TTLs: memevo governs how long memories live")
        if not op.namespace or op.namespace[0] == "langgraph":
            raise ValueError(f"namespace {op.namespace}: must be non-empty and not start with 'langgraph'")
        if not isinstance(op.value, dict):
            # Stored as JSON, a list or a string would come back from get and search as an Item whose value is not
            # the dict LangGraph promises; refused before anything is written.
            raise TypeError(
                f"put {op.namespace} {op.key!r}: the value must be a dict (LangGraph's Item.value), not "
                f"{type(op.value).__name__}; wrap it, e.g. {{'value': ...}}"
            )
        content = _dump(op.value)
        current = _current((yield from self._versions(op.namespace, op.key)), op.namespace, op.key)
        created_at = current.metadata.get(CREATED_META) if current is not None else None
        fact_value = content if len(content.encode()) <= MAX_FACT_VALUE_BYTES else "sha256:" + _digest(content, 64)
        metadata = {
            NAMESPACE_META: json.dumps(list(op.namespace), ensure_ascii=False),
            KEY_META: op.key,
            CREATED_META: created_at or datetime.now(timezone.utc).isoformat(),
        }
        kwargs = {
            "namespace": self._namespace,
            "kind": self._kind,
            "entity": entity_of(op.namespace),
            "fact": (op.key, fact_value),
            "source": self._source,
            "tags": _tags(op.namespace),
            "metadata": metadata,
        }
        yield ("remember", (content,), kwargs)
        return None

    def _delete(self, op: PutOp) -> Plan:
        versions = yield from self._versions(op.namespace, op.key)
        current = _current(versions, op.namespace, op.key)
        if self._keep_history:
            ids = [current.id] if current is not None else []
        else:
            # The key's history also lists prose statements perception read as it: erase the item's own versions.
            entity = entity_of(op.namespace)
            ids = [
                m.id
                for m in versions
                if m.state != MemoryState.EVICTED
                and m.fact is not None
                and m.fact.attribute == op.key
                and m.entity == entity
            ]
        if ids:
            kwargs = {"reason": "LangGraph store delete", "keep_history": self._keep_history}
            yield ("forget", (ids,), kwargs)
        return None

    def _recall(self, query: str, prefix: tuple[str, ...], k: int) -> Generator[Call, Any, Any]:
        kwargs = {
            "k": max(1, min(k, MAX_LISTED)),
            "namespace": self._namespace,
            "tags": [prefix_tag(prefix)],
            "include_archived": True,
        }
        return (yield ("recall", (query,), kwargs))

    def _search(self, op: SearchOp) -> Plan:
        wanted = op.offset + op.limit
        if op.query:
            k = wanted * FILTER_OVERFETCH if op.filter else wanted
            found = yield from self._recall(op.query, op.namespace_prefix, k)
            ranked = [(r.memory, r.score) for r in found if _is_item(r.memory)]
        else:
            found = yield from self._recall(LISTING_QUERY, op.namespace_prefix, MAX_LISTED)
            newest_first = sorted((r.memory for r in found if _is_item(r.memory)), key=_updated, reverse=True)
            ranked = [(memory, None) for memory in newest_first]
        items = [_item_of(memory, score, search=True) for memory, score in ranked]
        kept = [item for item in items if _passes(item.value, op.filter)]
        return kept[op.offset : wanted]

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan:
        found = yield from self._recall(LISTING_QUERY, (), MAX_LISTED)
        namespaces = {tuple(json.loads(r.memory.metadata[NAMESPACE_META])) for r in found if _is_item(r.memory)}
        for condition in op.match_conditions or ():
            namespaces = {ns for ns in namespaces if _condition_holds(condition, ns)}
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def _updated(memory: Memory) -> datetime:
    return _utc(memory.updated_at or memory.recorded_at)


__all__ = ["MemevoStore", "entity_of", "prefix_tag"]
