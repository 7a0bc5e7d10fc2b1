"""``memevo mcp``: a Model Context Protocol server over a running memevo sidecar.

The server is a client of the sidecar (gRPC, through
:class:`~memevo.client.AsyncMemoryClient`); it never opens a data directory, so
any number of MCP servers can share one sidecar. Each works in one namespace,
fixed when it starts: tools take no namespace argument, and ids that name a
memory of another namespace are treated as unknown, so MCP clients given
different namespaces stay apart even on a sidecar without scoped tokens.

Tools: ``remember``, ``recall``, ``build_context``, ``history``, ``beliefs``, ``forget``
and ``report_outcome``, each with a JSON Schema for its arguments and one for its
structured result. Every result is compact text a model can read (with the
sidecar's hint for every memory) plus the same data as structured content.
Bad arguments and sidecar errors come back as tool errors (``isError``) whose
text names the field and the reason; the server keeps serving. A stdio line that is not
JSON-RPC (not JSON, too deeply nested, a lone surrogate) gets a JSON-RPC error with id null.

Resources: ``memevo://memory/{id}`` (one memory),
``memevo://fact/{entity}/{attribute}`` (the versions of a fact key, oldest
first, those written in prose included), ``memevo://entities`` (the namespace's
entities) and ``memevo://beliefs/{entity}`` (what the agent believes about one
now; ``?as_of=<RFC 3339 time>`` for what it held then), all as JSON.

Needs the ``mcp`` extra: ``pip install 'memevo[mcp]'``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit

import anyio
import grpc
import jsonschema
import pydantic
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

import memevo
from memevo.client import (
    AsyncMemoryClient,
    Belief,
    BeliefsResult,
    ContextResult,
    EntityList,
    FactKey,
    HistoryResult,
    Memory,
    MemoryKind,
    MemorySource,
    MemoryState,
    Outcome,
    RecallMode,
    RecallResult,
    WriteResult,
)
from memevo.client.errors import MemevoError, NotFoundError

log = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
JsonObject = dict[str, Any]

MAX_RECALL_K = 100
"""Most memories one ``recall`` returns: more would drown a model's context."""
DEFAULT_RECALL_K = 5
MAX_IDS = 1000
"""Ids one call may name (the sidecar's own limit)."""
MAX_TOKEN_BUDGET = 200_000
"""The sidecar's limit on a context's token budget."""
MEMORY_URI = "memevo://memory/{id}"
FACT_URI = "memevo://fact/{entity}/{attribute}"
ENTITIES_URI = "memevo://entities"
BELIEFS_URI = "memevo://beliefs/{entity}"
DEFAULT_ENTITY_LIMIT = 50
"""Entities one ``beliefs`` call lists when it names none: a model reads them all, so fewer than the console."""
MAX_ENTITY_LIMIT = 1000

KINDS: Mapping[str, MemoryKind] = {
    "fact": MemoryKind.FACT,
    "preference": MemoryKind.PREFERENCE,
    "episode": MemoryKind.EPISODE,
    "strategy": MemoryKind.STRATEGY,
    "abstraction": MemoryKind.ABSTRACTION,
}
WRITABLE_KINDS = ("fact", "preference", "episode", "strategy")
"""Abstractions are written by consolidation, not by callers."""
CURRENT_STATES = (MemoryState.ACTIVE, MemoryState.ARCHIVED)
"""States of a memory that still holds (ARCHIVED: true, only not at hand)."""
SOURCES: Mapping[str, MemorySource] = {
    "user_statement": MemorySource.USER_STATEMENT,
    "tool_result": MemorySource.TOOL_RESULT,
    "agent_inference": MemorySource.AGENT_INFERENCE,
    "reflection": MemorySource.REFLECTION,
    "import": MemorySource.IMPORT,
}
OUTCOMES: Mapping[str, Outcome] = {"success": Outcome.SUCCESS, "failure": Outcome.FAILURE, "partial": Outcome.PARTIAL}
MODES: Mapping[str, RecallMode] = {"current": RecallMode.CURRENT, "history": RecallMode.HISTORY}


@dataclass(frozen=True, kw_only=True)
class McpConfig:
    """How ``memevo mcp`` reaches its sidecar and how it serves MCP clients."""

    target: str
    """The sidecar's address: ``unix:///abs/path.sock`` or ``host:port``."""
    namespace: str = "default"
    """The one namespace every tool reads and writes."""
    token: str | None = None
    """Bearer token sent to the sidecar; ``None`` for a sidecar without tokens."""
    timeout_s: float = 10.0
    """Deadline of each sidecar call, seconds."""
    transport: Transport = "stdio"
    """``stdio`` (what desktop agents and IDEs launch) or ``http`` (streamable HTTP on loopback)."""
    http_host: str = "127.0.0.1"
    """Loopback address the HTTP transport listens on."""
    http_port: int = 8765
    """TCP port of the HTTP transport; 0 picks a free one."""
    http_path: str = "/mcp"
    """URL path of the HTTP transport's endpoint."""


class ToolInputError(Exception):
    """An argument the server rejects before calling the sidecar; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# ---- schemas ------------------------------------------------------------------------------------


def _string(description: str, *, max_length: int | None = None, **extra: Any) -> JsonObject:
    schema: JsonObject = {"type": "string", "minLength": 1, "description": description, **extra}
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _enum(values: Iterable[str], description: str) -> JsonObject:
    return {"type": "string", "enum": list(values), "description": description}


def _ids(description: str, *, min_items: int = 0) -> JsonObject:
    return {
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "minItems": min_items,
        "maxItems": MAX_IDS,
        "uniqueItems": True,
        "description": description,
    }


def _time(description: str) -> JsonObject:
    return {"type": "string", "format": "date-time", "description": description + " RFC 3339 with a UTC offset."}


def _object(properties: Mapping[str, JsonObject], required: Sequence[str] = ()) -> JsonObject:
    return {"type": "object", "properties": dict(properties), "required": list(required), "additionalProperties": False}


_NULLABLE_STRING: JsonObject = {"type": ["string", "null"]}
_NULLABLE_ID: JsonObject = {"type": ["integer", "null"]}

_FILTERS: Mapping[str, JsonObject] = {
    "kinds": {
        "type": "array",
        "items": {"type": "string", "enum": list(KINDS)},
        "uniqueItems": True,
        "description": "Only memories of these kinds; omit for every kind.",
    },
    "entity": _string("Only memories about this entity, e.g. 'user:alice'.", max_length=256),
    "tags": {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": 64},
        "maxItems": 32,
        "description": "Only memories carrying all of these tags.",
    },
    "valid_from_after": _time("Only memories that became true at or after this world time."),
    "valid_from_before": _time("Only memories that became true before this world time."),
}

_MEMORY_OUT: JsonObject = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "kind": {"type": "string"},
        "state": {"type": "string"},
        "content": {"type": "string"},
        "entity": {"type": "string"},
        "fact": {
            "type": ["object", "null"],
            "properties": {"attribute": {"type": "string"}, "value": {"type": "string"}},
        },
        "source": {"type": "string"},
        "confidence": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "valid_from": _NULLABLE_STRING,
        "valid_to": _NULLABLE_STRING,
        "recorded_at": _NULLABLE_STRING,
        "superseded_by": _NULLABLE_ID,
        "supersedes": {"type": "array", "items": {"type": "integer"}},
        "possibly_outdated_by": _NULLABLE_ID,
        "task_signature": {"type": "string"},
        "inferred": {
            "type": ["object", "null"],
            "description": "The fact the sidecar read in a memory written without one: its entity and attribute "
            "(the fact key it is a version of), the value when known, how sure it is and how it read it.",
            "properties": {
                "entity": {"type": "string"},
                "attribute": {"type": "string"},
                "value": {"type": "string"},
                "confidence": {"type": "number"},
                "method": {"type": "string"},
            },
        },
    },
    "required": ["id", "kind", "state", "content"],
}
_VERSION_OUT: JsonObject = {
    **_MEMORY_OUT,
    "properties": {
        **_MEMORY_OUT["properties"],
        "current": {
            "type": "boolean",
            "description": "Whether this version still holds: active or archived, and neither superseded nor "
            "ended (valid_to unset).",
        },
    },
    "required": [*_MEMORY_OUT["required"], "current"],
}

_BELIEF_OUT: JsonObject = _object(
    {
        "attribute": {"type": "string"},
        "value": {"type": "string", "description": "Empty when the text says it but no value was isolated."},
        "read_from_text": {
            "type": "boolean",
            "description": "True when the value was read from a statement written without a fact (see inferred).",
        },
        "memory": _MEMORY_OUT,
        "possibly_outdated_by": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "Open doubts: newer memories that may replace this value.",
        },
        "also_current": {"type": "array", "items": _MEMORY_OUT},
        "version_count": {"type": "integer"},
        "history_uri": {"type": "string", "description": "The attribute's history as a resource."},
    },
    required=("attribute", "value", "read_from_text", "memory", "possibly_outdated_by", "also_current"),
)
_ENTITY_OUT: JsonObject = _object(
    {
        "entity": {"type": "string"},
        "memory_count": {"type": "integer"},
        "current_count": {"type": "integer"},
        "belief_count": {"type": "integer"},
        "doubted_count": {"type": "integer"},
        "last_changed_at": _NULLABLE_STRING,
        "beliefs_uri": {"type": "string"},
    },
    required=("entity", "memory_count", "current_count", "belief_count", "doubted_count"),
)


def _tool(
    name: str,
    title: str,
    description: str,
    arguments: JsonObject,
    result: JsonObject,
    *,
    read_only: bool,
    destructive: bool = False,
    idempotent: bool = False,
) -> types.Tool:
    return types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema=arguments,
        output_schema=result,
        annotations=types.ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=False,
        ),
    )


TOOLS: tuple[types.Tool, ...] = (
    _tool(
        "remember",
        "Remember",
        "Store one memory so that later turns or sessions can recall it. Write one self-contained statement "
        "per call. For a fact or preference about an entity, give the entity and the fact's attribute and "
        "value: a new value for the same entity and attribute replaces the old one (the old one stays in the "
        "history). The sidecar also reads plain statements: one without a fact may be read as replacing an "
        "older one it changes, unless it is an episode. Restating a known value confirms it instead of "
        "duplicating it. Returns the memory's id and whether it replaced or confirmed another memory.",
        _object(
            {
                "content": _string("The statement to remember, as a full sentence.", max_length=65536),
                "kind": _enum(
                    WRITABLE_KINDS,
                    "fact: something true about the world, which a later statement may replace (the default when "
                    "omitted, or strategy when task_signature is given); preference: what someone likes or wants; "
                    "episode: something that happened, kept as it was and never replaced by a later statement "
                    "(give it explicitly for events); strategy: how to do a task.",
                ),
                "entity": _string("Who or what the memory is about, e.g. 'user:alice'.", max_length=256),
                "fact": {
                    **_object(
                        {
                            "attribute": _string("The attribute, e.g. 'preferred_language'.", max_length=256),
                            "value": _string("Its value, e.g. 'Python'.", max_length=4096),
                        },
                        required=("attribute", "value"),
                    ),
                    "description": "A structured fact about the entity (requires entity): the key is "
                    "(entity, attribute); a later value for the same key supersedes this one.",
                },
                "source": {
                    **_enum(SOURCES, "Where it came from; sets the starting confidence (tool_result highest)."),
                    "default": "agent_inference",
                },
                "importance": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10,
                    "description": "1 (trivial) to 10 (critical); omit when unsure.",
                },
                "tags": _FILTERS["tags"] | {"description": "Free labels to filter by later."},
                "task_signature": _string(
                    "For a strategy: the task it solves, e.g. 'deploy:billing-service'.", max_length=256
                ),
                "valid_from": _time("When it became true in the world; omit for now."),
                "request_id": _string(
                    "Optional id of this write: resending the same request with it returns the first result "
                    "instead of writing twice.",
                    max_length=128,
                ),
            },
            required=("content",),
        ),
        _object(
            {
                "id": {"type": "integer"},
                "outcome": {"type": "string", "enum": ["created", "confirmed", "superseded_previous", "backdated"]},
                "affected_ids": {"type": "array", "items": {"type": "integer"}},
                "replayed": {"type": "boolean"},
                "memory": _MEMORY_OUT,
            },
            required=("id", "outcome", "affected_ids", "replayed", "memory"),
        ),
        read_only=False,
    ),
    _tool(
        "recall",
        "Recall",
        "Find the memories that best answer a question, best first. Only current memories unless mode is "
        "'history'; superseded ones never appear as current. Each result carries a hint saying how to read it "
        "(current, possibly outdated, historical reference, ...). The result's retrieval_id can be passed to "
        "report_outcome afterwards to say whether the memories helped.",
        _object(
            {
                "query": _string("The question or topic, in natural language.", max_length=65536),
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RECALL_K,
                    "default": DEFAULT_RECALL_K,
                    "description": "How many memories to return at most.",
                },
                **_FILTERS,
                "as_of": _time("Answer as the world was at this time (versions valid then)."),
                "mode": {
                    **_enum(MODES, "current: only current memories; history: every stored version."),
                    "default": "current",
                },
                "include_archived": {
                    "type": "boolean",
                    "default": False,
                    "description": "Also return archived memories (still true, rarely used).",
                },
            },
            required=("query",),
        ),
        _object(
            {
                "retrieval_id": {"type": "string"},
                "memories": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            **_MEMORY_OUT["properties"],
                            "hint": {"type": "string"},
                            "score": {"type": "number"},
                            "similarity": {"type": "number"},
                        },
                        "required": [*_MEMORY_OUT["required"], "hint", "score"],
                    },
                },
            },
            required=("retrieval_id", "memories"),
        ),
        read_only=True,
    ),
    _tool(
        "build_context",
        "Build context",
        "Build a ready-to-paste context block for a task: the relevant current memories grouped as facts, "
        "strategies, episodes and patterns, each line with its hint, fitted to a token budget. Use it at the "
        "start of a task; pass the retrieval_id to report_outcome when the task is done.",
        _object(
            {
                "query": _string("The task or question the context is for.", max_length=65536),
                "token_budget": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TOKEN_BUDGET,
                    "default": 2000,
                    "description": "Most tokens the block may take.",
                },
                "language": {**_enum(("en", "zh"), "Language of the hints."), "default": "en"},
                **_FILTERS,
                "as_of": _time("Build the context as the world was at this time."),
            },
            required=("query",),
        ),
        _object(
            {
                "retrieval_id": {"type": "string"},
                "text": {"type": "string"},
                "tokens_used": {"type": "integer"},
                "items": {
                    "type": "array",
                    "items": _object(
                        {"id": {"type": "integer"}, "group": {"type": "string"}, "hint": {"type": "string"}},
                        required=("id", "group", "hint"),
                    ),
                },
            },
            required=("retrieval_id", "text", "tokens_used", "items"),
        ),
        read_only=True,
    ),
    _tool(
        "history",
        "History",
        "Show how something changed over time, oldest first: give memory_id for a memory's lineage (what it "
        "replaced and what replaced it), or entity and attribute for every value a fact has had, whether it was "
        "remembered with that fact or in plain text the sidecar read as it (or that replaced a version), each with "
        "its state and validity period, the current one marked, and the change-log events.",
        _object(
            {
                "memory_id": {"type": "integer", "minimum": 1, "description": "A memory's id."},
                "entity": _string("The fact key's entity, e.g. 'user:alice' (with attribute).", max_length=256),
                "attribute": _string("The fact key's attribute, e.g. 'contact_channel' (with entity).", max_length=256),
            }
        ),
        _object(
            {
                "versions": {"type": "array", "items": _VERSION_OUT},
                "events": {
                    "type": "array",
                    "items": _object(
                        {
                            "sequence": {"type": "integer"},
                            "type": {"type": "string"},
                            "memory_id": {"type": "integer"},
                            "to_state": {"type": "string"},
                            "reason": {"type": "string"},
                            "recorded_at": _NULLABLE_STRING,
                        },
                        required=("sequence", "type", "memory_id"),
                    ),
                },
            },
            required=("versions", "events"),
        ),
        read_only=True,
    ),
    _tool(
        "beliefs",
        "Beliefs",
        "What you believe now, without a query: give entity for every attribute's current value about it (each "
        "with when it became true, its source and confidence, open doubts, and whether it was remembered as a "
        "fact or read from a plain statement), and as_of for the values you held true at a past time instead; "
        "leave entity out to list the entities known, most recently changed first, optionally those whose id "
        "contains query. For how a value changed, call history with the entity and attribute.",
        _object(
            {
                "entity": _string("The entity, e.g. 'user:alice'.", max_length=256),
                "as_of": _time(
                    "With entity: the values held true at this world time (a value replaced since counts, one "
                    "that became true later does not); omit for now."
                ),
                "query": _string(
                    "Without entity: only entities whose id contains this text, ignoring case.", max_length=256
                ),
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_ENTITY_LIMIT,
                    "default": DEFAULT_ENTITY_LIMIT,
                    "description": "Without entity: how many entities to list.",
                },
            }
        ),
        _object(
            {
                "entity": _NULLABLE_STRING,
                "as_of": {"type": "string", "description": "The world time the beliefs are for, when as_of was given."},
                "beliefs": {"type": "array", "items": _BELIEF_OUT},
                "last_changed_at": _NULLABLE_STRING,
                "unattributed_count": {
                    "type": "integer",
                    "description": "Current memories about the entity that state no attribute (recall finds them).",
                },
                "entities": {"type": "array", "items": _ENTITY_OUT},
                "total_count": {"type": "integer", "description": "Entities matching query."},
            },
            required=("entity",),
        ),
        read_only=True,
    ),
    _tool(
        "forget",
        "Forget",
        "Delete memories by id (a tombstone stays in the change log), or with keep_history keep them as "
        "obsolete history that recall no longer returns. Use it when a memory is wrong, not when it merely "
        "changed: for a changed fact, remember the new value instead.",
        _object(
            {
                "ids": _ids("Ids of the memories to forget.", min_items=1),
                "reason": _string("Why, kept in the change log.", max_length=4096),
                "keep_history": {
                    "type": "boolean",
                    "default": False,
                    "description": "Keep them as obsolete history instead of deleting them.",
                },
            },
            required=("ids",),
        ),
        _object(
            {
                "forgotten_ids": {"type": "array", "items": {"type": "integer"}},
                "missing_ids": {"type": "array", "items": {"type": "integer"}},
            },
            required=("forgotten_ids", "missing_ids"),
        ),
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    _tool(
        "report_outcome",
        "Report outcome",
        "Say whether the memories of a recall or build_context helped: success raises their confidence, "
        "failure lowers it, and among strategies for the same task the one that works wins. Give the "
        "retrieval_id those tools returned; name used_memory_ids when only some of them were used.",
        _object(
            {
                "retrieval_id": _string("The retrieval_id of a recall or build_context result.", max_length=128),
                "outcome": _enum(OUTCOMES, "How using the memories went."),
                "used_memory_ids": _ids("The memories of that retrieval actually used; omit for all of them."),
                "reward": {
                    "type": "number",
                    "minimum": -1,
                    "maximum": 1,
                    "description": "Optional grade of the outcome in [-1, 1].",
                },
                "note": _string("Optional note kept in the change log.", max_length=4096),
            },
            required=("retrieval_id", "outcome"),
        ),
        _object({"updated_count": {"type": "integer"}}, required=("updated_count",)),
        read_only=False,
    ),
)

RESOURCE_TEMPLATES: tuple[types.ResourceTemplate, ...] = (
    types.ResourceTemplate(
        name="memory",
        title="A memory",
        uri_template=MEMORY_URI,
        description="One memory of this server's namespace by id, with its state, fact, validity and links.",
        mime_type="application/json",
    ),
    types.ResourceTemplate(
        name="fact-history",
        title="A fact's history",
        uri_template=FACT_URI,
        description="Every value a fact key (entity, attribute) has had, oldest first, with the change-log "
        "events: memories written with the key and plain-text ones the sidecar read as it or that replaced a "
        "version; the current one has current: true. Percent-encode the entity and the attribute.",
        mime_type="application/json",
    ),
    types.ResourceTemplate(
        name="beliefs",
        title="What the agent believes about an entity",
        uri_template=BELIEFS_URI,
        description="Every attribute's current value about an entity, keyed or read from prose, with when it "
        "became true, its source and confidence, open doubts and its history's URI. Percent-encode the entity. "
        "Add ?as_of=<RFC 3339 time, percent-encoded> for the values held true at that world time.",
        mime_type="application/json",
    ),
)
ENTITIES_RESOURCE = types.Resource(
    name="entities",
    title="Entities",
    uri=ENTITIES_URI,
    description=f"The entities of this server's namespace, most recently changed first (at most "
    f"{DEFAULT_ENTITY_LIMIT}), with their memory counts and beliefs URIs.",
    mime_type="application/json",
)

_VALIDATORS = {tool.name: jsonschema.Draft202012Validator(tool.input_schema) for tool in TOOLS}


def _check_arguments(tool: str, arguments: Mapping[str, Any]) -> None:
    """Raise ToolInputError for the first argument that breaks the tool's schema (its path as the field)."""
    errors = sorted(_VALIDATORS[tool].iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    error = errors[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    if error.validator == "required":
        # jsonschema reports a missing property at its parent; the caller needs the property's own name.
        missing = next(name for name in error.validator_value if name not in error.instance)
        raise ToolInputError(f"{path}.{missing}".lstrip("."), "required")
    raise ToolInputError(path or "arguments", error.message)


# ---- conversions --------------------------------------------------------------------------------


def memory_uri(memory_id: int) -> str:
    """The resource URI of a memory."""
    return f"memevo://memory/{memory_id}"


def fact_uri(entity: str, attribute: str) -> str:
    """The resource URI of a fact key's history (entity and attribute percent-encoded)."""
    return f"memevo://fact/{quote(entity, safe='')}/{quote(attribute, safe='')}"


def beliefs_uri(entity: str) -> str:
    """The resource URI of an entity's beliefs (the entity percent-encoded)."""
    return f"memevo://beliefs/{quote(entity, safe='')}"


def _time_arg(arguments: Mapping[str, Any], name: str) -> datetime | None:
    raw = arguments.get(name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ToolInputError(name, f"{raw!r} is not an RFC 3339 time, e.g. 2026-03-01T12:00:00Z") from None
    if value.utcoffset() is None:
        raise ToolInputError(name, f"{raw!r} has no UTC offset; add one, e.g. Z or +02:00")
    return value


def _default_kind(arguments: Mapping[str, Any]) -> str:
    """The kind of a ``remember`` call that gave none: ``strategy`` with a task signature, else ``fact``.

    Models leave optional arguments out, and with the wire's default (EPISODE) nothing they wrote could ever
    be replaced: an episode is an event, kept as it was, so "Ana now works at Canva." beside "Ana works at
    Shopify." left two current answers. Someone coming from mem0 or Zep expects the opposite: mem0's ``add``
    and Zep's graph have no kind to choose, and a later statement that contradicts an earlier one updates or
    invalidates it. So an omitted kind means a statement of fact, which perception may read as replacing an
    older one (reversible with Restore, and kept in the history); events stay episodes when asked for by name.
    A task signature only means something for a strategy, so it says which kind was meant.
    """
    return "strategy" if arguments.get("task_signature") else "fact"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _seconds(value: datetime | None) -> str | None:
    """A time for text meant to be read: to the second, in UTC."""
    return None if value is None else value.astimezone(timezone.utc).isoformat(timespec="seconds")


def _name(member: MemoryKind | MemoryState | MemorySource) -> str:
    return member.name.lower()


def memory_json(memory: Memory) -> JsonObject:
    """The JSON form of a memory in tool results and resources."""
    return {
        "id": memory.id,
        "kind": _name(memory.kind),
        "state": _name(memory.state),
        "content": memory.content,
        "entity": memory.entity,
        "fact": None if memory.fact is None else {"attribute": memory.fact.attribute, "value": memory.fact.value},
        "source": _name(memory.source),
        "confidence": round(memory.confidence, 4),
        "tags": list(memory.tags),
        "valid_from": _iso(memory.valid_from),
        "valid_to": _iso(memory.valid_to),
        "recorded_at": _iso(memory.recorded_at),
        "superseded_by": memory.superseded_by,
        "supersedes": list(memory.supersedes),
        "possibly_outdated_by": memory.possibly_outdated_by,
        "task_signature": memory.task_signature,
        "inferred": None
        if memory.inferred is None
        else {
            "entity": memory.inferred.entity,
            "attribute": memory.inferred.attribute,
            "value": memory.inferred.value,
            "confidence": round(memory.inferred.confidence, 4),
            "method": memory.inferred.method,
        },
    }


def _is_current(memory: Memory) -> bool:
    """Whether a version still holds: active or archived, not superseded, no end of validity."""
    return memory.state in CURRENT_STATES and memory.superseded_by is None and memory.valid_to is None


def _label(memory: Memory) -> str:
    """``#12 fact user:alice.contact_channel`` — what a line of text says before the content.

    A memory written without a fact that the sidecar read as one says so: ``#13 fact user:alice.city (read)``.
    """
    parts = [f"#{memory.id}", _name(memory.kind)]
    inferred = memory.inferred
    if memory.fact is not None:
        parts.append(f"{memory.entity}.{memory.fact.attribute}")
    elif inferred is not None and inferred.attribute:
        parts.append(f"{inferred.entity}.{inferred.attribute} (read)")
    elif memory.entity:
        parts.append(memory.entity)
    if memory.task_signature:
        parts.append(f"for {memory.task_signature}")
    return " ".join(parts)


def _history_json(result: HistoryResult) -> JsonObject:
    return {
        "versions": [memory_json(m) | {"current": _is_current(m)} for m in result.versions],
        "events": [
            {
                "sequence": e.sequence,
                "type": e.type.name.lower(),
                "memory_id": e.memory_id,
                "to_state": _name(e.to_state),
                "reason": e.reason,
                "recorded_at": _iso(e.recorded_at),
            }
            for e in result.events
        ],
    }


def _history_text(result: HistoryResult, subject: str) -> str:
    if not result.versions:
        return f"no history for {subject}"
    lines = [f"history of {subject}, oldest first:"]
    for m in result.versions:
        period = f"valid {_seconds(m.valid_from) or '?'} to {_seconds(m.valid_to) or 'now'}"
        link = f", superseded by #{m.superseded_by}" if m.superseded_by else ""
        if m.possibly_outdated_by:
            link += f", may be outdated by #{m.possibly_outdated_by}"
        current = "current, " if _is_current(m) else ""
        lines.append(f"- {_label(m)} [{current}{_name(m.state)}; {period}{link}]: {m.content}")
    for e in result.events:
        reason = f" ({e.reason})" if e.reason else ""
        lines.append(f"  event {e.sequence}: {e.type.name.lower()} #{e.memory_id}{reason}")
    return "\n".join(lines)


def _belief_json(belief: Belief) -> JsonObject:
    key = belief.history_key
    return {
        "attribute": belief.attribute,
        "value": belief.value,
        "read_from_text": belief.read_from_text,
        "memory": memory_json(belief.memory),
        "possibly_outdated_by": list(belief.possibly_outdated_by),
        "also_current": [memory_json(m) for m in belief.also_current],
        "version_count": belief.version_count,
        "history_uri": fact_uri(key.entity, key.attribute),
    }


def _beliefs_json(result: BeliefsResult, *, as_of: bool = False) -> JsonObject:
    """The structured beliefs; ``as_of`` (the call asked for an instant) adds the instant they are for."""
    document: JsonObject = {"entity": result.entity}
    if as_of:
        document["as_of"] = _iso(result.as_of)
    return document | {
        "beliefs": [_belief_json(b) for b in result.beliefs],
        "unattributed_count": result.unattributed_count,
        "last_changed_at": _iso(result.last_changed_at),
    }


def _beliefs_text(result: BeliefsResult, *, as_of: bool = False) -> str:
    when = f"as of {_seconds(result.as_of)}"
    if as_of and not result.beliefs:
        lines = [f"no beliefs held about {result.entity} {when}"]
    elif as_of:
        lines = [f"what was held true about {result.entity} {when}, by attribute:"]
    elif not result.beliefs:
        lines = [f"no current beliefs about {result.entity}"]
    else:
        lines = [f"what is believed about {result.entity} now, by attribute:"]
    for b in result.beliefs:
        m = b.memory
        how = f"read from: {m.content!r}" if b.read_from_text else "remembered as a fact"
        value = b.value or "(see the statement)"
        versions = f"; {b.version_count} versions" if b.version_count > 1 else ""
        lines.append(
            f"- {b.attribute} = {value} [#{m.id}, since {_seconds(m.valid_from) or '?'}; {how}; "
            f"{_name(m.source)}, confidence {m.confidence:.2f}{versions}]"
        )
        lines += [f"  may be outdated by #{i}" for i in b.possibly_outdated_by]
        for other in b.also_current:
            # An "as of" answer's records are as they are now: their doubts may have been raised later.
            doubt = f", may be outdated by #{other.possibly_outdated_by}" if other.possibly_outdated_by else ""
            doubt = "" if as_of else doubt
            lines.append(f"  also {'held' if as_of else 'current'}: #{other.id}{doubt}: {other.content}")
    if result.unattributed_count:
        which = "held then" if as_of else "current"
        lines.append(f"{result.unattributed_count} other {which} memories about it state no attribute (recall them)")
    return "\n".join(lines)


def _entity_json(listed: EntityList) -> JsonObject:
    return {
        "entities": [
            {
                "entity": e.entity,
                "memory_count": e.memory_count,
                "current_count": e.current_count,
                "belief_count": e.belief_count,
                "doubted_count": e.doubted_count,
                "last_changed_at": _iso(e.last_changed_at),
                "beliefs_uri": beliefs_uri(e.entity),
            }
            for e in listed.entities
        ],
        "total_count": listed.total_count,
    }


def _entities_text(listed: EntityList) -> str:
    if not listed.entities:
        return "no entities match"
    lines = [f"{len(listed.entities)} of {listed.total_count} entities, most recently changed first:"]
    for e in listed.entities:
        doubted = f", {e.doubted_count} doubted" if e.doubted_count else ""
        lines.append(
            f"- {e.entity}: {e.belief_count} beliefs, {e.current_count} current of {e.memory_count} memories"
            f"{doubted}; changed {_seconds(e.last_changed_at) or '?'}"
        )
    return "\n".join(lines)


# ---- the server ---------------------------------------------------------------------------------

ToolResult = tuple[str, JsonObject]
ToolHandler = Callable[[Mapping[str, Any]], Awaitable[ToolResult]]


class MemevoMcp:
    """The MCP tools and resources over one sidecar client, confined to one namespace."""

    def __init__(self, client: AsyncMemoryClient, *, namespace: str = "default") -> None:
        self._client = client
        self._namespace = namespace or "default"
        self._tools: Mapping[str, ToolHandler] = {
            "remember": self._remember,
            "recall": self._recall,
            "build_context": self._build_context,
            "history": self._history,
            "beliefs": self._beliefs,
            "forget": self._forget,
            "report_outcome": self._report_outcome,
        }

    @property
    def namespace(self) -> str:
        """The namespace every tool works in."""
        return self._namespace

    def server(self) -> Server[Any]:
        """A low-level MCP server whose handlers are this object's tools and resources."""
        return Server(
            "memevo",
            version=memevo.__version__,
            title="memevo memory",
            instructions=(
                f"Long-term memory of this agent (namespace {self._namespace!r}), governed by a memevo sidecar: "
                "it keeps only current facts current. recall or build_context before a task, remember what "
                "you learn (with entity and fact for facts that can change), report_outcome after the task; "
                "beliefs shows what you hold true about an entity now."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resource_templates=self._list_resource_templates,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )

    # --- MCP handlers ---

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.call(params.name, params.arguments or {})

    async def call(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Run one tool; every failure becomes a tool error result, never an exception."""
        handler = self._tools.get(name)
        if handler is None:
            return _tool_error(f"unknown tool {name!r}; the tools are {', '.join(self._tools)}", {"field": "name"})
        try:
            _check_arguments(name, arguments)
            text, structured = await handler(arguments)
        except ToolInputError as err:
            return _tool_error(f"{name}: {err.field}: {err.reason}", {"field": err.field, "reason": err.reason})
        except MemevoError as err:
            return _tool_error(f"{name}: {_describe(err)}", _error_json(err))
        except ValueError as err:
            # The client rejects some values itself (e.g. a vector's shape) before any call.
            return _tool_error(f"{name}: {err}", {"reason": str(err)})
        except Exception:
            log.exception("tool %s failed", name)
            return _tool_error(f"{name}: internal error in the MCP server (logged)", {"reason": "INTERNAL"})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=list(RESOURCE_TEMPLATES))

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        # Memories are many and change all the time: they are reached through the templates, and from the
        # entities, the one listing that stays small.
        return types.ListResourcesResult(resources=[ENTITIES_RESOURCE])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            document = await self.read(uri)
        except MemevoError as err:
            raise MCPError(types.INVALID_PARAMS, f"{uri}: {_describe(err)}", {"uri": uri}) from err
        except ToolInputError as err:
            raise MCPError(types.INVALID_PARAMS, f"{uri}: {err}", {"uri": uri}) from err
        text = json.dumps(document, ensure_ascii=False)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )

    async def read(self, uri: str) -> JsonObject:
        """The JSON document of a ``memevo://`` resource; ToolInputError or NotFoundError when there is none."""
        parts = urlsplit(uri)
        segments = [unquote(s) for s in parts.path.lstrip("/").split("/")] if parts.path else []
        if parts.scheme == "memevo" and parts.netloc == "memory" and len(segments) == 1:
            if not segments[0].isdigit() or int(segments[0]) < 1:
                raise ToolInputError("uri", f"memory id must be a positive integer, got {segments[0]!r}")
            return memory_json(await self._own_memory(int(segments[0])))
        if parts.scheme == "memevo" and parts.netloc == "fact" and len(segments) == 2 and all(segments):
            key = FactKey(entity=segments[0], attribute=segments[1], namespace=self._namespace)
            return _history_json(await self._client.history(key))
        if parts.scheme == "memevo" and parts.netloc == "beliefs" and len(segments) == 1 and segments[0]:
            query = dict(part.partition("=")[::2] for part in parts.query.split("&") if part)
            if set(query) - {"as_of"}:
                raise ToolInputError("uri", f"{parts.query!r}: the one query parameter is as_of")
            # unquote, not parse_qs: a '+' in a UTC offset stays a '+'.
            as_of = _time_arg({k: unquote(v) for k, v in query.items()}, "as_of")
            result = await self._client.beliefs(segments[0], namespace=self._namespace, as_of=as_of)
            return _beliefs_json(result, as_of=as_of is not None)
        if parts.scheme == "memevo" and uri.rstrip("/") == ENTITIES_URI:
            listed = await self._client.list_entities(self._namespace, limit=DEFAULT_ENTITY_LIMIT)
            return _entity_json(listed)
        raise ToolInputError(
            "uri", f"not a memevo resource; use {MEMORY_URI}, {FACT_URI}, {BELIEFS_URI} or {ENTITIES_URI}"
        )

    # --- namespace confinement ---

    async def _owned(self, ids: Iterable[int]) -> set[int]:
        """The ids among ``ids`` that are memories of this namespace."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()
        return {m.id for m in await self._client.get(wanted) if m.namespace == self._namespace}

    async def _own_memory(self, memory_id: int) -> Memory:
        found = await self._client.get([memory_id])
        if not found or found[0].namespace != self._namespace:
            raise NotFoundError(
                grpc.StatusCode.NOT_FOUND, f"memory {memory_id} not found in namespace {self._namespace!r}"
            )
        return found[0]

    # --- tools ---

    async def _remember(self, arguments: Mapping[str, Any]) -> ToolResult:
        fact = arguments.get("fact")
        if fact is not None and not arguments.get("entity"):
            raise ToolInputError("entity", "required with fact: the fact key is (entity, attribute)")
        result: WriteResult = await self._client.remember(
            arguments["content"],
            namespace=self._namespace,
            kind=KINDS[arguments.get("kind") or _default_kind(arguments)],
            entity=arguments.get("entity"),
            fact=None if fact is None else (fact["attribute"], fact["value"]),
            source=SOURCES[arguments.get("source", "agent_inference")],
            importance=arguments.get("importance"),
            tags=arguments.get("tags", ()),
            task_signature=arguments.get("task_signature"),
            valid_from=_time_arg(arguments, "valid_from"),
            request_id=arguments.get("request_id"),
        )
        outcome = result.outcome.name.lower()
        text = f"remembered #{result.id} ({outcome}"
        if result.affected_ids:
            verb = "replaced" if outcome == "superseded_previous" else "affected"
            text += f"; {verb} " + ", ".join(f"#{i}" for i in result.affected_ids)
        text += ")" + (" — a retry: nothing new was written" if result.replayed else "")
        return text, {
            "id": result.id,
            "outcome": outcome,
            "affected_ids": list(result.affected_ids),
            "replayed": result.replayed,
            "memory": memory_json(result.memory),
        }

    def _filters(self, arguments: Mapping[str, Any]) -> JsonObject:
        return {
            "namespace": self._namespace,
            "kinds": [KINDS[k] for k in arguments.get("kinds", ())],
            "entity": arguments.get("entity"),
            "tags": arguments.get("tags", ()),
            "valid_from_after": _time_arg(arguments, "valid_from_after"),
            "valid_from_before": _time_arg(arguments, "valid_from_before"),
            "as_of": _time_arg(arguments, "as_of"),
        }

    async def _recall(self, arguments: Mapping[str, Any]) -> ToolResult:
        result: RecallResult = await self._client.recall(
            arguments["query"],
            k=arguments.get("k", DEFAULT_RECALL_K),
            mode=MODES[arguments.get("mode", "current")],
            include_archived=arguments.get("include_archived", False),
            **self._filters(arguments),
        )
        lines = [f"{len(result)} memories (retrieval_id {result.retrieval_id}):"]
        lines += [f"{n}. {_label(r.memory)}: {r.memory.content} — {r.hint}" for n, r in enumerate(result, 1)]
        if not len(result):
            lines = [f"no memories match (retrieval_id {result.retrieval_id})"]
        memories = [
            memory_json(r.memory) | {"hint": r.hint, "score": round(r.score, 4), "similarity": round(r.similarity, 4)}
            for r in result
        ]
        return "\n".join(lines), {"retrieval_id": result.retrieval_id, "memories": memories}

    async def _build_context(self, arguments: Mapping[str, Any]) -> ToolResult:
        result: ContextResult = await self._client.build_context(
            arguments["query"],
            token_budget=arguments.get("token_budget"),
            language=arguments.get("language"),
            **self._filters(arguments),
        )
        text = (result.text or "(no memories for this task)") + f"\n\nretrieval_id: {result.retrieval_id}"
        items = [{"id": i.memory.id, "group": i.group, "hint": i.hint} for i in result.items]
        return text, {
            "retrieval_id": result.retrieval_id,
            "text": result.text,
            "tokens_used": result.tokens_used,
            "items": items,
        }

    async def _history(self, arguments: Mapping[str, Any]) -> ToolResult:
        memory_id = arguments.get("memory_id")
        entity, attribute = arguments.get("entity"), arguments.get("attribute")
        if memory_id is not None:
            if entity is not None or attribute is not None:
                raise ToolInputError("memory_id", "give memory_id, or entity and attribute, not both")
            await self._own_memory(memory_id)
            result = await self._client.history(memory_id)
            subject = f"memory #{memory_id}"
        elif entity is not None and attribute is not None:
            result = await self._client.history(FactKey(entity=entity, attribute=attribute, namespace=self._namespace))
            subject = f"{entity}.{attribute}"
        else:
            field = "attribute" if entity is not None else "entity" if attribute is not None else "memory_id"
            raise ToolInputError(field, "required: give memory_id, or entity and attribute")
        return _history_text(result, subject), _history_json(result)

    async def _beliefs(self, arguments: Mapping[str, Any]) -> ToolResult:
        entity = arguments.get("entity")
        if entity is not None:
            if "query" in arguments or "limit" in arguments:
                field = "query" if "query" in arguments else "limit"
                raise ToolInputError(field, "lists entities: leave entity out, or leave this out")
            as_of = _time_arg(arguments, "as_of")
            result = await self._client.beliefs(entity, namespace=self._namespace, as_of=as_of)
            return _beliefs_text(result, as_of=as_of is not None), _beliefs_json(result, as_of=as_of is not None)
        if "as_of" in arguments:
            raise ToolInputError("as_of", "needs entity: the entities list is of now")
        listed = await self._client.list_entities(
            self._namespace, query=arguments.get("query", ""), limit=arguments.get("limit", DEFAULT_ENTITY_LIMIT)
        )
        return _entities_text(listed), {"entity": None} | _entity_json(listed)

    async def _forget(self, arguments: Mapping[str, Any]) -> ToolResult:
        ids: list[int] = list(arguments["ids"])
        owned = await self._owned(ids)
        outside = [i for i in ids if i not in owned]
        forgotten: list[int] = []
        missing = outside
        if owned:
            result = await self._client.forget(
                [i for i in ids if i in owned],
                reason=arguments.get("reason", ""),
                keep_history=arguments.get("keep_history", False),
            )
            forgotten, missing = list(result.forgotten_ids), sorted({*outside, *result.missing_ids})
        verb = "kept as history" if arguments.get("keep_history") else "forgot"
        text = f"{verb}: " + (", ".join(f"#{i}" for i in forgotten) or "nothing")
        if missing:
            text += "; not found: " + ", ".join(f"#{i}" for i in missing)
        return text, {"forgotten_ids": forgotten, "missing_ids": missing}

    async def _report_outcome(self, arguments: Mapping[str, Any]) -> ToolResult:
        used: list[int] = list(arguments.get("used_memory_ids", ()))
        if used and (outside := [i for i in used if i not in await self._owned(used)]):
            raise ToolInputError("used_memory_ids", f"ids {outside} are not memories of this namespace")
        # The sidecar confines the retrieval too: retrieval ids appear in tool text, so a model may pass one
        # another namespace's server showed it.
        updated = await self._client.report_outcome(
            arguments["retrieval_id"],
            OUTCOMES[arguments["outcome"]],
            used_memory_ids=used,
            reward=arguments.get("reward"),
            note=arguments.get("note", ""),
            namespace=self._namespace,
        )
        return f"recorded {arguments['outcome']} for {updated} memories", {"updated_count": updated}


def _describe(err: MemevoError) -> str:
    """``INVALID_ARGUMENT: memory.entity: required ...`` — the code, each field and reason, else the message."""
    if err.field_violations:
        return f"{err.code.name}: " + "; ".join(f"{f}: {d}" for f, d in err.field_violations)
    text = f"{err.code.name}: {err.details}" if err.details else err.code.name
    if err.code == grpc.StatusCode.UNAVAILABLE:
        text += " (is the memevo sidecar running at the address this server was given?)"
    return text


def _error_json(err: MemevoError) -> JsonObject:
    return {
        "code": err.code.name,
        "fields": [{"field": f, "reason": d} for f, d in err.field_violations],
        "reason": err.reason,
        "retryable": err.retryable,
    }


def _tool_error(text: str, detail: JsonObject) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content={"error": detail}, is_error=True
    )


# ---- running it ---------------------------------------------------------------------------------


def _check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"--http-host {host}: the MCP server has no authentication of its own; listen on loopback")


class _AnswerUnreadable:
    """The stdio read stream, minus the lines the SDK could not read, each answered with a JSON-RPC error.

    The SDK's stdio reader passes such a line on as an exception, and its server drops it without a reply: a
    client that sent a lone surrogate, JSON nested 5,000 deep or plain garbage waited for ever. JSON-RPC 2.0
    answers them with id null: -32700 when the line is not JSON, -32600 when it is JSON but not a message.
    """

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        # The SDK runs each request in the context its sender captured, read from here.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item: SessionMessage | Exception = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(SessionMessage(_unreadable_reply(item)))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _AnswerUnreadable:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _AnswerUnreadable:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _unreadable_reply(error: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line that is not a JSON-RPC message; its text never echoes the line."""
    problems = error.errors() if isinstance(error, pydantic.ValidationError) else []
    if problems and problems[0]["type"] == "json_invalid":
        # pydantic's message: "Invalid JSON: recursion limit exceeded at line 1 column 250".
        detail = str(problems[0]["msg"]).removeprefix("Invalid JSON: ")
        data = types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: {detail}")
    else:
        data = types.ErrorData(
            code=types.INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 request, notification or response"
        )
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=data)


async def serve(config: McpConfig) -> None:
    """Serve MCP until stdin closes (stdio) or the process is interrupted (http)."""
    client = AsyncMemoryClient(config.target, token=config.token, timeout_s=config.timeout_s)
    server = MemevoMcp(client, namespace=config.namespace).server()
    try:
        if config.transport == "stdio":
            async with stdio_server() as (read_stream, write_stream):
                answered = _AnswerUnreadable(read_stream, write_stream)
                await server.run(answered, write_stream, server.create_initialization_options())
        else:
            _check_loopback(config.http_host)
            import uvicorn  # a dependency of the mcp SDK, needed only by this transport

            app = server.streamable_http_app(streamable_http_path=config.http_path, host=config.http_host)
            uvicorn_config = uvicorn.Config(app, host=config.http_host, port=config.http_port, log_level="warning")
            await uvicorn.Server(uvicorn_config).serve()
    finally:
        await client.close()


def run(config: McpConfig) -> None:
    """Run :func:`serve` on a new event loop (the ``memevo mcp`` command)."""
    if config.transport == "http":
        _check_loopback(config.http_host)
    log.info("memevo mcp: %s transport, sidecar %s, namespace %s", config.transport, config.target, config.namespace)
    anyio.run(serve, config)


__all__ = [
    "BELIEFS_URI",
    "ENTITIES_URI",
    "FACT_URI",
    "MEMORY_URI",
    "RESOURCE_TEMPLATES",
    "TOOLS",
    "McpConfig",
    "MemevoMcp",
    "beliefs_uri",
    "fact_uri",
    "memory_uri",
    "run",
    "serve",
]
