"""The reranker: of the few best candidates of a text Recall, which statements answer the question?

The candidates come from sentence vectors and words, each text embedded alone; a short statement about the asked
entity's *other* attribute often lies nearer the question than a long one that answers it ("Who is Elena employed
by?" → "Elena has a border collie" above "Elena handed in her notice at Brightline and started at Kinetiq").
A cross-encoder (``embedding.cross_encoder``) fine-tuned in this repository over "[CLS] question [SEP] statement
[SEP]" (``scripts/train_reranker.py``) reads both together and gives P(the statement answers the question); Recall
orders its top RERANK_DEPTH by it (``memevo serve --rerank local``). Shipped as ``data/reranker.onnx``; no download.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from ..embedding.cross_encoder import CrossEncoder

MODEL_PATH = Path(__file__).resolve().parent / "data" / "reranker.onnx"
"""The shipped reranker (``scripts/train_reranker.py`` writes it)."""


class Reranker(CrossEncoder):
    """The shipped reranker: ``relevance(questions, statements)`` gives P(answers) of each pair. Thread-safe."""

    def __init__(self, path: Path = MODEL_PATH, *, threads: int = 1) -> None:
        super().__init__(path, threads=threads)
        self.identity = "reranker:" + self.digest

    def relevance(self, questions: Sequence[str], statements: Sequence[str]) -> list[float]:
        """P(statement[i] answers questions[i]) of each pair."""
        return self.probabilities(questions, statements)


@functools.lru_cache(maxsize=1)
def shipped() -> Reranker | None:
    """The packaged reranker, loaded once; None when the package holds none."""
    return Reranker() if MODEL_PATH.exists() else None
