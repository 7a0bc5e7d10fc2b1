"""Measure the incremental cluster pass: its cost follows the new memories, not the size of the store.

Usage (from the repository root)::

    python benchmarks/consolidation.py [--sizes 1e4,1e5,1e6] [--new 1000] [--repeats 5] [--json PATH]

For each store size an in-process engine (embedder none, ``--dimension``
client vectors, a temporary or ``--cache`` data directory, built once and
reused) is filled with background EPISODE memories: random unit vectors, so
their neighbours are far apart and nothing groups. Once the ANN index has
caught up, each repeat writes ``--new`` new memories — groups of
``--group-size`` near-duplicates (cosine > 0.97) about one entity, plus as
many unrelated ones — and times one consolidation pass (the same
``ReviewBroker.consolidation_pass`` that Govern and the review worker run:
ANN neighbours of every new memory, the linking kernel, proposals stored).
The table gives the median pass time, the time per new memory and the
groups found; the figure to compare across sizes is the time per new
memory, which stays flat when the pass is incremental. Not a test: nothing
here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    from benchmarks import machine as machine_info
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import machine as machine_info
from memevo.sidecar.config import GovernanceConfig, SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.errors import ResourceExhausted
from memevo.sidecar.governance.review import ReviewBroker
from memevo.v1 import memory_pb2

FILL_BATCH = 5_000


def _unit(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


def _item(content: str, vector: npt.NDArray[np.float32], entity: str = "") -> NewMemory:
    return NewMemory(
        content=content,
        vector=vector,
        namespace="bench",
        kind=memory_pb2.MEMORY_KIND_EPISODE,
        entity=entity,
    )


def open_engine(data_dir: Path, dimension: int) -> Engine:
    config = SidecarConfig(
        data_dir=data_dir,
        dimension=dimension,
        embedder=EmbedderConfig(kind="none"),
        governance=GovernanceConfig(sweep_interval_s=0, checkpoint_interval_s=0),
    )
    return Engine(config)


def fill(engine: Engine, target: int, rng: np.random.Generator) -> None:
    """Background memories until the store holds ``target``."""
    have = int(engine.stats().total_count)
    started = time.perf_counter()
    while have < target:
        count = min(FILL_BATCH, target - have)
        vectors = _unit(rng.normal(size=(count, engine.dimension)))
        try:
            engine.remember([_item(f"background note {have + i}", vectors[i]) for i in range(count)])
        except ResourceExhausted:  # the index builder is behind: let it catch up, as a client would
            time.sleep(1.0)
            continue
        have += count
        if have % 100_000 < FILL_BATCH:
            print(f"  filled {have:,} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    wait_indexed(engine)


def wait_indexed(engine: Engine) -> None:
    while engine.index.tail_count > 0:
        time.sleep(0.2)


def new_batch(engine: Engine, count: int, group_size: int, rng: np.random.Generator, tag: str) -> int:
    """``count`` new memories, half in near-duplicate groups; returns how many groups were planted."""
    grouped = count // 2
    groups = grouped // group_size
    items: list[NewMemory] = []
    for g in range(groups):
        centre = rng.normal(size=engine.dimension)
        rows = _unit(
            centre
            + 0.03
            * np.linalg.norm(centre)
            / np.sqrt(engine.dimension)
            * rng.normal(size=(group_size, engine.dimension))
        )
        items += [_item(f"{tag} incident {g} report {i}", rows[i], entity=f"{tag}-svc-{g}") for i in range(group_size)]
    loose = count - len(items)
    vectors = _unit(rng.normal(size=(loose, engine.dimension)))
    items += [_item(f"{tag} unrelated {i}", vectors[i]) for i in range(loose)]
    engine.remember(items)
    return groups


def measure(engine: Engine, broker: ReviewBroker, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    # As if the store had been governed all along: the background is behind the watermark.
    broker.finder.advance(engine.columns.size - 1)
    times: list[float] = []
    found: list[int] = []
    planted = 0
    for repeat in range(args.repeats):
        planted = new_batch(engine, args.new, args.group_size, rng, f"r{repeat}-{time.time_ns()}")
        wait_indexed(engine)
        started = time.perf_counter()
        stats = broker.consolidation_pass()
        times.append((time.perf_counter() - started) * 1e3)
        found.append(int(stats.groups_found))
        assert stats.seeds_examined >= args.new, stats
    median_ms = statistics.median(times)
    return {
        "n_memories": int(engine.stats().total_count),
        "new_memories": args.new,
        "pass_ms_median": median_ms,
        "pass_ms_all": times,
        "us_per_new_memory": median_ms * 1e3 / args.new,
        "groups_found_median": statistics.median(found),
        "groups_planted": planted,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e4,1e5,1e6", help="store sizes, comma-separated (default 1e4,1e5,1e6)")
    parser.add_argument("--new", type=int, default=1000, help="new memories per pass (default 1000)")
    parser.add_argument("--group-size", type=int, default=10, help="near-duplicates per planted group (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="passes per size; the median is reported (default 5)")
    parser.add_argument("--dimension", type=int, default=32, help="vector dimension (default 32)")
    parser.add_argument("--cache", type=Path, help="keep the filled stores here and reuse them on later runs")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    rng = np.random.default_rng(7)
    rows: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="memevo-consolidation-"))
    try:
        for size in sizes:
            base = args.cache or scratch
            data_dir = base / f"store-{size}-d{args.dimension}"
            cached = data_dir.exists()
            print(f"store of {size:,} memories ({'cached' if cached else 'building'}) in {data_dir}", file=sys.stderr)
            work = scratch / f"run-{size}"
            engine = open_engine(data_dir, args.dimension)
            try:
                fill(engine, size, rng)
            finally:
                engine.close()
            # Each run works on a copy, so the cached store stays at its size.
            shutil.copytree(data_dir, work)
            engine = open_engine(work, args.dimension)
            try:
                broker = ReviewBroker(engine)
                rows.append(measure(engine, broker, args, rng))
            finally:
                engine.close()
                shutil.rmtree(work, ignore_errors=True)
            print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(f"Incremental cluster pass: {args.new:,} new memories per pass, median of {args.repeats} passes")
    print("| memories in store | pass ms | µs per new memory | groups found / planted |")
    print("|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['n_memories']:,} | {row['pass_ms_median']:.1f} | {row['us_per_new_memory']:.0f} | "
            f"{row['groups_found_median']:g} / {row['groups_planted']} |"
        )
    if len(rows) > 1:
        ratio = rows[-1]["pass_ms_median"] / rows[0]["pass_ms_median"]
        growth = rows[-1]["n_memories"] / rows[0]["n_memories"]
        print(f"\npass time grew {ratio:.2f}x while the store grew {growth:.0f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"results": rows, "machine": machine_info.machine(), "dimension": args.dimension}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
