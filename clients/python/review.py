"""A reviewer session: the agent, with its own LLM, decides the sidecar's consolidation and eviction proposals.

Usage::

    with client.reviewer("planner-llm") as session:
        for proposal in session.proposals():
            if proposal.kind == review_pb2.PROPOSAL_KIND_CONSOLIDATE:
                session.accept(proposal.id, text=my_llm.summarise([m.content for m in proposal.memories]))
            else:
                session.reject(proposal.id, note="keep them")

Proposals arrive as ``memevo.v1.Proposal`` messages (their memories with
current scores). Each proposal is decided once, by whichever attached
reviewer answers first; ``settled`` holds the ids the sidecar reported as
decided (by this session, another reviewer, or the policy at the deadline).
Leaving the ``with`` block closes the stream: undecided proposals stay open
for other reviewers and for the policy.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, cast

import grpc

from memevo.v1 import memory_service_pb2 as pb
from memevo.v1 import review_pb2

from .errors import from_rpc_error

_END = None


class ReviewSession:
    """One attached reviewer; thread-safe for decisions, one thread iterating ``proposals()``."""

    def __init__(
        self,
        stub: object,
        name: str,
        kinds: Sequence[int],
        *,
        metadata: Sequence[tuple[str, str]] | None,
        timeout_s: float | None,
    ) -> None:
        self._outbox: queue.Queue[pb.ReviewRequest | None] = queue.Queue()
        self._outbox.put(pb.ReviewRequest(hello=pb.ReviewerHello(reviewer=name, kinds=cast(Any, list(kinds)))))
        self._lock = threading.Lock()
        self.settled: set[str] = set()
        """Ids of proposals the sidecar reported as decided."""
        self._call = stub.Review(  # type: ignore[attr-defined]
            self._requests(), timeout=timeout_s, metadata=metadata
        )

    def _requests(self) -> Iterator[pb.ReviewRequest]:
        while True:
            item = self._outbox.get()
            if item is _END:
                return
            yield item

    def proposals(self) -> Iterator[review_pb2.Proposal]:
        """Proposals to decide, as they arrive; ends when the session is closed or the sidecar stops."""
        try:
            for response in self._call:
                if response.WhichOneof("message") == "proposal":
                    if response.proposal.id not in self.settled:
                        yield response.proposal
                else:
                    with self._lock:
                        self.settled.add(response.settled_proposal_id)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(err) from err

    def _decide(self, proposal_id: str, verdict: int, *, text: str, ids: Sequence[int], note: str) -> None:
        decision = review_pb2.Decision(
            proposal_id=proposal_id,
            verdict=verdict,  # type: ignore[arg-type]
            abstraction_text=text,
            memory_ids=list(ids),
            note=note,
        )
        self._outbox.put(pb.ReviewRequest(decision=decision))

    def accept(self, proposal_id: str, *, text: str = "", note: str = "") -> None:
        """Apply the proposal; for a consolidation, ``text`` is the abstraction (empty = the suggested text)."""
        self._decide(proposal_id, review_pb2.VERDICT_ACCEPT, text=text, ids=(), note=note)

    def reject(self, proposal_id: str, *, note: str = "") -> None:
        """Leave the memories as they are."""
        self._decide(proposal_id, review_pb2.VERDICT_REJECT, text="", ids=(), note=note)

    def modify(self, proposal_id: str, memory_ids: Sequence[int], *, text: str = "", note: str = "") -> None:
        """Apply the proposal to ``memory_ids`` only (a subset of its memories), with ``text`` for a consolidation."""
        self._decide(proposal_id, review_pb2.VERDICT_MODIFY, text=text, ids=memory_ids, note=note)

    def close(self) -> None:
        """Detach: stop sending and cancel the stream. Undecided proposals stay open on the sidecar."""
        self._outbox.put(_END)
        self._call.cancel()

    def __enter__(self) -> ReviewSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
