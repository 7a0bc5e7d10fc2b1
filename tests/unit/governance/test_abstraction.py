"""The chat endpoint's supersession verdict is read strictly: only the two agreed answers count."""

from __future__ import annotations

import pytest

from memevo.sidecar.governance.abstraction import AbstractionError, parse_verdict


@pytest.mark.parametrize(
    ("answer", "replaces"),
    [
        ("REPLACES", True),
        ("  replaces\n", True),
        ("BOTH_HOLD", False),
        ('{"answer": "REPLACES"}', True),
        ('{"answer": " both_hold "}', False),
    ],
)
def test_the_two_verdicts_as_a_word_or_a_tiny_json(answer: str, replaces: bool) -> None:
    assert parse_verdict(answer) is replaces


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "REPLACES.",
        "Probably REPLACES",
        "REPLACES BOTH_HOLD",
        "BOTH HOLD",
        '{"answer": "MAYBE"}',
        '{"answer": "REPLACES", "why": "newer"}',
        '{"verdict": "REPLACES"}',
        '{"answer": true}',
        '{"answer": "REPLACES"',
        '["REPLACES"]',
        '```json\n{"answer": "REPLACES"}\n```',
    ],
)
def test_anything_else_is_a_failure(answer: str) -> None:
    with pytest.raises(AbstractionError):
        parse_verdict(answer)
