"""Plain and entity-filtered Recall in-process at 100k, this tree's recall beside an earlier revision's, same run.

Usage (from the repository root)::

    python benchmarks/filtered_recall.py [--n 100000] [--queries 300] [--repeats 5] [--before REV]
        [--cache /var/tmp/memevo-bench] [--json out/filtered_recall.json]

The store is ``benchmarks/peers.py``'s data (``--n`` clustered 384-d unit
vectors, each about one of 1,000 entities sized ~1/rank, written as episodes
with ``RememberBatch`` of 1,000), built once in-process and cached under
``--cache``; each run opens a working copy in this process with its
governance daemon and index builder running (no embedder: client vectors, as
peers.py's ``memevo serve --embedder none``). The queries are peers.py's:
noisy copies of stored vectors, k 10, plain and with ``filter.entity`` (the
entity of a random stored row, so large entities are asked about more often,
as agents ask most about those they know most about).

Variants: "before" is ``sidecar/retrieval/recall.py`` as of ``--before``
(default: the revision this benchmark was written against), loaded beside the
working tree's and swapped into the same servicer; "after" is the working
tree's. Cells (variant x plain / filtered) are interleaved in every repeat;
p50/p99 of wall and CPU time (this process's, which includes helper threads)
are medians over ``--repeats``. recall@10 is against exact NumPy cosine (within
the entity when filtered), from the first repeat; "same hits" counts queries
whose returned ids and order are identical between the variants, from a last
untimed pass that calls both back to back with access counting off (each
recall notes its hits' use, which moves the next one's ranking), in brackets
among the queries whose entity holds at most ``exact_scan_limit`` memories
(answered by an exact scan before too; past it "before" searched the graph).
Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import shutil
import statistics
import subprocess
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
from benchmarks.inprocess import InProcessContext, time_cells  # noqa: E402
from benchmarks.peers import INGEST_CHUNK, K, entity_name, make_data, make_queries, recall_at_k  # noqa: E402
from benchmarks.throughput import working_copy  # noqa: E402

BEFORE = "1054d15"
"""The revision before issue 28's recall work (filtered recall read every vector from RocksDB or the graph)."""
WARMUP_QUERIES = 20
ENTITIES = 1_000
DIMENSION = 384


def ensure_store(cache: Path, n: int, seed: int, log: Callable[[str], None]) -> Path:
    """The cached data directory of peers.py's ``n`` vectors, built in-process when missing."""
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_pb2, memory_service_pb2

    root = cache / f"filtered-n{n}-d{DIMENSION}-e{ENTITIES}-s{seed}"
    marker = root / "complete.json"
    if marker.exists():
        return root / "data"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    vectors, about = make_data(n, DIMENSION, ENTITIES, seed)
    log(f"building the {n:,}-memory store in {root} (cached for reruns)")
    started = time.perf_counter()
    sidecar = Sidecar(_config(root / "data"))
    sidecar.start()
    context = InProcessContext()
    try:
        for start in range(0, n, INGEST_CHUNK):
            memories = [
                memory_pb2.MemoryInput(
                    content=f"note {i} about {entity_name(int(about[i]))}",
                    vector=vectors[i].astype("<f4").tobytes(),
                    entity=entity_name(int(about[i])),
                    kind=memory_pb2.MEMORY_KIND_EPISODE,
                )
                for i in range(start, min(start + INGEST_CHUNK, n))
            ]
            sidecar.servicer.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), context)
            if (start + INGEST_CHUNK) % 20_000 == 0:
                log(f"  stored {start + INGEST_CHUNK:,}/{n:,} ({time.perf_counter() - started:.0f} s)")
        while sidecar.engine.index.tail_count:
            time.sleep(1.0)
        sidecar.servicer.review.finder.advance(sidecar.engine.columns.size - 1)
    finally:
        sidecar.stop()
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"n": n, "seed": seed, "build_s": seconds}))
    log(f"  built in {seconds:.0f} s")
    return root / "data"


def _config(data: Path) -> Any:
    from memevo.sidecar.config import SidecarConfig
    from memevo.sidecar.embedding import EmbedderConfig

    return SidecarConfig(data_dir=data, listen=(), dimension=DIMENSION, embedder=EmbedderConfig(kind="none"))


def recall_module_at(revision: str) -> Any:
    """``memevo.sidecar.retrieval.recall`` as of ``revision``, loaded beside the working tree's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:sidecar/retrieval/recall.py"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = "memevo.sidecar.retrieval._recall_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "memevo.sidecar.retrieval"
    sys.modules[name] = module
    exec(compile(source, f"{revision}:sidecar/retrieval/recall.py", "exec"), module.__dict__)
    return module


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    from memevo.sidecar.retrieval.recall import Recaller
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_service_pb2

    load_at_start = machine_info.load_average()
    source = ensure_store(args.cache, args.n, args.seed, log)
    vectors, about = make_data(args.n, DIMENSION, ENTITIES, args.seed)
    queries, entities, plain_truth, filtered_truth = make_queries(vectors, about, args.queries, args.seed)
    sizes = np.bincount(about, minlength=ENTITIES)
    del vectors
    before_module = recall_module_at(args.before)
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-filtered-", dir=args.scratch))
    context = InProcessContext()
    try:
        working_copy(source, scratch / "data")
        sidecar = Sidecar(_config(scratch / "data"))
        sidecar.start()
        try:
            servicer, engine = sidecar.servicer, sidecar.engine
            recallers = {"before": before_module.Recaller(engine), "after": Recaller(engine)}
            requests = {
                "plain": [
                    memory_service_pb2.RecallRequest(query_vector=q.astype("<f4").tobytes(), k=K) for q in queries
                ],
                "filtered": [
                    memory_service_pb2.RecallRequest(
                        query_vector=q.astype("<f4").tobytes(), k=K, filter=memory_service_pb2.RecallFilter(entity=e)
                    )
                    for q, e in zip(queries, entities, strict=True)
                ],
            }
            truth = {"plain": plain_truth, "filtered": filtered_truth}
            first = servicer.Recall(requests["filtered"][0], context).memories[0].memory
            if first.entity != entities[0]:
                raise RuntimeError("the cached store does not hold peers.py's data")

            def call(variant: str, request: Any) -> list[int]:
                servicer.recaller = recallers[variant]
                # A memory's content names its row ("note 17 about entity-3").
                return [int(hit.memory.content.split()[1]) for hit in servicer.Recall(request, context).memories]

            cells = [(variant, case) for case in requests for variant in recallers]
            times, loads = time_cells(cells, requests, call, repeats=args.repeats, warmup=WARMUP_QUERIES, log=log)
            agree: dict[str, list[bool]] = {}
            # Agreement on a store that stays put: a recall notes its hits' use, which moves the next one's ranking.
            engine.columns.record_access = lambda *args, **kwargs: None  # type: ignore[method-assign]
            try:
                for case in requests:
                    agree[case] = [call("before", r) == call("after", r) for r in requests[case]]
            finally:
                del engine.columns.record_access
            exact_limit = engine.config.index.exact_scan_limit
            servicer.recaller = recallers["after"]
        finally:
            sidecar.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    queried = np.array([sizes[int(e.split("-")[1])] for e in entities])
    # Entities the exact scan answered before too: there the two must agree; past it "before" searched the graph.
    small = {"plain": np.ones(len(entities), dtype=bool), "filtered": queried <= exact_limit}
    rows = []
    for variant, case in cells:
        rows.append(
            {
                "variant": variant,
                "case": case,
                "p50_ms": statistics.median(times[(variant, case)].p50_ms),
                "p99_ms": statistics.median(times[(variant, case)].p99_ms),
                "cpu_p50_ms": statistics.median(times[(variant, case)].cpu_p50_ms),
                "p50_runs_ms": times[(variant, case)].p50_ms,
                "recall_at_10": recall_at_k(times[(variant, case)].answers, truth[case]),
                "same_hits_as_before": int(np.sum(agree[case])) if variant == "after" else args.queries,
                "queries_within_exact_scan_limit": int(small[case].sum()),
                "same_hits_within_exact_scan_limit": int(np.sum(np.asarray(agree[case])[small[case]])),
            }
        )
    return {
        "benchmark": "filtered_recall",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *args.argv]),
        "machine": machine_info.machine(load_average_at_start=load_at_start, load_averages=loads),
        "before": args.before,
        "n": args.n,
        "queries": args.queries,
        "repeats": args.repeats,
        "queried_entity_size": {
            "median": float(np.median(queried)),
            "min": int(queried.min()),
            "max": int(queried.max()),
        },
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| case | variant | p50 ms | p99 ms | cpu p50 ms | recall@10 | same hits as before (entity within the exact "
        "scan limit) | p50 per run ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        runs = ", ".join(f"{x:.2f}" for x in row["p50_runs_ms"])
        lines.append(
            f"| {row['case']} | {row['variant']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['cpu_p50_ms']:.2f} "
            f"| {row['recall_at_10']:.3f} | {row['same_hits_as_before']}/{result['queries']} "
            f"({row['same_hits_within_exact_scan_limit']}/{row['queries_within_exact_scan_limit']}) | {runs} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", default=BEFORE, help="revision whose recall.py is the 'before' variant")
    parser.add_argument("--cache", type=Path, default=Path("/var/tmp/memevo-bench"))
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = run(args, log)
    print(f"\n{args.n:,} memories, {args.queries} queries, k {K}, medians of {args.repeats}; before = {args.before}\n")
    print(table(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
