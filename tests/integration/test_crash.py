"""Crash harness, short: SIGKILL a real sidecar once under each load phase and check what survived.

The long run is ``python benchmarks/crash.py --trials 20``; this runs one kill
per registered phase (every phase the harness knows, so a newly registered one
is covered here too) on one data directory, then a final restart with retries.
See benchmarks/crash.py for what is verified after each restart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks import crash  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """One kill per phase, after 0.2 to 0.6 s of load, then the final verified restart."""
    lines: list[str] = []
    rows = crash.run_trials(
        tmp_path_factory.mktemp("crash-data"),
        trials=len(crash.PHASES),
        phases=list(crash.PHASES),
        seed=8,
        kill_after_s=(0.2, 0.6),
        old_sample=0,
        log=lines.append,
    )
    print("\n".join(lines))
    return rows


def test_every_phase_was_killed_under_load(results: list[Any]) -> None:
    killed = [row for row in results if row.phase != "final"]
    assert [row.phase for row in killed] == list(crash.PHASES)
    assert all(row.written > 0 for row in killed), [(row.phase, row.written) for row in killed]


def test_no_problem_after_any_restart(results: list[Any]) -> None:
    problems = [f"{row.phase} (trial {row.trial}): {p}" for row in results for p in row.problems]
    assert not problems, "\n".join(problems[:50])


def test_every_write_is_stored_once_after_the_retries(results: list[Any]) -> None:
    final = results[-1]
    # Every write was acknowledged in the end (first try or idempotent retry), and each is one memory.
    assert final.unacknowledged_present == final.unacknowledged_absent == 0
    # Consolidation adds ABSTRACTION memories of its own; every other memory is an acknowledged write.
    assert final.acknowledged + final.abstractions == final.memories > 0
    assert final.self_hits == final.probed == final.memories


def test_the_sweep_phase_swept_and_states_stay_in_the_policy_range(results: list[Any]) -> None:
    sweep = next(row for row in results if row.phase == "sweep")
    assert "transitions" in sweep.notes, "no Govern call succeeded before the kill"
    # The harness policy archives and reactivates but never evicts; consolidation absorbs.
    states = {state for row in results for state in row.by_state}
    assert states <= {"MEMORY_STATE_ACTIVE", "MEMORY_STATE_ARCHIVED", "MEMORY_STATE_CONSOLIDATED"}


def test_the_consolidation_phase_consolidated_atomically(results: list[Any]) -> None:
    # Govern ran after the phase's first group was acknowledged, before any kill: at least one abstraction.
    final = results[-1]
    assert final.abstractions > 0
    assert final.by_state.get("MEMORY_STATE_CONSOLIDATED", 0) >= 3 * final.abstractions
