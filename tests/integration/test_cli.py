"""The command line: ``memevo inspect`` on a stopped data directory, ``memevo demo`` end to end."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import start_sidecar
from helpers import memory, stub, vec

from memevo.v1 import memory_service_pb2

pytestmark = pytest.mark.integration


def memevo(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memevo.sidecar.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_inspect_reports_counts_schema_embedder_and_index(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sidecar = start_sidecar(data)
    service = stub(sidecar.unix_target)
    written = service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory(f"note {i}", vec(i)) for i in range(5)])
    )
    service.Forget(memory_service_pb2.ForgetRequest(ids=[written.results[0].memory.id], keep_history=True))
    assert sidecar.stop() == 0
    result = memevo("inspect", str(data), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memories"] == 5
    assert report["by_state_and_kind"] == {
        "MEMORY_STATE_ACTIVE/MEMORY_KIND_EPISODE": 4,
        "MEMORY_STATE_OBSOLETE/MEMORY_KIND_EPISODE": 1,
    }
    assert report["schema_version"] == 1
    assert report["embedder"] == "none"
    assert report["dimension"] == 8
    assert report["index"]["saved_count"] == 5
    assert report["index"]["behind_by_events"] == 0


def test_inspect_refuses_what_is_not_a_data_directory(tmp_path: Path) -> None:
    result = memevo("inspect", str(tmp_path))
    assert result.returncode == 2
    assert "not a memevo data directory" in result.stderr


def test_inspect_of_a_directory_no_sidecar_initialised_names_serve_not_a_flag_it_lacks(tmp_path: Path) -> None:
    import rocksdict

    data = tmp_path / "data"
    data.mkdir()
    # A RocksDB without memevo's metadata: what a start refused for want of --dimension used to leave behind.
    rocksdict.Rdict(str(data / "rocksdb"), rocksdict.Options(raw_mode=True)).close()
    result = memevo("inspect", str(data))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "not a memevo data directory" in result.stderr, result.stderr
    assert "memevo serve --data" in result.stderr, result.stderr
    # Before: "needs a vector dimension: configure an embedder or pass --dimension", which inspect has not.
    assert "--dimension" not in result.stderr, result.stderr


def test_demo_runs_a_session_and_stops_cleanly() -> None:
    result = memevo("demo", timeout_s=240.0)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Alice prefers Python for data analysis." in result.stdout
    assert_fact_changed_in_prose(result.stdout)
    assert "recall for the dog's name now returns it: False" in result.stdout
    assert "EVICTED" in result.stdout
    assert re.search(r"^console: http://127\.0\.0\.1:\d+/\?token=\S+$", result.stdout, re.MULTILINE), result.stdout
    assert "sidecar stopped cleanly" in result.stdout


def assert_fact_changed_in_prose(stdout: str) -> None:
    """The demo's keyed fact is retired by a statement without a key, which the pair judge read (issue 42); shown in
    its history, restored."""
    section = stdout[stdout.index("3. A fact changes") : stdout.index("4. The user asks")]
    match = re.search(r"#(\d+) \[fact\] Ana works at Shopify\.  \(key person:ana\.employer = Shopify\)", section)
    assert match, section
    old = int(match.group(1))
    new = old + 1
    assert f"#{new} [fact] Ana left Shopify and now works at Canva.  (no key)" in section
    assert f"#{old} is now OBSOLETE, superseded by #{new}: superseded by memory {new} (judged: replaces" in section
    lines = section.splitlines()
    answer = lines[lines.index("   Q: Where does Ana work?") + 1]
    assert f"#{new} Ana left Shopify and now works at Canva." in answer, section
    assert f"#{old} OBSOLETE Ana works at Shopify.  (keyed)" in section
    assert re.search(rf"#{new} ACTIVE +Ana left Shopify and now works at Canva\.  \(.*\)  <- current", section)
    assert f"restore #{old} -> ACTIVE" in section
    assert f"supersede #{old} by #{new} -> OBSOLETE" in section


def test_help_loads_no_numeric_kernels() -> None:
    """``memevo --help`` answers before anything compiles: building the parser must not import Numba (issue 42: it
    took 18 s after an install, compiling the kernels it does not need, before printing a word)."""
    probe = (
        "import sys\n"
        "from memevo.sidecar import cli, demo\n"
        "cli.build_parser()\n"
        "print(sorted(m for m in sys.modules if m == 'numba' or m.startswith('memevo.kernels')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


# ---- newcomer friction: every mistake gets a message, never a traceback --------------------------


def _serve(tmp_path: Path, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return memevo(
        "serve",
        "--data",
        str(tmp_path / "data"),
        "--embedder",
        "none",
        "--dimension",
        "8",
        *args,
        timeout_s=timeout_s,
    )


def _refused(result: subprocess.CompletedProcess[str], *mentions: str) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for text in mentions:
        assert text in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("content", "mentions"),
    [
        pytest.param(b"", ("--token-file", "is empty"), id="empty"),
        pytest.param(b"  \n\t\n", ("--token-file", "is empty"), id="whitespace-only"),
        pytest.param(b"two tokens\n", ("--token-file", "one token"), id="two-words"),
        pytest.param(b"\xff\xfe\x00token", ("--token-file", "cannot read it"), id="not-text"),
        pytest.param(None, ("--token-file", "cannot read it", "No such file"), id="missing"),
    ],
)
def test_a_token_file_without_a_token_stops_the_start(
    tmp_path: Path, content: bytes | None, mentions: tuple[str, ...]
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_bytes(content)
    socket = tmp_path / "s.sock"
    # Before, an empty file turned authentication off and the sidecar served (here: until the timeout).
    _refused(_serve(tmp_path, "--listen", f"unix://{socket}", "--token-file", str(token_file)), *mentions)
    assert not socket.exists()


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "whitespace"])
def test_an_empty_token_variable_stops_the_start_as_an_empty_token_file_does(
    tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMEVO_TOKEN", value)
    socket = tmp_path / "s.sock"
    # Before, an empty $MEMEVO_TOKEN started a sidecar without authentication (here: until the timeout).
    _refused(_serve(tmp_path, "--listen", f"unix://{socket}"), "$MEMEVO_TOKEN is set but empty", "unset it")
    assert not socket.exists()
    assert not (tmp_path / "data").exists()


def test_an_unreadable_tokens_file_stops_the_start(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_bytes(b"\xff\xfe\x00 *\n")
    _refused(_serve(tmp_path, "--listen", f"unix://{tmp_path / 's.sock'}", "--tokens-file", str(tokens)), "tokens")


def test_a_start_refused_for_want_of_a_dimension_creates_nothing(tmp_path: Path) -> None:
    socket = tmp_path / "s.sock"
    data = tmp_path / "new" / "data"
    result = memevo("serve", "--data", str(data), "--embedder", "none", "--listen", f"unix://{socket}")
    _refused(result, "needs a vector dimension", "--dimension")
    # Before, the refused start left data/ with an empty rocksdb/ inside it.
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    _refused(
        memevo("serve", "--data", str(existing), "--embedder", "none", "--listen", f"unix://{socket}"), "--dimension"
    )
    assert list(existing.iterdir()) == []
    assert not socket.exists()
    _refused(memevo("inspect", str(data)), "not a memevo data directory")


def test_an_openai_embedder_without_its_url_or_model_is_refused_by_flag(tmp_path: Path) -> None:
    data = tmp_path / "data"
    listen = f"unix://{tmp_path / 's.sock'}"
    _refused(memevo("serve", "--data", str(data), "--embedder", "openai", "--listen", listen), "--openai-url")
    url = "http://127.0.0.1:9/v1"
    result = memevo("serve", "--data", str(data), "--embedder", "openai", "--openai-url", url, "--listen", listen)
    _refused(result, "--openai-model")
    assert not data.exists()


def test_a_relative_unix_socket_path_is_refused_with_the_absolute_form(tmp_path: Path) -> None:
    _refused(_serve(tmp_path, "--listen", "unix://relative.sock"), "absolute path", "unix:///")


def test_every_option_says_what_it_does_and_its_default() -> None:
    from memevo.sidecar.cli import build_parser

    def actions(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from actions(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction):
                yield f"{path} {'/'.join(action.option_strings) or action.dest}", action

    silent = [name for name, action in actions(build_parser(), "memevo") if not action.help]
    assert silent == []
    no_default = [
        name
        for name, action in actions(build_parser(), "memevo")
        if action.default not in (None, False, "", [])
        and "default" not in str(action.help)
        and not isinstance(action, argparse._SubParsersAction)
    ]
    assert no_default == []
    # The socket path used when $XDG_RUNTIME_DIR is unset is written down.
    result = memevo("serve", "--help")
    assert "unix:///tmp/memevo-UID.sock when $XDG_RUNTIME_DIR is unset" in " ".join(result.stdout.split())


def test_inspect_calls_a_cleanly_stopped_empty_directory_empty_not_missing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert start_sidecar(data).stop() == 0
    result = memevo("inspect", str(data), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memories"] == 0
    assert report["index"] == "empty: no memories to index"


def test_demo_without_an_embedder_runs_and_says_when_kernels_compile(tmp_path: Path) -> None:
    # An empty Numba cache is a first run after an install: the kernels compile, and it says so.
    result = subprocess.run(
        [sys.executable, "-m", "memevo.sidecar.cli", "demo", "--embedder", "none"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("compiling the numeric kernels") == 1, result.stderr
    assert "sends its own vectors" in result.stdout
    assert_fact_changed_in_prose(result.stdout)
    assert "recall for the dog's name now returns it: False" in result.stdout
    assert "sidecar stopped cleanly" in result.stdout
