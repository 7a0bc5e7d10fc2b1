"""Measure governed write latency: Remember with conflict detection on and client-supplied vectors, at N memories.

Usage (from the repository root)::

    python benchmarks/write_latency.py [--n 100000] [--json out/write_latency.json]

Server-side latency is the time inside the server process from request to
durable acknowledgement, without the network: a :class:`Sidecar` is built
in-process on a temporary data directory (no listen address; its governance
daemon runs as in ``memevo serve``) and ``servicer.Remember(request, context)``
is timed with a minimal context, from one caller and from 8 concurrent
threads. Each call validates, runs perception (fact-key conflicts, exact and
near duplicates, soft conflicts against the entity's recent memories), commits
with fsync and publishes to the columns and the index's fresh tail.

The store is first preloaded with ``--n`` memories through RememberBatch, as a
mix that makes perception work: half carry an entity (Zipf-distributed over
``--entities``, so a few entities have hundreds of memories); 20 % of all
carry a fact key over ``--attributes`` attributes with a few values each and
world times spread over a year (so new values supersede, late ones are
back-dated, restatements confirm); 3 % restate an earlier text; the rest are
plain notes on ``--topics`` topics. Vectors (``--dimension``, default 384) are
random but clustered: statements about one entity have cosine 0.6 to 0.86 to
each other, and 10 % of them reword a recent one (cosine 0.97 to 0.99, above
the policy's soft-conflict threshold 0.9), so soft conflicts happen. The
timed writes continue the same stream.

Measured twice: right after the preload while the background builder is still
moving vectors into the HNSW graph (if it is), and once it has caught up
(``fresh_tail_count == 0`` at the start of every run; the run's own writes
then wait in the tail as they would in service). Then the data directory is
served by a real ``memevo serve`` process on a unix socket and the same
writes are timed with :class:`memevo.client.MemoryClient` for reference
(client, gRPC and socket included). Every figure is the median over
``--repeats`` runs of the run's percentile, each run ``--writes`` calls; a
second table splits the headline figure by write category (runs pooled).
Two figures help read latencies taken on a shared, loaded machine: "CPU
ms/write" is the process's CPU time during a run (every thread: validation,
perception, commit, publish, and the index builder and governance daemon that
run alongside) divided by the run's writes, which depends far less on the
load than wall time; "bare fsync" is, just before each server-side run, the
p50/p99 of 200 fsynced one-key writes to a separate RocksDB next to the data
directory: the floor a durable write cannot go below on this disk right now.

To compare two code revisions on identical data, preload once with
``--preload-only --data DIR``, then run each revision with ``--preloaded
--data COPY`` on its own copy of DIR (the stream is replayed without being
written, so the timed writes are the same).

``--json PATH`` writes ``{"n_memories", "p50_ms", "p99_ms"}`` (server-side,
one caller, index caught up) plus every other figure, the machine, its load
average at each run and the code revision. Not a test: nothing here asserts
on time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the benchmarks package importable

from benchmarks.inprocess import InProcessContext  # noqa: E402

YEAR_S = 365 * 86_400.0
PRELOAD_BATCH = 2_000
WARMUP_WRITES = 200
CATCH_UP_TIMEOUT_S = 3_600.0
STARTUP_TIMEOUT_S = 600.0


def _import_memevo() -> tuple[Any, Any, Any, Any, Any, Any]:
    try:
        import memevo  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT / "src"))  # not installed: use the source tree
    from memevo.client import MemoryClient, MemoryKind
    from memevo.sidecar.config import SidecarConfig
    from memevo.sidecar.service.server import Sidecar
    from memevo.v1 import memory_pb2, memory_service_pb2

    return MemoryClient, MemoryKind, SidecarConfig, Sidecar, memory_pb2, memory_service_pb2


MemoryClient, MemoryKind, SidecarConfig, Sidecar, memory_pb2, memory_service_pb2 = _import_memevo()

KINDS = (
    (memory_pb2.MEMORY_KIND_FACT, 0.4),
    (memory_pb2.MEMORY_KIND_EPISODE, 0.4),
    (memory_pb2.MEMORY_KIND_PREFERENCE, 0.2),
)
OUTCOME_NAMES = {
    memory_service_pb2.WRITE_OUTCOME_CREATED: "created",
    memory_service_pb2.WRITE_OUTCOME_CONFIRMED: "confirmed",
    memory_service_pb2.WRITE_OUTCOME_SUPERSEDED_PREVIOUS: "superseded",
    memory_service_pb2.WRITE_OUTCOME_BACKDATED: "backdated",
}


# ---- the workload ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One memory to write, in the client's terms."""

    content: str
    vector: npt.NDArray[np.float32]
    kind: int
    entity: str = ""
    attribute: str = ""
    value: str = ""
    valid_from_s: float | None = None
    category: str = "plain"
    """What perception has to do with it (for the per-category breakdown)."""

    def proto(self) -> Any:
        memory = memory_pb2.MemoryInput(
            content=self.content, vector=self.vector.astype("<f4").tobytes(), kind=self.kind, entity=self.entity
        )
        if self.attribute:
            memory.fact.attribute = self.attribute
            memory.fact.value = self.value
        if self.valid_from_s is not None:
            memory.valid_from.FromMicroseconds(round(self.valid_from_s * 1e6))
        return memory


@dataclass
class Workload:
    """A reproducible stream of memories with entities, fact keys, duplicates and clustered vectors."""

    dimension: int
    entities: int
    attributes: int
    topics: int
    zipf: float
    seed: int
    entity_share: float = 0.5
    fact_share: float = 0.2
    duplicate_share: float = 0.03
    paraphrase_share: float = 0.1
    values_per_attribute: int = 4
    rng: np.random.Generator = field(init=False)
    produced: int = field(init=False, default=0)
    mix: Counter[str] = field(init=False, default_factory=Counter)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.entity_centres = self._unit(self.rng.standard_normal((self.entities, self.dimension)))
        self.topic_centres = self._unit(self.rng.standard_normal((self.topics, self.dimension)))
        ranks = np.arange(1, self.entities + 1, dtype=np.float64)
        weights = ranks**-self.zipf
        self.entity_weights = weights / weights.sum()
        self.now_s = time.time()
        self.restatable: list[Item] = []
        self.recent: dict[int, list[npt.NDArray[np.float32]]] = {}
        self.entity_counts: Counter[int] = Counter()

    @staticmethod
    def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        unit: npt.NDArray[np.float64] = matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)
        return unit

    def _near(self, centre: npt.NDArray[np.float64], low: float = 0.4, high: float = 0.8) -> npt.NDArray[np.float32]:
        # Noise of norm 0.4 to 0.8 around a unit centre: two memories of one entity have cosine
        # about 0.6 to 0.86, related but below the policy's soft-conflict threshold (0.9), as two
        # different statements about one thing are with a sentence embedder.
        scale = self.rng.uniform(low, high)
        noise = self.rng.standard_normal(self.dimension) * (scale / np.sqrt(self.dimension))
        vector: npt.NDArray[np.float32] = (centre + noise).astype(np.float32)
        return vector

    def _entity(self) -> int:
        return int(self.rng.choice(self.entities, p=self.entity_weights))

    def _about(self, entity: int) -> tuple[npt.NDArray[np.float32], str]:
        """A vector for a new memory about ``entity``: usually a new statement, sometimes a rewording
        of a recent one (cosine about 0.97 to 0.99, so above the soft-conflict threshold)."""
        recent = self.recent.setdefault(entity, [])
        if recent and self.rng.random() < self.paraphrase_share:
            earlier = recent[int(self.rng.integers(len(recent)))]
            self.mix["near-duplicate vector"] += 1
            vector = self._near(earlier / np.linalg.norm(earlier), 0.1, 0.25)
            tag = "reworded"
        else:
            vector = self._near(self.entity_centres[entity])
            tag = "new"
        recent.append(vector)
        del recent[:-8]
        self.entity_counts[entity] += 1
        return vector, tag

    def next(self) -> Item:
        """The next memory of the stream."""
        self.produced += 1
        number = self.produced
        roll = self.rng.random()
        if self.restatable and roll < self.duplicate_share:
            earlier = self.restatable[int(self.rng.integers(len(self.restatable)))]
            self.mix["restated text"] += 1
            return Item(earlier.content, earlier.vector, earlier.kind, entity=earlier.entity, category="restated text")
        roll = self.rng.random()
        if roll < self.fact_share:
            entity = self._entity()
            attribute = int(self.rng.integers(self.attributes))
            value = int(self.rng.integers(self.values_per_attribute))
            self.mix["fact key"] += 1
            vector, _ = self._about(entity)
            return Item(
                f"entity {entity} has attribute {attribute} = value {value} (note {number})",
                vector,
                memory_pb2.MEMORY_KIND_FACT,
                entity=f"entity:{entity}",
                attribute=f"attribute_{attribute}",
                value=f"value {value}",
                valid_from_s=self.now_s - float(self.rng.uniform(0.0, YEAR_S)),
                category="fact key",
            )
        kind = int(self.rng.choice([k for k, _ in KINDS], p=[p for _, p in KINDS]))
        if roll < self.entity_share:
            entity = self._entity()
            self.mix["entity"] += 1
            stored = self.entity_counts[entity]
            size = "<= 16" if stored <= 16 else ("17-256" if stored <= 256 else "> 256")
            vector, tag = self._about(entity)
            item = Item(
                f"something about entity {entity}, {tag} observation {number}",
                vector,
                kind,
                f"entity:{entity}",
                category=f"entity with {size} memories",
            )
        else:
            topic = int(self.rng.integers(self.topics))
            self.mix["plain"] += 1
            item = Item(f"a note on topic {topic}, number {number}", self._near(self.topic_centres[topic]), kind)
        if kind != memory_pb2.MEMORY_KIND_EPISODE and len(self.restatable) < 10_000:
            self.restatable.append(item)
        return item

    def batch(self, count: int) -> list[Item]:
        return [self.next() for _ in range(count)]


# ---- measuring ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Figures:
    """Per-run percentiles (seconds) and throughputs; reported as medians over runs."""

    label: str
    callers: int
    runs: list[dict[str, float]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    tail_at_start: list[int] = field(default_factory=list)
    by_category: dict[str, list[float]] = field(default_factory=dict)
    """Every latency of every run, per write category (pooled over runs)."""
    load_average: list[float] = field(default_factory=list)
    """The machine's 1-minute load average at the start of each run."""
    index_saved: list[bool] = field(default_factory=list)
    """Whether the index builder saved the graph to disk during each run (it does every 300 s)."""
    fsync_floor: list[tuple[float, float]] = field(default_factory=list)
    """(p50, p99) seconds of a bare fsynced one-key RocksDB write on the same disk, just before each run."""

    def add(self, samples: Sequence[float], wall_s: float, cpu_s: float) -> None:
        self.runs.append(
            {
                "cpu_ms_per_write": cpu_s * 1e3 / len(samples),
                "p50": percentile(samples, 50),
                "p90": percentile(samples, 90),
                "p99": percentile(samples, 99),
                "max": max(samples),
                "mean": statistics.fmean(samples),
                "writes_per_s": len(samples) / wall_s,
                "count": len(samples),
            }
        )

    def median(self, key: str) -> float:
        return statistics.median(run[key] for run in self.runs)

    def summary(self) -> dict[str, Any]:
        return {
            "callers": self.callers,
            "runs": len(self.runs),
            "writes_per_run": self.runs[0]["count"] if self.runs else 0,
            "p50_ms": round(self.median("p50") * 1e3, 3),
            "p90_ms": round(self.median("p90") * 1e3, 3),
            "p99_ms": round(self.median("p99") * 1e3, 3),
            "max_ms": round(self.median("max") * 1e3, 3),
            "mean_ms": round(self.median("mean") * 1e3, 3),
            "writes_per_s": round(self.median("writes_per_s"), 1),
            "cpu_ms_per_write": round(self.median("cpu_ms_per_write"), 3),
            "p99_ms_per_run": [round(run["p99"] * 1e3, 3) for run in self.runs],
            "outcomes": dict(self.outcomes),
            "fresh_tail_at_start": self.tail_at_start,
            "load_average_at_start": self.load_average,
            "index_saved_during_run": self.index_saved,
            "fsync_floor_ms_per_run": [[round(p50 * 1e3, 3), round(p99 * 1e3, 3)] for p50, p99 in self.fsync_floor],
            "fsync_floor_p50_ms": round(statistics.median(f[0] for f in self.fsync_floor) * 1e3, 3)
            if self.fsync_floor
            else None,
            "fsync_floor_p99_ms": round(statistics.median(f[1] for f in self.fsync_floor) * 1e3, 3)
            if self.fsync_floor
            else None,
            "by_category_pooled": {
                category: {
                    "count": len(values),
                    "p50_ms": round(percentile(values, 50) * 1e3, 3),
                    "p99_ms": round(percentile(values, 99) * 1e3, 3),
                }
                for category, values in sorted(self.by_category.items())
            },
        }


def run_calls(
    call: Callable[[Any], int], items: Sequence[tuple[str, Any]], callers: int
) -> tuple[list[tuple[str, float]], float, Counter[str]]:
    """Make one call per (category, prepared item) from ``callers`` threads.

    Returns (category, latency) per call, the wall time and the write outcomes.
    """
    samples: list[tuple[str, float]] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(callers)
    errors: list[BaseException] = []

    def worker(share: Sequence[tuple[str, Any]]) -> None:
        mine: list[tuple[str, float]] = []
        seen: Counter[str] = Counter()
        start.wait()
        try:
            for category, item in share:
                began = time.perf_counter()
                outcome = call(item)
                mine.append((category, time.perf_counter() - began))
                seen[OUTCOME_NAMES.get(outcome, str(outcome))] += 1
        except BaseException as exc:
            errors.append(exc)
        with lock:
            samples.extend(mine)
            outcomes.update(seen)

    shares = [items[i::callers] for i in range(callers)]
    threads = [threading.Thread(target=worker, args=(share,)) for share in shares]
    wall_started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return samples, time.perf_counter() - wall_started, outcomes


class FsyncFloor:
    """A bare RocksDB next to the data directory: what one fsynced write costs on this disk right now."""

    def __init__(self, directory: Path) -> None:
        import rocksdict

        self.directory = directory
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = rocksdict.Rdict(str(directory), options)
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True

    def sample(self, writes: int = 200) -> tuple[float, float]:
        """(p50, p99) seconds of ``writes`` synced one-key writes (about a Remember's size each)."""
        value = b"x" * 2_048
        samples = []
        for i in range(writes):
            began = time.perf_counter()
            self._db.put(i.to_bytes(8, "big"), value, self._sync)
            samples.append(time.perf_counter() - began)
        return percentile(samples, 50), percentile(samples, 99)

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def measure(
    label: str,
    prepare: Callable[[Item], Any],
    call: Callable[[Any], int],
    workload: Workload,
    *,
    callers: int,
    repeats: int,
    writes: int,
    index_state: Callable[[], tuple[int, float]],
    log: Callable[[str], None],
    before_run: Callable[[], object] = lambda: None,
    floor: FsyncFloor | None = None,
) -> Figures:
    figures = Figures(label, callers)
    for run in range(repeats):
        before_run()
        if floor is not None:
            figures.fsync_floor.append(floor.sample())
        figures.load_average.append(round(os.getloadavg()[0], 2))
        items = [(item.category, prepare(item)) for item in workload.batch(writes)]  # client work: not timed
        tail, saved_before = index_state()
        figures.tail_at_start.append(tail)
        cpu_started = time.process_time()
        samples, wall_s, outcomes = run_calls(call, items, callers)
        cpu_s = time.process_time() - cpu_started
        figures.index_saved.append(index_state()[1] != saved_before)
        figures.add([latency for _, latency in samples], wall_s, cpu_s)
        for category, latency in samples:
            figures.by_category.setdefault(category, []).append(latency)
        figures.outcomes.update(outcomes)
        last = figures.runs[-1]
        floor_note = (
            f", bare fsync p50/p99 {figures.fsync_floor[-1][0] * 1e3:.3f}/{figures.fsync_floor[-1][1] * 1e3:.3f} ms"
            if figures.fsync_floor
            else ""
        )
        log(
            f"  {label} run {run + 1}/{repeats}: p50 {last['p50'] * 1e3:.3f} ms, p99 {last['p99'] * 1e3:.3f} ms"
            f"{floor_note}, "
            f"{last['writes_per_s']:.0f} writes/s (fresh tail {figures.tail_at_start[-1]}, "
            f"load {figures.load_average[-1]}{', index saved meanwhile' if figures.index_saved[-1] else ''})"
        )
    return figures


# ---- the phases -----------------------------------------------------------------------------


def preload(servicer: Any, workload: Workload, count: int, log: Callable[[str], None]) -> dict[str, Any]:
    context = InProcessContext()
    started = time.perf_counter()
    outcomes: Counter[str] = Counter()
    done = 0
    while done < count:
        size = min(PRELOAD_BATCH, count - done)
        request = memory_service_pb2.RememberBatchRequest(memories=[i.proto() for i in workload.batch(size)])
        response = servicer.RememberBatch(request, context)
        outcomes.update(OUTCOME_NAMES.get(r.outcome, str(r.outcome)) for r in response.results)
        done += size
        if done % 20_000 < PRELOAD_BATCH:
            log(f"  preloaded {done}/{count} ({time.perf_counter() - started:.0f} s)")
    return {"seconds": round(time.perf_counter() - started, 1), "outcomes": dict(outcomes)}


def wait_for_index(stats: Callable[[], Any], log: Callable[[str], None]) -> float:
    started = time.perf_counter()
    last_report = started
    while True:
        tail = stats().index.fresh_tail_count
        if tail == 0:
            return time.perf_counter() - started
        if time.perf_counter() - started > CATCH_UP_TIMEOUT_S:
            raise RuntimeError(f"the index did not catch up in {CATCH_UP_TIMEOUT_S} s (fresh tail {tail})")
        if time.perf_counter() - last_report > 15:
            log(f"  waiting for the index: fresh tail {tail}")
            last_report = time.perf_counter()
        time.sleep(0.2)


@contextlib.contextmanager
def served(data_dir: Path, dimension: int, log_path: Path) -> Iterator[str]:
    """``memevo serve`` on ``data_dir`` and a unix socket; yields the target."""
    run_dir = Path(tempfile.mkdtemp(prefix="memevo-bench-run-"))
    socket_path = run_dir / "memevo.sock"
    ready = run_dir / "ready.json"
    args = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data_dir),
        "--listen", f"unix://{socket_path}", "--embedder", "none", "--dimension", str(dimension),
        "--ready-file", str(ready),
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"memevo serve did not start:\n{log_path.read_text(errors='replace')}")
                time.sleep(0.1)
            yield f"unix://{socket_path}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            shutil.rmtree(run_dir, ignore_errors=True)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gib = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    versions: dict[str, str | None] = {}
    for package in ("numpy", "grpcio", "protobuf", "rocksdict", "usearch", "numba"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    revision = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        revision = head + ("+uncommitted" if dirty else "")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "revision": revision,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def entity_sizes(workload: Workload, total: int) -> dict[str, float]:
    """Expected memories per entity for a store of ``total`` (entity-bearing share, Zipf weights)."""
    per_entity = workload.entity_weights * total * workload.entity_share
    return {
        "largest": round(float(per_entity[0]), 1),
        "p99_entity": round(float(np.percentile(per_entity, 99)), 1),
        "median_entity": round(float(np.median(per_entity)), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories stored before measuring")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--dimension", type=int, default=384, help="vector dimension")
    parser.add_argument("--writes", type=int, default=1_000, help="timed Remember calls per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure; medians are reported")
    parser.add_argument("--callers", type=int, default=8, help="threads of the concurrent runs")
    parser.add_argument("--entities", type=int, default=5_000, help="distinct entities")
    parser.add_argument("--attributes", type=int, default=12, help="distinct fact attributes")
    parser.add_argument("--topics", type=int, default=2_000, help="vector clusters of memories without an entity")
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent of the entity popularity distribution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, help="data directory to use (default: a temporary one, removed)")
    parser.add_argument("--skip-during-build", action="store_true", help="only measure once the index caught up")
    parser.add_argument("--skip-wire", action="store_true", help="skip the unix-socket client measurement")
    parser.add_argument(
        "--preload-only",
        action="store_true",
        help="preload --data, wait for the index, close it cleanly and stop (a store to copy for --preloaded runs)",
    )
    parser.add_argument(
        "--preloaded",
        action="store_true",
        help="--data already holds the preload of these --n/--seed settings: replay the stream without writing it "
        "(run each code revision on a fresh copy of one preloaded store to compare them on identical data)",
    )
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    temporary = None
    if (args.preload_only or args.preloaded) and args.data is None:
        parser.error("--preload-only and --preloaded need --data")
    if args.data is None:
        temporary = tempfile.TemporaryDirectory(prefix="memevo-bench-")
        data_dir = Path(temporary.name) / "data"
    else:
        data_dir = args.data
    workload = Workload(args.dimension, args.entities, args.attributes, args.topics, args.zipf, args.seed)
    config = SidecarConfig(data_dir=data_dir, listen=(), dimension=args.dimension)
    results: dict[str, Any] = {
        "benchmark": "write_latency",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "n_memories": args.n,
        "dimension": args.dimension,
        "workload": {
            "entities": args.entities,
            "attributes": args.attributes,
            "topics": args.topics,
            "zipf": args.zipf,
            "expected_memories_per_entity": entity_sizes(workload, args.n),
        },
    }
    figures: list[Figures] = []
    try:
        log(f"preloading {args.n} memories (dimension {args.dimension}) into {data_dir}")
        sidecar = Sidecar(config)
        sidecar.start()
        try:
            servicer = sidecar.servicer
            context = InProcessContext()
            stats_request = memory_service_pb2.GetStatsRequest()

            def stats() -> Any:
                return servicer.GetStats(stats_request, context)

            def tail() -> int:
                return int(stats().index.fresh_tail_count)

            def index_state() -> tuple[int, float]:
                index = stats().index
                return int(index.fresh_tail_count), index.saved_at.ToSeconds() if index.HasField("saved_at") else 0.0

            if args.preloaded:
                workload.batch(args.n)  # the same stream continues where the preload left it
                stored = int(stats().total_count)  # fewer than --n: restatements confirm instead of adding
                if stored == 0:
                    raise SystemExit(f"--preloaded: {data_dir} holds no memories; preload it with --preload-only")
                results["preload"] = {"preloaded": True, "stored": stored, "mix": dict(workload.mix)}
            else:
                results["preload"] = preload(servicer, workload, args.n, log)
                results["preload"]["mix"] = dict(workload.mix)
            results["preload"]["fresh_tail_after"] = tail()
            if args.preload_only:
                log("waiting for the index to catch up before closing the preloaded store")
                results["index_catch_up_s"] = round(wait_for_index(stats, log), 1)
                log(f"preloaded {data_dir}: {results['preload']}")
                return 0

            def request_of(item: Item) -> Any:
                return memory_service_pb2.RememberRequest(memory=item.proto())

            def remember(request: Any) -> int:
                return int(servicer.Remember(request, context).result.outcome)

            run_calls(remember, [("", request_of(i)) for i in workload.batch(WARMUP_WRITES)], 1)
            if not args.skip_during_build and tail() > 0:
                log("measuring in-process while the index builder catches up")
                figures.append(
                    measure(
                        "server, 1 caller, index building",
                        request_of,
                        remember,
                        workload,
                        callers=1,
                        repeats=args.repeats,
                        writes=args.writes,
                        index_state=index_state,
                        log=log,
                    )
                )
            log("waiting for the index to catch up")
            results["index_catch_up_s"] = round(wait_for_index(stats, log), 1)
            floor = FsyncFloor(data_dir.parent / f"{data_dir.name}-fsync-floor")
            for callers in (1, args.callers):
                label = f"server, {callers} caller{'s' if callers > 1 else ''}"
                log(f"measuring {label}")
                figures.append(
                    measure(
                        label,
                        request_of,
                        remember,
                        workload,
                        callers=callers,
                        repeats=args.repeats,
                        writes=args.writes,
                        index_state=index_state,
                        log=log,
                        before_run=lambda: wait_for_index(stats, log),
                        floor=floor,
                    )
                )
            floor.close()
            final = stats()
            results["stored_after_server_runs"] = int(final.total_count)
            results["governance_sweeps"] = [
                {"trigger": s.trigger, "evaluated": int(s.evaluated_count), "total_ms": round(s.total_ms, 1)}
                for s in getattr(final, "recent_sweeps", [])
            ]
        finally:
            sidecar.stop()

        if not args.skip_wire:
            log_path = data_dir.parent / "serve.log"
            log("measuring over a unix socket with MemoryClient (memevo serve in its own process)")
            with served(data_dir, args.dimension, log_path) as target, MemoryClient(target, timeout_s=60) as client:

                def arguments_of(item: Item) -> dict[str, Any]:
                    valid_from = None
                    if item.valid_from_s is not None:
                        valid_from = datetime.datetime.fromtimestamp(item.valid_from_s, datetime.timezone.utc)
                    return {
                        "content": item.content,
                        "vector": item.vector,
                        "kind": MemoryKind(item.kind),
                        "entity": item.entity or None,
                        "fact": (item.attribute, item.value) if item.attribute else None,
                        "valid_from": valid_from,
                    }

                def wire_index_state() -> tuple[int, float]:
                    index = client.stats().index
                    return index.fresh_tail_count, index.saved_at.timestamp() if index.saved_at else 0.0

                def remember_wire(arguments: dict[str, Any]) -> int:
                    return int(client.remember(**arguments).outcome.value)

                run_calls(remember_wire, [("", arguments_of(i)) for i in workload.batch(WARMUP_WRITES)], 1)
                for callers in (1, args.callers):
                    label = f"unix socket + client, {callers} caller{'s' if callers > 1 else ''}"
                    log(f"measuring {label}")
                    figures.append(
                        measure(
                            label,
                            arguments_of,
                            remember_wire,
                            workload,
                            callers=callers,
                            repeats=args.repeats,
                            writes=args.writes,
                            index_state=wire_index_state,
                            log=log,
                        )
                    )
    finally:
        if temporary is not None:
            temporary.cleanup()

    by_label = {f.label: f.summary() for f in figures}
    results["figures"] = by_label
    headline_label = "server, 1 caller"
    headline = by_label[headline_label]
    results["p50_ms"] = headline["p50_ms"]
    results["p99_ms"] = headline["p99_ms"]
    results["target"] = {"p50_ms": 1.0, "p99_ms": 5.0}

    print(f"\nGoverned Remember latency at {args.n:,} memories, dimension {args.dimension}, conflict detection on")
    print(f"(medians of {args.repeats} runs x {args.writes} writes; machine: {results['machine']['cores']} cores)\n")
    print(
        f"| {'measure':<36} | {'p50 ms':>7} | {'p90 ms':>7} | {'p99 ms':>7} | {'max ms':>7} | {'writes/s':>8} "
        f"| {'CPU ms/write':>12} | {'bare fsync p50/p99 ms':>21} |"
    )
    print(f"|{'-' * 38}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 14}|{'-' * 23}|")
    for label, row in by_label.items():
        fsync = (
            f"{row['fsync_floor_p50_ms']:.3f} / {row['fsync_floor_p99_ms']:.3f}" if row["fsync_floor_p50_ms"] else "-"
        )
        print(
            f"| {label:<36} | {row['p50_ms']:>7.3f} | {row['p90_ms']:>7.3f} | {row['p99_ms']:>7.3f} "
            f"| {row['max_ms']:>7.2f} | {row['writes_per_s']:>8.0f} | {row['cpu_ms_per_write']:>12.3f} | {fsync:>21} |"
        )
    outcomes = Counter[str]()
    for row in by_label.values():
        outcomes.update(row["outcomes"])
    print(f"\nBy write category, {headline_label} (all runs pooled):\n")
    print(f"| {'category':<36} | {'writes':>7} | {'p50 ms':>7} | {'p99 ms':>7} |")
    print(f"|{'-' * 38}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
    for category, row in headline["by_category_pooled"].items():
        print(f"| {category:<36} | {row['count']:>7} | {row['p50_ms']:>7.3f} | {row['p99_ms']:>7.3f} |")
    print(f"\ntimed write outcomes: {dict(outcomes)}")
    print(f"preload: {results['preload']}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
