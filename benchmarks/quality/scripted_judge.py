"""A chat endpoint that judges supersessions from a benchmark's ground truth, right a set share of the time.

It stands in for the agent's LLM when measuring escalation (issue 40, item 4): the sidecar in policy mode LLM puts
each pair its pair judge doubts to ``--llm-url``, one pair a call or several numbered pairs in one call; this server
reads the texts out of the supersession prompt, looks up whether each newer statement replaces its older one in the
scenarios it was given, and answers each pair right with probability ``accuracy`` (seeded per pair, so a rerun asks
and answers the same, batched or not): one word for one pair, the JSON object the batch prompt asks for
(``{"1": "REPLACES", "2": "BOTH_HOLD"}``) for several. Everything else it is asked (a consolidation to write) gets
HTTP 503, which the sidecar treats as an endpoint that is down for that proposal.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memevo.sidecar.governance import prompts
from memevo.sidecar.governance.abstraction import MAX_ITEM_CHARS

TEXT_LINE = "- text: "


def prompt_text(content: str) -> str:
    """How the sidecar writes a memory's text into the supersession prompt."""
    return content[:MAX_ITEM_CHARS].replace("\n", " ")


@dataclass
class ScriptedJudge:
    """Ground truth per (older text, newer text) and what was asked."""

    truth: dict[tuple[str, str], bool]
    accuracy: float
    seed: int = 0
    asked: list[tuple[str, str]] = field(default_factory=list)
    """Every pair asked about, in order (a pair asked twice is here twice)."""
    calls: int = 0
    """Supersession requests answered (a batch of pairs is one)."""
    unknown: int = 0
    """Pairs asked that the ground truth does not hold (answered BOTH_HOLD, right or wrong by accuracy as well)."""
    refused: int = 0
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def verdict(self, older: str, newer: str) -> bool:
        """The scripted answer: the truth, flipped for a seeded ``1 - accuracy`` share of the pairs."""
        with self._lock:
            self.asked.append((older, newer))
            known = (older, newer) in self.truth
            self.unknown += not known
        right = self.truth.get((older, newer), False)
        wrong = random.Random(f"{self.seed}|{older}|{newer}").random() >= self.accuracy
        return right != wrong

    def answer(self, body: dict[str, Any]) -> str | None:
        """The reply text for a chat request, or None for anything that is not a supersession judgement."""
        messages = body.get("messages") or []
        if len(messages) != 2:
            return None
        system = messages[0].get("content")
        if system not in (prompts.SUPERSEDE_SYSTEM, prompts.SUPERSEDE_BATCH_SYSTEM):
            return None
        texts = [
            line[len(TEXT_LINE) :]
            for line in str(messages[1].get("content", "")).splitlines()
            if line.startswith(TEXT_LINE)
        ]
        batched = system == prompts.SUPERSEDE_BATCH_SYSTEM
        if len(texts) % 2 or not texts or (not batched and len(texts) != 2):
            return None
        with self._lock:
            self.calls += 1
        pairs = zip(texts[0::2], texts[1::2], strict=True)
        words = ["REPLACES" if self.verdict(older, newer) else "BOTH_HOLD" for older, newer in pairs]
        if not batched:
            return words[0]
        return json.dumps({str(number): word for number, word in enumerate(words, start=1)})


def truth_of(pairs: Iterable[tuple[str, str, bool]]) -> dict[tuple[str, str], bool]:
    """Ground truth from (older, newer, replaces) triples; a pair said both ways counts as replacing."""
    out: dict[tuple[str, str], bool] = {}
    for older, newer, replaces in pairs:
        key = (prompt_text(older), prompt_text(newer))
        out[key] = out.get(key, False) or replaces
    return out


Reply = Callable[[dict[str, Any]], tuple[int, str]]
"""A chat request as ``{"path", "body" (its JSON), "auth" (the Authorization header)}`` -> (HTTP status, the
answer's text)."""


@contextmanager
def chat_endpoint(reply: Reply, name: str = "chat-endpoint") -> Iterator[str]:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 answering with ``reply``; yields its base URL
    (for ``--llm-url``) until the block ends. Also the integration tests' fake chat endpoint."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                body = {}
            request = {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            status, text = reply(request)
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def serving(judge: ScriptedJudge) -> Iterator[ScriptedJudge]:
    """Serve ``judge`` on 127.0.0.1 (its ``url`` set) until the block ends."""

    def reply(request: dict[str, Any]) -> tuple[int, str]:
        try:
            answer = judge.answer(request["body"])
        except (AttributeError, TypeError):
            answer = None
        if answer is None:
            with judge._lock:
                judge.refused += 1
            return 503, "only supersession judgements are scripted"
        return 200, answer

    with chat_endpoint(reply, "scripted-judge") as url:
        judge.url = url
        yield judge
