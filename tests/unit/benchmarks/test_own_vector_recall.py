"""benchmarks/own_vector_recall.py on a tiny store: every cell answers and the figures have their shape.

"before" is this checkout's own committed recall.py (``--before HEAD``); figures are checked for sense, never for
speed.
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

own_vector_recall: Any = importlib.import_module("benchmarks.own_vector_recall")


def test_a_tiny_run_reports_every_cell(tmp_path: Path) -> None:
    out = tmp_path / "out" / "own_vector_recall.json"
    argv = ["--n", "600", "--self-queries", "30", "--queries", "10", "--repeats", "1", "--before", "HEAD",
            "--cache", str(tmp_path / "cache"), "--json", str(out)]  # fmt: skip
    assert own_vector_recall.main(argv) == 0
    result = json.loads(out.read_text())
    assert (result["n"], result["self_queries"], result["fresh_queries"]) == (600, 30, 10)
    cells = {(row["case"], row["variant"]): row for row in result["rows"]}
    cases = ("self k=1", "self k=10", "fresh k=10")
    assert set(cells) == {(case, variant) for case in cases for variant in ("before", "after")}
    for (case, variant), row in cells.items():
        assert 0 < row["p50_ms"] <= row["p99_ms"], row
        if case.startswith("self") and variant == "after":
            assert row["self_found"] == 1.0, row
        if case.startswith("fresh"):
            assert row["self_found"] is None, row
    assert list((tmp_path / "cache").iterdir()), "the built store is cached for the next run"
