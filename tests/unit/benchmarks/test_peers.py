"""benchmarks/peers.py on a tiny data set: memevo alone when the peers are missing, and beside them when installed.

memevo's row comes from a real ``memevo serve`` process; the figures are
checked for shape and sense (recall against the exact answers), never for speed.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

peers: Any = importlib.import_module("benchmarks.peers")

TINY = ["--n", "800", "--dimension", "16", "--entities", "12", "--queries", "12", "--repeats", "1"]
MEASURED = (
    "ingest_s", "indexed_s", "plain_p50_ms", "plain_p99_ms", "filtered_p50_ms", "filtered_p99_ms", "rss_mib",
    "peak_rss_mib",
)  # fmt: skip


def run_tiny(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "peers.json"
    assert peers.main([*TINY, "--scratch", str(tmp_path), "--json", str(out), *extra]) == 0
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def check_measured(row: dict[str, Any]) -> None:
    for field in MEASURED:
        assert row[field] > 0, (row["system"], field)
    assert row["indexed_s"] >= row["ingest_s"]
    assert row["plain_p99_ms"] >= row["plain_p50_ms"]
    assert row["peak_rss_mib"] >= row["rss_mib"] * 0.99
    # Exact answers are known; a tiny store is searched (nearly) exactly by every system.
    assert row["plain_recall_at_10"] >= 0.9, row
    assert row["filtered_recall_at_10"] >= 0.9, row


def test_memevo_runs_alone_when_the_peers_are_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "installed", lambda name: name == "memevo")
    result = run_tiny(tmp_path)
    rows = {row["system"]: row for row in result["rows"]}
    assert list(rows) == ["memevo", "chromadb", "lancedb"]
    assert rows["chromadb"] == {"system": "chromadb", "missing": True}
    assert rows["lancedb"] == {"system": "lancedb", "missing": True}
    check_measured(rows["memevo"])
    assert rows["memevo"]["transport"] == "gRPC, unix socket"
    assert (result["n"], result["k"]) == (800, 10)
    assert result["machine"]["versions"]["memevo"]
    assert "not installed" in peers.table(result)
    assert not list(tmp_path.glob("memevo-peers-*")), "the run's scratch folder is left behind"


def test_memevo_served_again_with_other_arguments_is_a_row_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "installed", lambda name: name == "memevo")
    result = run_tiny(tmp_path, "--peers", "memevo", "--memevo-also=--entity-vectors-mib 0")
    first, again = result["rows"]
    assert (first["system"], again["system"]) == ("memevo", "memevo (--entity-vectors-mib 0)")
    assert np.isnan(again["ingest_s"])  # the same data: not written again
    assert np.isnan(again["indexed_s"])
    for row in (first, again):
        assert row["plain_recall_at_10"] >= 0.9, row
        assert row["filtered_recall_at_10"] >= 0.9, row
        assert row["filtered_p50_ms"] > 0
    assert "memevo (--entity-vectors-mib 0)" in peers.table(result)


def test_every_installed_peer_measures_the_same_queries(tmp_path: Path) -> None:
    present = [name for name in peers.PEERS if peers.installed(name)]
    if present == ["memevo"]:
        pytest.skip("no peer installed (pip install -e '.[peers]'); the memevo-alone test covers the script")
    result = run_tiny(tmp_path, "--peers", ",".join(present))
    assert [row["system"] for row in result["rows"]] == present
    for row in result["rows"]:
        check_measured(row)


def test_exact_answers_respect_the_entity_filter() -> None:
    vectors, about = peers.make_data(500, 8, 7, seed=3)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    queries, entities, plain, filtered = peers.make_queries(vectors, about, 20, seed=3)
    for query, entity, top, top_in_entity in zip(queries, entities, plain, filtered, strict=True):
        scores = vectors @ query
        assert len(top) == peers.K
        assert scores[top[0]] == pytest.approx(scores.max())
        number = int(entity.split("-")[1])
        assert all(about[row] == number for row in top_in_entity)
        assert len(top_in_entity) == min(peers.K, int((about == number).sum()))


def test_recall_at_k_counts_the_share_of_the_exact_answers_found() -> None:
    assert peers.recall_at_k([[1, 2, 3], [4]], [[1, 2, 9], [4]]) == pytest.approx((2 / 3 + 1) / 2)
