"""BuildContext: the best memories for a query, grouped, each with its hint, within a token budget."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from memevo.v1 import memory_pb2

from ..domain import Hit, RecallQuery
from .hints import hint_keys, render_hint
from .recall import Recaller
from .tokens import estimate_tokens

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


@dataclass(frozen=True)
class Context:
    """A rendered context block and what is in it."""

    text: str
    lines: list[ContextLine]
    tokens: int


def render_line(record: memory_pb2.Memory, hint: str) -> str:
    """One memory as a line of the block."""
    content = " ".join(record.content.split())
    return f"- {content} ({hint})"


def _render(lines: list[ContextLine], language: str) -> str:
    if not lines:
        return ""
    out = [f"{TITLE[language]}:"]
    for name, _ in GROUPS:
        members = [line for line in lines if line.group == name]
        if members:
            out.append(f"## {HEADINGS[language][name]}")
            out.extend(line.text for line in members)
    return "\n".join(out)


def build_context(
    recaller: Recaller, query: RecallQuery, *, token_budget: int, language: str, framework_version: str
) -> Context:
    """Choose memories by rank until the budget is reached; never exceeds ``token_budget``.

    A memory that does not fit is skipped and smaller ones further down may
    still fit. Headings and the title count against the budget.
    """
    hits = recaller.recall(dataclasses.replace(query, k=max(query.k, CANDIDATES)))
    chosen: list[ContextLine] = []
    # Lines are estimated one by one: the estimate of the joined block is at most their sum
    # (plus one token per line break), so staying within the sum stays within the budget.
    used = estimate_tokens(TITLE[language] + ":")
    groups_present: set[str] = set()
    for hit in hits:
        hint = render_hint(hint_keys(hit.memory, query, framework_version), language)
        text = render_line(hit.memory, hint)
        line = ContextLine(hit, group_of(hit.memory.kind), hint, text, estimate_tokens(text))
        cost = line.tokens + 1
        if line.group not in groups_present:
            cost += estimate_tokens(f"## {HEADINGS[language][line.group]}") + 1
        if used + cost <= token_budget:
            chosen.append(line)
            groups_present.add(line.group)
            used += cost
    text = _render(chosen, language)
    return Context(text=text, lines=_in_render_order(chosen), tokens=estimate_tokens(text))


def _in_render_order(lines: list[ContextLine]) -> list[ContextLine]:
    order = {name: position for position, (name, _) in enumerate(GROUPS)}
    return sorted(lines, key=lambda line: order[line.group])  # stable: rank order within a group
