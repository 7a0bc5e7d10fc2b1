"""Server-side Recall and BuildContext latency on a store with structure: entities, fact keys, strategies, history.

Usage (from the repository root)::

    python benchmarks/structured_latency.py --size 100000 --embed-cache DIR [--calls 800] [--repeats 5]

``benchmarks/retrieval_latency.py`` times a store of conversation turns (no
entity, attribute or task signature): the structured evidence recall weighs
(entity names, attribute meanings, task signatures, superseded facts under the
filter) costs nothing there. This one times the evolving world's store
(``benchmarks/quality/evolving_world.py``: the same world, seed and questions,
real embeddings) after its whole life, with its checkpoint questions as
queries (text + their vectors, k 5 as the quality benchmark asks; BuildContext
with its 128-token budget). The store is written through a real sidecar once
(``--data DIR`` keeps it for later runs) and then opened in this process as in
``retrieval_latency.py``: the servicer is called without gRPC, "cpu" is the
process's CPU time during the call. Each figure is the median over ``--repeats`` runs of
``--calls`` calls. Not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.inprocess import InProcessContext  # noqa: E402
from benchmarks.quality import evolving_world as ew  # noqa: E402
from benchmarks.quality.world import generate_world  # noqa: E402
from benchmarks.retrieval_latency import TARGETS_MS, Cases, run_interleaved, summary  # noqa: E402
from benchmarks.throughput import machine  # noqa: E402
from memevo.v1 import memory_service_pb2  # noqa: E402


def build_store(size: int, data: Path, embed_cache: Path | None) -> None:
    """Live the evolving world's life of ``size`` memories through a real sidecar, keeping its data in ``data``."""
    keep = data.parent / f"{data.name}.building"
    shutil.rmtree(keep, ignore_errors=True)
    # The store every earlier figure was measured on: tuning phrasing, every change keyed (the questions below
    # are the tuning world's).
    command = ["--sizes", str(size), "--systems", "memevo", "--keep-data", str(keep), "--phrasing", "tuning"]
    command += ["--text-share", "0"]
    if embed_cache is not None:
        command += ["--embed-cache", str(embed_cache)]
    if ew.main(command) != 0:
        raise RuntimeError("evolving_world.py failed")
    (keep / f"{size}-real").rename(data)
    shutil.rmtree(keep, ignore_errors=True)


def world_recalls(
    size: int, embed_cache: Path | None, calls: int, *, peek: bool = False
) -> list[memory_service_pb2.RecallRequest]:
    """The world's checkpoint questions as Recall requests (text + vector, k as the quality benchmark asks), cycled
    to ``calls``."""
    world = generate_world(size, ew.DEFAULT_SEED, n_checkpoints=ew.DEFAULT_CHECKPOINTS, n_queries=ew.DEFAULT_QUERIES)
    vectors = ew.real_vectors(world, embed_cache)
    recalls = [
        memory_service_pb2.RecallRequest(
            query=e.query.text,
            query_vector=vectors.events[e.vector_row].astype("<f4").tobytes(),
            k=ew.TOP_K,
            peek=peek,
        )
        for e in ew.timeline(world)
        if e.query is not None
    ]
    return [recalls[i % len(recalls)] for i in range(calls)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories in the world's life")
    parser.add_argument("--data", type=Path, help="the store (built here when missing); default: a temporary one")
    parser.add_argument("--embed-cache", type=Path, help="real embeddings cache shared with evolving_world.py")
    parser.add_argument("--calls", type=int, default=800, help="timed calls per run (the life's questions, cycled)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure; medians are reported")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    from memevo.sidecar.config import SidecarConfig
    from memevo.sidecar.embedding import EmbedderConfig
    from memevo.sidecar.service.server import Sidecar

    scratch = Path(tempfile.mkdtemp(prefix="memevo-structured-latency-"))
    data = args.data or scratch / "store"
    try:
        if not data.exists():
            log(f"building the evolving world's store of {args.size:,} memories in {data}")
            build_store(args.size, data, args.embed_cache)
        recalls = world_recalls(args.size, args.embed_cache, args.calls)
        contexts = [
            memory_service_pb2.BuildContextRequest(
                query=r.query, query_vector=r.query_vector, token_budget=ew.DEFAULT_CONTEXT_BUDGET
            )
            for r in recalls
        ]
        working = scratch / "data"
        shutil.copytree(data, working)
        sidecar = Sidecar(SidecarConfig(data_dir=working, listen=(), embedder=EmbedderConfig(kind="local")))
        sidecar.start()
        context = InProcessContext()
        try:
            servicer = sidecar.servicer
            cases: Cases = {
                "recall": (lambda r: servicer.Recall(r, context), recalls),
                "context": (lambda r: servicer.BuildContext(r, context), contexts),
            }
            runs, cpu_runs, loads = run_interleaved(cases, args.repeats, log)
        finally:
            sidecar.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = [
        {
            "case": name,
            "n_memories": args.size,
            "calls": args.calls,
            "load_average": loads,
            **summary(runs[name], cpu_runs[name]),
        }
        for name in runs
    ]
    print(f"\nServer-side latency on the evolving world's store (medians of {args.repeats} x {args.calls})\n")
    print(f"| {'case':<8} | {'memories':>9} | {'p50 ms':>7} | {'p99 ms':>7} | {'cpu p50':>7} | {'cpu p99':>7} |")
    print(f"|{'-' * 10}|{'-' * 11}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
    for r in rows:
        print(
            f"| {r['case']:<8} | {r['n_memories']:>9,} | {r['p50_ms']:>7.2f} | {r['p99_ms']:>7.2f} "
            f"| {r['cpu_p50_ms']:>7.2f} | {r['cpu_p99_ms']:>7.2f} |"
        )
    print(f"\ntargets (issue 5, at 100k and 1M): {TARGETS_MS}")
    if args.json is not None:
        results = {
            "benchmark": "structured_latency",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine(),
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
