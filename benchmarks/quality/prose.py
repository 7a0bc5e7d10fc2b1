"""Natural prose: does memevo notice a change said in an agent's own words, and leave additions alone?

Usage (from the repository root)::

    python benchmarks/quality/prose.py --split heldout [--json out/prose.json] [--limit N]

Data: hand-written scenarios in ``benchmarks/quality/prose_scenarios/`` (format in its
``FORMAT.md``). Each is what an agent would write over a few days about a small
world — a fact, statements about the same and other entities, then a change in
the writer's own words (or an addition that does not replace anything) — and a
question asked afterwards. ``tuning_*.jsonl``, ``validation_*.jsonl`` and
``heldout_*.jsonl`` come from different writers with disjoint domains and names:
build on the tuning split, decide on the validation split, quote the held-out split.

Recipe: one sidecar, one namespace per scenario; the memories are written one
call each, in order, dated one day apart in world time; then ``Govern`` runs on
the namespace (it waits for the pair judge, which settles prose off the write
path; ``--no-govern`` skips it), the question is recalled (k = 5) and every
memory read back. ``--judge none`` runs the sidecar without the judge. Three systems over the same
memories: ``memevo`` (its recall), ``cosine`` (the question's cosine to the
stored vectors) and ``newest-tie`` (of the memories within 0.05 cosine of the
best, the newest).

Scores, per category:

- ``current_first``: the top memory answers the question now.
- ``stale_above``: a stale statement ranks above every answer in the top 5
  (or is in the top 5 while no answer is).
- ``perceived`` (updates; memevo only): of the stale statements, the share
  retired (OBSOLETE, ``superseded_by``) or doubted (``possibly_outdated_by``)
  by a later statement of their own chain; ``retired`` the share retired.
- ``wrong_touch`` (memevo only): the share of scenarios where a statement that
  still holds (the older one of an addition or another attribute, or any
  distractor) was retired or doubted, or a stale one was retired by a
  statement not of its chain; ``cross_entity`` counts touches between two
  memories with different declared entities (must be 0).
- ``asked`` (``--llm-judge ACCURACY``): the sidecar runs in policy mode LLM
  against a scripted chat endpoint (``scripted_judge.py``) that answers each
  doubt it is asked from the ground truth, right ``ACCURACY`` of the time;
  the share of stale statements it was asked about with a statement of their
  chain, or that the rules settled on their own evidence. Escalation's
  ceiling: what the local judge never doubts, no second judge sees.

Prints a Markdown table; ``--json PATH`` writes the rows with the command,
date, machine and versions. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks.quality import common, scripted_judge
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.quality import common, scripted_judge

import grpc

from memevo.client import Fact, Memory, MemoryClient, MemoryKind, MemoryState
from memevo.v1 import memory_service_pb2, memory_service_pb2_grpc, policy_pb2

SCENARIOS = Path(__file__).resolve().parent / "prose_scenarios"
"""The scenario files (``tuning_*.jsonl``, ``heldout_*.jsonl``)."""
K = 5
TIE_MARGIN = 0.05
"""``newest-tie``: memories within this cosine of the best count as tied; the newest of them ranks first."""
UPDATES = ("keyed_to_prose", "prose_entity", "prose_no_entity", "chain")
CATEGORIES = (*UPDATES, "addition", "other_attribute")
KINDS = {"fact": MemoryKind.FACT, "preference": MemoryKind.PREFERENCE, "episode": MemoryKind.EPISODE}
SYSTEMS = ("memevo", "cosine", "newest-tie")


@dataclass(frozen=True)
class Statement:
    """One memory of a scenario, as written."""

    text: str
    entity: str | None
    fact: tuple[str, str] | None
    kind: str
    role: str
    replaced_by: int | None


@dataclass(frozen=True)
class Scenario:
    """A scenario of a file (see ``prose_scenarios/FORMAT.md``)."""

    id: str
    lang: str
    category: str
    memories: tuple[Statement, ...]
    question: str
    answers: tuple[int, ...]
    entity_set: bool

    def chain_after(self, index: int) -> set[int]:
        """The statements that follow ``index`` along its chain of replacements (the right ones to retire it)."""
        out: set[int] = set()
        step = self.memories[index].replaced_by
        while step is not None and step not in out:
            out.add(step)
            step = self.memories[step].replaced_by
        return out


def parse(line: str) -> Scenario:
    """One JSONL line; ``ValueError`` naming what is wrong."""
    raw = json.loads(line)
    memories = []
    for m in raw["memories"]:
        fact = m.get("fact")
        memories.append(
            Statement(
                text=str(m["text"]),
                entity=m.get("entity") or None,
                fact=(str(fact["attribute"]), str(fact["value"])) if fact else None,
                kind=str(m.get("kind") or "fact"),
                role=str(m["role"]),
                replaced_by=m.get("replaced_by"),
            )
        )
    category = str(raw["category"])
    if category not in CATEGORIES:
        raise ValueError(f"{raw.get('id')}: unknown category {category!r}")
    entity_set = any(m.entity for m in memories)
    return Scenario(
        id=str(raw["id"]),
        lang=str(raw.get("lang", "en")),
        category=category,
        memories=tuple(memories),
        question=str(raw["question"]),
        answers=tuple(int(i) for i in raw["answers"]),
        entity_set=bool(raw.get("entity_set", entity_set)),
    )


def load(split: str, folder: Path = SCENARIOS) -> list[Scenario]:
    """The scenarios of ``split`` ("tuning", "validation", "heldout" or "all"), file by file in name order."""
    splits = ("tuning", "validation", "heldout") if split == "all" else (split,)
    patterns = [f"{name}_*.jsonl" for name in splits]
    out: list[Scenario] = []
    for pattern in patterns:
        for path in sorted(folder.glob(pattern)):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    try:
                        out.append(parse(line))
                    except (KeyError, TypeError, ValueError) as error:
                        raise ValueError(f"{path.name}:{number}: {error}") from error
    return out


def group(scenario: Scenario) -> str:
    """The table row a scenario counts in: Chinese scenarios have their own rows."""
    return f"{scenario.category} (zh)" if scenario.lang == "zh" else scenario.category


@dataclass
class Outcome:
    """What one system did on one scenario."""

    current_first: bool
    stale_above: bool


@dataclass
class Perception:
    """What memevo's perception did on one scenario."""

    stale: int = 0
    retired: int = 0
    perceived: int = 0
    wrong: bool = False
    cross_entity: int = 0
    asked: int = 0
    """Stale statements put to the second judge with a statement of their chain, or settled by the rules' own
    evidence (``--llm-judge``)."""
    settled: set[int] = field(default_factory=set)
    """The stale statements retired or doubted by a statement of their chain."""
    notes: list[str] = field(default_factory=list)


def rank_outcome(scenario: Scenario, ranked: Sequence[int]) -> Outcome:
    """Score a ranking of statement indices (best first; only the top ``K`` are read)."""
    top = list(ranked[:K])
    answers = set(scenario.answers)
    stale = {i for i, m in enumerate(scenario.memories) if m.role == "stale"}
    first_answer = next((p for p, i in enumerate(top) if i in answers), len(top))
    return Outcome(
        current_first=bool(top) and top[0] in answers,
        stale_above=any(i in stale for i in top[:first_answer]),
    )


def perception(scenario: Scenario, stored: Sequence[Memory], index_of: dict[int, int]) -> Perception:
    """How the stored states relate to what the writer meant."""
    out = Perception()
    for i, (statement, memory) in enumerate(zip(scenario.memories, stored, strict=True)):
        by_id = memory.superseded_by if memory.state == MemoryState.OBSOLETE else memory.possibly_outdated_by
        if memory.state == MemoryState.OBSOLETE and by_id is None:
            by_id = -1  # retired with no successor named: counts as touched
        by = index_of.get(by_id, -1) if by_id is not None else None
        retired = memory.state == MemoryState.OBSOLETE
        if statement.role == "stale":
            out.stale += 1
            right = by is not None and by in scenario.chain_after(i)
            out.perceived += right
            if right:
                out.settled.add(i)
            out.retired += right and retired
            if by is not None and not right and retired:
                out.wrong = True
                out.notes.append(f"stale {i} retired by {by}")
        elif by is not None:
            out.wrong = True
            how = "retired" if retired else "doubted"
            out.notes.append(f"{statement.role} {i} {how} by {by}")
        if by is not None and by >= 0:
            other = scenario.memories[by].entity
            if statement.entity and other and other != statement.entity:
                out.cross_entity += 1
    return out


def run_memevo(
    client: MemoryClient, scenarios: Sequence[Scenario], log: common.Log, *, govern: bool
) -> Iterator[tuple[Scenario, list[Memory], list[int], Perception]]:
    """Write each scenario in its own namespace; yield its stored memories, ranking and perception."""
    start = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(days=60)
    for number, scenario in enumerate(scenarios, start=1):
        namespace = f"prose-{scenario.id}"
        ids: list[int] = []
        for day, statement in enumerate(scenario.memories):
            result = client.remember(
                statement.text,
                namespace=namespace,
                kind=KINDS.get(statement.kind, MemoryKind.FACT),
                entity=statement.entity,
                fact=Fact(*statement.fact) if statement.fact else None,
                valid_from=start + dt.timedelta(days=day),
            )
            ids.append(result.memory.id)
        if govern:
            client.govern(namespace=namespace)
        index_of = {memory_id: i for i, memory_id in enumerate(ids)}
        found = client.recall(scenario.question, k=K, namespace=namespace, peek=True)
        ranked = [index_of[hit.memory.id] for hit in found if hit.memory.id in index_of]
        stored = client.get(ids, include_vectors=True)
        yield scenario, stored, ranked, perception(scenario, stored, index_of)
        if number % 50 == 0:
            log(f"  {number}/{len(scenarios)} scenarios")


def baselines(stored: Sequence[Memory], query: np.ndarray) -> dict[str, list[int]]:
    """Rankings of the plain vector systems over the same stored vectors (statement indices, best first)."""
    units = common.stored_vectors(stored)
    similarities = units @ query
    by_cosine = [int(i) for i in np.argsort(-similarities, kind="stable")]
    best = float(similarities[by_cosine[0]])
    tied = [i for i in by_cosine if similarities[i] >= best - TIE_MARGIN]
    newest = max(tied)  # written one day apart, in order
    return {"cosine": by_cosine, "newest-tie": [newest, *[i for i in by_cosine if i != newest]]}


def run(args: argparse.Namespace, log: common.Log) -> tuple[list[common.Row], dict[str, Any]]:
    scenarios = load(args.split, args.scenarios)
    if args.limit is not None:
        scenarios = scenarios[: args.limit]
    if not scenarios:
        raise SystemExit(f"no {args.split} scenarios in {args.scenarios}")
    log(f"{len(scenarios)} {args.split} scenarios")
    embedder = common.QueryEmbedder()
    queries = embedder.embed([s.question for s in scenarios], log=log)
    embedder.close()
    outcomes: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    perceptions: dict[str, list[Perception]] = defaultdict(list)
    failures: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        serve_args = ["--judge", args.judge, "--rerank", args.rerank]
        second: scripted_judge.ScriptedJudge | None = None
        if args.llm_judge is not None:
            truth = scripted_judge.truth_of(ground_truth(scenarios))
            second = stack.enter_context(scripted_judge.serving(scripted_judge.ScriptedJudge(truth, args.llm_judge)))
            serve_args += ["--llm-url", second.url, "--llm-model", "scripted"]
        running = stack.enter_context(common.sidecar(sweep_interval_s=args.sweep_interval_s, log=log, extra=serve_args))
        if second is not None:
            decide_doubts_by_llm(running.client.target)
        results = run_memevo(running.client, scenarios, log, govern=args.govern)
        for query, (scenario, stored, ranked, seen) in zip(queries, results, strict=True):
            if second is not None:
                unasked = [i for i in not_asked(scenario, set(second.asked)) if i not in seen.settled]
                seen.asked = seen.stale - len(unasked)
                seen.notes += [f"stale {i} not asked" for i in unasked]
            rows = group(scenario)
            outcomes[(rows, "memevo")].append(rank_outcome(scenario, ranked))
            for system, order in baselines(stored, query).items():
                outcomes[(rows, system)].append(rank_outcome(scenario, order))
            perceptions[rows].append(seen)
            if not outcomes[(rows, "memevo")][-1].current_first or seen.wrong or seen.asked < seen.stale:
                failures.append({"id": scenario.id, "ranked": ranked[:K], "notes": seen.notes})
    table: list[common.Row] = []
    groups = sorted({g for g, _ in outcomes}, key=lambda g: (g.endswith("(zh)"), CATEGORIES.index(g.split()[0])))
    for name in groups:
        seen_all = perceptions[name]
        n = len(seen_all)
        for system in SYSTEMS:
            scored = outcomes[(name, system)]
            table.append(_row(name, system, "current_first", float(np.mean([o.current_first for o in scored])), n))
            table.append(_row(name, system, "stale_above", float(np.mean([o.stale_above for o in scored])), n))
        stale = sum(p.stale for p in seen_all)
        if stale:
            table.append(_row(name, "memevo", "perceived", sum(p.perceived for p in seen_all) / stale, n))
            table.append(_row(name, "memevo", "retired", sum(p.retired for p in seen_all) / stale, n))
            if args.llm_judge is not None:
                table.append(_row(name, "memevo", "asked", sum(p.asked for p in seen_all) / stale, n))
        table.append(_row(name, "memevo", "wrong_touch", float(np.mean([p.wrong for p in seen_all])), n))
        table.append(_row(name, "memevo", "cross_entity", float(sum(p.cross_entity for p in seen_all)), n))
    extra = {
        "split": args.split,
        "scenarios": len(scenarios),
        "failures": failures,
        "govern": args.govern,
        "judge": args.judge,
        "rerank": args.rerank,
        "llm_judge": args.llm_judge,
    }
    if second is not None:
        extra["llm_calls"] = second.calls
        extra["llm_pairs_asked"] = len(second.asked)
        extra["llm_unknown_pairs"] = second.unknown
        extra["llm_refused"] = second.refused
        log(
            f"second judge: {second.calls} calls, {len(second.asked)} pairs asked "
            f"({second.unknown} not in the ground truth), "
            f"{second.refused} other requests refused"
        )
    return table, extra


def ground_truth(scenarios: Sequence[Scenario]) -> Iterator[tuple[str, str, bool]]:
    """Every ordered pair of a scenario's statements, and whether the later one replaces the earlier one."""
    for scenario in scenarios:
        for i, older in enumerate(scenario.memories):
            chain = scenario.chain_after(i)
            for j, newer in enumerate(scenario.memories):
                if j != i:
                    yield older.text, newer.text, j in chain


def not_asked(scenario: Scenario, asked: set[tuple[str, str]]) -> list[int]:
    """The scenario's stale statements the second judge was never asked about with a statement of their chain."""
    text = scripted_judge.prompt_text
    return [
        i
        for i, m in enumerate(scenario.memories)
        if m.role == "stale"
        and not any((text(m.text), text(scenario.memories[j].text)) in asked for j in scenario.chain_after(i))
    ]


def decide_doubts_by_llm(target: str) -> None:
    """Policy mode LLM: the chat endpoint decides the doubts no reviewer takes (the client has no setter for it)."""
    with grpc.insecure_channel(target) as channel:
        service = memory_service_pb2_grpc.MemoryServiceStub(channel)
        policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest(), timeout=30).policy
        policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_LLM
        service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy), timeout=30)


def _row(name: str, system: str, metric: str, value: float, n: int) -> common.Row:
    return common.Row("prose " + name, system, 0, metric, float(value), n)


def summary(rows: Sequence[common.Row]) -> str:
    """One line per category: memevo's current-first, the baselines', perceived and wrong touches."""
    cells: dict[tuple[str, str, str], float] = {(r.benchmark, r.system, r.metric): r.value for r in rows}
    counts = {r.benchmark: r.n_queries for r in rows}
    lines = [
        "| category | n | current first: memevo / cosine / newest-tie | stale above"
        " | perceived (retired) | wrong touch |",
        "|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r.benchmark for r in rows):
        first = " / ".join(f"{cells[(name, s, 'current_first')]:.2f}" for s in SYSTEMS)
        perceived = cells.get((name, "memevo", "perceived"))
        seen = f"{perceived:.2f} ({cells[(name, 'memevo', 'retired')]:.2f})" if perceived is not None else "–"
        asked = cells.get((name, "memevo", "asked"))
        if asked is not None:
            seen += f", asked {asked:.2f}"
        lines.append(
            f"| {name.removeprefix('prose ')} | {counts[name]} | {first} | {cells[(name, 'memevo', 'stale_above')]:.2f}"
            f" | {seen} | {cells[(name, 'memevo', 'wrong_touch')]:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--split", choices=("tuning", "validation", "heldout", "all"), default="heldout")
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS, help="scenario folder (default %(default)s)")
    parser.add_argument(
        "--no-govern",
        dest="govern",
        action="store_false",
        help="recall at once, without first running Govern on the namespace (which waits for the judge)",
    )
    parser.add_argument("--judge", choices=("local", "none"), default="local", help="the sidecar's --judge")
    parser.add_argument("--rerank", choices=("local", "none"), default="none", help="the sidecar's --rerank")
    parser.add_argument(
        "--llm-judge",
        type=float,
        default=None,
        metavar="ACCURACY",
        help="policy mode LLM against a scripted chat endpoint that judges each doubt from the ground truth, right "
        "this share of the time (e.g. 0.9)",
    )
    parser.add_argument("--json", type=Path, help="write the table and the run's details here as JSON")
    parser.add_argument("--limit", type=int, default=None, help="only the first N scenarios")
    parser.add_argument("--sweep-interval-s", type=float, default=None, help="the sidecar's sweep interval")
    args = parser.parse_args(argv)
    log = common.Log()
    rows, extra = run(args, log)
    print(summary(rows))
    if args.json is not None:
        common.write_json(args.json, rows, command=common.command_line(argv), extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
