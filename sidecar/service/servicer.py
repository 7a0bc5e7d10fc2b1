"""The gRPC servicer: validate, convert protobuf to domain objects, call the engine. Thin on purpose."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar, cast

import grpc
import numpy as np
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from memevo.v1 import events_pb2, memory_service_pb2, memory_service_pb2_grpc

from ..domain import NewMemory, RecallQuery
from ..engine import Engine, Written
from ..errors import InvalidArgument, MemevoError, NotFound, Unavailable, Unimplemented
from ..governance.daemon import GovernanceDaemon
from ..perception.feedback import is_finite_reward
from ..retrieval.context import build_context
from ..retrieval.hints import LANGUAGES
from ..retrieval.recall import Recaller
from ..store.vector_index import normalize_rows
from . import validation
from .validation import Violations

log = logging.getLogger(__name__)

ERROR_DOMAIN = "memevo.dev"
DEFAULT_TOKEN_BUDGET = 2_000
MAX_TOKEN_BUDGET = 200_000
CONTEXT_CANDIDATES = 50
STREAM_CHUNK_ITEMS = 512

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
    if isinstance(error, InvalidArgument) and error.violations:
        bad = error_details_pb2.BadRequest()
        for name, description in error.violations:
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


def _write_result(written: Written) -> memory_service_pb2.WriteResult:
    return memory_service_pb2.WriteResult(
        memory=written.memory, outcome=cast(Any, written.outcome), affected_ids=written.affected
    )


def _not_yet(name: str) -> Unimplemented:
    return Unimplemented(f"{name} is part of the memevo.v1 contract but not implemented in this version yet")


class MemoryServicer(memory_service_pb2_grpc.MemoryServiceServicer):
    """memevo.v1.MemoryService over one engine."""

    def __init__(self, engine: Engine, daemon: GovernanceDaemon) -> None:
        self.engine = engine
        self.daemon = daemon
        self.recaller = Recaller(engine)
        self.stopping = threading.Event()

    def _memory(self, v: Violations, field: str, memory: Any, request_id: str = "") -> NewMemory | None:
        return validation.memory_input(
            v,
            field,
            memory,
            dimension=self.engine.dimension,
            limits=self.engine.limits,
            has_embedder=self.engine.embedder is not None,
            request_id=request_id,
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
        vector = self.engine.embed([text])[0] if text else query.vector
        unit = normalize_rows(vector.reshape(1, -1).astype(np.float32))[0]
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
        written = self.engine.remember([item], batch_request_id=request.request_id, turn=turn, rpc="remember")
        return memory_service_pb2.RememberResponse(result=_write_result(written[0]), replayed=written[0].replayed)

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
        written = self.engine.remember(
            cast(list[NewMemory], items), batch_request_id=request.request_id, turn=turn, rpc="batch"
        )
        return memory_service_pb2.RememberBatchResponse(
            results=[_write_result(w) for w in written], replayed=any(w.replayed for w in written)
        )

    @unary
    def RememberStream(
        self,
        request_iterator: Iterator[memory_service_pb2.RememberStreamRequest],
        context: grpc.ServicerContext,
    ) -> memory_service_pb2.RememberStreamResponse:
        futures: list[Future[list[Written]]] = []
        chunk: list[NewMemory] = []
        chunk_turn: int | None = None

        def flush() -> None:
            nonlocal chunk
            if chunk:
                futures.append(cast(Future[list[Written]], self.engine.submit_remember(chunk, turn=chunk_turn)))
                chunk = []

        def committed() -> int:
            total = 0
            for future in futures:
                try:
                    total += len(future.result())
                except MemevoError:
                    break
            return total

        for position, message in enumerate(request_iterator):
            v = Violations()
            if not message.HasField("memory"):
                v.add(f"[{position}].memory", "required")
            item = self._memory(v, f"[{position}].memory", message.memory, message.request_id)
            validation.check_request_id(v, f"[{position}].request_id", message.request_id)
            turn = validation.check_turn(v, f"[{position}].turn", message.HasField("turn"), message.turn)
            if v.items:
                error = InvalidArgument(v.items)
                error.metadata["committed_count"] = str(committed())
                error.metadata["failed_index"] = str(position)
                raise error
            assert item is not None
            if turn != chunk_turn:
                flush()
                chunk_turn = turn
            chunk.append(item)
            if len(chunk) >= STREAM_CHUNK_ITEMS:
                flush()
        flush()
        response = memory_service_pb2.RememberStreamResponse()
        for future in futures:
            for written in future.result():
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
        forgotten, missing = self.engine.forget(
            ids,
            reason=request.reason,
            keep_history=request.keep_history,
            request_id=request.request_id,
            turn=turn,
        )
        return memory_service_pb2.ForgetResponse(forgotten_ids=forgotten, missing_ids=missing)

    # ---- reads ------------------------------------------------------------------------------

    @unary
    def Recall(
        self, request: memory_service_pb2.RecallRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.RecallResponse:
        query = self._recall_query(Violations(), request)
        hits = self.recaller.recall(query)
        retrieval_id = self.engine.record_retrieval([h.memory.id for h in hits], query.turn)
        response = memory_service_pb2.RecallResponse(retrieval_id=retrieval_id)
        for hit in hits:
            response.memories.add(memory=hit.memory, similarity=hit.similarity, score=hit.score, hint=hit.hint)
        return response

    @unary
    def Get(
        self, request: memory_service_pb2.GetRequest, context: grpc.ServicerContext
    ) -> memory_service_pb2.GetResponse:
        v = Violations()
        ids = validation.check_ids(v, "ids", request.ids, self.engine.limits.max_k)
        v.raise_if_any()
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
        after = request.after_sequence if request.HasField("after_sequence") else self.engine.store.last_sequence
        types = set(request.types)
        done = threading.Event()
        context.add_callback(done.set)
        stop = _AnyEvent(done, self.stopping)
        for event in self.engine.events(after, stop):
            if namespace and event.namespace and event.namespace != namespace:
                continue
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
        response = self.engine.stats()
        response.recent_sweeps.extend(self.daemon.recent)
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
        built = build_context(
            self.recaller,
            query,
            token_budget=budget,
            language=language,
            framework_version=self.engine.framework_version,
        )
        retrieval_id = self.engine.record_retrieval([line.hit.memory.id for line in built.lines], query.turn)
        response = memory_service_pb2.BuildContextResponse(
            text=built.text, tokens_used=built.tokens, retrieval_id=retrieval_id
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
        v.raise_if_any()
        used = list(request.used_memory_ids)
        if request.retrieval_id:
            returned = self.engine.retrieval(request.retrieval_id)
            if returned is None:
                raise NotFound(
                    f"retrieval_id: no retrieval {request.retrieval_id!r} (unknown, or lost in a crash)",
                    reason="UNKNOWN_RETRIEVAL",
                    metadata={"field": "retrieval_id"},
                )
            outside = [i for i in used if i not in set(returned)]
            if outside:
                raise InvalidArgument.field("used_memory_ids", f"ids {outside} were not returned by this retrieval")
            used = used or returned
        updated = self.engine.report_outcome(
            used,
            outcome=request.outcome,
            reward=reward,
            retrieval_id=request.retrieval_id,
            note=request.note,
            request_id=request.request_id,
            turn=turn,
        )
        return memory_service_pb2.ReportOutcomeResponse(updated_count=updated)

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
            versions = self.engine.history_of_fact(namespace, request.fact_key.entity, request.fact_key.attribute)
        else:
            versions = self.engine.lineage(request.memory_id)
        events = self.engine.events_about(r.id for r in versions)
        return memory_service_pb2.HistoryResponse(versions=versions, events=events)

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
        old, new = self.engine.supersede(
            request.old_id,
            new_id=request.new_id,
            new_item=item,
            reason=request.reason,
            request_id=request.request_id,
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
        self.engine.note_turn(turn)
        stats = self.daemon.sweep("request", dry_run=request.dry_run, namespace=namespace)
        return memory_service_pb2.GovernResponse(sweep=stats)

    @streaming
    def Review(self, request_iterator: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        raise _not_yet("Review")
        yield  # pragma: no cover - makes this a generator like the real stream

    @unary
    def Unconsolidate(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise _not_yet("Unconsolidate")

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
        previous, flagged = self.engine.declare_framework(
            request.version, request.description, request_id=request.request_id, turn=turn
        )
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
        validation.check_request_id(v, "request_id", request.request_id)
        v.raise_if_any()
        policy = self.engine.update_policy(request.policy, request_id=request.request_id)
        return memory_service_pb2.UpdatePolicyResponse(policy=policy)


class _AnyEvent(threading.Event):
    """Set when any of the given events is set (a Watch ends when its call or the server ends)."""

    def __init__(self, *events: threading.Event) -> None:
        super().__init__()
        self._events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)
