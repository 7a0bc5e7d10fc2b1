"""What a start hands to the second look: the stored statements perception would keep for one, newest first.

The second look's list lives in memory; a start rebuilds it from the newest ``SECOND_LOOK_SEEDED`` statements. Keyed
facts and remarks are never read again, so they must not take those places: a store whose newest memories are mostly
keyed facts and episodes would otherwise hand over none of its unread statements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar import engine as engine_module
from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.v1 import memory_pb2

DIMENSION = 8


def _open(data_dir: Path) -> Engine:
    return Engine(SidecarConfig(data_dir=data_dir, embedder=EmbedderConfig(kind="none"), dimension=DIMENSION))


def _vector(axis: int) -> npt.NDArray[np.float32]:
    vector = np.full(DIMENSION, 0.1, dtype=np.float32)
    vector[axis % DIMENSION] = 1.0
    return vector


def _tracked(engine: Engine) -> set[int]:
    return {memory_id for unread in engine.perceiver._unread.values() for memory_id in unread}


def test_a_start_hands_over_unread_statements_not_the_keyed_facts_and_remarks_written_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "SECOND_LOOK_SEEDED", 2)
    engine = _open(tmp_path)
    try:
        unread = [
            w.memory.id
            for w in engine.remember(
                [
                    NewMemory(
                        content=f"{name.title()} is based in {city} now.",
                        vector=_vector(axis),
                        kind=memory_pb2.MEMORY_KIND_FACT,
                        entity=f"user:{name}",
                    )
                    for name, city, axis in (("zofia", "Taipei", 1), ("ines", "Quito", 2))
                ]
            )
        ]
        later = [
            NewMemory(
                content=f"User {number} uses editor number {number}.",
                vector=_vector(3 + number),
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity=f"user:u{number}",
                fact_attribute="editor",
                fact_value=f"editor {number}",
            )
            for number in range(4)
        ] + [
            NewMemory(
                content=f"Chatted with user {number} about the offsite.",
                vector=_vector(5 + number),
                kind=memory_pb2.MEMORY_KIND_EPISODE,
                entity=f"user:u{number}",
            )
            for number in range(4)
        ]
        engine.remember(later)
        records = {m.id: m for m in engine.get(unread)[0]}
        assert all(not r.fact.attribute and not r.inferred.attribute for r in records.values())
    finally:
        engine.close()
    engine = _open(tmp_path)
    try:
        assert _tracked(engine) == set()  # a start keeps nothing until its first sweep hands the statements over
        engine._seed_second_look()
        assert _tracked(engine) == set(unread)
    finally:
        engine.close()
