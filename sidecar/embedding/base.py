"""The embedder contract: the protocol, its configuration and its error.

An embedder turns texts into unit-length float32 vectors of a fixed
dimension. Its ``identity`` names the vector space (model, weights,
endpoint) and is recorded in the data directory, so a directory is never
searched with vectors from another space.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

import grpc
import numpy as np
import numpy.typing as npt

from ..errors import MemevoError

Vectors: TypeAlias = npt.NDArray[np.float32]
"""Rows of unit-length float32 vectors, shape ``(n, dimension)``, C-contiguous."""

KINDS = ("local", "openai", "none")
"""The values ``EmbedderConfig.kind`` accepts."""


class EmbedderError(MemevoError):
    """The embedder could not produce vectors: endpoint failure, bad response, missing model.

    ``retryable`` is true when the same call may succeed later (HTTP 429 or
    5xx, a timeout, a refused or dropped connection); the gRPC code is then
    UNAVAILABLE, otherwise INTERNAL (the server's embedder is misconfigured).
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, reason="EMBEDDER_UNAVAILABLE" if retryable else "EMBEDDER_FAILED")
        self.retryable = retryable
        self.code = grpc.StatusCode.UNAVAILABLE if retryable else grpc.StatusCode.INTERNAL


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors; safe to call from several threads at once."""

    @property
    def identity(self) -> str:
        """Stable name of the vector space, recorded in the data directory.

        E.g. ``local:all-MiniLM-L6-v2-onnx-int8:sha256=<hex>`` or
        ``openai:<url>:<model>:<dimension>``.
        """
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` in order.

        Returns float32, shape ``(len(texts), dimension)``, rows of L2 norm 1,
        C-contiguous; an empty sequence gives shape ``(0, dimension)``.
        Raises ``EmbedderError`` when the model or endpoint fails,
        ``TypeError`` when ``texts`` is a bare ``str`` or holds a non-string,
        ``ValueError`` when a text is not valid Unicode (a lone surrogate).
        """
        ...

    def close(self) -> None:
        """Release the model or connections; ``embed`` then raises ``EmbedderError``."""
        ...


@dataclass(frozen=True, kw_only=True)
class EmbedderConfig:
    """Which embedder turns text into vectors, and its limits.

    ``make_embedder`` checks the values and raises ``ValueError`` for bad ones.
    """

    kind: str = "local"
    """One of "local" (the bundled all-MiniLM-L6-v2, offline), "openai" (an OpenAI-compatible
    endpoint) or "none" (no embedder: clients always send vectors)."""
    openai_url: str = ""
    """Base URL of an OpenAI-compatible API, e.g. ``http://127.0.0.1:8080/v1``; we POST
    ``{openai_url}/embeddings``. Required for kind "openai"."""
    openai_model: str = ""
    """Model name sent in each request. Required for kind "openai"."""
    openai_api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key, read once at start; when it is
    unset or empty no Authorization header is sent."""
    openai_dimension: int = 0
    """Expected vector length; 0 = learn it from the first response. A response of another
    length raises ``EmbedderError``."""
    timeout_s: float = 30.0
    """Seconds one HTTP request may wait on a connect or a read (kind "openai")."""
    batch_size: int = 64
    """Most texts per HTTP request (kind "openai") or per model run (kind "local")."""
    max_tokens: int = 256
    """Tokens (including the two special ones) the local model reads of each text; the rest is
    ignored. 1 to 512."""
    query_batch_max: int = 32
    """Most recall query texts embedded in one run when recalls arrive together (a recall that finds
    the embedder idle runs at once; those that arrive meanwhile share the next run). 0 = each query
    embedded alone on its own call, concurrently."""
    query_cache_size: int = 1024
    """Recent query texts whose vectors are kept (LRU, exact text); 0 = none."""
    threads: int = 0
    """onnxruntime intra-op threads of one local model run; 0 = min(2, CPUs). The same vectors whatever it is."""


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; ``TypeError`` for a bare ``str`` or a non-string item."""
    if isinstance(texts, (str, bytes)):
        # A str is itself a Sequence[str]: embedding it would embed each character.
        raise TypeError("embed() takes a sequence of strings, not a single string: pass [text]")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"embed() texts[{i}] is {type(text).__name__}, expected str")
    return out


def not_unicode_error(texts: Sequence[str]) -> ValueError:
    """The ``ValueError`` for texts that cannot be encoded as UTF-8 (lone surrogates)."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return ValueError(f"embed() texts[{i}] is not valid Unicode: {exc.reason} at {exc.start}")
    return ValueError("embed() texts could not be encoded as UTF-8")


def l2_normalise_rows(rows: npt.NDArray[np.floating]) -> Vectors:
    """Each row divided by its L2 norm, as C-contiguous float32; zero rows stay zero."""
    rows32 = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows32, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    return np.ascontiguousarray(rows32 / norms, dtype=np.float32)
