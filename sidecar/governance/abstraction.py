"""The text of an abstraction memory: extractive (no model) or written by an OpenAI-compatible chat model.

The extractive abstraction keeps the member that best represents the group
(the one closest on average to the others, ties to the more successful) and
its text unchanged; the merged statistics live in the abstraction record. The
chat-completions writer sends the prompt of ``prompts.py``; any failure raises
``AbstractionError`` and the caller leaves the members as they are.
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
    """Writes an abstraction with ``POST {url}/chat/completions``; standard library only, one request, no retries."""

    def __init__(self, config: LlmConfig) -> None:
        if not config.url:
            raise ValueError("no chat endpoint configured: start the sidecar with --llm-url and --llm-model")
        self._url = check_base_url(config.url) + "/chat/completions"
        self._config = config

    def write(self, members: Sequence[memory_pb2.Memory], *, max_bytes: int) -> str:
        """The model's abstraction of ``members``; raises AbstractionError on any failure or an unusable answer."""
        body = {
            "model": self._config.model,
            "messages": [
                {"role": "system", "content": prompts.CONSOLIDATE_SYSTEM},
                {"role": "user", "content": user_message(members)},
            ],
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
        if len(text.encode()) > max_bytes:
            raise AbstractionError(f"chat endpoint's abstraction is longer than {max_bytes} bytes")
        return text


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
