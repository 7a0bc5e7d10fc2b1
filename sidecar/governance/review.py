"""Agent-in-the-loop review: proposals the sidecar cannot decide alone, offered to the agent's reviewers.

A proposal (consolidate a group, evict memories whose value is still above
the review floor, re-interpret memories formed under an older framework) is
stored in the data directory before it is offered, so a restart keeps it.
Every attached reviewer that takes its kind receives it; the first decision
wins and every other reviewer is told it was settled. A reviewer that
disconnects leaves its proposals open: they are offered to the next reviewer
that attaches, and at the deadline the policy decides (consolidation: wait,
extractive or LLM; eviction: proceed; re-interpretation: drop; supersession:
the chat endpoint judges in LLM mode, otherwise the doubt stays).

In LLM mode a proposal no reviewer takes goes to the chat endpoint at once:
the model writes the consolidation, or judges whether the newer memory
replaces the doubted one. Supersessions waiting together are judged up to
LLM_JUDGE_BATCH_PAIRS in one call, and a verdict the model already gave on
the same pair of statements is taken from a cache instead of asked again.
The call is made without the broker's lock; a failure leaves everything as
it was and the proposal is retried later.

Applying a decision is one committer mutation (the consolidation and the
proposal's removal land in the same batch), so nothing is half-applied.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2, review_pb2

from ..domain import from_timestamp, now_s, to_timestamp
from ..engine import Engine
from ..errors import FailedPrecondition, InvalidArgument, NotFound
from ..policy import ConsolidationSettings
from ..store.rocks import CF_META, Txn
from .abstraction import (
    AbstractionError,
    ChatAbstractor,
    Pair,
    UnusableAnswer,
    VerdictCache,
    faithful_groups,
    keeps,
    verdict_key,
)
from .consolidation import ClusterFinder, consolidate

log = logging.getLogger(__name__)

PROPOSAL_PREFIX = b"proposal/"
"""Open proposals live in the meta column family under this prefix, keyed by proposal id."""
EVICTIONS_PER_PROPOSAL = 200
"""Most memories one eviction proposal carries."""
REINTERPRETATIONS_PER_PROPOSAL = 50
MAX_REINTERPRET_PROPOSALS = 20
"""A framework change offers at most this many re-interpretation proposals (the oldest memories first)."""
MAX_SUPERSEDE_PROPOSALS = 100
"""Most soft conflicts one pass offers to reviewers or puts to the chat endpoint (the next pass offers more)."""
LLM_RETRY_S = 60.0
"""After a failed LLM call, the proposal waits this long before the next try."""
LLM_JUDGEMENT_BURST = 20
"""Supersessions the chat endpoint may judge before any write has earned a call (``LlmConfig.judgements_per_write``)."""
LLM_JUDGE_BATCH_PAIRS = 8
"""Most supersessions put to the chat endpoint in one call. A batch saves the system prompt and a round trip per
pair, but the longer the list the likelier a model misnumbers or cuts its answer (and the answer must fit
``LlmConfig.max_output_tokens``: eight verdicts are about 60 tokens); a pair the answer leaves out is asked again
alone, so a bad batch costs up to one call per pair more."""

ALL_KINDS = frozenset(
    {review_pb2.PROPOSAL_KIND_CONSOLIDATE, review_pb2.PROPOSAL_KIND_EVICT, review_pb2.PROPOSAL_KIND_REINTERPRET}
)
"""What a reviewer that names no kinds takes. Supersessions are offered only to reviewers that ask for them by
kind: a reviewer written before they existed would not know what ACCEPT does to one."""
OBSERVED_KINDS = ALL_KINDS | {review_pb2.PROPOSAL_KIND_SUPERSEDE}
"""What an observing stream (``ReviewerHello.observe``) that names no kinds sees: everything."""


@dataclass
class Reviewer:
    """One attached Review stream: what it takes and the messages waiting to be sent to it."""

    name: str
    kinds: frozenset[int]
    outbox: queue.Queue[memory_service_pb2.ReviewResponse] = field(default_factory=queue.Queue)
    key: int = field(default_factory=lambda: uuid.uuid4().int)
    observer: bool = False
    """Sees and may decide proposals, but governance does not count it as attached (see :meth:`ReviewBroker.takes`)."""


@dataclass
class OpenProposal:
    """A proposal not yet decided: the stored message (memories as ids) and who has seen it."""

    proposal: review_pb2.Proposal
    offered_to: set[int] = field(default_factory=set)
    not_before_s: float = 0.0
    """Policy decisions wait until then (back-off after a failed LLM call)."""

    @property
    def ids(self) -> list[int]:
        return [m.id for m in self.proposal.memories]

    @property
    def deadline_s(self) -> float:
        return from_timestamp(self.proposal.deadline)


class ReviewBroker:
    """Proposals, reviewers and the policy's decisions at deadlines. Thread-safe."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.finder = ClusterFinder(engine)
        self._lock = threading.RLock()
        self._reviewers: dict[int, Reviewer] = {}
        self._open: dict[str, OpenProposal] = {}
        self._deciding: set[str] = set()
        self._written_at_start = engine.columns.size
        self._judging_paused_until = 0.0
        """After a failed judgement no other one is asked before then: a pass of many soft conflicts against an
        endpoint that is down would otherwise wait for one timeout per conflict."""
        self.llm_judgements = 0
        """Supersessions put to the chat endpoint since the start, what the budget counts: one per pair a call
        asks about (a pair a batch answer left without a verdict, asked again alone, counts twice)."""
        self.llm_judgements_deferred = 0
        """Doubts a pass left for later because the budget (``LlmConfig.judgements_per_write``) was spent."""
        self.llm_calls = 0
        """Supersession calls made to the chat endpoint since the start (a batch of pairs is one)."""
        self.llm_pairs_judged = 0
        """Supersessions the chat endpoint gave a verdict for since the start."""
        self.llm_cache_hits = 0
        """Supersessions settled by a verdict the chat endpoint gave before on the same pair (no call, no budget)."""
        self.llm_failures = 0
        """Supersession calls that failed, or whose answer left at least one pair without a verdict."""
        self.verdicts = VerdictCache()
        """The chat endpoint's verdicts by pair, so that the same two statements are not asked about twice."""
        self.last_pass = memory_service_pb2.ConsolidationStats()
        for key, value in engine.store.iterate(CF_META, PROPOSAL_PREFIX, PROPOSAL_PREFIX[:-1] + b"0"):
            proposal = review_pb2.Proposal.FromString(value)
            self._open[proposal.id] = OpenProposal(proposal)
            log.debug("open proposal %s restored from %r", proposal.id, key)
        engine.eviction_gate = self.gate_evictions
        engine.escalation = self.escalates

    @property
    def settings(self) -> ConsolidationSettings:
        """The consolidation policy now in force."""
        return ConsolidationSettings.from_policy(self.engine.policy.consolidation)

    # ---- reviewers ---------------------------------------------------------------------------

    def attach(self, name: str, kinds: Sequence[int], *, observe: bool = False) -> Reviewer:
        """Register a reviewer and offer it every open proposal of its kinds.

        An observer (``observe``) takes every kind by default, supersessions too, and is told ``caught_up``
        once the proposals open now were queued for it; :meth:`takes` does not count it.
        """
        default = OBSERVED_KINDS if observe else ALL_KINDS
        reviewer = Reviewer(name, frozenset(kinds) or default, observer=observe)
        with self._lock:
            self._reviewers[reviewer.key] = reviewer
            for open_proposal in self._open.values():
                if open_proposal.proposal.kind in reviewer.kinds:
                    self._offer(open_proposal, reviewer)
            if observe:
                reviewer.outbox.put(memory_service_pb2.ReviewResponse(caught_up=True))
        return reviewer

    def detach(self, reviewer: Reviewer) -> None:
        """Forget a reviewer; its undecided proposals stay open for others and for the policy."""
        with self._lock:
            self._reviewers.pop(reviewer.key, None)
            for open_proposal in self._open.values():
                open_proposal.offered_to.discard(reviewer.key)

    def takes(self, kind: int) -> bool:
        """Whether an attached reviewer takes proposals of ``kind``."""
        with self._lock:
            return any(kind in r.kinds and not r.observer for r in self._reviewers.values())

    def _offer(self, open_proposal: OpenProposal, reviewer: Reviewer) -> None:
        records, _ = self.engine.get(open_proposal.ids)
        message = review_pb2.Proposal()
        message.CopyFrom(open_proposal.proposal)
        del message.memories[:]
        message.memories.extend(records)
        reviewer.outbox.put(memory_service_pb2.ReviewResponse(proposal=message))
        open_proposal.offered_to.add(reviewer.key)

    # ---- opening proposals ---------------------------------------------------------------------

    def _propose(self, kind: int, ids: Sequence[int], reason: str, suggested_text: str = "") -> OpenProposal:
        deadline = now_s() + self.settings.review_timeout_s
        label = review_pb2.ProposalKind.Name(cast(Any, kind)).removeprefix("PROPOSAL_KIND_").lower()
        proposal = review_pb2.Proposal(
            id=f"{label}-{uuid.uuid4().hex[:16]}",
            kind=kind,  # type: ignore[arg-type]
            memories=[memory_pb2.Memory(id=i) for i in ids],
            reason=reason,
            suggested_text=suggested_text,
            deadline=to_timestamp(deadline),
        )

        def mutation(txn: Txn) -> None:
            txn.put(CF_META, PROPOSAL_PREFIX + proposal.id.encode(), proposal.SerializeToString())

        self.engine.store.apply(mutation)
        open_proposal = OpenProposal(proposal)
        with self._lock:
            self._open[proposal.id] = open_proposal
            for reviewer in self._reviewers.values():
                if kind in reviewer.kinds:
                    self._offer(open_proposal, reviewer)
        return open_proposal

    def _members_in_open(self, kind: int | None = None) -> set[int]:
        with self._lock:
            return {i for p in self._open.values() if kind is None or p.proposal.kind == kind for i in p.ids}

    def consolidation_pass(self, stopping: Callable[[], bool] | None = None) -> memory_service_pb2.ConsolidationStats:
        """Find new groups; propose them, or let the policy consolidate at once; decide expired proposals.

        ``stopping``: looked at between blocks of seeds; once true the pass ends early and the next one (after a
        restart) looks at the same memories.
        """
        started = time.perf_counter()
        settings = self.settings
        result = self.finder.find(settings, exclude=self._members_in_open(), stopping=stopping)
        stats = memory_service_pb2.ConsolidationStats(seeds_examined=result.seeds, groups_found=len(result.groups))
        if stopping is not None and stopping():
            return stats
        for found in result.groups:
            records, _ = self.engine.get(found)
            if len(records) < settings.min_group_size:
                continue
            vectors = self.engine._read_vectors(np.asarray([r.id for r in records], dtype=np.int64))
            # Only the parts whose suggested text keeps every member's dates, numbers and names: five dates of one
            # meeting are five events, and folding them into one of their texts would lose four.
            for indices, suggested in faithful_groups(records, vectors, settings.min_group_size):
                part = [records[i] for i in indices]
                group = [r.id for r in part]
                reason = _group_reason(part, settings.similarity)
                reviewed = self.takes(review_pb2.PROPOSAL_KIND_CONSOLIDATE)
                if not reviewed and settings.without_reviewer == policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE:
                    if consolidate(self.engine, group, suggested, decided_by="policy: extractive") is not None:
                        stats.consolidated_count += 1
                    continue
                open_proposal = self._propose(review_pb2.PROPOSAL_KIND_CONSOLIDATE, group, reason, suggested)
                stats.proposals_opened += 1
                if not reviewed and settings.without_reviewer == policy_pb2.CONSOLIDATION_MODE_LLM:
                    stats.consolidated_count += self._decide_by_policy(open_proposal.proposal.id)
        stats.expired_count = self.expire()
        stats.proposals_opened += self.doubt_pass()
        stats.total_ms = (time.perf_counter() - started) * 1e3
        self.last_pass = stats
        return stats

    def gate_evictions(self, ids: npt.NDArray[np.int64], values: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        """Which of the sweep's evictions to hold for review (True = hold); proposes the new ones."""
        hold = np.zeros(ids.size, dtype=bool)
        if ids.size == 0 or not self.takes(review_pb2.PROPOSAL_KIND_EVICT):
            return hold
        floor = self.settings.review_evictions_above
        pending = self._members_in_open(review_pb2.PROPOSAL_KIND_EVICT)
        already = np.isin(ids, np.fromiter(pending, dtype=np.int64, count=len(pending)))
        worth_asking = ~(values <= floor)  # NaN values are asked about too
        hold = already | worth_asking
        fresh = ids[worth_asking & ~already]
        for start in range(0, fresh.size, EVICTIONS_PER_PROPOSAL):
            chunk = fresh[start : start + EVICTIONS_PER_PROPOSAL]
            chunk_values = values[worth_asking & ~already][start : start + EVICTIONS_PER_PROPOSAL]
            reason = (
                f"value stayed below the eviction threshold for the grace period "
                f"(values {float(np.nanmin(chunk_values)):.3f}..{float(np.nanmax(chunk_values)):.3f}, "
                f"above the review floor {floor:g})"
                if np.isfinite(chunk_values).any()
                else "value stayed below the eviction threshold for the grace period"
            )
            self._propose(review_pb2.PROPOSAL_KIND_EVICT, chunk.tolist(), reason)
        return hold

    def propose_reinterpretation(self, version: str) -> int:
        """After a framework change: offer memories formed under older versions for re-reading; returns how many."""
        if not self.takes(review_pb2.PROPOSAL_KIND_REINTERPRET):
            return 0
        columns = self.engine.columns
        live = columns.live_ids()
        state = columns.state[live]
        live = live[(state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)]
        code = columns.frameworks.lookup(version)
        older = live[columns.framework[live] != code]
        older = older[~np.isin(older, list(self._members_in_open(review_pb2.PROPOSAL_KIND_REINTERPRET)))]
        older = older[: REINTERPRETATIONS_PER_PROPOSAL * MAX_REINTERPRET_PROPOSALS]
        for start in range(0, older.size, REINTERPRETATIONS_PER_PROPOSAL):
            chunk = older[start : start + REINTERPRETATIONS_PER_PROPOSAL].tolist()
            self._propose(
                review_pb2.PROPOSAL_KIND_REINTERPRET,
                chunk,
                f"formed under an older framework than {version!r}: re-read and confirm, or correct",
            )
        return int(older.size)

    def doubt_pass(self) -> int:
        """Offer each soft conflict (a memory a newer one may replace) for a decision; returns how many were opened.

        A reviewer that takes PROPOSAL_KIND_SUPERSEDE decides, and the policy at the deadline. Without one, in
        policy mode LLM the chat endpoint judges at once (as it writes consolidations at once); in the other
        modes nothing is opened and the doubt stays a ranking signal (the doubted memory ranks below its
        successor, and its hint says so).
        """
        llm = self._policy_llm(self.settings)
        if not self.takes(review_pb2.PROPOSAL_KIND_SUPERSEDE) and llm is None:
            return 0
        columns = self.engine.columns
        doubted = np.flatnonzero(columns.doubted[: columns.size])
        state = columns.state[doubted]
        doubted = doubted[(state == memory_pb2.MEMORY_STATE_ACTIVE) | (state == memory_pb2.MEMORY_STATE_ARCHIVED)]
        offered = self._members_in_open(review_pb2.PROPOSAL_KIND_SUPERSEDE)
        fresh = [i for i in doubted.tolist() if i not in offered][:MAX_SUPERSEDE_PROPOSALS]
        records, _ = self.engine.get(fresh)
        newers, _ = self.engine.get(sorted({r.possibly_outdated_by for r in records if r.possibly_outdated_by}))
        newer_records = {r.id: r for r in newers}
        opened = 0
        planned = 0
        waiting: list[str] = []
        for record in records:
            newer = record.possibly_outdated_by
            if not newer:
                continue
            reviewed = self.takes(review_pb2.PROPOSAL_KIND_SUPERSEDE)
            if not reviewed and llm is None:  # the reviewer left, and the policy would only drop the proposal
                break
            if not reviewed and not self._cached(llm, record, newer_records.get(newer)):
                if not self._llm_budget_left(planned):
                    # The doubts stay as they are (a ranking signal) until more writes earn more calls.
                    self.llm_judgements_deferred += 1
                    continue
                planned += 1
            open_proposal = self._propose(
                review_pb2.PROPOSAL_KIND_SUPERSEDE,
                [record.id, newer],
                f"memory {newer} may state a newer value of what memory {record.id} says: does it replace it?",
            )
            opened += 1
            if not reviewed:
                waiting.append(open_proposal.proposal.id)
        # Judged together once all are open: the chat endpoint takes them in batches.
        self._decide_supersessions(waiting)
        return opened

    def _cached(self, llm: ChatAbstractor | None, older: memory_pb2.Memory, newer: memory_pb2.Memory | None) -> bool:
        """Whether the chat endpoint's verdict on (``older``, ``newer``) is cached (its settling costs no budget)."""
        if llm is None or newer is None:
            return False
        return self.verdicts.get(verdict_key(llm.model, older, newer)) is not None

    def _llm_budget_left(self, planned: int = 0) -> bool:
        """Whether the chat endpoint may judge one more supersession beyond ``planned`` ones about to be asked:
        LLM_JUDGEMENT_BURST, plus ``judgements_per_write`` for each memory written since the start."""
        earned = self.engine.config.llm.judgements_per_write * (self.engine.columns.size - self._written_at_start)
        return self.llm_judgements + planned < LLM_JUDGEMENT_BURST + earned

    def escalates(self) -> bool:
        """Whether a doubt is decided by someone other than the pair judge: a reviewer that takes supersessions, or
        the chat endpoint in policy mode LLM."""
        return self.takes(review_pb2.PROPOSAL_KIND_SUPERSEDE) or self._policy_llm(self.settings) is not None

    def _policy_llm(self, settings: ConsolidationSettings) -> ChatAbstractor | None:
        """The chat endpoint that decides what no reviewer decided, if the policy's mode is LLM."""
        if settings.without_reviewer != policy_pb2.CONSOLIDATION_MODE_LLM:
            return None
        return self.engine.llm

    # ---- decisions -----------------------------------------------------------------------------

    def decide(self, reviewer: Reviewer, decision: review_pb2.Decision) -> None:
        """Apply a reviewer's decision. InvalidArgument (naming the field) for a decision that cannot apply.

        A decision about a proposal that is already settled (or unknown) is
        answered with its settlement and changes nothing.
        """
        v_field = "decision"
        if decision.verdict not in (
            review_pb2.VERDICT_ACCEPT,
            review_pb2.VERDICT_REJECT,
            review_pb2.VERDICT_MODIFY,
        ):
            raise InvalidArgument.field(f"{v_field}.verdict", "must be ACCEPT, REJECT or MODIFY")
        if len(decision.abstraction_text.encode()) > self.engine.limits.max_content_bytes:
            raise InvalidArgument.field(
                f"{v_field}.abstraction_text", f"at most {self.engine.limits.max_content_bytes} bytes"
            )
        if len(decision.note.encode()) > 4096:
            raise InvalidArgument.field(f"{v_field}.note", "at most 4096 bytes")
        with self._lock:
            open_proposal = self._open.get(decision.proposal_id)
            if open_proposal is None or decision.proposal_id in self._deciding:
                reviewer.outbox.put(memory_service_pb2.ReviewResponse(settled_proposal_id=decision.proposal_id))
                return
            ids = open_proposal.ids
            if decision.verdict == review_pb2.VERDICT_MODIFY:
                chosen = list(dict.fromkeys(decision.memory_ids))
                stray = [i for i in chosen if i not in ids]
                if stray or not chosen:
                    raise InvalidArgument.field(
                        f"{v_field}.memory_ids",
                        f"must be a non-empty subset of the proposal's memories; not in it: {stray[:10]}"
                        if stray
                        else "MODIFY needs the subset of the proposal's memories to apply it to",
                    )
                if open_proposal.proposal.kind == review_pb2.PROPOSAL_KIND_CONSOLIDATE and len(chosen) < 2:
                    raise InvalidArgument.field(f"{v_field}.memory_ids", "a consolidation needs at least 2 memories")
                ids = chosen
            who = f"reviewer {reviewer.name}"
            self._apply(open_proposal, decision.verdict, ids, decision.abstraction_text, who, decision.note)

    def _apply(self, open_proposal: OpenProposal, verdict: int, ids: list[int], text: str, who: str, note: str) -> int:
        """Settle ``open_proposal`` (lock held); returns 1 when an abstraction was written."""
        proposal = open_proposal.proposal
        key = PROPOSAL_PREFIX + proposal.id.encode()
        written = 0

        def drop(txn: Txn) -> None:
            txn.delete(CF_META, key)

        kind = proposal.kind
        accepted = verdict in (review_pb2.VERDICT_ACCEPT, review_pb2.VERDICT_MODIFY)
        if kind == review_pb2.PROPOSAL_KIND_CONSOLIDATE and accepted:
            abstraction = consolidate(
                self.engine,
                ids,
                text or proposal.suggested_text,
                decided_by=f"{who}: {note}"[:128] if note else who,
                proposal_id=proposal.id,
                hook=drop,
            )
            written = int(abstraction is not None)
        elif kind == review_pb2.PROPOSAL_KIND_EVICT:
            evict = ids if accepted else []
            spared = [i for i in open_proposal.ids if i not in evict]
            self.engine.evict_reviewed(evict, reason=f"eviction confirmed by {who}", hook=drop)
            self.engine.spare(spared)
        elif kind == review_pb2.PROPOSAL_KIND_REINTERPRET and accepted:
            self.engine.reaffirm_framework(ids, reason=f"re-interpreted by {who}", hook=drop)
        elif kind == review_pb2.PROPOSAL_KIND_SUPERSEDE:
            older, newer = open_proposal.ids[0], open_proposal.ids[1]
            said = f"{who}: {note}" if note else who
            try:
                if accepted:
                    self.engine.supersede(older, new_id=newer, reason=f"review ({said})")
                else:
                    self.engine.restore(older, reason=f"not replaced by memory {newer} ({said})")
            except (FailedPrecondition, NotFound) as error:  # settled since (forgotten, superseded, restored)
                log.info("supersession proposal %s no longer applies: %s", proposal.id, error)
            self.engine.store.apply(drop)
        else:
            self.engine.store.apply(drop)
        self._settled(proposal.id)
        return written

    def _settled(self, proposal_id: str) -> None:
        open_proposal = self._open.pop(proposal_id, None)
        if open_proposal is None:
            return
        for key in open_proposal.offered_to:
            reviewer = self._reviewers.get(key)
            if reviewer is not None:
                reviewer.outbox.put(memory_service_pb2.ReviewResponse(settled_proposal_id=proposal_id))

    def expire(self) -> int:
        """Let the policy decide every proposal whose deadline passed; returns how many were settled."""
        now = now_s()
        with self._lock:
            due = [
                p
                for p in self._open.values()
                if p.deadline_s <= now and p.not_before_s <= now and p.proposal.id not in self._deciding
            ]
        supersessions = [p.proposal.id for p in due if p.proposal.kind == review_pb2.PROPOSAL_KIND_SUPERSEDE]
        others = [p.proposal.id for p in due if p.proposal.kind != review_pb2.PROPOSAL_KIND_SUPERSEDE]
        settled = sum(self._decide_by_policy(proposal_id, count_settled=True) for proposal_id in others)
        return settled + self._decide_supersessions(supersessions)

    def _decide_by_policy(self, proposal_id: str, *, count_settled: bool = False) -> int:
        with self._lock:
            open_proposal = self._open.get(proposal_id)
            supersession = (
                open_proposal is not None and open_proposal.proposal.kind == review_pb2.PROPOSAL_KIND_SUPERSEDE
            )
        if supersession:
            return self._decide_supersessions([proposal_id])
        settings = self.settings
        with self._lock:
            open_proposal = self._open.get(proposal_id)
            if open_proposal is None or proposal_id in self._deciding:
                return 0
            kind = open_proposal.proposal.kind
            if kind == review_pb2.PROPOSAL_KIND_EVICT:
                self._apply(open_proposal, review_pb2.VERDICT_ACCEPT, open_proposal.ids, "", "policy at deadline", "")
                return 1
            if kind == review_pb2.PROPOSAL_KIND_REINTERPRET:
                self._apply(open_proposal, review_pb2.VERDICT_REJECT, [], "", "policy at deadline", "")
                return 1
            llm = self._policy_llm(settings)
            mode = settings.without_reviewer
            if mode == policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE and not self._suggestion_keeps(open_proposal):
                # Opened before suggestions had to keep every member's details: only a reviewer may fold it.
                log.info("consolidation proposal %s dropped: its text loses a member's details", proposal_id)
                self._drop(proposal_id)
                return 1 if count_settled else 0
            if mode == policy_pb2.CONSOLIDATION_MODE_EXTRACTIVE:
                written = self._apply(
                    open_proposal, review_pb2.VERDICT_ACCEPT, open_proposal.ids, "", "policy: extractive", ""
                )
                return 1 if count_settled else written
            if llm is None:
                # WAIT (or LLM without an endpoint): keep it open for the next reviewer, with a fresh deadline.
                open_proposal.proposal.deadline.CopyFrom(to_timestamp(now_s() + settings.review_timeout_s))
                return 0
            self._deciding.add(proposal_id)
        # The model call happens without the lock: reviewers and other proposals go on meanwhile.
        try:
            return self._consolidate_by_llm(open_proposal, llm, count_settled=count_settled)
        finally:
            with self._lock:
                self._deciding.discard(proposal_id)

    def _decide_supersessions(self, proposal_ids: Sequence[str]) -> int:
        """Let the policy decide these supersession proposals together; returns how many were settled.

        Without the chat endpoint (not policy mode LLM) each is dropped and its doubt stays (a ranking signal). With
        it they are judged (see ``_judge_supersessions``), unless judging is paused after a failed call.
        """
        llm = self._policy_llm(self.settings)
        settled = 0
        taken: list[OpenProposal] = []
        with self._lock:
            for proposal_id in proposal_ids:
                open_proposal = self._open.get(proposal_id)
                if open_proposal is None or proposal_id in self._deciding:
                    continue
                if llm is None:
                    # Undecided, the doubt stays (a ranking signal): drop the proposal; the next pass offers it again.
                    self._drop(proposal_id)
                    settled += 1
                    continue
                if now_s() < self._judging_paused_until:
                    open_proposal.not_before_s = self._judging_paused_until
                    continue
                self._deciding.add(proposal_id)
                taken.append(open_proposal)
        if llm is None or not taken:
            return settled
        # The model calls happen without the lock: reviewers and other proposals go on meanwhile.
        try:
            return settled + self._judge_supersessions(taken, llm)
        finally:
            with self._lock:
                for open_proposal in taken:
                    self._deciding.discard(open_proposal.proposal.id)

    def _suggestion_keeps(self, open_proposal: OpenProposal) -> bool:
        """Whether the proposal's suggested text says every current member's dates, numbers and names."""
        records, _ = self.engine.get(open_proposal.ids)
        return keeps(records, open_proposal.proposal.suggested_text)

    def _consolidate_by_llm(self, open_proposal: OpenProposal, llm: ChatAbstractor, *, count_settled: bool) -> int:
        proposal_id = open_proposal.proposal.id
        try:
            records, _ = self.engine.get(open_proposal.ids)
            text = llm.write(records, max_bytes=self.engine.limits.max_content_bytes)
        except AbstractionError as error:
            log.warning("LLM consolidation of %s failed, members left as they are: %s", proposal_id, error)
            with self._lock:
                open_proposal.not_before_s = now_s() + LLM_RETRY_S
            return 0
        with self._lock:
            if proposal_id not in self._open:
                return 0
            written = self._apply(open_proposal, review_pb2.VERDICT_ACCEPT, open_proposal.ids, text, "policy: LLM", "")
            return 1 if count_settled else written

    def _judge_supersessions(self, taken: Sequence[OpenProposal], llm: ChatAbstractor) -> int:
        """Settle each proposal by the chat endpoint's verdict on its pair; returns how many were settled.

        A pair judged before gets its cached verdict (no call, no budget); the others are asked up to
        LLM_JUDGE_BATCH_PAIRS a call. A failed call leaves its pairs and the ones after it in doubt, to be retried
        after LLM_RETRY_S.
        """
        settled = 0
        asking: list[tuple[OpenProposal, Pair]] = []
        for open_proposal in taken:
            records = self._doubt(*open_proposal.ids)
            if records is None:
                with self._lock:
                    self._drop(open_proposal.proposal.id)
                settled += 1
                continue
            cached = self.verdicts.get(verdict_key(llm.model, *records))
            if cached is None:
                asking.append((open_proposal, records))
                continue
            self.llm_cache_hits += 1
            settled += self._settle_supersession(open_proposal, cached, llm, cached=True)
        for start in range(0, len(asking), LLM_JUDGE_BATCH_PAIRS):
            chunk = asking[start : start + LLM_JUDGE_BATCH_PAIRS]
            verdicts, failed = self._ask(llm, [records for _, records in chunk])
            for (open_proposal, records), replaces in zip(chunk, verdicts, strict=True):
                if replaces is None:
                    continue
                self.llm_pairs_judged += 1
                self.verdicts.put(verdict_key(llm.model, *records), replaces)
                settled += self._settle_supersession(open_proposal, replaces, llm, cached=False)
            if failed:
                unjudged = [p for (p, _), v in zip(chunk, verdicts, strict=True) if v is None]
                self._pause(unjudged + [p for p, _ in asking[start + LLM_JUDGE_BATCH_PAIRS :]])
                break
        return settled

    def _ask(self, llm: ChatAbstractor, pairs: Sequence[Pair]) -> tuple[list[bool | None], bool]:
        """The chat endpoint's verdict on each pair (None: not judged) and whether a call failed.

        Several pairs go in one call; the pairs its answer left without a verdict (or all, if the answer cannot be
        read) are asked again one a call, never guessed. A call that fails (the endpoint down, a single verdict
        that cannot be read) ends the asking.
        """
        verdicts: list[bool | None] = [None] * len(pairs)
        if len(pairs) > 1:
            self.llm_calls += 1
            self.llm_judgements += len(pairs)
            try:
                verdicts = llm.judge_batch(pairs)
            except UnusableAnswer as error:
                log.warning("LLM batch judgement of %d pairs unreadable, asking one by one: %s", len(pairs), error)
            except AbstractionError as error:
                log.warning("LLM batch judgement of %d pairs failed, they stay in doubt: %s", len(pairs), error)
                self.llm_failures += 1
                return verdicts, True
            if None in verdicts:
                self.llm_failures += 1
        for index, verdict in enumerate(verdicts):
            if verdict is not None:
                continue
            older, newer = pairs[index]
            self.llm_calls += 1
            self.llm_judgements += 1
            try:
                verdicts[index] = llm.judge(older, newer)
            except AbstractionError as error:
                log.warning("LLM judgement failed, memory %d stays in doubt: %s", older.id, error)
                self.llm_failures += 1
                return verdicts, True
        return verdicts, False

    def _pause(self, waiting: Sequence[OpenProposal]) -> None:
        """After a failed call: no judgement before LLM_RETRY_S from now, and ``waiting`` retried then."""
        with self._lock:
            self._judging_paused_until = now_s() + LLM_RETRY_S
            for open_proposal in waiting:
                open_proposal.not_before_s = self._judging_paused_until

    def _settle_supersession(
        self, open_proposal: OpenProposal, replaces: bool, llm: ChatAbstractor, *, cached: bool
    ) -> int:
        """Apply the chat endpoint's verdict on ``open_proposal``'s pair; returns 1 once settled."""
        proposal_id = open_proposal.proposal.id
        older, newer = open_proposal.ids
        with self._lock:
            if proposal_id not in self._open:
                return 0
            if self._doubt(older, newer) is None:  # a caller's Restore or Supersede came first: it stands
                self._drop(proposal_id)
                return 1
            verdict = review_pb2.VERDICT_ACCEPT if replaces else review_pb2.VERDICT_REJECT
            answer = "the newer memory replaces it" if replaces else "both hold"
            note = f"model {llm.model!r} judged {answer}" + (" (its verdict on the same pair before)" if cached else "")
            self._apply(open_proposal, verdict, open_proposal.ids, "", "policy: LLM", note)
            return 1

    def _doubt(self, older: int, newer: int) -> tuple[memory_pb2.Memory, memory_pb2.Memory] | None:
        """Both records while ``older`` is still current and doubted by ``newer``; None once that has changed."""
        records, missing = self.engine.get([older, newer])
        if missing:
            return None
        first, second = records
        current = first.state in (memory_pb2.MEMORY_STATE_ACTIVE, memory_pb2.MEMORY_STATE_ARCHIVED)
        return (first, second) if current and first.possibly_outdated_by == newer else None

    def _drop(self, proposal_id: str) -> None:
        """Settle a proposal without applying anything (lock held)."""
        self.engine.store.apply(lambda txn: txn.delete(CF_META, PROPOSAL_PREFIX + proposal_id.encode()))
        self._settled(proposal_id)

    # ---- stats -------------------------------------------------------------------------------

    def stats(self) -> memory_service_pb2.ReviewStats:
        """Open proposals per kind, reviewers attached, the last pass."""
        with self._lock:
            kinds = [p.proposal.kind for p in self._open.values()]
            return memory_service_pb2.ReviewStats(
                open_consolidations=kinds.count(review_pb2.PROPOSAL_KIND_CONSOLIDATE),
                open_evictions=kinds.count(review_pb2.PROPOSAL_KIND_EVICT),
                open_reinterpretations=kinds.count(review_pb2.PROPOSAL_KIND_REINTERPRET),
                open_supersessions=kinds.count(review_pb2.PROPOSAL_KIND_SUPERSEDE),
                reviewers=sum(not r.observer for r in self._reviewers.values()),
                last_pass=self.last_pass,
            )


def _group_reason(records: Sequence[memory_pb2.Memory], similarity: float) -> str:
    successes = sum(r.successes for r in records)
    failures = sum(r.failures for r in records)
    first = records[0]
    about = (
        f"strategies for task {first.task_signature!r}"
        if first.kind == memory_pb2.MEMORY_KIND_STRATEGY and first.task_signature
        else f"{memory_pb2.MemoryKind.Name(first.kind).removeprefix('MEMORY_KIND_').lower()} memories"
        + (f" about {first.entity!r}" if first.entity else "")
    )
    return (
        f"{len(records)} {about} at cosine similarity >= {similarity:g}; "
        f"together {successes:g} successes and {failures:g} failures"
    )
