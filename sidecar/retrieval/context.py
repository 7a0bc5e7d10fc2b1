"""BuildContext: the best memories for a query, grouped, each with its hint, within a token budget."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from memevo.v1 import memory_pb2

from ..domain import Hit, RecallQuery, now_s
from .hints import hint_keys, render_hint
from .recall import Recaller
from .tokens import NEWLINE_TOKENS, WeightCache, tokens_of, weight

CANDIDATES = 50
"""Ranked memories considered for a context; the budget decides how many make it in."""

# Rendering order of the groups and the kinds they hold.
GROUPS: tuple[tuple[str, frozenset[int]], ...] = (
    ("facts", frozenset({memory_pb2.MEMORY_KIND_FACT, memory_pb2.MEMORY_KIND_PREFERENCE})),
    ("strategies", frozenset({memory_pb2.MEMORY_KIND_STRATEGY})),
    ("patterns", frozenset({memory_pb2.MEMORY_KIND_ABSTRACTION})),
    ("episodes", frozenset({memory_pb2.MEMORY_KIND_EPISODE})),
)
HEADINGS = {
    "en": {"facts": "Facts", "strategies": "Strategies", "patterns": "Patterns", "episodes": "Episodes"},
    "zh": {"facts": "事实", "strategies": "策略", "patterns": "模式", "episodes": "经历"},
}
TITLE = {"en": "Relevant memories", "zh": "相关记忆"}


def group_of(kind: int) -> str:
    """The context group of a memory kind."""
    return next((name for name, kinds in GROUPS if kind in kinds), "episodes")


@dataclass(frozen=True)
class ContextLine:
    """One memory placed in a context."""

    hit: Hit
    group: str
    hint: str
    text: str
    tokens: int
    weight: float
    """The unrounded estimate of ``text`` (see retrieval/tokens.py)."""


@dataclass(frozen=True)
class Context:
    """A rendered context block and what is in it."""

    text: str
    lines: list[ContextLine]
    tokens: int


_CONTENT_WEIGHTS = WeightCache(collapse_whitespace=True)
_HINT_WEIGHTS = WeightCache(capacity=10_000)
_BULLET = "-"
_BULLET_WEIGHT = weight(_BULLET)


def render_line(record: memory_pb2.Memory, hint: str) -> str:
    """One memory as a line of the block."""
    content = " ".join(record.content.split())
    return f"{_BULLET} {content} ({hint})"


def line_weight(record: memory_pb2.Memory, hint: str) -> float:
    """``weight(render_line(record, hint))``, from cached weights of its whitespace-separated parts."""
    return _BULLET_WEIGHT + _CONTENT_WEIGHTS.weight(record.content) + _HINT_WEIGHTS.weight(f"({hint})")


def line_tokens(record: memory_pb2.Memory, hint: str) -> int:
    """``estimate_tokens(render_line(record, hint))`` without scanning the line."""
    return tokens_of(line_weight(record, hint))


def _title(language: str) -> str:
    return f"{TITLE[language]}:"


def _heading(language: str, group: str) -> str:
    return f"## {HEADINGS[language][group]}"


def _render(lines: list[ContextLine], language: str) -> tuple[str, int]:
    """The block and its estimate (summed from its parts' weights: the same as estimating the block)."""
    if not lines:
        return "", 0
    out = [_title(language)]
    total = _HINT_WEIGHTS.weight(out[0])
    for name, _ in GROUPS:
        members = [line for line in lines if line.group == name]
        if members:
            out.append(_heading(language, name))
            total += _HINT_WEIGHTS.weight(out[-1])
            out.extend(line.text for line in members)
            total += sum(line.weight for line in members)
    total += NEWLINE_TOKENS * (len(out) - 1)
    return "\n".join(out), tokens_of(total)


def build_context(
    recaller: Recaller, query: RecallQuery, *, token_budget: int, language: str, framework_version: str
) -> Context:
    """Choose memories by rank until the budget is reached; never exceeds ``token_budget``.

    A memory that does not fit is skipped and smaller ones further down may
    still fit. Headings and the title count against the budget.
    """
    # The candidates are looked at, not used: only what the context holds counts as an access (below).
    hits = recaller.recall(dataclasses.replace(query, k=max(query.k, CANDIDATES), peek=True))
    chosen: list[ContextLine] = []
    # Lines are estimated one by one: the estimate of the joined block is at most their sum
    # (plus one token per line break), so staying within the sum stays within the budget.
    used = tokens_of(_HINT_WEIGHTS.weight(_title(language)))
    groups_present: set[str] = set()
    for hit in hits:
        # Recall rendered the English hint already.
        hint = hit.hint if language == "en" else render_hint(hint_keys(hit.memory, query, framework_version), language)
        text = render_line(hit.memory, hint)
        line_w = line_weight(hit.memory, hint)
        line = ContextLine(hit, group_of(hit.memory.kind), hint, text, tokens_of(line_w), line_w)
        cost = line.tokens + 1
        if line.group not in groups_present:
            cost += tokens_of(_HINT_WEIGHTS.weight(_heading(language, line.group))) + 1
        if used + cost <= token_budget:
            chosen.append(line)
            groups_present.add(line.group)
            used += cost
    text, tokens = _render(chosen, language)
    if not query.peek:
        placed = np.asarray([line.hit.memory.id for line in chosen], dtype=np.int64)
        recaller.engine.columns.record_access(placed, now_s(), query.turn)
    return Context(text=text, lines=_in_render_order(chosen), tokens=tokens)


def _in_render_order(lines: list[ContextLine]) -> list[ContextLine]:
    order = {name: position for position, (name, _) in enumerate(GROUPS)}
    return sorted(lines, key=lambda line: order[line.group])  # stable: rank order within a group
