"""The console's change-log digest: counts over time agree with a replay of the log; reasons are classified."""

from __future__ import annotations

from typing import Any

import numpy as np

from memevo.sidecar.console.digest import ChangeDigest, reason_class
from memevo.v1 import events_pb2, memory_pb2

E = events_pb2
S = memory_pb2


def _event(seq: int, kind: int, memory: int, before: int, after: int, t: float, reason: str = "") -> Any:
    event = E.ChangeEvent(
        sequence=seq, type=kind, memory_id=memory, from_state=before, to_state=after, reason=reason,
        kind=S.MEMORY_KIND_FACT if memory % 2 else S.MEMORY_KIND_EPISODE,
    )  # fmt: skip
    event.recorded_at.FromNanoseconds(int(t * 1e9))
    return event


def _log(rng: np.random.Generator, size: int) -> list[Any]:
    """Creations, archivals, supersessions and evictions at increasing times."""
    events, states, seq, t = [], {}, 0, 1_000.0
    for _ in range(size):
        seq += 1
        t += float(rng.exponential(3.0))
        live = [m for m, s in states.items() if s != S.MEMORY_STATE_EVICTED]
        if not live or rng.random() < 0.5:
            memory = len(states) + 1
            states[memory] = S.MEMORY_STATE_ACTIVE
            events.append(_event(seq, E.CHANGE_EVENT_TYPE_CREATED, memory, 0, S.MEMORY_STATE_ACTIVE, t, "remember"))
            continue
        memory = int(rng.choice(live))
        before = states[memory]
        after = int(rng.choice([S.MEMORY_STATE_ARCHIVED, S.MEMORY_STATE_OBSOLETE, S.MEMORY_STATE_EVICTED]))
        kind = E.CHANGE_EVENT_TYPE_EVICTED if after == S.MEMORY_STATE_EVICTED else E.CHANGE_EVENT_TYPE_STATE_CHANGED
        states[memory] = after
        events.append(_event(seq, kind, memory, before, after, t, "sweep"))
    return events


def test_series_end_at_the_replayed_counts_and_never_go_negative() -> None:
    rng = np.random.default_rng(5)
    events = _log(rng, 2_000)
    digest = ChangeDigest(source=None, token=None)  # type: ignore[arg-type]  # fed by hand, never started
    for event in events:
        digest._take(event)
    digest._flush()
    series = digest.series(bins=40, now_s=events[-1].recorded_at.seconds + 1.0)
    final: dict[int, int] = {}
    for event in events:
        final[event.memory_id] = event.to_state
    for state in (S.MEMORY_STATE_ACTIVE, S.MEMORY_STATE_ARCHIVED, S.MEMORY_STATE_OBSOLETE, S.MEMORY_STATE_EVICTED):
        line = series["states"][S.MemoryState.Name(state)]
        assert len(line) == 40
        assert min(line) >= 0
        assert line[-1] == sum(1 for s in final.values() if s == state)
    live = sum(1 for s in final.values() if s != S.MEMORY_STATE_EVICTED)
    assert sum(line[-1] for line in series["kinds"].values()) == live
    assert sum(series["created"]) == len(final)
    sample = digest.sample(per_kind=10, seed=1)
    for code, ids in sample.items():
        assert ids.size <= 10
        for memory in ids.tolist():
            assert final[memory] in (S.MEMORY_STATE_ACTIVE, S.MEMORY_STATE_ARCHIVED)
            assert (code == S.MEMORY_KIND_FACT) == bool(memory % 2)


def test_an_empty_log_has_empty_series() -> None:
    digest = ChangeDigest(source=None, token=None)  # type: ignore[arg-type]
    assert digest.series()["times"] == []
    assert digest.sample(per_kind=5) == {}


def test_reasons_are_classified() -> None:
    superseded = E.CHANGE_EVENT_TYPE_SUPERSEDED
    changed = E.CHANGE_EVENT_TYPE_STATE_CHANGED
    assert reason_class(superseded, "superseded by memory 7") == "keyed"
    assert reason_class(superseded, "superseded by memory 7 (inferred: template of city)") == "inferred"
    assert reason_class(E.CHANGE_EVENT_TYPE_UPDATED, "soft conflict with memory 9") == "soft conflict"
    assert reason_class(superseded, "review (reviewer console)") == "review decision"
    assert reason_class(changed, "not replaced by memory 4 (reviewer console)") == "review decision"
    assert reason_class(changed, "consolidated into 12") == "consolidation"
    assert reason_class(E.CHANGE_EVENT_TYPE_EVICTED, "sweep: value below evict threshold") == "eviction"
    assert reason_class(changed, "sweep: value below archive threshold") == "governance"
    assert reason_class(E.CHANGE_EVENT_TYPE_CREATED, "remember") == "created"
    # A person's corrections from the console (issue 42, item 2); an agent's own Forget or Supersede is not one.
    assert reason_class(changed, "forget: console: she quit coffee") == "console"
    assert reason_class(superseded, "superseded: console") == "console"
    assert reason_class(E.CHANGE_EVENT_TYPE_CREATED, "superseded: console: corrected to 'Braga'") == "console"
    assert reason_class(changed, "restored: console") == "console"
    assert reason_class(changed, "forget: the user asked") == "forget"
    assert reason_class(superseded, "superseded: the agent's newer plan") == "keyed"
