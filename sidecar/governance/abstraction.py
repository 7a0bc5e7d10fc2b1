"""The text of an abstraction memory: extractive (no model) or written by an OpenAI-compatible chat model.

The extractive abstraction keeps the member that best represents the group
(the one closest on average to the others, ties to the more successful) and
its text unchanged; the merged statistics live in the abstraction record. The
chat-completions writer sends the prompt of ``prompts.py``; any failure raises
``AbstractionError`` and the caller leaves the members as they are. The same
endpoint judges soft conflicts (does a newer memory replace an older one?);
an answer that is not exactly one of the two verdicts is a failure too.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2

from ..config import LlmConfig
from ..embedding.openai_compat import check_base_url
from . import prompts

MAX_ITEM_CHARS = 2000
"""Each member's text is cut to this many characters in the prompt: the group, not one member, should fit."""


class AbstractionError(Exception):
    """The abstraction's text could not be written; nothing was changed."""


def representative(members: Sequence[memory_pb2.Memory], vectors: npt.NDArray[np.float32]) -> int:
    """Index of the member closest on average to the others (unit-length ``vectors``, one row each)."""
    if len(members) == 1:
        return 0
    similarity = vectors @ vectors.T
    mean = (similarity.sum(axis=1) - np.diag(similarity)) / (len(members) - 1)
    successes = np.asarray([m.successes - m.failures for m in members], dtype=np.float64)
    # Similarity first (to 3 decimals, so float noise does not decide), then the better track record.
    order = np.lexsort((-successes, -np.round(mean.astype(np.float64), 3)))
    return int(order[0])


def extractive_text(members: Sequence[memory_pb2.Memory], vectors: npt.NDArray[np.float32]) -> str:
    """The built-in abstraction: the representative member's text."""
    return members[representative(members, vectors)].content


class ChatAbstractor:
    """Writes abstractions and judges soft conflicts with ``POST {url}/chat/completions``.

    Standard library only; one request per call, no retries (the caller retries later).
    """

    def __init__(self, config: LlmConfig) -> None:
        if not config.url:
            raise ValueError("no chat endpoint configured: start the sidecar with --llm-url and --llm-model")
        self._url = check_base_url(config.url) + "/chat/completions"
        self._config = config

    @property
    def model(self) -> str:
        """The model name sent with each request (for reasons on the change log)."""
        return self._config.model

    def write(self, members: Sequence[memory_pb2.Memory], *, max_bytes: int) -> str:
        """The model's abstraction of ``members``; raises AbstractionError on any failure or an unusable answer."""
        text = self._complete(
            [
                {"role": "system", "content": prompts.CONSOLIDATE_SYSTEM},
                {"role": "user", "content": user_message(members)},
            ]
        )
        if len(text.encode()) > max_bytes:
            raise AbstractionError(f"chat endpoint's abstraction is longer than {max_bytes} bytes")
        return text

    def judge(self, older: memory_pb2.Memory, newer: memory_pb2.Memory) -> bool:
        """Whether ``newer`` replaces ``older`` (True) or both hold (False); AbstractionError on any failure."""
        answer = self._complete(
            [
                {"role": "system", "content": prompts.SUPERSEDE_SYSTEM},
                {"role": "user", "content": judge_message(older, newer)},
            ]
        )
        return parse_verdict(answer)

    def _complete(self, messages: list[dict[str, str]]) -> str:
        """The first choice's text for ``messages`` (stripped, non-empty); AbstractionError on any failure."""
        body = {
            "model": self._config.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self._config.max_output_tokens,
        }
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self._config.api_key_env) if self._config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self._url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._config.timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise AbstractionError(f"chat endpoint answered HTTP {error.code}") from error
        except (OSError, ValueError) as error:
            raise AbstractionError(f"chat endpoint unreachable or answered garbage: {error}") from error
        try:
            text = str(payload["choices"][0]["message"]["content"]).strip()
        except (KeyError, IndexError, TypeError) as error:
            raise AbstractionError("chat endpoint's answer has no choices[0].message.content") from error
        if not text:
            raise AbstractionError("chat endpoint answered with empty text")
        return text


VERDICTS = {"REPLACES": True, "BOTH_HOLD": False}
"""The judge's two answers and what they mean (True: the newer memory replaces the older one)."""


def parse_verdict(answer: str) -> bool:
    """The verdict in a judge's answer: one word of VERDICTS, or ``{"answer": WORD}``; AbstractionError otherwise.

    Strict on purpose: a hedged or chatty answer must not retire a memory, so it counts as a failed call.
    """
    word = answer.strip()
    if word.startswith("{"):
        # Endpoints forced into JSON mode cannot answer a bare word.
        try:
            parsed = json.loads(word)
        except ValueError as error:
            raise AbstractionError(f"chat endpoint's verdict is not valid JSON: {answer[:80]!r}") from error
        only = parsed.get("answer") if isinstance(parsed, dict) and len(parsed) == 1 else None
        word = only.strip() if isinstance(only, str) else ""
    verdict = VERDICTS.get(word.upper())
    if verdict is None:
        raise AbstractionError(f"chat endpoint's verdict is neither REPLACES nor BOTH_HOLD: {answer[:80]!r}")
    return verdict


def user_message(members: Sequence[memory_pb2.Memory]) -> str:
    """The user turn of the consolidation prompt for ``members``."""
    first = members[0]
    about = ""
    if first.task_signature:
        about = f", task {first.task_signature!r}"
    elif first.entity:
        about = f", about {first.entity!r}"
    items = "\n".join(
        prompts.CONSOLIDATE_ITEM.format(
            successes=f"{m.successes:g}",
            failures=f"{m.failures:g}",
            recorded=datetime.fromtimestamp(m.recorded_at.seconds, tz=UTC).strftime("%Y-%m-%d"),
            content=m.content[:MAX_ITEM_CHARS].replace("\n", " "),
        )
        for m in members
    )
    return prompts.CONSOLIDATE_USER.format(
        count=len(members), kind=memory_pb2.MemoryKind.Name(first.kind), about=about, items=items
    )


def judge_message(older: memory_pb2.Memory, newer: memory_pb2.Memory) -> str:
    """The user turn of the supersession prompt: both memories with their world and system times."""
    return prompts.SUPERSEDE_USER.format(older=_judged_item(older), newer=_judged_item(newer))


def _judged_item(memory: memory_pb2.Memory) -> str:
    about = memory.entity or "(no entity named)"
    if memory.fact.attribute:
        about += f", {memory.fact.attribute}"
    return prompts.SUPERSEDE_ITEM.format(
        kind=memory_pb2.MemoryKind.Name(memory.kind).removeprefix("MEMORY_KIND_").lower(),
        about=about,
        valid_from=_when(memory.valid_from.seconds),
        recorded=_when(memory.recorded_at.seconds),
        content=memory.content[:MAX_ITEM_CHARS].replace("\n", " "),
    )


def _when(seconds: int) -> str:
    # To the minute: two statements of one day are often minutes apart, and their order is the question.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
