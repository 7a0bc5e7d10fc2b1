"""``memevo mcp`` spawned as a real process and driven by the MCP SDK's own client, against a live sidecar.

The sidecar embeds text (the bundled ``local`` embedder), since MCP tools take
text only. Each test runs its own event loop with ``anyio.run`` and bounds its
whole body with ``anyio.fail_after``, so a server that stops answering fails the
test instead of hanging it.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from conftest import Sidecar, start_sidecar
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, TextResourceContents

from memevo.client import MemoryClient, MemoryState
from memevo.integrations.mcp_server import ENTITIES_URI, beliefs_uri, fact_uri, memory_uri

pytestmark = pytest.mark.integration

BODY_LIMIT_S = 180.0
"""Upper bound of one test's MCP conversation, seconds."""
TOOLS = {"remember", "recall", "build_context", "history", "beliefs", "forget", "report_outcome"}


@pytest.fixture(scope="module")
def text_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """One sidecar with the local embedder for the module; each test writes to its own namespace."""
    process = start_sidecar(tmp_path_factory.mktemp("mcp-data"), "--sweep-interval-s", "0", embedder="local")
    yield process
    process.stop()


def mcp_command(target: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "memevo.sidecar.cli", "mcp", "--sidecar", target, *extra]


@asynccontextmanager
async def mcp_client(target: str, namespace: str, *extra: str) -> AsyncIterator[Client]:
    """An MCP client session with a ``memevo mcp`` process over stdio."""
    command = mcp_command(target, "--namespace", namespace, *extra)
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(BODY_LIMIT_S):
            await body()

    anyio.run(bounded)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call_ok(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return text_of(result), result.structured_content


async def call_error(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} {arguments} succeeded: {text_of(result)}"
    return text_of(result)


async def read_json(client: Client, uri: str) -> Any:
    result = await client.read_resource(uri)
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    assert content.mime_type == "application/json"
    return json.loads(content.text)


def test_tools_and_resource_templates_are_listed_with_schemas(text_sidecar: Sidecar) -> None:
    async def body() -> None:
        async with mcp_client(text_sidecar.unix_target, "mcp-list") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():
                assert len(tool.description or "") > 80, tool.name
                assert tool.input_schema["type"] == "object"
                assert tool.input_schema["additionalProperties"] is False, tool.name
                assert tool.output_schema is not None, tool.name
                for name, prop in tool.input_schema["properties"].items():
                    assert prop.get("description"), f"{tool.name}.{name} has no description"
            assert tools["recall"].input_schema["required"] == ["query"]
            assert tools["recall"].input_schema["properties"]["k"]["maximum"] == 100
            assert set(tools["remember"].input_schema["properties"]["kind"]["enum"]) == {
                "fact",
                "preference",
                "episode",
                "strategy",
            }
            assert tools["forget"].annotations is not None
            assert tools["forget"].annotations.destructive_hint
            assert tools["recall"].annotations is not None
            assert tools["recall"].annotations.read_only_hint
            templates = (await client.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} == {
                "memevo://memory/{id}",
                "memevo://fact/{entity}/{attribute}",
                "memevo://beliefs/{entity}",
            }
            assert [r.uri for r in (await client.list_resources()).resources] == [ENTITIES_URI]

    run(body)


def test_every_tool_over_stdio_against_a_live_sidecar(text_sidecar: Sidecar) -> None:
    namespace = "mcp-flow"

    async def body() -> None:
        async with mcp_client(text_sidecar.unix_target, namespace) as client:
            fact = {"attribute": "contact_channel", "value": "email"}
            text, first = await call_ok(
                client,
                "remember",
                {
                    "content": "Alice wants to be contacted by email.",
                    "kind": "fact",
                    "entity": "user:alice",
                    "fact": fact,
                    "source": "user_statement",
                    "importance": 7,
                },
            )
            assert first["outcome"] == "created", text
            assert first["memory"]["state"] == "active"
            assert text == f"remembered #{first['id']} (created)"
            text, second = await call_ok(
                client,
                "remember",
                {
                    "content": "Alice wants to be contacted by phone.",
                    "kind": "fact",
                    "entity": "user:alice",
                    "fact": {"attribute": "contact_channel", "value": "phone"},
                    "source": "user_statement",
                },
            )
            assert second["outcome"] == "superseded_previous"
            assert second["affected_ids"] == [first["id"]]
            assert f"replaced #{first['id']}" in text
            _, episode = await call_ok(
                client,
                "remember",
                {"content": "The team shipped the billing release on Friday.", "kind": "episode", "tags": ["ops"]},
            )
            assert episode["memory"]["kind"] == "episode"
            assert episode["memory"]["tags"] == ["ops"]

            text, recalled = await call_ok(client, "recall", {"query": "How should I contact Alice?", "k": 5})
            ids = [m["id"] for m in recalled["memories"]]
            assert ids[0] == second["id"], text
            assert first["id"] not in ids, "a superseded fact came back as current"
            assert recalled["retrieval_id"]
            assert recalled["retrieval_id"] in text
            assert recalled["memories"][0]["hint"]
            assert recalled["memories"][0]["hint"] in text
            assert "phone" in text.splitlines()[1]

            _, everything = await call_ok(
                client, "recall", {"query": "How should I contact Alice?", "mode": "history", "entity": "user:alice"}
            )
            states = {m["id"]: m["state"] for m in everything["memories"]}
            assert states == {first["id"]: "obsolete", second["id"]: "active"}

            _, only_ops = await call_ok(client, "recall", {"query": "release", "tags": ["ops"]})
            assert [m["id"] for m in only_ops["memories"]] == [episode["id"]]

            text, context = await call_ok(
                client, "build_context", {"query": "Send Alice the weekly status update.", "token_budget": 300}
            )
            assert "phone" in context["text"], text
            assert "email" not in context["text"], text
            assert second["id"] in [item["id"] for item in context["items"]]
            assert text.endswith(f"retrieval_id: {context['retrieval_id']}")

            text, reported = await call_ok(
                client,
                "report_outcome",
                {"retrieval_id": context["retrieval_id"], "outcome": "success", "used_memory_ids": [second["id"]]},
            )
            assert reported == {"updated_count": 1}, text
            with MemoryClient(text_sidecar.unix_target) as direct:
                assert direct.get_one(second["id"]).successes == pytest.approx(1.0)

            text, history = await call_ok(client, "history", {"entity": "user:alice", "attribute": "contact_channel"})
            assert [v["id"] for v in history["versions"]] == [first["id"], second["id"]]
            assert [v["state"] for v in history["versions"]] == ["obsolete", "active"]
            assert history["versions"][0]["superseded_by"] == second["id"]
            assert f"superseded by #{second['id']}" in text
            assert text.startswith("history of user:alice.contact_channel")
            _, lineage = await call_ok(client, "history", {"memory_id": first["id"]})
            assert {v["id"] for v in lineage["versions"]} == {first["id"], second["id"]}
            assert any(e["type"] == "superseded" for e in lineage["events"])

            document = await read_json(client, memory_uri(second["id"]))
            assert document["content"] == "Alice wants to be contacted by phone."
            assert document["supersedes"] == [first["id"]]
            versions = (await read_json(client, fact_uri("user:alice", "contact_channel")))["versions"]
            assert [v["fact"]["value"] for v in versions] == ["email", "phone"]

            text, forgotten = await call_ok(client, "forget", {"ids": [episode["id"]], "reason": "test"})
            assert forgotten == {"forgotten_ids": [episode["id"]], "missing_ids": []}, text
            with MemoryClient(text_sidecar.unix_target) as direct:
                assert direct.get([episode["id"]]) == []
            _, again = await call_ok(client, "forget", {"ids": [episode["id"]]})
            assert again == {"forgotten_ids": [], "missing_ids": [episode["id"]]}

    run(body)


def test_a_fact_changed_in_prose_without_a_kind_retires_the_old_one_and_its_history_shows_both(
    text_sidecar: Sidecar,
) -> None:
    # What a model writes: no kind. Before issue 40 that meant an episode, which nothing ever replaces.
    async def body() -> None:
        async with mcp_client(text_sidecar.unix_target, "mcp-prose") as client:
            employer = {"attribute": "employer", "value": "Shopify"}
            _, old = await call_ok(
                client, "remember", {"content": "Ana works at Shopify.", "entity": "person:ana", "fact": employer}
            )
            assert old["memory"]["kind"] == "fact"
            text, new = await call_ok(
                client, "remember", {"content": "Ana's employer is Canva now.", "entity": "person:ana"}
            )
            assert new["memory"]["kind"] == "fact"
            assert new["outcome"] == "superseded_previous", text
            assert new["affected_ids"] == [old["id"]]
            assert new["memory"]["inferred"]["attribute"] == "employer"
            _, event = await call_ok(
                client, "remember", {"content": "Ana gave a talk at the meetup.", "kind": "episode"}
            )
            assert event["memory"]["kind"] == "episode"
            _, strategy = await call_ok(
                client,
                "remember",
                {"content": "Roll back with the blue-green switch.", "task_signature": "deploy:billing"},
            )
            assert strategy["memory"]["kind"] == "strategy"

            # The history of the key shows the prose statement as its current version.
            text, history = await call_ok(client, "history", {"entity": "person:ana", "attribute": "employer"})
            assert [v["id"] for v in history["versions"]] == [old["id"], new["id"]]
            assert [v["current"] for v in history["versions"]] == [False, True]
            assert [v["state"] for v in history["versions"]] == ["obsolete", "active"]
            assert history["versions"][0]["superseded_by"] == new["id"]
            assert history["versions"][1]["inferred"]["entity"] == "person:ana"
            lines = text.splitlines()
            assert lines[0] == "history of person:ana.employer, oldest first:"
            assert lines[1].startswith(f"- #{old['id']} fact person:ana.employer [obsolete; ")
            assert f"superseded by #{new['id']}" in lines[1]
            assert lines[2].startswith(f"- #{new['id']} fact person:ana.employer (read) [current, active; ")
            assert lines[2].endswith("Ana's employer is Canva now.")
            document = await read_json(client, fact_uri("person:ana", "employer"))
            assert [(v["id"], v["current"]) for v in document["versions"]] == [(old["id"], False), (new["id"], True)]
            assert any(e["type"] == "superseded" and e["memory_id"] == old["id"] for e in document["events"])

            text, found = await call_ok(client, "recall", {"query": "Where does Ana work?", "k": 3})
            assert found["memories"][0]["id"] == new["id"], text
            assert old["id"] not in [m["id"] for m in found["memories"]]

    run(body)


def test_beliefs_show_a_value_read_from_prose_and_the_entities_list_them(text_sidecar: Sidecar) -> None:
    async def body() -> None:
        async with mcp_client(text_sidecar.unix_target, "mcp-beliefs") as client:
            employer = {"attribute": "employer", "value": "Shopify"}
            _, old = await call_ok(
                client, "remember", {"content": "Ana works at Shopify.", "entity": "person:ana", "fact": employer}
            )
            city = {"attribute": "city", "value": "Lisbon"}
            _, lives = await call_ok(
                client,
                "remember",
                {"content": "Ana lives in Lisbon.", "entity": "person:ana", "fact": city, "source": "tool_result"},
            )
            text, new = await call_ok(
                client, "remember", {"content": "These days Ana works at Canva.", "entity": "person:ana"}
            )
            assert new["outcome"] == "superseded_previous", text
            await call_ok(client, "remember", {"content": "Bo likes tea.", "entity": "person:bo", "kind": "episode"})

            text, found = await call_ok(client, "beliefs", {"entity": "person:ana"})
            assert found["entity"] == "person:ana"
            assert [b["attribute"] for b in found["beliefs"]] == ["city", "employer"]
            keyed, read = found["beliefs"]
            assert (keyed["value"], keyed["read_from_text"], keyed["memory"]["id"]) == ("Lisbon", False, lives["id"])
            assert keyed["memory"]["source"] == "tool_result"
            assert (read["memory"]["id"], read["read_from_text"], read["version_count"]) == (new["id"], True, 2)
            assert read["value"] == "canva"
            assert read["history_uri"] == fact_uri("person:ana", "employer")
            lines = text.splitlines()
            assert lines[0] == "what is believed about person:ana now, by attribute:"
            assert lines[1].startswith(f"- city = Lisbon [#{lives['id']}, since ")
            assert "remembered as a fact; tool_result, confidence" in lines[1]
            assert lines[2].startswith(f"- employer = canva [#{new['id']}, since ")
            assert "read from: 'These days Ana works at Canva.'" in lines[2]
            assert lines[2].endswith("; 2 versions]")
            history = await read_json(client, read["history_uri"])
            assert [v["id"] for v in history["versions"]] == [old["id"], new["id"]]
            assert await read_json(client, beliefs_uri("person:ana")) == {
                k: found[k] for k in ("entity", "beliefs", "unattributed_count", "last_changed_at")
            }

            # As of the instant the Shopify fact became true: the city and the Canva statement came later.
            at = old["memory"]["valid_from"]
            text, then = await call_ok(client, "beliefs", {"entity": "person:ana", "as_of": at})
            assert [(b["attribute"], b["value"], b["memory"]["id"]) for b in then["beliefs"]] == [
                ("employer", "Shopify", old["id"])
            ]
            assert then["beliefs"][0]["memory"]["state"] == "obsolete"  # replaced since, held then
            assert datetime.fromisoformat(then["as_of"]) == datetime.fromisoformat(at)
            assert text.splitlines()[0].startswith("what was held true about person:ana as of ")
            assert await read_json(client, beliefs_uri("person:ana") + "?as_of=" + quote(at, safe="")) == then
            assert (await call_error(client, "beliefs", {"as_of": at})).startswith("beliefs: as_of: ")
            text = await call_error(client, "beliefs", {"entity": "person:ana", "as_of": "1 March"})
            assert text.startswith("beliefs: as_of: ")

            text, listed = await call_ok(client, "beliefs", {})
            assert listed["entity"] is None
            assert [e["entity"] for e in listed["entities"]] == ["person:bo", "person:ana"]  # latest change first
            bo, ana = listed["entities"]
            assert (ana["belief_count"], ana["current_count"], ana["memory_count"]) == (2, 2, 3)
            assert (bo["belief_count"], bo["current_count"]) == (0, 1)
            assert ana["beliefs_uri"] == beliefs_uri("person:ana")
            assert text.splitlines()[0] == "2 of 2 entities, most recently changed first:"
            _, searched = await call_ok(client, "beliefs", {"query": "ANA", "limit": 5})
            assert [e["entity"] for e in searched["entities"]] == ["person:ana"]
            document = await read_json(client, ENTITIES_URI)
            assert [e["entity"] for e in document["entities"]] == ["person:bo", "person:ana"]

            text, nothing = await call_ok(client, "beliefs", {"entity": "person:nobody"})
            assert (text, nothing["beliefs"]) == ("no current beliefs about person:nobody", [])
            text = await call_error(client, "beliefs", {"entity": "person:ana", "query": "x"})
            assert text.startswith("beliefs: query: ")
            assert (await call_error(client, "beliefs", {"entity": ""})).startswith("beliefs: entity: ")
            assert (await call_error(client, "beliefs", {"limit": 0})).startswith("beliefs: limit: ")
            text = await call_error(client, "beliefs", {"entity": "bad\nentity"})
            assert text.startswith("beliefs: INVALID_ARGUMENT: entity: ")

    run(body)


def test_bad_input_is_a_tool_error_naming_the_field_and_the_server_keeps_serving(text_sidecar: Sidecar) -> None:
    async def body() -> None:
        async with mcp_client(text_sidecar.unix_target, "mcp-errors") as client:
            assert (await call_error(client, "recall", {"query": "x", "k": 0})).startswith("recall: k: ")
            assert await call_error(client, "remember", {"kind": "fact"}) == "remember: content: required"
            text = await call_error(client, "remember", {"content": "x", "kind": "banana"})
            assert text.startswith("remember: kind: ")
            assert "banana" in text
            text = await call_error(client, "remember", {"content": "x", "fact": {"attribute": "a", "value": "b"}})
            assert text.startswith("remember: entity: required with fact")
            assert (await call_error(client, "remember", {"content": "x", "fact": {"attribute": "a"}})).startswith(
                "remember: fact.value: required"
            )
            text = await call_error(client, "recall", {"query": "x", "as_of": "last tuesday"})
            assert text.startswith("recall: as_of: ")
            assert "RFC 3339" in text
            text = await call_error(client, "recall", {"query": "x", "as_of": "2026-01-01T00:00:00"})
            assert "no UTC offset" in text
            text = await call_error(client, "recall", {"query": "x", "surprise": 1})
            assert text.startswith("recall: arguments: ")
            assert "surprise" in text
            assert (await call_error(client, "forget", {"ids": []})).startswith("forget: ids: ")
            text = await call_error(client, "history", {"entity": "user:alice"})
            assert text.startswith("history: attribute: required")
            # Checked by the sidecar, not by the schema: its field violation reaches the model as is.
            text = await call_error(
                client, "report_outcome", {"retrieval_id": "no-such-retrieval", "outcome": "success"}
            )
            assert text.startswith("report_outcome: NOT_FOUND: ")
            assert "retrieval_id" in text
            text = await call_error(client, "remember", {"content": "x", "tags": ["a" * 65]})
            assert text.startswith("remember: tags[0]: ")
            assert "unknown tool" in await call_error(client, "recolect", {"query": "x"})
            with pytest.raises(MCPError, match="not found in namespace"):
                await client.read_resource(memory_uri(999_999))
            with pytest.raises(MCPError, match="not a memevo resource"):
                await client.read_resource("memevo://nothing/1")

            _, stored = await call_ok(client, "remember", {"content": "The server still answers after errors."})
            assert stored["outcome"] == "created"

    run(body)


def test_namespaces_keep_two_mcp_clients_apart(text_sidecar: Sidecar) -> None:
    async def body() -> None:
        async with (
            mcp_client(text_sidecar.unix_target, "mcp-team-a") as team_a,
            mcp_client(text_sidecar.unix_target, "mcp-team-b") as team_b,
        ):
            _, secret = await call_ok(team_a, "remember", {"content": "Team A's launch code word is heliotrope."})
            _, found = await call_ok(team_b, "recall", {"query": "launch code word"})
            assert secret["id"] not in [m["id"] for m in found["memories"]]
            _, forgot = await call_ok(team_b, "forget", {"ids": [secret["id"]]})
            assert forgot == {"forgotten_ids": [], "missing_ids": [secret["id"]]}
            assert "not found" in await call_error(team_b, "history", {"memory_id": secret["id"]})
            with pytest.raises(MCPError):
                await team_b.read_resource(memory_uri(secret["id"]))
            _, mine = await call_ok(team_a, "recall", {"query": "launch code word"})
            assert mine["memories"][0]["id"] == secret["id"]
        with MemoryClient(text_sidecar.unix_target) as direct:
            assert direct.get_one(secret["id"]).state == MemoryState.ACTIVE

    run(body)


def test_an_unreachable_sidecar_is_a_tool_error_not_a_crash(tmp_path: Path) -> None:
    async def body() -> None:
        async with mcp_client(f"unix://{tmp_path}/absent.sock", "default", "--timeout-s", "5") as client:
            text = await call_error(client, "recall", {"query": "anything"})
            assert text.startswith("recall: UNAVAILABLE")
            assert "sidecar running" in text
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS

    run(body)


def test_an_unreadable_line_gets_a_json_rpc_error_and_the_server_keeps_serving(text_sidecar: Sidecar) -> None:
    """Raw stdio, as a client with a bug would write it: before issue 41 none of these lines got any reply."""
    process = subprocess.Popen(
        mcp_command(text_sidecar.unix_target, "--namespace", "mcp-unreadable"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None
    assert stdout is not None
    replies: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        for line in stdout:
            replies.put(line)

    # A reader thread, so a missing reply fails the test after a timeout instead of blocking it.
    threading.Thread(target=read, daemon=True).start()

    def ask(line: bytes) -> dict[str, Any]:
        stdin.write(line + b"\n")
        stdin.flush()
        try:
            reply: dict[str, Any] = json.loads(replies.get(timeout=60))
        except queue.Empty:
            raise AssertionError(f"no reply to {line[:80]!r}") from None
        return reply

    def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        return json.dumps(message).encode()

    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        assert ask(request(1, "initialize", hello))["id"] == 1
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        surrogate = request(2, "tools/call", {"name": "recall", "arguments": {"query": "\ud800"}})
        assert b"\\ud800" in surrogate  # json.dumps escapes the lone surrogate: valid ASCII, invalid JSON text
        deep = b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
        for line in (surrogate, deep, b"not json at all"):
            reply = ask(line)
            assert reply["id"] is None, reply
            assert reply["error"]["code"] == -32700, reply
            assert reply["error"]["message"].startswith("Parse error: "), reply
        reply = ask(b'{"jsonrpc": "2.0", "hello": "there"}')
        assert (reply["id"], reply["error"]["code"]) == (None, -32600), reply
        assert ask(request(4, "ping")) == {"jsonrpc": "2.0", "id": 4, "result": {}}
        listed = ask(request(5, "tools/list"))
        assert {tool["name"] for tool in listed["result"]["tools"]} == TOOLS
    finally:
        stdin.close()
        process.wait(timeout=30)


def test_a_scoped_token_reaches_the_sidecar_from_the_environment(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("team-secret mcp-scoped\n")
    sidecar = start_sidecar(
        tmp_path / "data", "--tokens-file", str(tokens), "--sweep-interval-s", "0", embedder="local"
    )

    async def body() -> None:
        command = mcp_command(sidecar.unix_target, "--namespace", "mcp-scoped")
        params = StdioServerParameters(command=command[0], args=command[1:], env={"MEMEVO_TOKEN": "team-secret"})
        async with Client(params, read_timeout_seconds=60) as client:
            _, stored = await call_ok(client, "remember", {"content": "Scoped tokens work through MCP."})
            assert stored["memory"]["content"] == "Scoped tokens work through MCP."
        async with mcp_client(sidecar.unix_target, "mcp-other") as unauthenticated:
            assert "UNAUTHENTICATED" in await call_error(unauthenticated, "recall", {"query": "tokens"})

    try:
        run(body)
    finally:
        sidecar.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_streamable_http_on_loopback(text_sidecar: Sidecar, tmp_path: Path) -> None:
    port = _free_port()
    log_path = tmp_path / "mcp-http.log"
    command = mcp_command(text_sidecar.unix_target, "--namespace", "mcp-http", "--transport", "http")
    command += ["--http-port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    async def body() -> None:
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                break
            except OSError:
                await anyio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            _, stored = await call_ok(client, "remember", {"content": "HTTP transport stores memories too."})
            _, found = await call_ok(client, "recall", {"query": "HTTP transport"})
            assert found["memories"][0]["id"] == stored["id"]

    try:
        run(body)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_http_refuses_a_non_loopback_address(text_sidecar: Sidecar) -> None:
    command = mcp_command(text_sidecar.unix_target, "--transport", "http", "--http-host", "0.0.0.0")
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "listen on loopback" in result.stderr


def test_the_readme_config_block_works_as_pasted(text_sidecar: Sidecar) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## From an MCP client", 1)[1]
    block = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    server = block["mcpServers"]["memevo"]
    args = [text_sidecar.unix_target if a.startswith("unix://") else a for a in server["args"]]
    assert server["command"] == "memevo"
    # The console script of this environment: the one pip installed next to this interpreter.
    command = str(Path(sys.executable).with_name("memevo"))

    async def body() -> None:
        async with Client(StdioServerParameters(command=command, args=args), read_timeout_seconds=60) as client:
            _, stored = await call_ok(client, "remember", {"content": "The README's configuration works."})
            assert stored["memory"]["content"] == "The README's configuration works."

    run(body)


def test_report_outcome_refuses_a_retrieval_of_another_namespace_and_changes_nothing(text_sidecar: Sidecar) -> None:
    async def body() -> None:
        async with (
            mcp_client(text_sidecar.unix_target, "mcp-outcome-a") as team_a,
            mcp_client(text_sidecar.unix_target, "mcp-outcome-b") as team_b,
        ):
            _, stored = await call_ok(team_a, "remember", {"content": "Team A deploys on Thursdays."})
            _, found = await call_ok(team_a, "recall", {"query": "when does team A deploy"})
            assert stored["id"] in [m["id"] for m in found["memories"]]
            with MemoryClient(text_sidecar.unix_target) as direct:
                before = direct.get_one(stored["id"]).confidence
            # The retrieval id is in team A's tool text; a model serving team B may pass it on.
            for _ in range(5):
                text = await call_error(
                    team_b, "report_outcome", {"retrieval_id": found["retrieval_id"], "outcome": "failure"}
                )
                assert text.startswith("report_outcome: NOT_FOUND: "), text
                assert "retrieval_id" in text
                assert "mcp-outcome-b" in text
            with MemoryClient(text_sidecar.unix_target) as direct:
                assert direct.get_one(stored["id"]).confidence == before
            # Its own namespace's server still reports it.
            _, reported = await call_ok(
                team_a, "report_outcome", {"retrieval_id": found["retrieval_id"], "outcome": "failure"}
            )
            assert reported["updated_count"] == len(found["memories"])
            with MemoryClient(text_sidecar.unix_target) as direct:
                assert direct.get_one(stored["id"]).confidence < before

    run(body)
