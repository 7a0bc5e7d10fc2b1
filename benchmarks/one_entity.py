"""Write cost as one entity grows: memories about one entity against the same writes spread over many (issue 42).

Usage (from the repository root)::

    python benchmarks/one_entity.py [--n 20000] [--batch 1000] [--bucket 2000] [--json OUT]

Starts ``memevo serve --embedder none`` (384-d client vectors; as ``throughput.py`` starts it: the tree's own
``src`` first on the path) on a unix socket and a fresh data directory, then alternates two streams of the
same mix until the one entity holds ``--n`` memories: "one" writes every memory about ``person:x``; "many" writes
as many about entities drawn from ``--entities`` others (the control: same store size, same machine load at the
same moment). Half the memories are keyed facts over ``--attributes`` attributes with ``--versions`` values each
(restatements confirm, new values supersede), half plain prose statements naming the entity. Client vectors of
one entity lie around its own direction (cosine ~0.6 to each other). Each call is one ``RememberBatch`` of
``--batch`` memories (``--batch 1``: one ``Remember`` each).

Printed per bucket of the one entity's size (``--bucket`` memories): milliseconds a write (the call's time over
its memories) at the median and 95th percentile of the bucket's calls, for each stream, and the sidecar process's
CPU milliseconds a write (user + system from ``/proc``, every thread: what a loaded, shared machine changes least),
and the ratio one/many of the median. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memevo.client import MemoryClient
from memevo.v1 import memory_pb2, memory_service_pb2

try:
    from benchmarks.machine import machine
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.machine import machine
from benchmarks.throughput import DIMENSION, served

ONE = "person:x"
CALL_TIMEOUT_S = 3_600.0
"""Deadline of one call: a batch of 10,000 about one entity took tens of minutes on a loaded machine before issue 42."""
WORDS = (
    "garden", "trip", "budget", "recipe", "meeting", "train", "concert", "dentist", "laptop", "invoice", "novel",
    "cousin", "hiking", "bakery", "museum", "deadline", "sofa", "bicycle", "ticket", "weekend", "project", "lecture",
    "parcel", "painting",
)  # fmt: skip


class Stream:
    """Memories about one entity, or about entities drawn from many, from one shared mix."""

    def __init__(self, args: argparse.Namespace, *, one: bool, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.one, self.entities, self.attributes, self.versions = one, args.entities, args.attributes, args.versions
        self.centres: dict[str, np.ndarray] = {}
        self.written = 0

    def _vector(self, entity: str) -> bytes:
        centre = self.centres.get(entity)
        if centre is None:
            centre = self.centres[entity] = self.rng.standard_normal(DIMENSION)
        vector = centre + 0.8 * self.rng.standard_normal(DIMENSION)
        return (vector / np.linalg.norm(vector)).astype("<f4").tobytes()

    def next(self) -> memory_pb2.MemoryInput:
        number = self.written
        self.written += 1
        entity = ONE if self.one else f"person:p{int(self.rng.integers(self.entities))}"
        name = entity.split(":", 1)[1]
        memory = memory_pb2.MemoryInput(kind=memory_pb2.MEMORY_KIND_FACT, entity=entity)
        if number % 2 == 0:
            attribute = f"attribute_{int(self.rng.integers(self.attributes))}"
            value = f"option {int(self.rng.integers(self.versions))}"
            memory.fact.attribute, memory.fact.value = attribute, value
            memory.content = f"The {attribute.replace('_', ' ')} of {name} is {value}"
        else:
            a, b, c = self.rng.choice(WORDS, 3, replace=False)
            memory.content = f"{name} talked about the {a} and the {b} before the {c} (note {number})"
        memory.vector = self._vector(entity)
        return memory


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, every thread."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, stub: Any, pid: int) -> list[dict[str, Any]]:
    """Alternate the two streams' calls until the one entity holds ``--n``; prints and returns the table's rows."""
    streams = {"one": Stream(args, one=True, seed=args.seed), "many": Stream(args, one=False, seed=args.seed + 1)}
    rows: list[dict[str, Any]] = []
    samples: dict[str, list[float]] = {"one": [], "many": []}
    cpu: dict[str, float] = {"one": 0.0, "many": 0.0}
    print(
        f"ms a write, calls of {args.batch}\n{'one entity holds':>18} | {'one: p50':>8} {'p95':>7} {'cpu':>6} | "
        f"{'many: p50':>9} {'p95':>7} {'cpu':>6} | {'p50 one/many':>12}",
        flush=True,
    )
    while streams["one"].written < args.n:
        for name, stream in streams.items():
            memories = [stream.next() for _ in range(args.batch)]
            cpu_before, started = cpu_s(pid), time.perf_counter()
            if args.batch == 1:
                stub.Remember(memory_service_pb2.RememberRequest(memory=memories[0]), timeout=CALL_TIMEOUT_S)
            else:
                stub.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), timeout=CALL_TIMEOUT_S)
            samples[name].append((time.perf_counter() - started) * 1e3 / args.batch)
            cpu[name] += cpu_s(pid) - cpu_before
        size = streams["one"].written
        if size % args.bucket:
            continue
        row: dict[str, Any] = {"from": size - args.bucket, "to": size, "load": round(os.getloadavg()[0], 1)}
        for name in streams:
            row[name] = {
                "p50_ms": round(float(np.percentile(samples[name], 50)), 3),
                "p95_ms": round(float(np.percentile(samples[name], 95)), 3),
                "cpu_ms": round(cpu[name] * 1e3 / args.bucket, 3),
            }
        row["ratio_p50"] = round(row["one"]["p50_ms"] / row["many"]["p50_ms"], 2)
        rows.append(row)
        one, many = row["one"], row["many"]
        print(
            f"{row['from']:>8,}-{row['to']:<9,} | {one['p50_ms']:8.2f} {one['p95_ms']:7.2f} {one['cpu_ms']:6.2f} | "
            f"{many['p50_ms']:9.2f} {many['p95_ms']:7.2f} {many['cpu_ms']:6.2f} | {row['ratio_p50']:12.2f}   "
            f"(load {row['load']})",
            flush=True,
        )
        samples = {"one": [], "many": []}
        cpu = {"one": 0.0, "many": 0.0}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="memories written about the one entity")
    parser.add_argument("--batch", type=int, default=1_000, help="memories a call (1: Remember, else RememberBatch)")
    parser.add_argument("--bucket", type=int, default=2_000, help="rows of the table, in the one entity's memories")
    parser.add_argument("--entities", type=int, default=2_000, help="entities of the many-entities stream")
    parser.add_argument("--attributes", type=int, default=50, help="fact attributes")
    parser.add_argument("--versions", type=int, default=4, help="values each attribute takes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the table and the machine here")
    args = parser.parse_args()
    if args.n % args.batch or args.bucket % args.batch:
        parser.error("--n and --bucket must be multiples of --batch")
    with tempfile.TemporaryDirectory(prefix="memevo-one-entity-") as root:
        run_dir = Path(root)
        with served(run_dir / "data", run_dir, run_dir / "serve.log") as sidecar:
            client = MemoryClient(sidecar["unix"], timeout_s=600)
            rows = run(args, client._stub, int(sidecar["pid"]))
            client.close()
    if args.json is not None:
        settings = {**vars(args), "json": str(args.json)}
        result = {"benchmark": "one_entity", "command": " ".join(sys.argv), "args": settings, "rows": rows}
        args.json.write_text(json.dumps({**result, **machine()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
