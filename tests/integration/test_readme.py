"""Every README code block runs as written (issue 42): ``scripts/readme_check.py``, whose docstring says what it
skips (installs and the suites .ci/run runs itself) and what it maps (HOME, the README's socket and console port)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "readme_check.py"


@pytest.mark.timeout(900)
def test_every_readme_block_runs_as_written() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=840, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    assert "every README block ran as written" in result.stdout, result.stdout[-6000:]
    assert "the reviewer accepted a consolidation" in result.stdout, result.stdout[-6000:]
