"""Pure helpers of the throughput, retrieval-latency and token benchmarks."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

throughput: Any = importlib.import_module("benchmarks.throughput")
tokens_bench: Any = importlib.import_module("benchmarks.tokens")


@pytest.mark.parametrize(
    ("callers", "processes", "expected"),
    [(1, 2, [1]), (8, 2, [4, 4]), (64, 2, [32, 32]), (7, 3, [3, 2, 2]), (2, 4, [1, 1])],
)
def test_callers_are_spread_over_at_most_the_client_processes(
    callers: int, processes: int, expected: list[int]
) -> None:
    assert throughput.split_callers(callers, processes) == expected


def test_sizes_parse_scientific_notation() -> None:
    assert throughput.parse_sizes("1e4,100000, 1e6") == [10_000, 100_000, 1_000_000]


def test_percentile_interpolates_and_is_nan_for_nothing() -> None:
    assert throughput.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert throughput.percentile([5.0], 99) == 5.0
    assert np.isnan(throughput.percentile([], 50))


def test_working_copy_links_table_files_and_copies_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "rocksdb").mkdir(parents=True)
    (source / "rocksdb" / "000012.sst").write_bytes(b"table")
    (source / "rocksdb" / "MANIFEST-000001").write_bytes(b"manifest")
    (source / "index.usearch").write_bytes(b"graph")
    target = tmp_path / "copy"
    throughput.working_copy(source, target)
    assert os.path.samefile(source / "rocksdb" / "000012.sst", target / "rocksdb" / "000012.sst")
    assert not os.path.samefile(source / "rocksdb" / "MANIFEST-000001", target / "rocksdb" / "MANIFEST-000001")
    (target / "index.usearch").write_bytes(b"changed")
    (target / "rocksdb" / "MANIFEST-000001").write_bytes(b"changed")
    assert (source / "index.usearch").read_bytes() == b"graph"
    assert (source / "rocksdb" / "MANIFEST-000001").read_bytes() == b"manifest"


def test_corpus_is_reproducible_clustered_and_unit_length(tmp_path: Path) -> None:
    corpus = throughput.Corpus(clusters=4, seed=1, locomo=tmp_path / "missing.json")
    assert corpus.source == "synthetic"
    clusters, vectors = corpus.vectors(np.random.default_rng(0), 400)
    again_clusters, again = throughput.Corpus(clusters=4, seed=1, locomo=tmp_path / "missing.json").vectors(
        np.random.default_rng(0), 400
    )
    assert np.array_equal(clusters, again_clusters)
    assert np.array_equal(vectors, again)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    same = vectors[clusters == clusters[0]]
    other = vectors[clusters != clusters[0]]
    assert float((same @ same[0]).mean()) > float((other @ same[0]).mean()) + 0.3
    rng = np.random.default_rng(2)
    assert corpus.text(rng, 0)
    assert corpus.query_text(rng, 0)


def test_corpus_uses_locomo_turns_and_questions(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    sample = {
        "conversation": {
            "speaker_a": "A",
            "session_1_date_time": "1 May 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}],
        },
        "qa": [{"question": "What did Ann adopt?", "answer": "a cat"}],
    }
    path.write_text(json.dumps([sample]))
    corpus = throughput.Corpus(clusters=2, locomo=path)
    rng = np.random.default_rng(0)
    assert corpus.source == "locomo"
    assert corpus.text(rng, 1) == "Ann: I adopted a cat."
    assert corpus.query_text(rng, 1) == "What did Ann adopt?"
    assert throughput.store_name(10, corpus).endswith("-locomo")


def _row(rpc: str, calls: float, floor: float) -> dict[str, Any]:
    return {
        "rpc": rpc,
        "transport": "unix",
        "callers": 8,
        "n_memories": 100_000,
        "calls_per_s": calls,
        "floor_calls_per_s": floor,
    }


def test_targets_are_judged_from_the_rows_and_the_burst() -> None:
    burst = {
        "ack_per_s": 6_000.0,
        "recall_missing": 0,
        "sustained_indexed_per_s": 700.0,
        "steady_indexed_per_s": 900.0,
        "steady_s": 60.0,
        "raw_build_per_s": 1_000.0,
    }
    met = throughput.summarise({"burst": burst}, [_row("recall", 1_600.0, 3_000.0)])
    assert met["recall_unix_100k_8_callers"]["met"] is True
    assert met["stream_burst"]["met"] is True
    assert met["sustained_ingest"]["met"] is True
    missed = throughput.summarise(
        {"burst": burst | {"recall_missing": 1, "steady_indexed_per_s": 700.0}},
        [_row("recall", 1_600.0, 4_000.0)],  # 2.5x slower than the floor
    )
    assert missed["recall_unix_100k_8_callers"]["met"] is False
    assert missed["stream_burst"]["met"] is False
    assert missed["sustained_ingest"]["met"] is False
    # The steady state (writes waiting for the builder) is what is judged, and only when it lasted long enough.
    assert met["sustained_ingest"]["share_of_raw"] == 0.9
    assert met["sustained_ingest"]["share_of_raw_whole_window"] == 0.7
    short = throughput.summarise({"burst": burst | {"steady_s": 5.0}}, [])
    assert short["sustained_ingest"]["share_of_raw"] is None
    assert short["sustained_ingest"]["met"] is False
    assert throughput.summarise({}, []) == {}


def test_recall_scaling_is_judged_as_8_callers_over_1_per_rpc() -> None:
    rows = [
        _row("vrecall", 300.0, 0.0) | {"callers": 1},
        _row("vrecall", 540.0, 0.0),
        _row("recall", 300.0, 0.0) | {"callers": 1},
        _row("recall", 450.0, 0.0),
    ]
    met = throughput.summarise({}, rows)
    assert met["vrecall_unix_100k_8_over_1_caller"] == {
        "calls_per_s": [300.0, 540.0],
        "ratio": 1.8,
        "target_ratio": 1.7,
        "met": True,
    }
    assert met["recall_unix_100k_8_over_1_caller"]["ratio"] == 1.5
    assert met["recall_unix_100k_8_over_1_caller"]["met"] is False
    assert "vrecall_unix_100k_8_over_1_caller" not in throughput.summarise({}, rows[2:])


def test_token_blocks_stay_within_their_budget_and_keep_every_text() -> None:
    texts = [f"turn number {i} says something short" for i in range(200)]
    blocks = tokens_bench.blocks(texts, lambda s: len(s.split()), budget=50)
    assert len(blocks) > 1
    assert sum(len(b.split("\n")) for b in blocks) == len(texts)
    for block in blocks:
        assert sum(len(line.split()) + 1 for line in block.split("\n")) <= 50


def test_token_error_statistics() -> None:
    stats = tokens_bench.errors(["a", "b", "c", "d"], lambda s: 11 if s == "a" else 9, lambda s: 10)
    assert stats["texts"] == 4
    assert stats["median_abs"] == pytest.approx(0.1)
    assert stats["bias"] == pytest.approx(-0.05)
    assert stats["total_ratio"] == pytest.approx(0.95)
