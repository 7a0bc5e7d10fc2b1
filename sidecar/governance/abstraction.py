"""The text of an abstraction memory: extractive (no model) or written by an OpenAI-compatible chat model.

The extractive abstraction keeps the member that best represents the group
(the one closest on average to the others, ties to the more successful) and
its text unchanged; the merged statistics live in the abstraction record.
Near-identical vectors do not make the same memory: "On 2026-05-14 Wendy
scheduled a meeting about Falcon" and the same sentence with another date are
two events. So a group is only offered with a text that keeps every member's
details (dates, numbers, names: see ``details``); ``faithful_groups`` splits a
group into the parts one member's text speaks for whole. The
chat-completions writer sends the prompt of ``prompts.py``; any failure raises
``AbstractionError`` and the caller leaves the members as they are. The same
endpoint judges soft conflicts (does a newer memory replace an older one?),
one pair a call or several numbered pairs in one call answered with a JSON
object; an answer that is not exactly one of the two verdicts is a failure
too (``UnusableAnswer``), and a batch answer's pairs without a verdict are
left unjudged, never guessed. ``VerdictCache`` keeps verdicts so that the
same pair of statements is not sent twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
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
    """The abstraction's text could not be written, or a judgement not made; nothing was changed."""


class UnusableAnswer(AbstractionError):
    """The chat endpoint answered, but not in the form asked for (a chatty verdict, a batch answer that is not the
    JSON object asked for): the call worked, the answer cannot be read."""


Pair = tuple[memory_pb2.Memory, memory_pb2.Memory]
"""An (older, newer) pair of memories to judge: does ``newer`` replace ``older``?"""


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


_TOKEN_EDGES = "\"'()[]{}<>.,;:!?\u2018\u2019\u201c\u201d"
_CLOSERS = "\"')\\]\u2019\u201d"
_SENTENCE_END = re.compile(rf"(?:(?:\w{{3}}|\d)[{_CLOSERS}]*\.|[?!])[{_CLOSERS}]*$")
"""A token that ends a sentence: ? or !, or a full stop after a digit or three letters ("Dr." and "J." do not)."""
_POSSESSIVE = re.compile(r"['\u2019]s$")
NOT_NAMES = frozenset({"i"})
"""Capitalised words that never tell two memories apart."""
REWORDED_KINDS = frozenset({memory_pb2.MEMORY_KIND_STRATEGY})
"""Kinds consolidated whatever details their members differ in: a strategy is a recipe for its task signature,
its variants ("attempt 3", "with 4 workers") are what consolidation distils, and their outcomes add up in the
abstraction."""


def _tokens(text: str) -> list[tuple[str, bool]]:
    """The text's whitespace-separated tokens without their edge punctuation, each with whether it opens a sentence."""
    out: list[tuple[str, bool]] = []
    opens = True
    for raw in text.split():
        token = _POSSESSIVE.sub("", raw.strip(_TOKEN_EDGES))
        if token:
            out.append((token, opens))
        opens = bool(_SENTENCE_END.search(raw)) or (opens and not token)
    return out


def details(text: str) -> frozenset[str]:
    """What tells one memory of an event from another alike: its dates, numbers and names, case-folded.

    A token with a digit ("2026-05-14", "build-4411", "3pm"), or a capitalised word that does not open a sentence
    ("Wendy", "Falcon", "May") or has a capital past its first letter ("API", "iOS"). A word that only opens a
    sentence is not taken for a name: "Ran the suite" and "Running the suite" say the same.
    """
    found: set[str] = set()
    for token, opens in _tokens(text):
        digit = any(c.isdigit() for c in token)
        capital = token[0].isupper() and not opens
        inner = any(c.isupper() for c in token[1:])
        folded = token.casefold()
        if (digit or capital or inner) and folded not in NOT_NAMES:
            found.add(folded)
    return frozenset(found)


def words_of(text: str) -> frozenset[str]:
    """Every token of ``text`` as ``details`` reads them (case-folded), wherever it stands."""
    return frozenset(token.casefold() for token, _ in _tokens(text))


def keeps(members: Sequence[memory_pb2.Memory], text: str) -> bool:
    """Whether ``text`` says every member's details (see ``details``), so folding the members into it loses none.

    Always true for members all of ``REWORDED_KINDS``.
    """
    if members and all(m.kind in REWORDED_KINDS for m in members):
        return True
    said = words_of(text)
    return all(details(m.content) <= said for m in members)


def faithful_groups(
    members: Sequence[memory_pb2.Memory], vectors: npt.NDArray[np.float32], min_size: int
) -> list[tuple[list[int], str]]:
    """The parts of a group that can be folded without losing a detail: (indices into ``members``, extractive text).

    The representative of what is left speaks for the members whose details its text says; the rest are looked at
    again, until fewer than ``min_size`` are left. Parts smaller than ``min_size`` are not offered. A group of
    distinct events (the same sentence with five dates) gives none; a group of strategies stays whole.
    """
    if len(members) < max(min_size, 1):
        return []
    whole = extractive_text(members, vectors)
    if keeps(members, whole):
        return [(list(range(len(members))), whole)]
    said = [details(m.content) for m in members]
    left = list(range(len(members)))
    parts: list[tuple[list[int], str]] = []
    while len(left) >= min_size:
        chosen = left[representative([members[i] for i in left], vectors[left])]
        text = members[chosen].content
        words = words_of(text)
        part = [i for i in left if said[i] <= words]
        if len(part) >= min_size:
            parts.append((part, text))
        taken = set(part)
        left = [i for i in left if i not in taken]
    return parts


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

    def judge_batch(self, pairs: Sequence[Pair]) -> list[bool | None]:
        """Each pair's verdict from ONE call (as :meth:`judge`), None for a pair the answer gave no verdict for.

        AbstractionError when the call fails; UnusableAnswer when the answer as a whole cannot be read (see
        ``parse_verdicts``). The caller judges the pairs left without a verdict again, or leaves them in doubt.
        """
        answer = self._complete(
            [
                {"role": "system", "content": prompts.SUPERSEDE_BATCH_SYSTEM},
                {"role": "user", "content": batch_message(pairs)},
            ]
        )
        return parse_verdicts(answer, len(pairs))

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
            raise UnusableAnswer(f"chat endpoint's verdict is not valid JSON: {answer[:80]!r}") from error
        only = parsed.get("answer") if isinstance(parsed, dict) and len(parsed) == 1 else None
        word = only.strip() if isinstance(only, str) else ""
    verdict = VERDICTS.get(word.upper())
    if verdict is None:
        raise UnusableAnswer(f"chat endpoint's verdict is neither REPLACES nor BOTH_HOLD: {answer[:80]!r}")
    return verdict


def parse_verdicts(answer: str, count: int) -> list[bool | None]:
    """The verdicts of a batch answer for pairs 1..``count``: ``{"1": "REPLACES", "2": "BOTH_HOLD", ...}``.

    Strict, as ``parse_verdict``: a pair left out, or answered with anything but one of VERDICTS, gets None (not
    judged). UnusableAnswer when the answer is not one JSON object and nothing else (no code fence either, as for
    ``parse_verdict``), or names a pair twice or a pair that was not asked: a model that numbers wrongly may have put
    any verdict on any pair.
    """

    def unique(items: list[tuple[str, object]]) -> dict[str, object]:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            raise UnusableAnswer(f"chat endpoint's batch answer names a pair twice: {answer[:80]!r}")
        return dict(items)

    try:
        parsed = json.loads(answer, object_pairs_hook=unique)
    except ValueError as error:
        raise UnusableAnswer(f"chat endpoint's batch answer is not valid JSON: {answer[:80]!r}") from error
    if not isinstance(parsed, dict):
        raise UnusableAnswer(f"chat endpoint's batch answer is not a JSON object: {answer[:80]!r}")
    verdicts: list[bool | None] = [None] * count
    for key, word in parsed.items():
        number = int(key) if key.isdecimal() and key == str(int(key)) else 0
        if not 1 <= number <= count:
            raise UnusableAnswer(f"chat endpoint's batch answer names pair {key[:20]!r} of {count}")
        verdicts[number - 1] = VERDICTS.get(word.strip().upper()) if isinstance(word, str) else None
    return verdicts


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


def batch_message(pairs: Sequence[Pair]) -> str:
    """The user turn of the batched supersession prompt: the pairs numbered from 1, each as in ``judge_message``."""
    listed = "\n\n".join(
        prompts.SUPERSEDE_BATCH_PAIR.format(number=number, older=_judged_item(older), newer=_judged_item(newer))
        for number, (older, newer) in enumerate(pairs, start=1)
    )
    return prompts.SUPERSEDE_BATCH_USER.format(pairs=listed, count=len(pairs))


def _kind(memory: memory_pb2.Memory) -> str:
    return memory_pb2.MemoryKind.Name(memory.kind).removeprefix("MEMORY_KIND_").lower()


def _about(memory: memory_pb2.Memory) -> str:
    about = memory.entity or "(no entity named)"
    if memory.fact.attribute:
        about += f", {memory.fact.attribute}"
    return about


def _content(memory: memory_pb2.Memory) -> str:
    return memory.content[:MAX_ITEM_CHARS].replace("\n", " ")


def _judged_item(memory: memory_pb2.Memory) -> str:
    return prompts.SUPERSEDE_ITEM.format(
        kind=_kind(memory),
        about=_about(memory),
        valid_from=_when(memory.valid_from.seconds),
        recorded=_when(memory.recorded_at.seconds),
        content=_content(memory),
    )


VERDICT_CACHE_PAIRS = 4096
"""Verdicts ``VerdictCache`` keeps (about 100 bytes each): several passes' worth of doubts at the budget's burst."""


def verdict_key(model: str, older: memory_pb2.Memory, newer: memory_pb2.Memory) -> bytes:
    """The cache key of a pair: a hash of the model and what the prompt says of each memory but its times.

    The times are left out so that the same change written in several namespaces, or on another day, is the same
    pair (which one is older is already fixed by the pair's order); the kind and subject stay in, as the prompt
    shows them and "She moved to Oslo." says something else about another entity.
    """
    said = [model, *((_kind(m), _about(m), _content(m)) for m in (older, newer))]
    return hashlib.sha256(json.dumps(said, ensure_ascii=False).encode()).digest()


class VerdictCache:
    """The chat endpoint's supersession verdicts by ``verdict_key``, the least recently used dropped past
    ``capacity``. Thread-safe.

    In memory only, on purpose: the same model name may serve other weights after a restart (an upgrade), and a
    verdict stored on disk would outlive them; what a restart loses costs at most one call per pair again.
    """

    def __init__(self, capacity: int = VERDICT_CACHE_PAIRS) -> None:
        self.capacity = capacity
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> bool | None:
        """The verdict kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            verdict = self._verdicts.get(key)
            if verdict is not None:
                self._verdicts.move_to_end(key)
            return verdict

    def put(self, key: bytes, verdict: bool) -> None:
        """Keep ``verdict`` for ``key``, dropping the least recently used past the capacity."""
        with self._lock:
            self._verdicts[key] = verdict
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > self.capacity:
                self._verdicts.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._verdicts)


def _when(seconds: int) -> str:
    # To the minute: two statements of one day are often minutes apart, and their order is the question.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
