"""SituatedQA knowledge updates: does the current answer rank first, is the stale one kept out, and "as of"?

Usage (from the repository root)::

    python benchmarks/quality/situatedqa.py [--data ../shared/data] [--json out/situatedqa.json] [--limit N]

Data: the temporal split of SituatedQA, train and dev (``situatedqa/`` of
the data folder). ``raw_temp.*`` gives, per question whose answer changed, a
human-annotated timeline: the previous answer and when it began, the current
answer and when it began; ``qa_temp.*`` asks the same question "as of DATE"
with the answer valid then.

Recipe: per changed question (the first annotated timeline that has both a
previous and a current answer), two memories of the same fact, the old answer
dated at its start and the new one at its start; every question in one pool;
content ``"<question>? <answer>"``; all old answers written first, then all
new ones. Four systems over the same memories (same text, same vectors), the
first three in one sidecar, one namespace each:

- ``memevo+keys``: entity = a hash of the question text, fact
  ``("answer", <answer>)``: the newer value supersedes the older, which
  becomes OBSOLETE (hidden from standard recall; valid until the newer one
  began, so ``as_of`` finds it).
- ``memevo-text``: the same text without entity or fact key.
- ``memevo+entity`` (extra): the entity, no fact key; a near-duplicate about
  the same entity that disagrees is a soft conflict that lowers the older
  memory's accuracy.
- ``vector``: a plain append-only vector store (exact cosine over the vectors
  the sidecar stored), no notion of time or supersession.

Scores: ask each plain question "now": ``current_at_1`` is the share of
questions whose current answer's memory ranks first; ``stale_kept_out`` the
share whose old answer is not in the top 5 (the context an agent would
read; BuildContext is not used). Ask each "as of DATE" variant (its text as
given) with ``as_of`` = DATE: ``as_of_at_1`` is the share whose answer valid
at DATE ranks first. The vector store has no ``as_of``: it ranks by cosine.

Dates: a start ``{"year", "month", "date"}`` becomes the first instant of the
period it names (a year alone: 1 January, UTC); an "as of" DATE the last
instant of its period ("as of 2019" is the end of 2019: of the readings tried,
this one agrees most with the annotated answers). When both starts fall in the
same period the new answer is dated one day after the old. A question with an
unknown start (or a start after today) is still written, dated so the order
holds (one day before / after the known one; with neither known, the sidecar's
store time, old first) and scored "now", but its "as of" rows are skipped.
"As of" rows are also skipped when the annotated answer is neither stored
answer (e.g. a date before the old answer began), matches both, or
contradicts the timeline's dates at that DATE. The run prints every count.

``--limit N`` keeps the first N changed questions (train first, then dev).
Prints a Markdown table; ``--json PATH`` writes it as rows of
``{"benchmark", "system", "n_memories", "metric", "value", "n_queries"}``
with the command, date, machine, versions and the counts above. Not a test.
"""

from __future__ import annotations

import argparse
import calendar
import datetime as dt
import hashlib
import json
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from benchmarks.quality import common
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.quality import common

from memevo.client import MemoryClient, MemoryInput, MemoryKind

SPLITS = ("train", "dev")
SYSTEMS = ("memevo+keys", "memevo+entity", "memevo-text", "vector")
NAMESPACES = {"memevo+keys": "sqa-keys", "memevo+entity": "sqa-entity", "memevo-text": "sqa-text"}
CONTEXT_K = 5
ATTRIBUTE = "answer"
MAX_FACT_VALUE_CHARS = 1_000
"""Fact values are capped by the sidecar (4 KiB); one annotated answer is a pasted table of 2 KiB+."""
EMBEDDING_CHECK_TEXTS = 64
ONE_DAY = dt.timedelta(days=1)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})


# ---- dates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """A calendar period named by a date of year, month or day precision."""

    year: int
    month: int | None = None
    day: int | None = None

    @property
    def first(self) -> dt.datetime:
        """Its first instant, UTC."""
        return dt.datetime(self.year, self.month or 1, self.day or 1, tzinfo=dt.timezone.utc)

    @property
    def last(self) -> dt.datetime:
        """Its last instant (to the microsecond), UTC."""
        month = self.month or 12
        day = self.day or calendar.monthrange(self.year, month)[1]
        return dt.datetime(self.year, month, day, 23, 59, 59, 999_999, tzinfo=dt.timezone.utc)


def period_from_parts(year: object, month: object = None, day: object = None) -> Period | None:
    """A period from year / month / day fields of any JSON type; None without a usable year.

    A month outside 1-12 is dropped (year precision), and so is a day that
    does not exist in its month (month precision).
    """
    y = _as_int(year)
    if y is None or not 1 <= y <= 9999:
        return None
    m = _as_int(month)
    if m is None or not 1 <= m <= 12:
        return Period(y)
    d = _as_int(day)
    if d is None or not 1 <= d <= calendar.monthrange(y, m)[1]:
        return Period(y, m)
    return Period(y, m, d)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def parse_period(text: str) -> Period | None:
    """``"2019"``, ``"March 28, 2021"``, ``"28 March 2021"``, ``"March 2021"``, ``"2021-03-28"``; else None."""
    cleaned = " ".join(str(text).replace(",", " ").split()).lower()
    if not cleaned:
        return None
    if re.fullmatch(r"\d{1,4}", cleaned):
        return period_from_parts(cleaned)
    if match := re.fullmatch(r"(\d{4})-(\d{1,2})(?:-(\d{1,2}))?", cleaned):
        return _exact(match.group(1), match.group(2), match.group(3))
    words = cleaned.split()
    if len(words) == 3 and words[0] in _MONTHS:  # March 28 2021
        return _exact(words[2], _MONTHS[words[0]], words[1])
    if len(words) == 3 and words[1] in _MONTHS:  # 28 March 2021
        return _exact(words[2], _MONTHS[words[1]], words[0])
    if len(words) == 2 and words[0] in _MONTHS:  # March 2021
        return _exact(words[1], _MONTHS[words[0]], None)
    return None


def _exact(year: object, month: object, day: object) -> Period | None:
    """Like :func:`period_from_parts` but None (not a coarser period) when a given field is invalid."""
    period = period_from_parts(year, month, day)
    if period is None or period.month is None or (day is not None and period.day is None):
        return None
    return period


def start_period(value: object) -> Period | None:
    """A timeline start ``{"year", "month", "date"}`` as a period; None when missing or without a year."""
    if not isinstance(value, Mapping):
        return None
    return period_from_parts(value.get("year"), value.get("month"), value.get("date"))


# ---- the data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """One answer of a question's timeline."""

    answers: tuple[str, ...]
    value: str
    """The answer as one text (the annotation's ``*_answers_full``, else the answers joined)."""
    start: Period | None
    """When it began, as annotated; None when unknown."""

    @property
    def normalised(self) -> frozenset[str]:
        """Its answers after answer normalisation."""
        return frozenset(common.normalise_answer(a) for a in self.answers) - {""}

    def matches(self, gold: Sequence[str]) -> bool:
        """Whether ``gold`` gives this answer: all of its answers (a list answer names several), or its full text.

        Annotated answer lists are the annotators' answers run together, so a list answer
        matches when each of its items is among them.
        """
        wanted = {common.normalise_answer(g) for g in gold} - {""}
        mine = self.normalised
        return (bool(mine) and mine <= wanted) or common.normalise_answer(self.value) in wanted


@dataclass(frozen=True)
class Change:
    """A question whose answer changed, with the world times its two memories are written at."""

    qid: str
    split: str
    question: str
    prev: Version
    cur: Version
    prev_from: dt.datetime | None
    """``valid_from`` of the old answer's memory; None lets the sidecar stamp its store time."""
    cur_from: dt.datetime | None
    dated: bool
    """Both starts known (so "as of" rows are scored)."""

    @property
    def entity(self) -> str:
        """A stable id of the question's subject: a hash of its text."""
        return "sqa:" + hashlib.sha1(self.question.encode()).hexdigest()[:16]

    def content(self, version: Version) -> str:
        """The memory text: the question and the answer in one line."""
        return f"{self.question.rstrip(' ?')}? {version.value}"

    def valid_at(self, when: dt.datetime) -> str | None:
        """``"prev"``, ``"cur"`` or None: which answer the timeline says held at ``when``."""
        if self.cur_from is not None and when >= self.cur_from:
            return "cur"
        if self.prev_from is not None and when >= self.prev_from:
            return "prev"
        return None


def _version(timeline: Mapping[str, Any], side: str) -> Version | None:
    answers = tuple(str(a) for a in timeline.get(f"{side}_answers") or () if str(a).strip())
    if not answers:
        return None
    full = timeline.get(f"{side}_answers_full")
    value = " ".join(str(full).split()) if isinstance(full, str) and full.strip() else ", ".join(answers)
    return Version(answers, value, start_period(timeline.get(f"{side}_start")))


def make_change(
    record: Mapping[str, Any], split: str, today: dt.datetime, notes: Counter[str] | None = None
) -> Change | None:
    """The change a ``raw_temp`` record describes, or None when its answer never changed.

    Uses the first timeline with both a previous and a current answer that differ.
    """
    notes = Counter() if notes is None else notes
    question = " ".join(str(record.get("question") or "").split())
    if not question:
        notes["records without a question (skipped)"] += 1
        return None
    for timeline in record.get("timelines") or ():
        if not isinstance(timeline, Mapping):
            continue
        prev, cur = _version(timeline, "prev"), _version(timeline, "cur")
        if prev is None or cur is None:
            continue
        if prev.normalised == cur.normalised:
            notes["previous and current answers the same (timeline skipped)"] += 1
            continue
        break
    else:
        return None
    prev_start = _not_future(prev.start, today, notes)
    cur_start = _not_future(cur.start, today, notes)
    prev_from = prev_start.first if prev_start else None
    cur_from = cur_start.first if cur_start else None
    if prev_from is not None and cur_from is not None:
        if cur_from < prev_from:
            notes["current answer dated before the previous one (skipped)"] += 1
            return None
        if cur_from == prev_from:
            notes["both answers start in the same period (new dated one day after old)"] += 1
            cur_from = prev_from + ONE_DAY
    elif prev_from is None and cur_from is not None:
        notes["previous answer's start unknown (dated one day before the new; no as-of)"] += 1
        prev_from = cur_from - ONE_DAY
    elif cur_from is None and prev_from is not None:
        notes["current answer's start unknown (dated one day after the old; no as-of)"] += 1
        cur_from = prev_from + ONE_DAY
    else:
        notes["both starts unknown (stamped with store time, old first; no as-of)"] += 1
    return Change(
        qid=str(record.get("id", "")) or question,
        split=split,
        question=question,
        prev=prev,
        cur=cur,
        prev_from=prev_from,
        cur_from=cur_from,
        dated=prev_start is not None and cur_start is not None,
    )


def _not_future(period: Period | None, today: dt.datetime, notes: Counter[str]) -> Period | None:
    if period is not None and period.first > today:
        notes["starts after today (treated as unknown)"] += 1
        return None
    return period


@dataclass(frozen=True)
class AsOfQuestion:
    """An "as of DATE" question with the answer the timeline and the annotators agree held then."""

    change: Change
    text: str
    when: dt.datetime
    target: str
    """``"prev"`` or ``"cur"``."""
    date_type: str


def make_as_of(record: Mapping[str, Any], changes: Mapping[str, Change], notes: Counter[str]) -> AsOfQuestion | None:
    """The scorable "as of" question of a ``qa_temp`` record, or None (the reason counted in ``notes``)."""
    change = changes.get(str(record.get("id", "")))
    if change is None:
        notes["rows of questions not in the pool (answer never changed, or skipped)"] += 1
        return None
    if not change.dated:
        notes["rows of questions with an unknown start (skipped)"] += 1
        return None
    period = parse_period(str(record.get("date", "")))
    if period is None:
        notes["rows with an unreadable date (skipped)"] += 1
        return None
    gold = [str(a) for a in record.get("answer") or ()]
    in_prev, in_cur = change.prev.matches(gold), change.cur.matches(gold)
    if in_prev and in_cur:
        notes["rows whose answer matches both stored answers (skipped)"] += 1
        return None
    if not (in_prev or in_cur):
        notes["rows whose answer is neither stored answer (skipped)"] += 1
        return None
    target = "prev" if in_prev else "cur"
    when = period.last
    if change.valid_at(when) != target:
        notes["rows whose answer contradicts the timeline's dates (skipped)"] += 1
        return None
    text = " ".join(str(record.get("edited_question") or f"{change.question} as of {record.get('date')}").split())
    return AsOfQuestion(change, text, when, target, str(record.get("date_type", "")))


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load(
    folder: Path, limit: int | None, today: dt.datetime
) -> tuple[list[Change], list[AsOfQuestion], Counter[str], Counter[str]]:
    """Changes (the first ``limit``), their scorable "as of" questions, and notes on both."""
    change_notes: Counter[str] = Counter()
    as_of_notes: Counter[str] = Counter()
    changes: list[Change] = []
    for split in SPLITS:
        for record in _jsonl(folder / f"raw_temp.{split}.jsonl"):
            change_notes["questions read"] += 1
            change = make_change(record, split, today, change_notes)
            if change is not None:
                changes.append(change)
    change_notes["questions whose answer changed"] = len(changes)
    changes = changes[:limit]
    by_id = {c.qid: c for c in changes}
    if len(by_id) != len(changes):
        raise SystemExit("question ids are not unique: cannot match the as-of rows")
    as_of: list[AsOfQuestion] = []
    for split in SPLITS:
        for record in _jsonl(folder / f"qa_temp.{split}.jsonl"):
            question = make_as_of(record, by_id, as_of_notes)
            if question is not None:
                as_of.append(question)
    as_of_notes["rows scored"] = len(as_of)
    return changes, as_of, change_notes, as_of_notes


# ---- the run -------------------------------------------------------------------------------


def memory_inputs(
    changes: Sequence[Change], side: str, system: str, vectors: common.Vectors | None = None
) -> list[MemoryInput]:
    """The ``side`` (``"prev"`` or ``"cur"``) memory of every change, stored the way ``system`` stores it."""
    items: list[MemoryInput] = []
    for row, change in enumerate(changes):
        version = change.prev if side == "prev" else change.cur
        keyed = system == "memevo+keys"
        items.append(
            MemoryInput(
                content=change.content(version),
                vector=None if vectors is None else vectors[row],
                namespace=NAMESPACES[system],
                kind=MemoryKind.FACT,
                entity=change.entity if system in ("memevo+keys", "memevo+entity") else "",
                fact=(ATTRIBUTE, version.value[:MAX_FACT_VALUE_CHARS]) if keyed else None,
                metadata={"qid": change.qid, "version": side, "split": change.split},
                valid_from=change.prev_from if side == "prev" else change.cur_from,
            )
        )
    return items


@dataclass
class Scores:
    """Per-query hits of one system."""

    current: list[float]
    kept_out: list[float]
    as_of: list[float]


def _label(metadata: Mapping[str, str]) -> tuple[str, str]:
    return metadata.get("qid", ""), metadata.get("version", "")


def run(args: argparse.Namespace, log: common.Log) -> tuple[list[common.Row], dict[str, Any]]:
    """Load, store, ask, and return the rows and the run's details."""
    folder = args.data / "situatedqa"
    paths = [folder / f"{kind}_temp.{split}.jsonl" for kind in ("raw", "qa") for split in SPLITS]
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path} not found: pass --data pointing at the benchmark data folder")
    today = dt.datetime.now(dt.timezone.utc)
    changes, as_of, change_notes, as_of_notes = load(folder, args.limit, today)
    n_memories = 2 * len(changes)
    log(f"{len(changes):,} changed questions ({n_memories:,} memories per system), {len(as_of):,} as-of questions")
    timings: dict[str, float] = {}
    outcomes: dict[str, Counter[str]] = {s: Counter() for s in NAMESPACES}
    scores = {s: Scores([], [], []) for s in SYSTEMS}
    latencies_ms: list[float] = []
    embedder = common.QueryEmbedder()
    with common.sidecar(sweep_interval_s=args.sweep_interval_s, log=log, extra=["--rerank", args.rerank]) as running:
        client = running.client
        started = time.perf_counter()
        # The sidecar embeds the text once (memevo-text); the other namespaces get the same vectors.
        ids: dict[str, list[int]] = {}
        for side in ("prev", "cur"):
            results = common.remember_all(
                client, memory_inputs(changes, side, "memevo-text"), log=log, label=f"memevo-text {side}"
            )
            outcomes["memevo-text"].update(f"{side}:{r.outcome.name.lower()}" for r in results)
            ids[side] = [r.id for r in results]
        text_ids = ids["prev"] + ids["cur"]
        stored = common.fetch_memories(client, text_ids)
        matrix = common.stored_vectors(stored)
        labels = [_label(m.metadata) for m in stored]
        vectors = {"prev": matrix[: len(changes)], "cur": matrix[len(changes) :]}
        for system in ("memevo+keys", "memevo+entity"):
            for side in ("prev", "cur"):
                items = memory_inputs(changes, side, system, vectors[side])
                results = common.remember_all(client, items, log=log, label=f"{system} {side}")
                outcomes[system].update(f"{side}:{r.outcome.name.lower()}" for r in results)
        timings["ingest_s"] = time.perf_counter() - started
        sweep = client.govern()
        log(f"governance sweep: {sweep.evaluated_count:,} evaluated")

        started = time.perf_counter()
        now_vectors = embedder.embed([c.question for c in changes], log=log)
        as_of_vectors = embedder.embed([q.text for q in as_of], log=log)
        check_items = stored[:EMBEDDING_CHECK_TEXTS]
        check = embedder.check([m.content for m in check_items], matrix[: len(check_items)])
        log(f"query embedder check: lowest cosine to the sidecar's vectors over {len(check_items)} texts = {check:.5f}")
        timings["embed_queries_s"] = time.perf_counter() - started

        started = time.perf_counter()

        def ask_now(row: int) -> dict[str, list[tuple[str, str]]]:
            vector = now_vectors[row]
            text = changes[row].question
            ranked = {"vector": [labels[i] for i in common.cosine_top_k(matrix, vector, CONTEXT_K)]}
            for system, namespace in NAMESPACES.items():
                ranked[system] = _recall(client, text, vector, namespace, None, latencies_ms)
            return ranked

        for change, ranked in zip(changes, map(ask_now, range(len(changes))), strict=True):
            for system in SYSTEMS:
                top = ranked[system]
                scores[system].current.append(float(bool(top) and top[0] == (change.qid, "cur")))
                scores[system].kept_out.append(float((change.qid, "prev") not in top[:CONTEXT_K]))
        log(f"asked {len(changes):,} questions 'now' ({time.perf_counter() - started:.1f} s)")
        timings["query_now_s"] = time.perf_counter() - started

        started = time.perf_counter()

        def ask_as_of(row: int) -> dict[str, list[tuple[str, str]]]:
            vector = as_of_vectors[row]
            question = as_of[row]
            ranked = {"vector": [labels[i] for i in common.cosine_top_k(matrix, vector, 1)]}
            for system, namespace in NAMESPACES.items():
                ranked[system] = _recall(client, question.text, vector, namespace, question.when, latencies_ms)
            return ranked

        for question, ranked in zip(as_of, map(ask_as_of, range(len(as_of))), strict=True):
            wanted = (question.change.qid, question.target)
            for system in SYSTEMS:
                top = ranked[system]
                scores[system].as_of.append(float(bool(top) and top[0] == wanted))
        log(f"asked {len(as_of):,} questions 'as of' ({time.perf_counter() - started:.1f} s)")
        timings["query_as_of_s"] = time.perf_counter() - started
    embedder.close()

    rows: list[common.Row] = []
    for system in SYSTEMS:
        s = scores[system]
        rows.append(
            common.Row("situatedqa/now", system, n_memories, "current_at_1", common.mean(s.current), len(s.current))
        )
        rows.append(
            common.Row("situatedqa/now", system, n_memories, "stale_kept_out", common.mean(s.kept_out), len(s.kept_out))
        )
        rows.append(
            common.Row("situatedqa/as-of", system, n_memories, "as_of_at_1", common.mean(s.as_of), len(s.as_of))
        )
    metric_order = ("current_at_1", "stale_kept_out", "as_of_at_1")
    rows.sort(key=lambda r: (metric_order.index(r.metric), SYSTEMS.index(r.system)))
    details: dict[str, Any] = {
        "data": {p.name: {"path": str(p), "sha256": common.file_sha256(p)} for p in paths},
        "changed_questions": len(changes),
        "changed_questions_by_split": dict(Counter(c.split for c in changes)),
        "as_of_questions_by_date_type": dict(Counter(q.date_type for q in as_of)),
        "data_notes": {"timelines": dict(change_notes), "as_of_rows": dict(as_of_notes)},
        "write_outcomes": {s: dict(c) for s, c in outcomes.items()},
        "embedding_check_min_cosine": round(check, 6),
        "memevo_recall_ms": {
            "p50": round(statistics.median(latencies_ms), 2) if latencies_ms else None,
            "mean": round(statistics.fmean(latencies_ms), 2) if latencies_ms else None,
        },
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
    }
    return rows, details


def _recall(
    client: MemoryClient,
    text: str,
    vector: common.Vectors,
    namespace: str,
    as_of: dt.datetime | None,
    latencies_ms: list[float],
) -> list[tuple[str, str]]:
    """(qid, version) of the top :data:`CONTEXT_K` memories recalled from ``namespace``."""
    started = time.perf_counter()
    result = client.recall(text, vector=vector, k=CONTEXT_K, namespace=namespace, as_of=as_of)
    latencies_ms.append((time.perf_counter() - started) * 1e3)
    return [_label(hit.memory.metadata) for hit in result]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    common.add_common_arguments(parser, limit_help="use only the first N changed questions (train first, then dev)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be 1 or more")
    log = common.Log()
    rows, details = run(args, log)
    total = time.perf_counter() - log.started
    details["timings_s"]["total_s"] = round(total, 1)
    print(common.format_table(rows, SYSTEMS))
    for name, notes in details["data_notes"].items():
        print(f"\n{name}: " + "; ".join(f"{reason}: {count:,}" for reason, count in notes.items()))
    print(f"\nwrite outcomes: {details['write_outcomes']}")
    print(f"total {total:.0f} s")
    if args.json:
        common.write_json(args.json, rows, command=common.command_line(argv), extra=details)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
