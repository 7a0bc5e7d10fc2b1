"""The pair judge: does a newer statement replace an older one, or do both hold?

Perception finds the candidates (statements of the same entity, or statements
that share words with a new one when no entity is known); the judge reads each
(older, newer) pair of texts and answers with the probability that the newer
REPLACES the older. The rest is BOTH_HOLD or UNRELATED (an addition, another
attribute, another subject), which settle the same way: nothing is touched.

The model is a cross-encoder (``embedding.cross_encoder``) fine-tuned in this
repository over "[CLS] older [SEP] newer [SEP]" (``scripts/train_judge.py``:
the tuning half of the hand-written prose scenarios, hand-written labelled
pairs, SituatedQA train and the generated world's tuning phrasing), exported to
int8 ONNX and shipped as ``data/judge.onnx``: no download, no LLM. A pair costs
a few milliseconds of CPU, so perception runs it off the write path (see
``Perceiver.judge_pending``). The model's vocabulary is English: CJK characters
it lacks read as unknown, so Chinese statements are judged poorly (RESULTS.md
gives the figure).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from ..embedding.cross_encoder import BATCH, MAX_TOKENS, CrossEncoder, encode, tokenizer
from ..embedding.cross_encoder import CrossEncoderError as JudgeError

__all__ = ["BATCH", "MAX_TOKENS", "MODEL_PATH", "JudgeError", "PairJudge", "encode", "shipped", "tokenizer"]

MODEL_PATH = Path(__file__).resolve().parent / "data" / "judge.onnx"
"""The shipped judge (``scripts/train_judge.py`` writes it)."""


class PairJudge(CrossEncoder):
    """The shipped judge: ``replaces(older, newer)`` gives P(REPLACES) for each pair. Thread-safe."""

    def __init__(self, path: Path = MODEL_PATH, *, threads: int = 1) -> None:
        super().__init__(path, threads=threads)
        self.identity = "judge:" + self.digest
        """Names the model in the reasons of what it settled."""

    def replaces(self, older: Sequence[str], newer: Sequence[str]) -> list[float]:
        """P(REPLACES) of each (older[i], newer[i]) pair."""
        return self.probabilities(older, newer)


@functools.lru_cache(maxsize=1)
def shipped() -> PairJudge | None:
    """The packaged judge, loaded once; None when the package holds none."""
    return PairJudge() if MODEL_PATH.exists() else None
