"""The pure helpers of the quality benchmarks: BM25, metrics, tables, and the data readers' date and id parsing."""

from __future__ import annotations

import datetime as dt
import importlib
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

common: Any = importlib.import_module("benchmarks.quality.common")
locomo: Any = importlib.import_module("benchmarks.quality.locomo")
situatedqa: Any = importlib.import_module("benchmarks.quality.situatedqa")

UTC = dt.timezone.utc
TODAY = dt.datetime(2026, 1, 1, tzinfo=UTC)


# ---- tokenize and BM25 ---------------------------------------------------------------------


def test_tokenize_lowercases_splits_and_drops_stopwords() -> None:
    assert common.tokenize("When did Caroline go to the LGBTQ support-group in 2023?") == [
        "caroline",
        "go",
        "lgbtq",
        "support",
        "group",
        "2023",
    ]
    assert common.tokenize("snake_case Café ＡＢＣ") == ["snake", "case", "café", "abc"]
    assert common.tokenize("") == []
    assert common.tokenize("the of and") == []


def _naive_bm25(documents: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """The textbook formula, term by term."""
    docs = [common.tokenize(d) for d in documents]
    average = sum(len(d) for d in docs) / len(docs)
    scores = []
    for doc in docs:
        total = 0.0
        for term in set(common.tokenize(query)):
            df = sum(1 for d in docs if term in d)
            if df == 0:
                continue
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf = doc.count(term)
            total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
        scores.append(total)
    return scores


DOCS = [
    "Caroline: I went to the LGBTQ support group yesterday",
    "Melanie: I painted a sunrise over the lake last year",
    "Caroline: The support group was so powerful, support matters",
    "Melanie: We went camping with the kids",
    "",
]


@pytest.mark.parametrize(
    "query", ["support group", "Caroline support", "sunrise lake painting", "camping kids kids", "nothing"]
)
def test_bm25_matches_the_textbook_formula(query: str) -> None:
    ranker = common.BM25(DOCS)
    np.testing.assert_allclose(ranker.scores(query), _naive_bm25(DOCS, query), rtol=1e-12, atol=1e-12)


def test_bm25_ranks_and_breaks_ties_by_document_order() -> None:
    ranker = common.BM25(DOCS)
    assert ranker.top_k("support group", 2).tolist() == [2, 0]
    assert ranker.top_k("sunrise", 1).tolist() == [1]
    # No word matches: every score is 0 and the order is the documents' order.
    assert ranker.top_k("zebra", 3).tolist() == [0, 1, 2]


def test_bm25_counts_a_repeated_query_word_once() -> None:
    ranker = common.BM25(DOCS)
    np.testing.assert_allclose(ranker.scores("kids kids kids"), ranker.scores("kids"))


def test_bm25_prefers_the_shorter_document_at_equal_term_frequency() -> None:
    ranker = common.BM25(["cat", "cat dog bird fish"])
    scores = ranker.scores("cat")
    assert scores[0] > scores[1] > 0


def test_bm25_idf_is_positive_even_for_a_word_in_every_document() -> None:
    ranker = common.BM25(["cat", "cat", "cat"])
    assert ranker.idf("cat") > 0
    assert ranker.idf("dog") == 0


def test_bm25_handles_an_empty_corpus_and_rejects_bad_parameters() -> None:
    assert common.BM25([]).scores("anything").shape == (0,)
    assert common.BM25(["", ""]).scores("x").tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="k1"):
        common.BM25(DOCS, k1=-1)
    with pytest.raises(ValueError, match="b is"):
        common.BM25(DOCS, b=1.5)


# ---- ranking and metrics -------------------------------------------------------------------


def test_top_k_is_stable_and_bounded() -> None:
    assert common.top_k([0.1, 0.5, 0.5, 0.9], 3).tolist() == [3, 1, 2]
    assert common.top_k([1.0, 2.0], 10).tolist() == [1, 0]
    assert common.top_k([1.0], 0).tolist() == []
    assert common.top_k([], 5).tolist() == []
    with pytest.raises(ValueError, match="k is -1"):
        common.top_k([1.0], -1)
    with pytest.raises(ValueError, match="1-D"):
        common.top_k([[1.0]], 1)


def test_cosine_top_k_and_unit_rows() -> None:
    matrix = common.unit_rows([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), [1, 1, 1, 0], atol=1e-6)
    query = common.unit_rows([[0.1, 1.0]])[0]
    assert common.cosine_top_k(matrix, query, 2).tolist() == [1, 2]
    assert common.cosine_top_k(np.zeros((0, 2), dtype=np.float32), query, 2).tolist() == []


def test_recall_at_k() -> None:
    ranked = ["D1:1", "D1:2", "D2:5", "D3:1"]
    assert common.recall_at_k(ranked, {"D2:5"}, 5) == 1.0
    assert common.recall_at_k(ranked, {"D2:5"}, 2) == 0.0
    assert common.recall_at_k(ranked, ["D1:1", "D9:9"], 4) == 0.5
    assert common.recall_at_k(["D1:1", "D1:1"], {"D1:1", "D1:2"}, 2) == 0.5
    assert common.recall_at_k([], {"D1:1"}, 5) == 0.0
    with pytest.raises(ValueError, match="empty"):
        common.recall_at_k(ranked, set(), 5)


def test_mean_and_batched() -> None:
    assert common.mean([1.0, 0.0, 0.5]) == 0.5
    assert math.isnan(common.mean([]))
    assert [list(b) for b in common.batched([1, 2, 3, 4, 5], 2)] == [[1, 2], [3, 4], [5]]
    with pytest.raises(ValueError, match="size"):
        list(common.batched([1], 0))


def test_normalise_answer() -> None:
    assert common.normalise_answer("The Beatles!") == "beatles"
    assert common.normalise_answer("November\u00a08,\u00a02018") == "november 8 2018"
    assert common.normalise_answer("  Charlie   SHEEN ") == "charlie sheen"
    assert common.normalise_answer("a") == ""


def test_rows_and_table() -> None:
    rows = [
        common.Row("locomo/temporal", "bm25", 10, "recall_at_5", 0.61234, 321),
        common.Row("locomo/temporal", "memevo", 10, "recall_at_5", math.nan, 0),
    ]
    assert rows[0].as_json() == {
        "benchmark": "locomo/temporal",
        "system": "bm25",
        "n_memories": 10,
        "metric": "recall_at_5",
        "value": 0.6123,
        "n_queries": 321,
    }
    assert rows[1].as_json()["value"] is None
    table = common.format_table(rows, ["bm25", "vector", "memevo"])
    assert "| locomo/temporal | recall_at_5 | 0.612 |  | n/a | 0,321 |" in table


# ---- LoCoMo parsing ------------------------------------------------------------------------


def test_locomo_session_dates() -> None:
    assert locomo.parse_session_date("1:56 pm on 8 May, 2023") == dt.datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert locomo.parse_session_date("12:09 am on 13 September,  2023") == dt.datetime(2023, 9, 13, 0, 9, tzinfo=UTC)
    assert locomo.parse_session_date("8 May, 2023") == dt.datetime(2023, 5, 8, tzinfo=UTC)
    assert locomo.parse_session_date("yesterday") is None
    assert locomo.parse_session_date("") is None


def test_locomo_evidence_ids_are_repaired() -> None:
    assert locomo.parse_evidence(["D1:3"]) == ({"D1:3"}, [])
    assert locomo.parse_evidence(["D8:6; D9:17"]) == ({"D8:6", "D9:17"}, [])
    assert locomo.parse_evidence(["D9:1 D4:4 D4:6"]) == ({"D9:1", "D4:4", "D4:6"}, [])
    assert locomo.parse_evidence(["D:11:26", "D01:02"]) == ({"D11:26", "D1:2"}, [])
    assert locomo.parse_evidence(["D", ""]) == (set(), ["D"])


# ---- SituatedQA dates and timelines --------------------------------------------------------


def test_period_parsing() -> None:
    period = situatedqa.parse_period("2019")
    assert period == situatedqa.Period(2019)
    assert period.first == dt.datetime(2019, 1, 1, tzinfo=UTC)
    assert period.last == dt.datetime(2019, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    assert situatedqa.parse_period("March 28, 2021") == situatedqa.Period(2021, 3, 28)
    assert situatedqa.parse_period("28 March 2021") == situatedqa.Period(2021, 3, 28)
    assert situatedqa.parse_period("Feb 2020").last == dt.datetime(2020, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC)
    assert situatedqa.parse_period("2021-03-28") == situatedqa.Period(2021, 3, 28)
    for bad in ("", "soon", "February 30, 2021", "2021-13-01", "0", "12345", "March 2021 2022"):
        assert situatedqa.parse_period(bad) is None, bad


def test_period_from_parts_keeps_what_is_valid() -> None:
    assert situatedqa.period_from_parts(2018, None, None) == situatedqa.Period(2018)
    assert situatedqa.period_from_parts("2018", 13, 1) == situatedqa.Period(2018)
    assert situatedqa.period_from_parts(2019, 2, 29) == situatedqa.Period(2019, 2)
    assert situatedqa.period_from_parts(2020, 2, 29) == situatedqa.Period(2020, 2, 29)
    assert situatedqa.period_from_parts(None, 1, 1) is None
    assert situatedqa.period_from_parts(True) is None
    assert situatedqa.start_period(None) is None
    assert situatedqa.start_period({"year": 2011, "month": None, "date": None}) == situatedqa.Period(2011)


def _record(prev_start: Any, cur_start: Any, *, prev: Any = ("Ray Romano",), cur: Any = ("Charlie Sheen",)) -> Any:
    timeline = {
        "prev_answers": list(prev) if prev else prev,
        "prev_answers_full": ", ".join(prev) if prev else None,
        "prev_start": prev_start,
        "cur_answers": list(cur),
        "cur_answers_full": ", ".join(cur),
        "cur_start": cur_start,
    }
    return {"question": "who is the highest paid sitcom actor", "id": 7, "timelines": [timeline]}


def _year(y: int) -> dict[str, Any]:
    return {"year": y, "month": None, "date": None}


def test_make_change_dates_both_answers() -> None:
    change = situatedqa.make_change(_record(_year(2005), _year(2011)), "dev", TODAY)
    assert change.qid == "7"
    assert change.prev_from == dt.datetime(2005, 1, 1, tzinfo=UTC)
    assert change.cur_from == dt.datetime(2011, 1, 1, tzinfo=UTC)
    assert change.dated
    assert change.content(change.cur) == "who is the highest paid sitcom actor? Charlie Sheen"
    assert change.entity.startswith("sqa:")
    assert change.valid_at(dt.datetime(2010, 12, 31, tzinfo=UTC)) == "prev"
    assert change.valid_at(dt.datetime(2011, 1, 1, tzinfo=UTC)) == "cur"
    assert change.valid_at(dt.datetime(2000, 1, 1, tzinfo=UTC)) is None


def test_make_change_orders_and_imputes_unknown_starts() -> None:
    notes: Counter[str] = Counter()
    same = situatedqa.make_change(_record(_year(2018), _year(2018)), "dev", TODAY, notes)
    assert same.cur_from == same.prev_from + dt.timedelta(days=1)
    assert same.dated
    no_prev = situatedqa.make_change(_record(None, _year(2017)), "dev", TODAY, notes)
    assert no_prev.prev_from == dt.datetime(2016, 12, 31, tzinfo=UTC)
    assert not no_prev.dated
    no_cur = situatedqa.make_change(_record(_year(2017), None), "dev", TODAY, notes)
    assert no_cur.cur_from == dt.datetime(2017, 1, 2, tzinfo=UTC)
    neither = situatedqa.make_change(_record(None, None), "dev", TODAY, notes)
    assert neither.prev_from is None
    assert neither.cur_from is None
    future = situatedqa.make_change(_record(_year(2005), _year(2031)), "dev", TODAY, notes)
    assert not future.dated
    assert future.cur_from == dt.datetime(2005, 1, 2, tzinfo=UTC)
    assert situatedqa.make_change(_record(_year(2011), _year(2005)), "dev", TODAY, notes) is None
    assert len(notes) == 6


def test_make_change_needs_two_different_answers() -> None:
    assert situatedqa.make_change(_record(None, _year(2017), prev=None), "dev", TODAY) is None
    same = _record(_year(2005), _year(2011), prev=("The Beatles",), cur=("beatles",))
    assert situatedqa.make_change(same, "dev", TODAY) is None
    assert situatedqa.make_change({"question": "q", "id": 1, "timelines": None}, "dev", TODAY) is None
    overlapping = _record(_year(2015), _year(2019), prev=("Tulsa", "Lawton"), cur=("Tulsa", "Edmond"))
    assert situatedqa.make_change(overlapping, "dev", TODAY).cur.value == "Tulsa, Edmond"


def test_a_list_answer_matches_only_when_all_its_items_are_given() -> None:
    version = situatedqa.Version(("Tulsa", "Lawton"), "Tulsa, Lawton", None)
    assert version.matches(["tulsa", "Lawton", "Tulsa", "Norman"])
    assert not version.matches(["Tulsa", "Edmond"])
    assert version.matches(["Tulsa, Lawton"])
    single = situatedqa.Version(("Charlie Sheen",), "Charlie Sheen", None)
    assert single.matches(["charlie sheen", "Ray Romano"])
    assert not single.matches([])


def test_make_as_of_picks_the_answer_valid_then_or_says_why_not() -> None:
    change = situatedqa.make_change(_record(_year(2005), _year(2011)), "dev", TODAY)
    undated = situatedqa.make_change(_record(None, _year(2011)), "dev", TODAY)
    changes = {"7": change, "8": undated}
    notes: Counter[str] = Counter()

    def ask(date: str, answer: str, qid: int = 7) -> Any:
        row = {"id": qid, "date": date, "answer": [answer], "edited_question": f"q as of {date}", "date_type": "x"}
        return situatedqa.make_as_of(row, changes, notes)

    early = ask("2008", "ray romano")
    assert (early.target, early.when.year, early.text) == ("prev", 2008, "q as of 2008")
    assert ask("March 3, 2011", "Charlie Sheen!").target == "cur"
    assert ask("2011", "Charlie Sheen").when == dt.datetime(2011, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    assert ask("2003", "Kelsey Grammer") is None  # before the old answer began: neither stored answer
    assert ask("2013", "Ray Romano") is None  # contradicts the timeline
    assert ask("someday", "Ray Romano") is None
    assert ask("2013", "Charlie Sheen", qid=8) is None
    assert ask("2013", "Charlie Sheen", qid=9) is None
    assert len(notes) == 5
