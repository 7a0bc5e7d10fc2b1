"""Text recalls from concurrent callers share the sidecar's query embedder: same results, own errors, a cache.

Against a real ``memevo serve``: with the bundled model, recalls by text from
eight threads at once find what the query's own vector (embedded alone, in
this process) finds, with the same similarities; a repeated query is served
from the cache; the metrics count requests, hits and runs. With an
OpenAI-compatible endpoint (a fake on 127.0.0.1) that refuses one text, only
the recall that asked for it fails.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from helpers import memory, pack, stub
from test_metrics import scrape, value

from memevo.sidecar.embedding import LocalEmbedder
from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration

NAMESPACE = "qe"
FACTS = [f"{name} {verb} {thing}." for name in ("Ana", "Bo", "Cy", "Di") for verb, thing in (
    ("keeps bees in", "the garden behind the school"),
    ("plays cello with", "a quartet on Sundays"),
    ("is allergic to", "shellfish and peanuts"),
    ("works nights at", "the harbour control tower"),
    ("collects stamps from", "islands in the Pacific"),
)]  # fmt: skip
QUERIES = [
    f"{question} {name}?"
    for name in ("Ana", "Bo", "Cy", "Di")
    for question in ("Where does the hobby beekeeping happen for", "Which instrument is played by", "What food hurts")
]
CALLERS = 8
SIMILARITY_TOLERANCE = 1e-4
"""A shared run pads short texts to the longest; the masked padding changes a vector by float rounding only."""


def ready_metrics(process: Sidecar) -> str:
    ready = json.loads(Path(process.args[process.args.index("--ready-file") + 1]).read_text())
    address: str = ready["metrics"]
    return address


def recall(service: Any, query: str, vector: bytes = b"") -> memory_service_pb2.RecallResponse:
    response: memory_service_pb2.RecallResponse = service.Recall(
        memory_service_pb2.RecallRequest(
            query=query, query_vector=vector, k=5, filter=memory_service_pb2.RecallFilter(namespace=NAMESPACE)
        )
    )
    return response


def similarities(response: memory_service_pb2.RecallResponse) -> dict[int, float]:
    return {hit.memory.id: hit.similarity for hit in response.memories}


@pytest.fixture(scope="module")
def text_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path_factory.mktemp("qe-data"), "--metrics-listen", "127.0.0.1:0", embedder="local")
    service = stub(process.unix_target)
    service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(text, namespace=NAMESPACE) for text in FACTS])
    )
    yield process
    process.stop()


def test_concurrent_text_recalls_match_the_query_embedded_alone(text_sidecar: Sidecar) -> None:
    before = scrape(ready_metrics(text_sidecar))[1]
    barrier = threading.Barrier(CALLERS)
    results: dict[str, memory_service_pb2.RecallResponse] = {}
    errors: list[BaseException] = []

    def caller(index: int) -> None:
        service = stub(text_sidecar.tcp_target)
        barrier.wait(timeout=30)
        try:
            for query in QUERIES[index::CALLERS]:
                results[query] = recall(service, query)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sorted(results) == sorted(QUERIES)

    # Each query's own vector, embedded alone with the same model, sent with the same text.
    alone = LocalEmbedder()
    service = stub(text_sidecar.unix_target)
    for query in QUERIES:
        expected = recall(service, query, pack(alone.embed([query])[0]))
        got = results[query]
        assert got.memories[0].memory.id == expected.memories[0].memory.id, query
        got_sims, expected_sims = similarities(got), similarities(expected)
        for memory_id in got_sims.keys() & expected_sims.keys():
            assert got_sims[memory_id] == pytest.approx(expected_sims[memory_id], abs=SIMILARITY_TOLERANCE)
        assert len(got_sims.keys() & expected_sims.keys()) >= 3
    alone.close()

    after = scrape(ready_metrics(text_sidecar))[1]
    asked = value(after, "memevo_query_embed_requests_total") - value(before, "memevo_query_embed_requests_total")
    embedded = value(after, "memevo_query_embed_texts_total") - value(before, "memevo_query_embed_texts_total")
    runs = value(after, "memevo_query_embed_batch_size_count") - value(before, "memevo_query_embed_batch_size_count")
    assert asked == len(QUERIES)  # the recalls with a vector did not embed
    assert embedded == len(QUERIES)  # every query text was new
    assert 1 <= runs <= len(QUERIES)
    assert value(after, "memevo_query_embed_batch_size_sum") == value(after, "memevo_query_embed_texts_total")
    assert value(after, "memevo_query_embed_busy_seconds_total") > 0
    assert value(after, "memevo_query_embed_waiting") == 0


def test_a_repeated_query_is_served_from_the_cache_with_the_same_vector(text_sidecar: Sidecar) -> None:
    service = stub(text_sidecar.unix_target)
    query = "Who keeps bees near a school, and where exactly?"
    first = recall(service, query)
    before = scrape(ready_metrics(text_sidecar))[1]
    again = recall(service, query)
    context = service.BuildContext(
        memory_service_pb2.BuildContextRequest(
            query=query, token_budget=200, filter=memory_service_pb2.RecallFilter(namespace=NAMESPACE)
        )
    )
    after = scrape(ready_metrics(text_sidecar))[1]
    assert similarities(again) == similarities(first)  # exactly: the same vector
    assert context.items
    hits = value(after, "memevo_query_embed_cache_hits_total") - value(before, "memevo_query_embed_cache_hits_total")
    embedded = value(after, "memevo_query_embed_texts_total") - value(before, "memevo_query_embed_texts_total")
    assert (hits, embedded) == (2, 0)


class _RefusingEmbeddings(BaseHTTPRequestHandler):
    """OpenAI-style embeddings: 400 for a request holding a text with "poison", slow enough for callers to queue."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"]
        with self.server.lock:
            self.server.requests.append(list(texts))
        self.server.gate.wait(0.2)  # never set: each request takes 0.2 s
        if any("poison" in t for t in texts):
            reply, status = {"error": {"message": "refused text"}}, 400
        else:
            data = [
                {"index": i, "embedding": [float(len(t)), float(sum(map(ord, t)) % 97), 1.0, 2.0]}
                for i, t in enumerate(texts)
            ]
            reply, status = {"object": "list", "data": data}, 200
        raw = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def test_a_refused_text_fails_only_the_recall_that_sent_it(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingEmbeddings)
    server.lock, server.requests, server.gate = threading.Lock(), [], threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    data = tmp_path / "data"
    data.mkdir()
    process = start_sidecar(data, "--openai-url", url, "--openai-model", "fake", embedder="openai")
    try:
        service = stub(process.unix_target)
        service.Remember(memory_service_pb2.RememberRequest(memory=memory("a stored text", namespace=NAMESPACE)))
        queries = ["first question", "second question", "a poison question", "third question", "fourth one"]
        outcome: dict[str, Any] = {}
        barrier = threading.Barrier(len(queries))

        def caller(query: str) -> None:
            own = stub(process.tcp_target)
            barrier.wait(timeout=30)
            try:
                outcome[query] = recall(own, query)
            except grpc.RpcError as exc:
                outcome[query] = exc

        threads = [threading.Thread(target=caller, args=(q,)) for q in queries]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        refused = outcome.pop("a poison question")
        assert isinstance(refused, grpc.RpcError)
        assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "embedder failed" in (refused.details() or "")
        for query, got in outcome.items():
            assert isinstance(got, memory_service_pb2.RecallResponse), (query, got)
            assert len(got.memories) == 1
        # Every text reached the endpoint; a refused batch of several was asked again text by text.
        with server.lock:
            asked = [list(r) for r in server.requests]
        assert {t for r in asked for t in r} >= set(queries)
        for request in asked:
            if len(request) > 1 and "a poison question" in request:
                assert all([t] in asked for t in request)
    finally:
        process.stop()
        server.shutdown()
