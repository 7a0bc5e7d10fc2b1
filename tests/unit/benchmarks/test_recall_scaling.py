"""The recall-scaling benchmark's floor server and its summary."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import rocksdict
from usearch.index import Index

from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

scaling: Any = importlib.import_module("benchmarks.recall_scaling")


def _cell(calls_per_s: float, cpu_ms: float = 1.0) -> dict[str, float]:
    return {"calls_per_s": calls_per_s, "p50_ms": 2.0, "p99_ms": 9.0, "server_cpu_ms_per_call": cpu_ms}


def test_summary_gives_medians_and_the_ratio_of_each_repeat() -> None:
    runs = {
        ("memevo", 1): [_cell(100), _cell(200), _cell(150)],
        ("memevo", 8): [_cell(130), _cell(220), _cell(300)],
        ("floor", 1): [_cell(100), _cell(100), _cell(100)],
        ("floor", 8): [_cell(170), _cell(150), _cell(160)],
    }
    rows = {(r["server"], r["callers"]): r for r in scaling.summarise(runs)}
    assert rows[("memevo", 1)]["calls_per_s"] == 150
    assert "ratio_median" not in rows[("memevo", 1)]
    # Ratios pair each repeat's 8-caller cell with the same repeat's 1-caller cell, not medians with medians.
    assert rows[("memevo", 8)]["ratio_runs"] == [1.3, 1.1, 2.0]
    assert rows[("memevo", 8)]["ratio_median"] == 1.3
    assert rows[("floor", 8)]["ratio_median"] == 1.6


def _tiny_store(root: Path, vectors: np.ndarray) -> None:
    """The layout the floor reads: a saved usearch graph and records keyed by 8-byte big-endian id."""
    index = Index(ndim=vectors.shape[1], metric="cos", dtype="f16")
    index.add(np.arange(vectors.shape[0], dtype=np.uint64), vectors)
    index.save(str(root / "index.usearch"))
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    families = {name: rocksdict.Options(raw_mode=True) for name in ("memories", "vectors")}
    db = rocksdict.Rdict(str(root / "rocksdb"), options, column_families=families)
    memories = db.get_column_family("memories")
    for i in range(vectors.shape[0]):
        memories[i.to_bytes(8, "big")] = memory_pb2.Memory(id=i, content=f"memory {i}").SerializeToString()
    db.close()


def test_the_floor_server_returns_the_nearest_records(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((64, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    source = tmp_path / "store"
    source.mkdir()
    _tiny_store(source, vectors)
    query = vectors[5] + 0.1 * vectors[9]
    query /= np.linalg.norm(query)
    expected = np.argsort(-(vectors @ query))[:3]
    with scaling.floor_served(source, tmp_path) as floor, grpc.insecure_channel(floor["unix"]) as channel:
        stub = memory_service_pb2_grpc.MemoryServiceStub(channel)
        response = stub.Recall(
            memory_service_pb2.RecallRequest(query_vector=query.astype("<f4").tobytes(), k=3), timeout=30
        )
    assert [m.memory.id for m in response.memories] == expected.tolist()
    assert [m.memory.content for m in response.memories] == [f"memory {i}" for i in expected]
    np.testing.assert_allclose([m.similarity for m in response.memories], vectors[expected] @ query, atol=2e-3)
