"""Where a benchmark figure was measured: CPU, cores, memory, Python, package versions, revision, load.

Every benchmark writes this beside its figures (RESULTS.md asks for command,
date, machine and versions), so it lives in one place.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PACKAGES = ("memevo", "grpcio", "protobuf", "numpy", "numba", "usearch", "rocksdict")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Physical memory in GiB, or None where the OS does not say."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return None


def versions(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package, None when it is missing."""
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def revision() -> str | None:
    """The repository's short commit id, with "+dirty" when the work tree has changes; None outside git."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{head}+dirty" if dirty else head
    return None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (other jobs share the cores: read figures against them)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(packages: Iterable[str] = DEFAULT_PACKAGES, **extra: Any) -> dict[str, Any]:
    """Everything above in one JSON-ready dict, plus the date and any ``extra`` fields."""
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions(packages),
        "revision": revision(),
        "load_average": load_average(),
        **extra,
    }
