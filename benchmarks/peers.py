"""memevo beside what users would otherwise pick (chromadb, lancedb) on the same vectors: one table, one run.

Usage (from the repository root; the peers are the ``peers`` extra: ``pip install -e '.[peers]'``)::

    python benchmarks/peers.py [--n 100000] [--queries 300] [--repeats 3] [--json out/peers.json]

The same ``--n`` clustered unit vectors (``--dimension``, default 384), each
about one of ``--entities`` entities whose sizes fall off as 1/rank (a few
entities with thousands of memories, most with tens), go into each system:

- **memevo**: a real ``memevo serve`` (no embedder, client vectors) on a unix
  socket, written with ``RememberBatch`` (1,000 a call), queried with
  ``Recall`` (k 10; filtered: ``filter.entity``). Ingest is timed to the last
  acknowledgement and to an empty fresh tail (every vector in the graph).
- **chromadb**: ``PersistentClient`` in a temporary directory, cosine HNSW,
  the entity as metadata (``where={"entity": ...}``).
- **lancedb**: a local table, no vector index (LanceDB's own advice below
  ~100k rows: an exact scan), cosine distance, ``where(..., prefilter=True)``.

Each system runs in its own spawned process, which reads the vectors from a
shared ``.npy`` file in chunks and closes it after ingest, so its RSS (after
the queries) holds the system and not the input; for memevo the sidecar
process's RSS is reported. peak = the process's high-water mark.

Latency: ``--queries`` plain and as many filtered top-10 queries, timed on
the caller one by one, ``--repeats`` times; p50/p99 are medians over the
repeats. recall@10: the share of the exact top 10 (NumPy, cosine; filtered:
within the entity) among the 10 returned. memevo ranks by similarity times a
memory's value, not by cosine alone, so its recall@10 also counts ranking
differences, not only the index's misses.

Without chromadb or lancedb installed those rows are marked ``missing`` and
memevo still runs. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import machine as machine_info  # noqa: E402

PEERS = ("memevo", "chromadb", "lancedb")
K = 10
CLUSTERS = 256
INGEST_CHUNK = 1_000
STARTUP_TIMEOUT_S = 600.0
INDEX_TIMEOUT_S = 3_600.0
WARMUP_QUERIES = 20

Matrix = npt.NDArray[np.float32]
Search = Callable[[Matrix, str], list[int]]
"""(query vector, entity or "" for none) -> row numbers of the hits, best first."""


# ---- data -----------------------------------------------------------------------------------


def make_data(n: int, dimension: int, entities: int, seed: int) -> tuple[Matrix, npt.NDArray[np.int64]]:
    """``n`` clustered unit vectors and each one's entity number (sizes ~ 1/rank)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLUSTERS, dimension)).astype(np.float32)
    vectors = centres[rng.integers(0, CLUSTERS, n)] + 0.9 * rng.standard_normal((n, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    weights = 1.0 / (np.arange(entities) + 10.0)
    about = rng.choice(entities, size=n, p=weights / weights.sum()).astype(np.int64)
    return vectors, about


def entity_name(number: int) -> str:
    return f"entity-{number}"


def make_queries(
    vectors: Matrix, about: npt.NDArray[np.int64], count: int, seed: int
) -> tuple[Matrix, list[str], list[list[int]], list[list[int]]]:
    """Query vectors (noisy copies of stored ones), the entity each filtered query names (one of a stored row's),
    and the exact top ``K`` rows of each plain and filtered query."""
    rng = np.random.default_rng([seed, 1])
    rows = rng.integers(0, len(vectors), count)
    queries = vectors[rows] + 0.5 * rng.standard_normal((count, vectors.shape[1])).astype(np.float32) / np.sqrt(
        vectors.shape[1]
    )
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    entities = [entity_name(int(about[rng.integers(0, len(vectors))])) for _ in range(count)]
    plain_truth, filtered_truth = [], []
    for query, entity in zip(queries, entities, strict=True):
        scores = vectors @ query
        plain_truth.append([int(i) for i in np.argsort(-scores, kind="stable")[:K]])
        members = np.flatnonzero(about == int(entity.split("-")[1]))
        filtered_truth.append([int(i) for i in members[np.argsort(-scores[members], kind="stable")[:K]]])
    return queries, entities, plain_truth, filtered_truth


def chunks(path: Path, about: npt.NDArray[np.int64]) -> Iterator[tuple[int, Matrix, list[str]]]:
    """(first row, vectors, entity names) of the stored rows, ``INGEST_CHUNK`` at a time, read from ``path``."""
    vectors = np.load(path, mmap_mode="r")
    try:
        for start in range(0, len(vectors), INGEST_CHUNK):
            block = np.array(vectors[start : start + INGEST_CHUNK], dtype=np.float32)
            yield start, block, [entity_name(int(e)) for e in about[start : start + len(block)]]
    finally:
        mmap = getattr(vectors, "_mmap", None)
        del vectors
        if mmap is not None:
            mmap.close()  # its pages leave this process's RSS


def rss_kib(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(rest.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


# ---- the systems ----------------------------------------------------------------------------


class MemevoPeer:
    """A ``memevo serve`` process of its own, over its unix socket."""

    def __init__(self, scratch: Path, dimension: int) -> None:
        self.scratch = scratch
        self.dimension = dimension
        self.row_of: dict[int, int] = {}
        self._start(())

    def _start(self, extra: Sequence[str]) -> None:
        import grpc

        from memevo.v1 import memory_service_pb2_grpc

        ready = self.scratch / "ready.json"
        ready.unlink(missing_ok=True)
        self.socket_dir = Path(tempfile.mkdtemp(prefix="peers-"))  # a socket's path is limited to ~100 bytes
        socket_path = self.socket_dir / "memevo.sock"
        self.log = (self.scratch / "serve.log").open("ab")
        args = [
            sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(self.scratch / "data"),
            "--listen", f"unix://{socket_path}", *self.embedder_args(),
            "--max-fresh-tail", "1000000", "--ready-file", str(ready), *extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memevo serve did not start: {(self.scratch / 'serve.log').read_text()}")
            time.sleep(0.05)
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.stub = memory_service_pb2_grpc.MemoryServiceStub(self.channel)

    def embedder_args(self) -> list[str]:
        """The ``memevo serve`` arguments that choose the embedder: none (client vectors of ``dimension``)."""
        return ["--embedder", "none", "--dimension", str(self.dimension)]

    def restart(self, extra: Sequence[str]) -> None:
        """Serve the same data again with ``extra`` arguments to ``memevo serve`` (no new ingest)."""
        self.close()
        self._start(extra)

    def ingest(self, path: Path, about: npt.NDArray[np.int64]) -> dict[str, float]:
        from memevo.v1 import memory_pb2, memory_service_pb2

        began = time.perf_counter()
        for start, block, entities in chunks(path, about):
            memories = [
                memory_pb2.MemoryInput(
                    content=f"note {start + j} about {entity}",
                    vector=vector.astype("<f4").tobytes(),
                    entity=entity,
                    kind=memory_pb2.MEMORY_KIND_EPISODE,
                )
                for j, (vector, entity) in enumerate(zip(block, entities, strict=True))
            ]
            response = self.stub.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), timeout=600)
            for j, result in enumerate(response.results):
                self.row_of[result.memory.id] = start + j
        acknowledged = time.perf_counter() - began
        deadline = time.monotonic() + INDEX_TIMEOUT_S
        while self.stub.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the index builder did not empty the fresh tail")
            time.sleep(0.2)
        return {"ingest_s": acknowledged, "indexed_s": time.perf_counter() - began}

    def search(self, query: Matrix, entity: str) -> list[int]:
        from memevo.v1 import memory_service_pb2

        request = memory_service_pb2.RecallRequest(
            query_vector=query.astype("<f4").tobytes(), k=K, filter=memory_service_pb2.RecallFilter(entity=entity)
        )
        return [self.row_of[hit.memory.id] for hit in self.stub.Recall(request, timeout=60).memories]

    def rss(self) -> tuple[int, int]:
        return rss_kib(self.process.pid)

    def close(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=120)
        self.log.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


class ChromaPeer:
    """chromadb's embedded persistent client."""

    def __init__(self, scratch: Path, dimension: int) -> None:
        import chromadb

        self.client: Any = chromadb.PersistentClient(path=str(scratch / "chroma"))
        # Any: typed only where chromadb is installed, and the benchmark must check the same either way.
        self.collection: Any = self.client.create_collection("peers", metadata={"hnsw:space": "cosine"})
        self.batch = min(self.client.get_max_batch_size(), 5_000)

    def ingest(self, path: Path, about: npt.NDArray[np.int64]) -> dict[str, float]:
        began = time.perf_counter()
        for start, block, entities in chunks(path, about):
            self.collection.add(
                ids=[str(start + j) for j in range(len(block))],
                embeddings=block,
                metadatas=[{"entity": e} for e in entities],
            )
        elapsed = time.perf_counter() - began
        return {"ingest_s": elapsed, "indexed_s": elapsed}  # chromadb indexes as it adds

    def search(self, query: Matrix, entity: str) -> list[int]:
        result = self.collection.query(
            query_embeddings=[query], n_results=K, where={"entity": entity} if entity else None, include=[]
        )
        return [int(i) for i in result["ids"][0]]

    def rss(self) -> tuple[int, int]:
        return rss_kib()

    def close(self) -> None:
        pass


class LancePeer:
    """lancedb's local table, no vector index (an exact scan)."""

    def __init__(self, scratch: Path, dimension: int) -> None:
        import lancedb

        self.db = lancedb.connect(str(scratch / "lance"))
        self.dimension = dimension
        self.table: Any = None

    def ingest(self, path: Path, about: npt.NDArray[np.int64]) -> dict[str, float]:
        import pyarrow as pa

        began = time.perf_counter()
        for start, block, entities in chunks(path, about):
            vectors = pa.FixedSizeListArray.from_arrays(pa.array(block.ravel(), pa.float32()), self.dimension)
            batch = pa.table(
                {"id": pa.array(range(start, start + len(block)), pa.int64()), "vector": vectors, "entity": entities}
            )
            if self.table is None:
                self.table = self.db.create_table("peers", data=batch)
            else:
                self.table.add(batch)
        elapsed = time.perf_counter() - began
        return {"ingest_s": elapsed, "indexed_s": elapsed}

    def search(self, query: Matrix, entity: str) -> list[int]:
        builder = self.table.search(query).distance_type("cosine").limit(K).select(["id", "_distance"])
        if entity:
            builder = builder.where(f"entity = '{entity}'", prefilter=True)
        return [int(i) for i in builder.to_arrow()["id"].to_pylist()]

    def rss(self) -> tuple[int, int]:
        return rss_kib()

    def close(self) -> None:
        pass


SYSTEMS: dict[str, Callable[[Path, int], Any]] = {"memevo": MemevoPeer, "chromadb": ChromaPeer, "lancedb": LancePeer}
TRANSPORT = {"memevo": "gRPC, unix socket", "chromadb": "in-process", "lancedb": "in-process"}


def installed(name: str) -> bool:
    """Whether a peer's package can be imported (memevo always can)."""
    return name == "memevo" or importlib.util.find_spec(name) is not None


# ---- one system, in its own process ---------------------------------------------------------


def recall_at_k(got: Sequence[Sequence[int]], truth: Sequence[Sequence[int]]) -> float:
    """Mean share of each query's exact top K among its returned rows (a query with fewer true rows: of those)."""
    shares = [len(set(g) & set(t)) / len(t) for g, t in zip(got, truth, strict=True) if t]
    return float(np.mean(shares)) if shares else float("nan")


def percentile_ms(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q) * 1e3)


def measure(
    search: Search, queries: Matrix, entities: Sequence[str], repeats: int
) -> tuple[dict[str, float], list[list[int]]]:
    """p50/p99 (medians over repeats) of ``search`` over the queries, and the hits of the first repeat."""
    for query, entity in zip(queries[:WARMUP_QUERIES], entities[:WARMUP_QUERIES], strict=True):
        search(query, entity)
    p50s, p99s, hits = [], [], []
    for repeat in range(repeats):
        times = []
        for query, entity in zip(queries, entities, strict=True):
            began = time.perf_counter()
            found = search(query, entity)
            times.append(time.perf_counter() - began)
            if repeat == 0:
                hits.append(found)
        p50s.append(percentile_ms(times, 50))
        p99s.append(percentile_ms(times, 99))
    return {"p50_ms": statistics.median(p50s), "p99_ms": statistics.median(p99s)}, hits


def run_system(name: str, workdir: Path, repeats: int, also: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Ingest, query and measure one system in this process (spawned for it): its row, then for memevo one more row
    per entry of ``also`` (extra ``memevo serve`` arguments, the same data served again)."""
    about = np.load(workdir / "about.npy")
    queries = np.load(workdir / "queries.npy")
    meta = json.loads((workdir / "queries.json").read_text())
    scratch = Path(tempfile.mkdtemp(prefix=f"peers-{name}-", dir=workdir))
    system = SYSTEMS[name](scratch, int(queries.shape[1]))
    try:
        baseline_kib = system.rss()[0]
        row: dict[str, Any] = {"system": name, "transport": TRANSPORT[name]}
        row.update(system.ingest(workdir / "vectors.npy", about))
        row.update(_queried(system, queries, meta, repeats, baseline_kib))
        rows = [row]
        for extra in also if name == "memevo" else ():
            system.restart(extra.split())
            # The same data served again: no ingest.
            served = {"system": f"memevo ({extra})", "transport": TRANSPORT[name], "ingest_s": math.nan}
            served.update(indexed_s=math.nan)
            served.update(_queried(system, queries, meta, repeats, system.rss()[0]))
            rows.append(served)
        return rows
    finally:
        system.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _queried(system: Any, queries: Matrix, meta: dict[str, Any], repeats: int, baseline_kib: int) -> dict[str, Any]:
    """The query columns of a row: plain and filtered latency and recall@10, then RSS."""
    plain, plain_hits = measure(system.search, queries, [""] * len(queries), repeats)
    filtered, filtered_hits = measure(system.search, queries, meta["entities"], repeats)
    rss, peak = system.rss()
    return {
        "plain_p50_ms": plain["p50_ms"],
        "plain_p99_ms": plain["p99_ms"],
        "plain_recall_at_10": recall_at_k(plain_hits, meta["plain_truth"]),
        "filtered_p50_ms": filtered["p50_ms"],
        "filtered_p99_ms": filtered["p99_ms"],
        "filtered_recall_at_10": recall_at_k(filtered_hits, meta["filtered_truth"]),
        "rss_mib": rss / 1024,
        "peak_rss_mib": peak / 1024,
        "rss_at_start_mib": baseline_kib / 1024,
    }


def _child(name: str, workdir: str, repeats: int, also: Sequence[str], out: Any) -> None:
    try:
        out.put(run_system(name, Path(workdir), repeats, also))
    except BaseException as exc:
        out.put([{"system": name, "error": f"{type(exc).__name__}: {exc}"}])
        raise


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Every system's row on the same data, one process each, and the run's description."""
    load_at_start = machine_info.load_average()
    workdir = Path(tempfile.mkdtemp(prefix="memevo-peers-", dir=args.scratch))
    try:
        log(f"making {args.n:,} vectors ({args.dimension}-d) and {args.queries} queries with exact answers")
        vectors, about = make_data(args.n, args.dimension, args.entities, args.seed)
        queries, entities, plain_truth, filtered_truth = make_queries(vectors, about, args.queries, args.seed)
        np.save(workdir / "vectors.npy", vectors)
        np.save(workdir / "about.npy", about)
        np.save(workdir / "queries.npy", queries)
        meta = {"entities": entities, "plain_truth": plain_truth, "filtered_truth": filtered_truth}
        (workdir / "queries.json").write_text(json.dumps(meta))
        sizes = np.bincount(about, minlength=args.entities)
        queried = np.array([sizes[int(e.split("-")[1])] for e in entities])
        del vectors
        rows: list[dict[str, Any]] = []
        context = multiprocessing.get_context("spawn")
        for name in args.peers:
            if not installed(name):
                log(f"{name}: not installed (pip install -e '.[peers]'); row marked missing")
                rows.append({"system": name, "missing": True})
                continue
            log(f"{name}: ingest and queries in a process of its own")
            out = context.Queue()
            process = context.Process(target=_child, args=(name, str(workdir), args.repeats, args.memevo_also, out))
            process.start()
            measured = out.get()
            process.join()
            for row in measured:
                if "error" in row:
                    raise RuntimeError(f"{name} failed: {row['error']}")
                log(f"  {format_row(row)}")
                rows.append(row)
        return {
            "benchmark": "peers",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *args.argv]),
            "machine": machine_info.machine(
                (*machine_info.DEFAULT_PACKAGES, "chromadb", "lancedb", "pyarrow"), load_average_at_start=load_at_start
            ),
            "n": args.n,
            "dimension": args.dimension,
            "entities": args.entities,
            "queried_entity_size": {
                "median": float(np.median(queried)),
                "min": int(queried.min()),
                "max": int(queried.max()),
            },
            "queries": args.queries,
            "repeats": args.repeats,
            "k": K,
            "rows": rows,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---- output ---------------------------------------------------------------------------------

HEADER = (
    "| system | transport | ingest s | indexed s | plain p50 ms | plain p99 ms | plain recall@10 "
    "| filtered p50 ms | filtered p99 ms | filtered recall@10 | RSS MiB | peak MiB |"
)


def format_row(row: dict[str, Any]) -> str:
    if row.get("missing"):
        return f"| {row['system']} | not installed |" + " |" * 10
    return (
        f"| {row['system']} | {row['transport']} | {row['ingest_s']:.1f} | {row['indexed_s']:.1f} "
        f"| {row['plain_p50_ms']:.2f} | {row['plain_p99_ms']:.2f} | {row['plain_recall_at_10']:.3f} "
        f"| {row['filtered_p50_ms']:.2f} | {row['filtered_p99_ms']:.2f} | {row['filtered_recall_at_10']:.3f} "
        f"| {row['rss_mib']:.0f} | {row['peak_rss_mib']:.0f} |"
    )


def table(result: dict[str, Any]) -> str:
    lines = [HEADER, "|" + "---|" * 12]
    lines.extend(format_row(row) for row in result["rows"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="stored vectors")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--entities", type=int, default=1_000, help="entities the vectors are about")
    parser.add_argument("--queries", type=int, default=300, help="plain queries, and as many filtered ones")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the queries; medians reported")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    parser.add_argument(
        "--memevo-also",
        action="append",
        default=[],
        metavar="ARGS",
        help="after memevo's row, serve its data again with these extra 'memevo serve' arguments and measure "
        "it as one more row, e.g. --memevo-also='--entity-vectors-mib 0' (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the temporary data (default: /tmp)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}; pass some of {', '.join(PEERS)}")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = run(args, log)
    print(
        f"\n{args.n:,} vectors x {args.dimension}-d, top-{K}, {args.queries} queries each, medians of {args.repeats}\n"
    )
    print(table(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
