"""``memevo replay``: re-run a replay log under another policy and measure what it would have done.

The replay walks the log in time order and keeps the hot state of every
memory as the policy would have made it:

- world changes (created, superseded, forgotten, consolidated) happen as
  logged; lifecycle moves made by governance sweeps are *not* taken from the
  log: the lifecycle kernel (``propose_transitions``) decides them under the
  replayed policy, at most once per ``sweep_interval`` of log time;
- outcomes move confidence and the success record as ReportOutcome did;
- accesses are the replayed policy's own choices (what it would have returned).

At each logged retrieval the value kernel (``compute_scores``) scores the
logged candidates as of that moment, candidates the replayed lifecycle has
archived or evicted drop out (current-mode retrievals), the rest are ranked
as recall ranks them (match x trust, inconsistency and demotion factors; see
:mod:`memevo.sidecar.replay.capture`) and the top k are "returned" (k = how
many the original retrieval returned).

Counterfactual estimator. Outcomes are known only for memories the original
run returned and the agent used. The logging policy was deterministic, so
inverse-propensity weighting is undefined (a memory it did not return has
propensity 0). The replay uses a *direct method with observed labels first*:
a replayed memory the agent used in that very retrieval gets that
retrieval's outcome (success weight / total weight); any other replayed
memory gets the Beta(1, 1) posterior mean of its success record from all
*other* retrievals' outcomes; a memory with no outcome anywhere is unlabelled
and left out. A retrieval's score is the mean label of its replayed memories;
``success_share`` averages it over retrievals that had an outcome and at least
one label (``coverage`` says which share that is). ``observed_share`` is the
strict rule (only labels observed in the same retrieval) for comparison. The
estimator assumes a memory's usefulness does not depend on what it was
retrieved with.

Stale contamination: a replayed memory that was OBSOLETE at that moment, was
contradicted by a newer near-duplicate (inconsistency >= 0.5), or was a
strategy demoted by a better one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memevo.kernels.lifecycle import STATE_ACTIVE, STATE_ARCHIVED, STATE_EMPTY, STATE_EVICTED, propose_transitions
from memevo.kernels.value import compute_scores
from memevo.v1 import policy_pb2

from ..config import GovernanceConfig
from ..errors import InvalidArgument
from ..perception.feedback import FAILURE_LOSS, SUCCESS_GAIN
from ..policy import params_from_policy, validate_policy
from ..retrieval.recall import rank_factors
from ..store.columns import NO_CODE, Interner
from .capture import MODE_CURRENT, MODE_HISTORY
from .export import LOG_FORMAT, LOG_VERSION, policy_from_json

STATE_OBSOLETE = 4
STALE_INCONSISTENCY = 0.5
"""A candidate this contradicted (inconsistency >= this) counts as stale."""
SERIES_POINTS = 20


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay runs; the defaults suit logs of days to months."""

    sweep_interval_s: float = GovernanceConfig().sweep_interval_s
    """At most one lifecycle sweep per this much log time (wall-clock policies), seconds; the sidecar's
    default. 0 sweeps before every retrieval."""
    sweep_interval_turns: float = 1.0
    """At most one lifecycle sweep per this many turns (agent-turn policies)."""
    stale_penalty: float = 0.5
    """Weight of stale_share subtracted from success_share in the objective tuning maximises."""


@dataclass(frozen=True)
class _Retrieval:
    retrieval_id: str
    t: float
    turn: int
    k: int
    mode: int
    candidates: npt.NDArray[np.int64]
    """Dense rows of the candidates, in the pool's match order."""
    match: npt.NDArray[np.float32]
    inconsistency: npt.NDArray[np.float32]
    demoted: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class _Change:
    t: float
    turn: int
    row: int
    to_state: int
    governance: bool


@dataclass(frozen=True)
class _Outcome:
    t: float
    turn: int
    retrieval_id: str
    rows: npt.NDArray[np.int64]
    success: float
    failure: float


@dataclass
class ReplayLog:
    """A parsed replay log: static memory columns and the timeline, ready to replay many times."""

    policy: policy_pb2.Policy
    """The data directory's policy when the log was exported (the baseline)."""
    ids: npt.NDArray[np.int64]
    kind: npt.NDArray[np.uint8]
    importance: npt.NDArray[np.uint8]
    content_bytes: npt.NDArray[np.uint32]
    stored_bytes: npt.NDArray[np.uint32]
    tokens: npt.NDArray[np.int64]
    confidence0: npt.NDArray[np.float32]
    created_s: npt.NDArray[np.float64]
    created_turn: npt.NDArray[np.float64]
    task: npt.NDArray[np.int32]
    """Each memory's task signature as a code (equal codes, one task; NO_CODE for none or a log without them)."""
    timeline: list[_Change | _Retrieval | _Outcome] = field(default_factory=list)

    @property
    def retrieval_count(self) -> int:
        """Retrievals in the log."""
        return sum(1 for step in self.timeline if isinstance(step, _Retrieval))


def _task_codes(signatures: Iterable[str]) -> npt.NDArray[np.int32]:
    """Task signatures coded as the columns code them (``NO_CODE`` for none), for :func:`rank_factors`."""
    tasks = Interner()
    return np.asarray([tasks.code(task) if task else NO_CODE for task in signatures], dtype=np.int32)


def load_log(path: Path) -> ReplayLog:
    """Parse a replay log written by ``memevo export``; InvalidArgument when it is not one."""
    with path.open(encoding="utf-8") as source:
        lines = [json.loads(line) for line in source if line.strip()]
    return parse_log(lines, str(path))


def parse_log(lines: Iterable[dict[str, Any]], name: str = "log") -> ReplayLog:
    """Build a ReplayLog from the decoded JSON lines of a replay log."""
    items = list(lines)
    if not items or items[0].get("type") != "header" or items[0].get("format") != LOG_FORMAT:
        raise InvalidArgument.field("log", f"{name} is not a {LOG_FORMAT} file (no header line)")
    header = items[0]
    if int(header.get("version", 0)) > LOG_VERSION:
        raise InvalidArgument.field(
            "log", f"{name} has version {header.get('version')}; this memevo reads up to {LOG_VERSION}"
        )
    memories = sorted((m for m in items if m.get("type") == "memory"), key=lambda m: int(m["id"]))
    ids = np.asarray([int(m["id"]) for m in memories], dtype=np.int64)
    row_of = {int(memory_id): row for row, memory_id in enumerate(ids.tolist())}

    def column(name: str, dtype: type[np.generic], default: float = 0.0) -> Any:
        return np.asarray([m.get(name, default) for m in memories], dtype=dtype)

    log = ReplayLog(
        policy=policy_from_json(header["policy"]),
        ids=ids,
        kind=column("kind", np.uint8),
        importance=np.clip(column("importance", np.int64), 0, 255).astype(np.uint8),
        content_bytes=column("content_bytes", np.uint32),
        stored_bytes=column("stored_bytes", np.uint32),
        tokens=column("tokens", np.int64),
        confidence0=column("confidence0", np.float32, 0.7),
        created_s=column("created_s", np.float64),
        created_turn=np.where(column("created_turn", np.float64) > 0, column("created_turn", np.float64), np.nan),
        task=_task_codes(str(m.get("task", "")) for m in memories),
    )

    def rows(values: Iterable[int]) -> npt.NDArray[np.int64]:
        return np.asarray([row_of[int(v)] for v in values if int(v) in row_of], dtype=np.int64)

    for item in items[1:]:
        kind = item.get("type")
        if kind == "event":
            if item["event"] in ("policy", "framework") or int(item["id"]) not in row_of:
                continue
            log.timeline.append(
                _Change(
                    float(item["t"]), int(item["turn"]), row_of[int(item["id"])], int(item["to"]), item["governance"]
                )
            )
        elif kind == "outcome":
            log.timeline.append(
                _Outcome(
                    float(item["t"]),
                    int(item["turn"]),
                    str(item["retrieval"]),
                    rows(item["used"]),
                    float(item["success"]),
                    float(item["failure"]),
                )
            )
        elif kind == "retrieval":
            candidates = item.get("candidates")
            if candidates is None:
                # No observation record: the returned ids, in their order, are the only candidates.
                returned = list(item["returned"])
                candidates = [[i, 1.0 - position * 1e-3, 0.0, 0] for position, i in enumerate(returned)]
            kept = [c for c in candidates if int(c[0]) in row_of]
            log.timeline.append(
                _Retrieval(
                    str(item["id"]),
                    float(item["t"]),
                    int(item["turn"]),
                    len(item["returned"]),
                    int(item.get("mode", MODE_CURRENT)),
                    np.asarray([row_of[int(c[0])] for c in kept], dtype=np.int64),
                    np.asarray([c[1] for c in kept], dtype=np.float32),
                    np.asarray([c[2] for c in kept], dtype=np.float32),
                    np.asarray([bool(c[3]) for c in kept], dtype=np.bool_),
                )
            )
    return log


@dataclass(frozen=True)
class ReplayReport:
    """What a policy would have done over a log (estimator: see the module docstring)."""

    policy_name: str
    retrievals: int
    """Retrievals replayed."""
    outcome_retrievals: int
    """Of those, retrievals with a reported outcome."""
    success_share: float
    """Mean estimated success of the replayed retrievals that had an outcome and a label, in [0, 1]."""
    coverage: float
    """Share of the outcome retrievals that could be scored, in [0, 1]."""
    observed_share: float
    """success_share with observed labels only (NaN when no replayed memory was observed)."""
    stale_share: float
    """Share of replayed returned memories that were stale at that moment, in [0, 1]."""
    stale_retrievals: float
    """Share of retrievals that returned at least one stale memory, in [0, 1]."""
    tokens_per_retrieval: float
    """Mean estimated context tokens of the replayed returned memories."""
    store_final: int
    """Memories not evicted at the end of the log."""
    store_max: int
    active_final: int
    """ACTIVE memories at the end of the log."""
    store_series: list[tuple[float, int, int]]
    """(log time s, memories not evicted, ACTIVE) at up to 20 evenly spaced retrievals."""
    objective: float
    """success_share - stale_penalty x stale_share: what tuning maximises."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def replay(log: ReplayLog, policy: policy_pb2.Policy, options: ReplayOptions | None = None) -> ReplayReport:
    """Replay ``log`` under ``policy``; deterministic. InvalidArgument when the policy is invalid."""
    problems = validate_policy(policy)
    if problems:
        raise InvalidArgument(problems)
    options = options or ReplayOptions()
    params = params_from_policy(policy)
    turns = policy.time_mode == policy_pb2.TIME_MODE_AGENT_TURNS
    interval = options.sweep_interval_turns if turns else options.sweep_interval_s
    budget = policy.cost_budget_bytes or 1.0
    n = log.ids.size
    state = np.zeros(n, dtype=np.uint8)
    confidence = log.confidence0.copy()
    successes = np.zeros(n, dtype=np.float32)
    failures = np.zeros(n, dtype=np.float32)
    inconsistency = np.zeros(n, dtype=np.float32)
    access_count = np.zeros(n, dtype=np.uint32)
    last_access = np.full(n, np.nan, dtype=np.float64)
    state_since = np.full(n, np.nan, dtype=np.float64)
    below_since = np.full(n, np.nan, dtype=np.float64)
    uniqueness = np.full(n, np.nan, dtype=np.float32)
    created = log.created_turn if turns else log.created_s
    last_sweep = -math.inf
    turn_clock = 0.0
    returned_by: dict[str, npt.NDArray[np.int64]] = {}
    stale_returned = returned_total = stale_hits = 0
    tokens_total = 0
    retrievals = 0
    sizes: list[tuple[float, int, int]] = []
    outcomes: list[_Outcome] = []

    def now_of(t: float, turn: int) -> float:
        nonlocal turn_clock
        if turn > turn_clock:
            turn_clock = float(turn)
        return turn_clock if turns else t

    def scores_of(rows: npt.NDArray[np.int64] | slice, now: float) -> Any:
        def pick(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return np.ascontiguousarray(array[rows])

        return compute_scores(
            pick(confidence),
            pick(successes),
            pick(failures),
            pick(inconsistency),
            pick(last_access),
            pick(created),
            pick(access_count),
            pick(log.importance),
            pick(log.content_bytes),
            pick(uniqueness),
            pick(log.stored_bytes),
            pick(log.kind),
            now,
            budget,
            params,
        )

    for step in log.timeline:
        if isinstance(step, _Change):
            if step.governance and step.to_state in (STATE_ACTIVE, STATE_ARCHIVED, STATE_EVICTED):
                continue  # the replayed policy's own lifecycle decides these
            now = now_of(step.t, step.turn)
            if state[step.row] != step.to_state:
                state[step.row] = step.to_state
                state_since[step.row] = now
        elif isinstance(step, _Outcome):
            now_of(step.t, step.turn)
            rows = step.rows
            successes[rows] += step.success
            failures[rows] += step.failure
            c = confidence[rows]
            c = c + (1.0 - c) * SUCCESS_GAIN * step.success
            c = c - c * FAILURE_LOSS * step.failure
            confidence[rows] = np.clip(c, 0.0, 1.0)
            outcomes.append(step)
        else:
            now = now_of(step.t, step.turn)
            if now - last_sweep >= interval:
                last_sweep = now
                live = np.flatnonzero((state == STATE_ACTIVE) | (state == STATE_ARCHIVED))
                if live.size:
                    value = scores_of(live, now).value
                    next_state, next_below = propose_transitions(
                        value,
                        np.ascontiguousarray(state[live]),
                        np.ascontiguousarray(log.kind[live]),
                        np.ascontiguousarray(state_since[live]),
                        np.ascontiguousarray(below_since[live]),
                        now,
                        params,
                    )
                    moved = next_state != state[live]
                    state_since[live[moved]] = now
                    state[live] = next_state
                    below_since[live] = next_below
            rows = step.candidates
            inconsistency[rows] = step.inconsistency
            states = state[rows]
            if step.mode == MODE_CURRENT:
                keep = states == STATE_ACTIVE
            elif step.mode == MODE_HISTORY:
                keep = (states != STATE_EVICTED) & (states != STATE_EMPTY)
            else:
                keep = (states == STATE_ACTIVE) | (states == STATE_ARCHIVED)
            chosen: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
            if keep.any() and step.k > 0:
                kept = np.flatnonzero(keep)
                scored = scores_of(rows[kept], now)
                picked = rows[kept]
                rank = step.match[kept] * rank_factors(
                    scored.accuracy,
                    scored.relevance,
                    step.inconsistency[kept],
                    log.importance[picked],
                    log.kind[picked],
                    step.demoted[kept],
                    log.task[picked],
                )
                order = np.argsort(-rank, kind="stable")[: step.k]
                positions = kept[order]
                chosen = rows[positions]
                stale = (
                    (state[chosen] == STATE_OBSOLETE)
                    | (step.inconsistency[positions] >= STALE_INCONSISTENCY)
                    | step.demoted[positions]
                )
                stale_returned += int(stale.sum())
                stale_hits += int(stale.any())
                returned_total += chosen.size
                tokens_total += int(log.tokens[chosen].sum())
                access_count[chosen] += 1
                last_access[chosen] = now
            returned_by[step.retrieval_id] = chosen
            retrievals += 1
            alive = int(np.count_nonzero((state != STATE_EMPTY) & (state != STATE_EVICTED)))
            sizes.append((step.t, alive, int(np.count_nonzero(state == STATE_ACTIVE))))
    success_share, coverage, observed_share, with_outcome = _estimate(n, outcomes, returned_by)
    stale_share = stale_returned / returned_total if returned_total else 0.0
    alive_final = int(np.count_nonzero((state != STATE_EMPTY) & (state != STATE_EVICTED)))
    step_size = max(1, math.ceil(len(sizes) / SERIES_POINTS))
    return ReplayReport(
        policy_name=policy.name,
        retrievals=retrievals,
        outcome_retrievals=with_outcome,
        success_share=success_share,
        coverage=coverage,
        observed_share=observed_share,
        stale_share=stale_share,
        stale_retrievals=stale_hits / retrievals if retrievals else 0.0,
        tokens_per_retrieval=tokens_total / retrievals if retrievals else 0.0,
        store_final=alive_final,
        store_max=max([s[1] for s in sizes], default=alive_final),
        active_final=int(np.count_nonzero(state == STATE_ACTIVE)),
        store_series=sizes[::step_size],
        objective=success_share - options.stale_penalty * stale_share,
    )


def _estimate(
    n: int, outcomes: list[_Outcome], returned_by: dict[str, npt.NDArray[np.int64]]
) -> tuple[float, float, float, int]:
    """(success_share, coverage, observed_share, outcome retrievals): the estimator of the module docstring."""
    total_success = np.zeros(n, dtype=np.float64)
    total_failure = np.zeros(n, dtype=np.float64)
    for outcome in outcomes:
        np.add.at(total_success, outcome.rows, outcome.success)
        np.add.at(total_failure, outcome.rows, outcome.failure)
    scores: list[float] = []
    observed_scores: list[float] = []
    with_outcome = 0
    for outcome in outcomes:
        chosen = returned_by.get(outcome.retrieval_id)
        if chosen is None:
            continue  # an outcome of a retrieval outside the log (or given by ids only)
        with_outcome += 1
        weight = outcome.success + outcome.failure
        label_here = outcome.success / weight if weight > 0 else 0.5
        used = set(outcome.rows.tolist())
        labels: list[float] = []
        observed: list[float] = []
        for row in chosen.tolist():
            if row in used:
                labels.append(label_here)
                observed.append(label_here)
                continue
            s = total_success[row]
            f = total_failure[row]
            if s + f > 0:
                labels.append((1.0 + s) / (2.0 + s + f))
        if labels:
            scores.append(float(np.mean(labels)))
        if observed:
            observed_scores.append(float(np.mean(observed)))
    success_share = float(np.mean(scores)) if scores else 0.0
    coverage = len(scores) / with_outcome if with_outcome else 0.0
    observed_share = float(np.mean(observed_scores)) if observed_scores else math.nan
    return success_share, coverage, observed_share, with_outcome
