"""LoCoMo retrieval: recall@5 and @10 of the evidence turns per question category, side by side.

Usage (from the repository root)::

    python benchmarks/quality/locomo.py [--data ../shared/data] [--json out/locomo.json] [--limit N]

Recipe (``locomo/README`` of the data folder): per conversation, one memory
per turn, content ``"Speaker: text"``, ``valid_from`` the date of its
session, ``metadata["dia_id"]`` its turn id; each conversation in its own
namespace. Turns are written one at a time, in order, each naming the
previous turn of its session as its reasoning context (what it answered;
memevo's word search counts those words at half weight). For every
question each system ranks that conversation's turns and keeps the top
10; a question's recall@k is the share of its evidence turns in the first
k, averaged over the questions of a category (1 multi-hop, 2 temporal, 3
open-domain, 4 single-hop, 5 adversarial) and over all of them ("overall").

Systems, in one run, on the same turns and the same vectors:

- ``bm25``: a plain Okapi BM25 ranker over the turns of the conversation
  (:class:`benchmarks.quality.common.BM25`: lowercase words, a short stopword
  list, k1 1.2, b 0.75).
- ``vector``: a plain append-only vector store, exact cosine over the
  vectors the sidecar stored for the turns (read back with ``Get``).
- ``bm25_context``: for comparison, the same BM25 given what memevo is given:
  the previous turn of the session at half weight (not the issue's baseline).
- ``memevo``: ``Recall`` through a ``memevo serve --embedder local`` sidecar
  started on a temporary data directory, with the question text and the
  question's vector (embedded once in this process by the same local model;
  the run checks it matches the sidecar's), ``k=10``, the conversation's
  namespace. The top 5 are the first 5 of those 10.

``--limit N`` keeps the first N conversations (of 10). Evidence ids are
cleaned (``"D8:6; D9:17"`` is two ids, ``"D:11:26"`` is ``D11:26``); ids that
name no turn of the conversation are dropped, and questions left without
evidence are skipped; the run prints how many. Prints a Markdown table;
``--json PATH`` writes it as rows of ``{"benchmark", "system", "n_memories",
"metric", "value", "n_queries"}`` with the command, date, machine and
versions. Not a test: nothing asserts on quality.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks.quality import common
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.quality import common

from memevo.client import MemoryClient, MemoryKind, ReasoningContext, WriteOutcome, WriteResult

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SYSTEMS = ("bm25", "vector", "memevo", "bm25_context")
KS = (5, 10)
DATA_FILE = Path("locomo") / "locomo10.json"
EMBEDDING_CHECK_TEXTS = 64
_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y", "%B %d, %Y")


@dataclass(frozen=True)
class Turn:
    """One conversation turn, to be stored as one memory."""

    dia_id: str
    speaker: str
    text: str
    session: int
    when: dt.datetime | None
    """The session's date (UTC); None when it could not be read."""

    @property
    def content(self) -> str:
        """The memory text: ``"Speaker: text"``."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    """One question with its category and the turn ids that answer it."""

    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: its turns in order and its scorable questions."""

    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    @property
    def namespace(self) -> str:
        """The sidecar namespace of this conversation."""
        return "locomo-" + re.sub(r"[^A-Za-z0-9_.:-]", "_", self.sample_id)


def parse_session_date(text: str) -> dt.datetime | None:
    """``"1:56 pm on 8 May, 2023"`` as a UTC datetime; None when no known format fits."""
    cleaned = " ".join(str(text).split())
    for pattern in _DATE_FORMATS:
        try:
            return dt.datetime.strptime(cleaned, pattern).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
    return None


def parse_evidence(items: Iterable[str]) -> tuple[set[str], list[str]]:
    """Turn ids named by a question's evidence strings, and the pieces that name none.

    ``"D8:6; D9:17"`` gives two ids; ``"D:11:26"`` reads as ``D11:26``.
    """
    found: set[str] = set()
    unreadable: list[str] = []
    for item in items:
        for piece in re.split(r"[;,\s]+", str(item).strip()):
            if not piece:
                continue
            match = _EVIDENCE.fullmatch(piece)
            if match is None:
                unreadable.append(piece)
            else:
                found.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return found, unreadable


def load(path: Path, limit: int | None) -> tuple[list[Conversation], Counter[str]]:
    """The conversations of ``locomo10.json`` (the first ``limit``) and counts of what was skipped or fixed."""
    notes: Counter[str] = Counter()
    samples = json.loads(path.read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    for sample in samples[:limit]:
        raw = sample.get("conversation") or {}
        sessions = sorted(
            (int(m.group(1)) for key in raw if (m := _SESSION.fullmatch(key)) and isinstance(raw[key], list)),
        )
        turns: list[Turn] = []
        for number in sessions:
            when = parse_session_date(raw.get(f"session_{number}_date_time", ""))
            if when is None:
                notes["sessions without a readable date (turns stored undated)"] += 1
            for turn in raw[f"session_{number}"]:
                if not str(turn.get("text", "")).strip() or not turn.get("dia_id"):
                    notes["turns without text or id (skipped)"] += 1
                    continue
                speaker = str(turn.get("speaker") or "Someone")
                turns.append(Turn(str(turn["dia_id"]), speaker, str(turn["text"]), number, when))
        known = {t.dia_id for t in turns}
        if len(known) != len(turns):
            notes["duplicate turn ids (both stored)"] += len(turns) - len(known)
        questions: list[Question] = []
        for qa in sample.get("qa") or ():
            evidence, unreadable = parse_evidence(qa.get("evidence", []))
            notes["unreadable evidence pieces (dropped)"] += len(unreadable)
            missing = evidence - known
            notes["evidence ids naming no turn (dropped)"] += len(missing)
            notes["malformed evidence strings (read as above)"] += sum(
                1 for e in qa.get("evidence", []) if not re.fullmatch(r"D\d+:\d+", str(e))
            )
            evidence -= missing
            if not evidence:
                notes["questions without usable evidence (skipped)"] += 1
                continue
            category = qa.get("category")
            if category not in CATEGORIES or not str(qa.get("question", "")).strip():
                notes["questions without text or a known category (skipped)"] += 1
                continue
            questions.append(Question(str(qa["question"]), int(category), frozenset(evidence)))
        conversations.append(
            Conversation(str(sample.get("sample_id", len(conversations))), tuple(turns), tuple(questions))
        )
    return conversations, notes


def previous_in_session(conversation: Conversation) -> list[int | None]:
    """Per turn, the position of the turn before it in its session (None for a session's first): what it answers."""
    turns = conversation.turns
    return [p - 1 if p > 0 and turns[p - 1].session == turn.session else None for p, turn in enumerate(turns)]


def previous_turns(conversation: Conversation) -> list[str]:
    """Per turn, the text of the turn it answers ("" for a session's first): its context."""
    return [conversation.turns[p].content if p is not None else "" for p in previous_in_session(conversation)]


def remember_conversation(client: MemoryClient, conversation: Conversation, log: common.Log) -> list[WriteResult]:
    """One EPISODE memory per turn, dated at its session, with its turn id in the metadata, stored one at a time in
    order, each naming the previous turn of its session as its reasoning context: an agent writing a conversation
    down knows what each turn answered (and only after writing that one does it have its id). One result per turn."""
    results: list[WriteResult] = []
    started = time.perf_counter()
    for turn, answers in zip(conversation.turns, previous_in_session(conversation), strict=True):
        results.append(
            client.remember(
                turn.content,
                namespace=conversation.namespace,
                kind=MemoryKind.EPISODE,
                metadata={"dia_id": turn.dia_id, "session": str(turn.session)},
                valid_from=turn.when,
                reasoning_context=ReasoningContext(memory_ids=(results[answers].id,)) if answers is not None else None,
            )
        )
    elapsed = time.perf_counter() - started
    log(f"{conversation.namespace}: {len(results):,} turns stored in {elapsed:.1f} s")
    return results


def run(args: argparse.Namespace, log: common.Log) -> tuple[list[common.Row], dict[str, Any]]:
    """Ingest, query every system, and return the rows and the run's details."""
    path = args.data / DATA_FILE
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass --data pointing at the benchmark data folder")
    conversations, notes = load(path, args.limit)
    n_memories = sum(len(c.turns) for c in conversations)
    n_questions = sum(len(c.questions) for c in conversations)
    log(f"{len(conversations)} conversations, {n_memories:,} turns, {n_questions:,} scorable questions")
    timings: dict[str, float] = {}
    outcomes: Counter[str] = Counter()
    # recalls[system][category] -> per-question recall at each k
    recalls: dict[str, dict[int, dict[int, list[float]]]] = {
        s: {c: {k: [] for k in KS} for c in CATEGORIES} for s in SYSTEMS
    }
    latencies_ms: list[float] = []
    embedder = common.QueryEmbedder()
    with common.sidecar(sweep_interval_s=args.sweep_interval_s, log=log, extra=["--rerank", args.rerank]) as running:
        client = running.client
        started = time.perf_counter()
        ids_by_conversation: list[list[int]] = []
        for conversation in conversations:
            results = remember_conversation(client, conversation, log)
            outcomes.update(r.outcome.name.lower() for r in results)
            ids_by_conversation.append([r.id for r in results])
        timings["ingest_s"] = time.perf_counter() - started
        if outcomes.get(WriteOutcome.CREATED.name.lower(), 0) != n_memories:
            log(f"note: write outcomes {dict(outcomes)} (turns merged into others are scored under the kept id)")
        sweep = client.govern()
        log(f"governance sweep: {sweep.evaluated_count:,} evaluated, {len(sweep.transitions)} kinds of transition")

        started = time.perf_counter()
        stored = [common.fetch_memories(client, ids) for ids in ids_by_conversation]
        matrices = [common.stored_vectors(memories) for memories in stored]
        dia_ids = [[m.metadata.get("dia_id", "") for m in memories] for memories in stored]
        timings["read_vectors_s"] = time.perf_counter() - started

        started = time.perf_counter()
        questions = [q.text for c in conversations for q in c.questions]
        query_vectors = embedder.embed(questions, log=log)
        sample = [t for c in conversations for t in c.turns][:EMBEDDING_CHECK_TEXTS]
        check = embedder.check([t.content for t in sample], np.concatenate(matrices)[: len(sample)])
        log(f"query embedder check: lowest cosine to the sidecar's vectors over {len(sample)} turns = {check:.5f}")
        timings["embed_queries_s"] = time.perf_counter() - started

        started = time.perf_counter()
        row = 0
        k_max = max(KS)
        for conversation, matrix, turn_ids in zip(conversations, matrices, dia_ids, strict=True):
            bm25 = common.BM25([t.content for t in conversation.turns])
            bm25_context = common.BM25(
                [t.content for t in conversation.turns], contexts=previous_turns(conversation), context_weight=0.5
            )
            bm25_ids = [t.dia_id for t in conversation.turns]
            for question in conversation.questions:
                vector = query_vectors[row]
                row += 1
                ranked: dict[str, list[str]] = {
                    "bm25": [bm25_ids[i] for i in bm25.top_k(question.text, k_max)],
                    "bm25_context": [bm25_ids[i] for i in bm25_context.top_k(question.text, k_max)],
                    "vector": [turn_ids[i] for i in common.cosine_top_k(matrix, vector, k_max)],
                }
                call_started = time.perf_counter()
                result = client.recall(question.text, vector=vector, k=k_max, namespace=conversation.namespace)
                latencies_ms.append((time.perf_counter() - call_started) * 1e3)
                ranked["memevo"] = [hit.memory.metadata.get("dia_id", "") for hit in result]
                for system in SYSTEMS:
                    for k in KS:
                        recalls[system][question.category][k].append(
                            common.recall_at_k(ranked[system], question.evidence, k)
                        )
            log(f"{conversation.namespace}: {len(conversation.questions)} questions scored")
        timings["query_s"] = time.perf_counter() - started
    embedder.close()

    rows: list[common.Row] = []
    for k in KS:
        for category in (*CATEGORIES, None):
            name = "overall" if category is None else CATEGORIES[category]
            for system in SYSTEMS:
                by_category = recalls[system]
                values = (
                    [v for c in CATEGORIES for v in by_category[c][k]] if category is None else by_category[category][k]
                )
                rows.append(
                    common.Row(f"locomo/{name}", system, n_memories, f"recall_at_{k}", common.mean(values), len(values))
                )
    details: dict[str, Any] = {
        "data": {"path": str(path), "sha256": common.file_sha256(path)},
        "conversations": len(conversations),
        "questions_scored": n_questions,
        "per_conversation_turns": {c.namespace: len(c.turns) for c in conversations},
        "data_notes": dict(notes),
        "write_outcomes": dict(outcomes),
        "embedding_check_min_cosine": round(check, 6),
        "memevo_recall_ms": {
            "p50": round(statistics.median(latencies_ms), 2) if latencies_ms else None,
            "mean": round(statistics.fmean(latencies_ms), 2) if latencies_ms else None,
        },
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
    }
    return rows, details


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    common.add_common_arguments(parser, limit_help="use only the first N conversations (of 10)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be 1 or more")
    log = common.Log()
    rows, details = run(args, log)
    total = time.perf_counter() - log.started
    details["timings_s"]["total_s"] = round(total, 1)
    print(common.format_table(rows, SYSTEMS))
    notes = details["data_notes"]
    if notes:
        print("\ndata notes: " + "; ".join(f"{name}: {count}" for name, count in notes.items()))
    print(
        f"\n{details['questions_scored']} questions over {details['conversations']} conversations; total {total:.0f} s"
    )
    if args.json:
        common.write_json(args.json, rows, command=common.command_line(argv), extra=details)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
