"""benchmarks/peers_text.py's pure helpers: which LoCoMo sentences and questions it reads, rounds, agreement, medians.

No system is started here: the script's rows come from real processes and are never checked for speed.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

peers_text: Any = importlib.import_module("benchmarks.peers_text")

CONVERSATION = {
    "conversation": {
        "speaker_a": "Ann",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Lisbon."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": " Nice! "},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "I moved to Lisbon."},
        ],
    },
    "observation": {"session_1_observation": {"Ann": [["Ann lives in Lisbon.", "D1:1"]], "Bo": []}},
    "event_summary": {"events_session_1": {"Ann": ["Ann moves to Lisbon."], "Bo": [], "date": "8 May, 2023"}},
    "qa": [{"question": "Where does Ann live?"}, {"question": "Where does Ann live? "}, {"question": "Who is Bo?"}],
}


def test_sentences_are_turns_then_observations_then_events_each_once() -> None:
    assert peers_text.locomo_sentences([CONVERSATION]) == [
        "I moved to Lisbon.",
        "Nice!",
        "Ann lives in Lisbon.",
        "Ann moves to Lisbon.",
    ]
    assert peers_text.locomo_questions([CONVERSATION]) == ["Where does Ann live?", "Who is Bo?"]


def test_sample_is_seeded_and_refuses_more_than_there_are() -> None:
    items = [f"s{i}" for i in range(50)]
    assert peers_text.sample(items, 10, 3, "sentences") == peers_text.sample(items, 10, 3, "sentences")
    assert sorted(peers_text.sample(items, 50, 3, "sentences")) == sorted(items)
    with pytest.raises(ValueError, match="at most"):
        peers_text.sample(items, 51, 3, "sentences")


def test_each_system_runs_first_in_some_round() -> None:
    names = ["memevo", "chromadb", "chromadb-int8"]
    firsts = {peers_text.rotated(names, r)[0] for r in range(3)}
    assert firsts == set(names)
    assert peers_text.rotated(names, 4) == ["chromadb", "chromadb-int8", "memevo"]
    assert peers_text.rotated([], 2) == []


def test_agreement_is_the_share_of_the_references_top_10_found() -> None:
    reference = [list(range(10)), list(range(10, 20))]
    got = [[*range(5), *range(100, 105)], list(range(10, 20))]
    assert peers_text.agreement(got, reference) == pytest.approx(0.75)
    assert peers_text.agreement(reference, reference) == 1.0


def test_summary_takes_each_numbers_median_over_rounds_and_keeps_the_labels() -> None:
    rows = [
        {"system": "memevo", "transport": "gRPC", "ingest_s": 3.0, "query_p50_ms": 9.0, "round": 1},
        {"system": "memevo", "transport": "gRPC", "ingest_s": 1.0, "query_p50_ms": 7.0, "round": 2},
        {"system": "memevo", "transport": "gRPC", "ingest_s": 2.0, "query_p50_ms": 8.0, "round": 3},
    ]
    merged = peers_text.summarise(rows)
    assert merged["system"] == "memevo"
    assert merged["transport"] == "gRPC"
    assert (merged["ingest_s"], merged["query_p50_ms"], merged["rounds"]) == (2.0, 8.0, 3)


def test_ratios_are_memevos_over_chromadbs_and_empty_without_either() -> None:
    memevo = {"system": "memevo", "ingest_s": 10.0, "indexed_s": 12.0, "acknowledged_per_s": 500.0}
    memevo.update(query_p50_ms=10.0, query_p99_ms=20.0)
    chroma = {"system": "chromadb", "ingest_s": 100.0, "indexed_s": 100.0, "acknowledged_per_s": 50.0}
    chroma.update(query_p50_ms=100.0, query_p99_ms=200.0)
    ratios = peers_text.ratios([memevo, chroma])
    assert ratios["ingest_s"] == pytest.approx(0.1)
    assert ratios["acknowledged_per_s"] == pytest.approx(10.0)
    assert ratios["query_p99_ms"] == pytest.approx(0.1)
    assert peers_text.ratios([memevo, {"system": "chromadb", "missing": True}]) == {}


def test_a_missing_row_formats_with_every_column() -> None:
    line = peers_text.format_row({"system": "chromadb", "missing": True})
    assert line.count("|") == peers_text.HEADER.count("|")
    row = {"system": "memevo", "transport": "gRPC", "embedder": "int8", "ingest_s": 1.0, "indexed_s": 1.5}
    row.update(acknowledged_per_s=100.0, query_p50_ms=9.0, query_p99_ms=20.0, rss_mib=600.0, peak_rss_mib=700.0)
    row["agreement_with_chromadb"] = math.nan
    assert peers_text.format_row(row).count("|") == peers_text.HEADER.count("|")
