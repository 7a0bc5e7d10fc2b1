"""Word matches reach recall's pool even when a common word's best matches are all filtered out."""

from __future__ import annotations

import numpy as np
import recall_engine
from recall_engine import DIMENSION, near, write

from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.engine import Engine
from memevo.sidecar.retrieval.recall import RERANK_POOL_MIN, SHORTLIST_FACTOR, Recaller, _best_passing, _compile

engine = recall_engine.engine  # the fixture


def test_a_live_word_match_below_many_forgotten_better_ones_is_still_found(engine: Engine) -> None:
    # More forgotten memories than the word shortlist holds outscore the live one on the word (shorter
    # texts), and its vector points away from the query, so the vector search never brings it in: only
    # scoring every match of the word, once the shortlist came back filtered out, can. Its word match
    # then puts it above memories that are closer by vector but do not say the word.
    shortlist = SHORTLIST_FACTOR * RERANK_POOL_MIN
    sideways = np.zeros(DIMENSION, dtype=np.float32)
    sideways[3] = 1.0
    forgotten = write(engine, *(NewMemory(content=f"zephyr {i}", vector=sideways) for i in range(shortlist + 20)))
    away = np.zeros(DIMENSION, dtype=np.float32)
    away[0], away[2] = -0.2, 1.0
    (live,) = write(engine, NewMemory(content="the zephyr came up over the long ridge that evening", vector=away))
    write(engine, *(NewMemory(content=f"unrelated note {i}", vector=near(1 + i % 2, 3.18)) for i in range(30)))
    engine.forget(forgotten, reason="test", keep_history=False)
    query = np.zeros(DIMENSION, dtype=np.float32)
    query[0] = 1.0
    hits = Recaller(engine).recall(RecallQuery(vector=query, text="zephyr", k=1))
    assert [hit.memory.id for hit in hits] == [live]


def test_word_matches_the_columns_do_not_hold_yet_are_left_out_with_or_without_the_shortlist(engine: Engine) -> None:
    # The word index learns of a write before the columns grow to it: such ids, best scored here, must not
    # reach the mask (which indexes the columns) nor the pool; the others come back as the best passing ones.
    ids = np.asarray(write(engine, *(NewMemory(content=f"note {i}", vector=near(1, 3.0)) for i in range(60))))
    size = engine.columns.size
    flt = _compile(RecallQuery(vector=near(1, 3.0), text="note", k=1), engine.columns)
    assert flt is not None
    # A shortlist of 20 half held, one held by none (then the whole list), and no shortlist (90 < 4 x 40).
    for unheld, pool in ((10, 5), (30, 5), (30, 40)):
        matches = np.concatenate([ids, np.arange(size, size + unheld, dtype=np.int64)])
        scores = np.concatenate([np.linspace(1.0, 2.0, ids.size), np.full(unheld, 9.0)]).astype(np.float32)
        best, best_scores = _best_passing(engine.columns, matches, scores, flt, pool)
        assert sorted(best.tolist()) == sorted(ids[-pool:].tolist())
        assert np.all(best_scores >= scores[ids.size - pool])
