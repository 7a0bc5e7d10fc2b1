"""Assemble and run the gRPC server: MemoryService, health, reflection, auth, limits, shutdown."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import stat
import threading
import time
from collections import deque
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc

from ..config import SidecarConfig
from ..console.cli import check_console_listen, console_for, write_ready
from ..engine import Engine
from ..errors import FailedPrecondition, StorageError
from ..governance.daemon import GovernanceDaemon
from ..store.files import restrict_new_files
from ..store.rocks import WRITES_HEALTH_NAME
from .auth import EVERYTHING, AuthInterceptor, TokenTable, check_listen_policy, server_credentials
from .metrics import Metrics, MetricsEndpoint, ObservingInterceptor, sweep_trigger
from .reflection import MemberAwarePool
from .servicer import MemoryServicer
from .streams import StreamGate
from .validation import DecodingInterceptor

if TYPE_CHECKING:
    from ..console.server import Console

log = logging.getLogger(__name__)

SERVICE_NAME: str = memory_service_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name

MIN_CONCURRENT_RPCS = 1024
"""Calls the server accepts at once (running or queued for a worker), at least."""

# Keepalive: answer client pings every 20 s, tolerate idle Watch/Review streams.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]


class _TimedSweeps(deque[memory_service_pb2.SweepStats]):
    """The daemon's list of recent sweeps, timing each sweep into the metrics as it is recorded.

    Every sweep (scheduled tier, event-driven, requested) ends by recording its
    stats here, so this one place sees them all without reaching into the daemon.
    """

    def __init__(self, recent: deque[memory_service_pb2.SweepStats], metrics: Metrics) -> None:
        super().__init__(recent, maxlen=recent.maxlen)
        self._metrics = metrics

    def appendleft(self, stats: memory_service_pb2.SweepStats) -> None:
        self._metrics.observe_sweep(sweep_trigger(stats.trigger), stats.total_ms / 1e3)
        super().appendleft(stats)


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
    """A running sidecar: engine + gRPC server. ``start`` it; ``stop`` is idempotent.

    ``token`` (one token for every namespace) and ``tokens`` (a table of scoped
    tokens) switch authentication on; listen addresses beyond loopback are
    refused unless the config allows them (see :func:`check_listen_policy`).
    """

    def __init__(
        self,
        config: SidecarConfig,
        *,
        token: str | None = None,
        tokens: TokenTable | None = None,
        console_listen: str = "",
    ) -> None:
        table = TokenTable()
        table.merge(tokens or TokenTable())
        if token:
            try:
                table.add(token, EVERYTHING)
            except ValueError as exc:
                raise FailedPrecondition(f"bad sidecar token: {exc}", reason="BAD_TOKEN") from exc
        # Refused before the data directory is opened: a misconfiguration must not touch the data.
        check_listen_policy(config, has_tokens=bool(table))
        if console_listen:
            check_console_listen(console_listen)
        self._console_listen = console_listen
        self.console: Console | None = None
        credentials = server_credentials(config)
        self.streams = StreamGate(
            max_streams=config.max_streams,
            max_per_caller=config.max_streams_per_caller,
            tokens=table or None,
            max_unauthenticated=config.max_unauthenticated_streams,
            max_unauthenticated_per_peer=config.max_unauthenticated_streams_per_peer,
        )
        self.config = config
        self.tokens = table
        self.metrics = Metrics()
        restrict_new_files()  # before RocksDB creates its first file
        self.engine = Engine(config)
        self.daemon = GovernanceDaemon(self.engine, config.governance)
        self.daemon.recent = _TimedSweeps(self.daemon.recent, self.metrics)
        self.servicer = MemoryServicer(self.engine, self.daemon)
        self.servicer.tokens = table if table else None
        self.health = health.HealthServicer()
        limit = config.limits.max_message_bytes
        options = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            *KEEPALIVE_OPTIONS,
        ]
        # Observing before authentication: it also counts the calls authentication refuses.
        # Decoding before both, so a message that does not parse gets INVALID_ARGUMENT, not INTERNAL.
        # The stream gate first: gRPC takes a method's thread pool from the outermost handler.
        interceptors: list[grpc.ServerInterceptor[Any, Any]] = [
            self.streams,
            DecodingInterceptor(),
            ObservingInterceptor(self.metrics),
        ]
        if table:
            interceptors.append(AuthInterceptor(table))
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="memevo-rpc"),
            options=options,
            interceptors=interceptors,
            # Calls beyond the workers wait in gRPC's queue (no thread, no GIL) up to this bound, then
            # get RESOURCE_EXHAUSTED; few workers and a deep queue keep latency low under load.
            maximum_concurrent_rpcs=max(config.workers * 8, MIN_CONCURRENT_RPCS),
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
            pool=MemberAwarePool(),  # type: ignore[arg-type]  # duck-typed: the servicer calls Find* only
        )
        self._credentials = credentials
        self.metrics_endpoint: MetricsEndpoint | None = None
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
                    if self._credentials is not None:
                        port = self.server.add_secure_port(address, self._credentials)
                    else:
                        port = self.server.add_insecure_port(address)
                    if port == 0:
                        raise FailedPrecondition(f"cannot listen on {address}", reason="LISTEN_FAILED")
                    host = address.rsplit(":", 1)[0]
                    self.addresses.append(f"{host}:{port}")
            if self.config.metrics_listen:
                self.metrics_endpoint = MetricsEndpoint(
                    self.config.metrics_listen,
                    lambda: self.metrics.render(
                        self.engine, query_embedder=self.servicer.query_embedder, review=self.servicer.review
                    ),
                )
            self.server.start()
            if self._console_listen:
                self.console = console_for(self, self._console_listen)
        except Exception:
            self.server.stop(0)
            self.engine.close()
            raise
        for path in self._sockets:
            os.chmod(path, 0o600)  # only this user may talk to the sidecar
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.start()
        if self.console is not None:
            self.console.start()
        # What start-up loaded (columns, word index, caches: ~340k objects at 100k memories) lives until
        # stop and holds no garbage: frozen, the collector's full passes (~90 ms over all of it, measured)
        # skip it, so a write never waits for one.
        gc.collect()
        gc.freeze()
        self.daemon.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        # Reads are served while a full disk refuses writes: their own entry says whether writes are taken.
        self.engine.store.on_writes_changed = self._writes_changed
        self._writes_changed(self.engine.store.write_refusal)
        if self.config.ready_file is not None:
            ready: dict[str, Any] = {"pid": os.getpid(), "listen": self.addresses}
            if self.metrics_endpoint is not None:
                ready["metrics"] = self.metrics_endpoint.address
            if self.console is not None:
                ready["console"] = self.console.address
                ready["console_url"] = self.console.url
            write_ready(self.config.ready_file, ready)
        log.info(
            "memevo serving %s on %s%s%s",
            self.config.data_dir,
            ", ".join(self.addresses),
            " (TLS on TCP)" if self._credentials is not None else "",
            f"; metrics on http://{self.metrics_endpoint.address}/metrics" if self.metrics_endpoint else "",
        )
        if self.console is not None:
            log.info("memevo console on %s", self.console.url)
        return self.addresses

    def _writes_changed(self, refusal: StorageError | None) -> None:
        serving = health_pb2.HealthCheckResponse.NOT_SERVING if refusal else health_pb2.HealthCheckResponse.SERVING
        self.health.set(WRITES_HEALTH_NAME, serving)

    def stop(self) -> None:
        """NOT_SERVING, refuse new calls, drain in-flight ones for the grace period, checkpoint, save, close."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            started = time.perf_counter()
            if self.console is not None:
                self.console.stop()  # its streams first: the server's drain would wait for them
            self.health.enter_graceful_shutdown()
            self.servicer.stopping.set()
            # New calls are refused from here on; calls still running after grace_s are cancelled.
            self.server.stop(self.config.grace_s).wait()
            self.streams.close()
            drained = time.perf_counter()
            self.servicer.close()  # the review worker, before the engine it uses closes
            self.daemon.stop()  # its last step checkpoints the access statistics
            self.engine.close()
            gc.unfreeze()  # what this sidecar held may now be collected (tests start many in one process)
            if self.metrics_endpoint is not None:
                self.metrics_endpoint.stop()
            for path in self._sockets:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._stopped.set()
            log.info(
                "memevo stopped (drained in %.2f s, checkpointed and closed in %.2f s)",
                drained - started,
                time.perf_counter() - drained,
            )
