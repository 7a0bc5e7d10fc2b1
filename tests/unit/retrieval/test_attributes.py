"""Attribute names as vectors: phrasing, caching, failures, and the ranking evidence they give (real engine)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.domain import NewMemory, RecallQuery
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.errors import Unavailable
from memevo.sidecar.retrieval.attributes import AttributeMeanings, attribute_phrase
from memevo.sidecar.retrieval.recall import ATTRIBUTE_WEIGHT, Recaller
from memevo.v1 import memory_pb2


@pytest.mark.parametrize(
    ("attribute", "phrase"),
    [
        ("working_hours", "working hours"),
        ("rateLimit", "rate limit"),
        ("HTTPPort", "http port"),
        ("user.contact", "user contact"),
        ("on-call", "on call"),
        ("v2_endpoint", "v2 endpoint"),
        ("饮食", "饮食"),
        (" _ ", ""),
    ],
)
def test_an_attribute_name_reads_as_words(attribute: str, phrase: str) -> None:
    assert attribute_phrase(attribute) == phrase


class _Embedder:
    """Deterministic vectors per phrase; counts calls; can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        if self.fail:
            raise Unavailable("embedder down")
        rows = [np.random.default_rng(sum(map(ord, t))).normal(size=4) for t in texts]
        return np.asarray(rows, dtype=np.float32) * 3.0  # not unit: the cache normalises


def _unit(text: str) -> npt.NDArray[np.float32]:
    vector = np.random.default_rng(sum(map(ord, text))).normal(size=4).astype(np.float32)
    return vector / np.linalg.norm(vector)


def test_similarities_are_cosines_and_each_name_is_embedded_once() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed)
    query = _unit("diet") * 2.0 + _unit("location") * 0.5
    expected = [
        float(_unit("diet") @ (query / np.linalg.norm(query))),
        float(_unit("location") @ (query / np.linalg.norm(query))),
    ]
    first = meanings.similarities(["diet", "location", "", "diet"], query)
    assert first[[0, 1, 3]] == pytest.approx([expected[0], expected[1], expected[0]], rel=1e-5)
    assert np.isnan(first[2])
    meanings.similarities(["location", "diet"], query)
    assert embed.calls == [["diet", "location"]]


def test_a_failed_embedding_is_no_evidence_and_is_tried_again() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed)
    embed.fail = True
    assert np.isnan(meanings.similarities(["diet"], _unit("diet"))).all()
    embed.fail = False
    assert meanings.similarities(["diet"], _unit("diet"))[0] == pytest.approx(1.0, rel=1e-5)
    assert len(embed.calls) == 2


def test_the_cache_keeps_the_most_recently_used_names() -> None:
    embed = _Embedder()
    meanings = AttributeMeanings(embed, capacity=2)
    query = _unit("a")
    meanings.similarities(["a", "b"], query)
    meanings.similarities(["a"], query)  # a is now the most recent
    meanings.similarities(["c"], query)  # evicts b
    meanings.similarities(["a", "c"], query)
    assert embed.calls == [["a", "b"], ["c"]]
    meanings.similarities(["b"], query)
    assert embed.calls[-1] == ["b"]


def test_a_zero_query_vector_gives_no_evidence() -> None:
    meanings = AttributeMeanings(_Embedder())
    assert np.isnan(meanings.similarities(["diet"], np.zeros(4, dtype=np.float32))).all()


@pytest.fixture(scope="module")
def text_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("attributes")
    engine = Engine(SidecarConfig(data_dir=path, embedder=EmbedderConfig(kind="local")))
    yield engine
    engine.close()


def test_the_attribute_a_question_paraphrases_decides_between_two_facts_alike(text_engine: Engine) -> None:
    """Same vector, same words but the value: only the meaning of the attribute's name tells them apart."""
    vector = np.zeros(text_engine.dimension, dtype=np.float32)
    vector[0] = 1.0
    location, diet = (
        w.memory.id
        for w in text_engine.remember(
            [
                NewMemory(
                    content=f"Zane Cohen said: {value}.",
                    vector=vector,
                    kind=memory_pb2.MEMORY_KIND_FACT,
                    entity="user:zane-cohen",
                    fact_attribute=attribute,
                    fact_value=value,
                )
                for attribute, value in (("location", "Lisbon"), ("diet", "halal"))
            ]
        )
    )
    question = "What should I order for Zane at the team lunch?"
    query = RecallQuery(vector=text_engine.embed([question])[0], text=question, k=2)
    hits = Recaller(text_engine).recall(query)
    assert [h.memory.id for h in hits] == [diet, location]
    meanings = AttributeMeanings(text_engine.embed).similarities(["diet", "location"], query.vector)
    assert meanings[0] > meanings[1] > 0
    gap = hits[0].score - hits[1].score
    assert gap > 0.5 * ATTRIBUTE_WEIGHT * (meanings[0] - meanings[1])
