"""The pair judge: does a newer statement replace an older one, or do both hold?

Perception finds the candidates (statements of the same entity, or statements
that share words with a new one when no entity is known); the judge reads each
(older, newer) pair of texts and answers with the probability that the newer
REPLACES the older. The rest is BOTH_HOLD or UNRELATED (an addition, another
attribute, another subject), which settle the same way: nothing is touched.

The model is all-MiniLM-L6-v2 (the bundled embedder's weights) fine-tuned in
this repository as a cross-encoder over "[CLS] older [SEP] newer [SEP]"
(``scripts/train_judge.py``: the tuning half of the hand-written prose
scenarios, hand-written labelled pairs, SituatedQA train and the generated
world's tuning phrasing), exported to int8 ONNX and shipped as
``data/judge.onnx``: no download, no LLM. A pair costs a few milliseconds of
CPU, so perception runs it off the write path (see ``Perceiver.judge_pending``).
The model's vocabulary is English: CJK characters it lacks read as unknown, so
Chinese statements are judged poorly (RESULTS.md gives the figure).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

MODEL_PATH = Path(__file__).resolve().parent / "data" / "judge.onnx"
"""The shipped judge (``scripts/train_judge.py`` writes it)."""
MAX_TOKENS = 128
"""Tokens of a pair, both texts and the three markers; longer pairs lose words from the longer text."""
BATCH = 1
"""Pairs per model run. One: int8 dynamic quantisation scales activations over the whole run, padding included, so
in a batch a pair's probability moved with its company (0.28 alone, 0.54 beside longer pairs); alone it is the same
every time."""


class JudgeError(RuntimeError):
    """The judge's model could not be loaded or run."""


def tokenizer() -> tokenizers.Tokenizer:
    """The bundled embedder's tokenizer, truncating a pair to MAX_TOKENS."""
    data = importlib.resources.files("memevo.sidecar.embedding").joinpath("data", "all-MiniLM-L6-v2.tokenizer.json.gz")
    tokenizer = tokenizers.Tokenizer.from_str(gzip.decompress(data.read_bytes()).decode("utf-8"))
    tokenizer.enable_truncation(max_length=MAX_TOKENS, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def encode(
    tokenizer: tokenizers.Tokenizer, older: Sequence[str], newer: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, token types and the attention mask of pairs, padded to the longest (int64 each)."""
    encoded = tokenizer.encode_batch(list(zip(older, newer, strict=True)))
    longest = max(len(e.ids) for e in encoded)
    ids = np.zeros((len(encoded), longest), dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encoded):
        ids[row, : len(e.ids)] = e.ids
        types[row, : len(e.ids)] = e.type_ids
        mask[row, : len(e.ids)] = 1
    return ids, types, mask


class PairJudge:
    """The shipped cross-encoder: ``replaces(older, newer)`` gives P(REPLACES) for each pair. Thread-safe."""

    def __init__(self, path: Path = MODEL_PATH, *, threads: int = 1) -> None:
        import onnxruntime as ort  # ~0.1 s: only a sidecar that judges pays it

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session: Any = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Exception subclasses
            raise JudgeError(f"onnxruntime could not load the judge {path}: {exc}") from exc
        self._tokenizer = tokenizer()
        self.identity = "judge:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        """Names the model in the reasons of what it settled."""

    def replaces(self, older: Sequence[str], newer: Sequence[str]) -> list[float]:
        """P(REPLACES) of each (older[i], newer[i]) pair."""
        out: list[float] = []
        for start in range(0, len(older), BATCH):
            ids, types, mask = encode(self._tokenizer, older[start : start + BATCH], newer[start : start + BATCH])
            try:
                (logits,) = self._session.run(
                    ["logit"], {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
                )
            except Exception as exc:  # onnxruntime raises its own Exception subclasses
                raise JudgeError(f"onnxruntime failed on {len(ids)} pairs: {exc}") from exc
            out.extend((1.0 / (1.0 + np.exp(-np.clip(logits.astype(np.float64), -30.0, 30.0)))).tolist())
        return out


@functools.lru_cache(maxsize=1)
def shipped() -> PairJudge | None:
    """The packaged judge, loaded once; None when the package holds none."""
    return PairJudge() if MODEL_PATH.exists() else None
