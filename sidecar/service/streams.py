"""Long-lived streams run on threads of their own, and how many may be open is bounded, per caller and overall.

gRPC's synchronous server holds a worker thread for the whole life of a call. An
open Watch, an idle RememberStream or a Review waiting for proposals would each
pin one of the server's workers, and as many streams as workers left no thread
for any other call, health checks included. Every streaming method (the
health service's Watch too) therefore runs on a separate pool
(``experimental_thread_pool``, which gRPC consults per method handler), so the
``workers`` threads stay for unary calls and health. A stream past the caps is
refused at once with RESOURCE_EXHAUSTED, before it holds anything.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc

from ..errors import FailedPrecondition, ResourceExhausted
from .auth import TokenTable, caller_identity

log = logging.getLogger(__name__)

SPARE_THREADS = 8
"""Stream-pool threads beyond the overall cap: a stream over the cap still needs a thread to be refused on."""


class StreamGate(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Moves streaming calls to their own pool and refuses those past ``max_streams`` or ``max_per_caller``.

    A caller is the bearer token when the sidecar has tokens, else the client certificate, else the
    peer address: a TCP connection, while every caller on a unix socket shares the one address
    ``unix:`` (so without tokens the per-caller cap is the socket's). Install it first (outermost):
    gRPC reads the pool from the outermost handler's behavior.
    """

    def __init__(self, *, max_streams: int, max_per_caller: int, tokens: TokenTable | None) -> None:
        if max_streams < 1 or max_per_caller < 1:
            raise FailedPrecondition(
                f"--max-streams ({max_streams}) and --max-streams-per-caller ({max_per_caller}) must be at least 1",
                reason="BAD_CONFIG",
            )
        self.max_streams = max_streams
        self.max_per_caller = max_per_caller
        self._tokens = tokens
        self._lock = threading.Lock()
        self._open = 0
        self._by_caller: dict[str, int] = {}
        self.refused = 0
        """Streams refused by a cap since start."""
        self.pool = futures.ThreadPoolExecutor(
            max_workers=max_streams + SPARE_THREADS, thread_name_prefix="memevo-stream"
        )

    @property
    def open_streams(self) -> int:
        """Streams running now."""
        return self._open

    def close(self) -> None:
        """Let the pool's threads end once their streams have (the server cancels them at stop)."""
        self.pool.shutdown(wait=False)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        method = handler_call_details.method
        deserialize, serialize = handler.request_deserializer, handler.response_serializer
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            def stream_unary(requests: Any, context: grpc.ServicerContext) -> Any:
                with self._admitted(method, context):
                    return inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(self._pooled(stream_unary), deserialize, serialize)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                with self._admitted(method, context):
                    yield from inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(self._pooled(unary_stream), deserialize, serialize)
        inner_ss = handler.stream_stream
        if inner_ss is None:
            return handler

        def stream_stream(requests: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            with self._admitted(method, context):
                yield from inner_ss(requests, context)

        return grpc.stream_stream_rpc_method_handler(self._pooled(stream_stream), deserialize, serialize)

    def _pooled(self, behavior: Callable[..., Any]) -> Callable[..., Any]:
        behavior.experimental_thread_pool = self.pool  # type: ignore[attr-defined]
        return behavior

    @contextmanager
    def _admitted(self, method: str, context: grpc.ServicerContext) -> Iterator[None]:
        """Count the stream while it runs; abort it with RESOURCE_EXHAUSTED when a cap is reached."""
        caller = caller_identity(self._tokens, context) or context.peer() or ""
        cap = self.max_per_caller
        with self._lock:
            held = self._by_caller.get(caller, 0)
            if self._open >= self.max_streams:
                refusal = (
                    f"{self._open} streams are open, the most this sidecar serves (--max-streams {self.max_streams})"
                )
            elif held >= cap:
                refusal = (
                    f"this caller has {held} streams open, its most (--max-streams-per-caller {self.max_per_caller})"
                )
            else:
                refusal = ""
                self._open += 1
                self._by_caller[caller] = held + 1
            if refusal:
                self.refused += 1
        if refusal:
            log.info("refused %s: %s", method, refusal)
            from .servicer import to_status  # the servicer imports the modules this one does

            error = ResourceExhausted(
                f"{refusal}; close a Watch, Review or RememberStream stream, or retry later",
                reason="TOO_MANY_STREAMS",
                metadata={"max_streams": str(self.max_streams), "max_streams_per_caller": str(self.max_per_caller)},
            )
            context.abort_with_status(to_status(error))
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                left = self._by_caller[caller] - 1
                if left:
                    self._by_caller[caller] = left
                else:
                    del self._by_caller[caller]
