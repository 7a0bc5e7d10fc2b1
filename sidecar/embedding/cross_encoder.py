"""A cross-encoder shipped as int8 ONNX: two texts read together, one probability out.

The pair judge (``perception.judge``: does a newer statement replace an older one?) and the reranker
(``retrieval.rerank``: does a statement answer a question?) are both all-MiniLM-L6-v2 — the bundled embedder's
weights — fine-tuned in this repository as "[CLS] first [SEP] second [SEP]", mean-pooled, one logit
(``scripts/train_judge.py``, ``scripts/train_reranker.py``). They share this runtime: the bundled tokenizer, one
onnxruntime session per model, no download.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

MAX_TOKENS = 128
"""Tokens of a pair, both texts and the three markers; longer pairs lose words from the longer text."""
BATCH = 1
"""Pairs per model run. One: int8 dynamic quantisation scales activations over the whole run, padding included, so
in a batch a pair's probability moved with its company (0.28 alone, 0.54 beside longer pairs); alone it is the same
every time."""


class CrossEncoderError(RuntimeError):
    """A cross-encoder's model could not be loaded or run."""


def tokenizer() -> tokenizers.Tokenizer:
    """The bundled embedder's tokenizer, truncating a pair to MAX_TOKENS."""
    data = importlib.resources.files("memevo.sidecar.embedding").joinpath("data", "all-MiniLM-L6-v2.tokenizer.json.gz")
    tokenizer = tokenizers.Tokenizer.from_str(gzip.decompress(data.read_bytes()).decode("utf-8"))
    tokenizer.enable_truncation(max_length=MAX_TOKENS, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def encode(
    tokenizer: tokenizers.Tokenizer, first: Sequence[str], second: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, token types and the attention mask of pairs, padded to the longest (int64 each)."""
    encoded = tokenizer.encode_batch(list(zip(first, second, strict=True)))
    longest = max(len(e.ids) for e in encoded)
    ids = np.zeros((len(encoded), longest), dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encoded):
        ids[row, : len(e.ids)] = e.ids
        types[row, : len(e.ids)] = e.type_ids
        mask[row, : len(e.ids)] = 1
    return ids, types, mask


class CrossEncoder:
    """One shipped model: ``probabilities(first, second)`` gives P(yes) of each pair. Thread-safe."""

    def __init__(self, path: Path, *, threads: int = 1) -> None:
        import onnxruntime as ort  # ~0.1 s: only a sidecar that uses a cross-encoder pays it

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session: Any = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Exception subclasses
            raise CrossEncoderError(f"onnxruntime could not load {path}: {exc}") from exc
        self._tokenizer = tokenizer()
        self.digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        """Names the model's bytes (in reasons and metrics)."""

    def probabilities(self, first: Sequence[str], second: Sequence[str]) -> list[float]:
        """P(yes) of each (first[i], second[i]) pair."""
        out: list[float] = []
        for start in range(0, len(first), BATCH):
            ids, types, mask = encode(self._tokenizer, first[start : start + BATCH], second[start : start + BATCH])
            try:
                (logits,) = self._session.run(
                    ["logit"], {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
                )
            except Exception as exc:  # onnxruntime raises its own Exception subclasses
                raise CrossEncoderError(f"onnxruntime failed on {len(ids)} pairs: {exc}") from exc
            out.extend((1.0 / (1.0 + np.exp(-np.clip(logits.astype(np.float64), -30.0, 30.0)))).tolist())
        return out
