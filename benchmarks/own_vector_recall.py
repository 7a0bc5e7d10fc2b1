"""Recall by a memory's own vector in-process at 100k: without and with the exact vector lookup, same run.

Usage (from the repository root)::

    python benchmarks/own_vector_recall.py [--n 100000] [--self-queries 2000] [--queries 500] [--repeats 3]
        [--expansion-search 384] [--cache /var/tmp/memevo-bench] [--json out/own_vector_recall.json]

Issue 41 item 2: a memory's own vector must find it at k=1..10. ``own_vector.py`` measures the HNSW graph alone;
this measures ``Recall`` as the servicer answers it (filters, ranking, the fresh tail empty). The store is
``--n`` unit Gaussian 384-d vectors (``own_vector.py``'s "random": no structure for the graph to follow, the
hardest case), written with ``RememberBatch`` of 1,000 into an in-process sidecar without an embedder, the graph
complete, cached under ``--cache``; each run opens a working copy in this process.

Variants: "before" is ``sidecar/retrieval/recall.py`` as of ``--before`` (the revision before the lookup), loaded
beside the working tree's and swapped into the same servicer; "after" is the working tree's, which adds the
memories RocksDB's vector digests name. Cells (variant x case) are interleaved in every repeat, each Recall
``peek`` (no access counted, so the store stays put):

- self k=1 / self k=10: a stored vector (a sample of ``--self-queries``); self@k is the share found among the
  first k (from the first repeat);
- fresh k=10: a new vector of the same distribution, stored by nobody: what the lookup costs when it finds
  nothing (almost every real query).

p50/p99 wall milliseconds per Recall are medians over ``--repeats``. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import machine as machine_info  # noqa: E402
from benchmarks.filtered_recall import recall_module_at  # noqa: E402
from benchmarks.inprocess import InProcessContext, time_cells  # noqa: E402
from benchmarks.own_vector import vectors  # noqa: E402
from benchmarks.throughput import working_copy  # noqa: E402

BEFORE = "dc7a02e"
"""The revision before the exact vector lookup."""
DIMENSION = 384
CHUNK = 1_000
WARMUP_QUERIES = 20


def _config(data: Path, expansion_search: int) -> Any:
    from memevo.sidecar.config import IndexConfig, SidecarConfig
    from memevo.sidecar.embedding import EmbedderConfig

    return SidecarConfig(
        data_dir=data,
        listen=(),
        dimension=DIMENSION,
        embedder=EmbedderConfig(kind="none"),
        index=IndexConfig(expansion_search=expansion_search),
    )


def ensure_store(cache: Path, n: int, seed: int, log: Callable[[str], None]) -> Path:
    """The cached data directory of ``n`` random unit vectors, built in-process when missing."""
    from memevo.sidecar.config import IndexConfig
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_pb2, memory_service_pb2

    root = cache / f"own-vector-random-n{n}-d{DIMENSION}-s{seed}"
    marker = root / "complete.json"
    if marker.exists():
        return root / "data"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    data = vectors("random", n, seed)
    log(f"building the {n:,}-memory store in {root} (cached for reruns)")
    started = time.perf_counter()
    sidecar = Sidecar(_config(root / "data", IndexConfig().expansion_search))
    sidecar.start()
    context = InProcessContext()
    try:
        for start in range(0, n, CHUNK):
            memories = [
                memory_pb2.MemoryInput(
                    content=f"m {i}", vector=data[i].astype("<f4").tobytes(), kind=memory_pb2.MEMORY_KIND_EPISODE
                )
                for i in range(start, min(start + CHUNK, n))
            ]
            while True:
                try:
                    sidecar.servicer.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), context)
                    break
                except RuntimeError as exc:  # back-pressure: the graph is behind
                    if "RESOURCE_EXHAUSTED" not in str(exc):
                        raise
                    time.sleep(2.0)
            if (start + CHUNK) % 20_000 == 0:
                log(f"  stored {start + CHUNK:,}/{n:,} ({time.perf_counter() - started:.0f} s)")
        while sidecar.engine.index.tail_count:
            time.sleep(1.0)
    finally:
        sidecar.stop()
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"n": n, "seed": seed, "build_s": seconds}))
    log(f"  built in {seconds:.0f} s")
    return root / "data"


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    from memevo.sidecar.retrieval.recall import Recaller
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_service_pb2

    load_at_start = machine_info.load_average()
    source = ensure_store(args.cache, args.n, args.seed, log)
    if args.build_only:
        return {}
    data = vectors("random", args.n, args.seed)
    sample = np.random.default_rng(args.seed + 1).choice(args.n, size=min(args.self_queries, args.n), replace=False)
    fresh = vectors("random", args.queries, args.seed + 2)
    before_module = recall_module_at(args.before)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-own-vector-"))
    context = InProcessContext()
    try:
        working_copy(source, scratch / "data")
        sidecar = Sidecar(_config(scratch / "data", args.expansion_search))
        sidecar.start()
        try:
            servicer, engine = sidecar.servicer, sidecar.engine
            while engine.index.tail_count:  # a copy of a complete store: the graph holds every vector
                time.sleep(0.5)
            recallers = {"before": before_module.Recaller(engine), "after": Recaller(engine)}

            def request(vector: np.ndarray, k: int) -> Any:
                return memory_service_pb2.RecallRequest(query_vector=vector.astype("<f4").tobytes(), k=k, peek=True)

            requests = {
                "self k=1": [request(data[row], 1) for row in sample],
                "self k=10": [request(data[row], 10) for row in sample],
                "fresh k=10": [request(row, 10) for row in fresh],
            }
            # A memory's content names its row ("m 17").
            wanted = [int(row) for row in sample]
            first = servicer.Recall(requests["self k=10"][0], context).memories
            if int(first[0].memory.content.split()[1]) != wanted[0]:
                raise RuntimeError("the cached store does not hold this benchmark's vectors")

            def call(variant: str, asked: Any) -> list[int]:
                servicer.recaller = recallers[variant]
                return [int(hit.memory.content.split()[1]) for hit in servicer.Recall(asked, context).memories]

            cells = [(variant, case) for case in requests for variant in recallers]
            times, loads = time_cells(cells, requests, call, repeats=args.repeats, warmup=WARMUP_QUERIES, log=log)
            servicer.recaller = recallers["after"]
        finally:
            sidecar.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for cell, figures in times.items():
        variant, case = cell
        k = 1 if case == "self k=1" else 10
        hits = figures.answers
        share = float(np.mean([w in h[:k] for w, h in zip(wanted, hits, strict=True)])) if "self" in case else None
        rows.append(
            {
                "variant": variant,
                "case": case,
                "self_found": share,
                "p50_ms": statistics.median(figures.p50_ms),
                "p99_ms": statistics.median(figures.p99_ms),
                "p50_runs_ms": figures.p50_ms,
            }
        )
    return {
        "benchmark": "own_vector_recall",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *args.argv]),
        "machine": machine_info.machine(load_average_at_start=load_at_start, load_averages=loads),
        "before": args.before,
        "n": args.n,
        "expansion_search": args.expansion_search,
        "self_queries": len(sample),
        "fresh_queries": args.queries,
        "repeats": args.repeats,
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| case | variant | self found | p50 ms | p99 ms | p50 per run ms |", "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        runs = ", ".join(f"{x:.2f}" for x in row["p50_runs_ms"])
        share = "–" if row["self_found"] is None else f"{row['self_found']:.4f}"
        lines.append(
            f"| {row['case']} | {row['variant']} | {share} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {runs} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from memevo.sidecar.config import IndexConfig

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--self-queries", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=500, help="fresh queries (vectors nobody stored)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--expansion-search", type=int, default=IndexConfig().expansion_search)
    parser.add_argument("--before", default=BEFORE, help="revision whose recall.py is the 'before' variant")
    parser.add_argument("--cache", type=Path, default=Path("/var/tmp/memevo-bench"))
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = run(args, log)
    if args.build_only:
        return 0
    print(
        f"\n{args.n:,} random 384-d memories, expansion_search {args.expansion_search}, {result['self_queries']} "
        f"self and {args.queries} fresh queries, medians of {args.repeats}; before = {args.before}\n"
    )
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
