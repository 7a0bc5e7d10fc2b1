"""The asyncio memevo client, :class:`AsyncMemoryClient` (on ``grpc.aio``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

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


class AsyncStream(AsyncIterator[_T]):
    """A cancellable async iterator over a server stream; ``async with`` cancels it on exit.

    ``cancel()`` (a plain method, callable from any task of the loop) ends the
    iteration quietly, even while waiting for the next item. Errors arrive as
    :class:`~memevo.client.errors.MemevoError` from ``__anext__``.
    """

    def __init__(self, body: Callable[[AsyncStream[_T]], AsyncGenerator[_T, None]]) -> None:
        self._cancelled = False
        self._wakeup: asyncio.Event | None = None
        self._call: _Cancellable | None = None
        # An async generator: nothing is sent until the first __anext__.
        self._items = body(self)

    def __aiter__(self) -> AsyncStream[_T]:
        return self

    async def __anext__(self) -> _T:
        return await self._items.__anext__()

    def cancel(self) -> None:
        """End the stream now; safe to call more than once."""
        self._cancelled = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._call is not None:
            self._call.cancel()

    async def aclose(self) -> None:
        """Cancel the stream and release its generator."""
        self.cancel()
        # RuntimeError: another task is inside __anext__, and cancel() already makes it finish by itself.
        with contextlib.suppress(RuntimeError):
            await self._items.aclose()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._cancelled

    def _attach(self, call: _Cancellable) -> None:
        self._call = call
        if self._cancelled:
            call.cancel()

    async def _sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when cancelled meanwhile."""
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._cancelled:
            return True
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    async def __aenter__(self) -> AsyncStream[_T]:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class AsyncMemoryClient:
    """An asyncio client of one memevo sidecar, with the same methods and arguments as MemoryClient.

    The channel opens on the first call, in the event loop running it; use one
    client from one event loop (or ``close()`` it before using it from another).
    ``target``, ``token``, ``timeout_s``, ``options`` and
    ``wait_for_ready`` mean what they mean for :class:`~memevo.client.MemoryClient`.
    Unary and client-streaming methods are coroutines; ``watch`` and ``review``
    return async iterators at once. Every method raises a
    :class:`~memevo.client.errors.MemevoError` subclass for a failed call.
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
        self._options = channel_options(options)
        # Made on first use: a grpc.aio channel binds to the event loop running when it is created,
        # and a client is often constructed before asyncio.run() starts the loop that uses it.
        self._channel: grpc.aio.Channel | None = None
        self._api: pb_grpc.MemoryServiceAsyncStub | None = None

    @property
    def target(self) -> str:
        """The address this client talks to."""
        return self._target

    @property
    def _stub(self) -> pb_grpc.MemoryServiceAsyncStub:
        if self._api is None:
            self._channel = grpc.aio.insecure_channel(self._target, options=self._options)
            self._api = pb_grpc.MemoryServiceStub(self._channel)
        return self._api

    async def close(self, grace_s: float | None = None) -> None:
        """Close the channel; calls in flight get ``grace_s`` seconds to finish, then are cancelled.

        The client can be used again afterwards: the next call opens a new channel.
        """
        channel, self._channel, self._api = self._channel, None, None
        if channel is not None:
            await channel.close(grace_s)

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncMemoryClient({self._target!r}, timeout_s={self._timeout_s})"

    # --- plumbing ------------------------------------------------------------------------------

    def _timeout(self, timeout_s: float | None) -> float:
        return self._timeout_s if timeout_s is None else check_timeout(timeout_s)

    async def _unary(
        self, method: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp], request: _Req, timeout_s: float | None
    ) -> _Resp:
        try:
            return await method(
                request,
                timeout=self._timeout(timeout_s),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err

    # --- writes --------------------------------------------------------------------------------

    async def remember(
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
        """Store one memory; see :meth:`memevo.client.MemoryClient.remember`."""
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
        request = rq.remember(item, request_id=request_id, turn=turn)
        response = await self._unary(self._stub.Remember, request, timeout_s)
        return cv.write_result_from_proto(response.result, replayed=response.replayed)

    async def remember_batch(
        self,
        memories: Sequence[MemoryInput],
        *,
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> list[WriteResult]:
        """Store several memories, all or nothing; see :meth:`memevo.client.MemoryClient.remember_batch`."""
        request = rq.remember_batch(memories, request_id=request_id, turn=turn)
        response = await self._unary(self._stub.RememberBatch, request, timeout_s)
        return [cv.write_result_from_proto(r, replayed=response.replayed) for r in response.results]

    async def remember_stream(
        self,
        memories: Iterable[MemoryInput | tuple[MemoryInput, str]]
        | AsyncIterable[MemoryInput | tuple[MemoryInput, str]],
        *,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> StreamResult:
        """Stream memories (a plain or async iterable); see :meth:`memevo.client.MemoryClient.remember_stream`."""
        failure: list[BaseException] = []

        async def requests() -> AsyncIterator[pb.RememberStreamRequest]:
            groups = rq.StreamGroups(turn)
            try:
                if isinstance(memories, AsyncIterable):
                    async for item in memories:
                        if (full := groups.add(item)) is not None:
                            yield full
                else:
                    for item in memories:
                        if (full := groups.add(item)) is not None:
                            yield full
                if (last := groups.flush()) is not None:
                    yield last
            except Exception as exc:
                # grpc.aio would report it only as a cancelled call; keep it to re-raise to the caller.
                failure.append(exc)
                raise

        try:
            response = await self._stub.RememberStream(
                requests(),
                timeout=self._timeout(timeout_s),
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except (grpc.RpcError, asyncio.CancelledError) as err:
            if failure:
                raise failure[0] from None
            if isinstance(err, asyncio.CancelledError):
                raise
            raise from_rpc_error(err) from err
        return cv.stream_result_from_proto(response)

    async def forget(
        self,
        ids: int | Iterable[int],
        *,
        reason: str = "",
        keep_history: bool = False,
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> ForgetResult:
        """Delete memories or keep them as OBSOLETE history; see :meth:`memevo.client.MemoryClient.forget`."""
        request = rq.forget(ids, reason=reason, keep_history=keep_history, request_id=request_id, turn=turn)
        return cv.forget_result_from_proto(await self._unary(self._stub.Forget, request, timeout_s))

    async def supersede(
        self,
        old_id: int,
        new: int | MemoryInput,
        *,
        reason: str = "",
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> SupersedeResult:
        """Declare that ``new`` replaces ``old_id``; see :meth:`memevo.client.MemoryClient.supersede`."""
        request = rq.supersede(old_id, new, reason=reason, request_id=request_id, turn=turn)
        return cv.supersede_result_from_proto(await self._unary(self._stub.Supersede, request, timeout_s))

    async def restore(
        self,
        memory_id: int,
        *,
        reason: str = "",
        request_id: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> Memory:
        """Undo a supersession or a doubt; see :meth:`memevo.client.MemoryClient.restore`."""
        request = rq.restore(memory_id, reason=reason, request_id=request_id, turn=turn)
        return cv.memory_from_proto((await self._unary(self._stub.Restore, request, timeout_s)).memory)

    async def unconsolidate(
        self, abstraction_id: int, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> list[int]:
        """Undo a consolidation; returns the member ids, ACTIVE again."""
        request = rq.unconsolidate(abstraction_id, request_id=request_id)
        return list((await self._unary(self._stub.Unconsolidate, request, timeout_s)).restored_ids)

    async def report_outcome(
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
        """Tell the sidecar whether a retrieval's memories helped; returns how many were updated."""
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
        return (await self._unary(self._stub.ReportOutcome, request, timeout_s)).updated_count

    # --- reads ---------------------------------------------------------------------------------

    async def recall(
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
        """Find the ``k`` best memories for a query; see :meth:`memevo.client.MemoryClient.recall`."""
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
        return cv.recall_result_from_proto(await self._unary(self._stub.Recall, request, timeout_s))

    async def build_context(
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
        """Build an annotated context block; see :meth:`memevo.client.MemoryClient.build_context`."""
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
        return cv.context_result_from_proto(await self._unary(self._stub.BuildContext, request, timeout_s))

    async def get(
        self, ids: int | Iterable[int], *, include_vectors: bool = False, timeout_s: float | None = None
    ) -> list[Memory]:
        """Read memories by id, in any state but EVICTED, in request order; missing ids are skipped."""
        request = rq.get(ids, include_vectors=include_vectors)
        response = await self._unary(self._stub.Get, request, timeout_s)
        return [cv.memory_from_proto(m) for m in response.memories]

    async def get_one(self, id: int, *, include_vectors: bool = False, timeout_s: float | None = None) -> Memory:
        """Read one memory by id; raises NotFoundError when it does not exist or was evicted."""
        found = await self.get([id], include_vectors=include_vectors, timeout_s=timeout_s)
        if not found:
            raise NotFoundError(grpc.StatusCode.NOT_FOUND, f"memory {id} not found")
        return found[0]

    async def history(self, subject: int | FactKey, *, timeout_s: float | None = None) -> HistoryResult:
        """The lineage of a memory (its id) or the versions of a fact key, oldest first.

        A fact key's versions are the memories written with it, plain-text ones the sidecar read as it
        (``inferred``), and memories linked to those by supersession (a statement that retired one); the
        current one is ACTIVE or ARCHIVED with no ``superseded_by``.
        """
        return cv.history_from_proto(await self._unary(self._stub.History, rq.history(subject), timeout_s))

    async def list_entities(
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
        return cv.entity_list_from_proto(await self._unary(self._stub.ListEntities, request, timeout_s))

    async def beliefs(
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
        return cv.beliefs_from_proto(await self._unary(self._stub.Beliefs, request, timeout_s))

    async def stats(self, *, timeout_s: float | None = None) -> Stats:
        """Counts per state and kind, index status, the last sequence number and recent sweeps."""
        return cv.stats_from_proto(await self._unary(self._stub.GetStats, pb.GetStatsRequest(), timeout_s))

    # --- governance ----------------------------------------------------------------------------

    async def govern(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        turn: int | None = None,
        timeout_s: float | None = None,
    ) -> SweepStats:
        """Run a governance sweep and consolidation pass now (``dry_run``: compute transitions, apply nothing)."""
        request = rq.govern(dry_run=dry_run, namespace=namespace, turn=turn)
        return cv.govern_from_proto(await self._unary(self._stub.Govern, request, timeout_s))

    async def declare_framework(
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
        response = await self._unary(self._stub.DeclareFramework, request, timeout_s)
        return cv.framework_declared_from_proto(response)

    async def get_policy(self, *, timeout_s: float | None = None) -> Policy:
        """The governance policy in force."""
        response = await self._unary(self._stub.GetPolicy, pb.GetPolicyRequest(), timeout_s)
        return cv.policy_from_proto(response.policy)

    async def update_policy(
        self, policy: Policy, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> Policy:
        """Replace the whole governance policy; returns the policy now in force (InvalidArgumentError if bad)."""
        request = rq.update_policy(policy, request_id=request_id)
        return cv.policy_from_proto((await self._unary(self._stub.UpdatePolicy, request, timeout_s)).policy)

    async def set_experiment(
        self, experiment: Experiment, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> Experiment:
        """Run ``experiment`` (an experiment with no arms ends it); see MemoryClient.set_experiment."""
        request = rq.set_experiment(experiment, request_id=request_id)
        response = await self._unary(self._stub.SetExperiment, request, timeout_s)
        return cv.experiment_from_proto(response.experiment)

    async def promote_arm(
        self, arm: str, *, request_id: str | None = None, timeout_s: float | None = None
    ) -> PromotedArm:
        """Make ``arm``'s policy the data directory's policy and end the experiment (NotFoundError: no such arm)."""
        response = await self._unary(self._stub.PromoteArm, rq.promote_arm(arm, request_id=request_id), timeout_s)
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
    ) -> AsyncStream[ChangeEvent]:
        """Stream change-log events above ``after_sequence``, then live ones; use with ``async for``.

        Same arguments and resume behaviour as :meth:`memevo.client.MemoryClient.watch`.
        Not a coroutine: it returns the stream at once, and the call starts with
        the first ``__anext__``.
        """
        types = tuple(types)
        deadline = None if timeout_s is None else time.monotonic() + check_timeout(timeout_s)

        async def body(stream: AsyncStream[ChangeEvent]) -> AsyncGenerator[ChangeEvent, None]:
            after = after_sequence
            if resume and after is None:
                after = (await self.stats()).last_sequence
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
                    async for response in call:
                        event = cv.change_event_from_proto(response.event)
                        after = event.sequence
                        failures = 0
                        yield event
                except asyncio.CancelledError:
                    # grpc.aio raises CancelledError for a call cancelled locally; only ours ends quietly.
                    if stream.cancelled:
                        return
                    raise
                except grpc.RpcError as err:
                    if stream.cancelled:
                        return
                    if not resume or err.code() != grpc.StatusCode.UNAVAILABLE or failures >= max_attempts:
                        raise from_rpc_error(err) from err
                else:
                    # A Watch never ends by itself; a sidecar shutting down gracefully ends it cleanly.
                    if not resume or stream.cancelled or failures >= max_attempts:
                        return
                finally:
                    call.cancel()
                failures += 1
                if await stream._sleep(backoff_delay_s(failures)):
                    return

        return AsyncStream(body)

    def review(
        self,
        requests: Iterable[pb.ReviewRequest] | AsyncIterable[pb.ReviewRequest],
        *,
        timeout_s: float | None = None,
    ) -> AsyncStream[pb.ReviewResponse]:
        """Lower-level: the bidirectional Review stream, taking and returning raw protobuf messages.

        See :meth:`memevo.client.MemoryClient.review`. No deadline unless ``timeout_s`` is given.
        """
        timeout = None if timeout_s is None else check_timeout(timeout_s)

        async def body(stream: AsyncStream[pb.ReviewResponse]) -> AsyncGenerator[pb.ReviewResponse, None]:
            request_iter: AsyncIterator[pb.ReviewRequest] | Iterable[pb.ReviewRequest]
            request_iter = aiter(requests) if isinstance(requests, AsyncIterable) else requests
            call = self._stub.Review(
                request_iter,  # type: ignore[arg-type]
                timeout=timeout,
                metadata=self._metadata,
                wait_for_ready=self._wait_for_ready,
            )
            stream._attach(call)
            try:
                async for response in call:
                    yield response
            except asyncio.CancelledError:
                if stream.cancelled:
                    return
                raise
            except grpc.RpcError as err:
                if stream.cancelled:
                    return
                raise from_rpc_error(err) from err
            finally:
                call.cancel()

        return AsyncStream(body)
