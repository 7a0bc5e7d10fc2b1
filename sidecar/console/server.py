"""The console's HTTP server: static pages and a JSON API over :class:`ConsoleSource`, on loopback only.

Safety: the server binds loopback addresses only; it answers only requests whose Host header names a
loopback host (a web page elsewhere cannot reach it through DNS rebinding); writes are POSTs with a JSON
body from the console's own origin; and every read or write is a gRPC call made with the browser's own
bearer token, so the sidecar's token rules apply unchanged (no token, or a token scoped to other
namespaces, is refused by the sidecar and the page shows the refusal).

A sidecar without tokens would let any local user read every memory through the console (its 0600 unix
socket refuses them; a loopback port does not), so such a console has a secret of its own, made at start
(``secret``): the printed URL carries it as ``?token=``, the console trades it for an HttpOnly, SameSite=Strict
cookie and a redirect to the same page without it, and every ``/api`` call needs the cookie or
``Authorization: Bearer <secret>``. The pages themselves hold no data and load without it.
"""

from __future__ import annotations

import hmac
import itertools
import json
import logging
import re
import threading
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import Message

from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2, review_pb2

from ..errors import FailedPrecondition
from ..service.auth import is_loopback
from .digest import ChangeDigest, reason_class
from .source import ConsoleSource, SourceError

log = logging.getLogger(__name__)

PAGES = ("/", "/beliefs", "/overview", "/search", "/life", "/review", "/live")
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)
VALUE_SAMPLE_PER_KIND = 400
"""Memories per kind whose values the overview's histograms are drawn from (a uniform sample)."""
VALUE_BINS = 24
GET_CHUNK = 1000
LIFE_VERSIONS = 200
"""Newest versions of a fact key the life page shows, with their events: a key rewritten thousands of times
would otherwise cost seconds of JSON (2,013 versions: ~450 ms, nearly all of it MessageToDict)."""
"""Ids per Get call (the sidecar's default max_k)."""
ENTITIES_SHOWN = 200
"""Entities the first page lists for one search: a page a person scans; a narrower search finds the rest."""
LIVE_HEARTBEAT_S = 5.0
"""A live stream with nothing to send writes an empty line this often, to notice a closed tab."""
LIVE_BACKLOG = 50
"""Events before the current one a live page starts with."""
RATE_SAMPLE_S = 5.0
RATE_SAMPLES = 120
WRITE_METHODS = ("Remember", "RememberBatch", "RememberStream")
READ_METHODS = ("Recall", "BuildContext")
MAX_BODY_BYTES = 64 * 1024
MAX_K = 2**31 - 1
"""Largest k the console passes on (RecallRequest.k is a uint32); the sidecar's own max_k refuses less."""
KIND_NAMES = [
    name.removeprefix("MEMORY_KIND_")
    for name in memory_pb2.MemoryKind.DESCRIPTOR.values_by_name
    if not name.endswith("_UNSPECIFIED")
]
EVENT_TYPE_NAMES = [
    name.removeprefix("CHANGE_EVENT_TYPE_")
    for name in events_pb2.ChangeEventType.DESCRIPTOR.values_by_name
    if not name.endswith("_UNSPECIFIED")
]
NO_TEXT_SEARCH = (
    "search needs a text embedder, and this sidecar runs with --embedder none (it stores the vectors its "
    "clients send): the console has no vector for a query typed here. Find memories by id or fact key on the "
    "Life page, or follow the Live page; to search by text, serve with an embedder (--embedder local)"
)
SECRET_PARAM = "token"
"""Query parameter of the printed URL that carries the console's secret."""
SECRET_MISSING = (
    "this console serves a sidecar without tokens and needs its own: open the URL it printed at start "
    "(http://HOST:PORT/?token=...), or send 'Authorization: Bearer <that token>'"
)
SECRET_WRONG = "wrong console token: the console makes a new one each time it starts; open the URL it printed this time"
ACTOR = "console"
"""Who the change log says made a correction: each reason starts with it ("forget: console: ...")."""
MAX_NOTE_CHARS = 1024
MAX_VALUE_CHARS = 1024
CORRECTIONS = ("/api/forget", "/api/restore", "/api/doubt", "/api/correct")
_CALLS_LINE = re.compile(r'^memevo_rpc_calls_total\{[^}]*method="(\w+)"[^}]*\}\s+([0-9.e+]+)', re.M)


def to_json(message: Message) -> dict[str, Any]:
    """A protobuf message as the pages read it: proto field names, enums by name, defaults included."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def scrape_calls(url: str) -> Callable[[], dict[str, int]]:
    """Call counts per method read from a sidecar's Prometheus endpoint (``--metrics-listen``)."""

    def read() -> dict[str, int]:
        with urllib.request.urlopen(url, timeout=2.0) as response:  # a loopback URL the user gave
            text = response.read().decode()
        counts: dict[str, int] = {}
        for method, value in _CALLS_LINE.findall(text):
            counts[method] = counts.get(method, 0) + int(float(value))
        return counts

    return read


class RateSampler:
    """Samples cumulative call counts every few seconds; rates per minute come from their differences."""

    def __init__(self, read: Callable[[], dict[str, int]]) -> None:
        self._read = read
        self.samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=RATE_SAMPLES)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memevo-console-rates", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            try:
                self.samples.append((time.time(), self._read()))
            except Exception as exc:  # a scrape that failed once is tried again at the next sample
                log.debug("console: reading call counts failed: %s", exc)
            if self._stop.wait(RATE_SAMPLE_S):
                return

    def rates(self) -> dict[str, Any]:
        """Writes and recalls per minute between consecutive samples."""
        samples = list(self.samples)
        times: list[float] = []
        writes: list[float] = []
        reads: list[float] = []
        for (t0, a), (t1, b) in itertools.pairwise(samples):
            minutes = max(t1 - t0, 1e-6) / 60.0
            times.append(t1)
            writes.append(sum(b.get(m, 0) - a.get(m, 0) for m in WRITE_METHODS) / minutes)
            reads.append(sum(b.get(m, 0) - a.get(m, 0) for m in READ_METHODS) / minutes)
        return {"times": times, "writes_per_min": writes, "recalls_per_min": reads}


def _timestamp(text: str) -> Any:
    """An ISO date-time (a datetime-local field's value, read as UTC) as a protobuf Timestamp."""
    from google.protobuf.timestamp_pb2 import Timestamp

    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def _is_current(memory: memory_pb2.Memory) -> bool:
    """Whether a version of a fact still holds: active or archived, not superseded, no end of validity."""
    holds = memory.state in (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED)
    return holds and not memory.superseded_by and not memory.HasField("valid_to")


def _whole(text: str, below: int) -> int | None:
    """``text`` as a whole number in [0, below), else None (str.isdigit also admits '²', which int refuses)."""
    return int(text) if re.fullmatch(r"[0-9]{1,20}", text) and int(text) < below else None


def _one_kind(name: str) -> memory_pb2.MemoryKind.ValueType:
    """A MemoryKind from its name, short (FACT) or full (MEMORY_KIND_FACT); ConsoleError 400 otherwise."""
    short = name.strip().upper().removeprefix("MEMORY_KIND_")
    if short not in KIND_NAMES:
        raise ConsoleError(400, f"kind: {name!r} is not a memory kind; one of {', '.join(KIND_NAMES)}")
    return memory_pb2.MemoryKind.Value(f"MEMORY_KIND_{short}")


def _kinds(query: dict[str, list[str]]) -> list[memory_pb2.MemoryKind.ValueType]:
    return [_one_kind(name) for name in query.get("kind", []) if name.strip()]


def _body_id(body: dict[str, Any], name: str) -> int:
    """A memory id from a JSON body (a number or its digits); ConsoleError 400 naming ``name`` otherwise."""
    raw = body.get(name)
    memory_id = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if isinstance(raw, str):
        memory_id = _whole(raw.strip(), 2**64)
    if memory_id is None or not 0 < memory_id < 2**64:
        raise ConsoleError(400, f"{name}: {raw!r} is not a memory id; a memory id is a whole number from 1, e.g. 42")
    return memory_id


def _body_text(body: dict[str, Any], name: str, limit: int, *, required: bool = False) -> str:
    raw = body.get(name, "")
    if not isinstance(raw, str):
        raise ConsoleError(400, f"{name}: expected text, got {type(raw).__name__}")
    text = raw.strip()
    if required and not text:
        raise ConsoleError(400, f"{name}: required")
    if len(text) > limit:
        raise ConsoleError(400, f"{name}: at most {limit} characters ({len(text)} given)")
    return text


def _said(note: str) -> str:
    return f"{ACTOR}: {note}" if note else ACTOR


class ConsoleError(Exception):
    """A request the console itself refuses (bad parameters), as an HTTP status and message."""

    def __init__(self, status: int, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class Console:
    """The console's pages and API over one sidecar. ``start`` it; ``stop`` it before the sidecar."""

    def __init__(
        self,
        address: str,
        source: ConsoleSource,
        *,
        token: str | None = None,
        calls: Callable[[], dict[str, int]] | None = None,
        secret: str | None = None,
        text_search: bool | None = None,
    ) -> None:
        """``token`` is the change-log digest's own; ``secret`` (for a sidecar without tokens) gates every
        ``/api`` call; ``text_search`` says whether the sidecar embeds text (None: ask it on each search page).
        """
        if not is_loopback(address):
            raise FailedPrecondition(
                f"console address {address}: the console listens on loopback only (127.0.0.1:PORT, [::1]:PORT "
                "or localhost:PORT)",
                reason="LISTEN_REFUSED",
            )
        host, _, port_text = address.rpartition(":")
        try:
            port = int(port_text)
        except ValueError as exc:
            raise FailedPrecondition(f"console address {address}: expected HOST:PORT", reason="LISTEN_REFUSED") from exc
        self.source = source
        self.secret = secret
        self.text_search = text_search
        self.digest = ChangeDigest(source, token)
        self.rates = RateSampler(calls) if calls is not None else None
        console = self

        class Handler(_Handler):
            app = console

        bind = host.strip("[]") or "127.0.0.1"
        if bind == "localhost":
            bind = "127.0.0.1"
        server_class = _V6Server if ":" in bind else ThreadingHTTPServer
        try:
            self._server = server_class((bind, port), Handler)
        except OSError as exc:
            raise FailedPrecondition(f"console address {address}: {exc}", reason="LISTEN_FAILED") from exc
        self._server.daemon_threads = True
        bound_host, bound_port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self.address = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="memevo-console", daemon=True)

    @property
    def url(self) -> str:
        """Where to open the console: with its secret, when it has one, so show it to the console's user only."""
        base = f"http://{self.address}/"
        return f"{base}?{urlencode({SECRET_PARAM: self.secret})}" if self.secret else base

    @property
    def cookie_name(self) -> str:
        # Browsers keep cookies per host, not per port: two consoles on one host must not overwrite each other's.
        return f"memevo_console_{self.address.rsplit(':', 1)[1]}"

    def admits(self, offered: str) -> bool:
        """Whether ``offered`` is this console's secret (always, when it has none)."""
        if self.secret is None:
            return True
        # Compared in constant time: an early exit would tell a guesser how much of its prefix was right.
        return hmac.compare_digest(offered.encode("utf-8", "replace"), self.secret.encode())

    def start(self) -> None:
        self.digest.start()
        if self.rates is not None:
            self.rates.start()
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self.rates is not None:
            self.rates.stop()
        self.digest.stop()
        self.source.close()

    # ---- the API ------------------------------------------------------------------------------

    def overview(self, token: str | None) -> dict[str, Any]:
        stats = self.source.stats(token)  # sidecar-wide: a '*' token (or none when tokens are off)
        policy = self.source.policy(token).policy
        return {
            "stats": to_json(stats),
            "log": self.digest.progress(),
            "series": self.digest.series(),
            "values": self._values(token, policy),
            "rates": self.rates.rates() if self.rates is not None else None,
        }

    def _values(self, token: str | None, policy: Any) -> dict[str, Any]:
        thresholds: dict[int, tuple[float, float]] = {}
        default = (0.2, 0.05)
        for entry in policy.kinds:
            pair = (entry.archive_below, entry.evict_below)
            if entry.kind == memory_pb2.MEMORY_KIND_UNSPECIFIED:
                default = pair
            else:
                thresholds[entry.kind] = pair
        out: dict[str, Any] = {}
        for kind, ids in self.digest.sample(VALUE_SAMPLE_PER_KIND).items():
            values: list[float] = []
            id_list = ids.tolist()
            for start in range(0, len(id_list), GET_CHUNK):
                found = self.source.get(id_list[start : start + GET_CHUNK], token)
                values += [m.scores.value for m in found.memories]
            if not values:
                continue
            archive, evict = thresholds.get(kind, default)
            array = np.asarray(values, dtype=np.float64)
            low = min(float(array.min()), evict, 0.0)
            high = max(float(array.max()), archive) + 1e-9
            counts, edges = np.histogram(array, bins=VALUE_BINS, range=(low, high))
            out[memory_pb2.MemoryKind.Name(kind)] = {  # type: ignore[arg-type]
                "edges": edges.tolist(),
                "counts": counts.tolist(),
                "sampled": len(values),
                "archive_below": archive,
                "evict_below": evict,
            }
        return out

    def about(self, token: str | None) -> dict[str, Any]:
        """What the pages adapt to: whether the sidecar can search by text (None when the caller may not ask)."""
        if self.text_search is not None:
            return {"text_search": self.text_search}
        try:
            embedder = self.source.stats(token).embedder
        except SourceError:
            return {"text_search": None}  # GetStats needs a '*' token; the search itself still says why it fails
        return {"text_search": embedder != "none"}

    def search(self, query: dict[str, list[str]], token: str | None) -> dict[str, Any]:
        def one(name: str, default: str = "") -> str:
            return query.get(name, [default])[0].strip()

        k_text = one("k") or "10"
        k = _whole(k_text, MAX_K + 1)
        if not k:
            raise ConsoleError(400, f"k: {k_text!r} is not a number of results; a whole number from 1, e.g. k=10")
        mode = one("mode") or "current"
        if mode not in ("current", "history"):
            raise ConsoleError(400, f"mode: {mode!r}; current or history")
        # A person looking is not the agent using: the search must not raise what it shows in the agent's ranking.
        request = memory_service_pb2.RecallRequest(query=one("q"), k=k, peek=True)
        request.filter.namespace = one("ns", "default") or "default"
        request.filter.entity = one("entity")
        request.filter.tags.extend(t for t in one("tags").split(",") if t.strip())
        request.filter.kinds.extend(_kinds(query))
        history = mode == "history"
        request.mode = memory_service_pb2.RECALL_MODE_HISTORY if history else memory_service_pb2.RECALL_MODE_CURRENT
        request.include_archived = one("archived") in ("1", "true", "on")
        if one("as_of"):
            try:
                request.as_of.CopyFrom(_timestamp(one("as_of")))
            except ValueError as exc:
                raise ConsoleError(400, f"as_of: {exc}") from exc
        if self.text_search is False and request.query:
            raise ConsoleError(409, NO_TEXT_SEARCH, code="NO_EMBEDDER")
        try:
            response = self.source.recall(request, token)
        except SourceError as error:
            # The console never sends a vector, so a sidecar asking for one has no embedder.
            if error.code == "INVALID_ARGUMENT" and "query_vector: " in error.message:
                raise ConsoleError(409, NO_TEXT_SEARCH, code="NO_EMBEDDER") from error
            raise
        return to_json(response)

    def life(self, query: dict[str, list[str]], token: str | None) -> dict[str, Any]:
        request = memory_service_pb2.HistoryRequest()
        if query.get("id", [""])[0]:
            text = query["id"][0].strip()
            memory_id = _whole(text, 2**64)
            if memory_id is None:
                raise ConsoleError(400, f"id: {text!r} is not a memory id; a memory id is a whole number, e.g. id=42")
            request.memory_id = memory_id
        else:
            request.fact_key.namespace = query.get("ns", ["default"])[0] or "default"
            request.fact_key.entity = query.get("entity", [""])[0]
            request.fact_key.attribute = query.get("attribute", [""])[0]
        response = self.source.history(request, token)
        versions = response.versions[-LIFE_VERSIONS:]
        shown = {v.id for v in versions}
        raws = [e for e in response.events if e.memory_id in shown]
        events = []
        for raw in raws:
            event = to_json(raw)
            event["reason_class"] = reason_class(raw.type, raw.reason)
            events.append(event)
        return {
            "versions": [dict(to_json(v), current=_is_current(v)) for v in versions],
            "events": events,
            "versions_total": len(response.versions),
            "events_total": len(response.events),
        }

    def entities(self, query: dict[str, list[str]], token: str | None) -> dict[str, Any]:
        request = memory_service_pb2.ListEntitiesRequest(
            namespace=query.get("ns", ["default"])[0].strip() or "default",
            query=query.get("q", [""])[0].strip(),
            limit=ENTITIES_SHOWN,
        )
        return to_json(self.source.entities(request, token))

    def beliefs(self, query: dict[str, list[str]], token: str | None) -> dict[str, Any]:
        entity = query.get("entity", [""])[0].strip()
        if not entity:
            raise ConsoleError(400, "entity: required, e.g. entity=user:alice")
        request = memory_service_pb2.BeliefsRequest(
            namespace=query.get("ns", ["default"])[0].strip() or "default", entity=entity
        )
        as_of = query.get("as_of", [""])[0].strip()
        if as_of:
            try:
                request.as_of.CopyFrom(_timestamp(as_of))
            except ValueError as exc:
                raise ConsoleError(400, f"as_of: {exc}") from exc
        return to_json(self.source.beliefs(request, token))

    def review(self, token: str | None) -> dict[str, Any]:
        proposals = self.source.open_proposals(token)
        decided = [dict(to_json(e), reason_class=reason_class(e.type, e.reason)) for e in self.digest.decisions]
        return {"proposals": [to_json(p) for p in proposals], "decisions": decided[::-1]}

    def decide(self, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        verdicts = {"accept": review_pb2.VERDICT_ACCEPT, "reject": review_pb2.VERDICT_REJECT}
        verdict = verdicts.get(str(body.get("verdict", "")))
        proposal_id = str(body.get("proposal_id", ""))
        if verdict is None or not proposal_id:
            raise ConsoleError(400, "expected {proposal_id, verdict: accept|reject, note}")
        decision = review_pb2.Decision(proposal_id=proposal_id, verdict=verdict, note=str(body.get("note", ""))[:4096])
        settled = self.source.decide(decision, token, reviewer="console")
        return {"proposal_id": proposal_id, "settled": settled}

    # ---- corrections: each one RPC made with the browser's token, its reason naming the console ----------

    def correction(self, path: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        """Apply one correction; the answer holds the memories as they are now and the change-log events it wrote.

        A request id of the console's own marks the events (so the page can show exactly what the call recorded)
        and makes a resent POST harmless: the sidecar replays the first answer.
        """
        request_id = f"{ACTOR}-{uuid.uuid4().hex}"
        memory_id = _body_id(body, "id")
        note = _body_text(body, "note", MAX_NOTE_CHARS)
        if path == "/api/forget":
            done = self._forget(memory_id, note, request_id, token)
        elif path == "/api/restore":
            restored = self.source.restore(
                memory_service_pb2.RestoreRequest(memory_id=memory_id, reason=_said(note), request_id=request_id),
                token,
            )
            done = {"action": "restore", "memories": [restored.memory]}
        elif path == "/api/doubt":
            done = self._doubt(memory_id, body, note, request_id, token)
        else:
            done = self._correct(memory_id, body, note, request_id, token)
        memories = done.pop("memories")
        lineage = self.source.history(memory_service_pb2.HistoryRequest(memory_id=memory_id), token)
        # A Review decision carries no request id: its events are the lineage's newer ones that name the console.
        after = done.pop("after_sequence", None)
        events = [
            e
            for e in lineage.events
            if e.request_id == request_id or (after is not None and e.sequence > after and ACTOR in e.reason)
        ]
        return dict(
            done,
            memories=[dict(to_json(m), current=_is_current(m)) for m in memories],
            events=[dict(to_json(e), reason_class=reason_class(e.type, e.reason)) for e in events],
        )

    def _forget(self, memory_id: int, note: str, request_id: str, token: str | None) -> dict[str, Any]:
        # Kept as OBSOLETE history: a person's "this is wrong" must stay auditable and can be restored by id.
        answer = self.source.forget(
            memory_service_pb2.ForgetRequest(
                ids=[memory_id], reason=_said(note), keep_history=True, request_id=request_id
            ),
            token,
        )
        if not answer.forgotten_ids:
            raise ConsoleError(409, f"id: memory {memory_id} does not exist or is already retired (OBSOLETE)")
        return {"action": "forget", "memories": list(self.source.get([memory_id], token).memories)}

    def _doubt(
        self, memory_id: int, body: dict[str, Any], note: str, request_id: str, token: str | None
    ) -> dict[str, Any]:
        verdict = body.get("verdict")
        if verdict not in ("accept", "reject"):
            raise ConsoleError(400, f"verdict: {verdict!r}; accept (the newer replaces it) or reject (both hold)")
        newer = _body_id(body, "by")
        (held,) = self.source.get([memory_id], token).memories or [None]
        if held is None or held.possibly_outdated_by != newer:
            doubt = f"is doubted by memory {held.possibly_outdated_by}" if held and held.possibly_outdated_by else ""
            raise ConsoleError(
                409, f"by: memory {memory_id} {doubt or 'has no open doubt'}, not by memory {newer}; reload the page"
            )
        proposal = self._open_supersession(memory_id, newer, token)
        if proposal is not None:
            # Settled through the queue, so that it leaves it and the agent's reviewer is told; the change log
            # then reads "review (reviewer console: <note>)" or "not replaced by memory N (reviewer console: ...)".
            decision = review_pb2.Decision(
                proposal_id=proposal.id,
                verdict=review_pb2.VERDICT_ACCEPT if verdict == "accept" else review_pb2.VERDICT_REJECT,
                note=note,
            )
            lineage = self.source.history(memory_service_pb2.HistoryRequest(memory_id=memory_id), token)
            after = max((e.sequence for e in lineage.events), default=0)
            if self.source.decide(decision, token, reviewer=ACTOR):
                found = self.source.get([memory_id, newer], token).memories
                return {"action": verdict, "memories": list(found), "proposal_id": proposal.id, "after_sequence": after}
        if verdict == "accept":
            answer = self.source.supersede(
                memory_service_pb2.SupersedeRequest(
                    old_id=memory_id, new_id=newer, reason=_said(note), request_id=request_id
                ),
                token,
            )
            return {"action": "accept", "memories": [answer.old_memory, answer.new_memory]}
        restored = self.source.restore(
            memory_service_pb2.RestoreRequest(memory_id=memory_id, reason=_said(note), request_id=request_id), token
        )
        return {"action": "reject", "memories": [restored.memory]}

    def _open_supersession(self, older: int, newer: int, token: str | None) -> review_pb2.Proposal | None:
        """The open Review proposal asking whether ``newer`` replaces ``older``, if any and if the token may see it."""
        try:
            proposals = self.source.open_proposals(token)
        except SourceError:  # the queue needs a '*' token; a namespace's token still corrects through the RPCs
            return None
        for proposal in proposals:
            if proposal.kind == review_pb2.PROPOSAL_KIND_SUPERSEDE and [m.id for m in proposal.memories] == [
                older,
                newer,
            ]:
                return proposal
        return None

    def _correct(
        self, memory_id: int, body: dict[str, Any], note: str, request_id: str, token: str | None
    ) -> dict[str, Any]:
        value = _body_text(body, "value", MAX_VALUE_CHARS, required=True)
        (old,) = self.source.get([memory_id], token).memories or [None]
        if old is None:
            raise ConsoleError(404, f"id: memory {memory_id} does not exist")
        attribute = old.fact.attribute or old.inferred.attribute
        entity = old.entity or old.inferred.entity
        if not attribute or not entity:
            raise ConsoleError(
                400, f"id: memory {memory_id} states no attribute of an entity, so it has no value to correct"
            )
        current = old.fact.value if old.fact.attribute else old.inferred.value
        if value == current:
            raise ConsoleError(400, f"value: {value!r} is already the current value")
        # Keyed, so that the fact key holds the person's value from now on and History lists it as a version.
        statement = memory_pb2.MemoryInput(
            content=f"{entity} {attribute}: {value}",
            namespace=old.namespace,
            kind=old.kind,
            entity=entity,
            fact=memory_pb2.Fact(attribute=attribute, value=value),
            source=memory_pb2.MEMORY_SOURCE_USER_STATEMENT,
            metadata={"written_by": ACTOR},
        )
        answer = self.source.supersede(
            memory_service_pb2.SupersedeRequest(
                old_id=memory_id,
                new_memory=statement,
                reason=_said(note or f"corrected to {value!r}"),
                request_id=request_id,
            ),
            token,
        )
        return {"action": "correct", "memories": [answer.old_memory, answer.new_memory]}


class _V6Server(ThreadingHTTPServer):
    import socket

    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    app: Console
    server_version = "memevo-console"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("console: " + format, *args)

    # ---- checks -----------------------------------------------------------------------------

    def _host_allowed(self) -> bool:
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return bool(host) and is_loopback(f"{name}:0")

    def _bearer(self) -> str | None:
        value = self.headers.get("Authorization") or ""
        return value[len("Bearer ") :].strip() or None if value.startswith("Bearer ") else None

    def _token(self) -> str | None:
        """The token to call the sidecar with: the browser's, unless that is the console's own secret."""
        bearer = self._bearer()
        return None if bearer is None or (self.app.secret and self.app.admits(bearer)) else bearer

    def _cookie(self) -> str | None:
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.app.cookie_name:
                return value
        return None

    def _admitted(self) -> bool:
        """Whether the request carries the console's secret (cookie or bearer); answers 401/403 when it does not."""
        if self.app.secret is None:
            return True
        offered = [t for t in (self._cookie(), self._bearer()) if t]
        if any(self.app.admits(t) for t in offered):
            return True
        if offered:
            self._error(403, SECRET_WRONG, "CONSOLE_TOKEN_WRONG")
        else:
            self._error(401, SECRET_MISSING, "CONSOLE_TOKEN_MISSING")
        return False

    def _take_secret(self, path: str, query: dict[str, list[str]]) -> None:
        """The printed URL's ``?token=``: a cookie and a redirect to the same page without it, or 403."""
        if not self.app.admits(query[SECRET_PARAM][0]):
            self._error(403, SECRET_WRONG, "CONSOLE_TOKEN_WRONG")
            return
        rest = [(name, value) for name, values in query.items() if name != SECRET_PARAM for value in values]
        # Only a path of ours goes into Location: "//elsewhere" would be another host.
        location = (path if path in PAGES else "/") + (f"?{urlencode(rest)}" if rest else "")
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Set-Cookie", f"{self.app.cookie_name}={self.app.secret}; Path=/; HttpOnly; SameSite=Strict")
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        self.end_headers()

    # ---- answers ----------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes, content_type: str, *, cache: bool = False, allow: str | None = None
    ) -> None:
        self.send_response(status)
        if allow is not None:
            self.send_header("Allow", allow)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _error(self, status: int, message: str, code: str = "") -> None:
        self._json(status, {"error": message, "code": code or HTTPStatus(status).phrase})

    def _static(self, name: str) -> None:
        suffix = name[name.rfind(".") :]
        try:
            body = resources.files("memevo.sidecar.console").joinpath("static", name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            self._error(404, f"no such file: {name}")
            return
        self._send(200, body, STATIC_TYPES.get(suffix, "application/octet-stream"), cache=suffix != ".html")

    def do_GET(self) -> None:
        if not self._host_allowed():
            self._error(403, "the console answers only requests addressed to a loopback host")
            return
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        if self.app.secret is not None and query.get(SECRET_PARAM, [""])[0]:
            self._take_secret(path, query)
            return
        if path in PAGES:
            self._static("index.html")
            return
        if path.startswith("/static/") and re.fullmatch(r"/static/[\w.-]+", path):
            self._static(path.removeprefix("/static/"))
            return
        if not self._admitted():
            return
        if path == "/api/live":
            self._live(query)
            return
        routes: dict[str, Callable[[], Any]] = {
            "/api/about": lambda: self.app.about(self._token()),
            "/api/overview": lambda: self.app.overview(self._token()),
            "/api/entities": lambda: self.app.entities(query, self._token()),
            "/api/beliefs": lambda: self.app.beliefs(query, self._token()),
            "/api/search": lambda: self.app.search(query, self._token()),
            "/api/life": lambda: self.app.life(query, self._token()),
            "/api/review": lambda: self.app.review(self._token()),
        }
        if path in CORRECTIONS or path == "/api/review/decide":
            message = f"{path} changes memories: POST a JSON body from the console's page"
            self._send(
                405,
                json.dumps({"error": message, "code": "Method Not Allowed"}).encode(),
                "application/json",
                allow="POST",
            )
            return
        route = routes.get(path)
        if route is None:
            self._error(404, f"no such page: {path}")
            return
        self._answer(route)

    def do_POST(self) -> None:
        if not self._host_allowed():
            self._error(403, "the console answers only requests addressed to a loopback host")
            return
        origin = self.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != self.headers.get("Host"):
            self._error(403, "writes are accepted from the console's own pages only")
            return
        if not self._admitted():
            return
        path = urlsplit(self.path).path
        if path != "/api/review/decide" and path not in CORRECTIONS:
            self._error(404, "no such action")
            return
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            self._error(415, "send application/json")
            return
        length = _whole((self.headers.get("Content-Length") or "0").strip(), 2**63)
        if length is None:
            self._error(400, "Content-Length: expected the body's size in bytes")
            return
        if length > MAX_BODY_BYTES:
            self._error(413, "body too large")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "the body is not JSON")
            return
        if not isinstance(body, dict):
            self._error(400, "the body must be a JSON object")
            return
        if path in CORRECTIONS:
            self._answer(lambda: self.app.correction(path, body, self._token()))
            return
        self._answer(lambda: self.app.decide(body, self._token()))

    def _answer(self, route: Callable[[], Any]) -> None:
        try:
            payload = route()
        except SourceError as error:
            self._error(error.status, error.message, error.code)
            return
        except ConsoleError as error:
            self._error(error.status, error.message, error.code)
            return
        except Exception:
            # The exception's text is for the operator's log: it can name code and data the page should not.
            log.exception("console: %s failed", urlsplit(self.path).path)
            self._error(500, "the console failed to answer this request; its log says why")
            return
        self._json(200, payload)

    def _live(self, query: dict[str, list[str]]) -> None:
        """The change log as JSON lines, streamed until the page closes (a Watch with the caller's token)."""
        request = memory_service_pb2.WatchRequest(namespace=query.get("ns", [""])[0])
        after = query.get("after", [""])[0]
        try:
            sequence = _whole(after, 2**64)
            if after and sequence is None:
                raise ConsoleError(400, f"after: {after!r} is not a change-log sequence number (a whole number)")
            request.after_sequence = max(0, self.app.digest.cursor - LIVE_BACKLOG) if sequence is None else sequence
            kinds = set(_kinds(query))
            for name in query.get("type", []):
                short = name.strip().upper().removeprefix("CHANGE_EVENT_TYPE_")
                if not short:
                    continue
                if short not in EVENT_TYPE_NAMES:
                    raise ConsoleError(
                        400, f"type: {name!r} is not a change event type; one of {', '.join(EVENT_TYPE_NAMES)}"
                    )
                request.types.append(events_pb2.ChangeEventType.Value(f"CHANGE_EVENT_TYPE_{short}"))
        except ConsoleError as error:
            self._error(error.status, error.message)
            return
        stream = self.app.source.watch(request, self._token())
        try:
            first = stream.next_item(timeout_s=1.0)
        except SourceError as error:
            self._error(error.status, error.message, error.code)
            return
        except StopIteration:
            first = None
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-store")
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        self.end_headers()
        try:
            item = first
            while True:
                if item is None:
                    self.wfile.write(b"\n")
                else:
                    event = item.event
                    if not kinds or event.kind in kinds:
                        line = dict(to_json(event), reason_class=reason_class(event.type, event.reason))
                        self.wfile.write(json.dumps(line).encode() + b"\n")
                self.wfile.flush()
                item = stream.next_item(timeout_s=LIVE_HEARTBEAT_S)
        except (BrokenPipeError, ConnectionResetError, StopIteration):
            pass
        except SourceError as error:
            self.wfile.write(json.dumps({"error": error.message, "code": error.code}).encode() + b"\n")
        finally:
            stream.cancel()
