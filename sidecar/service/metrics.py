"""Operations view of a sidecar: per-RPC metrics, a Prometheus text endpoint, request ids in (JSON) logs.

The exposition (text format 0.0.4) is written here rather than with
``prometheus_client``: a dozen metric families do not justify a dependency
and its process-global registry. Every call passes through
:class:`ObservingInterceptor`, which counts it by method and status code,
times it into a latency histogram, and binds a request id (metadata
``x-request-id``, else the request's ``request_id`` field, else a random one)
to every log record written while the call runs.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from memevo.v1 import memory_pb2

from ..embedding.batching import BATCH_SIZE_BUCKETS
from ..errors import FailedPrecondition
from .auth import is_loopback

if TYPE_CHECKING:
    from ..embedding.batching import QueryEmbedder
    from ..engine import Engine
    from ..governance.review import ReviewBroker

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
MAX_REQUEST_ID_CHARS = 128
RPC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SWEEP_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("memevo_request_id", default="")
rpc_var: contextvars.ContextVar[str] = contextvars.ContextVar("memevo_rpc", default="")


# ---- logs -----------------------------------------------------------------------------------


class RequestContextFilter(logging.Filter):
    """Adds ``request_id`` and ``rpc`` (empty outside a call) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.rpc = rpc_var.get()
        return True


_STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (epoch s), level, logger, message, request_id, rpc, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(*, json_format: bool, level: int) -> None:
    """Root logging to stderr, as text or JSON lines, with request ids on every record."""
    handler = logging.StreamHandler()
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RequestContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


# ---- metric primitives ------------------------------------------------------------------------


class Histogram:
    """Cumulative-bucket histogram (seconds); thread-safe."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value_s: float) -> None:
        """Count one observation."""
        position = len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value_s <= bound:
                position = i
                break
        with self._lock:
            self._counts[position] += 1
            self._sum += value_s

    def render(self, name: str, labels: str) -> list[str]:
        """Exposition lines ``name_bucket``, ``name_sum``, ``name_count`` with ``labels`` (``k="v",...``)."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        sep = "," if labels else ""
        lines = []
        running = 0
        for bound, count in zip(self.buckets, counts, strict=False):
            running += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        running += counts[-1]
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {running}')
        lines.append(f"{name}_sum{{{labels}}} {total:.6f}" if labels else f"{name}_sum {total:.6f}")
        lines.append(f"{name}_count{{{labels}}} {running}" if labels else f"{name}_count {running}")
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """The sidecar's counters and histograms, and the exposition of them plus gauges read from the engine."""

    def __init__(self) -> None:
        self.started_s = time.time()
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str, str], int] = {}
        self._latency: dict[tuple[str, str], Histogram] = {}
        self._sweeps: dict[str, Histogram] = {}
        self._in_flight: dict[tuple[str, str], int] = {}

    def call_started(self, service: str, method: str) -> None:
        """Count one call as running until :meth:`observe_call` ends it."""
        with self._lock:
            self._in_flight[(service, method)] = self._in_flight.get((service, method), 0) + 1

    def observe_call(self, service: str, method: str, code: str, seconds: float) -> None:
        """Count one finished call and time it."""
        key = (service, method)
        with self._lock:
            self._calls[(service, method, code)] = self._calls.get((service, method, code), 0) + 1
            if self._in_flight.get(key, 0) > 0:
                self._in_flight[key] -= 1
            histogram = self._latency.get(key)
            if histogram is None:
                histogram = self._latency[key] = Histogram(RPC_BUCKETS_S)
        histogram.observe(seconds)

    def observe_sweep(self, trigger: str, seconds: float) -> None:
        """Time one governance sweep; ``trigger`` labels it (request, schedule, event, dry_run, ...)."""
        with self._lock:
            histogram = self._sweeps.get(trigger)
            if histogram is None:
                histogram = self._sweeps[trigger] = Histogram(SWEEP_BUCKETS_S)
        histogram.observe(seconds)

    def calls(self) -> dict[tuple[str, str, str], int]:
        """A copy of the call counts by (service, method, code)."""
        with self._lock:
            return dict(self._calls)

    def render(
        self,
        engine: Engine | None = None,
        *,
        query_embedder: QueryEmbedder | None = None,
        review: ReviewBroker | None = None,
    ) -> str:
        """The whole exposition, text format 0.0.4; the query embedder's figures only when the engine embeds text,
        the chat endpoint's judgements (``review``) only when it has one (``--llm-url``)."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        with self._lock:
            calls = sorted(self._calls.items())
            latency = sorted(self._latency.items())
            sweeps = sorted(self._sweeps.items())
            in_flight = sorted(self._in_flight.items())
        family("memevo_rpc_calls_total", "counter", "Finished gRPC calls by service, method and status code.")
        for (service, method, code), count in calls:
            out.append(
                f'memevo_rpc_calls_total{{service="{_escape(service)}",method="{_escape(method)}",'
                f'code="{code}"}} {count}'
            )
        family("memevo_rpc_duration_seconds", "histogram", "Call duration (whole stream for streaming calls).")
        for (service, method), histogram in latency:
            out.extend(
                histogram.render(
                    "memevo_rpc_duration_seconds", f'service="{_escape(service)}",method="{_escape(method)}"'
                )
            )
        family("memevo_rpc_in_flight", "gauge", "Calls running now (streams until they end).")
        for (service, method), running in in_flight:
            out.append(f'memevo_rpc_in_flight{{service="{_escape(service)}",method="{_escape(method)}"}} {running}')
        family("memevo_sweep_duration_seconds", "histogram", "Governance sweep duration by trigger.")
        for trigger, histogram in sweeps:
            out.extend(histogram.render("memevo_sweep_duration_seconds", f'trigger="{_escape(trigger)}"'))
        family("memevo_uptime_seconds", "gauge", "Seconds since the sidecar started.")
        out.append(f"memevo_uptime_seconds {time.time() - self.started_s:.3f}")
        if engine is not None:
            _engine_gauges(engine, family, out)
            if query_embedder is not None and engine.embedder is not None:
                _query_embedder_metrics(query_embedder, family, out)
            if review is not None and engine.llm is not None:
                _llm_judge_metrics(review, family, out)
        return "\n".join(out) + "\n"


def _engine_gauges(engine: Engine, family: Callable[[str, str, str], None], out: list[str]) -> None:
    counts = engine.columns.count_by_state_kind()
    family("memevo_memories", "gauge", "Stored memories (evicted excluded) by lifecycle state and kind.")
    for (state, kind), count in sorted(counts.items()):
        state_label = _enum_label(memory_pb2.MemoryState, state, "MEMORY_STATE_")
        kind_label = _enum_label(memory_pb2.MemoryKind, kind, "MEMORY_KIND_")
        out.append(f'memevo_memories{{state="{state_label}",kind="{kind_label}"}} {count}')
    family("memevo_index_fresh_tail_vectors", "gauge", "Acknowledged vectors not yet in the HNSW graph.")
    out.append(f"memevo_index_fresh_tail_vectors {engine.index.tail_count}")
    family("memevo_index_graph_vectors", "gauge", "Vectors in the HNSW graph.")
    out.append(f"memevo_index_graph_vectors {engine.index.graph_count}")
    rebuild = engine.index.rebuild
    family("memevo_index_rebuilding", "gauge", "1 while vectors the saved graph lacked at start-up are inserted.")
    out.append(f"memevo_index_rebuilding {int(rebuild.remaining > 0)}")
    family(
        "memevo_index_rebuild_remaining_vectors", "gauge", "Vectors the saved graph lacked at start-up, not yet in it."
    )
    out.append(f"memevo_index_rebuild_remaining_vectors {rebuild.remaining}")
    family("memevo_index_rebuild_total_vectors", "gauge", "Vectors the saved graph lacked at start-up.")
    out.append(f"memevo_index_rebuild_total_vectors {rebuild.total}")
    family(
        "memevo_writes_refused",
        "gauge",
        "1 while writes are refused after a failed log write (full disk, read-only); reads still work.",
    )
    out.append(f"memevo_writes_refused {int(engine.store.write_refusal is not None)}")
    family(
        "memevo_second_look_statements_total",
        "counter",
        "Statements stored without a key or an inferred attribute that sweeps read again, since the start.",
    )
    out.append(f"memevo_second_look_statements_total {engine.second_looks}")
    family(
        "memevo_second_look_read_total",
        "counter",
        "Of those, the ones read as an attribute and settled against its slot's current memories.",
    )
    out.append(f"memevo_second_look_read_total {engine.second_look_reads}")
    family("memevo_second_look_tracked", "gauge", "Statements stored unread that wait for a second look.")
    out.append(f"memevo_second_look_tracked {engine.perceiver.unread_tracked}")
    judgements = engine.judgements
    if judgements is not None:
        family("memevo_judge_pending_pairs", "gauge", "Pairs queued for the pair judge or being judged.")
        out.append(f"memevo_judge_pending_pairs {judgements.pending()}")
        family("memevo_judge_pairs_total", "counter", "Pairs the pair judge settled (or gave up on) since the start.")
        out.append(f"memevo_judge_pairs_total {judgements.judged}")
        family("memevo_judge_dropped_pairs_total", "counter", "Pairs dropped unjudged because the queue was full.")
        out.append(f"memevo_judge_dropped_pairs_total {judgements.dropped}")
        family("memevo_judge_model_seconds_total", "counter", "Seconds the pair judge's model ran.")
        out.append(f"memevo_judge_model_seconds_total {engine.judge_seconds:.3f}")
        lags = sorted(judgements.lags())
        family("memevo_judge_lag_seconds", "summary", "From a write's durability to its pairs settled, latest 4,096.")
        for quantile in (0.5, 0.99):
            value = lags[min(len(lags) - 1, int(quantile * len(lags)))] if lags else 0.0
            out.append(f'memevo_judge_lag_seconds{{quantile="{quantile}"}} {value:.4f}')
        out.append(f"memevo_judge_lag_seconds_count {len(lags)}")
    family("memevo_changelog_last_sequence", "gauge", "Sequence number of the newest change-log event.")
    out.append(f"memevo_changelog_last_sequence {engine.store.last_sequence}")
    data_dir = Path(engine.config.data_dir)
    family("memevo_rocksdb_size_bytes", "gauge", "Bytes of the RocksDB files on disk.")
    out.append(f"memevo_rocksdb_size_bytes {_tree_bytes(data_dir / 'rocksdb')}")
    family("memevo_data_dir_size_bytes", "gauge", "Bytes of everything in the data directory (RocksDB and index).")
    out.append(f"memevo_data_dir_size_bytes {_tree_bytes(data_dir)}")


def _llm_judge_metrics(review: ReviewBroker, family: Callable[[str, str, str], None], out: list[str]) -> None:
    family(
        "memevo_llm_judge_calls_total", "counter", "Supersession calls to the chat endpoint (a batch of pairs is one)."
    )
    out.append(f"memevo_llm_judge_calls_total {review.llm_calls}")
    family(
        "memevo_llm_judge_pairs_asked_total",
        "counter",
        "Pairs put to the chat endpoint, what --llm-judgements-per-write budgets (a pair asked again counts again).",
    )
    out.append(f"memevo_llm_judge_pairs_asked_total {review.llm_judgements}")
    family("memevo_llm_judge_pairs_total", "counter", "Pairs the chat endpoint gave a verdict for.")
    out.append(f"memevo_llm_judge_pairs_total {review.llm_pairs_judged}")
    family(
        "memevo_llm_judge_cache_hits_total",
        "counter",
        "Pairs settled by the chat endpoint's earlier verdict on the same two statements (no call, no budget).",
    )
    out.append(f"memevo_llm_judge_cache_hits_total {review.llm_cache_hits}")
    family(
        "memevo_llm_judge_failures_total",
        "counter",
        "Supersession calls that failed, or whose answer left a pair without a verdict.",
    )
    out.append(f"memevo_llm_judge_failures_total {review.llm_failures}")
    family("memevo_llm_judge_deferred_total", "counter", "Doubts a pass left for later because the budget was spent.")
    out.append(f"memevo_llm_judge_deferred_total {review.llm_judgements_deferred}")


def _query_embedder_metrics(
    query_embedder: QueryEmbedder, family: Callable[[str, str, str], None], out: list[str]
) -> None:
    stats = query_embedder.stats()
    family("memevo_query_embed_requests_total", "counter", "Query texts a recall or context asked to embed.")
    out.append(f"memevo_query_embed_requests_total {stats.requests}")
    family("memevo_query_embed_cache_hits_total", "counter", "Query texts answered from the cache of recent queries.")
    out.append(f"memevo_query_embed_cache_hits_total {stats.cache_hits}")
    family("memevo_query_embed_texts_total", "counter", "Query texts sent to the embedder, summed over its runs.")
    out.append(f"memevo_query_embed_texts_total {stats.texts_embedded}")
    family(
        "memevo_query_embed_busy_seconds_total",
        "counter",
        "Seconds the embedder spent on query runs; its rate is the embedder's occupancy (0 to 1).",
    )
    out.append(f"memevo_query_embed_busy_seconds_total {stats.busy_s:.6f}")
    family("memevo_query_embed_waiting", "gauge", "Recalls queued for the next query embedding run.")
    out.append(f"memevo_query_embed_waiting {stats.waiting}")
    family("memevo_query_embed_batch_size", "histogram", "Query texts per embedder run (concurrent recalls share one).")
    running = 0
    for bound, count in zip(BATCH_SIZE_BUCKETS, stats.batch_sizes, strict=False):
        running += count
        out.append(f'memevo_query_embed_batch_size_bucket{{le="{bound}"}} {running}')
    running += stats.batch_sizes[-1]
    out.append(f'memevo_query_embed_batch_size_bucket{{le="+Inf"}} {running}')
    out.append(f"memevo_query_embed_batch_size_sum {stats.texts_embedded}")
    out.append(f"memevo_query_embed_batch_size_count {stats.batches}")


def _enum_label(enum: Any, value: int, prefix: str) -> str:
    try:
        name = str(enum.Name(value))
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower()


def _tree_bytes(root: Path) -> int:
    total = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # a file compaction removed meanwhile
    return total


def sweep_trigger(trigger: str) -> str:
    """The label of a sweep's trigger text: ``dry_run`` for dry runs, else the daemon's own (bounded) wording."""
    if trigger.endswith("(dry run)"):
        return "dry_run"
    return trigger or "unknown"


# ---- the interceptor --------------------------------------------------------------------------


def _request_id(metadata: Any, request: Any) -> str:
    for key, value in metadata or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str) and value:
            return value[:MAX_REQUEST_ID_CHARS]
    given = getattr(request, "request_id", "") if request is not None else ""
    return given if isinstance(given, str) and given else uuid.uuid4().hex[:16]


class ObservingInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Counts and times every call by status code, and binds its request id to log records."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method
        service, _, method = full.lstrip("/").rpartition("/")
        metadata = handler_call_details.invocation_metadata
        observe = self._observer(service, method, metadata)
        deserialize, serialize = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary is not None:
            behavior_uu = handler.unary_unary

            def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
                return observe(lambda: behavior_uu(request, context), context, request)

            return grpc.unary_unary_rpc_method_handler(unary_unary, deserialize, serialize)
        if handler.stream_unary is not None:
            behavior_su = handler.stream_unary

            def stream_unary(requests: Any, context: grpc.ServicerContext) -> Any:
                return observe(lambda: behavior_su(requests, context), context, None)

            return grpc.stream_unary_rpc_method_handler(stream_unary, deserialize, serialize)
        if handler.unary_stream is not None:
            behavior_us = handler.unary_stream

            def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                return self._observe_stream(service, method, behavior_us(request, context), context, request)

            return grpc.unary_stream_rpc_method_handler(unary_stream, deserialize, serialize)
        behavior_ss = handler.stream_stream
        if behavior_ss is None:
            return handler

        def stream_stream(requests: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            return self._observe_stream(service, method, behavior_ss(requests, context), context, None)

        return grpc.stream_stream_rpc_method_handler(stream_stream, deserialize, serialize)

    def _observer(
        self, service: str, method: str, metadata: Any
    ) -> Callable[[Callable[[], Any], grpc.ServicerContext, Any], Any]:
        def observe(step: Callable[[], Any], context: grpc.ServicerContext, request: Any) -> Any:
            request_id = _request_id(metadata, request)
            id_token, rpc_token = request_id_var.set(request_id), rpc_var.set(method)
            self.metrics.call_started(service, method)
            started = time.perf_counter()
            failed = True
            try:
                result = step()
                failed = False
                return result
            finally:
                self._finish(service, method, _code_of(context, failed=failed), started)
                request_id_var.reset(id_token)
                rpc_var.reset(rpc_token)

        return observe

    def _observe_stream(
        self,
        service: str,
        method: str,
        responses: Iterator[Any],
        context: grpc.ServicerContext,
        request: Any,
    ) -> Iterator[Any]:
        # Each step runs with the request id bound; the call is counted once, when the stream ends.
        request_id = _request_id(context.invocation_metadata(), request)
        self.metrics.call_started(service, method)
        started = time.perf_counter()
        code = "OK"
        try:
            while True:
                id_token, rpc_token = request_id_var.set(request_id), rpc_var.set(method)
                try:
                    item = next(responses)
                except StopIteration:
                    code = _code_of(context, failed=False)
                    return
                except BaseException:
                    code = _code_of(context, failed=True)
                    raise
                finally:
                    request_id_var.reset(id_token)
                    rpc_var.reset(rpc_token)
                yield item
        except GeneratorExit:
            code = "CANCELLED"  # the client went away mid-stream
            raise
        finally:
            id_token, rpc_token = request_id_var.set(request_id), rpc_var.set(method)
            self._finish(service, method, code, started)
            request_id_var.reset(id_token)
            rpc_var.reset(rpc_token)

    def _finish(self, service: str, method: str, code: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self.metrics.observe_call(service, method, code, seconds)
        if code != "OK" and log.isEnabledFor(logging.INFO):
            log.info(
                "%s %s in %.1f ms",
                method,
                code,
                seconds * 1e3,
                extra={"method": method, "code": code, "duration_ms": round(seconds * 1e3, 3)},
            )


def _code_of(context: grpc.ServicerContext, *, failed: bool) -> str:
    code = context.code()  # type: ignore[attr-defined]
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        for candidate in grpc.StatusCode:
            if candidate.value[0] == code:
                return candidate.name
    if failed:
        return "CANCELLED" if not context.is_active() else "UNKNOWN"
    return "OK"


# ---- the HTTP endpoint ------------------------------------------------------------------------


class MetricsEndpoint:
    """``GET /metrics`` on a loopback ``host:port``, served by a daemon thread."""

    def __init__(self, address: str, render: Callable[[], str]) -> None:
        if not is_loopback(address):
            raise FailedPrecondition(
                f"--metrics-listen {address}: the metrics endpoint listens on loopback only (127.0.0.1:PORT)",
                reason="LISTEN_REFUSED",
            )
        host, _, port_text = address.rpartition(":")
        try:
            port = int(port_text)
        except ValueError as exc:
            raise FailedPrecondition(
                f"--metrics-listen {address}: expected HOST:PORT", reason="LISTEN_REFUSED"
            ) from exc

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                try:
                    body = render().encode()
                except Exception:
                    log.exception("rendering metrics failed")
                    self.send_error(500, "rendering metrics failed")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes every few seconds would flood the log

        try:
            self._server = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", port), Handler)
        except OSError as exc:
            raise FailedPrecondition(f"--metrics-listen {address}: {exc}", reason="LISTEN_FAILED") from exc
        self._server.daemon_threads = True
        bound_host, bound_port = self._server.server_address[:2]
        self.address = f"{bound_host!s}:{bound_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="memevo-metrics", daemon=True)

    def start(self) -> None:
        """Start answering scrapes."""
        self._thread.start()

    def stop(self) -> None:
        """Stop answering and close the port."""
        self._server.shutdown()
        self._server.server_close()
