"""Measure the incremental cluster pass: its cost follows the new memories, not the size of the store.

Usage (from the repository root)::

    python benchmarks/consolidation.py [--sizes 1e4,1e5,1e6] [--new 1000] [--repeats 5] [--json PATH]
    python benchmarks/consolidation.py --mode events [--instances 5] [--json PATH]

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

``--mode events`` measures what a pass proposes rather than how fast: a store
written one memory at a time through the default text embedder, as an agent
writes it, of recurring dated events (the same sentence about one person with
another date, number or name: meetings, stand-ups, weekly reports, deploys,
invoices, reviews), repeated experiences (one experience told again, in other
words or the same ones, no detail telling them apart) and strategies (one
task signature, "attempt n"). Each member's planted details are known, so it
counts the consolidation proposals whose suggested text drops one of them
(should be 0), the repeated experiences and strategies that were still
proposed, and the soft conflicts the writes raised on earlier episodes.
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
from memevo.v1 import memory_pb2, memory_service_pb2
from memevo.v1.review_pb2 import PROPOSAL_KIND_CONSOLIDATE

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
        # One text a group: members that differ in a number are distinct events, which a pass never proposes.
        items += [
            _item(f"{tag} incident {g} reported again", rows[i], entity=f"{tag}-svc-{g}") for i in range(group_size)
        ]
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


PEOPLE = ("Wendy", "Arjun", "Mei", "Tomas", "Lena", "Kofi", "Sara", "Diego")
PROJECTS = ("Falcon", "Heron", "Kestrel", "Osprey", "Plover")
EVENTS = (
    ("On {date} {person} scheduled a meeting about {project}", "date"),
    ("{person} sent the weekly report for {project} on {date}", "date"),
    ("Daily stand-up of {project}: {person} closed {number} tickets", "number"),
    ("{person} deployed {project} build {number} to staging", "number"),
    ("{person} paid invoice {number} for the {project} licences", "number"),
    ("{person} met {other} to review the {project} roadmap", "other"),
)
"""Recurring events: each (person, template, project) happens ``--instances`` times with another detail."""
REPEATS = (
    (
        "Ran the {project} test suite; it passed",
        "Ran the {project} test suite again; it passed",
        "Ran the {project} test suite and it passed",
        "Ran the whole {project} test suite; it passed",
        "Ran the {project} test suite once more; it passed",
        "Ran the {project} test suite; everything passed",
    ),
    (
        "The {project} nightly backup finished without errors",
        "The {project} nightly backup finished without any errors",
        "The {project} nightly backup finished again without errors",
        "The nightly backup of {project} finished without errors",
        "The {project} nightly backup completed without errors",
        "The {project} nightly backup finished with no errors",
    ),
    ("Checked the {project} dashboards; nothing unusual",) * 6,
)
"""Repeated experiences: one experience told again (in other words, or the same), nothing (date, number, name) to
keep apart."""
STRATEGY = "To release {project} safely, run the migration first, then restart the workers (attempt {attempt})."


def _planted(rng: np.random.Generator, instances: int) -> list[tuple[NewMemory, str, str, tuple[str, ...]]]:
    """The events store: (item, kind of group, group label, details the abstraction must keep), shuffled."""
    planted: list[tuple[NewMemory, str, str, tuple[str, ...]]] = []
    for person in PEOPLE:
        entity = f"person:{person.lower()}"
        others = [p for p in PEOPLE if p != person]
        for t, (template, detail) in enumerate(EVENTS):
            for project in PROJECTS:
                days = rng.choice(np.arange(1, 29), size=instances, replace=False)
                numbers = rng.choice(np.arange(2, 9999), size=instances, replace=False)
                names = rng.choice(others, size=instances, replace=False)
                for i in range(instances):
                    values = {
                        "date": f"2026-05-{int(days[i]):02d}",
                        "number": str(int(numbers[i])),
                        "other": str(names[i]),
                    }
                    text = template.format(person=person, project=project, **values)
                    item = NewMemory(
                        content=text, vector=None, namespace="bench", kind=memory_pb2.MEMORY_KIND_EPISODE, entity=entity
                    )
                    planted.append((item, "event", f"{person}/{t}/{project}", (values[detail],)))
        for r, variants in enumerate(REPEATS):
            project = PROJECTS[r % len(PROJECTS)]
            for text in variants:
                item = NewMemory(
                    content=text.format(project=project),
                    vector=None,
                    namespace="bench",
                    kind=memory_pb2.MEMORY_KIND_EPISODE,
                    entity=entity,
                )
                planted.append((item, "repeat", f"{person}/repeat{r}", ()))
    for project in PROJECTS:
        for attempt in range(1, 7):
            item = NewMemory(
                content=STRATEGY.format(project=project, attempt=attempt),
                vector=None,
                namespace="bench",
                kind=memory_pb2.MEMORY_KIND_STRATEGY,
                task_signature=f"release-{project.lower()}",
            )
            planted.append((item, "strategy", f"release-{project.lower()}", ()))
    order = rng.permutation(len(planted))
    return [planted[i] for i in order]


def measure_events(args: argparse.Namespace) -> dict[str, Any]:
    """Write the events store one memory at a time, run one pass, and judge every proposal against what was planted."""
    rng = np.random.default_rng(11)
    planted = _planted(rng, args.instances)
    scratch = Path(tempfile.mkdtemp(prefix="memevo-consolidation-events-"))
    try:
        engine = Engine(
            SidecarConfig(
                data_dir=scratch / "data",
                embedder=EmbedderConfig(kind="local"),
                governance=GovernanceConfig(sweep_interval_s=0, checkpoint_interval_s=0),
            )
        )
        try:
            truth: dict[int, tuple[str, str, tuple[str, ...]]] = {}
            confirmed = 0
            doubted_by_episode = 0
            started = time.perf_counter()
            for item, kind, label, details in planted:
                written = engine.remember([item])[0]
                if written.outcome == memory_service_pb2.WRITE_OUTCOME_CONFIRMED:
                    confirmed += 1
                    continue
                truth[written.memory.id] = (kind, label, details)
                if item.kind == memory_pb2.MEMORY_KIND_EPISODE:
                    doubted_by_episode += len(written.affected)
            write_s = time.perf_counter() - started
            wait_indexed(engine)
            records, _ = engine.get(sorted(truth))
            inconsistent_episodes = sum(
                1 for r in records if r.kind == memory_pb2.MEMORY_KIND_EPISODE and r.inconsistency > 0
            )
            broker = ReviewBroker(engine)
            stats = broker.consolidation_pass()
            proposals = [p.proposal for p in broker._open.values() if p.proposal.kind == PROPOSAL_KIND_CONSOLIDATE]
            lossy = 0
            proposed_by_kind: dict[str, set[int]] = {"event": set(), "repeat": set(), "strategy": set()}
            for proposal in proposals:
                text = proposal.suggested_text.casefold()
                members = [m.id for m in proposal.memories]
                if any(d.casefold() not in text for i in members for d in truth.get(i, ("", "", ()))[2]):
                    lossy += 1
                for i in members:
                    if i in truth:
                        proposed_by_kind[truth[i][0]].add(i)
            stored = {k: sum(1 for v in truth.values() if v[0] == k) for k in proposed_by_kind}
            return {
                "memories_written": len(planted),
                "stored": stored,
                "confirmed_at_write": confirmed,
                "write_s": write_s,
                "proposals": len(proposals),
                "proposals_dropping_a_detail": lossy,
                "proposed_members": {k: len(v) for k, v in proposed_by_kind.items()},
                "soft_conflicts_raised_by_episodes": doubted_by_episode,
                "episodes_with_inconsistency": inconsistent_episodes,
                "groups_found": int(stats.groups_found),
                "pass_ms": float(stats.total_ms),
            }
        finally:
            engine.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def events_main(args: argparse.Namespace) -> int:
    row = measure_events(args)
    print(json.dumps(row), file=sys.stderr)
    stored, proposed = row["stored"], row["proposed_members"]
    print()
    print(f"Consolidation of recurring dated events: {row['memories_written']:,} memories written one at a time")
    print("| what | figure |")
    print("|---|---|")
    print(f"| consolidation proposals opened | {row['proposals']} |")
    print(
        "| proposals whose suggested text drops a member's date, number or name | "
        f"{row['proposals_dropping_a_detail']} |"
    )
    print(f"| dated events (stored) in a proposal | {proposed['event']} / {stored['event']} |")
    print(f"| repeated experiences (stored) in a proposal | {proposed['repeat']} / {stored['repeat']} |")
    print(f"| strategies (stored) in a proposal | {proposed['strategy']} / {stored['strategy']} |")
    print(f"| writes answered CONFIRMED (folded into an earlier memory) | {row['confirmed_at_write']} |")
    print(
        f"| soft conflicts raised on earlier memories by episode writes | {row['soft_conflicts_raised_by_episodes']} |"
    )
    print(f"| episodes with inconsistency > 0 after the writes | {row['episodes_with_inconsistency']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": row, "machine": machine_info.machine()}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e4,1e5,1e6", help="store sizes, comma-separated (default 1e4,1e5,1e6)")
    parser.add_argument("--new", type=int, default=1000, help="new memories per pass (default 1000)")
    parser.add_argument("--group-size", type=int, default=10, help="near-duplicates per planted group (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="passes per size; the median is reported (default 5)")
    parser.add_argument("--dimension", type=int, default=32, help="vector dimension (default 32)")
    parser.add_argument("--cache", type=Path, help="keep the filled stores here and reuse them on later runs")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--mode", choices=("scale", "events"), default="scale", help="pass time by store size, or what a pass proposes"
    )
    parser.add_argument(
        "--instances", type=int, default=5, help="events mode: dates/numbers/names per event (default 5)"
    )
    args = parser.parse_args(argv)
    if args.mode == "events":
        return events_main(args)
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
