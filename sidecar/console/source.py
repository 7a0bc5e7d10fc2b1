"""The console's one way to the sidecar: gRPC calls carrying the caller's bearer token."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from memevo.client._channel import auth_metadata, channel_options
from memevo.v1 import events_pb2, memory_service_pb2, memory_service_pb2_grpc, review_pb2

DEFAULT_TIMEOUT_S = 10.0
"""Deadline of each unary call a page makes, seconds."""
_Outgoing = memory_service_pb2.ReviewRequest | None
PROBE_TIMEOUT_S = 5.0
"""Deadline of the start-up call that asks whether the sidecar needs a token, seconds."""
REVIEW_TIMEOUT_S = 30.0
"""Deadline of the short Review streams that list or decide proposals, seconds."""

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class SourceError(Exception):
    """A failed sidecar call, as the console answers it: an HTTP status, the gRPC code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    @classmethod
    def of(cls, error: grpc.RpcError) -> SourceError:
        code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        return cls(HTTP_STATUS.get(code, 502), code.name, details or code.name)


@dataclass
class Stream:
    """A server stream being read on a helper thread: ``next_item`` with a timeout, ``cancel`` to end it."""

    call: Any
    items: queue.Queue[Any]

    _END = object()

    def next_item(self, timeout_s: float) -> Any:
        """The next message; None on timeout; raises SourceError when the call failed; StopIteration at the end."""
        try:
            item = self.items.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if item is Stream._END:
            raise StopIteration
        if isinstance(item, SourceError):
            raise item
        return item

    def cancel(self) -> None:
        self.call.cancel()


def _pump(call: Any) -> Stream:
    items: queue.Queue[Any] = queue.Queue(maxsize=10_000)
    stream = Stream(call, items)

    def read() -> None:
        try:
            for message in call:
                items.put(message)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                items.put(SourceError.of(error))
        items.put(Stream._END)

    threading.Thread(target=read, name="memevo-console-stream", daemon=True).start()
    return stream


class ConsoleSource:
    """gRPC calls to one sidecar; each takes the token of the caller it is made for (None: no token)."""

    def __init__(self, target: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(target, options=channel_options())
        self._stub = memory_service_pb2_grpc.MemoryServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def _unary(self, method: Callable[..., Any], request: Any, token: str | None) -> Any:
        try:
            return method(request, timeout=self.timeout_s, metadata=auth_metadata(token))
        except grpc.RpcError as error:
            raise SourceError.of(error) from error

    def probe(self) -> tuple[bool, str | None]:
        """Ask the sidecar once, without a token: (whether it refused for want of one, its embedder if it said)."""
        try:
            stats = self._stub.GetStats(memory_service_pb2.GetStatsRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as error:
            refused = isinstance(error, grpc.Call) and error.code() == grpc.StatusCode.UNAUTHENTICATED
            return refused, None
        return False, stats.embedder

    def stats(self, token: str | None) -> memory_service_pb2.GetStatsResponse:
        response: memory_service_pb2.GetStatsResponse = self._unary(
            self._stub.GetStats, memory_service_pb2.GetStatsRequest(), token
        )
        return response

    def policy(self, token: str | None) -> memory_service_pb2.GetPolicyResponse:
        response: memory_service_pb2.GetPolicyResponse = self._unary(
            self._stub.GetPolicy, memory_service_pb2.GetPolicyRequest(), token
        )
        return response

    def recall(self, request: memory_service_pb2.RecallRequest, token: str | None) -> memory_service_pb2.RecallResponse:
        response: memory_service_pb2.RecallResponse = self._unary(self._stub.Recall, request, token)
        return response

    def history(
        self, request: memory_service_pb2.HistoryRequest, token: str | None
    ) -> memory_service_pb2.HistoryResponse:
        response: memory_service_pb2.HistoryResponse = self._unary(self._stub.History, request, token)
        return response

    def entities(
        self, request: memory_service_pb2.ListEntitiesRequest, token: str | None
    ) -> memory_service_pb2.ListEntitiesResponse:
        response: memory_service_pb2.ListEntitiesResponse = self._unary(self._stub.ListEntities, request, token)
        return response

    def beliefs(
        self, request: memory_service_pb2.BeliefsRequest, token: str | None
    ) -> memory_service_pb2.BeliefsResponse:
        response: memory_service_pb2.BeliefsResponse = self._unary(self._stub.Beliefs, request, token)
        return response

    def get(self, ids: list[int], token: str | None) -> memory_service_pb2.GetResponse:
        response: memory_service_pb2.GetResponse = self._unary(
            self._stub.Get, memory_service_pb2.GetRequest(ids=ids), token
        )
        return response

    def forget(self, request: memory_service_pb2.ForgetRequest, token: str | None) -> memory_service_pb2.ForgetResponse:
        response: memory_service_pb2.ForgetResponse = self._unary(self._stub.Forget, request, token)
        return response

    def restore(
        self, request: memory_service_pb2.RestoreRequest, token: str | None
    ) -> memory_service_pb2.RestoreResponse:
        response: memory_service_pb2.RestoreResponse = self._unary(self._stub.Restore, request, token)
        return response

    def supersede(
        self, request: memory_service_pb2.SupersedeRequest, token: str | None
    ) -> memory_service_pb2.SupersedeResponse:
        response: memory_service_pb2.SupersedeResponse = self._unary(self._stub.Supersede, request, token)
        return response

    def watch(self, request: memory_service_pb2.WatchRequest, token: str | None) -> Stream:
        """The change log from ``request.after_sequence`` on (then live), read on a helper thread."""
        return _pump(self._stub.Watch(request, metadata=auth_metadata(token)))

    def events(self, after_sequence: int, token: str | None) -> Iterator[events_pb2.ChangeEvent]:
        """The change log as a plain iterator (for the digest's own thread); raises SourceError when it fails."""
        call = self._stub.Watch(
            memory_service_pb2.WatchRequest(after_sequence=after_sequence), metadata=auth_metadata(token)
        )
        self._digest_call = call
        try:
            for response in call:
                yield response.event
        except grpc.RpcError as error:
            raise SourceError.of(error) from error

    def cancel_events(self) -> None:
        call = getattr(self, "_digest_call", None)
        if call is not None:
            call.cancel()

    # ---- review ---------------------------------------------------------------------------------

    def _observe(self, token: str | None, name: str) -> tuple[Any, queue.Queue[_Outgoing]]:
        outbox: queue.Queue[_Outgoing] = queue.Queue()
        outbox.put(
            memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer=name, observe=True))
        )

        def requests() -> Iterator[memory_service_pb2.ReviewRequest]:
            while (item := outbox.get()) is not None:
                yield item

        call = self._stub.Review(requests(), timeout=REVIEW_TIMEOUT_S, metadata=auth_metadata(token))
        return call, outbox

    def open_proposals(self, token: str | None) -> list[review_pb2.Proposal]:
        """Every open proposal, with its memories as they are now (an observing Review stream, closed at once)."""
        call, outbox = self._observe(token, "console")
        proposals: dict[str, review_pb2.Proposal] = {}
        try:
            for response in call:
                which = response.WhichOneof("message")
                if which == "proposal":
                    proposals[response.proposal.id] = response.proposal
                elif which == "settled_proposal_id":
                    proposals.pop(response.settled_proposal_id, None)
                elif which == "caught_up":
                    break
        except grpc.RpcError as error:
            raise SourceError.of(error) from error
        finally:
            outbox.put(None)
            call.cancel()
        return list(proposals.values())

    def decide(self, decision: review_pb2.Decision, token: str | None, *, reviewer: str) -> bool:
        """Send one decision; True once the sidecar reports the proposal settled, False if it was not open."""
        call, outbox = self._observe(token, reviewer)
        known = False
        try:
            for response in call:
                which = response.WhichOneof("message")
                if which == "proposal" and response.proposal.id == decision.proposal_id:
                    known = True
                elif which == "caught_up":
                    if not known:
                        return False
                    outbox.put(memory_service_pb2.ReviewRequest(decision=decision))
                elif which == "settled_proposal_id" and response.settled_proposal_id == decision.proposal_id:
                    return True
        except grpc.RpcError as error:
            raise SourceError.of(error) from error
        finally:
            outbox.put(None)
            call.cancel()
        return False
