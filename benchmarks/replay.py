"""How fast replay and tuning are: one synthetic log, replays per policy, and tune on 1 and 2 processes.

The log: ``--memories`` memories, ``--retrievals`` retrievals (a pool of 40
candidates, 10 returned) each with an outcome, spread over ``--days`` of log
time; the lifecycle sweeps at the sidecar's default interval (5 s of log time).
Prints a table of medians over ``--repeats`` runs; ``--json PATH`` writes them.

    python benchmarks/replay.py --memories 20000 --retrievals 5000 --trials 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memevo.sidecar.policy import default_policy
from memevo.sidecar.replay.export import policy_to_json
from memevo.sidecar.replay.replay import load_log, replay
from memevo.sidecar.replay.tune import tune


def synthetic_log(path: Path, memories: int, retrievals: int, days: float, seed: int = 0) -> None:
    """Write a replay log of the given size (memories created over the first half, retrievals throughout)."""
    rng = np.random.default_rng(seed)
    span = days * 86_400.0
    created = np.sort(rng.uniform(0.0, span / 2, memories))
    lines: list[dict[str, Any]] = [
        {"type": "header", "format": "memevo-replay-log", "version": 1, "policy": policy_to_json(default_policy())}
    ]
    useful = rng.uniform(0.1, 0.9, memories)
    for i in range(memories):
        lines.append(
            {"type": "memory", "id": i + 1, "kind": 1, "importance": 0, "content_bytes": 80, "tokens": 20,
             "stored_bytes": 1900, "confidence0": 0.7, "created_s": float(created[i]), "created_turn": 0}
        )  # fmt: skip
    timeline: list[tuple[float, dict[str, Any]]] = []
    for i in range(memories):
        timeline.append(
            (float(created[i]), {"type": "event", "seq": i + 1, "t": float(created[i]), "turn": 0, "event": "created",
                                 "id": i + 1, "to": 1, "governance": False, "related": []})
        )  # fmt: skip
    times = np.sort(rng.uniform(span / 20, span, retrievals))
    for r, t in enumerate(times.tolist()):
        alive = int(np.searchsorted(created, t))
        pool = rng.choice(max(alive, 1), size=min(40, max(alive, 1)), replace=False) + 1
        match = np.sort(rng.uniform(0.3, 0.9, pool.size))[::-1]
        returned = pool[:10].tolist()
        used = returned[:3]
        success = float(np.mean(useful[np.asarray(used) - 1]) > 0.5)
        rid = f"r{r}"
        timeline.append(
            (t, {"type": "retrieval", "id": rid, "t": t, "turn": 0, "returned": returned, "arm": "", "mode": 0,
                 "candidates": [[int(i), float(m), 0.0, False] for i, m in zip(pool, match, strict=True)]})
        )  # fmt: skip
        timeline.append(
            (t + 1, {"type": "outcome", "seq": 0, "t": t + 1, "turn": 0, "retrieval": rid, "used": used,
                     "success": success, "failure": 1.0 - success})
        )  # fmt: skip
    timeline.sort(key=lambda item: item[0])
    with path.open("w") as sink:
        for line in lines:
            sink.write(json.dumps(line) + "\n")
        for _, line in timeline:
            sink.write(json.dumps(line) + "\n")


def _median(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--retrievals", type=int, default=5_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        synthetic_log(path, args.memories, args.retrievals, args.days)
        size_mib = path.stat().st_size / 2**20
        log = load_log(path)
        replay(log, log.policy)  # compile / load the kernels once
        rows = {
            "parse log": _median(lambda: load_log(path), args.repeats),
            "replay, one policy": _median(lambda: replay(log, log.policy), args.repeats),
            f"tune, {args.trials + 1} policies, 1 process": _median(
                lambda: tune(path, trials=args.trials, workers=1, progress=False), 1
            ),
            f"tune, {args.trials + 1} policies, 2 processes": _median(
                lambda: tune(path, trials=args.trials, workers=2, progress=False), 1
            ),
        }
    print(f"log: {args.memories} memories, {args.retrievals} retrievals, {size_mib:.1f} MiB; load {os.getloadavg()}")
    print(f"| {'what':<40} | {'seconds':>8} | {'retrievals/s':>12} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 14}|")
    for name, seconds in rows.items():
        policies = args.trials + 1 if name.startswith("tune") else 1
        rate = args.retrievals * policies / seconds if not name.startswith("parse") else float("nan")
        print(f"| {name:<40} | {seconds:>8.3f} | {rate:>12,.0f} |")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "memories": args.memories,
                    "retrievals": args.retrievals,
                    "seconds": rows,
                    "python": platform.python_version(),
                    "load": os.getloadavg(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
