"""The console overview's experiment panel (issue 44) in a real headless Chromium, against a live sidecar.

A self-tuning experiment runs on its own sidecar (the other console tests' history has none): the panel must show
its arms with GetStats' figures and, once the posterior rule promotes the candidate, the decision with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar
from helpers import pack, stub, unit, wait_until
from test_console import (
    ADMIN,
    DIM,
    _no_console_errors,
    _shot,
    _wait_css,
    browser,  # noqa: F401 (a fixture: pytest finds it by name in this module)
    start_console_sidecar,
)

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

NS = "panel"
SUCCESS = {"control": 0.3, "candidate": 0.9}


@pytest.fixture(scope="module")
def experiment_sidecar() -> Iterator[tuple[Sidecar, str]]:
    process, url = start_console_sidecar("console-experiment-")
    yield process, url
    process.stop()


def _start_experiment(service: Any, rng: np.random.Generator) -> None:
    """The operator bounds beta; the control is the policy in force, the candidate moves beta only."""
    service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(
            memories=[
                memory_pb2.MemoryInput(content=f"note {i}", vector=pack(unit(rng.normal(size=DIM))), namespace=NS)
                for i in range(8)
            ]
        )
    )
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.name = "operator"
    policy.tuning_bounds.add(parameter="beta", min=0.3, max=0.9)
    current = service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy)).policy
    candidate = policy_pb2.Policy()
    candidate.CopyFrom(current)
    candidate.name = "candidate"
    for entry in candidate.kinds:
        entry.beta = 0.85
    experiment = policy_pb2.Experiment(name="self-tuning")
    experiment.arms.add(name="control", policy=current)
    experiment.arms.add(name="candidate", policy=candidate)
    experiment.adaptive.CopyFrom(
        policy_pb2.AdaptiveSettings(
            allocation=policy_pb2.ALLOCATION_MODE_THOMPSON,
            floor_share=0.1,
            snapshot_outcomes=10,
            promote_probability=0.95,
            min_outcomes=15,
            min_promotion_interval_s=0.001,
            tunable_parameters=["beta"],
            replay_tolerance=2.0,  # the toy store's replay says little: the check runs, the posterior decides
        )
    )
    service.SetExperiment(memory_service_pb2.SetExperimentRequest(experiment=experiment))


def _run_until_promoted(service: Any, rng: np.random.Generator) -> policy_pb2.ExperimentStats:
    """A simulated agent that succeeds more often with the candidate's retrievals, until the candidate is promoted."""

    def phase() -> int:
        return int(service.GetStats(memory_service_pb2.GetStatsRequest()).experiment.phase)

    for _ in range(600):
        if phase() != policy_pb2.EXPERIMENT_PHASE_RUNNING:
            break
        found = service.Recall(
            memory_service_pb2.RecallRequest(
                query_vector=pack(unit(rng.normal(size=DIM))), k=3, filter=memory_service_pb2.RecallFilter(namespace=NS)
            )
        )
        ok = rng.random() < SUCCESS.get(found.arm, 0.0)
        outcome = memory_service_pb2.OUTCOME_SUCCESS if ok else memory_service_pb2.OUTCOME_FAILURE
        service.ReportOutcome(memory_service_pb2.ReportOutcomeRequest(retrieval_id=found.retrieval_id, outcome=outcome))
    wait_until(lambda: phase() == policy_pb2.EXPERIMENT_PHASE_WATCHING, "the candidate's promotion", timeout_s=30)
    stats: policy_pb2.ExperimentStats = service.GetStats(memory_service_pb2.GetStatsRequest()).experiment
    return stats


def _panel(driver: Any) -> tuple[str, dict[str, list[str]]]:
    """The panel's heading and its rows by arm name (the first cell without its '(control)' / '(promoted)' marks)."""
    from selenium.webdriver.common.by import By

    panel = _wait_css(driver, "#experiment")[0]
    heading = panel.find_element(By.TAG_NAME, "h2").text
    rows: dict[str, list[str]] = {}
    for row in panel.find_elements(By.CSS_SELECTOR, "tbody tr"):
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        rows[cells[0].split(" (")[0]] = cells
    return heading, rows


def _number(shown: str) -> float:
    """A percentage as the panel prints it ('31.3 %'), as a number."""
    assert shown.endswith(" %"), shown
    return float(shown.removesuffix(" %"))


def test_the_experiment_panel_in_a_browser(experiment_sidecar: tuple[Sidecar, str], browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    process, url = experiment_sidecar
    service = stub(process.unix_target, ADMIN)
    driver = browser
    rng = np.random.default_rng(44)
    _start_experiment(service, rng)

    # Before any outcome: both arms at an even share, and no decision yet.
    driver.get(f"{url}/overview#token={ADMIN}")
    heading, rows = _panel(driver)
    assert heading == "Experiment self-tuning: THOMPSON allocation, RUNNING, snapshot 0"
    assert sorted(rows) == ["candidate", "control"]
    assert rows["control"][0] == "control (control)"
    assert [rows[name][1] for name in ("control", "candidate")] == ["50.0 %", "50.0 %"]
    assert [rows[name][2] for name in ("control", "candidate")] == ["0", "0"]
    assert driver.find_element(By.CSS_SELECTOR, "#experiment p.muted").text == "no automatic decision yet"
    assert not driver.find_elements(By.CSS_SELECTOR, "#experiment-decisions")
    _no_console_errors(driver, "overview, experiment running")

    stats = _run_until_promoted(service, rng)

    # After the promotion: the panel is GetStats' experiment, figure for figure, and lists the decision.
    driver.get(f"{url}/overview#token={ADMIN}")
    _wait_css(driver, "#experiment-decisions li")
    heading, rows = _panel(driver)
    assert heading == f"Experiment self-tuning: THOMPSON allocation, WATCHING, snapshot {stats.snapshot}"
    assert rows["candidate"][0] == "candidate (promoted)"
    assert rows["control"][0] == "control (control)"
    for arm in stats.arms:
        share, outcomes, rate, interval, best, beats = rows[arm.name][1:]
        assert outcomes == str(arm.outcome_count), arm.name
        low, high = interval.split(" – ")
        shown = [_number(x) for x in (share, rate, low, high, best, beats)]
        wanted = [arm.share, arm.success_rate, arm.success_low, arm.success_high, arm.probability_best]
        wanted.append(arm.probability_beats_control)
        # One decimal of a percentage; JavaScript's toFixed rounds halves up where Python's format rounds to even.
        assert shown == pytest.approx([100 * x for x in wanted], abs=0.051), arm.name
    assert int(rows["candidate"][2]) >= 15
    decisions = [item.text for item in driver.find_elements(By.CSS_SELECTOR, "#experiment-decisions li")]
    assert len(decisions) == len(stats.decisions) >= 1
    promoted = stats.decisions[-1]
    assert promoted.kind == policy_pb2.EXPERIMENT_DECISION_KIND_PROMOTED
    assert decisions[-1].endswith(f"PROMOTED candidate: {promoted.reason}")
    assert "P(better than control)" in decisions[-1]
    assert not driver.find_elements(By.CSS_SELECTOR, "#experiment p.muted")
    _no_console_errors(driver, "overview, candidate promoted")
    _shot(driver, "overview-experiment")
