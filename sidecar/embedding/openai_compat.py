"""An embedder that calls an OpenAI-compatible ``POST {url}/embeddings`` endpoint.

Works with OpenAI itself and with local servers that speak the same API
(llama.cpp, vLLM, Ollama, text-embeddings-inference). Standard library only:
one HTTP request per ``batch_size`` texts, no retries here — a failure
raises ``EmbedderError`` whose ``retryable`` says whether the caller may
try again.
"""

from __future__ import annotations

import http.client
import json
import math
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .base import EmbedderError, Vectors, check_texts, l2_normalise_rows, not_unicode_error

_PROBE_TEXT = "dimension probe"
"""Embedded once to learn the dimension when it is needed before any real call."""
_ERROR_DETAIL_CHARS = 300
"""How much of an error response body goes into the exception message."""


def check_base_url(url: str) -> str:
    """``url`` without its trailing slashes; ``ValueError`` unless it is a plain http(s) base URL."""
    parts = urllib.parse.urlsplit(url)
    # Checked first so that no message below echoes a password.
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"openai_url for host {parts.hostname!r} has credentials in it; "
            "put the API key in the environment variable named by openai_api_key_env"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"openai_url {url!r} is not an http(s) URL; pass e.g. http://127.0.0.1:8080/v1")
    if parts.query or parts.fragment:
        raise ValueError(f"openai_url {url!r} has a query or fragment; pass the base URL only")
    return url.rstrip("/")


def _retryable_status(status: int) -> bool:
    # 408 (request timeout) and 429 (rate limit) are the 4xx that clear up by themselves.
    return status in (408, 429) or status >= 500


class OpenAICompatEmbedder:
    """Vectors from an OpenAI-compatible embeddings endpoint, L2-normalised here.

    Keyword arguments: ``url`` (base URL; we POST ``{url}/embeddings``),
    ``model``, ``api_key`` (sent as ``Authorization: Bearer``; None sends
    none), ``dimension`` (0 = learn it from the first response),
    ``timeout_s`` (per connect or read), ``batch_size`` (texts per request).
    Raises ``ValueError`` for a bad URL or numbers. Safe to call from several
    threads at once; each request opens its own connection.
    """

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str | None = None,
        dimension: int = 0,
        timeout_s: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        self._url = check_base_url(url)
        if not model:
            raise ValueError("model is empty; pass the embedding model's name, e.g. 'text-embedding-3-small'")
        if dimension < 0:
            raise ValueError(f"dimension is {dimension}; pass the vector length, or 0 to learn it")
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s is {timeout_s}; pass a positive number of seconds")
        if batch_size < 1:
            raise ValueError(f"batch_size is {batch_size}; pass 1 or more")
        self._endpoint = self._url + "/embeddings"
        self._model = model
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "memevo-embedder",
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout_s = timeout_s
        self._batch_size = batch_size
        self._dimension = dimension
        self._dimension_lock = threading.Lock()
        self._opener = urllib.request.build_opener()
        self._closed = False

    def __repr__(self) -> str:
        # Spelled out so the headers (and the API key in them) never reach a log.
        return f"OpenAICompatEmbedder(url={self._url!r}, model={self._model!r}, dimension={self._dimension})"

    @property
    def identity(self) -> str:
        """``openai:<url>:<model>:<dimension>``; may probe the endpoint like ``dimension``."""
        return f"openai:{self._url}:{self._model}:{self.dimension}"

    @property
    def dimension(self) -> int:
        """The vector length, configured or learnt.

        If neither a configured value nor a previous response gave it, this
        embeds one short text to learn it, and raises ``EmbedderError`` if that fails.
        """
        if self._dimension == 0:
            self.embed([_PROBE_TEXT])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` with one request per ``batch_size`` of them, in order.

        Returns float32 ``(len(texts), dimension)``, unit rows, C-contiguous.
        Raises ``EmbedderError`` (``retryable`` for HTTP 408, 429, 5xx, timeouts
        and connection failures; not for other 4xx, a malformed response or a
        dimension mismatch), ``TypeError`` for a bare ``str`` or a non-string and
        ``ValueError`` for a text that is not valid Unicode (a lone surrogate).
        """
        items = check_texts(texts)
        if self._closed:
            raise EmbedderError("the embedder is closed")
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [
            self._embed_batch(items[start : start + self._batch_size])
            for start in range(0, len(items), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.ascontiguousarray(np.concatenate(parts))

    def close(self) -> None:
        """Refuse further calls; there is no connection to close (one per request)."""
        self._closed = True

    def _embed_batch(self, texts: list[str]) -> Vectors:
        response = self._post({"model": self._model, "input": texts})
        vectors = self._parse(response, len(texts))
        self._check_dimension(vectors.shape[1])
        return l2_normalise_rows(vectors)

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise not_unicode_error(payload["input"]) from exc
        request = urllib.request.Request(self._endpoint, data=body, headers=self._headers, method="POST")
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            try:
                detail = _error_detail(exc)
            finally:
                exc.close()
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} answered HTTP {exc.code}: {detail}",
                retryable=_retryable_status(exc.code),
            ) from exc
        except urllib.error.URLError as exc:
            # A certificate that fails verification will fail the same way next time.
            retryable = not isinstance(exc.reason, ssl.SSLCertVerificationError)
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} unreachable: {exc.reason}", retryable=retryable
            ) from exc
        except TimeoutError as exc:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} did not answer within {self._timeout_s} s",
                retryable=True,
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} dropped the connection: {exc!r}", retryable=True
            ) from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} answered with invalid JSON: {raw[:100]!r}"
            ) from exc

    def _parse(self, response: Any, count: int) -> npt.NDArray[np.float64]:
        bad = f"embeddings endpoint {self._endpoint} answered with"
        data = response.get("data") if isinstance(response, dict) else None
        if not isinstance(data, list):
            raise EmbedderError(f"{bad} no 'data' list: {str(response)[:100]}")
        if len(data) != count:
            raise EmbedderError(f"{bad} {len(data)} embeddings for {count} texts")
        if not all(isinstance(item, dict) for item in data):
            raise EmbedderError(f"{bad} a 'data' item that is not an object")
        if all("index" not in item for item in data):
            ordered = data  # some servers leave out "index"; then the list order is the order
        else:
            indices = [item.get("index") for item in data]
            if sorted(i for i in indices if isinstance(i, int)) != list(range(count)):
                raise EmbedderError(f"{bad} indices {indices[:10]}, expected each of 0..{count - 1} once")
            ordered = sorted(data, key=lambda item: int(item["index"]))
        embeddings = [item.get("embedding") for item in ordered]
        if not all(isinstance(e, list) and e for e in embeddings):
            raise EmbedderError(f"{bad} an 'embedding' that is not a non-empty list of numbers")
        try:
            vectors = np.array(embeddings, dtype=np.float64)
        except (ValueError, TypeError) as exc:
            raise EmbedderError(f"{bad} embeddings of different lengths or non-numbers") from exc
        if not np.isfinite(vectors).all():
            raise EmbedderError(f"{bad} NaN or infinite values")
        if (np.linalg.norm(vectors, axis=1) == 0).any():
            raise EmbedderError(f"{bad} an all-zero embedding")
        return vectors

    def _check_dimension(self, dimension: int) -> None:
        with self._dimension_lock:
            if self._dimension == 0:
                self._dimension = dimension
        if dimension != self._dimension:
            raise EmbedderError(
                f"embeddings endpoint {self._endpoint} returned {dimension}-d vectors for model "
                f"{self._model!r}, expected {self._dimension} (openai_dimension or the first response)"
            )


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``) or the start of the body."""
    try:
        raw = exc.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        raw = b""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
    return (text or str(exc.reason))[:_ERROR_DETAIL_CHARS]
