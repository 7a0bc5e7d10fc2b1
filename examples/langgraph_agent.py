"""A LangGraph agent whose long-term memory is a memevo sidecar, through ``MemevoStore``.

Run it from the repository root (after ``pip install -e '.[langgraph]'``)::

    python examples/langgraph_agent.py

It starts its own sidecar on a temporary directory (the offline ``local``
embedder, as ``python_agent.py`` does), compiles a three-node graph with the
store (recall -> model -> remember) and plays a scripted conversation. The
"model" is a stand-in with no LLM key: it answers from the recalled memories
and, when the user states a fact ("I moved to Porto"), asks the graph to store
it under the user's namespace. The session shows that an updated fact replaces
the old one in what the next turns recall, that another user's memories stay
in their own namespace, and that memevo keeps the old value as history. Exits 1
when an expected effect did not happen, so CI catches regressions.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from python_agent import sidecar

from memevo.client import FactKey, MemoryClient, MemoryState
from memevo.integrations.langgraph import MemevoStore, entity_of

STATEMENT = re.compile(r"^I (?:live in|moved to) (?P<city>[A-Z][a-z]+)\.$")


class Turn(TypedDict, total=False):
    """The graph's state for one turn of one user."""

    user: str
    message: str
    recalled: list[str]
    reply: str
    learned: dict[str, Any]


def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    """What the store recalls for the message, from this user's namespace only."""
    found = store.search(("users", state["user"]), query=state["message"], limit=3)
    return {"recalled": [item.value["text"] for item in found]}


def model(state: Turn) -> dict[str, Any]:
    """A scripted stand-in for an LLM: answers from the recalled memories, learns stated facts."""
    stated = STATEMENT.match(state["message"])
    if stated:
        city = stated["city"]
        return {"reply": f"Noted: you live in {city}.", "learned": {"city": {"text": f"The user lives in {city}."}}}
    lives = [text for text in state["recalled"] if text.startswith("The user lives in")]
    reply = f"From memory: {lives[0]}" if lives else "I don't know where you live yet."
    return {"reply": reply, "learned": {}}


def remember(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    """Write what the model learned, one item per attribute: a new value replaces the old one."""
    for key, value in state.get("learned", {}).items():
        store.put(("users", state["user"]), key, value)
    return {}


def build_graph(store: BaseStore) -> Any:
    """recall -> model -> remember, compiled with ``store`` as the graph's long-term memory."""
    graph = StateGraph(Turn)
    graph.add_node("recall", recall)
    graph.add_node("model", model)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "model")
    graph.add_edge("model", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


SCRIPT = [
    ("alice", "I live in Lisbon."),
    ("alice", "Where do I live?"),
    ("bob", "Where do I live?"),
    ("alice", "I moved to Porto."),
    ("alice", "Where do I live?"),
]


def main() -> int:
    failures: list[str] = []

    def expect(condition: bool, what: str) -> None:
        print(f"  {'ok' if condition else 'FAILED'}: {what}")
        if not condition:
            failures.append(what)

    with sidecar() as target, MemevoStore(target, namespace="langgraph-example") as store:
        graph = build_graph(store)
        replies = []
        for user, message in SCRIPT:
            out = graph.invoke({"user": user, "message": message})
            replies.append(out["reply"])
            print(f"{user}: {message}\n  agent: {out['reply']}")
        print()
        expect(replies[1] == "From memory: The user lives in Lisbon.", "alice's city is recalled in the next turn")
        expect(replies[2] == "I don't know where you live yet.", "bob does not see alice's memories")
        expect(replies[4] == "From memory: The user lives in Porto.", "after the move only Porto is recalled")
        item = store.get(("users", "alice"), "city")
        expect(item is not None and item.value["text"] == "The user lives in Porto.", "the store holds Porto")
        with MemoryClient(target) as memory:
            key = FactKey(entity=entity_of(("users", "alice")), attribute="city", namespace=store.namespace)
            versions = memory.history(key).versions
            print("  alice's city in memevo's history: " + ", ".join(f"{v.content} ({v.state.name})" for v in versions))
            states = [v.state for v in versions]
            expect(states == [MemoryState.OBSOLETE, MemoryState.ACTIVE], "memevo keeps Lisbon as history")

    print(f"\nFAILED: {'; '.join(failures)}" if failures else "\ndone: every expected effect happened")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
