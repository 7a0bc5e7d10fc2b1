"""Long-lived streams run on threads of their own, and how many may be open is bounded, per caller and overall.

gRPC's synchronous server holds a worker thread for the whole life of a call. An
open Watch, an idle RememberStream or a Review waiting for proposals would each
pin one of the server's workers, and as many streams as workers left no thread
for any other call, health checks included. Every streaming method (the
health service's Watch too) therefore runs on a separate pool
(``experimental_thread_pool``, which gRPC consults per method handler), so the
``workers`` threads stay for unary calls and health. A stream past the caps is
refused at once with RESOURCE_EXHAUSTED, before it holds anything.

On a sidecar with tokens, only a caller whose token the sidecar verified counts
against ``max_streams`` (and against its token's ``max_per_caller``). The health
service needs no token, so a health Watch without a valid one runs on a small
pool of its own, capped per peer host and overall: invented tokens or fresh
connections cannot take the places of authenticated Watch, Review and
RememberStream streams. Any other stream without a valid token is not admitted
at all: the authentication interceptor answers it UNAUTHENTICATED at once.
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
from .auth import HEALTH_METHOD_PREFIX, TokenTable, caller_identity

log = logging.getLogger(__name__)

SPARE_THREADS = 8
"""Stream-pool threads beyond the overall cap: a stream over the cap still needs a thread to be refused on."""


def peer_host(peer: str) -> str:
    """The host part of a gRPC peer string: ``ipv4:127.0.0.1:5000`` -> ``ipv4:127.0.0.1``; ``unix:...`` unchanged.

    Per host, not per connection: one connection per stream must not buy a fresh cap each time.
    """
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer


class _Gate:
    """One counted pool of streams: an overall cap and a cap per key (``who`` names the pool in messages)."""

    def __init__(self, *, most: int, most_per_key: int, flag: str, per_key_flag: str, who: str) -> None:
        self.most = most
        self.most_per_key = most_per_key
        self.flag = flag
        self.per_key_flag = per_key_flag
        self.who = who
        self.open = 0
        self.by_key: dict[str, int] = {}

    def refusal(self, key: str) -> str:
        """Why a stream of ``key`` cannot open now ("" when it can); call under the gate's lock."""
        held = self.by_key.get(key, 0)
        if self.open >= self.most:
            return f"{self.open} {self.who}streams are open, the most this sidecar serves ({self.flag} {self.most})"
        if held >= self.most_per_key:
            return (
                f"this {'peer' if self.who else 'caller'} has {held} {self.who}streams open, "
                f"its most ({self.per_key_flag} {self.most_per_key})"
            )
        return ""

    def enter(self, key: str) -> None:
        self.open += 1
        self.by_key[key] = self.by_key.get(key, 0) + 1

    def leave(self, key: str) -> None:
        self.open -= 1
        left = self.by_key[key] - 1
        if left:
            self.by_key[key] = left
        else:
            del self.by_key[key]


class StreamGate(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Moves streaming calls to their own pools and refuses those past their caps.

    A caller is its verified bearer token when the sidecar has tokens, else the client certificate,
    else the peer address: a TCP connection, while every caller on a unix socket shares the one
    address ``unix:`` (so without tokens the per-caller cap is the socket's). A health Watch without a
    valid token (on a sidecar with tokens) counts only against ``max_unauthenticated`` and, per peer
    host, ``max_unauthenticated_per_peer``, on a pool of its own. Install it first (outermost): gRPC
    reads the pool from the outermost handler's behavior.
    """

    def __init__(
        self,
        *,
        max_streams: int,
        max_per_caller: int,
        tokens: TokenTable | None,
        max_unauthenticated: int = 32,
        max_unauthenticated_per_peer: int = 4,
    ) -> None:
        if max_streams < 1 or max_per_caller < 1:
            raise FailedPrecondition(
                f"--max-streams ({max_streams}) and --max-streams-per-caller ({max_per_caller}) must be at least 1",
                reason="BAD_CONFIG",
            )
        if max_unauthenticated < 1 or max_unauthenticated_per_peer < 1:
            raise FailedPrecondition(
                f"--max-unauthenticated-streams ({max_unauthenticated}) and --max-unauthenticated-streams-per-peer "
                f"({max_unauthenticated_per_peer}) must be at least 1",
                reason="BAD_CONFIG",
            )
        self.max_streams = max_streams
        self.max_per_caller = max_per_caller
        self._tokens = tokens
        self._lock = threading.Lock()
        self._authenticated = _Gate(
            most=max_streams,
            most_per_key=max_per_caller,
            flag="--max-streams",
            per_key_flag="--max-streams-per-caller",
            who="",
        )
        self._unauthenticated = _Gate(
            most=max_unauthenticated,
            most_per_key=max_unauthenticated_per_peer,
            flag="--max-unauthenticated-streams",
            per_key_flag="--max-unauthenticated-streams-per-peer",
            who="unauthenticated health ",
        )
        self.refused = 0
        """Streams refused by a cap since start."""
        self.pool = futures.ThreadPoolExecutor(
            max_workers=max_streams + SPARE_THREADS, thread_name_prefix="memevo-stream"
        )
        # Their own threads: held unauthenticated streams must not leave an admitted stream waiting for one.
        self.unauthenticated_pool = futures.ThreadPoolExecutor(
            max_workers=max_unauthenticated + SPARE_THREADS, thread_name_prefix="memevo-health-stream"
        )

    @property
    def open_streams(self) -> int:
        """Streams running now (authenticated and unauthenticated health streams)."""
        return self._authenticated.open + self._unauthenticated.open

    def close(self) -> None:
        """Let the pools' threads end once their streams have (the server cancels them at stop)."""
        self.pool.shutdown(wait=False)
        self.unauthenticated_pool.shutdown(wait=False)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        method = handler_call_details.method
        verified = not self._tokens or self._tokens.scope_of(handler_call_details.invocation_metadata) is not None
        if not verified and not method.startswith(HEALTH_METHOD_PREFIX):
            # The authentication interceptor's refusal, answered at once on a worker: nothing to count.
            return handler
        gate = self._authenticated if verified else self._unauthenticated
        pool = self.pool if verified else self.unauthenticated_pool
        deserialize, serialize = handler.request_deserializer, handler.response_serializer
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            def stream_unary(requests: Any, context: grpc.ServicerContext) -> Any:
                with self._admitted(method, context, gate):
                    return inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(_pooled(stream_unary, pool), deserialize, serialize)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                with self._admitted(method, context, gate):
                    yield from inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(_pooled(unary_stream, pool), deserialize, serialize)
        inner_ss = handler.stream_stream
        if inner_ss is None:
            return handler

        def stream_stream(requests: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            with self._admitted(method, context, gate):
                yield from inner_ss(requests, context)

        return grpc.stream_stream_rpc_method_handler(_pooled(stream_stream, pool), deserialize, serialize)

    @contextmanager
    def _admitted(self, method: str, context: grpc.ServicerContext, gate: _Gate) -> Iterator[None]:
        """Count the stream while it runs; abort it with RESOURCE_EXHAUSTED when a cap of ``gate`` is reached."""
        if gate is self._authenticated:
            key = caller_identity(self._tokens, context) or context.peer() or ""
        else:
            key = peer_host(context.peer() or "")
        with self._lock:
            refusal = gate.refusal(key)
            if refusal:
                self.refused += 1
            else:
                gate.enter(key)
        if refusal:
            log.info("refused %s: %s", method, refusal)
            from .servicer import to_status  # the servicer imports the modules this one does

            if gate is self._authenticated:
                advice = "close a Watch, Review or RememberStream stream, or retry later"
            else:
                advice = "close a health Watch, send the sidecar's token with it, or use health Check"
            error = ResourceExhausted(
                f"{refusal}; {advice}",
                reason="TOO_MANY_STREAMS",
                metadata={
                    gate.flag.lstrip("-").replace("-", "_"): str(gate.most),
                    gate.per_key_flag.lstrip("-").replace("-", "_"): str(gate.most_per_key),
                },
            )
            context.abort_with_status(to_status(error))
        try:
            yield
        finally:
            with self._lock:
                gate.leave(key)


def _pooled(behavior: Callable[..., Any], pool: futures.ThreadPoolExecutor) -> Callable[..., Any]:
    behavior.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return behavior
