"""The scripted chat endpoint answers the sidecar's supersession prompts, one pair or a numbered batch, from its
ground truth; each pair gets the same seeded answer whichever way it is asked."""

from __future__ import annotations

import json

from benchmarks.quality.scripted_judge import ScriptedJudge, truth_of
from memevo.sidecar.governance import prompts
from memevo.sidecar.governance.abstraction import batch_message, judge_message, parse_verdict, parse_verdicts
from memevo.v1 import memory_pb2

TEXTS = [
    ("Ana lives in Lyon.", "Ana moved to Oslo.", True),
    ("Ana speaks French.", "Ana also speaks Dutch.", False),
    ("Ben works at Acme.", "Ben joined Globex last week.", True),
]


def _pairs() -> list[tuple[memory_pb2.Memory, memory_pb2.Memory]]:
    return [(memory_pb2.Memory(content=older), memory_pb2.Memory(content=newer)) for older, newer, _ in TEXTS]


def _body(system: str, user: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_a_batch_is_answered_pair_by_pair_with_the_json_object_the_prompt_asks_for() -> None:
    judge = ScriptedJudge(truth_of(TEXTS), accuracy=1.0)
    answer = judge.answer(_body(prompts.SUPERSEDE_BATCH_SYSTEM, batch_message(_pairs())))
    assert answer is not None
    assert parse_verdicts(answer, 3) == [True, False, True]
    assert json.loads(answer) == {"1": "REPLACES", "2": "BOTH_HOLD", "3": "REPLACES"}
    assert (judge.calls, judge.asked) == (1, [(o, n) for o, n, _ in TEXTS])


def test_each_pair_gets_the_same_answer_batched_or_alone() -> None:
    batched = ScriptedJudge(truth_of(TEXTS), accuracy=0.5, seed=3)
    alone = ScriptedJudge(truth_of(TEXTS), accuracy=0.5, seed=3)
    answer = batched.answer(_body(prompts.SUPERSEDE_BATCH_SYSTEM, batch_message(_pairs())))
    assert answer is not None
    singles = []
    for older, newer in _pairs():
        word = alone.answer(_body(prompts.SUPERSEDE_SYSTEM, judge_message(older, newer)))
        assert word is not None
        singles.append(parse_verdict(word))
    assert parse_verdicts(answer, 3) == singles
    assert (batched.calls, alone.calls) == (1, 3)


def test_a_wrong_judge_flips_every_pair_of_a_batch() -> None:
    judge = ScriptedJudge(truth_of(TEXTS), accuracy=0.0)
    answer = judge.answer(_body(prompts.SUPERSEDE_BATCH_SYSTEM, batch_message(_pairs())))
    assert answer is not None
    assert parse_verdicts(answer, 3) == [False, True, False]


def test_anything_but_a_supersession_prompt_is_refused() -> None:
    judge = ScriptedJudge(truth_of(TEXTS), accuracy=1.0)
    assert judge.answer(_body(prompts.CONSOLIDATE_SYSTEM, "merge these")) is None
    assert judge.answer(_body(prompts.SUPERSEDE_SYSTEM, batch_message(_pairs()))) is None  # three pairs, one asked
    assert judge.calls == 0
