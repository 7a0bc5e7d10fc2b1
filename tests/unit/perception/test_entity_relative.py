"""Likeness of two statements of one entity once what all its statements share is taken out, and restatements."""

from __future__ import annotations

import numpy as np
import pytest

from memevo.sidecar.perception.conflicts import (
    RELATIVE_DOUBT,
    RELATIVE_MIN_MEMORIES,
    RELATIVE_SURE,
    SIMILARITY_SURE,
    SURE,
    _entity_relative,
    _restates,
    _Slot,
    is_sure,
)
from memevo.sidecar.perception.slots import ENTITY_MARK, words
from memevo.v1 import memory_pb2

DIMENSION = 32


def _statements(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An entity's direction, six slots' directions and five wordings', orthonormal."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((DIMENSION, DIMENSION)))[0].T
    return basis[0], basis[1:7], basis[7:12]


def _say(entity: np.ndarray, slot: np.ndarray, wording: np.ndarray, *, alike: float = 0.8) -> np.ndarray:
    """A statement: mostly its entity, then what it says (its slot, worded one way)."""
    vector = 0.7 * entity + 0.71 * (alike * slot + np.sqrt(1.0 - alike**2) * wording)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_slot_stays_alike_and_other_slots_fall_apart(seed: int) -> None:
    entity, slots, wordings = _statements(seed)
    stored = np.stack([_say(entity, slots[0], wordings[0])] + [_say(entity, slots[k], wordings[2]) for k in (1, 2, 3)])
    new = _say(entity, slots[0], wordings[1])
    raw = stored @ new
    relative = _entity_relative(stored, new, np.arange(stored.shape[0]))
    # Raw cosine puts every statement of the entity near; taken relative to the entity, only its slot's is.
    assert raw.min() > 0.45
    assert raw[0] < SIMILARITY_SURE  # alone, the raw cosine would not retire the slot's older statement
    assert relative[0] >= RELATIVE_SURE
    assert (relative[1:] < RELATIVE_DOUBT).all()


def test_too_few_memories_or_statements_that_are_all_entity_give_no_evidence() -> None:
    entity, slots, wordings = _statements(4)
    stored = np.stack([_say(entity, slots[k], wordings[0]) for k in range(RELATIVE_MIN_MEMORIES - 1)])
    new = _say(entity, slots[0], wordings[1])
    assert (_entity_relative(stored, new, np.arange(stored.shape[0])) == -1.0).all()
    # Vectors near one direction with noise (what a client's coarse vectors may be): the residual is noise.
    rng = np.random.default_rng(5)
    noisy = entity + 0.05 * rng.standard_normal((8, DIMENSION))
    noisy = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    assert (_entity_relative(noisy[1:], noisy[0], np.arange(7)) == -1.0).all()
    assert _entity_relative(stored, new, np.arange(0)).size == 0


def _holder(text: str, value: str | None) -> _Slot:
    tokens = [ENTITY_MARK, *words(text)]
    return _Slot(memory_pb2.Memory(content=text), 0.8, "", tuple(words(value)) if value else None, tokens,
                 np.zeros(2, dtype=np.float32))  # fmt: skip


def test_a_statement_that_says_the_value_again_restates_it() -> None:
    said = [ENTITY_MARK, *words("double-checked today and it still holds: relocated to Melbourne (AEST)")]
    assert _restates(said, _holder("relocated to Melbourne (AEST).", None))
    assert _restates(said, _holder("moved.", "Melbourne AEST"))
    # The value's words must come in a row: "v1.0.0" is not said by "v1.0.2 ... 0".
    upgraded = [ENTITY_MARK, *words("production now runs v1.0.2 of it, 0 errors")]
    assert not _restates(upgraded, _holder("is on release v1.0.0 now.", "v1.0.0"))
    assert not _restates(upgraded, _holder("is on release v1.0.0 now.", None))
    assert not _restates(said, _holder("", None))


def test_an_inference_stored_as_sure_reads_back_as_sure() -> None:
    stored = memory_pb2.Memory(inferred=memory_pb2.InferredSlot(attribute="lead", confidence=SURE))
    round_trip = memory_pb2.Memory.FromString(stored.SerializeToString()).inferred.confidence
    assert round_trip < SURE  # float32 on the record
    assert is_sure(round_trip)
    assert not is_sure(float(np.nextafter(np.float32(SURE), np.float32(0))))
