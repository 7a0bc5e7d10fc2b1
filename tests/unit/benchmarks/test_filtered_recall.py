"""benchmarks/filtered_recall.py on a tiny store: both variants answer, alike, and the figures have their shape.

"before" is this checkout's own committed recall.py (``--before HEAD``), so the two variants must return the
same hits for every query; figures are checked for sense, never for speed.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

filtered_recall: Any = importlib.import_module("benchmarks.filtered_recall")


def test_a_tiny_run_reports_both_variants_alike(tmp_path: Path) -> None:
    out = tmp_path / "out" / "filtered.json"
    scratch = tmp_path / "scratch"  # not there yet: the benchmark makes it
    argv = ["--n", "600", "--queries", "10", "--repeats", "1", "--before", "HEAD", "--cache", str(tmp_path / "cache"),
            "--scratch", str(scratch), "--json", str(out)]  # fmt: skip
    assert filtered_recall.main(argv) == 0
    result = json.loads(out.read_text())
    assert (result["n"], result["queries"]) == (600, 10)
    cells = {(row["case"], row["variant"]): row for row in result["rows"]}
    assert set(cells) == {(case, variant) for case in ("plain", "filtered") for variant in ("before", "after")}
    for row in cells.values():
        assert 0 < row["p50_ms"] <= row["p99_ms"], row
        assert row["cpu_p50_ms"] > 0, row
        assert row["recall_at_10"] >= 0.9, row  # a tiny store is searched (nearly) exactly
        assert row["same_hits_as_before"] == 10, row
    assert not list(scratch.iterdir()), "the run's working copy is left behind"
    assert list((tmp_path / "cache").iterdir()), "the built store is cached for the next run"
