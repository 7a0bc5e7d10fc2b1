"""The gRPC servicer: validate, convert protobuf to domain objects, call the engine. Thin on purpose."""

from __future__ import annotations

import dataclasses
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar, cast

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from memevo.v1 import events_pb2, memory_service_pb2, memory_service_pb2_grpc, policy_pb2, review_pb2

from ..domain import NewMemory, RecallQuery
from ..embedding.batching import QueryEmbedder
from ..engine import Engine, Written
from ..errors import DeadlineExceeded, InvalidArgument, MemevoError, NotFound, StorageError, Unavailable
from ..experiments.arms import observed_retrieval
from ..governance.consolidation import MAX_TAIL_FOR_PASS, unconsolidate
from ..governance.daemon import GovernanceDaemon
from ..governance.review import ReviewBroker
from ..idempotency import RequestKey
from ..perception.feedback import is_finite_reward
from ..priority import lower_thread_priority
from ..replay.capture import read_namespace
from ..retrieval.beliefs import DEFAULT_ENTITY_LIMIT, beliefs, list_entities
from ..retrieval.context import build_context
from ..retrieval.hints import LANGUAGES
from ..retrieval.recall import Recaller
from ..store.columns import NO_CODE
from ..store.vector_digests import unit_row
from . import validation
from .auth import PermissionDenied, Scope, TokenTable, authorize, caller_identity, caller_scope, ids_of
from .validation import Violations

log = logging.getLogger(__name__)

ERROR_DOMAIN = "memevo.dev"
DEFAULT_TOKEN_BUDGET = 2_000
MAX_TOKEN_BUDGET = 200_000
CONTEXT_CANDIDATES = 50
STREAM_CHUNK_ITEMS = 512
REVIEW_POLL_S = 0.2
"""How often a Review stream with nothing to send checks whether its reviewer is still there."""
REVIEW_TICK_S = 1.0
"""How often expired review proposals are decided by policy."""
MAX_REVIEWER_BYTES = 128

Request = TypeVar("Request")
Response = TypeVar("Response")


def to_status(error: MemevoError) -> grpc.Status:
    """A gRPC status with google.rpc ErrorInfo (and BadRequest field violations when there are any)."""
    details: list[any_pb2.Any] = []
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    if error.retryable:
        info.metadata["retryable"] = "true"
    packed = any_pb2.Any()
    packed.Pack(info)
    details.append(packed)
    violations: list[tuple[str, str]] = getattr(error, "violations", [])
    if violations:
        bad = error_details_pb2.BadRequest()
        for name, description in violations:
            bad.field_violations.add(field=name, description=description)
        packed = any_pb2.Any()
        packed.Pack(bad)
        details.append(packed)
    message = status_pb2.Status(code=error.code.value[0], message=error.message, details=details)
    return rpc_status.to_status(message)


def _internal_status(exc: BaseException) -> grpc.Status:
    message = status_pb2.Status(code=code_pb2.INTERNAL, message=f"internal error: {type(exc).__name__}: {exc}")
    return rpc_status.to_status(message)


def unary(method: Callable[[Any, Request, grpc.ServicerContext], Response]) -> Callable[..., Response]:
    """Turn MemevoError into a gRPC status with details; log and report anything else as INTERNAL."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Request, context: grpc.ServicerContext) -> Response:
        try:
            return method(self, request, context)
        except MemevoError as error:
            context.abort_with_status(to_status(error))
        except grpc.RpcError:
            raise
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            context.abort_with_status(_internal_status(exc))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    return wrapper


def streaming(
    method: Callable[[Any, Request, grpc.ServicerContext], Iterator[Response]],
) -> Callable[..., Iterator[Response]]:
    """:func:`unary` for server-streaming methods."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Request, context: grpc.ServicerContext) -> Iterator[Response]:
        try:
            yield from method(self, request, context)
        except MemevoError as error:
            context.abort_with_status(to_status(error))
        except grpc.RpcError:
            raise
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            context.abort_with_status(_internal_status(exc))

    return wrapper


CALL_END_MARGIN_S = 0.05
"""How close to its deadline a client stream's end is double-checked (see :func:`_call_ended`)."""
STOPPING_MARGIN_S = 0.5
"""How long a client stream that ends while the sidecar stops waits to see whether it was cancelled."""
STREAM_DEADLINE_SHARE = 0.1
"""A RememberStream stops reading when this share of its deadline (at most STREAM_DEADLINE_MARGIN_S) is left."""
STREAM_DEADLINE_MARGIN_S = 1.0
"""Seconds before its deadline a long RememberStream answers at the latest (see STREAM_DEADLINE_SHARE)."""
NO_DEADLINE_S = 365 * 24 * 3600.0
"""A call with more time left than this has no deadline to answer before."""


_NEAR_DEADLINE = object()
"""Yielded by :func:`_read_ahead` when the time to answer came while no message was waiting."""
READ_AHEAD_MESSAGES = 64
"""Messages a stream's reader thread may hold ahead of the RPC's thread (gRPC's flow control does the rest)."""


def _read_ahead(requests: Iterator[Request], answer_by: float) -> Iterator[Request | object]:
    """The messages of ``requests``, read on a thread of their own; then ``_NEAR_DEADLINE`` once ``answer_by``
    (``time.monotonic``) passes with no message waiting, and nothing more.

    gRPC's request iterator blocks until the client sends or the call ends, so an RPC thread reading it
    itself could not answer a client that went quiet before its deadline. Errors of the iterator are
    raised on the caller's thread.
    """
    handoff: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=READ_AHEAD_MESSAGES)
    done = threading.Event()

    def hand(item: tuple[object, BaseException | None]) -> bool:
        while not done.is_set():
            try:
                handoff.put(item, timeout=REVIEW_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for message in requests:
                if not hand((message, None)):
                    return
        except BaseException as exc:  # handed to the RPC's thread, which raises it
            hand((_NEAR_DEADLINE, exc))
            return
        hand((None, None))

    threading.Thread(target=read, name="memevo-stream-reader", daemon=True).start()
    try:
        while True:
            try:
                message, error = handoff.get(timeout=max(answer_by - time.monotonic(), 0.0))
            except queue.Empty:
                yield _NEAR_DEADLINE
                return
            if error is not None:
                raise error
            if message is None:
                return
            yield cast(Request, message)
    finally:
        done.set()


def _call_ended(context: grpc.ServicerContext, stopping: bool) -> bool:
    """Whether the call is over (deadline passed, cancelled) rather than its client having closed the stream.

    gRPC may end the request iterator before it marks the call cancelled: the client's
    deadline fires a moment before the server's, and a server stopping after its grace
    period cancels calls from another thread. Near the deadline, or while ``stopping``,
    this waits a moment for the cancellation to show.
    """
    remaining = context.time_remaining()
    if stopping:
        # Shutdown only, so a stream that really was complete can afford the wait.
        waited_until = time.monotonic() + STOPPING_MARGIN_S
        while context.is_active() and time.monotonic() < waited_until:
            time.sleep(0.01)
    elif remaining is not None and remaining < CALL_END_MARGIN_S:
        time.sleep(CALL_END_MARGIN_S)
    remaining = context.time_remaining()
    return not context.is_active() or (remaining is not None and remaining <= 0)


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):
    """memevo.v1.MemoryService over one engine."""

    def __init__(self, engine: Engine, daemon: GovernanceDaemon) -> None:
        self.engine = engine
        self.daemon = daemon
        self.recaller = Recaller(engine)
        self.query_embedder = QueryEmbedder(
            engine.embed,
            cache_size=engine.config.embedder.query_cache_size,
            max_batch=engine.config.embedder.query_batch_max,
        )
        """Query texts to vectors: concurrent recalls share model runs; recent queries are cached."""
        self.stopping = threading.Event()
        self.review = ReviewBroker(engine)
        self._review_worker = threading.Thread(target=self._review_loop, name="memevo-review", daemon=True)
        self._review_worker.start()

    def _review_loop(self) -> None:
        """Decide expired proposals every second; look for new groups at the sweep interval."""
        lower_thread_priority(self.engine.config.governance.review_nice, what="the review worker")
        interval_s = self.engine.config.governance.sweep_interval_s
        last_pass = time.monotonic()
        while not self.stopping.wait(REVIEW_TICK_S):
            try:
                due = interval_s > 0 and time.monotonic() - last_pass >= interval_s
                if due and self.engine.index.tail_count <= MAX_TAIL_FOR_PASS:
                    self.review.consolidation_pass(stopping=self.stopping.is_set)
                    last_pass = time.monotonic()
                else:
                    self.review.expire()
            except StorageError as refused:  # writes refused (a full disk): the store reports it and resumes them
                log.info("consolidation pass left for later: %s", refused.reason)
            except Exception:  # the loop must outlive a bad pass; the next one retries
                if not self.stopping.is_set():
                    log.exception("consolidation pass failed")

    def close(self) -> None:
        """Stop the review worker (before the engine closes)."""
        self.stopping.set()
        self._review_worker.join(timeout=30)
        self.tokens: TokenTable | None = None
        """Scoped bearer tokens (set by the server); None = every caller may touch everything."""

    def _authorize(
        self,
        context: grpc.ServicerContext,
        *,
        namespaces: Iterable[tuple[str, str]] = (),
        ids: Iterable[tuple[str, int]] = (),
        sidecar_wide: str = "",
        scope: Scope | None = None,
    ) -> Scope:
        """PERMISSION_DENIED unless the caller's token covers the (field, namespace) and (field, memory id)
        pairs, or, for a non-empty ``sidecar_wide`` operation name, every namespace. Returns the scope."""
        scope = scope if scope is not None else caller_scope(self.tokens, context)
        authorize(scope, self.engine.columns, namespaces=namespaces, ids=ids, sidecar_wide=sidecar_wide)
        return scope

    def _memory(self, v: Violations, field: str, memory: Any) -> NewMemory | None:
        return validation.memory_input(
            v,
            field,
            memory,
            dimension=self.engine.dimension,
            limits=self.engine.limits,
            has_embedder=self.engine.embedder is not None,
        )

    def _request_key(
        self,
        context: grpc.ServicerContext,
        rpc: str,
        request_id: str,
        asked: Any,
        *,
        namespace: str = "",
        field: str = "request_id",
        caller: str | None = None,
    ) -> RequestKey | None:
        """The idempotency key of a call (None without a request id), scoped to its caller and namespace.

        ``asked`` is the message whose content must match for a replay (the request, or one item of it).
        """
        if not request_id:
            return None
        if caller is None:
            caller = caller_identity(self.tokens, context)
        return RequestKey.of(rpc, request_id, asked, caller=caller, namespace=namespace, field=field)

    @staticmethod
    def _replayable(scope: Scope, field: str, written: Sequence[Written]) -> None:
        """PERMISSION_DENIED when a replay would show a memory of a namespace the caller may not read.

        The key already holds the caller and namespace; this guards a token whose scope was narrowed since.
        """
        for w in written:
            if w.replayed and not scope.allows(w.memory.namespace):
                raise PermissionDenied(
                    f"{field}: the first call's result lies in a namespace this token may not read "
                    f"(allowed: {scope.describe()})",
                    metadata={"field": field, "allowed_namespaces": scope.describe()},
                )

    def _recall_query(self, v: Violations, request: memory_service_pb2.RecallRequest) -> RecallQuery:
        """Validate a recall (raising every violation in ``v`` too) and embed its text if needed."""
        query, text = validation.recall_query(
            v,
            request,
            dimension=self.engine.dimension,
            limits=self.engine.limits,
            has_embedder=self.engine.embedder is not None,
        )
        assert query is not None
        vector = self.query_embedder.embed_one(text) if text else query.vector
        unit = unit_row(vector)  # as the write path's digest normalises: an equal vector is found exactly
        if not query.peek:
            self.engine.note_turn(query.turn)
        return dataclasses.replace(query, vector=unit)

    # ---- writes -----------------------------------------------------------------------------

    @unary
    def Remember(
        self, request: memory_service_pb2.RememberRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.RememberResponse:
        v = Violations()
        if not request.HasField("memory"):
            v.add("memory", "required")
        item = self._memory(v, "memory", request.memory)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        assert item is not None
        scope = self._authorize(context, namespaces=[("memory.namespace", item.namespace)])
        # Keyed like a stream item, so a client may retry a streamed item with Remember and the reverse.
        key = self._request_key(context, "remember", request.request_id, request.memory, namespace=item.namespace)
        written = self.engine.remember([dataclasses.replace(item, request=key)], turn=turn, rpc="remember")
        self._replayable(scope, "request_id", written)
        return memory_service_pb2.RememberResponse(result=written[0].result(), replayed=written[0].replayed)

    @unary
    def RememberBatch(
        self, request: memory_service_pb2.RememberBatchRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.RememberBatchResponse:
        v = Violations()
        count = len(request.memories)
        if count == 0:
            v.add("memories", "at least one memory is required")
        elif count > self.engine.limits.max_batch_items:
            v.add("memories", f"{count} memories; at most {self.engine.limits.max_batch_items} per batch")
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        items = [self._memory(v, f"memories[{i}]", m) for i, m in enumerate(request.memories)]
        v.raise_if_any()
        valid = cast(list[NewMemory], items)
        scope = self._authorize(
            context, namespaces=((f"memories[{i}].namespace", m.namespace) for i, m in enumerate(valid))
        )
        namespaces = ",".join(sorted({m.namespace for m in valid}))
        key = self._request_key(context, "batch", request.request_id, request, namespace=namespaces)
        written = self.engine.remember(valid, batch=key, turn=turn, rpc="batch")
        self._replayable(scope, "request_id", written)
        return memory_service_pb2.RememberBatchResponse(
            results=[w.result() for w in written], replayed=any(w.replayed for w in written)
        )

    @unary
    def RememberStream(
        self,
        request_iterator: Iterator[memory_service_pb2.RememberStreamRequest],
        context: grpc.ServicerContext,
    ) -> memory_service_pb2.RememberStreamResponse:
        futures: list[Future[list[Written]]] = []
        starts: list[int] = []
        """Stream position of each future's first item."""
        chunk: list[NewMemory] = []
        chunk_turn: int | None = None
        chunk_start = 0
        """Stream position of the chunk's first item."""

        def refuse(error: MemevoError, at: int) -> MemevoError:
            error.metadata["committed_count"] = str(committed())
            error.metadata["failed_index"] = str(at)
            return error

        def flush() -> None:
            nonlocal chunk
            if chunk:
                try:
                    # Refused now rather than after reading the rest of the stream: a backlogged index
                    # needs the cores more than the validation of messages that would be refused too.
                    self.engine.check_capacity(len(chunk))
                except MemevoError as full:
                    raise refuse(full, chunk_start) from None
                futures.append(cast(Future[list[Written]], self.engine.submit_remember(chunk, turn=chunk_turn)))
                starts.append(chunk_start)
                chunk = []

        def committed() -> int:
            total = 0
            for future in futures:
                try:
                    total += len(future.result())
                except MemevoError:
                    break
            return total

        scope = self._authorize(context)
        caller = caller_identity(self.tokens, context)  # once per stream, not per item
        position = 0
        """Stream position (items, not messages) of the next item."""
        # Past its deadline a call's answer never reaches the client, so the stream answers a little before
        # it, while the client can still learn which items were stored.
        remaining = context.time_remaining()  # without a deadline gRPC gives a huge number, not None
        answer_by = (
            None
            if remaining is None or remaining > NO_DEADLINE_S
            else time.monotonic() + remaining - min(STREAM_DEADLINE_MARGIN_S, STREAM_DEADLINE_SHARE * remaining)
        )

        messages = request_iterator if answer_by is None else _read_ahead(request_iterator, answer_by)
        for message in messages:
            if message is _NEAR_DEADLINE or (answer_by is not None and time.monotonic() >= answer_by):
                # Nothing more is stored (as when the call ends): the groups already committed are the prefix.
                stored = committed()
                raise refuse(
                    DeadlineExceeded(
                        f"the call's deadline is near: items [0, {stored}) are stored, items from {stored} on "
                        "are not; send them again in a new stream (with request ids, resending is safe)",
                        reason="STREAM_DEADLINE",
                    ),
                    stored,
                )
            message = cast(memory_service_pb2.RememberStreamRequest, message)
            v = Violations()
            turn = validation.check_turn(v, f"[{position}].turn", message.HasField("turn"), message.turn)
            entries: Sequence[Any]
            if message.items:
                entries = message.items
                if message.HasField("memory") or message.request_id:
                    v.add(f"[{position}].items", "set either memory and request_id or items, not both")
                if len(entries) > self.engine.limits.max_batch_items:
                    v.add(
                        f"[{position}].items",
                        f"{len(entries)} items; at most {self.engine.limits.max_batch_items} per message",
                    )
            else:
                entries = (message,)
            if v.items:
                raise refuse(InvalidArgument(v.items), position)
            if turn != chunk_turn:
                flush()
                chunk_turn = turn
            for entry in entries:
                if not entry.HasField("memory"):
                    v.add(f"[{position}].memory", "required")
                item = self._memory(v, f"[{position}].memory", entry.memory)
                validation.check_request_id(v, f"[{position}].request_id", entry.request_id)
                if v.items:
                    raise refuse(InvalidArgument(v.items), position)
                assert item is not None
                key = self._request_key(
                    context,
                    "remember",
                    entry.request_id,
                    entry.memory,
                    namespace=item.namespace,
                    field=f"[{position}].request_id",
                    caller=caller,
                )
                item = dataclasses.replace(item, request=key)
                try:
                    self._authorize(
                        context, namespaces=[(f"[{position}].memory.namespace", item.namespace)], scope=scope
                    )
                except MemevoError as denied:
                    raise refuse(denied, position) from None
                if not chunk:
                    chunk_start = position
                chunk.append(item)
                position += 1
                if len(chunk) >= STREAM_CHUNK_ITEMS:
                    flush()
        if _call_ended(context, self.stopping.is_set()):
            # The requests ended because the call did (deadline passed, client cancelled), not because the
            # client closed the stream: store nothing more, nobody would learn the ids.
            raise Unavailable("the call ended before its stream was complete", reason="CALL_ENDED")
        flush()
        response = memory_service_pb2.RememberStreamResponse()
        for start, future in zip(starts, futures, strict=True):
            try:
                results = future.result()  # e.g. a reused request id refuses its whole chunk
            except MemevoError as error:
                raise refuse(error, start) from None
            self._replayable(scope, "request_id", results)
            for written in results:
                response.ids.append(written.memory.id)
                if written.replayed:
                    response.replayed_count += 1
                elif written.outcome == memory_service_pb2.WRITE_OUTCOME_CONFIRMED:
                    response.confirmed_count += 1
                else:
                    response.created_count += 1
        return response

    @unary
    def Forget(
        self, request: memory_service_pb2.ForgetRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.ForgetResponse:
        v = Violations()
        ids = validation.check_ids(v, "ids", request.ids, self.engine.limits.max_k)
        validation.check_text(v, "reason", request.reason, validation.MAX_NOTE_BYTES)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        self._authorize(context, ids=ids_of("ids", ids))
        forgotten, missing = self.engine.forget(
            ids,
            reason=request.reason,
            keep_history=request.keep_history,
            request=self._request_key(context, "forget", request.request_id, request),
            turn=turn,
        )
        return memory_service_pb2.ForgetResponse(forgotten_ids=forgotten, missing_ids=missing)

    # ---- reads ------------------------------------------------------------------------------

    @unary
    def Recall(
        self, request: memory_service_pb2.RecallRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.RecallResponse:
        query = self._recall_query(Violations(), request)
        self._authorize(context, namespaces=[("filter.namespace", query.namespace)])
        if query.peek:  # nothing recorded: no retrieval to report on, no arm (see RecallRequest.peek)
            hits = self.recaller.recall(query)
            response = memory_service_pb2.RecallResponse()
        else:
            with observed_retrieval(self.engine, query) as observed:
                hits = self.recaller.recall(query)
                observed.returned_ids = [h.memory.id for h in hits]
            response = memory_service_pb2.RecallResponse(retrieval_id=observed.retrieval_id, arm=observed.arm)
        for hit in hits:
            response.memories.add(
                memory=hit.memory, similarity=hit.similarity, score=hit.score, hint=hit.hint, breakdown=hit.breakdown
            )
        return response

    @unary
    def Get(
        self, request: memory_service_pb2.GetRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.GetResponse:
        v = Violations()
        ids = validation.check_ids(v, "ids", request.ids, self.engine.limits.max_k)
        v.raise_if_any()
        self._authorize(context, ids=ids_of("ids", ids))
        found, missing = self.engine.get(ids, include_vectors=request.include_vectors)
        return memory_service_pb2.GetResponse(memories=found, missing_ids=missing)

    @streaming
    def Watch(
        self, request: memory_service_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[memory_service_pb2.WatchResponse]:
        v = Violations()
        namespace = validation.check_namespace(v, "namespace", request.namespace) if request.namespace else ""
        known = set(events_pb2.ChangeEventType.values())
        for position, kind in enumerate(request.types):
            if kind not in known or kind == events_pb2.CHANGE_EVENT_TYPE_UNSPECIFIED:
                v.add(f"types[{position}]", f"unknown ChangeEventType value {kind}")
        v.raise_if_any()
        scope = self._authorize(context, namespaces=[("namespace", namespace)] if namespace else ())
        after = request.after_sequence if request.HasField("after_sequence") else self.engine.store.last_sequence
        types = set(request.types)
        done = threading.Event()
        context.add_callback(done.set)
        stop = _AnyEvent(done, self.stopping)
        for event in self.engine.events(after, stop):
            if namespace and event.namespace and event.namespace != namespace:
                continue
            if event.namespace and not scope.allows(event.namespace):
                continue  # another tenant's change: a scoped token never sees it
            if types and event.type not in types:
                continue
            yield memory_service_pb2.WatchResponse(event=event)
        if self.stopping.is_set():
            # A clean end would look like "no more events"; tell the client to reconnect instead.
            raise Unavailable("the sidecar is shutting down; resume with after_sequence", reason="SHUTTING_DOWN")

    @unary
    def GetStats(
        self, request: memory_service_pb2.GetStatsRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.GetStatsResponse:
        self._authorize(context, sidecar_wide="GetStats")
        response = self.engine.stats()
        response.recent_sweeps.extend(self.daemon.recent)
        response.review.CopyFrom(self.review.stats())
        return response

    # ---- not built yet ----------------------------------------------------------------------

    @unary
    def BuildContext(
        self, request: memory_service_pb2.BuildContextRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.BuildContextResponse:
        v = Violations()
        as_recall = memory_service_pb2.RecallRequest(
            query=request.query,
            query_vector=request.query_vector,
            k=CONTEXT_CANDIDATES,
            filter=request.filter,
            mode=request.mode,
        )
        if request.HasField("as_of"):
            as_recall.as_of.CopyFrom(request.as_of)
        if request.HasField("turn"):
            as_recall.turn = request.turn
        budget = request.token_budget or DEFAULT_TOKEN_BUDGET
        if budget > MAX_TOKEN_BUDGET:
            v.add("token_budget", f"{budget}; at most {MAX_TOKEN_BUDGET}")
        language = request.language or "en"
        if language not in LANGUAGES:
            v.add("language", f"{language!r}; one of {', '.join(LANGUAGES)}")
        query = self._recall_query(v, as_recall)
        self._authorize(context, namespaces=[("filter.namespace", query.namespace)])
        with observed_retrieval(self.engine, query) as observed:
            built = build_context(
                self.recaller,
                query,
                token_budget=budget,
                language=language,
                framework_version=self.engine.framework_version,
            )
            observed.returned_ids = [line.hit.memory.id for line in built.lines]
        response = memory_service_pb2.BuildContextResponse(
            text=built.text, tokens_used=built.tokens, retrieval_id=observed.retrieval_id, arm=observed.arm
        )
        for line in built.lines:
            response.items.add(memory=line.hit.memory, group=line.group, hint=line.hint, tokens=line.tokens)
        return response

    @unary
    def ReportOutcome(
        self, request: memory_service_pb2.ReportOutcomeRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.ReportOutcomeResponse:
        v = Violations()
        if request.outcome not in (
            memory_service_pb2.OUTCOME_SUCCESS,
            memory_service_pb2.OUTCOME_FAILURE,
            memory_service_pb2.OUTCOME_PARTIAL,
        ):
            v.add("outcome", f"SUCCESS, FAILURE or PARTIAL is required (got {request.outcome})")
        reward = request.reward if request.HasField("reward") else None
        if reward is not None and not is_finite_reward(reward):
            v.add("reward", f"{reward} is outside [-1, 1]")
        if not request.retrieval_id and not request.used_memory_ids:
            v.add("retrieval_id", "retrieval_id or used_memory_ids is required")
        if request.used_memory_ids:
            validation.check_ids(v, "used_memory_ids", request.used_memory_ids, self.engine.limits.max_k)
        validation.check_text(v, "note", request.note, validation.MAX_NOTE_BYTES)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        namespace = validation.check_namespace(v, "namespace", request.namespace) if request.namespace else ""
        v.raise_if_any()
        scope = self._authorize(context, namespaces=[("namespace", namespace)] if namespace else ())
        used = list(request.used_memory_ids)
        if request.retrieval_id:
            returned = self.engine.retrieval(request.retrieval_id)
            searched = self._retrieval_namespace(request.retrieval_id, returned or [])
            # Asked in one namespace, another namespace's retrieval is as unknown as a made-up one: its ids are
            # shown to models, which may pass them to another namespace's tools.
            if returned is None or (namespace and searched != namespace):
                where = f" in namespace {namespace!r}" if namespace else ""
                raise NotFound(
                    f"retrieval_id: no retrieval {request.retrieval_id!r}{where} (unknown, of another namespace, "
                    "or lost in a crash)",
                    reason="UNKNOWN_RETRIEVAL",
                    metadata={"field": "retrieval_id"},
                )
            if not scope.allows(searched):
                # As for a memory id of another tenant; its namespace is not named: the name is theirs.
                raise PermissionDenied(
                    f"retrieval_id: retrieval {request.retrieval_id!r} is of a namespace this token may not use "
                    f"(allowed: {scope.describe()})",
                    metadata={"field": "retrieval_id", "allowed_namespaces": scope.describe()},
                )
            outside = [i for i in used if i not in set(returned)]
            if outside:
                raise InvalidArgument.field("used_memory_ids", f"ids {outside} were not returned by this retrieval")
            used = used or returned
        elif namespace:
            elsewhere = [i for i in used if self._namespace_of(i) not in ("", namespace)]
            if elsewhere:
                raise InvalidArgument.field(
                    "used_memory_ids", f"ids {elsewhere} are not memories of namespace {namespace!r}"
                )
        self._authorize(context, ids=ids_of("used_memory_ids", used), scope=scope)
        updated = self.engine.report_outcome(
            used,
            outcome=request.outcome,
            reward=reward,
            retrieval_id=request.retrieval_id,
            note=request.note,
            request=self._request_key(context, "outcome", request.request_id, request),
            turn=turn,
        )
        # New evidence: a group rejected or left open before may be worth proposing again.
        self.review.finder.note_changed(used)
        return memory_service_pb2.ReportOutcomeResponse(updated_count=updated)

    def _namespace_of(self, memory_id: int) -> str:
        """The namespace of a memory; "" for an id that never existed."""
        columns = self.engine.columns
        code = int(columns.namespace[memory_id]) if 0 < memory_id < columns.size else NO_CODE
        return "" if code == NO_CODE else columns.namespaces.string(code)

    def _retrieval_namespace(self, retrieval_id: str, returned: Sequence[int]) -> str:
        """The namespace a retrieval searched: as recorded, else (a record older than that) its memories' one."""
        recorded = read_namespace(self.engine.store, retrieval_id)
        if recorded:
            return recorded
        found = {self._namespace_of(i) for i in returned} - {""}
        return found.pop() if len(found) == 1 else ""

    @unary
    def History(
        self, request: memory_service_pb2.HistoryRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.HistoryResponse:
        v = Violations()
        subject = request.WhichOneof("subject")
        if subject is None:
            v.add("subject", "fact_key or memory_id is required")
        elif subject == "fact_key":
            key = request.fact_key
            namespace = validation.check_namespace(v, "fact_key.namespace", key.namespace)
            if not key.entity:
                v.add("fact_key.entity", "required")
            if not key.attribute:
                v.add("fact_key.attribute", "required")
        elif request.memory_id == 0:
            v.add("memory_id", "0 is not a memory id")
        v.raise_if_any()
        if subject == "fact_key":
            scope = self._authorize(context, namespaces=[("fact_key.namespace", namespace)])
            versions = self.engine.history_of_fact(namespace, request.fact_key.entity, request.fact_key.attribute)
        else:
            scope = self._authorize(context, ids=[("memory_id", request.memory_id)])
            versions = self.engine.lineage(request.memory_id)
        versions = [r for r in versions if scope.allows(r.namespace)]
        events = self.engine.events_about(r.id for r in versions)
        return memory_service_pb2.HistoryResponse(versions=versions, events=events)

    @unary
    def ListEntities(
        self, request: memory_service_pb2.ListEntitiesRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.ListEntitiesResponse:
        v = Violations()
        namespace = validation.check_namespace(v, "namespace", request.namespace)
        validation.check_label(v, "query", request.query)
        limit = request.limit or DEFAULT_ENTITY_LIMIT
        if limit > self.engine.limits.max_k:
            v.add("limit", f"{limit}; at most {self.engine.limits.max_k}")
        v.raise_if_any()
        self._authorize(context, namespaces=[("namespace", namespace)])
        return list_entities(self.engine, namespace, query=request.query, limit=limit)

    @unary
    def Beliefs(
        self, request: memory_service_pb2.BeliefsRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.BeliefsResponse:
        v = Violations()
        namespace = validation.check_namespace(v, "namespace", request.namespace)
        if not request.entity:
            v.add("entity", "required")
        validation.check_label(v, "entity", request.entity)
        as_of = validation.check_timestamp(v, "as_of", request.as_of) if request.HasField("as_of") else None
        v.raise_if_any()
        self._authorize(context, namespaces=[("namespace", namespace)])
        response = beliefs(self.engine, namespace, request.entity, as_of_s=as_of)
        if request.HasField("as_of"):
            response.as_of.CopyFrom(request.as_of)  # the instant as asked, not rounded through a float
        return response

    @unary
    def Supersede(
        self, request: memory_service_pb2.SupersedeRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.SupersedeResponse:
        v = Violations()
        if request.old_id == 0:
            v.add("old_id", "required")
        replacement = request.WhichOneof("replacement")
        item = None
        if replacement is None:
            v.add("replacement", "new_id or new_memory is required")
        elif replacement == "new_id" and request.new_id == 0:
            v.add("new_id", "0 is not a memory id")
        elif replacement == "new_memory":
            item = self._memory(v, "new_memory", request.new_memory)
        validation.check_text(v, "reason", request.reason, validation.MAX_NOTE_BYTES)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        self._authorize(
            context,
            namespaces=[("new_memory.namespace", item.namespace)] if item is not None else (),
            ids=[("old_id", request.old_id), ("new_id", request.new_id)],
        )
        old, new = self.engine.supersede(
            request.old_id,
            new_id=request.new_id,
            new_item=item,
            reason=request.reason,
            request=self._request_key(
                context, "supersede", request.request_id, request, namespace=item.namespace if item else ""
            ),
            turn=turn,
        )
        return memory_service_pb2.SupersedeResponse(old_memory=old, new_memory=new)

    @unary
    def Govern(
        self, request: memory_service_pb2.GovernRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.GovernResponse:
        v = Violations()
        namespace = validation.check_namespace(v, "namespace", request.namespace) if request.namespace else ""
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        if namespace:
            self._authorize(context, namespaces=[("namespace", namespace)])
        else:
            self._authorize(context, sidecar_wide="Govern without a namespace")
        self.engine.note_turn(turn)
        stats = self.daemon.sweep("request", dry_run=request.dry_run, namespace=namespace)
        response = memory_service_pb2.GovernResponse(sweep=stats)
        if not request.dry_run:
            response.consolidation.CopyFrom(self.review.consolidation_pass())
        return response

    @streaming
    def Review(
        self, request_iterator: Iterator[memory_service_pb2.ReviewRequest], context: grpc.ServicerContext
    ) -> Iterator[memory_service_pb2.ReviewResponse]:
        self._authorize(context, sidecar_wide="Review")  # proposals span every namespace
        first = next(request_iterator, None)
        if first is None:
            return
        if first.WhichOneof("message") != "hello":
            raise InvalidArgument.field("hello", "the first message of a Review stream must be hello")
        v = Violations()
        if not first.hello.reviewer:
            v.add("hello.reviewer", "required: a name for the change log")
        validation.check_text(v, "hello.reviewer", first.hello.reviewer, MAX_REVIEWER_BYTES)
        for position, kind in enumerate(first.hello.kinds):
            if kind not in review_pb2.ProposalKind.values() or kind == review_pb2.PROPOSAL_KIND_UNSPECIFIED:
                v.add(f"hello.kinds[{position}]", f"unknown ProposalKind value {kind}")
        v.raise_if_any()
        reviewer = self.review.attach(first.hello.reviewer, list(first.hello.kinds), observe=first.hello.observe)
        failure: list[MemevoError] = []
        reading = threading.Event()
        reading.set()

        def read_decisions() -> None:
            # The responses go out from this RPC's thread; decisions arrive on this one.
            try:
                for message in request_iterator:
                    if message.WhichOneof("message") != "decision":
                        raise InvalidArgument.field("hello", "hello may only be the first message")
                    self.review.decide(reviewer, message.decision)
            except MemevoError as error:
                failure.append(error)
            except Exception:  # the client went away (cancelled stream): nothing to report to it
                log.debug("review stream of %s ended", reviewer.name, exc_info=True)
            finally:
                reading.clear()

        threading.Thread(target=read_decisions, name=f"memevo-review-{reviewer.name[:16]}", daemon=True).start()
        try:
            while True:
                try:
                    yield reviewer.outbox.get(timeout=REVIEW_POLL_S)
                    continue
                except queue.Empty:
                    pass
                if failure:
                    raise failure[0]
                # A half-closed stream ends once everything queued for it was sent.
                if not reading.is_set() or not context.is_active() or self.stopping.is_set():
                    break
        finally:
            self.review.detach(reviewer)
        if failure:
            raise failure[0]
        if self.stopping.is_set():
            raise Unavailable("the sidecar is shutting down; attach again after it restarts", reason="SHUTTING_DOWN")

    @unary
    def Unconsolidate(
        self, request: memory_service_pb2.UnconsolidateRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.UnconsolidateResponse:
        v = Violations()
        if request.abstraction_id == 0:
            v.add("abstraction_id", "required: the id of an ABSTRACTION memory")
        validation.check_request_id(v, "request_id", request.request_id)
        v.raise_if_any()
        self._authorize(context, ids=[("abstraction_id", int(request.abstraction_id))])
        restored = unconsolidate(
            self.engine,
            request.abstraction_id,
            request=self._request_key(context, "unconsolidate", request.request_id, request),
        )
        return memory_service_pb2.UnconsolidateResponse(restored_ids=restored)

    @unary
    def Restore(
        self, request: memory_service_pb2.RestoreRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.RestoreResponse:
        v = Violations()
        if request.memory_id == 0:
            v.add("memory_id", "required")
        validation.check_text(v, "reason", request.reason, validation.MAX_NOTE_BYTES)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        self._authorize(context, ids=[("memory_id", request.memory_id)])
        record = self.engine.restore(
            request.memory_id,
            reason=request.reason,
            request=self._request_key(context, "restore", request.request_id, request),
            turn=turn,
        )
        self.engine.fill_scores([record])
        return memory_service_pb2.RestoreResponse(memory=record)

    @unary
    def DeclareFramework(
        self, request: memory_service_pb2.DeclareFrameworkRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.DeclareFrameworkResponse:
        v = Violations()
        if not request.version:
            v.add("version", "required")
        validation.check_text(v, "version", request.version, validation.MAX_FRAMEWORK_BYTES)
        validation.check_text(v, "description", request.description, validation.MAX_NOTE_BYTES)
        validation.check_request_id(v, "request_id", request.request_id)
        turn = validation.check_turn(v, "turn", request.HasField("turn"), request.turn)
        v.raise_if_any()
        self._authorize(context, sidecar_wide="DeclareFramework")
        previous, flagged = self.engine.declare_framework(
            request.version,
            request.description,
            request=self._request_key(context, "framework", request.request_id, request),
            turn=turn,
        )
        if previous != request.version:
            self.review.propose_reinterpretation(request.version)
        return memory_service_pb2.DeclareFrameworkResponse(previous_version=previous, flagged_count=flagged)

    @unary
    def GetPolicy(
        self, request: memory_service_pb2.GetPolicyRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.GetPolicyResponse:
        return memory_service_pb2.GetPolicyResponse(policy=self.engine.policy)

    @unary
    def UpdatePolicy(
        self, request: memory_service_pb2.UpdatePolicyRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.UpdatePolicyResponse:
        v = Violations()
        if not request.HasField("policy"):
            v.add("policy", "required")
        if (
            request.policy.consolidation.without_reviewer == policy_pb2.CONSOLIDATION_MODE_LLM
            and self.engine.llm is None
        ):
            v.add(
                "policy.consolidation.without_reviewer",
                "CONSOLIDATION_MODE_LLM needs a chat endpoint: start the sidecar with --llm-url and --llm-model",
            )
        validation.check_request_id(v, "request_id", request.request_id)
        v.raise_if_any()
        self._authorize(context, sidecar_wide="UpdatePolicy")
        policy = self.engine.update_policy(
            request.policy, request=self._request_key(context, "policy", request.request_id, request)
        )
        return memory_service_pb2.UpdatePolicyResponse(policy=policy)

    @unary
    def SetExperiment(
        self, request: memory_service_pb2.SetExperimentRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.SetExperimentResponse:
        v = Violations()
        validation.check_request_id(v, "request_id", request.request_id)
        v.raise_if_any()
        self._authorize(context, sidecar_wide="SetExperiment")
        experiment = self.engine.experiments.set(
            request.experiment, request=self._request_key(context, "experiment", request.request_id, request)
        )
        return memory_service_pb2.SetExperimentResponse(experiment=experiment)

    @unary
    def PromoteArm(
        self, request: memory_service_pb2.PromoteArmRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.PromoteArmResponse:
        v = Violations()
        if not request.arm:
            v.add("arm", "required")
        validation.check_request_id(v, "request_id", request.request_id)
        v.raise_if_any()
        self._authorize(context, sidecar_wide="PromoteArm")
        policy, final = self.engine.experiments.promote(
            self.engine, request.arm, request=self._request_key(context, "promote", request.request_id, request)
        )
        return memory_service_pb2.PromoteArmResponse(policy=policy, final_stats=final)


class _AnyEvent(threading.Event):
    """Set when any of the given events is set (a Watch ends when its call or the server ends)."""

    def __init__(self, *events: threading.Event) -> None:
        super().__init__()
        self._events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)
