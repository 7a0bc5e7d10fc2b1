"""Recall of two or more source trees side by side: same results, and rates over the socket in one run (issue 28).

Usage (from the repository root; trees are exports, e.g. ``git archive REV | tar -x -C /tmp/old``)::

    python benchmarks/side_by_side.py --trees /tmp/old /work/main --same-results [--size 1e6 --calls 1000]
    python benchmarks/side_by_side.py --trees /tmp/old /work/main --repeats 6 --json out/side_by_side.json

``--same-results`` runs ``--calls`` (300) sequential Recalls (half by vector, half by vector and words, k 10,
access counting on) in process against a fresh copy of the cached store of ``--size`` memories (100k; at 1M the
common-word path of the word search runs) under each tree, with ``time.time`` frozen at one instant for all of
them, and compares the serialised responses (retrieval id blanked) byte for byte: ids,
order, scores, similarities, breakdowns, hints and access counts.

Otherwise each tree serves its own copy of the store with ``memevo serve`` (its ``src`` first on PYTHONPATH),
and ``throughput.py``'s client (``--client-processes`` spawned processes, raw stubs) times ``--rpc`` with each
caller count in cells of ``--duration-s``. The order of the trees and of the caller counts turns with every
repeat, so that a change of load on a shared machine falls on all of them alike. Per tree and caller count it
prints the median calls/s, p50, and the sidecar's CPU per call (user + system, all threads), and the per-repeat
ratio of the last caller count to the first. Read the ratios and the CPU within one run, with the load
average printed beside them. The store is ``throughput.py``'s (``--cache``; built there if missing). Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.throughput import DIMENSION, Cell, Corpus, ensure_store, run_cell, working_copy  # noqa: E402

FROZEN_TIME_S = 1_796_300_000.0
"""The instant ``time.time`` returns in the same-results check (decay would otherwise reorder near-ties)."""
SAME_RESULTS_CALLS = 300
STORE_SIZE = 100_000


@contextlib.contextmanager
def _serve(tree: Path, data: Path, run: Path) -> Iterator[dict[str, Any]]:
    """``memevo serve`` of ``tree`` on ``data``, on a unix socket; yields {unix, pid}."""
    socket_path, ready = run / "memevo.sock", run / "ready.json"
    args = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data), "--listen", f"unix://{socket_path}",
        "--embedder", "none", "--dimension", str(DIMENSION), "--ready-file", str(ready),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    with (run / "serve.log").open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 1_800
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{tree}: memevo serve did not start:\n{(run / 'serve.log').read_text()}")
                time.sleep(0.2)
            yield {"unix": f"unix://{socket_path}", "pid": process.pid}
        finally:
            process.terminate()
            process.wait(timeout=300)


def dump_recalls(store: Path, out: Path, calls: int = SAME_RESULTS_CALLS) -> None:
    """Run the same-results calls against a copy of ``store`` with the ``memevo`` on sys.path; write them as JSON."""
    import memevo
    from benchmarks.inprocess import InProcessContext
    from memevo.sidecar.config import SidecarConfig
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_service_pb2

    print(f"recalls of {Path(memevo.__file__).parent}", file=sys.stderr, flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-side-by-side-"))
    try:
        working_copy(store, scratch / "data")
        sidecar = Sidecar(SidecarConfig(data_dir=scratch / "data", listen=(), dimension=DIMENSION))
        sidecar.start()
        corpus = Corpus()
        rng = np.random.default_rng(123)
        clusters, vectors = corpus.vectors(rng, calls)
        texts = [corpus.query_text(rng, int(c)) for c in clusters]
        real_time, rows = time.time, []
        time.time = lambda: FROZEN_TIME_S
        try:
            for i in range(calls):
                request = memory_service_pb2.RecallRequest(query_vector=vectors[i].astype("<f4").tobytes(), k=10)
                if i % 2:
                    request.query = texts[i]
                response = sidecar.servicer.Recall(request, InProcessContext())
                response.retrieval_id = ""  # random by design
                rows.append(response.SerializeToString(deterministic=True).hex())
        finally:
            time.time = real_time
            sidecar.stop()
        out.write_text(json.dumps(rows))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def same_results(trees: list[Path], store: Path, calls: int = SAME_RESULTS_CALLS) -> bool:
    """Whether every tree answers the same-results calls with the same bytes; prints the count per tree."""
    answers: list[list[str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for position, tree in enumerate(trees):
            out = Path(scratch) / f"{position}.json"
            env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{REPO_ROOT}")
            command = [
                sys.executable,
                __file__,
                "--dump-recalls",
                str(out),
                "--store",
                str(store),
                "--calls",
                str(calls),
            ]
            subprocess.run(command, env=env, check=True)
            answers.append(json.loads(out.read_text()))
    for tree, answer in zip(trees[1:], answers[1:], strict=True):
        same = sum(a == b for a, b in zip(answers[0], answer, strict=True))
        print(f"{tree}: {same} of {len(answer)} responses byte-identical to {trees[0]}'s")
    return all(answer == answers[0] for answer in answers)


def side_by_side(args: argparse.Namespace, store: Path) -> list[dict[str, Any]]:
    """Time the trees' servers in alternating cells; returns one row per cell."""
    trees = {chr(ord("A") + i): tree for i, tree in enumerate(args.trees)}
    rows: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="memevo-side-by-side-"))
    try:
        with contextlib.ExitStack() as stack:
            targets: dict[str, dict[str, Any]] = {}
            for name, tree in trees.items():
                run = scratch / name
                run.mkdir()
                working_copy(store, run / "data")
                targets[name] = stack.enter_context(_serve(tree, run / "data", run))
                print(f"{name}: {tree} (pid {targets[name]['pid']})", file=sys.stderr, flush=True)
            with multiprocessing.get_context("spawn").Pool(args.client_processes) as pool:

                def cell(name: str, seconds: float) -> Any:
                    return lambda threads: Cell(args.rpc, targets[name]["unix"], threads, seconds, 0)

                for name in trees:  # warm: graph paged in, kernels loaded
                    run_cell(pool, cell(name, 2.0), 2, args.client_processes, targets[name]["pid"])
                names = list(trees)
                for repeat in range(args.repeats):
                    order = names[repeat % len(names) :] + names[: repeat % len(names)]
                    callers = args.callers if repeat % 2 == 0 else args.callers[::-1]
                    for name in order if repeat % 2 == 0 else order[::-1]:
                        for count in callers:
                            load = os.getloadavg()[0]
                            result = run_cell(
                                pool, cell(name, args.duration_s), count, args.client_processes, targets[name]["pid"]
                            )
                            rows.append({**result, "tree": str(trees[name]), "callers": count, "repeat": repeat})
                            rows[-1]["load"] = load
                            print(
                                f"repeat {repeat} {name} x{count}: {result['calls_per_s']:,.0f} calls/s, "
                                f"{result['server_cpu_ms_per_call']:.3f} ms CPU a call (load {load:.1f})",
                                file=sys.stderr,
                                flush=True,
                            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def summarise(rows: list[dict[str, Any]], trees: list[Path], callers: list[int]) -> None:
    """Print medians per tree and caller count, and the per-repeat ratio of the last caller count to the first."""
    for tree in map(str, trees):
        for count in callers:
            cells = [r for r in rows if r["tree"] == tree and r["callers"] == count]
            per_repeat = ", ".join(f"{r['calls_per_s']:.0f}" for r in cells)
            print(
                f"{tree} x{count}: {statistics.median(r['calls_per_s'] for r in cells):,.0f} calls/s, "
                f"p50 {statistics.median(r['p50_ms'] for r in cells):.2f} ms, "
                f"{statistics.median(r['server_cpu_ms_per_call'] for r in cells):.3f} ms sidecar CPU a call "
                f"(per repeat: {per_repeat})"
            )
        if len(callers) > 1:
            by = {(r["repeat"], r["callers"]): r["calls_per_s"] for r in rows if r["tree"] == tree}
            repeats = sorted({repeat for repeat, _ in by})
            ratios = [by[(k, callers[-1])] / by[(k, callers[0])] for k in repeats]
            print(
                f"{tree} x{callers[-1]} / x{callers[0]}: median {statistics.median(ratios):.2f} "
                f"(per repeat {', '.join(f'{x:.2f}' for x in ratios)})"
            )
    print(f"load average {min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=Path, nargs="+", help="source trees (each with src/memevo)")
    parser.add_argument("--same-results", action="store_true", help="compare recall results instead of timing")
    parser.add_argument("--rpc", default="vrecall", help="a read RPC of throughput.py (vrecall, recall, context)")
    parser.add_argument("--callers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memevo-bench", help="store cache")
    parser.add_argument("--size", type=lambda s: int(float(s)), default=STORE_SIZE, help="memories in the store")
    parser.add_argument("--calls", type=int, default=SAME_RESULTS_CALLS, help="recalls of --same-results")
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--dump-recalls", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the cells here")
    args = parser.parse_args(argv)
    if args.dump_recalls is not None:
        dump_recalls(args.store, args.dump_recalls, args.calls)
        return 0
    if not args.trees:
        parser.error("--trees is required")
    store = ensure_store(args.cache, args.size, Corpus(), lambda message: print(message, file=sys.stderr))
    if args.same_results:
        return 0 if same_results(args.trees, store, args.calls) else 1
    rows = side_by_side(args, store)
    summarise(rows, args.trees, args.callers)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
