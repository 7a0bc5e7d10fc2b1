"""How long the background start-up snapshot holds writes back while the sidecar serves (issue 25).

Usage (from the repository root)::

    python benchmarks/snapshot_pause.py --fill 300000 [--batch 10000] [--seconds 60] [--json out.json]
    python benchmarks/snapshot_pause.py --copy-of /var/tmp/memevo-avail/n1000000-d384 --seconds 60

Starts ``memevo serve`` (no embedder: random 384-d client vectors; with ``--workload words`` the index builder
held at 1 insert/s so that it takes no core; ``--snapshot-every-changes`` as given) on a fresh data directory, or
on a copy of ``--copy-of`` (a filled store, e.g. the crash harness's 1M one). Then two phases:

- ``batches``: ``--fill`` memories written as RememberBatch of ``--batch`` (``--workload words``: each text holds
  a word no other memory has, the word index's worst case, and two common ones; ``console``: the store of
  ``benchmarks/console.py``, whose 1M build logged the long pauses, with the index builder running as there),
  each call timed by the client;
- ``singles``: for ``--seconds``, ``--writers`` threads write one memory per Remember call, each call timed.

Snapshots fall due every ``--snapshot-every`` changes (at most every 10 s and every 10 times their own cost, as
in production). The sidecar logs, for each, how long it waited for the commit lock (a commit in progress) and
how long it held it while copying (every writer waits at most that long for it); the table reads those lines.
For the ``singles`` phase it also gives the worst write latency among the calls that overlapped a snapshot's
hold, beside the worst of the others: what a client felt of the snapshot.

Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks import console
    from benchmarks.crash import serve, stub
    from benchmarks.machine import machine
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import console
    from benchmarks.crash import serve, stub
    from benchmarks.machine import machine

from memevo.v1 import memory_pb2, memory_service_pb2

DIMENSION = 384
COMMON = ("deploy", "retry", "cache", "user", "billing", "vega", "report", "night")
PAUSE_LINE = re.compile(
    r"^(\S+ \S+) INFO memevo\.sidecar\.engine: start-up snapshot of sequence (\d+): writes paused ([\d.]+) s "
    r"while it was copied, after waiting ([\d.]+) s"
)
OLD_PAUSE_LINE = re.compile(
    r"^(\S+ \S+) INFO memevo\.sidecar\.engine: start-up snapshot: writes paused ([\d.]+) s while it was copied$"
)
"""What revisions before the split logged, after the file was written: the wait for the lock and the hold together."""
WRITTEN_LINE = re.compile(r"start-up snapshot of sequence (\d+) written in")


def texts(start: int, count: int, tag: str) -> list[str]:
    """One word of its own per memory (``tag`` + number) and two common words."""
    return [
        f"{tag}{n} {COMMON[n % len(COMMON)]} {COMMON[(n * 7 + 3) % len(COMMON)]}" for n in range(start, start + count)
    ]


def inputs(start: int, count: int, rng: np.random.Generator, tag: str) -> list[memory_pb2.MemoryInput]:
    rows = rng.standard_normal((count, DIMENSION)).astype("<f4")
    return [
        memory_pb2.MemoryInput(content=text, vector=row.tobytes())
        for text, row in zip(texts(start, count, tag), rows, strict=True)
    ]


def pauses(log: str) -> list[dict[str, float]]:
    """Each snapshot's sequence, wall time writes resumed (epoch s), hold and wait, from the sidecar's log."""
    out: list[dict[str, float]] = []
    sequence = 0
    for line in log.splitlines():
        written = WRITTEN_LINE.search(line)
        if written:
            sequence = int(written.group(1))
        found = PAUSE_LINE.match(line)
        if found:
            stamp = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
            out.append(
                {
                    "sequence": int(found.group(2)),
                    "resumed_at": stamp.timestamp(),
                    "held_s": float(found.group(3)),
                    "waited_s": float(found.group(4)),
                }
            )
        old = OLD_PAUSE_LINE.match(line)
        if old:  # the hold includes the wait, and the line came after the file: no window to compare calls with
            stamp = datetime.datetime.strptime(old.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
            out.append(
                {"sequence": sequence, "resumed_at": stamp.timestamp(), "held_s": float(old.group(2)), "waited_s": -1.0}
            )
    return out


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max": ordered[-1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fill", type=int, default=100_000, help="memories written in the batches phase")
    parser.add_argument("--batch", type=int, default=10_000, help="items per RememberBatch")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the singles phase")
    parser.add_argument("--writers", type=int, default=2, help="threads writing single memories")
    parser.add_argument("--snapshot-every", type=int, default=10_000, help="--snapshot-every-changes")
    parser.add_argument("--copy-of", type=Path, default=None, help="start from a copy of this data directory")
    parser.add_argument(
        "--workload",
        choices=("words", "console"),
        default="words",
        help="batches of memories with a word of their own each (words), or benchmarks/console.py's store: template "
        "texts over four namespaces, a fact of one of 25 users in every ten, the index builder running (console)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memevo-snapshot-pause-"))
    data = root / "data"
    if args.copy_of is not None:
        started = time.monotonic()
        shutil.copytree(args.copy_of, data)
        print(f"copied {args.copy_of} in {time.monotonic() - started:.0f} s", flush=True)
    flags = ["--index-save-interval-s", "1e9", "--max-fresh-tail", "10000000"]
    if args.workload == "words":
        flags += ["--index-build-rate", "1"]
    flags += ["--snapshot-every-changes", str(args.snapshot_every), "--sweep-interval-s", "0"]
    served = serve(data, flags, dimension=DIMENSION, startup_timeout_s=1800.0)
    channel, service = stub(served.target)
    rng = np.random.default_rng(args.seed)
    report: dict[str, Any] = {
        "benchmark": "snapshot pause",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "machine": machine(),
    }
    try:
        base = int(service.GetStats(memory_service_pb2.GetStatsRequest(), timeout=60).total_count)
        batches: list[tuple[float, float]] = []  # (start epoch s, seconds)
        phase_started = time.time()
        for start in range(0, args.fill, args.batch):
            count = min(args.batch, args.fill - start)
            if args.workload == "console":
                chunk = console.items(count, args.seed + base + start, 25)
            else:
                chunk = inputs(base + start, count, rng, "b")
            began = time.time()
            service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=chunk), timeout=3600)
            batches.append((began, time.time() - began))
            if (start + len(chunk)) % 100_000 == 0:
                print(f"written {start + len(chunk)} in {time.time() - phase_started:.0f} s", flush=True)
        batch_end = time.time()
        calls: list[tuple[float, float]] = []
        lock = threading.Lock()
        stop = threading.Event()

        def writer(number: int) -> None:
            local = np.random.default_rng((args.seed, number))
            n = 0
            while not stop.is_set():
                item = inputs(10_000_000 * (number + 1) + n, 1, local, "s")[0]
                began = time.time()
                service.Remember(memory_service_pb2.RememberRequest(memory=item), timeout=600)
                with lock:
                    calls.append((began, time.time() - began))
                n += 1

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(args.writers)]
        for thread in threads:
            thread.start()
        time.sleep(args.seconds)
        stop.set()
        for thread in threads:
            thread.join()
        time.sleep(1.0)  # the last snapshot's line
        found = pauses(served.log())
        in_batches = [p for p in found if p["resumed_at"] <= batch_end]
        in_singles = [p for p in found if p["resumed_at"] > batch_end]
        holds = [(p["resumed_at"] - p["held_s"], p["resumed_at"]) for p in in_singles if p["waited_s"] >= 0]
        overlapping = [
            seconds for began, seconds in calls if any(began < end and began + seconds > start for start, end in holds)
        ]
        others = [
            seconds
            for began, seconds in calls
            if not any(began < end and began + seconds > start for start, end in holds)
        ]
        report.update(
            {
                "memories_at_start": base,
                "batches": {
                    "batch": args.batch,
                    "calls_s": summary([seconds for _, seconds in batches]),
                    "snapshots": in_batches,
                },
                "singles": {
                    "writers": args.writers,
                    "calls_ms": summary([1e3 * seconds for _, seconds in calls]),
                    "overlapping_a_hold_ms": summary([1e3 * s for s in overlapping]),
                    "others_ms": summary([1e3 * s for s in others]),
                    # When the slowest calls began (epoch s), to set beside the sidecar's log.
                    "slowest": [
                        {"began": began, "ms": round(1e3 * seconds, 1)}
                        for began, seconds in sorted(calls, key=lambda call: -call[1])[:5]
                    ],
                    "snapshots": in_singles,
                },
            }
        )
    finally:
        channel.close()
        served.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"memories at start {report['memories_at_start']:,}")
    print("phase     snapshots  held s (median, max)  waited s (median, max)  at sequences")
    for phase in ("batches", "singles"):
        snaps = report[phase]["snapshots"]
        if snaps:
            held = [p["held_s"] for p in snaps]
            waited = [p["waited_s"] for p in snaps if p["waited_s"] >= 0]
            waits = f"{statistics.median(waited):>7.3f} {max(waited):>7.3f}" if waited else "    n/a (in held)"
            print(
                f"{phase:<9} {len(snaps):>9}  {statistics.median(held):>7.3f} {max(held):>7.3f}"
                f"          {waits}     {snaps[0]['sequence']:,} .. {snaps[-1]['sequence']:,}"
            )
        else:
            print(f"{phase:<9} {0:>9}")
    calls_s = report["batches"]["calls_s"]
    if calls_s:
        print(f"RememberBatch of {args.batch:,}: median {calls_s['median']:.1f} s, max {calls_s['max']:.1f} s")
    singles = report["singles"]
    for name in ("calls_ms", "overlapping_a_hold_ms", "others_ms"):
        figures = singles[name]
        if figures:
            print(
                f"Remember {name}: n {figures['n']}, median {figures['median']:.1f}, p99 {figures['p99']:.1f}, "
                f"max {figures['max']:.1f}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
