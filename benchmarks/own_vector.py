"""Own-vector findability and recall@10 against exact search, old and new graph search settings side by side.

Usage (from the repository root)::

    python benchmarks/own_vector.py [--n 100000] [--kinds random,clustered] [--expansions 64,256]
        [--self-queries 2000] [--queries 300] [--repeats 3] [--cache DIR] [--json PATH]

Issue 41: a memory's own vector should find it at k=1..10. The graph is built
as the sidecar's builder builds it (``IndexConfig``: connectivity, expansion
on insert, scalar type, cosine metric, one thread, unit rows), once per kind
and size (``--cache`` keeps it for the next run); then every ``--expansions``
value searches the same graph, the way recall does: one query at a time,
asking for ``max(2k, expansion)`` neighbours with the graph's expansion set to
that value (usearch's beam is the larger of the two), so the expansion is the
floor recall searches with.

- self@k: a stored vector (a sample of ``--self-queries``) is among the first k;
- recall@10: the first ten of a fresh query from the same distribution against
  exact (NumPy) cosine search over every stored vector;
- p50 / p99: milliseconds per single-query search, medians over ``--repeats``
  passes; the settings take turns within each pass, so load falls on all alike.

Kinds: ``random`` is unit Gaussian rows (no structure: the hardest case for a
graph); ``clustered`` is 2,000 random centres plus Gaussian noise of the same
scale (rows about 0.7 from their centre). Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.machine import machine  # noqa: E402

DIMENSION = 384
CENTRES = 2_000
NOISE = 1.0
KS = (1, 3, 10)
BUILD_CHUNK = 65_536
EXACT_BLOCK = 100_000

FloatMatrix = npt.NDArray[np.float32]


def vectors(kind: str, n: int, seed: int, noise: float = NOISE) -> FloatMatrix:
    """``n`` unit rows of ``kind``; the same for the same seed (the cache keys on it)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(CENTRES, DIMENSION)).astype(np.float32)
    out = np.empty((n, DIMENSION), dtype=np.float32)
    for start in range(0, n, BUILD_CHUNK):
        rows = min(BUILD_CHUNK, n - start)
        block = rng.normal(size=(rows, DIMENSION)).astype(np.float32)
        if kind == "clustered":
            block = centres[rng.integers(0, CENTRES, rows)] + noise * block
        out[start : start + rows] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def build(data: FloatMatrix, cache: Path | None, name: str) -> Any:
    """The graph over ``data`` as the sidecar builds it, loaded from ``cache`` when it holds one."""
    from usearch.index import Index

    from memevo.sidecar.config import IndexConfig

    config = IndexConfig()
    index = Index(
        ndim=DIMENSION,
        metric="cos",
        dtype=config.dtype,
        connectivity=config.connectivity,
        expansion_add=config.expansion_add,
        expansion_search=config.expansion_search,
    )
    path = cache / f"{name}.usearch" if cache is not None else None
    if path is not None and path.exists():
        index.load(str(path))
        print(f"  {name}: loaded {len(index):,} from {path}", flush=True)
        return index
    started = time.perf_counter()
    for start in range(0, data.shape[0], BUILD_CHUNK):
        chunk = data[start : start + BUILD_CHUNK]
        # One thread, as the sidecar's builder (usearch's multi-threaded add can leave nodes unreachable).
        index.add(np.arange(start, start + chunk.shape[0], dtype=np.uint64), chunk, threads=config.build_threads)
        print(f"  {name}: {start + chunk.shape[0]:,} in {time.perf_counter() - started:.0f} s", flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        index.save(str(path))
    return index


def exact_top(data: FloatMatrix, queries: FloatMatrix, k: int) -> npt.NDArray[np.int64]:
    """The ``k`` most similar rows of ``data`` to each query, by brute force in blocks."""
    best_ids = np.zeros((queries.shape[0], 0), dtype=np.int64)
    best_sims = np.zeros((queries.shape[0], 0), dtype=np.float32)
    for start in range(0, data.shape[0], EXACT_BLOCK):
        sims = queries @ data[start : start + EXACT_BLOCK].T
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        best_ids = np.concatenate([best_ids, top + start], axis=1)
        best_sims = np.concatenate([best_sims, np.take_along_axis(sims, top, axis=1)], axis=1)
        keep = np.argpartition(-best_sims, k - 1, axis=1)[:, :k]
        best_ids = np.take_along_axis(best_ids, keep, axis=1)
        best_sims = np.take_along_axis(best_sims, keep, axis=1)
    return best_ids


def timed_search(index: Any, queries: FloatMatrix, count: int) -> tuple[list[npt.NDArray[np.int64]], list[float]]:
    """Each query searched alone (as recall does), its keys and milliseconds."""
    keys: list[npt.NDArray[np.int64]] = []
    times: list[float] = []
    for row in queries:
        started = time.perf_counter()
        found = index.search(row, count)
        times.append((time.perf_counter() - started) * 1e3)
        keys.append(np.asarray(found.keys, dtype=np.int64))
    return keys, times


def measure(kind: str, n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    data = vectors(kind, n, args.seed, args.noise)
    index = build(data, args.cache, _name(kind, n, args))
    rng = np.random.default_rng(args.seed + 1)
    sample = rng.choice(n, size=min(args.self_queries, n), replace=False)
    fresh = vectors(kind, args.queries, args.seed + 2, args.noise) if kind == "random" else _fresh_clustered(args)
    truth = exact_top(data, fresh, 10)
    expansions = [int(x) for x in args.expansions.split(",")]
    passes: dict[int, list[tuple[float, float]]] = {e: [] for e in expansions}
    found_self: dict[int, dict[int, float]] = {e: {} for e in expansions}
    recall10: dict[int, float] = {}
    for repeat in range(args.repeats):
        order = expansions if repeat % 2 == 0 else expansions[::-1]
        for expansion in order:
            index.expansion_search = expansion
            times: list[float] = []
            for k in KS:
                keys, spent = timed_search(index, data[sample], max(2 * k, expansion))
                times += spent
                found_self[expansion][k] = float(np.mean([s in row[:k] for s, row in zip(sample, keys, strict=True)]))
            keys, spent = timed_search(index, fresh, max(20, expansion))
            times += spent
            recall10[expansion] = float(
                np.mean([np.intersect1d(row[:10], t).size / 10 for row, t in zip(keys, truth, strict=True)])
            )
            passes[expansion].append((float(np.percentile(times, 50)), float(np.percentile(times, 99))))
    rows = []
    for expansion in expansions:
        rows.append(
            {
                "kind": kind,
                "n": n,
                "expansion_search": expansion,
                **{f"self_at_{k}": round(found_self[expansion][k], 5) for k in KS},
                "recall_at_10": round(recall10[expansion], 4),
                "p50_ms": round(statistics.median(p[0] for p in passes[expansion]), 4),
                "p99_ms": round(statistics.median(p[1] for p in passes[expansion]), 4),
                "memory_mib": round(index.memory_usage / 2**20),
            }
        )
        print(f"  {rows[-1]}", flush=True)
    return rows


def _name(kind: str, n: int, args: argparse.Namespace) -> str:
    """The cache's name for a graph."""
    return (
        f"{kind}-{n}-{args.seed}" if kind == "random" or args.noise == NOISE else f"{kind}-{n}-{args.seed}-{args.noise}"
    )


def _fresh_clustered(args: argparse.Namespace) -> FloatMatrix:
    """Fresh queries around the stored rows' centres (same centres: same seed's first draw)."""
    rng = np.random.default_rng(args.seed)
    centres = rng.normal(size=(CENTRES, DIMENSION)).astype(np.float32)
    other = np.random.default_rng(args.seed + 2)
    rows = centres[other.integers(0, CENTRES, args.queries)] + args.noise * other.normal(
        size=(args.queries, DIMENSION)
    ).astype(np.float32)
    return np.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", default="100000", help="sizes, comma-separated")
    parser.add_argument("--kinds", default="random,clustered")
    parser.add_argument("--expansions", default="64,256", help="search expansion floors; the first is the base")
    parser.add_argument("--self-queries", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=NOISE, help="clustered: noise per dimension, centres' scale 1")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for n in (int(float(x)) for x in args.n.split(",")):
        for kind in args.kinds.split(","):
            if args.build_only:
                build(vectors(kind, n, args.seed, args.noise), args.cache, _name(kind, n, args))
                continue
            rows += measure(kind, n, args)
    if args.build_only:
        return
    print("\n| kind | n | expansion | self@1 | self@3 | self@10 | recall@10 | p50 ms | × base | p99 ms | × base |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        base = next(r for r in rows if r["kind"] == row["kind"] and r["n"] == row["n"])
        print(
            f"| {row['kind']} | {row['n']:,} | {row['expansion_search']} | {row['self_at_1']:.4f} "
            f"| {row['self_at_3']:.4f} | {row['self_at_10']:.4f} | {row['recall_at_10']:.3f} "
            f"| {row['p50_ms']:.3f} | {row['p50_ms'] / base['p50_ms']:.2f} "
            f"| {row['p99_ms']:.3f} | {row['p99_ms'] / base['p99_ms']:.2f} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
