"""Measure time-to-ready of ``memevo serve`` on a data directory of 1 million memories (384-d client vectors).

Usage (from the repository root)::

    python benchmarks/reopen.py --cache /var/tmp/memevo-bench [--n 1000000] [--repeats 5] [--json out.json]

The data directory is built once and kept under ``--cache`` (named after
``--n``, ``--dimension`` and ``--seed``; a ``complete`` marker says it was
finished): memories are written in-process through the engine's write path
(``Engine.remember``: perception, group commit with fsync, change log), in
batches, with random 384-d client vectors, four namespaces, a mix of kinds,
a third of them about one of ``--entities`` entities and 10 % carrying a fact
key; then the HNSW graph is built in one pass (``--build-threads`` insert
threads, 2 by default, and ``--build-expansion-add`` candidates, the serving
default 128 unless given: a smaller value builds the graph several times
faster with the same connectivity, so the same file size and load time, at
some search quality, which time-to-ready does not measure) and saved, as a
sidecar that ran for a while would have it. Building 1M takes a while
(the graph build dominates); later runs reuse it.

Two starts are measured: after a clean stop, which reads the start-up
snapshot the stop wrote (``sidecar/store/snapshot.py``), and without it
(removed first, as after a crash: every record is parsed).
Time-to-ready is measured from spawning ``memevo serve --embedder none`` to
the moment its ready file exists *and* a ``grpc.health.v1`` check over the
unix socket says SERVING. Each repeat is then stopped with SIGTERM (its stop
time is reported too). The first start after the build is a warm-up and not
counted. Reported: the median and every repeat. Not a test: nothing asserts
on time; the target (≤ 10 s for 1M) is printed next to the figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
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
TARGET_S = 10.0
BUILD_BATCH = 5_000
STARTUP_TIMEOUT_S = 1_800.0
NAMESPACES = ("default", "team-a", "team-b", "team-c")
WORDS = [
    "deploy",
    "invoice",
    "user",
    "prefers",
    "coffee",
    "meeting",
    "budget",
    "server",
    "latency",
    "cache",
    "report",
    "travel",
    "paris",
    "berlin",
    "tokyo",
    "python",
    "rust",
    "schedule",
    "review",
    "contract",
    "vendor",
    "printer",
    "password",
    "backup",
    "quarterly",
]


def _import_memevo() -> None:
    try:
        import memevo  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT / "src"))  # not installed: use the source tree


_import_memevo()

from memevo.sidecar.store.snapshot import SNAPSHOT_FILE  # noqa: E402
from memevo.sidecar.store.vector_index import INDEX_META_FILE  # noqa: E402
from memevo.v1 import memory_pb2  # noqa: E402

try:
    from benchmarks import machine as machine_info
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import machine as machine_info

KINDS = (
    memory_pb2.MEMORY_KIND_EPISODE,
    memory_pb2.MEMORY_KIND_FACT,
    memory_pb2.MEMORY_KIND_PREFERENCE,
    memory_pb2.MEMORY_KIND_EPISODE,
)


def machine() -> dict[str, Any]:
    """CPU, cores, memory, versions, code revision and the load average now."""
    return machine_info.machine(("numpy", "grpcio", "protobuf", "rocksdict", "usearch", "numba"))


def _items(start: int, count: int, dimension: int, entities: int, rng: np.random.Generator) -> list[Any]:
    from memevo.sidecar.domain import NewMemory

    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    words = rng.integers(0, len(WORDS), size=(count, 6))
    about = rng.integers(0, entities, size=count)
    items = []
    for row in range(count):
        number = start + row
        entity = f"entity-{about[row]}" if number % 3 == 0 else ""
        fact = entity and number % 10 == 0
        text = " ".join(WORDS[w] for w in words[row])
        items.append(
            NewMemory(
                content=f"note {number}: {text}",
                vector=vectors[row],
                namespace=NAMESPACES[number % len(NAMESPACES)],
                kind=memory_pb2.MEMORY_KIND_FACT if fact else KINDS[number % len(KINDS)],
                entity=entity,
                fact_attribute=f"attr-{number % 7}" if fact else "",
                fact_value=f"value-{number}" if fact else "",
                importance=int(1 + number % 10),
            )
        )
    return items


def build_store(
    cache: Path,
    n: int,
    *,
    dimension: int = 384,
    entities: int = 20_000,
    seed: int = 0,
    build_threads: int = 2,
    build_expansion_add: int = 0,
    log: Callable[[str], None],
) -> Path:
    """The cached data directory of ``n`` memories (built on the first call; a ``complete`` marker seals it)."""
    from memevo.sidecar.config import IndexConfig, Limits, SidecarConfig
    from memevo.sidecar.embedding import EmbedderConfig
    from memevo.sidecar.engine import Engine

    data = cache / f"memevo-n{n}-d{dimension}-s{seed}"
    marker = data / "complete"
    written = data / "written"
    if marker.exists():
        return data
    if data.exists() and not written.exists():
        log(f"removing the unfinished build {data}")
        shutil.rmtree(data)
    data.mkdir(parents=True, exist_ok=True)
    config = SidecarConfig(
        data_dir=data,
        embedder=EmbedderConfig(kind="none"),
        dimension=dimension,
        # Written at RocksDB speed; the graph is built in one pass at the reopen below.
        limits=Limits(max_fresh_tail=n + BUILD_BATCH),
        index=IndexConfig(save_interval_s=1e9),
    )
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    if written.exists():
        log(f"{data}: memories already written; building the graph")
    else:
        _write(Engine(config), n, dimension, entities, rng, log)
        written.write_text(str(n))
    log(f"building the HNSW graph of {n} vectors (one pass, {build_threads} threads, then saved)")
    graph_config = IndexConfig(
        save_interval_s=1e9,
        build_threads=build_threads,
        expansion_add=build_expansion_add or IndexConfig().expansion_add,
    )
    # A start serves at once and builds the graph in the background, and a stop saves it only within its budget
    # (issue 25): wait for the builder and save before closing, or the cache keeps an empty graph.
    engine = Engine(dataclass_replace(config, limits=Limits(), index=graph_config))
    try:
        while engine.index.tail_count or engine.index.rebuild.remaining:
            time.sleep(1.0)
        if not engine.index.save():
            raise RuntimeError("the built graph was not saved")
    finally:
        engine.close()
    saved = json.loads((data / INDEX_META_FILE).read_text())
    if int(saved["count"]) != n:
        raise RuntimeError(f"the cached graph holds {saved['count']} vectors, not {n}")
    marker.write_text(json.dumps({"n": n, "dimension": dimension, "seconds": round(time.perf_counter() - started)}))
    log(f"built {data} in {time.perf_counter() - started:.0f} s")
    return data


def _write(
    engine: Any, n: int, dimension: int, entities: int, rng: np.random.Generator, log: Callable[[str], None]
) -> None:
    started = time.perf_counter()
    try:
        engine.index.close(save=False)  # no background build while writing: the reopen builds in one pass
        done = 0
        while done < n:
            count = min(BUILD_BATCH, n - done)
            engine.remember(_items(done, count, dimension, entities, rng), rpc="batch")
            done += count
            if done % 100_000 < BUILD_BATCH:
                log(f"  wrote {done}/{n} ({time.perf_counter() - started:.0f} s)")
    finally:
        engine.close()


def dataclass_replace(config: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` (kept as a function so callers need not import dataclasses)."""
    import dataclasses

    return dataclasses.replace(config, **changes)


def _healthy(target: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def serve_args(data: Path, socket_path: Path, ready: Path, dimension: int, *extra: str) -> list[str]:
    """The ``memevo serve`` command line of the benchmarks (no embedder, client vectors)."""
    return [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data),
        "--listen", f"unix://{socket_path}", "--embedder", "none", "--dimension", str(dimension),
        "--ready-file", str(ready), *extra,
    ]  # fmt: skip


def time_to_ready(data: Path, dimension: int, log_path: Path) -> tuple[float, float]:
    """(seconds from spawn to SERVING, seconds from SIGTERM to exit) of one ``memevo serve``."""
    run_dir = Path(tempfile.mkdtemp(prefix="memevo-reopen-"))
    socket_path = run_dir / "memevo.sock"
    ready = run_dir / "ready.json"
    with log_path.open("ab") as output:
        started = time.perf_counter()
        process = subprocess.Popen(
            serve_args(data, socket_path, ready, dimension), stdout=output, stderr=subprocess.STDOUT
        )
        try:
            while not (ready.exists() and _healthy(f"unix://{socket_path}")):
                if process.poll() is not None or time.perf_counter() - started > STARTUP_TIMEOUT_S:
                    raise RuntimeError(f"memevo serve did not start; see {log_path}")
                time.sleep(0.02)
            ready_s = time.perf_counter() - started
            stopping = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=600)
            stop_s = time.perf_counter() - stopping
            if code != 0:
                raise RuntimeError(f"memevo serve exited with {code}; see {log_path}")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            shutil.rmtree(run_dir, ignore_errors=True)
    return ready_s, stop_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, required=True, help="directory keeping the built data directory")
    parser.add_argument("--n", type=int, default=1_000_000, help="memories in the data directory")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=5, help="timed restarts after a clean stop (after a warm-up)")
    parser.add_argument(
        "--scan-repeats", type=int, default=1, help="timed restarts without the start-up snapshot (as after a crash)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build-threads", type=int, default=2, help="usearch insert threads of the cache build")
    parser.add_argument(
        "--build-expansion-add", type=int, default=0, help="HNSW expansion_add of the cache build (0 = serving default)"
    )
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    args.cache.mkdir(parents=True, exist_ok=True)
    data = build_store(
        args.cache,
        args.n,
        dimension=args.dimension,
        seed=args.seed,
        build_threads=args.build_threads,
        build_expansion_add=args.build_expansion_add,
        log=log,
    )
    log_path = args.cache / "reopen-serve.log"
    size_bytes = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    log("warm-up start (not counted)")
    time_to_ready(data, args.dimension, log_path)
    rows = []
    for path, repeats in (("after a clean stop", args.repeats), ("without the snapshot", args.scan_repeats)):
        runs = []
        for repeat in range(repeats):
            if path == "without the snapshot":
                (data / SNAPSHOT_FILE).unlink(missing_ok=True)  # as after a crash: every record is parsed
            load = round(os.getloadavg()[0], 2)
            ready_s, stop_s = time_to_ready(data, args.dimension, log_path)
            runs.append({"ready_s": round(ready_s, 3), "stop_s": round(stop_s, 3), "load_average_1m": load})
            log(f"  {path}, repeat {repeat + 1}: ready in {ready_s:.2f} s, stopped in {stop_s:.2f} s (load {load})")
        if runs:
            rows.append(
                {
                    "start": path,
                    "ready_s_median": statistics.median(r["ready_s"] for r in runs),
                    "stop_s_median": statistics.median(r["stop_s"] for r in runs),
                    "runs": runs,
                }
            )
    print(f"{'memories':>10} {'on disk':>10}  {'start':<22} {'ready (median)':>15} {'stop (median)':>14} {'target':>7}")
    for row in rows:
        print(
            f"{args.n:>10} {size_bytes / 2**30:>6.2f} GiB  {row['start']:<22} {row['ready_s_median']:>13.2f} s "
            f"{row['stop_s_median']:>12.2f} s {TARGET_S:>5.0f} s"
        )
    if args.json is not None:
        result = {
            "n_memories": args.n,
            "dimension": args.dimension,
            "data_bytes": size_bytes,
            "ready_s_median": rows[0]["ready_s_median"] if rows else None,
            "target_s": TARGET_S,
            "starts": rows,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
