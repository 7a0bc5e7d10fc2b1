"""The OpenAI-compatible embedder, against a real HTTP server on 127.0.0.1 (no mocked urllib)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import numpy as np
import pytest

from memevo.sidecar.embedding import (
    Embedder,
    EmbedderConfig,
    EmbedderError,
    OpenAICompatEmbedder,
    make_embedder,
)

DIM = 8


@dataclass
class Reply:
    """What the fake server sends for one request."""

    status: int = 200
    body: Any = None
    """bytes as they are, anything else as JSON; None = embeddings of the request's input."""
    delay_s: float = 0.0
    hang_up: bool = False
    """Close the connection without an answer."""


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeServer:
    """An OpenAI-style embeddings server: replies are scripted, else computed from the input."""

    url: str = ""
    dimension: int = DIM
    replies: list[Reply] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def vector(self, text: str) -> list[float]:
        # Not unit length, so the client's normalisation shows; distinct per text.
        return [float(len(text) + 1), float(sum(map(ord, text)) % 97), *([3.0] * (self.dimension - 2))]

    def embeddings(self, texts: list[str]) -> dict[str, Any]:
        data = [{"object": "embedding", "index": i, "embedding": self.vector(t)} for i, t in enumerate(texts)]
        # Out of order on purpose: the client must sort by "index".
        return {"object": "list", "model": "fake", "data": data[::-1], "usage": {"prompt_tokens": 1}}


def expected_rows(server: FakeServer, texts: list[str]) -> np.ndarray:
    rows = np.array([server.vector(t) for t in texts], dtype=np.float64)
    normalised: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return normalised


class Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake: FakeServer = self.server.fake  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw.decode("utf-8"))
        with fake.lock:
            fake.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            reply = fake.replies.pop(0) if fake.replies else Reply()
        if reply.delay_s:
            fake.release.wait(reply.delay_s)
        if reply.hang_up:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.body is None:
            payload = json.dumps(fake.embeddings(body["input"])).encode()
        elif isinstance(reply.body, bytes):
            payload = reply.body
        else:
            payload = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy set in the environment must not carry our loopback requests away.
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.fake = fake  # type: ignore[attr-defined]
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def make(server: FakeServer, **kwargs: Any) -> OpenAICompatEmbedder:
    args: dict[str, Any] = {"url": server.url, "model": "fake-embed", "timeout_s": 5.0}
    args.update(kwargs)
    return OpenAICompatEmbedder(**args)


def test_embeds_in_order_normalised(server: FakeServer) -> None:
    texts = ["The cat sits on the mat", "A cat is sitting on a mat", "Stock markets fell", "猫坐在垫子上"]
    e = make(server, dimension=DIM)
    assert isinstance(e, Embedder)
    vectors = e.embed(texts)
    assert vectors.shape == (4, DIM)
    assert vectors.dtype == np.float32
    assert vectors.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(vectors, expected_rows(server, texts), atol=1e-6)
    [request] = server.seen
    assert request.path == "/v1/embeddings"
    assert request.body == {"model": "fake-embed", "input": texts}
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers


def test_api_key_is_sent_as_bearer(server: FakeServer) -> None:
    make(server, api_key="sk-test-123").embed(["x"])
    assert server.seen[0].headers["authorization"] == "Bearer sk-test-123"


def test_make_embedder_reads_key_from_named_env(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMEVO_TEST_KEY", "sk-from-env")
    config = EmbedderConfig(
        kind="openai", openai_url=server.url + "/", openai_model="m", openai_api_key_env="MEMEVO_TEST_KEY"
    )
    e = make_embedder(config)
    assert isinstance(e, OpenAICompatEmbedder)
    e.embed(["x"])
    assert server.seen[0].headers["authorization"] == "Bearer sk-from-env"
    assert server.seen[0].path == "/v1/embeddings"  # the trailing slash is dropped
    # The key never shows in what gets logged or recorded.
    assert "sk-from-env" not in repr(e)
    assert "sk-from-env" not in e.identity


def test_unset_key_env_sends_no_header(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMEVO_TEST_KEY", raising=False)
    config = EmbedderConfig(
        kind="openai", openai_url=server.url, openai_model="m", openai_api_key_env="MEMEVO_TEST_KEY"
    )
    e = make_embedder(config)
    assert e is not None
    e.embed(["x"])
    assert "authorization" not in server.seen[0].headers


def test_batches_by_batch_size(server: FakeServer) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = make(server, batch_size=3).embed(texts)
    assert [len(s.body["input"]) for s in server.seen] == [3, 3, 1]
    np.testing.assert_allclose(vectors, expected_rows(server, texts), atol=1e-6)


def test_dimension_is_learnt_from_first_response(server: FakeServer) -> None:
    e = make(server)
    e.embed(["first"])
    assert e.dimension == DIM
    assert e.identity == f"openai:{server.url}:fake-embed:{DIM}"
    assert len(server.seen) == 1


def test_dimension_probe_when_asked_first(server: FakeServer) -> None:
    e = make(server)
    assert e.dimension == DIM
    assert len(server.seen) == 1
    assert e.embed([]).shape == (0, DIM)
    assert len(server.seen) == 1


def test_empty_input_with_known_dimension_sends_nothing(server: FakeServer) -> None:
    vectors = make(server, dimension=DIM).embed([])
    assert vectors.shape == (0, DIM)
    assert vectors.dtype == np.float32
    assert server.seen == []


def test_dimension_mismatch_with_config(server: FakeServer) -> None:
    with pytest.raises(EmbedderError, match=r"8-d vectors.*expected 384") as info:
        make(server, dimension=384).embed(["x"])
    assert info.value.retryable is False


def test_dimension_change_between_responses(server: FakeServer) -> None:
    e = make(server)
    e.embed(["x"])
    server.dimension = DIM + 1
    with pytest.raises(EmbedderError, match="expected 8"):
        e.embed(["y"])


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (408, True),
        (400, False),
        (401, False),
        (404, False),
    ],
)
def test_http_errors(server: FakeServer, status: int, retryable: bool) -> None:
    server.replies.append(Reply(status=status, body={"error": {"message": f"nope {status}", "type": "x"}}))
    with pytest.raises(EmbedderError, match=f"HTTP {status}: nope {status}") as info:
        make(server).embed(["x"])
    assert info.value.retryable is retryable
    assert info.value.code == (grpc.StatusCode.UNAVAILABLE if retryable else grpc.StatusCode.INTERNAL)


def test_http_error_with_plain_body(server: FakeServer) -> None:
    server.replies.append(Reply(status=503, body=b"upstream overloaded"))
    with pytest.raises(EmbedderError, match="HTTP 503: upstream overloaded"):
        make(server).embed(["x"])


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAICompatEmbedder(url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=2.0)
    with pytest.raises(EmbedderError, match="unreachable") as info:
        e.embed(["x"])
    assert info.value.retryable is True


def test_timeout_is_retryable(server: FakeServer) -> None:
    server.replies.append(Reply(delay_s=5.0))
    e = make(server, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(EmbedderError, match=r"did not answer within 0\.2 s") as info:
        e.embed(["x"])
    assert info.value.retryable is True
    assert time.monotonic() - started < 3.0


def test_dropped_connection_is_retryable(server: FakeServer) -> None:
    server.replies.append(Reply(hang_up=True))
    with pytest.raises(EmbedderError) as info:
        make(server).embed(["x"])
    assert info.value.retryable is True


def embedding_reply(*vectors: Any, indices: list[Any] | None = None) -> dict[str, Any]:
    idx = indices if indices is not None else list(range(len(vectors)))
    return {"data": [{"index": i, "embedding": v} for i, v in zip(idx, vectors, strict=True)]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>502 Bad Gateway</html>", "invalid JSON"),
        ({"object": "list"}, "no 'data' list"),
        (embedding_reply([1.0, 2.0]), "1 embeddings for 2 texts"),
        (embedding_reply([1.0, 2.0], [1.0, 0.0], indices=[0, 0]), "indices"),
        (embedding_reply([1.0, 2.0], [1.0], indices=[0, 1]), "different lengths"),
        (embedding_reply("AACAPwAAAEA=", "AACAPwAAAEA="), "not a non-empty list"),
        (embedding_reply([0.0, 0.0], [1.0, 0.0]), "all-zero"),
        (b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}, {"index": 1, "embedding": [1.0, 1.0]}]}', "NaN"),
    ],
)
def test_malformed_responses(server: FakeServer, body: Any, message: str) -> None:
    server.replies.append(Reply(body=body))
    with pytest.raises(EmbedderError, match=message) as info:
        make(server).embed(["a", "b"])
    assert info.value.retryable is False


def test_missing_indices_mean_list_order(server: FakeServer) -> None:
    server.replies.append(Reply(body={"data": [{"embedding": [3.0, 4.0]}, {"embedding": [0.0, 2.0]}]}))
    vectors = make(server).embed(["a", "b"])
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 1.0]], atol=1e-6)


def test_concurrent_calls(server: FakeServer) -> None:
    e = make(server, dimension=DIM)
    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        try:
            results[i] = e.embed([f"thread {i} text {j}" for j in range(3)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    for i, got in results.items():
        want = expected_rows(server, [f"thread {i} text {j}" for j in range(3)])
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_closed_embedder_raises(server: FakeServer) -> None:
    e = make(server, dimension=DIM)
    e.close()
    with pytest.raises(EmbedderError, match="closed"):
        e.embed(["x"])
    assert server.seen == []


def test_lone_surrogate_is_a_value_error(server: FakeServer) -> None:
    with pytest.raises(ValueError, match=r"texts\[0\] is not valid Unicode"):
        make(server).embed(["broken \ud800 text"])
    assert server.seen == []


def test_bare_string_is_a_type_error(server: FakeServer) -> None:
    with pytest.raises(TypeError):
        make(server).embed("x")


def openai_config(**overrides: Any) -> EmbedderConfig:
    base: dict[str, Any] = {"kind": "openai", "openai_url": "http://127.0.0.1:8080/v1", "openai_model": "m"}
    base.update(overrides)
    return EmbedderConfig(**base)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (openai_config(openai_url=""), "needs openai_url"),
        (openai_config(openai_url="127.0.0.1:8080/v1"), "not an http"),
        (openai_config(openai_url="ftp://host/v1"), "not an http"),
        (openai_config(openai_url="http:///v1"), "not an http"),
        (openai_config(openai_url="http://h/v1?key=1"), "query"),
        (openai_config(openai_url="http://user:secret@h/v1"), "credentials"),
        (openai_config(openai_url="ftp://user:secret@h/v1?x=1"), "credentials"),
        (openai_config(openai_model=""), "needs openai_model"),
        (openai_config(openai_dimension=-1), "openai_dimension"),
        (openai_config(timeout_s=0.0), "timeout_s"),
        (openai_config(timeout_s=float("nan")), "timeout_s"),
        (openai_config(batch_size=0), "batch_size"),
    ],
)
def test_make_embedder_rejects_bad_openai_config(config: EmbedderConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        make_embedder(config)
    assert "secret" not in str(info.value)


def test_make_embedder_builds_openai_without_network() -> None:
    e = make_embedder(openai_config(openai_dimension=1536))
    assert isinstance(e, OpenAICompatEmbedder)
    assert e.identity == "openai:http://127.0.0.1:8080/v1:m:1536"
    assert e.dimension == 1536
