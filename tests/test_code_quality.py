"""ruff and mypy are clean on our code (generated code excluded by pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memevo.sidecar", "memevo.kernels", "memevo.client", "memevo.integrations")


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_is_clean() -> None:
    if shutil.which("ruff") is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    args = [sys.executable, "-m", "mypy"]
    for package in PACKAGES:
        args += ["-p", package]
    result = _run(*args)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("folder", ["benchmarks", "scripts"])
def test_mypy_is_clean_on_the_scripts_around_the_packages(folder: str) -> None:
    # mypy takes packages or files, not both in one run.
    result = _run(sys.executable, "-m", "mypy", folder)
    assert result.returncode == 0, result.stdout + result.stderr
