"""Pluggable text embedders: the bundled local model or an OpenAI-compatible endpoint.

``make_embedder(EmbedderConfig(...))`` builds the configured one (or None for
kind "none", when clients always send their own vectors). Every embedder
returns unit-length float32 rows and names its vector space in ``identity``.
"""

from __future__ import annotations

import math
import os

from .base import KINDS, Embedder, EmbedderConfig, EmbedderError, Vectors
from .local import MAX_POSITIONS, LocalEmbedder
from .openai_compat import OpenAICompatEmbedder, check_base_url

__all__ = [
    "Embedder",
    "EmbedderConfig",
    "EmbedderError",
    "LocalEmbedder",
    "OpenAICompatEmbedder",
    "Vectors",
    "make_embedder",
]


def make_embedder(config: EmbedderConfig) -> Embedder | None:
    """The embedder ``config`` describes, or None for kind "none".

    Cheap: nothing is loaded or requested until the first use. Raises
    ``ValueError`` naming the field and what to pass when ``config`` is bad.
    For kind "openai" the API key is read now from the environment variable
    named by ``openai_api_key_env``.
    """
    if config.kind not in KINDS:
        raise ValueError(f"embedder kind is {config.kind!r}; pass one of {', '.join(map(repr, KINDS))}")
    if config.batch_size < 1:
        raise ValueError(f"embedder batch_size is {config.batch_size}; pass 1 or more")
    if config.query_batch_max < 0:
        raise ValueError(f"embedder query_batch_max is {config.query_batch_max}; pass 0 (each query alone) or more")
    if config.query_cache_size < 0:
        raise ValueError(f"embedder query_cache_size is {config.query_cache_size}; pass 0 (no cache) or more")
    if config.threads < 0:
        raise ValueError(f"embedder threads is {config.threads}; pass 0 (min(2, CPUs)) or more")
    if config.kind == "none":
        return None
    if config.kind == "local":
        if not 1 <= config.max_tokens <= MAX_POSITIONS:
            raise ValueError(f"embedder max_tokens is {config.max_tokens}; pass 1 to {MAX_POSITIONS}")
        return LocalEmbedder(max_tokens=config.max_tokens, batch_size=config.batch_size, threads=config.threads or None)
    if not config.openai_url:
        raise ValueError('embedder kind "openai" needs openai_url, e.g. http://127.0.0.1:8080/v1')
    check_base_url(config.openai_url)
    if not config.openai_model:
        raise ValueError('embedder kind "openai" needs openai_model, e.g. "text-embedding-3-small"')
    if config.openai_dimension < 0:
        raise ValueError(f"embedder openai_dimension is {config.openai_dimension}; pass 0 to learn it, or the length")
    if not (config.timeout_s > 0 and math.isfinite(config.timeout_s)):
        raise ValueError(f"embedder timeout_s is {config.timeout_s}; pass a positive number of seconds")
    api_key = os.environ.get(config.openai_api_key_env) if config.openai_api_key_env else None
    return OpenAICompatEmbedder(
        url=config.openai_url,
        model=config.openai_model,
        api_key=api_key or None,
        dimension=config.openai_dimension,
        timeout_s=config.timeout_s,
        batch_size=config.batch_size,
    )
