"""``MemevoStore`` (LangGraph's ``BaseStore``) against a live sidecar.

LangGraph ships no reusable store test suite, so its own ``InMemoryStore`` is
the reference: the same operations run on both stores and what the README says
maps exactly (get, put as upsert, delete, namespace-prefix search, filters,
list_namespaces with prefix/suffix/wildcards/max_depth/limit/offset) must give
the same answers. Ranking by a query is memevo's own, so it is checked by what
it must find.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Sidecar, start_sidecar
from langgraph.store.base import BaseStore, InvalidNamespaceError, Item
from langgraph.store.memory import InMemoryStore

from memevo.client import FactKey, MemoryClient, MemoryKind, MemoryState
from memevo.integrations.langgraph import MemevoStore, entity_of

pytestmark = pytest.mark.integration

ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice", "prefs"), "contact", {"text": "Alice wants to be contacted by email.", "priority": 2}),
    (("users", "alice", "prefs"), "language", {"text": "Alice writes Python.", "priority": 5, "team": "core"}),
    (("users", "alice", "notes"), "n1", {"text": "Alice is on call this week.", "priority": 1, "team": "core"}),
    (("users", "bob", "prefs"), "contact", {"text": "Bob prefers chat messages.", "priority": 3, "team": "web"}),
    (("docs", "v1"), "readme", {"text": "The deploy guide lives in the wiki.", "tags": ["ops", "deploy"]}),
    (("docs", "v2", "draft"), "readme", {"text": "Draft: deploys go through the pipeline.", "nested": {"a": 1}}),
]


@pytest.fixture(scope="module")
def text_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path_factory.mktemp("langgraph-data"), "--sweep-interval-s", "0", embedder="local")
    yield process
    process.stop()


@pytest.fixture
def store(text_sidecar: Sidecar, request: pytest.FixtureRequest) -> Iterator[MemevoStore]:
    """A store in a memevo namespace of its own (the test's name), so tests never see each other's items."""
    namespace = "lg-" + request.node.name.replace("_", "-")[:100]
    with MemevoStore(text_sidecar.unix_target, namespace=namespace) as memevo_store:
        yield memevo_store


def fill(*stores: BaseStore) -> None:
    for target in stores:
        for namespace, key, value in ITEMS:
            target.put(namespace, key, value)


def keyed(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return sorted((item.namespace, item.key, item.value) for item in items)


def test_get_put_delete_and_search_agree_with_langgraphs_in_memory_store(store: MemevoStore) -> None:
    reference = InMemoryStore()
    fill(store, reference)
    for namespace, key, _ in ITEMS:
        mine, theirs = store.get(namespace, key), reference.get(namespace, key)
        assert isinstance(mine, Item)
        assert isinstance(theirs, Item)
        assert (mine.namespace, mine.key, mine.value) == (theirs.namespace, theirs.key, theirs.value)
    assert store.get(("users", "alice", "prefs"), "absent") is None
    assert store.get(("users", "carol"), "contact") is None

    for prefix in [(), ("users",), ("users", "alice"), ("users", "alice", "prefs"), ("docs",), ("nobody",)]:
        assert keyed(store.search(prefix, limit=50)) == keyed(reference.search(prefix, limit=50)), prefix
    filters: list[dict[str, Any]] = [
        {"team": "core"},
        {"priority": {"$gte": 2}},
        {"priority": {"$gt": 1, "$lt": 5}},
        {"team": {"$ne": "core"}},
        {"tags": ["ops", "deploy"]},
        {"nested": {"a": 1}},
        {"team": "core", "priority": 5},
    ]
    for flt in filters:
        # Under ("users",) every item has a priority: the reference store fails comparing a missing field.
        prefix = ("users",) if "priority" in flt else ()
        mine = store.search(prefix, filter=flt, limit=50)
        assert keyed(mine) == keyed(reference.search(prefix, filter=flt, limit=50)), flt
    assert store.search((), filter={"priority": {"$gte": 2}}, limit=50) != []  # a missing field does not match

    # A put to an existing key replaces its value; a delete removes it from get and search.
    for target in (store, reference):
        target.put(("users", "alice", "prefs"), "contact", {"text": "Alice wants phone calls.", "priority": 4})
        target.delete(("users", "bob", "prefs"), "contact")
    for prefix in [(), ("users",)]:
        assert keyed(store.search(prefix, limit=50)) == keyed(reference.search(prefix, limit=50))
    assert store.get(("users", "bob", "prefs"), "contact") is None
    store.delete(("users", "bob", "prefs"), "contact")  # deleting what is gone is not an error, as in LangGraph

    page = store.search(("users",), limit=2, offset=1)
    everything = store.search(("users",), limit=50)
    assert [(i.namespace, i.key) for i in page] == [(i.namespace, i.key) for i in everything[1:3]]
    assert [i.updated_at for i in everything] == sorted((i.updated_at for i in everything), reverse=True)


def test_list_namespaces_agrees_with_langgraphs_in_memory_store(store: MemevoStore) -> None:
    reference = InMemoryStore()
    fill(store, reference)
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"prefix": ("users", "*", "prefs")},
        {"suffix": ("prefs",)},
        {"suffix": ("*", "draft")},
        {"prefix": ("users",), "max_depth": 2},
        {"max_depth": 1},
        {"limit": 2, "offset": 1},
        {"prefix": ("nobody",)},
    ]
    for case in cases:
        assert store.list_namespaces(**case) == reference.list_namespaces(**case), case


def test_query_search_is_a_governed_recall_within_the_prefix(store: MemevoStore) -> None:
    fill(store)
    found = store.search(("users",), query="How do I reach Bob?", limit=3)
    assert found[0].key == "contact"
    assert found[0].namespace == ("users", "bob", "prefs")
    assert found[0].score is not None
    assert all(item.namespace[0] == "users" for item in found)
    deploys = store.search(("docs",), query="deploy pipeline", limit=5)
    assert {item.namespace for item in deploys} == {("docs", "v1"), ("docs", "v2", "draft")}
    filtered = store.search(("users",), query="Alice", filter={"team": "core"}, limit=5)
    assert {item.key for item in filtered} == {"language", "n1"}

    # An updated value replaces the old one in recall: the superseded version is history, not a result.
    store.put(("users", "bob", "prefs"), "contact", {"text": "Bob now wants phone calls only.", "priority": 3})
    found = store.search(("users", "bob"), query="How do I reach Bob?", limit=5)
    assert [item.value["text"] for item in found] == ["Bob now wants phone calls only."]


def test_an_update_is_governed_history_and_keeps_created_at(store: MemevoStore, text_sidecar: Sidecar) -> None:
    namespace = ("users", "dana")
    store.put(namespace, "city", {"text": "Dana lives in Lisbon."})
    first = store.get(namespace, "city")
    store.put(namespace, "city", {"text": "Dana lives in Lisbon."})  # the same value: confirmed, not a new version
    store.put(namespace, "city", {"text": "Dana moved to Porto."})
    second = store.get(namespace, "city")
    assert first is not None
    assert second is not None
    assert second.value == {"text": "Dana moved to Porto."}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    with MemoryClient(text_sidecar.unix_target) as client:
        history = client.history(FactKey(entity=entity_of(namespace), attribute="city", namespace=store.namespace))
        assert [m.state for m in history.versions] == [MemoryState.OBSOLETE, MemoryState.ACTIVE]
        assert history.versions[0].superseded_by == history.versions[1].id
        store.delete(namespace, "city")
        history = client.history(FactKey(entity=entity_of(namespace), attribute="city", namespace=store.namespace))
        assert [m.state for m in history.versions] == [MemoryState.OBSOLETE, MemoryState.OBSOLETE]
    assert store.get(namespace, "city") is None
    store.put(namespace, "city", {"text": "Dana is back in Lisbon."})
    again = store.get(namespace, "city")
    assert again is not None
    assert again.created_at > second.created_at


def test_delete_without_history_erases_every_version(text_sidecar: Sidecar) -> None:
    with MemevoStore(text_sidecar.unix_target, namespace="lg-erase", keep_history_on_delete=False) as store:
        store.put(("users", "erin"), "email", {"text": "erin@old.example"})
        store.put(("users", "erin"), "email", {"text": "erin@new.example"})
        store.delete(("users", "erin"), "email")
        assert store.get(("users", "erin"), "email") is None
        with MemoryClient(text_sidecar.unix_target) as client:
            key = FactKey(entity=entity_of(("users", "erin")), attribute="email", namespace="lg-erase")
            assert client.history(key).versions == []


def test_delete_without_history_erases_the_items_versions_not_prose_read_as_its_key(text_sidecar: Sidecar) -> None:
    # A fact key's history lists plain-text statements perception read as it (issue 40); they are not the item's.
    namespace = ("users", "fern")
    with MemevoStore(text_sidecar.unix_target, namespace="lg-erase-prose", keep_history_on_delete=False) as store:
        store.put(namespace, "employer", {"text": "Fern works at Shopify."})
        with MemoryClient(text_sidecar.unix_target) as client:
            said = client.remember(
                "Fern's employer is Canva now.",
                namespace="lg-erase-prose",
                kind=MemoryKind.FACT,
                entity=entity_of(namespace),
            ).memory
            key = FactKey(entity=entity_of(namespace), attribute="employer", namespace="lg-erase-prose")
            assert said.id in [m.id for m in client.history(key).versions]
            store.delete(namespace, "employer")
            assert [m.id for m in client.history(key).versions] == [said.id]
            assert client.get_one(said.id).content == "Fern's employer is Canva now."


def test_async_methods_agree_with_the_sync_ones(store: MemevoStore) -> None:
    async def session() -> None:
        for namespace, key, value in ITEMS:
            await store.aput(namespace, key, value)
        item = await store.aget(("users", "alice", "prefs"), "language")
        assert item is not None
        assert item.value["text"] == "Alice writes Python."
        assert keyed(await store.asearch(("users",), limit=50)) == keyed(store.search(("users",), limit=50))
        assert await store.alist_namespaces(prefix=("docs",)) == [("docs", "v1"), ("docs", "v2", "draft")]
        found = await store.asearch(("users",), query="Who writes Python?", limit=1)
        assert found[0].key == "language"
        await store.adelete(("users", "alice", "prefs"), "language")
        assert await store.aget(("users", "alice", "prefs"), "language") is None

    asyncio.run(session())
    asyncio.run(session())  # a second event loop: the store makes a new asyncio channel for it


def test_bad_input_raises_what_langgraph_raises(store: MemevoStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("users", "a.b"), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"text": "x"})
    with pytest.raises(NotImplementedError):
        store.put(("users",), "k", {"text": "x"}, ttl=5)
    assert store.search(("users",)) == []
    for value in (["a list"], "a string", 3, ("a", "tuple")):
        with pytest.raises(TypeError, match=f"the value must be a dict .*not {type(value).__name__}"):
            store.put(("users",), "k", value)  # type: ignore[arg-type]
    assert store.search(("users",)) == [], "nothing written"
    store.put(("users",), "k", {"priority": 1})
    with pytest.raises(ValueError, match="not supported"):
        store.search(("users",), filter={"priority": {"$in": [1]}})


def test_the_readme_snippet_works_as_pasted(text_sidecar: Sidecar, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    snippet = readme.split("## As LangGraph's store", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(snippet.replace("unix:///run/user/1000/memevo.sock", text_sidecar.unix_target), "README", "exec"), {})
    printed = capsys.readouterr().out
    assert "'recalled': []" in printed, printed
    with MemevoStore(text_sidecar.unix_target, namespace="my-agent") as store:
        item = store.get(("users", "alice"), "last_message")
        assert item is not None
        assert item.value == {"text": "I moved to Porto."}
