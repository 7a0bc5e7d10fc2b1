"""Assemble and run the gRPC server: MemoryService, health, reflection, auth, limits, shutdown."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc

from ..config import SidecarConfig
from ..engine import Engine
from ..errors import FailedPrecondition, Unauthenticated
from ..governance.daemon import GovernanceDaemon
from .servicer import MemoryServicer, to_status

log = logging.getLogger(__name__)

SERVICE_NAME: str = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
DENIED_MESSAGE = "missing or wrong sidecar token: send metadata 'authorization: Bearer <token>'"

# Keepalive: answer client pings every 20 s, tolerate idle Watch/Review streams.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses every call without ``authorization: Bearer <token>``, except health checks."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

        self._deny = grpc.unary_unary_rpc_method_handler(self._deny_unary)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler_call_details.method.startswith(HEALTH_METHOD_PREFIX):
            return continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if (
                key == "authorization"
                and isinstance(value, str)
                and value.startswith("Bearer ")
                and hmac.compare_digest(value[len("Bearer ") :].encode(), self._token)
            ):
                return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        # Answer with the same streaming shape as the real method, so the client reads the status.
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(self._deny_stream)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(self._deny_unary)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(self._deny_stream)
        return self._deny

    @staticmethod
    def _deny_unary(request: Any, context: grpc.ServicerContext) -> None:
        context.abort_with_status(to_status(Unauthenticated(DENIED_MESSAGE)))

    @staticmethod
    def _deny_stream(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort_with_status(to_status(Unauthenticated(DENIED_MESSAGE)))
        yield  # pragma: no cover


def _prepare_unix_socket(address: str) -> Path:
    path = Path(address[len("unix://") :])
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        if not stat.S_ISSOCK(path.stat().st_mode):
            raise FailedPrecondition(f"{path} exists and is not a socket", reason="LISTEN_FAILED")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # a stale socket left by a crashed sidecar
        else:
            raise FailedPrecondition(f"another process is serving on {path}", reason="LISTEN_FAILED")
        finally:
            probe.close()
    return path


class Sidecar:
    """A running sidecar: engine + gRPC server. ``start`` it; ``stop`` is idempotent."""

    def __init__(self, config: SidecarConfig, *, token: str | None = None) -> None:
        self.config = config
        self.engine = Engine(config)
        self.daemon = GovernanceDaemon(self.engine, config.governance)
        self.servicer = MemoryServicer(self.engine, self.daemon)
        self.health = health.HealthServicer()
        limit = config.limits.max_message_bytes
        options = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            *KEEPALIVE_OPTIONS,
        ]
        interceptors: list[grpc.ServerInterceptor[Any, Any]] = [TokenInterceptor(token)] if token else []
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="memevo-rpc"),
            options=options,
            interceptors=interceptors,
            maximum_concurrent_rpcs=config.workers * 8,
        )
        memory_service_pb2_grpc.add_MemoryServiceServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            self.server,
        )
        self.addresses: list[str] = []
        self._sockets: list[Path] = []
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    def start(self) -> list[str]:
        """Bind every listen address, start serving, mark health SERVING; returns the bound addresses."""
        try:
            for address in self.config.listen:
                if address.startswith("unix://"):
                    path = _prepare_unix_socket(address)
                    self.server.add_insecure_port(address)
                    self._sockets.append(path)
                    self.addresses.append(address)
                else:
                    port = self.server.add_insecure_port(address)
                    if port == 0:
                        raise FailedPrecondition(f"cannot listen on {address}", reason="LISTEN_FAILED")
                    host = address.rsplit(":", 1)[0]
                    self.addresses.append(f"{host}:{port}")
            self.server.start()
        except Exception:
            self.engine.close()
            raise
        for path in self._sockets:
            os.chmod(path, 0o600)  # only this user may talk to the sidecar
        self.daemon.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.ready_file is not None:
            tmp = Path(str(self.config.ready_file) + ".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "listen": self.addresses}))
            os.replace(tmp, self.config.ready_file)
        log.info("memevo serving %s on %s", self.config.data_dir, ", ".join(self.addresses))
        return self.addresses

    def stop(self) -> None:
        """NOT_SERVING, stop taking calls, drain for the grace period, save the index, close RocksDB."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.health.enter_graceful_shutdown()
            self.servicer.stopping.set()
            self.server.stop(self.config.grace_s).wait()
            self.daemon.stop()
            self.engine.close()
            for path in self._sockets:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._stopped.set()
            log.info("memevo stopped")
