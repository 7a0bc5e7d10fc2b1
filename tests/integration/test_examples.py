"""The runnable examples run to completion and show the effects they promise.

``examples/python_agent.py`` starts its own sidecar (offline ``local`` embedder)
and exits non-zero when an expected effect did not happen; this test runs it
exactly as a user would. The Node example runs in CI via ``npm --prefix
clients/typescript run example``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240


def run_example(script: str) -> subprocess.CompletedProcess[str]:
    """Run an example from the repository root as a user would; bounded by TIMEOUT_S."""
    return subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_python_agent_example_runs_and_shows_its_effects() -> None:
    result = run_example("examples/python_agent.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "FAILED" not in output, output
    assert "remembered #4 (SUPERSEDED_PREVIOUS, replaced #3)" in result.stdout, output
    assert "ok: the context shows only the current value" in result.stdout, output
    assert "ok: the history keeps both: email OBSOLETE and superseded by #4, phone ACTIVE" in result.stdout, output
    assert "(historical reference — the situation may have changed; superseded by memory 4)" in result.stdout, output
    assert "ok: at first the agent tried the runbook #1 (ranked first)" in result.stdout, output
    assert "ok: #2 demoted #1" in result.stdout, output
    assert "(historical reference / counter-example (strategy 2 did better))" in result.stdout, output
    assert "formed under an older framework (planner-v1)" in result.stdout, output
    assert result.stdout.rstrip().endswith("done: every expected effect happened"), output


def test_langgraph_example_runs_and_shows_its_effects() -> None:
    result = run_example("examples/langgraph_agent.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "FAILED" not in output, output
    assert "alice: Where do I live?\n  agent: From memory: The user lives in Porto." in result.stdout, output
    assert "bob: Where do I live?\n  agent: I don't know where you live yet." in result.stdout, output
    assert "ok: memevo keeps Lisbon as history" in result.stdout, output
    assert result.stdout.rstrip().endswith("done: every expected effect happened"), output
