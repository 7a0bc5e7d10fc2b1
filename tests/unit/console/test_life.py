"""The life page's API: a fact key rewritten many times shows its newest versions and only their events."""

from __future__ import annotations

from typing import Any

from memevo.sidecar.console.server import LIFE_VERSIONS, Console
from memevo.v1 import events_pb2, memory_pb2, memory_service_pb2


class _Source:
    def __init__(self, versions: int) -> None:
        self.response = memory_service_pb2.HistoryResponse()
        for memory in range(1, versions + 1):
            self.response.versions.add(id=memory, content=f"lives in city {memory}")
            self.response.events.add(
                sequence=2 * memory - 1, memory_id=memory, type=events_pb2.CHANGE_EVENT_TYPE_CREATED, reason="remember"
            )
            self.response.events.add(
                sequence=2 * memory, memory_id=memory, type=events_pb2.CHANGE_EVENT_TYPE_SUPERSEDED,
                reason=f"superseded by memory {memory + 1}", to_state=memory_pb2.MEMORY_STATE_OBSOLETE,
            )  # fmt: skip

    def history(self, request: Any, token: str | None) -> memory_service_pb2.HistoryResponse:
        return self.response

    def close(self) -> None:
        pass


def _life(versions: int) -> dict[str, Any]:
    console = Console("127.0.0.1:0", _Source(versions))  # type: ignore[arg-type]
    try:
        return console.life({"ns": ["default"], "entity": ["user:a"], "attribute": ["city"]}, None)
    finally:
        console._server.server_close()


def test_a_short_life_is_shown_whole() -> None:
    out = _life(3)
    assert [v["id"] for v in out["versions"]] == ["1", "2", "3"]
    assert len(out["events"]) == 6
    assert (out["versions_total"], out["events_total"]) == (3, 6)
    assert out["events"][1]["reason_class"] == "keyed"


def test_a_long_life_shows_the_newest_versions_and_their_events() -> None:
    total = LIFE_VERSIONS + 50
    out = _life(total)
    shown = [int(v["id"]) for v in out["versions"]]
    assert shown == list(range(51, total + 1))
    assert {int(e["memory_id"]) for e in out["events"]} == set(shown)
    assert len(out["events"]) == 2 * LIFE_VERSIONS
    assert (out["versions_total"], out["events_total"]) == (total, 2 * total)


def test_the_versions_that_still_hold_are_marked_current() -> None:
    source = _Source(0)
    active, obsolete, archived = (
        memory_pb2.MEMORY_STATE_ACTIVE,
        memory_pb2.MEMORY_STATE_OBSOLETE,
        memory_pb2.MEMORY_STATE_ARCHIVED,
    )
    source.response.versions.add(id=1, state=obsolete, superseded_by=2).valid_to.seconds = 2_000
    source.response.versions.add(id=2, state=active).inferred.attribute = "city"  # a prose version
    source.response.versions.add(id=3, state=active).valid_to.seconds = 3_000  # arrived late: history only
    source.response.versions.add(id=4, state=archived)
    console = Console("127.0.0.1:0", source)  # type: ignore[arg-type]
    try:
        out = console.life({"ns": ["default"], "entity": ["user:a"], "attribute": ["city"]}, None)
    finally:
        console._server.server_close()
    assert [(v["id"], v["current"]) for v in out["versions"]] == [("1", False), ("2", True), ("3", False), ("4", True)]
    assert out["versions"][1]["inferred"]["attribute"] == "city"
