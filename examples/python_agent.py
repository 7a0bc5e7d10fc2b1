"""A small agent loop on memevo: task -> BuildContext -> act -> ReportOutcome -> new facts.

Run it from the repository root (after ``pip install -e .``)::

    python examples/python_agent.py

It starts its own sidecar on a temporary directory (the offline ``local``
embedder), plays a scripted session and stops the sidecar. The "LLM" is a
stand-in that reads the context text and decides. The session shows a
preference change (only the current value reaches the context, the history
keeps both), a strategy upgrade driven by outcomes (the old strategy becomes a
counter-example) and the hints attached to every memory. Exits 1 when an
expected effect did not happen, so CI catches regressions.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from memevo.client import FactKey, MemoryClient, MemoryKind, MemorySource, MemoryState, Outcome, RecallMode

USER = "user:alice"
DEPLOY = "deploy:billing-service"
STRATEGIES = {  # what the agent knew about deploying before this session, oldest first
    "To deploy the billing service, copy its files to the servers over ssh and restart it.": MemorySource.IMPORT,
    "To deploy the billing service, build a container image and roll it out.": MemorySource.AGENT_INFERENCE,
}


@dataclass(frozen=True)
class Task:
    """One turn: what the agent is asked, and the (attribute, value) the user states in it, if any."""

    text: str
    states: tuple[str, str] | None = None


SCRIPT = [
    Task("Alice says: 'Please keep me posted by email.'", states=("contact_channel", "email")),
    Task("Send Alice the weekly status update."),
    *[Task("Deploy the billing service to the servers.")] * 3,
    Task("Alice says: 'Actually, call me — I never read email.'", states=("contact_channel", "phone")),
    Task("Send Alice the weekly status update."),
    Task("Deploy the billing service to the servers."),
]


@contextmanager
def sidecar() -> Iterator[str]:
    """Serve a sidecar on a temporary directory; yields its address, stops it with SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="memevo-example-") as tmp:
        ready, log, target = Path(tmp, "ready.json"), Path(tmp, "sidecar.log"), f"unix://{tmp}/memevo.sock"
        command = [sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", f"{tmp}/data", "--listen", target]
        command += ["--embedder", "local", "--ready-file", str(ready), "--sweep-interval-s", "0"]
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                sys.exit(f"the sidecar did not start:\n{log.read_text()}")
            time.sleep(0.05)
        try:
            yield target
        finally:
            process.send_signal(signal.SIGTERM)
            if process.wait(timeout=60) != 0:
                sys.exit(f"the sidecar exited with {process.returncode}:\n{log.read_text()}")


def llm(task: str, context: str) -> list[str]:
    """The scripted stand-in for the model: the context lines it acts on, in the order it would try them."""
    if task.startswith("Send"):
        return [line for line in context.splitlines() if "contacted by" in line][:1]
    if task.startswith("Deploy"):  # the strategies as ranked, best first
        section = context.split("## Strategies\n", 1)[-1].split("\n## ", 1)[0]
        return [line for line in section.splitlines() if line.startswith("- ")]
    return []


def world(task: str, line: str, channel: str) -> bool:
    """Whether acting on ``line`` worked: Alice answers on her real channel; the servers now run containers."""
    return f"by {channel}." in line if task.startswith("Send") else "container" in line


def indent(text: str) -> str:
    return "\n".join(f"    | {line}" for line in text.splitlines())


def main() -> int:
    failures: list[str] = []

    def expect(ok: bool, effect: str) -> None:
        print(f"  {'ok' if ok else 'FAILED'}: {effect}")
        if not ok:
            failures.append(effect)

    with sidecar() as target, MemoryClient(target, timeout_s=30) as memory:
        memory.declare_framework("planner-v1", description="the agent's first planning prompt")
        runbook, containers = (
            memory.remember(text, kind=MemoryKind.STRATEGY, task_signature=DEPLOY, source=source).id
            for text, source in STRATEGIES.items()
        )
        print(f"known strategies for {DEPLOY}: #{runbook} (the old runbook), #{containers} (a newer idea)")

        channel = ""  # what Alice really wants, as she last said it
        shown: dict[str, int] = {}  # context text -> the turn that printed it
        contacted: list[str] = []  # the channel of every status update
        first_tried: list[int] = []  # the strategy each deploy tried first
        for turn, task in enumerate(SCRIPT, start=1):
            print(f"\nturn {turn}: {task.text}")
            context = memory.build_context(task.text, token_budget=300, turn=turn)
            print(indent(context.text) if context.text not in shown else f"    | (as in turn {shown[context.text]})")
            shown.setdefault(context.text, turn)
            lines = [line for line in context.text.splitlines() if line.startswith("- ")]
            by_line = dict(zip(lines, context.items, strict=True))  # one line per item, in rendering order
            attempts = llm(task.text, context.text)
            if task.text.startswith("Send"):
                contacted += [m.group(1) for m in map(re.compile(r"contacted by (\w+)").search, attempts) if m]
            elif attempts:
                first_tried.append(by_line[attempts[0]].memory.id)
            for line in attempts:
                item, worked = by_line[line], world(task.text, line, channel)
                outcome = Outcome.SUCCESS if worked else Outcome.FAILURE
                memory.report_outcome(context.retrieval_id, outcome, used_memory_ids=[item.memory.id], turn=turn)
                print(f"  act on #{item.memory.id}: {item.memory.content} -> {outcome.name}")
                if worked:
                    break
            if task.states:
                attribute, channel = task.states
                written = memory.remember(
                    f"Alice prefers to be contacted by {channel}.",
                    kind=MemoryKind.PREFERENCE,
                    entity=USER,
                    fact=(attribute, channel),
                    source=MemorySource.USER_STATEMENT,
                    turn=turn,
                )
                replaced = f", replaced #{written.affected_ids[0]}" if written.affected_ids else ""
                print(f"  remembered #{written.id} ({written.outcome.name}{replaced})")

        print("\n(a) the preference change")
        expect(contacted == ["email", "phone"], f"the agent contacted Alice by {contacted}, email then phone")
        current = memory.build_context("How should I contact Alice?", token_budget=200).text
        expect("by phone" in current and "by email" not in current, "the context shows only the current value")
        versions = memory.history(FactKey(USER, "contact_channel")).versions
        for v in versions:
            print(f"    #{v.id} {v.state.name}: {v.fact.value if v.fact else ''} (superseded by {v.superseded_by})")
        states = [(v.fact.value if v.fact else "", v.state, v.superseded_by) for v in versions]
        phone = versions[-1].id if versions else 0
        expected = [("email", MemoryState.OBSOLETE, phone), ("phone", MemoryState.ACTIVE, None)]
        expect(states == expected, f"the history keeps both: email OBSOLETE and superseded by #{phone}, phone ACTIVE")
        past = memory.build_context("How should I contact Alice?", mode=RecallMode.HISTORY, token_budget=200).text
        print(indent(past))
        expect(f"superseded by memory {phone}" in past, "a history-mode context marks the old value superseded")

        print("\n(b) the strategy upgrade")
        print(f"  the strategy each deploy tried first: {first_tried}")
        expect(first_tried[:1] == [runbook], f"at first the agent tried the runbook #{runbook} (ranked first)")
        expect(first_tried[-1:] == [containers], f"after the outcomes it tries #{containers} first")
        expect(memory.get_one(runbook).demoted_by == containers, f"#{containers} demoted #{runbook}")
        now = memory.build_context("Deploy the billing service to the servers.", token_budget=300).text
        expect(f"counter-example (strategy {containers} did better)" in now, "the runbook is now a counter-example")

        print("\n(c) hints after a new framework: older memories are to be re-interpreted")
        declared = memory.declare_framework("planner-v2", description="a new planning prompt")
        print(f"  planner-v2 declared; {declared.flagged_count} memories formed under {declared.previous_version}")
        later = memory.build_context("Deploy the billing service to the servers.", token_budget=300).text
        print(indent(later))
        expect("formed under an older framework (planner-v1)" in later, "older memories carry that hint")

    print(f"\nFAILED: {'; '.join(failures)}" if failures else "\ndone: every expected effect happened")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
