"""What self-tuning experiments cost Remember, Recall and ReportOutcome: this tree's sidecar beside an older one.

Usage (from the repository root)::

    git archive REV | tar -x -C OLD
    nice -n 19 python benchmarks/self_tuning_overhead.py --old-tree OLD [--memories 2000] [--rounds 7] [--json F]

Two sidecars run at once, one from this tree and one from ``OLD`` (its ``src`` first on PYTHONPATH), each on
its own data directory with the same ``--memories`` random 64-d vectors. Every round times, on each sidecar in
turn, ``--calls`` Remember calls, then ``--calls`` Recall + ReportOutcome pairs with no experiment, then with a
fixed two-arm experiment, and (this tree only) with a Thompson experiment; client-side wall time over the unix
socket. Interleaving rounds keeps a change of the machine's load from landing on one tree only. Medians over
rounds of each round's p50. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memevo.client import AdaptiveSettings, AllocationMode, Experiment, ExperimentArm, MemoryClient, Outcome

DIMENSION = 64


def start(tree: Path | None, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``memevo serve`` from ``tree`` (None: this tree) on a unix socket; returns (process, target)."""
    run = Path(tempfile.mkdtemp(prefix="memevo-overhead-"))
    ready = run / "ready.json"
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    args = [sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data), "--listen",
            f"unix://{run / 'memevo.sock'}", "--embedder", "none", "--judge", "none", "--dimension",
            str(DIMENSION), "--ready-file", str(ready)]  # fmt: skip
    process = subprocess.Popen(args, stdout=(run / "log").open("wb"), stderr=subprocess.STDOUT, env=env)
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError((run / "log").read_text())
        time.sleep(0.05)
    return process, f"unix://{run / 'memevo.sock'}"


def p50_ms(calls: int, body: Callable[[int], object]) -> float:
    times = []
    for i in range(calls):
        started = time.perf_counter()
        body(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000.0


def round_of(
    client: MemoryClient, rng: np.random.Generator, calls: int, *, thompson: bool, flip: bool
) -> dict[str, float]:
    out: dict[str, float] = {}
    vectors = rng.standard_normal((calls, DIMENSION)).astype(np.float32)
    out["remember"] = p50_ms(calls, lambda i: client.remember(f"round note {i}", vector=vectors[i], namespace="o"))
    policy = client.get_policy()
    arms = (ExperimentArm(name="a", policy=policy), ExperimentArm(name="b", policy=policy))
    cases: list[tuple[str, Experiment | None]] = [("none", None), ("fixed", Experiment(name="f", arms=arms))]
    if thompson:
        adaptive = AdaptiveSettings(allocation=AllocationMode.THOMPSON, snapshot_outcomes=20)
        cases.append(("thompson", Experiment(name="t", arms=arms, adaptive=adaptive)))
    if flip:  # the cases' order turns with the round, so no case always runs on the fullest store
        cases.reverse()
    for name, experiment in cases:
        client.set_experiment(experiment or Experiment())
        recall_times: list[float] = []
        outcome_times: list[float] = []
        for i in range(calls):
            started = time.perf_counter()
            found = client.recall(vector=vectors[i], k=5, namespace="o")
            middle = time.perf_counter()
            client.report_outcome(found.retrieval_id, Outcome.SUCCESS if i % 3 else Outcome.FAILURE)
            recall_times.append(middle - started)
            outcome_times.append(time.perf_counter() - middle)
        out[f"recall_{name}"] = statistics.median(recall_times) * 1000.0
        out[f"outcome_{name}"] = statistics.median(outcome_times) * 1000.0
    client.set_experiment(Experiment())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=300, help="timed calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    base = rng.standard_normal((args.memories, DIMENSION)).astype(np.float32)
    sidecars: dict[str, tuple[subprocess.Popen[bytes], MemoryClient]] = {}
    try:
        for name, tree in (("new", None), ("old", args.old_tree)):
            process, target = start(tree, Path(tempfile.mkdtemp(prefix=f"memevo-overhead-{name}-")))
            client = MemoryClient(target)
            for i in range(args.memories):
                client.remember(f"memory {i}", vector=base[i], namespace="o")
            sidecars[name] = (process, client)
        rounds: dict[str, list[dict[str, float]]] = {"new": [], "old": []}
        for r in range(args.rounds):
            for name in ("new", "old") if r % 2 == 0 else ("old", "new"):
                figures = round_of(
                    sidecars[name][1], np.random.default_rng(r), args.calls, thompson=name == "new", flip=r % 2 == 1
                )
                rounds[name].append(figures)
        summary = {
            name: {key: statistics.median(f[key] for f in found) for key in found[0]} for name, found in rounds.items()
        }
        print(f"{'p50 ms (median of rounds)':<28} {'old':>8} {'new':>8}")
        for key in summary["new"]:
            old = summary["old"].get(key)
            print(f"{key:<28} {'-' if old is None else format(old, '.3f'):>8} {summary['new'][key]:>8.3f}")
        if args.json:
            report: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}, "summary": summary}
            report["rounds"] = rounds
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        for process, client in sidecars.values():
            client.close()
            process.terminate()
            process.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
