"""Make tests/naive.py importable as ``naive`` (stumpy's layout), and share column builders."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
