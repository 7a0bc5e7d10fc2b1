"""benchmarks/gil_hold.py in a fraction of a second: every cell runs, and the figures have their shape."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

gil_hold: Any = importlib.import_module("benchmarks.gil_hold")


def test_a_short_run_measures_every_cell_and_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "gil.json"
    scratch = tmp_path / "scratch"
    assert gil_hold.main(["--seconds", "0.2", "--repeats", "1", "--scratch", str(scratch), "--json", str(out)]) == 0
    rows = {row["background"]: row for row in json.loads(out.read_text())["rows"]}
    assert len(rows) == 4
    assert rows["sleep 1 ms (control)"]["loop_share_of_control"] == 1.0
    for row in rows.values():
        assert row["loop_per_s"] > 0, row
        assert row["background_per_s"] > 0, row
    assert not list(scratch.iterdir()), "the throwaway database is removed"
