"""The token estimator: what it counts, and the bound BuildContext's budget relies on."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memevo.sidecar.retrieval.tokens import (
    CJK_TOKENS_PER_CHAR,
    DIGIT_GROUP_TOKENS,
    estimate_tokens,
)


def test_empty_text_is_zero_and_any_other_text_at_least_one() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens(" ") == 1
    assert estimate_tokens("\n") == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", 1),
        ("hello world again", 3),
        ("I'm", 2),  # "I" + "'m", as BPE splits it
        ("don't", 2),
        ("1234567", math.ceil(3 * DIGIT_GROUP_TOKENS)),  # 123 456 7
        ("wait...!", 3),  # a word and one punctuation run of four (one token + a little per extra)
    ],
)
def test_ascii_pieces(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def test_cjk_characters_cost_more_than_one_token_each() -> None:
    text = "我们今天去公园散步吧"
    assert estimate_tokens(text) == math.ceil(len(text) * CJK_TOKENS_PER_CHAR)


def test_longer_text_never_costs_less() -> None:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
    costs = [estimate_tokens(" ".join(words[:i])) for i in range(1, len(words) + 1)]
    assert costs == sorted(costs)
    assert costs[-1] == len(words)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=8))
def test_joined_lines_cost_at_most_their_sum_plus_one_per_break(lines: list[str]) -> None:
    lines = [" ".join(line.split()) for line in lines]  # rendered lines have no line breaks of their own
    joined = "\n".join(lines)
    assert estimate_tokens(joined) <= sum(estimate_tokens(line) for line in lines) + len(lines) - 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gets_a_non_negative_integer(text: str) -> None:
    value = estimate_tokens(text)
    assert isinstance(value, int)
    assert value >= (1 if text else 0)


def test_weights_add_up_over_whitespace_so_context_lines_can_be_counted_from_parts() -> None:
    from memevo.sidecar.retrieval.context import line_tokens, render_line
    from memevo.v1 import memory_pb2

    rng = random.Random(5)
    pieces = [
        "Bianca's",
        "job",
        "is",
        "CTO.",
        "1234567",
        "(!!)",
        "naïve",
        "café",
        "数据库",
        "，",
        "\n",
        "don't",
        "API-v2",
        "Xylophonist",
        "e.g.",
        "🙂",
        "'s",
        "x",
        "  ",
    ]
    for _ in range(500):
        content = "".join(rng.choice(pieces) + rng.choice([" ", "\n", "\t", ""]) for _ in range(rng.randint(0, 12)))
        hint = rng.choice(
            ["current", "historical reference — the situation may have changed", "当前", "superseded by 17"]
        )
        record = memory_pb2.Memory(content=content)
        assert line_tokens(record, hint) == estimate_tokens(render_line(record, hint)), (content, hint)


def test_a_rendered_block_counts_as_the_estimate_of_its_text() -> None:
    from memevo.sidecar.retrieval.context import GROUPS, ContextLine, _render, line_weight, render_line
    from memevo.v1 import memory_pb2

    rng = random.Random(11)
    words = ["Bianca", "moved", "to", "Lisbon", "in", "2023.", "(see", "notes)", "数据", "don't", "--", "!!!"]
    for language in ("en", "zh"):
        for _ in range(50):
            lines = []
            for _ in range(rng.randint(1, 8)):
                record = memory_pb2.Memory(content=" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))))
                hint = rng.choice(["current", "historical reference — the situation may have changed"])
                group = rng.choice([name for name, _ in GROUPS])
                weight_ = line_weight(record, hint)
                text = render_line(record, hint)
                lines.append(ContextLine(None, group, hint, text, estimate_tokens(text), weight_))  # type: ignore[arg-type]
            text, tokens = _render(lines, language)
            assert tokens == estimate_tokens(text), text
    assert _render([], "en") == ("", 0)
