"""Recall CPU of this tree's retrieval code against another tree's, side by side in one in-process sidecar.

Usage (from the repository root)::

    git archive REV | tar -x -C OLD
    python benchmarks/recall_ab.py --old-tree OLD --size 10000 --data STORE --embed-cache DIR [--calls 400]
        [--repeats 7]

A change to recall's Python moves its CPU by tenths of a millisecond, less than two runs of
``structured_latency.py`` differ by on a shared machine. Here both versions answer the same questions in the same
process, interleaved: ``recall.py`` and ``attributes.py`` of ``--old-tree`` are loaded beside this tree's as sibling
modules (everything else is this tree's), each makes a ``Recaller`` on the one engine, and the servicer's recaller is
swapped before each call. When the old code reads attributes (issue 24), a third case, ``off``, is the old code with
the namespace's known attributes and the readings of unkeyed statements switched off. Store and questions as in
``structured_latency.py`` (its store is built when ``--data`` is missing), but the questions peek (no access is
recorded, so no case changes what the next one sees). "cpu" is the process's CPU time during the call.

Each question is asked of every case back to back (the order turning with each question), so that a change in the
machine's load between runs moves all cases alike: besides each case's median, the median of each case's difference
to the new code on the same question. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.inprocess import InProcessContext
from benchmarks.structured_latency import build_store, world_recalls
from benchmarks.throughput import machine, percentile
from memevo.v1 import memory_service_pb2

PACKAGE = "memevo.sidecar.retrieval"


def load_beside(name: str, path: Path, renames: dict[str, str]) -> ModuleType:
    """``path``'s module as ``PACKAGE.name`` (its relative imports resolve in this tree), ``renames`` applied first."""
    source = path.read_text()
    for old, new in renames.items():
        source = source.replace(old, new)
    module = ModuleType(f"{PACKAGE}.{name}")
    module.__file__ = str(path)
    module.__package__ = PACKAGE
    sys.modules[module.__name__] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def old_recallers(old_tree: Path) -> dict[str, Any]:
    """The old tree's ``Recaller`` class, and its class with the readings off when it has them."""
    retrieval = old_tree / "sidecar" / "retrieval"
    load_beside("attributes_old", retrieval / "attributes.py", {})
    recall = load_beside(
        "recall_old", retrieval / "recall.py", {"from .attributes import": "from .attributes_old import"}
    )
    classes: dict[str, Any] = {"old": recall.Recaller}
    if hasattr(recall.Recaller, "_read_attributes"):

        class Off(recall.Recaller):  # type: ignore[name-defined,misc]
            def _known_attributes(self, namespace: int, size: int) -> dict[str, tuple[str, ...]]:
                return {}

            def _read_attributes(self, namespace: int, size: int, ids: Any, *rest: Any) -> Any:
                return np.full(ids.size, -1, dtype=np.int64)

        classes["off"] = Off
    return classes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--old-tree", type=Path, required=True, help="a checkout or `git archive` of the other code")
    parser.add_argument("--size", type=int, default=10_000, help="memories in the world's life")
    parser.add_argument("--data", type=Path, help="the store (built here when missing); default: a temporary one")
    parser.add_argument("--embed-cache", type=Path, help="real embeddings cache shared with evolving_world.py")
    parser.add_argument("--calls", type=int, default=400, help="timed calls per run (the life's questions, cycled)")
    parser.add_argument("--repeats", type=int, default=7, help="runs over the questions")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    from memevo.sidecar.config import SidecarConfig
    from memevo.sidecar.embedding import EmbedderConfig
    from memevo.sidecar.retrieval.recall import Recaller
    from memevo.sidecar.service.server import Sidecar

    classes = old_recallers(args.old_tree)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-recall-ab-"))
    data = args.data or scratch / "store"
    try:
        if not data.exists():
            log(f"building the evolving world's store of {args.size:,} memories in {data}")
            build_store(args.size, data, args.embed_cache)
        recalls = world_recalls(args.size, args.embed_cache, args.calls, peek=True)
        working = scratch / "data"
        shutil.copytree(data, working)
        sidecar = Sidecar(SidecarConfig(data_dir=working, listen=(), embedder=EmbedderConfig(kind="local")))
        sidecar.start()
        context = InProcessContext()
        servicer = sidecar.servicer
        engine = servicer.recaller.engine
        recallers = {name: made(engine) for name, made in classes.items()} | {"new": Recaller(engine)}

        def case(name: str) -> Any:
            def call(request: memory_service_pb2.RecallRequest) -> Any:
                servicer.recaller = recallers[name]
                return servicer.Recall(request, context)

            return call

        calls = {name: case(name) for name in recallers}
        cpu: dict[str, list[list[float]]] = {name: [] for name in calls}
        loads: list[float] = []
        try:
            for request in recalls:  # warm-up: first reads of vectors, readings and attribute vectors
                for call in calls.values():
                    call(request)
            for repeat in range(args.repeats):
                loads.append(round(os.getloadavg()[0], 2))
                for run in cpu.values():
                    run.append([])
                for number, request in enumerate(recalls):
                    turn = (number + repeat) % len(calls)
                    for name in [*calls][turn:] + [*calls][:turn]:
                        began = time.process_time()
                        calls[name](request)
                        cpu[name][-1].append(time.process_time() - began)
                log(f"  run {repeat + 1}/{args.repeats} (load {loads[-1]})")
        finally:
            sidecar.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = []
    for name, runs in cpu.items():
        per_run = [statistics.median(run) * 1e3 for run in runs]
        calls_all = [value for run in runs for value in run]
        paired = [mine - new for mine, new in zip(calls_all, [v for run in cpu["new"] for v in run], strict=True)]
        rows.append(
            {
                "case": name,
                "n_memories": args.size,
                "calls": args.calls,
                "repeats": args.repeats,
                "cpu_p50_ms": percentile(calls_all, 50) * 1e3,
                "cpu_p99_ms": percentile(calls_all, 99) * 1e3,
                "cpu_p50_ms_per_run": [round(v, 3) for v in per_run],
                "cpu_minus_new_p50_ms": statistics.median(paired) * 1e3,
                "load_average": loads,
            }
        )
    print(f"\nRecall in one process, {args.repeats} x {args.calls} questions asked of every case (load {loads})\n")
    head = ["case", "cpu p50 ms", "cpu p99 ms", "minus new, p50 ms", "p50 of each run"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|")
    for r in rows:
        cells = [r["case"], f"{r['cpu_p50_ms']:.3f}", f"{r['cpu_p99_ms']:.3f}", f"{r['cpu_minus_new_p50_ms']:+.3f}"]
        print("| " + " | ".join([*cells, str(r["cpu_p50_ms_per_run"])]) + " |")
    if args.json is not None:
        results = {"command": sys.argv, "machine": machine(), "rows": rows}
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
