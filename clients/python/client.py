"""The synchronous memevo client, :class:`MemoryClient`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, TypeVar

import grpc

from memevo.v1 import memory_service_pb2 as pb
from memevo.v1 import memory_service_pb2_grpc as pb_grpc

from . import _convert as cv
from . import _requests as rq
from ._channel import (
    WATCH_MAX_ATTEMPTS,
    auth_metadata,
    backoff_delay_s,
    channel_options,
    check_target,
    check_timeout,
    default_target,
)
from .errors import NotFoundError, from_rpc_error
from .review import ReviewSession
from .types import (
    BeliefsResult,
    ChangeEvent,
    ChangeEventType,
    ContextResult,
    EntityList,
    Experiment,
    Fact,
    FactKey,
    ForgetResult,
    FrameworkDeclared,
    HistoryResult,
    Memory,
    MemoryInput,
    MemoryKind,
    MemorySource,
    Outcome,
    Policy,
    PromotedArm,
    ReasoningContext,
    RecallMode,
    RecallResult,
    Stats,
    StreamResult,
    SupersedeResult,
    SweepStats,
    VectorLike,
    WriteResult,
)

_T = TypeVar("_T")
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class _Cancellable(Protocol):
    def cancel(self) -> Any: ...


def _cancel(call: _Cancellable) -> None:
    call.cancel()


class Stream(Iterator[_T]):
    """A cancellable iterator over a server stream; usable as a context manager that cancels on exit.

    ``cancel()`` may be called from any thread: the iteration then ends quietly
    (``StopIteration``), even while blocked waiting for the next item. Errors
    arrive as :class:`~memevo.client.errors.MemevoError` from ``next()``.
    """

    def __init__(self, body: Callable[[Stream[_T]], Iterator[_T]]) -> None:
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._call: _Cancellable | None = None
        # A generator: nothing is sent until the first next().
        self._items = body(self)

    def __iter__(self) -> Stream[_T]:
        return self

    def __next__(self) -> _T:
        return next(self._items)

    def cancel(self) -> None:
        """End the stream now; safe to call more than once and from another thread."""
        with self._lock:
            self._cancelled.set()
            call = self._call
        if call is not None:
            call.cancel()

    close = cancel

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._cancelled.is_set()

    def _attach(self, call: _Cancellable) -> None:
        with self._lock:
            self._call = call
            cancelled = self._cancelled.is_set()
        if cancelled:
            call.cancel()

    def _sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when cancelled meanwhile."""
        return self._cancelled.wait(seconds)

    def __enter__(self) -> Stream[_T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cancel()


class MemoryClient:
    """A synchronous client of one memevo sidecar; thread-safe, one channel per client.

    ``target`` is ``unix:///absolute/path.sock`` or ``host:port``. ``token``, when
    given, is sent as ``authorization: Bearer <token>`` on every call. Every unary
    and client-streaming call has a deadline of ``timeout_s`` seconds unless the
    call passes its own ``timeout_s``; ``watch`` and ``review`` have none unless
    given. ``options`` are extra gRPC channel options applied over
    :data:`~memevo.client.DEFAULT_CHANNEL_OPTIONS` (64 MiB messages, keepalive).
    With ``wait_for_ready=True`` a call made while the sidecar is not reachable
    waits for it (up to the deadline) instead of failing at once with UNAVAILABLE.

    Every method raises a :class:`~memevo.client.errors.MemevoError` subclass for
    a failed call, and ``ValueError`` for arguments the client can reject itself.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 10.0,
        options: Sequence[tuple[str, Any]] = (),
        wait_for_ready: bool = False,
    ) -> None:
        self._target = check_target(default_target() if target is None else target)
        self._timeout_s = check_timeout(timeout_s)
        self._metadata = auth_metadata(token)
        self._wait_for_ready = wait_for_ready
        self._channel = grpc.insecure_channel(self._target, options=channel_options(options))
        self._stub = pb_grpc.MemoryServiceStub(self._channel)

    @property
    def target(self) -> str:
        """The address this client talks to."""
        return self._target

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled, later calls raise ValueError. Safe to call twice."""
        self._channel.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryClient({self._target!r}, timeout_s={self._timeout_s})"

    # --- plumbing ------------------------------------------------------------------------------

    def _timeout(self, timeout_s: float | None) -> float:
        return self._timeout_s if timeout_s is None else check_timeout(timeout_s)

    def _unary(
        self, method: grpc.UnaryUnaryMultiCallable[_Req, _Resp], request: _Req, timeout_s: float | None
    ) -> _Resp:
        try:
            return method(
                request,
                timeout=self._timeout(timeout_s),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err

    # --- writes --------------------------------------------------------------------------------

    def remember(
        self,
        content: str | None = None,
        *,
        vector: VectorLike | None = None,
        namespace: str | None = None,
        kind: MemoryKind | None = None,
        entity: str | None = None,
        topic: str | None = None,
        fact: tuple[str, str] | Fact | None = None,
        source: MemorySource | None = None,
        confidence: float | None = None,
        importance: int | None = None,
        tags: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        valid_from: datetime | None = None,
        framework_version: str | None = None,
        reasoning_context: ReasoningContext | None = None,
        task_signature: str | None = None,
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> WriteResult:
        """Store one memory; returns once it is durable in the sidecar.

        Give ``content`` or ``vector`` (vectors of exactly the data directory's
        dimension; without one the sidecar embeds ``content``). ``fact`` is
        ``(attribute, value)`` about ``entity``. With ``request_id`` a retry returns
        the first call's result (``WriteResult.replayed``) and writes nothing twice.
        Raises InvalidArgumentError naming the bad field, e.g. ``memory.vector``.
        """
        item = rq.memory_input(
            content,
            vector=vector,
            namespace=namespace,
            kind=kind,
            entity=entity,
            topic=topic,
            fact=fact,
            source=source,
            confidence=confidence,
            importance=importance,
            tags=tags,
            metadata=metadata,
            valid_from=valid_from,
            framework_version=framework_version,
            reasoning_context=reasoning_context,
            task_signature=task_signature,
        )
        response = self._unary(self._stub.Remember, rq.remember(item, request_id=request_id, turn=turn), timeout_s)
        return cv.write_result_from_proto(response.result, replayed=response.replayed)

    def remember_batch(
        self,
        memories: Sequence[MemoryInput],
        *,
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> list[WriteResult]:
        """Store several memories, all or nothing; one result per input, in input order.

        One bad item rejects the whole batch with InvalidArgumentError whose field
        names the item, e.g. ``memories[3].vector``. At most the sidecar's
        max_batch_items (default 10,000) per call.
        """
        request = rq.remember_batch(memories, request_id=request_id, turn=turn)
        response = self._unary(self._stub.RememberBatch, request, timeout_s)
        return [cv.write_result_from_proto(r, replayed=response.replayed) for r in response.results]

    def remember_stream(
        self,
        memories: Iterable[MemoryInput | tuple[MemoryInput, str]],
        *,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> StreamResult:
        """Stream memories to the sidecar, which commits them durably in groups as they arrive.

        Items travel up to 64 per message (gRPC's per-message cost would otherwise
        bound a bulk load); nothing is acknowledged before the stream ends either way.

        Each item may be ``(memory, request_id)``: after a failure, resend
        everything and the items already stored are replayed, not duplicated.
        The whole stream shares one deadline (``timeout_s``). A bad item ends it
        with InvalidArgumentError; its ``metadata["committed_count"]`` says how
        many items before it were stored. Near its deadline (sending or quiet)
        it ends a little before it with DeadlineExceededError whose
        ``metadata["committed_count"]`` items are stored and the rest are not.
        A ``ValueError`` raised while reading
        ``memories`` cancels the stream and is re-raised as is.
        """
        failure: list[BaseException] = []

        def requests() -> Iterator[pb.RememberStreamRequest]:
            groups = rq.StreamGroups(turn)
            try:
                for item in memories:
                    if (full := groups.add(item)) is not None:
                        yield full
                if (last := groups.flush()) is not None:
                    yield last
            except Exception as exc:
                # grpc would swallow it into a bare CANCELLED; keep it to re-raise to the caller.
                failure.append(exc)
                raise

        try:
            response = self._stub.RememberStream(
                requests(),
                timeout=self._timeout(timeout_s),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as err:
            if failure:
                raise failure[0] from None
            raise from_rpc_error(err) from err
        return cv.stream_result_from_proto(response)

    def forget(
        self,
        ids: int | Iterable[int],
        *,
        reason: str = "",
        keep_history: bool = False,
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> ForgetResult:
        """Delete memories, or with ``keep_history=True`` keep them as OBSOLETE history.

        Ids that do not exist are reported in ``missing_ids``, not raised.
        """
        request = rq.forget(ids, reason=reason, keep_history=keep_history, request_id=request_id, turn=turn)
        return cv.forget_result_from_proto(self._unary(self._stub.Forget, request, timeout_s))

    def supersede(
        self,
        old_id: int,
        new: int | MemoryInput,
        *,
        reason: str = "",
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> SupersedeResult:
        """Declare that ``new`` (an existing memory's id, or a new memory to store) replaces ``old_id``.

        Raises NotFoundError when either id does not exist.
        """
        request = rq.supersede(old_id, new, reason=reason, request_id=request_id, turn=turn)
        return cv.supersede_result_from_proto(self._unary(self._stub.Supersede, request, timeout_s))

    def restore(
        self,
        memory_id: int,
        *,
        reason: str = "",
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> Memory:
        """Undo a supersession (the memory is current again) or a doubt (``possibly_outdated_by`` cleared).

        For a wrong inference: a plain-text statement that retired or doubted a memory of another slot.
        Raises NotFoundError for an unknown id, FailedPreconditionError when it is neither superseded nor
        doubted, or when its fact key has another current value (supersede that one instead).
        """
        request = rq.restore(memory_id, reason=reason, request_id=request_id, turn=turn)
        return cv.memory_from_proto(self._unary(self._stub.Restore, request, timeout_s).memory)

    def unconsolidate(
        self, abstraction_id: int, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> list[int]:
        """Undo a consolidation; returns the member ids, ACTIVE again (the abstraction becomes OBSOLETE)."""
        request = rq.unconsolidate(abstraction_id, request_id=request_id)
        return list(self._unary(self._stub.Unconsolidate, request, timeout_s).restored_ids)

    def report_outcome(
        self,
        retrieval_id: str,
        outcome: Outcome,
        *,
        used_memory_ids: Iterable[int] = (),
        note: str = "",
        reward: float | None = None,
        request_id: str | None = None,
        turn: int | None = None,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Tell the sidecar whether the memories of a retrieval helped; returns how many were updated.

        ``retrieval_id`` comes from a RecallResult or ContextResult (or is empty
        and ``used_memory_ids`` names the memories). Without ``used_memory_ids``
        every memory of the retrieval counts as used. ``reward`` in [-1, 1]
        grades the outcome. ``namespace`` confines it: a retrieval of another
        namespace is NotFoundError, ``used_memory_ids`` outside it InvalidArgumentError.
        """
        request = rq.report_outcome(
            retrieval_id,
            outcome,
            used_memory_ids=used_memory_ids,
            note=note,
            reward=reward,
            request_id=request_id,
            turn=turn,
            namespace=namespace,
        )
        return self._unary(self._stub.ReportOutcome, request, timeout_s).updated_count

    # --- reads ---------------------------------------------------------------------------------

    def recall(
        self,
        query: str | None = None,
        *,
        vector: VectorLike | None = None,
        k: int = 10,
        namespace: str | None = None,
        kinds: Iterable[MemoryKind] = (),
        entity: str | None = None,
        tags: Iterable[str] = (),
        valid_from_after: datetime | None = None,
        valid_from_before: datetime | None = None,
        mode: RecallMode | None = None,
        include_archived: bool = False,
        as_of: datetime | None = None,
        include_vectors: bool = False,
        turn: int | None = None,
        diversity: float = 0.0,
        peek: bool = False,
        timeout_s: float | None = None,
    ) -> RecallResult:
        """Find the ``k`` memories that best answer a query, best first.

        Give ``query`` text or a ``vector``. Filters combine with AND; ``tags``
        requires all of them. Only current memories (ACTIVE, plus ARCHIVED with
        ``include_archived``) unless ``mode=RecallMode.HISTORY``; ``as_of`` (world
        time) answers with the versions valid then. ``diversity`` in [0, 1) pushes
        near-duplicates of better-ranked memories down. ``peek`` looks without
        using: no access is counted and no retrieval recorded (the result's
        ``retrieval_id`` is empty), for tools that inspect memory rather than act on it.
        """
        request = rq.recall(
            query,
            vector=vector,
            k=k,
            filter=rq.recall_filter(
                namespace=namespace,
                kinds=kinds,
                entity=entity,
                tags=tags,
                valid_from_after=valid_from_after,
                valid_from_before=valid_from_before,
            ),
            mode=mode,
            include_archived=include_archived,
            as_of=as_of,
            include_vectors=include_vectors,
            turn=turn,
            diversity=diversity,
            peek=peek,
        )
        return cv.recall_result_from_proto(self._unary(self._stub.Recall, request, timeout_s))

    def build_context(
        self,
        query: str | None = None,
        *,
        vector: VectorLike | None = None,
        token_budget: int | None = None,
        language: str | None = None,
        namespace: str | None = None,
        kinds: Iterable[MemoryKind] = (),
        entity: str | None = None,
        tags: Iterable[str] = (),
        valid_from_after: datetime | None = None,
        valid_from_before: datetime | None = None,
        mode: RecallMode | None = None,
        as_of: datetime | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> ContextResult:
        """Build an annotated context block for a prompt within ``token_budget`` tokens (default 2000).

        ``language`` of the hints is ``"en"`` (default) or ``"zh"``; filters as in :meth:`recall`.
        """
        request = rq.build_context(
            query,
            vector=vector,
            token_budget=token_budget,
            language=language,
            filter=rq.recall_filter(
                namespace=namespace,
                kinds=kinds,
                entity=entity,
                tags=tags,
                valid_from_after=valid_from_after,
                valid_from_before=valid_from_before,
            ),
            mode=mode,
            as_of=as_of,
            turn=turn,
        )
        return cv.context_result_from_proto(self._unary(self._stub.BuildContext, request, timeout_s))

    def get(
        self, ids: int | Iterable[int], *, include_vectors: bool = False, timeout_s: float | None = None
    ) -> list[Memory]:
        """Read memories by id, in any state but EVICTED, in request order; missing ids are skipped."""
        request = rq.get(ids, include_vectors=include_vectors)
        return [cv.memory_from_proto(m) for m in self._unary(self._stub.Get, request, timeout_s).memories]

    def get_one(self, id: int, *, include_vectors: bool = False, timeout_s: float | None = None) -> Memory:
        """Read one memory by id; raises NotFoundError when it does not exist or was evicted."""
        found = self.get([id], include_vectors=include_vectors, timeout_s=timeout_s)
        if not found:
            raise NotFoundError(grpc.StatusCode.NOT_FOUND, f"memory {id} not found")
        return found[0]

    def history(self, subject: int | FactKey, *, timeout_s: float | None = None) -> HistoryResult:
        """The lineage of a memory (give its id) or the versions of a fact key, oldest first.

        A fact key's versions are the memories written with it, plain-text ones the sidecar read as it
        (``inferred``), and memories linked to those by supersession (a statement that retired one); the
        current one is ACTIVE or ARCHIVED with no ``superseded_by``.
        """
        return cv.history_from_proto(self._unary(self._stub.History, rq.history(subject), timeout_s))

    def list_entities(
        self,
        namespace: str | None = None,
        *,
        query: str = "",
        limit: int | None = None,
        timeout_s: float | None = None,
    ) -> EntityList:
        """The entities of a namespace (default ``"default"``), most recently changed first.

        ``query`` keeps the entities whose id contains it, ignoring case; ``limit`` is 1 to the sidecar's max_k
        (default 100), and ``total_count`` says how many matched.
        """
        request = rq.list_entities(namespace, query=query, limit=limit)
        return cv.entity_list_from_proto(self._unary(self._stub.ListEntities, request, timeout_s))

    def beliefs(
        self,
        entity: str,
        *,
        namespace: str | None = None,
        as_of: datetime | None = None,
        timeout_s: float | None = None,
    ) -> BeliefsResult:
        """What the agent believes about ``entity`` now: each attribute's current value, keyed or read from prose.

        Each belief names its memory (when it became true, source, confidence), open doubts, other current
        values, and the fact key to pass to :meth:`history`. An unknown entity has no beliefs (not an error).
        ``as_of`` (world time, timezone-aware) answers with the values held then: a version superseded since
        counts, one that became true later does not.
        """
        request = rq.beliefs(entity, namespace=namespace, as_of=as_of)
        return cv.beliefs_from_proto(self._unary(self._stub.Beliefs, request, timeout_s))

    def stats(self, *, timeout_s: float | None = None) -> Stats:
        """Counts per state and kind, index status, the last sequence number and recent sweeps."""
        return cv.stats_from_proto(self._unary(self._stub.GetStats, pb.GetStatsRequest(), timeout_s))

    # --- governance ----------------------------------------------------------------------------

    def govern(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> SweepStats:
        """Run a governance sweep and consolidation pass now (``dry_run``: compute transitions, apply nothing)."""
        request = rq.govern(dry_run=dry_run, namespace=namespace, turn=turn)
        return cv.govern_from_proto(self._unary(self._stub.Govern, request, timeout_s))

    def declare_framework(
        self,
        version: str,
        *,
        description: str = "",
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> FrameworkDeclared:
        """Declare a new cognitive-framework version; older memories get flagged for re-interpretation."""
        request = rq.declare_framework(version, description=description, request_id=request_id, turn=turn)
        return cv.framework_declared_from_proto(self._unary(self._stub.DeclareFramework, request, timeout_s))

    def get_policy(self, *, timeout_s: float | None = None) -> Policy:
        """The governance policy in force."""
        return cv.policy_from_proto(self._unary(self._stub.GetPolicy, pb.GetPolicyRequest(), timeout_s).policy)

    def update_policy(self, policy: Policy, *, request_id: str | None = None, timeout_s: float | None = None) -> Policy:
        """Replace the whole governance policy; returns the policy now in force.

        An invalid policy raises InvalidArgumentError and changes nothing.
        """
        request = rq.update_policy(policy, request_id=request_id)
        return cv.policy_from_proto(self._unary(self._stub.UpdatePolicy, request, timeout_s).policy)

    def set_experiment(
        self, experiment: Experiment, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> Experiment:
        """Run ``experiment`` (its arms rank retrievals side by side); an experiment with no arms ends it.

        Replaces the running experiment and resets the per-arm counts; GetStats
        (``stats().experiment``) shows how each arm does. An invalid experiment
        raises InvalidArgumentError and changes nothing.
        """
        request = rq.set_experiment(experiment, request_id=request_id)
        return cv.experiment_from_proto(self._unary(self._stub.SetExperiment, request, timeout_s).experiment)

    def promote_arm(self, arm: str, *, request_id: str | None = None, timeout_s: float | None = None) -> PromotedArm:
        """Make ``arm``'s policy the data directory's policy and end the experiment (NotFoundError: no such arm)."""
        response = self._unary(self._stub.PromoteArm, rq.promote_arm(arm, request_id=request_id), timeout_s)
        return PromotedArm(cv.policy_from_proto(response.policy), cv.experiment_stats_from_proto(response.final_stats))

    # --- streams -------------------------------------------------------------------------------

    def watch(
        self,
        after_sequence: int | None = None,
        *,
        namespace: str | None = None,
        types: Iterable[ChangeEventType] = (),
        resume: bool = False,
        max_attempts: int = WATCH_MAX_ATTEMPTS,
        timeout_s: float | None = None,
    ) -> Stream[ChangeEvent]:
        """Stream change-log events with a sequence above ``after_sequence``, then live ones.

        ``after_sequence=0`` replays the whole log; ``None`` delivers only events
        after the call. The stream has no deadline unless ``timeout_s`` is given
        (then it ends with DeadlineExceededError). Stop it with ``cancel()`` (from
        any thread) or by leaving a ``with`` block.

        With ``resume=True`` a stream cut with UNAVAILABLE (sidecar restarted,
        connection lost) or ended by the sidecar (graceful shutdown) reconnects
        from the last delivered sequence, so no event is lost or repeated; delays
        double from 0.1 s up to 5 s, and after ``max_attempts`` consecutive
        failures it raises UnavailableError (or ends, if the last failure was a
        clean end). When
        ``after_sequence`` is None, resuming first asks the sidecar for its last
        sequence (one GetStats call) so a reconnect has a place to resume from.
        """
        types = tuple(types)
        deadline = None if timeout_s is None else time.monotonic() + check_timeout(timeout_s)

        def body(stream: Stream[ChangeEvent]) -> Iterator[ChangeEvent]:
            after = after_sequence
            if resume and after is None:
                after = self.stats().last_sequence
            failures = 0
            while not stream.cancelled:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                call = self._stub.Watch(
                    rq.watch(after, namespace=namespace, types=types),
                    timeout=remaining,
                    metadata=self._metadata,
                    wait_for_ready=self._wait_for_ready,
                )
                stream._attach(call)
                try:
                    for response in call:
                        event = cv.change_event_from_proto(response.event)
                        after = event.sequence
                        failures = 0
                        yield event
                except grpc.RpcError as err:
                    if stream.cancelled:
                        return
                    if not resume or err.code() != grpc.StatusCode.UNAVAILABLE or failures >= max_attempts:
                        raise from_rpc_error(err) from err
                else:
                    # A Watch never ends by itself; a sidecar shutting down gracefully ends it cleanly,
                    # so a resuming stream treats a clean end as a disconnect too.
                    if not resume or stream.cancelled or failures >= max_attempts:
                        return
                finally:
                    # Also runs when the caller abandons the iterator: free the server-side stream.
                    _cancel(call)
                failures += 1
                if stream._sleep(backoff_delay_s(failures)):
                    return

        return Stream(body)

    def reviewer(self, name: str, *, kinds: Sequence[int] = (), timeout_s: float | None = None) -> ReviewSession:
        """Attach as a reviewer named ``name``: iterate ``proposals()`` and answer accept/reject/modify.

        ``kinds``: ``memevo.v1.ProposalKind`` values to receive (default all).
        No deadline unless ``timeout_s`` is given. See :mod:`memevo.client.review`.
        """
        timeout = None if timeout_s is None else check_timeout(timeout_s)
        return ReviewSession(self._stub, name, kinds, metadata=self._metadata, timeout_s=timeout)

    def review(
        self, requests: Iterable[pb.ReviewRequest], *, timeout_s: float | None = None
    ) -> Stream[pb.ReviewResponse]:
        """Lower-level: the bidirectional Review stream, taking and returning raw protobuf messages.

        Send a ``ReviewRequest(hello=ReviewerHello(...))`` first, then one
        ``Decision`` per ``Proposal`` received. ``requests`` is consumed on a gRPC
        thread. No deadline unless ``timeout_s`` is given. See :meth:`reviewer` for the typed session.
        """
        timeout = None if timeout_s is None else check_timeout(timeout_s)

        def body(stream: Stream[pb.ReviewResponse]) -> Iterator[pb.ReviewResponse]:
            call = self._stub.Review(
                iter(requests), timeout=timeout, metadata=self._metadata, wait_for_ready=self._wait_for_ready
            )
            stream._attach(call)
            try:
                yield from call
            except grpc.RpcError as err:
                if stream.cancelled:
                    return
                raise from_rpc_error(err) from err
            finally:
                _cancel(call)

        return Stream(body)
