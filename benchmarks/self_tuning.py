"""Self-tuning experiments in simulation: regret, time to promotion, false promotions, rollback (issue 44).

A population of agents retrieves through an experiment of 2-4 arms; a
retrieval's task succeeds with the probability of the arm that ranked it. The
allocation and decision rules are the sidecar's own pure functions
(:mod:`memevo.sidecar.experiments.adaptive`): Thompson shares from posterior
snapshots, assignment by the hash of (experiment, snapshot, retrieval id),
promotion when P(better than control) >= the stated probability over the
minimum of outcomes, then a watch with rollback below the control's 95 %
Wilson interval at promotion (:func:`memevo.sidecar.experiments.arms.wilson_interval`).
What the sidecar adds around them and this loop does not simulate: outcomes
arriving late (here each comes before the next retrieval), the replay check
(a simulation has no captured store to replay) and the promotion interval
(one experiment promotes at most once).

Scenarios, each over seeded runs of ``--horizon`` retrievals:

- ``better``: one arm's success rate is ``--lift`` above the others'. Regret
  (expected successes lost against always using the best arm, the oracle) of
  the adaptive experiment and of a fixed equal split (50/50 for two arms);
  retrievals to promotion; promotions of the wrong arm; rollbacks of a right
  promotion (false rollbacks).
- ``null``: every arm has the same rate. False promotions (target <= 1 %).
- ``regression``: as ``better``, but after the promotion the promoted arm's
  rate drops ``--drop`` below the control's (a planted regression). Rollbacks
  and outcomes from promotion to rollback.

    nice -n 19 python benchmarks/self_tuning.py                  # 1,000 runs a scenario and arm count
    nice -n 19 python benchmarks/self_tuning.py --runs 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memevo.sidecar.experiments.adaptive import (
    AdaptiveRules,
    ArmCounts,
    assignment_point,
    pick,
    promotion_call,
    rollback_call,
    snapshot_due,
    thompson_shares,
)
from memevo.sidecar.experiments.arms import wilson_interval


@dataclass(frozen=True)
class RunResult:
    """One simulated experiment."""

    regret: float
    """Expected successes lost against always using the best arm."""
    regret_fixed: float
    """The same for a fixed equal split over the whole horizon (no promotion)."""
    promoted: int
    """Index of the promoted arm; -1 for none."""
    promoted_at: int
    """Retrievals before the promotion; -1 for none."""
    rolled_back: bool
    rollback_after: int
    """Outcomes of the promoted policy from promotion to rollback; -1 for none."""


def simulate(
    rates: list[float],
    rules: AdaptiveRules,
    *,
    horizon: int,
    seed: int,
    rates_after_promotion: list[float] | None = None,
    watch: int = 0,
) -> RunResult:
    """One experiment of ``horizon`` retrievals; arm 0 is the control (the policy in force).

    A promoted policy is watched for at least ``watch`` outcomes, past the horizon if need be (regret counts
    the horizon only).
    """
    rng = np.random.default_rng(seed)
    name = f"sim-{seed}"
    n = len(rates)
    best = max(rates)
    successes = [0.0] * n
    failures = [0.0] * n
    outcomes = [0] * n
    shares = thompson_shares([ArmCounts(0.0, 0.0, 0)] * n, rules.floor_share)
    snapshot = 0
    regret = 0.0
    promoted = -1
    promoted_at = -1
    control_low = 0.0
    after = ArmCounts(0.0, 0.0, 0)
    rolled_back = False
    rollback_after = -1
    total = 0
    step = -1
    while True:
        step += 1
        watching = promoted >= 0 and not rolled_back
        if step >= horizon and not (watching and after.outcomes < watch):
            break
        if rolled_back:
            arm, rate = 0, rates[0]
        elif promoted >= 0:
            arm = promoted
            rate = (rates_after_promotion or rates)[promoted]
        else:
            arm = pick(assignment_point(name, snapshot, f"r{step}"), shares)
            rate = rates[arm]
        # The oracle uses the best arm of the moment: after a planted regression, no longer the promoted one.
        oracle = max(rates_after_promotion) if promoted >= 0 and rates_after_promotion else best
        if step < horizon:
            regret += oracle - rate
        success = bool(rng.random() < rate)
        total += 1
        if promoted >= 0 and not rolled_back:
            after = ArmCounts(after.successes + success, after.failures + (not success), after.outcomes + 1)
        elif not rolled_back:
            successes[arm] += success
            failures[arm] += not success
            outcomes[arm] += 1
        if rolled_back or not snapshot_due(total, snapshot, rules.snapshot_outcomes):
            continue
        snapshot = max(snapshot + 1, total // rules.snapshot_outcomes)
        if promoted >= 0:
            if rollback_call(after, control_low, rules) is not None:
                rolled_back = True
                rollback_after = after.outcomes
            continue
        counts = [ArmCounts(successes[i], failures[i], outcomes[i]) for i in range(n)]
        call = promotion_call(counts, rules, now_s=float(step), last_promotion_s=None)
        if call is not None:
            promoted, promoted_at = call.arm, step + 1
            control_low = wilson_interval(successes[0], successes[0] + failures[0])[0]
        else:
            shares = thompson_shares(counts, rules.floor_share)
    regret_fixed = horizon * (best - sum(rates) / n)
    return RunResult(regret, regret_fixed, promoted, promoted_at, rolled_back, rollback_after)


def _summary(results: list[RunResult], better: int | None) -> dict[str, Any]:
    promoted = [r for r in results if r.promoted >= 0]
    right = [r for r in promoted if better is not None and r.promoted == better]
    times = [r.promoted_at for r in right]
    rollbacks = [r.rollback_after for r in results if r.rolled_back]
    return {
        "runs": len(results),
        "regret_mean": statistics.fmean(r.regret for r in results),
        "regret_fixed_mean": statistics.fmean(r.regret_fixed for r in results),
        "promoted_share": len(promoted) / len(results),
        "wrong_promotions_share": (len(promoted) - len(right)) / len(results),
        "right_promotions_share": len(right) / len(results),
        "promotion_at_median": statistics.median(times) if times else None,
        "promotion_at_p90": float(np.percentile(times, 90)) if times else None,
        "rollback_share": len(rollbacks) / len(results),
        "rollback_of_promoted_share": len(rollbacks) / len(promoted) if promoted else 0.0,
        "rollback_after_median": statistics.median(rollbacks) if rollbacks else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="seeded runs per scenario and arm count")
    parser.add_argument("--horizon", type=int, default=5000, help="retrievals per run")
    parser.add_argument("--base", type=float, default=0.5, help="success rate of the control (and equal arms)")
    parser.add_argument("--lift", type=float, default=0.10, help="the better arm's rate above the others'")
    parser.add_argument("--drop", type=float, default=0.10, help="planted regression: promoted rate below control")
    parser.add_argument("--arms", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--scenarios", nargs="+", default=["better", "null", "regression"])
    parser.add_argument("--watch", type=int, default=1000, help="outcomes a promotion is watched at least")
    parser.add_argument("--promote-probability", type=float, default=0.999)
    parser.add_argument("--min-outcomes", type=int, default=200)
    parser.add_argument("--snapshot-outcomes", type=int, default=50)
    parser.add_argument("--floor-share", type=float, default=0.05)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    rules = AdaptiveRules(
        thompson=True,
        floor_share=args.floor_share,
        snapshot_outcomes=args.snapshot_outcomes,
        promote_probability=args.promote_probability,
        min_outcomes=args.min_outcomes,
        min_promotion_interval_s=0.0,
    )
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for n in args.arms:
        better = n - 1  # the last arm; arm 0 is the control
        lifted = [args.base] * (n - 1) + [args.base + args.lift]
        scenarios: list[tuple[str, list[float], list[float] | None, int | None]] = [
            ("better", lifted, None, better),
            ("null", [args.base] * n, None, None),
            ("regression", lifted, [args.base] * (n - 1) + [args.base - args.drop], better),
        ]
        for scenario, rates, after, best_arm in scenarios:
            if scenario not in args.scenarios:
                continue
            results = [
                simulate(rates, rules, horizon=args.horizon, seed=seed, rates_after_promotion=after, watch=args.watch)
                for seed in range(args.runs)
            ]
            row = {"arms": n, "scenario": scenario, **_summary(results, best_arm)}
            rows.append(row)
            print(_line(row), flush=True)
    elapsed = time.monotonic() - started
    print(f"\n{args.runs} runs x {args.horizon} retrievals a cell; {elapsed:.0f} s")
    if args.json:
        report = {
            "benchmark": "self_tuning",
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "rules": asdict(rules),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "machine": platform.machine(),
            "elapsed_s": elapsed,
            "rows": rows,
        }
        args.json.write_text(json.dumps(report, indent=2))
    return 0


HEADER = (
    f"{'arms':>4} {'scenario':<10} {'regret':>8} {'fixed':>8} {'promoted':>8} {'wrong':>7} "
    f"{'t promo p50':>11} {'p90':>7} {'rolled back':>11} {'after p50':>9}"
)


def _line(row: dict[str, Any]) -> str:
    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    if not hasattr(_line, "printed"):
        print(HEADER)
        _line.printed = True  # type: ignore[attr-defined]
    return (
        f"{row['arms']:>4} {row['scenario']:<10} {row['regret_mean']:>8.1f} {row['regret_fixed_mean']:>8.1f} "
        f"{row['promoted_share']:>8.1%} {row['wrong_promotions_share']:>7.1%} "
        f"{num(row['promotion_at_median'], '.0f'):>11} {num(row['promotion_at_p90'], '.0f'):>7} "
        f"{row['rollback_of_promoted_share']:>11.1%} {num(row['rollback_after_median'], '.0f'):>9}"
    )


if __name__ == "__main__":
    sys.exit(main())
