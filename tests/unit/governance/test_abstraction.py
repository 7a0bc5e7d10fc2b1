"""The chat endpoint's supersession verdicts are read strictly: only the two agreed answers count, one pair a call or
a numbered batch in one JSON object; and the verdict cache's keys and bound."""

from __future__ import annotations

import pytest

from memevo.sidecar.governance.abstraction import (
    AbstractionError,
    UnusableAnswer,
    VerdictCache,
    batch_message,
    parse_verdict,
    parse_verdicts,
    verdict_key,
)
from memevo.v1 import memory_pb2


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


@pytest.mark.parametrize(
    ("answer", "verdicts"),
    [
        ('{"1": "REPLACES", "2": "BOTH_HOLD", "3": "both_hold"}', [True, False, False]),
        (' {"2": "REPLACES", "1": "BOTH_HOLD", "3": " REPLACES "}\n', [False, True, True]),
        ('{"1": "REPLACES", "3": "BOTH_HOLD"}', [True, None, False]),  # pair 2 left out: not judged
        ('{"1": "MAYBE", "2": "REPLACES", "3": true}', [None, True, None]),  # unreadable verdicts: not judged
        ("{}", [None, None, None]),
    ],
)
def test_a_batch_answer_gives_each_pair_its_own_verdict_or_none(answer: str, verdicts: list[bool | None]) -> None:
    assert parse_verdicts(answer, 3) == verdicts


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "REPLACES",
        '["REPLACES", "BOTH_HOLD", "REPLACES"]',
        '{"1": "REPLACES", "2": "BOTH_HOLD", "3": "REPLACES"',
        '```json\n{"1": "REPLACES", "2": "BOTH_HOLD", "3": "REPLACES"}\n```',
        'Here you go: {"1": "REPLACES", "2": "BOTH_HOLD", "3": "REPLACES"}',
        '{"1": "REPLACES", "2": "BOTH_HOLD", "4": "REPLACES"}',  # a pair not asked: the numbering is off
        '{"0": "REPLACES", "1": "BOTH_HOLD", "2": "REPLACES"}',
        '{"01": "REPLACES", "2": "BOTH_HOLD", "3": "REPLACES"}',
        '{"pair 1": "REPLACES"}',
        '{"1": "REPLACES", "1": "BOTH_HOLD", "2": "BOTH_HOLD", "3": "BOTH_HOLD"}',  # pair 1 twice
    ],
)
def test_a_batch_answer_that_cannot_be_read_whole_is_unusable(answer: str) -> None:
    with pytest.raises(UnusableAnswer):
        parse_verdicts(answer, 3)


def _fact(content: str, *, entity: str = "person:ana", recorded_s: int = 1_700_000_000) -> memory_pb2.Memory:
    memory = memory_pb2.Memory(content=content, entity=entity, kind=memory_pb2.MEMORY_KIND_FACT)
    memory.recorded_at.seconds = memory.valid_from.seconds = recorded_s
    return memory


def test_the_batch_prompt_numbers_each_pair_with_both_texts() -> None:
    pairs = [(_fact("Ana lives in Lyon."), _fact("Ana moved to Oslo.")), (_fact("Ana is 30."), _fact("Ana is 31."))]
    message = batch_message(pairs)
    assert message.index("Pair 1") < message.index("Ana lives in Lyon.") < message.index("Ana moved to Oslo.")
    assert message.index("Ana moved to Oslo.") < message.index("Pair 2") < message.index("Ana is 30.")
    assert "For each of the 2 pairs" in message


def test_a_pair_keeps_its_cache_key_across_times_but_not_across_models_texts_or_subjects() -> None:
    older, newer = _fact("She lives in Lyon."), _fact("She moved to Oslo.")
    key = verdict_key("tiny-chat", older, newer)
    assert verdict_key("tiny-chat", _fact("She lives in Lyon.", recorded_s=1), newer) == key
    assert verdict_key("other-chat", older, newer) != key
    assert verdict_key("tiny-chat", newer, older) != key
    assert verdict_key("tiny-chat", _fact("She lives in Lyon.", entity="person:ben"), newer) != key


def test_the_verdict_cache_drops_the_least_recently_used() -> None:
    cache = VerdictCache(capacity=2)
    cache.put(b"a", True)
    cache.put(b"b", False)
    assert cache.get(b"a") is True  # now the most recently used
    cache.put(b"c", True)
    assert (cache.get(b"a"), cache.get(b"b"), cache.get(b"c"), len(cache)) == (True, None, True, 2)
