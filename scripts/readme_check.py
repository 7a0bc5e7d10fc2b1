"""Run every code block of README.md as written, in order, against sidecars started the way the README starts them.

    python scripts/readme_check.py    # after `pip install -e '.[test]'`; tests/integration/test_readme.py runs it

What "as written" allows, and nothing else:

- a private HOME (``~/.local/share/memevo`` lands in a temporary folder), and the README's fixed addresses mapped to
  private ones: its socket to one in a temporary folder, each ``127.0.0.1:8787`` to a free port (CI jobs and other
  users share the machine);
- commands that install or that .ci/run runs on its own are skipped, with the reason printed (``pip install``,
  ``pytest``, the other languages' suites, the code generators), as is what needs a cluster (``--ray-address``);
- servers (``memevo serve``, ``memevo console``) run in the background, as the README's ``&`` and "a running
  sidecar" say, until another ``memevo serve`` or a command that needs the data directory to itself (``memevo
  inspect``) comes, and must be serving before the next command runs; each must stop cleanly on SIGTERM;
- Python blocks run each in a fresh interpreter against the sidecar; one that serves forever (the reviewer loop) is
  stopped once it did its work (see ``REVIEWER``); a JSON block is an MCP client's configuration, checked by
  running its command with ``--help`` (tests/integration/test_mcp_server.py runs it against a sidecar); a
  ``text`` block is sample output.

A block the rules do not cover fails the run, so a new README block gets a rule or runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_SOCKET = "unix:///run/user/1000/memevo.sock"
README_CONSOLE = "127.0.0.1:8787"
START_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_S = 600.0

SKIPPED = {
    "pip install": ".ci/run installs the checkout with its test extras first",
    "pip wheel": "builds the whole package, models included, with a build backend from an index: too slow for CI",
    "pytest": "the suite this check is part of",
    "scripts/gen_clients.sh": ".ci/run runs it with --check",
    "(cd clients/typescript && npm test)": ".ci/run runs it",
    "(cd clients/go && go test ./...)": ".ci/run runs it (with go vet)",
    "mvn -q -B -f clients/java/pom.xml package": ".ci/run runs it",
    "npm --prefix clients/typescript run example": ".ci/run runs it",
    "python examples/python_agent.py": "tests/integration/test_examples.py runs it",
}
SERVERS = ("memevo serve", "memevo console")
NEEDS_STOPPED = ("memevo inspect",)
NEEDS_CLUSTER = "--ray-address"
REVIEWER = "client.reviewer("
"""A Python block with this runs until stopped: the check writes a group to consolidate and waits for the
abstraction the reviewer accepts."""


@dataclass
class Block:
    language: str
    text: str
    line: int


def blocks(readme: str) -> Iterator[Block]:
    """The fenced code blocks of ``readme`` in order, with the line their fence opens on."""
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", readme, flags=re.MULTILINE | re.DOTALL):
        yield Block(match.group(1), match.group(2), readme.count("\n", 0, match.start()) + 1)


def commands(shell: str) -> Iterator[str]:
    """The command lines of a shell block, without their trailing comments."""
    for line in shell.replace("\\\n", " ").splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            yield command


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Run:
    """The environment every block runs in and the servers running now."""

    home: Path
    socket_path: Path
    work: Path
    servers: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMEVO_", "XDG_"))}
        # The console script pip installed sits beside the interpreter.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["HOME"] = str(self.home)
        env["XDG_RUNTIME_DIR"] = str(self.socket_path.parent)  # where a sidecar without --listen puts its socket
        return env

    def private(self, text: str) -> str:
        text = text.replace(README_SOCKET, f"unix://{self.socket_path}")
        while README_CONSOLE in text:
            text = text.replace(README_CONSOLE, f"127.0.0.1:{free_port()}", 1)
        return text

    def shell(self, command: str) -> None:
        if command.startswith(SERVERS):
            self.serve(command)
            return
        if command.startswith(NEEDS_STOPPED):
            self.stop()
        print(f"  $ {command}", flush=True)
        result = subprocess.run(
            ["bash", "-c", self.private(command)],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(f"README command failed ({result.returncode}): {command}\n{result.stdout}{result.stderr}")

    def serve(self, command: str) -> None:
        """Start a long-running command in the background; return once it serves what it names."""
        command = self.private(command.removesuffix("&").strip())
        if command.startswith("memevo serve"):
            self.stop()  # one data directory, one sidecar
        print(f"  $ {command} &", flush=True)
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.work,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=(self.work / "server.log").open("ab"),
            start_new_session=True,
        )
        self.servers.append((command, process))
        ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", command)]
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._serving(command, ports):
            if process.poll() is not None or time.monotonic() > deadline:
                log = (self.work / "server.log").read_text(errors="replace")
                raise SystemExit(f"README server did not start: {command}\n{log[-4000:]}")
            time.sleep(0.2)

    def _serving(self, command: str, ports: list[int]) -> bool:
        if command.startswith("memevo serve"):
            named = re.search(r"--listen unix://(\S+)", command)
            path = Path(named.group(1)) if named else self.socket_path.with_name(f"memevo-{os.getuid()}.sock")
            if not path.exists():
                return False
        for port in ports:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) != 0:
                    return False
        return True

    def ensure_sidecar(self) -> None:
        if not any(c.startswith("memevo serve") and p.poll() is None for c, p in self.servers):
            self.serve(f"memevo serve --data ~/.local/share/memevo --listen {README_SOCKET}")

    def stop(self) -> None:
        """SIGTERM every server, newest first; each must stop cleanly."""
        while self.servers:
            command, process = self.servers.pop()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            try:
                code = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                raise SystemExit(f"README server did not stop within 60 s: {command}") from None
            if code != 0:
                raise SystemExit(f"README server exited with {code}: {command}")

    def python(self, code: str) -> None:
        self.ensure_sidecar()
        code = self.private(code)
        command = [sys.executable, "-c", code]
        if REVIEWER not in code:
            result = subprocess.run(
                command, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300, check=False
            )
            if result.returncode != 0:
                raise SystemExit(f"README Python block failed:\n{code}\n{result.stdout}{result.stderr}")
            print("\n".join(f"    {line}" for line in result.stdout.splitlines()[:12]), flush=True)
            return
        reviewer = subprocess.Popen(command, cwd=self.work, env=self.env, stderr=subprocess.PIPE, text=True)
        try:
            abstraction = consolidate_through_reviewer(f"unix://{self.socket_path}", reviewer)
        finally:
            reviewer.terminate()
            _, errors = reviewer.communicate(timeout=30)
        if abstraction is None:
            raise SystemExit(f"README reviewer block wrote no abstraction:\n{code}\n{errors}")
        print(f"    the reviewer accepted a consolidation: {abstraction!r}", flush=True)


def consolidate_through_reviewer(target: str, reviewer: subprocess.Popen[str]) -> str | None:
    """Write strategies near enough to be one group, sweep until the reviewer has accepted its proposal; the
    abstraction's text, or None when none came within a minute (or the reviewer died)."""
    from memevo.client import MemoryClient, MemoryKind, MemoryState

    said = [
        "Retry a flaky upload with exponential backoff.",
        "Retry flaky uploads with exponential backoff.",
        "Retry the flaky upload with an exponential backoff.",
        "Retry a flaky upload using exponential backoff.",
        "Retry flaky uploads using exponential backoff.",
        "Retry the flaky uploads with exponential backoff.",
    ]
    with MemoryClient(target) as client:
        for text in said:
            client.remember(text, kind=MemoryKind.STRATEGY, task_signature="upload", namespace="readme-review")
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and reviewer.poll() is None:
            client.govern(namespace="readme-review")
            found = client.recall("flaky upload", namespace="readme-review", k=3, peek=True)
            for hit in found:
                if hit.memory.kind == MemoryKind.ABSTRACTION and hit.memory.state == MemoryState.ACTIVE:
                    return hit.memory.content
            time.sleep(0.5)
    return None


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    with tempfile.TemporaryDirectory(prefix="memevo-readme-") as tmp:
        # A short folder for the socket: a unix socket's path is limited to about 100 bytes.
        run_dir = Path(tempfile.mkdtemp(prefix="mr-", dir="/tmp"))
        run = Run(home=Path(tmp) / "home", socket_path=run_dir / "memevo.sock", work=Path(tmp) / "work")
        run.home.mkdir()
        run.work.mkdir()
        try:
            started = time.monotonic()
            for block in blocks(readme):
                at = time.monotonic() - started
                print(f"README.md:{block.line} ({block.language or 'no language'}), at {at:.1f} s", flush=True)
                if block.language in ("sh", "bash"):
                    for command in commands(block.text):
                        # `pip install . && memevo demo`: the install is skipped, the demo runs.
                        parts = [command] if command.startswith("(") else command.split(" && ")
                        for part in parts:
                            skip = next((why for start, why in SKIPPED.items() if part.startswith(start)), None)
                            if NEEDS_CLUSTER in part:
                                skip = "needs a Ray cluster"
                            if skip is None:
                                run.shell(part)
                            else:
                                print(f"  skipped: {part}  ({skip})", flush=True)
                elif block.language == "python":
                    run.python(block.text)
                elif block.language == "json":
                    server = json.loads(block.text)["mcpServers"]["memevo"]
                    run.shell(shlex.join([server["command"], *server["args"], "--help"]))
                elif block.language == "text":
                    print("  sample output: not run", flush=True)
                else:
                    raise SystemExit(f"README.md:{block.line}: no rule for a {block.language or 'plain'} block")
            run.stop()
        finally:
            for _, process in run.servers:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
            shutil.rmtree(run_dir, ignore_errors=True)
    print("every README block ran as written (skips named above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
