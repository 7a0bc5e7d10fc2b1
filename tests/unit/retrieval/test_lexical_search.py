"""BM25 search of the lexical index against a plain re-computation."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter

import numpy as np
import pytest

from memevo.kernels.lexical import Scratch
from memevo.sidecar.retrieval import lexical
from memevo.sidecar.retrieval.lexical import K1, B, LexicalIndex, tokenize


def naive_bm25(docs: dict[int, str], query: str) -> dict[int, float]:
    """Okapi BM25 of every document sharing a word with ``query``, written out directly."""
    return weighted_bm25({i: (text, "") for i, text in docs.items()}, query)


def weighted_bm25(docs: dict[int, tuple[str, str]], query: str) -> dict[int, float]:
    """:func:`naive_bm25` of (text, context) documents: a context word counts CONTEXT_WEIGHT of an occurrence."""
    counts: dict[int, dict[str, float]] = {}
    for i, (text, context) in docs.items():
        weighted: dict[str, float] = dict(Counter(tokenize(text)))
        for word in tokenize(context):
            weighted[word] = weighted.get(word, 0.0) + lexical.CONTEXT_WEIGHT
        counts[i] = weighted
    lengths = {i: sum(c.values()) for i, c in counts.items()}
    average = sum(lengths.values()) / len(docs)
    out: dict[int, float] = {}
    for term in dict.fromkeys(tokenize(query)):
        having = [i for i in docs if counts[i].get(term)]
        if not having:
            continue
        idf = math.log(1.0 + (len(docs) - len(having) + 0.5) / (len(having) + 0.5))
        for i in having:
            tf = counts[i][term]
            norm = K1 * (1.0 - B + B * lengths[i] / average)
            out[i] = out.get(i, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
    return out


def test_scores_match_plain_bm25_for_one_and_several_words() -> None:
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(40)]
    docs = {i: " ".join(rng.choices(vocabulary, k=rng.randint(1, 12))) for i in rng.sample(range(1, 500), 200)}
    index = LexicalIndex()
    for i, text in docs.items():
        index.add(i, text)
    for query in ("w1", "w1 w2", "w3 w3 w4 w5 w39", "nothing", "w7 nothing"):
        ids, scores = index.search(query)
        expected = naive_bm25(docs, query)
        assert sorted(ids.tolist()) == sorted(expected)
        assert len(set(ids.tolist())) == ids.size
        got = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        for i, value in expected.items():
            assert np.isclose(got[i], value, rtol=1e-5)


def test_empty_index_and_stopword_query_find_nothing() -> None:
    index = LexicalIndex()
    assert index.search("anything")[0].size == 0
    index.add(1, "a cat")
    assert index.search("the and of")[0].size == 0
    assert index.search("cat")[0].tolist() == [1]


def test_searching_while_adding_neither_fails_nor_blocks_appends() -> None:
    # Searches must not keep views of the growing arrays: an export would make append() raise.
    index = LexicalIndex()
    for i in range(1, 200):
        index.add(i, "shared word")
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        try:
            while not done.is_set():
                index.search("shared word")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=search)
    thread.start()
    try:
        for i in range(200, 5_000):
            index.add(i, "shared word")
    finally:
        done.set()
        thread.join()
    assert not errors
    assert index.search("shared")[0].size == 4_999


def test_ascii_texts_tokenize_as_the_unicode_path_does() -> None:
    import random
    import string

    from memevo.sidecar.retrieval.lexical import tokenize

    rng = random.Random(1)
    words = ["What's", "Bianca's", "the", "A", "I", "it's", "_x_", "don't", "Ann's.", "S", "'s", "IS", "v2.1", "e-mail"]
    for _ in range(3000):
        text = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40)))
        text += " " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        # A trailing non-ASCII word sends the same text through the NFKC/casefold path.
        assert [*tokenize(text), "é"] == tokenize(text + " é"), text


def test_a_word_held_mostly_by_deleted_memories_still_scores_its_live_ones_above_zero() -> None:
    index = LexicalIndex()
    for i in range(1, 101):
        index.add(i, f"zephyr note {i}")
    index.add(101, "zephyr over the ridge")
    index.add(102, "something else entirely")
    for i in range(1, 101):
        index.remove(i)
    ids, scores = index.search("zephyr")
    assert 101 in ids.tolist()  # with the deleted ones, which stay in the postings until the state filter
    assert (scores > 0).all()


def test_inflections_meet_at_their_stem() -> None:
    index = LexicalIndex()
    index.add(1, "Caroline has been researching adoption agencies")
    index.add(2, "Melanie painted a sunset by the lake")
    index.add(3, "The deploy script moved to port 8443")
    for query, expected in (
        ("What did Caroline research?", 1),
        ("agency for adopting", 1),
        ("paintings of sunsets", 2),
        ("moving ports", 3),
    ):
        ids, scores = index.search(query)
        assert ids[int(np.argmax(scores))] == expected, query


def test_stemming_leaves_short_words_numbers_codes_and_other_scripts_whole() -> None:
    from memevo.sidecar.retrieval.lexical import stem

    assert [stem(w) for w in ("researching", "agencies", "moved")] == ["research", "agenc", "move"]
    assert [stem(w) for w in ("us", "use", "was", "news")] == ["us", "use", "was", "news"]
    assert tokenize("v2.1 8443 k8s ids x86_64") == ["v2", "1", "8443", "k8s", "ids", "x86", "64"]
    assert tokenize("Müller läuft schneller 東京") == ["müller", "läuft", "schneller", "東", "京"]


def test_concurrent_stemming_agrees_with_sequential() -> None:
    """The stemmer keeps its working state in one object: unguarded, threads corrupt each other's words."""
    import sys

    from memevo.sidecar.retrieval.lexical import stem

    uncached = stem.__wrapped__
    words = [
        f"{root}{suffix}"
        for root in ("connect", "relat", "generaliz", "happi", "nation", "rational")
        for suffix in ("", "ed", "ing", "ness", "ations", "ly", "izational")
    ]
    expected = {word: uncached(word) for word in words}
    wrong: list[str] = []
    failures: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for _ in range(100):
                wrong.extend(w for w in random.Random(seed).sample(words, len(words)) if uncached(w) != expected[w])
        except BaseException as error:  # an unguarded stemmer also raises IndexError
            failures.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, inside the stemmer too
    try:
        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures
    assert not wrong


def test_a_common_word_scores_only_the_memories_a_rarer_word_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    # The floor that keeps namespaces under a million memories exact, lowered so a small index has a common word.
    monkeypatch.setattr(lexical, "COMMON_MIN_POSTINGS", 10)
    rng = random.Random(5)
    docs = {i: f"caroline {' '.join(rng.choices(['paint', 'hike', 'cook'], k=2))}" for i in range(100)}
    docs.update({100 + i: f"support group {'caroline' if i % 2 else 'melanie'}" for i in range(6)})
    index = LexicalIndex()
    for i, text in docs.items():
        index.add(i, text)
    every = naive_bm25(docs, "caroline support")
    ids, scores = index.search("caroline support")
    # "caroline" is in 103 of 106 memories: only the six that say "support" are listed, each with its full score.
    assert sorted(ids.tolist()) == list(range(100, 106))
    for i, score in zip(ids.tolist(), scores.tolist(), strict=True):
        assert np.isclose(score, every[i], rtol=1e-5)
    # Common words alone still list every memory holding one.
    alone, _ = index.search("caroline")
    assert sorted(alone.tolist()) == sorted(naive_bm25(docs, "caroline"))
    # Under the floor nothing changes.
    monkeypatch.setattr(lexical, "COMMON_MIN_POSTINGS", 1_000)
    ids, _ = index.search("caroline support")
    assert sorted(ids.tolist()) == sorted(every)


def test_no_view_outlives_the_lock_while_the_search_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    # After the lock is released the search still hands its scratch back; a view left in a local until the
    # function returned made an add() in that moment fail. Handing back slowly holds that moment open.
    slow = lexical._ScratchPool()
    give_back = slow.give_back

    def slowly(scratch: Scratch) -> None:
        time.sleep(0.002)
        give_back(scratch)

    monkeypatch.setattr(slow, "give_back", slowly)
    monkeypatch.setattr(lexical, "_SCRATCH", slow)
    index = LexicalIndex()
    index.add(1, "shared word")
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        while not done.is_set():
            index.search("shared word")

    thread = threading.Thread(target=search)
    thread.start()
    try:
        for i in range(2, 400):
            time.sleep(0.0002)
            try:
                index.add(i, "shared word")
            except BufferError as exc:
                errors.append(exc)
    finally:
        done.set()
        thread.join()
    assert not errors


def test_context_words_count_as_a_fraction_of_an_occurrence() -> None:
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(30)]
    docs = {
        i: (
            " ".join(rng.choices(vocabulary, k=rng.randint(1, 10))),
            " ".join(rng.choices(vocabulary, k=rng.randint(0, 8))),
        )
        for i in range(1, 150)
    }
    index = LexicalIndex()
    for i, (text, context) in docs.items():
        index.add(i, text, context)
    for query in ("w1", "w2 w7", "w3 w3 w11 w29"):
        ids, scores = index.search(query)
        want = weighted_bm25(docs, query)
        assert set(ids.tolist()) == set(want)
        for i, score in zip(ids.tolist(), scores.tolist(), strict=True):
            assert score == pytest.approx(want[i], rel=1e-5)


def test_a_turn_is_found_by_the_words_it_answered_but_below_one_that_says_them() -> None:
    index = LexicalIndex()
    index.add(1, "Did you go to the pride parade?")
    index.add(2, "Yes! Last Saturday, it was amazing.", context="Did you go to the pride parade?")
    index.add(3, "I baked bread all weekend.")
    index.add(4, "The parade downtown was loud.")
    ids, scores = index.search("When was the parade?")
    by_id = dict(zip(ids.tolist(), scores.tolist(), strict=True))
    assert set(by_id) == {1, 2, 4}
    assert by_id[2] < min(by_id[1], by_id[4])
