"""Does a synced RocksDB write hold the interpreter lock? A Python loop's speed beside each kind of background work.

Usage (from the repository root)::

    python benchmarks/gil_hold.py [--seconds 3] [--repeats 5] [--json out/gil_hold.json]

One thread counts in a pure-Python loop for ``--seconds`` while a second thread
does, over and over, one of: nothing but sleep 1 ms (the control), a write and
``os.fsync`` of a plain file (which releases the lock while the disk works),
and the sidecar's commit, a one-entry ``WriteBatch`` written with
``WriteOptions.sync`` through rocksdict (as ``sidecar/store/rocks.py`` does),
and the same unsynced followed by a 1 ms sleep. Cells are interleaved in every repeat; the table gives
the medians and the loop's speed as a share of the control's. A share well
below 1 beside the synced write, and not beside ``os.fsync``, means the commit
keeps every other thread (recalls on the gRPC workers) waiting while the disk
syncs; the unsynced write, paced to a similar rate, shows what the commit's own Python costs the loop.
Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import rocksdict  # noqa: E402

from benchmarks import machine as machine_info  # noqa: E402

VALUE_BYTES = 512
"""Size of each background write (a small memory record's order of magnitude)."""


def _spin(seconds: float) -> int:
    """Loop iterations a Python thread completes in ``seconds``."""
    count = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def _beside(work: Callable[[], None], seconds: float) -> tuple[float, float]:
    """(loop iterations per second, background operations per second) with ``work`` repeating in another thread."""
    stop = threading.Event()
    done = [0]

    def background() -> None:
        while not stop.is_set():
            work()
            done[0] += 1

    thread = threading.Thread(target=background, daemon=True)
    thread.start()
    try:
        spun = _spin(seconds)
    finally:
        stop.set()
        thread.join()
    return spun / seconds, done[0] / seconds


def run(seconds: float, repeats: int, scratch: Path) -> dict[str, Any]:
    """Measure every cell ``repeats`` times, interleaved; the per-cell figures of each repeat."""
    db = rocksdict.Rdict(str(scratch / "db"), rocksdict.Options(raw_mode=True))
    synced = rocksdict.WriteOptions()
    synced.sync = True
    unsynced = rocksdict.WriteOptions()
    handle = os.open(scratch / "plain", os.O_WRONLY | os.O_CREAT, 0o600)
    payload = os.urandom(VALUE_BYTES)
    counter = [0]

    def commit(options: Any) -> Callable[[], None]:
        def write() -> None:
            counter[0] += 1
            batch = rocksdict.WriteBatch(raw_mode=True)
            batch.put(counter[0].to_bytes(8, "big"), payload)
            db.write(batch, options)

        return write

    def paced(work: Callable[[], None]) -> Callable[[], None]:
        def then_sleep() -> None:
            work()
            time.sleep(0.001)

        return then_sleep

    def fsync() -> None:
        os.write(handle, payload)
        os.fsync(handle)

    cells: dict[str, Callable[[], None]] = {
        "sleep 1 ms (control)": lambda: time.sleep(0.001),
        "os.write + os.fsync": fsync,
        "rocksdict write, sync": commit(synced),
        "rocksdict write, no sync, then sleep 1 ms": paced(commit(unsynced)),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cells}
    try:
        for repeat in range(repeats):
            for name, work in cells.items():
                runs[name].append(_beside(work, seconds))
            print(f"  repeat {repeat + 1}/{repeats} done (load {machine_info.load_average()})", file=sys.stderr)
    finally:
        os.close(handle)
        db.close()
    control = statistics.median(loop for loop, _ in runs["sleep 1 ms (control)"])
    rows = [
        {
            "background": name,
            "loop_per_s": statistics.median(loop for loop, _ in figures),
            "loop_share_of_control": statistics.median(loop for loop, _ in figures) / control,
            "background_per_s": statistics.median(ops for _, ops in figures),
            "loop_per_s_runs": [loop for loop, _ in figures],
        }
        for name, figures in runs.items()
    ]
    return {"rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| beside the loop | loop M iterations/s | share of control | background ops/s |",
        "|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['background']} | {row['loop_per_s'] / 1e6:.2f} | {row['loop_share_of_control']:.2f} "
            f"| {row['background_per_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each cell, seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the throwaway database and file")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-gil-", dir=args.scratch))
    load_at_start = machine_info.load_average()
    try:
        result = run(args.seconds, args.repeats, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.update(
        benchmark="gil_hold",
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        command="gil_hold.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        machine=machine_info.machine(),
        load_average=[load_at_start, machine_info.load_average()],
    )
    print(f"\nmedians of {args.repeats} x {args.seconds:g} s\n")
    print(table(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
