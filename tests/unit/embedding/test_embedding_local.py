"""The bundled local embedder (all-MiniLM-L6-v2 int8 on onnxruntime) and make_embedder's local side."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memevo.sidecar.embedding import (
    Embedder,
    EmbedderConfig,
    EmbedderError,
    LocalEmbedder,
    make_embedder,
)
from memevo.sidecar.embedding.local import MODEL_SHA256

# Cosine similarities of sentence-transformers' fp32 all-MiniLM-L6-v2, as
# printed in its documentation (sbert.net, "Computing Embeddings" and
# "Semantic Textual Similarity"). The int8 model is within 0.004 of them;
# over all pairs of 1,000 LoCoMo turns it stayed within 0.018 of fp32.
REFERENCE_PAIRS = [
    ("The weather is lovely today.", "It's so sunny outside!", 0.6660),
    ("The weather is lovely today.", "He drove to the stadium.", 0.1046),
    ("It's so sunny outside!", "He drove to the stadium.", 0.1411),
    ("The new movie is awesome", "The dog plays in the garden", 0.0543),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
    ("The new movie is awesome", "A woman watches TV", -0.0502),
    ("The cat sits outside", "The dog plays in the garden", 0.2838),
    ("The cat sits outside", "The new movie is so great", -0.0029),
    ("The cat sits outside", "A woman watches TV", 0.1310),
    ("A man is playing guitar", "The dog plays in the garden", 0.2277),
    ("A man is playing guitar", "The new movie is so great", -0.0136),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
]
REFERENCE_TOLERANCE = 0.02

SENTENCES = [
    "The cat sits on the mat",
    "A cat is sitting on a mat",
    "Stock markets fell sharply today",
    "Caroline went to the LGBTQ support group yesterday and said it was really powerful.",
    "ok",
    "",
    "Melanie painted a lake sunrise last year; she loves painting landscapes with her kids.",
]


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    e = LocalEmbedder()
    e.load()
    yield e
    e.close()


def test_make_embedder_default_is_local_and_cheap() -> None:
    e = make_embedder(EmbedderConfig())
    assert isinstance(e, LocalEmbedder)
    assert isinstance(e, Embedder)
    # Identity and dimension are known without loading the model.
    assert e.identity == f"local:all-MiniLM-L6-v2-onnx-int8:sha256={MODEL_SHA256}"
    assert e.dimension == 384
    assert e.max_tokens == 256


def test_make_embedder_none_gives_none() -> None:
    assert make_embedder(EmbedderConfig(kind="none")) is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (EmbedderConfig(kind="sbert"), "kind"),
        (EmbedderConfig(kind="Local"), "kind"),
        (EmbedderConfig(max_tokens=0), "max_tokens"),
        (EmbedderConfig(max_tokens=513), "max_tokens"),
        (EmbedderConfig(batch_size=0), "batch_size"),
        (EmbedderConfig(threads=-1), "threads"),
    ],
)
def test_make_embedder_rejects_bad_config(config: EmbedderConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_embedder(config)


def test_one_thread_gives_the_same_vectors(embedder: LocalEmbedder) -> None:
    one = make_embedder(EmbedderConfig(threads=1))
    assert isinstance(one, LocalEmbedder)
    texts = ["Maria left Google last week; she has joined Stripe.", "短文本", "a " * 300]
    try:
        assert np.abs(one.embed(texts) - embedder.embed(texts)).max() < 1e-6
    finally:
        one.close()


def test_shape_dtype_norms(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    assert vectors.flags["C_CONTIGUOUS"]
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input(embedder: LocalEmbedder) -> None:
    empties: list[Sequence[str]] = [[], ()]
    for empty in empties:
        vectors = embedder.embed(empty)
        assert vectors.shape == (0, 384)
        assert vectors.dtype == np.float32


def test_bare_string_and_non_strings_are_type_errors(embedder: LocalEmbedder) -> None:
    with pytest.raises(TypeError, match=r"\[text\]"):
        embedder.embed("The cat sits on the mat")
    with pytest.raises(TypeError, match="texts\\[1\\]"):
        embedder.embed(["fine", 3])  # type: ignore[list-item]


def test_lone_surrogate_is_a_value_error(embedder: LocalEmbedder) -> None:
    with pytest.raises(ValueError, match=r"texts\[1\] is not valid Unicode"):
        embedder.embed(["fine", "broken \ud800 text"])


def test_deterministic(embedder: LocalEmbedder) -> None:
    first = embedder.embed(SENTENCES)
    second = embedder.embed(SENTENCES)
    np.testing.assert_array_equal(first, second)
    # A fresh embedder (new session) gives the same vectors.
    other = LocalEmbedder()
    try:
        np.testing.assert_allclose(other.embed(SENTENCES), first, atol=1e-6)
    finally:
        other.close()


def test_vector_does_not_depend_on_batch(embedder: LocalEmbedder) -> None:
    # Long texts among short ones: the embedder splits them into several
    # padded runs (by length, and to bound attention memory).
    texts = SENTENCES + [f"memory {i}: " + "the agent noted a detail. " * (20 + 15 * i) for i in range(4)]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([s]) for s in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    # Batches of one text each must agree with padded batches, in any order.
    tiny_batches = LocalEmbedder(batch_size=1)
    try:
        reversed_order = tiny_batches.embed(texts[::-1])[::-1]
    finally:
        tiny_batches.close()
    np.testing.assert_allclose(reversed_order, together, atol=1e-5)


def test_paraphrase_scores_higher_than_unrelated(embedder: LocalEmbedder) -> None:
    cat, cat_paraphrase, stocks = embedder.embed(
        ["The cat sits on the mat", "A cat is sitting on a mat", "Stock markets fell sharply today"]
    )
    assert float(cat @ cat_paraphrase) > 0.8
    assert float(cat @ stocks) < 0.3
    assert float(cat_paraphrase @ stocks) < 0.3


def test_agrees_with_published_fp32_similarities(embedder: LocalEmbedder) -> None:
    left = embedder.embed([a for a, _, _ in REFERENCE_PAIRS])
    right = embedder.embed([b for _, b, _ in REFERENCE_PAIRS])
    got = np.einsum("ij,ij->i", left, right)
    want = np.array([score for _, _, score in REFERENCE_PAIRS])
    np.testing.assert_allclose(got, want, atol=REFERENCE_TOLERANCE)


def test_long_input_is_truncated_to_max_tokens(embedder: LocalEmbedder) -> None:
    # "hello world " is two tokens; 256 tokens = [CLS] + 254 + [SEP].
    huge = "hello world " * 100_000
    at_limit = ("hello world " * 127).strip()  # exactly 254 tokens
    vectors = embedder.embed([huge, at_limit])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)
    # The tokenizer.json we ship pins truncation at 128; ours must not apply.
    at_128 = embedder.embed([("hello world " * 63).strip()])[0]
    assert not np.allclose(vectors[1], at_128, atol=1e-4)


def test_max_tokens_is_honoured() -> None:
    short = LocalEmbedder(max_tokens=8)
    try:
        # 8 tokens = [CLS] + six words + [SEP]
        vectors = short.embed(["one two three four five six seven eight nine", "one two three four five six"])
    finally:
        short.close()
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)


def test_non_ascii_input(embedder: LocalEmbedder) -> None:
    texts = ["猫坐在垫子上", "今天股市大幅下跌", "Ça va très bien, merci ! 🙂", "Привет, как дела?"]
    vectors = embedder.embed(texts)
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Chinese characters are in the vocabulary: the two sentences are not both [UNK].
    assert float(vectors[0] @ vectors[1]) < 0.95


def test_concurrent_calls_match_serial(embedder: LocalEmbedder) -> None:
    batches = [SENTENCES[i:] + SENTENCES[:i] for i in range(len(SENTENCES))]
    expected = [embedder.embed(batch) for batch in batches]
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(worker: int) -> None:
        try:
            start.wait()
            for round_ in range(5):
                index = (worker + round_) % len(batches)
                results[(worker, round_)] = embedder.embed(batches[index])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(results) == 40
    for (worker, round_), got in results.items():
        np.testing.assert_allclose(got, expected[(worker + round_) % len(batches)], atol=1e-5)


def test_concurrent_first_use_loads_once() -> None:
    e = LocalEmbedder()
    out: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: out.append(e.embed(["same text"]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    e.close()
    assert len(out) == 4
    for vectors in out[1:]:
        np.testing.assert_array_equal(vectors, out[0])


def test_closed_embedder_raises() -> None:
    e = LocalEmbedder()
    e.embed(["warm"])
    e.close()
    with pytest.raises(EmbedderError, match="closed"):
        e.embed(["after close"])
    with pytest.raises(EmbedderError, match="closed"):
        e.embed([])


def test_corrupt_model_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx model")
    e = LocalEmbedder(model_path=bad)
    with pytest.raises(EmbedderError, match="sha256") as info:
        e.embed(["x"])
    assert info.value.retryable is False
    # The check failed, so nothing was cached: a second call checks again.
    with pytest.raises(EmbedderError, match="sha256"):
        e.load()


def test_missing_model_file_is_reported(tmp_path: Path) -> None:
    e = LocalEmbedder(model_path=tmp_path / "absent.onnx")
    with pytest.raises(EmbedderError, match="missing"):
        e.load()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 600}, "max_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"threads": 0}, "threads"),
    ],
)
def test_constructor_rejects_bad_numbers(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalEmbedder(**kwargs)
