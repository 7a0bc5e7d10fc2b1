"""``memevo demo``: a sidecar on a temporary directory and a short scripted agent session against it.

The sidecar runs in this process but the session talks to it exactly as an
agent would: through the Python client, over a unix socket.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memevo.client import ChangeEventType, FactKey, MemoryClient, MemoryKind, MemorySource, MemoryState
from memevo.client.errors import DeadlineExceededError

from .config import SidecarConfig
from .embedding import EmbedderConfig

# A few turns of an agent helping "alice" with a data project.
SESSION = [
    ("Alice prefers Python for data analysis.", MemoryKind.PREFERENCE, "user:alice", ("preferred_language", "Python")),
    ("Alice's team deploys to production every Thursday.", MemoryKind.FACT, "team:alice", None),
    ("The sales dataset lives in s3://acme-data/sales/2026/.", MemoryKind.FACT, "dataset:sales", ("location", "s3")),
    ("Running the notebook on the full dataset ran out of memory.", MemoryKind.EPISODE, "dataset:sales", None),
    ("Sampling 10% of rows first made the analysis finish in 2 minutes.", MemoryKind.STRATEGY, "dataset:sales", None),
    ("Alice's dog is called Pixel.", MemoryKind.FACT, "user:alice", ("dog_name", "Pixel")),
]

# A fact that changes in prose: the old value written with a key, the new one as plain text (no key). The bundled
# pair judge (``--judge local``, on for the demo's sidecar) reads the pair off the write path and retires the keyed
# fact. The wording is one the shipped judge reads (P(replaces) 0.98); "Ana now works at Canva." after "Ana works at
# Shopify." it reads as an addition (0.01), and no template learnt from one keyed fact matches it either.
CHANGE = (
    ("Ana works at Shopify.", ("employer", "Shopify")),
    ("Ana left Shopify and now works at Canva.", None),
)
CHANGE_ENTITY = "person:ana"
CHANGE_WAIT_S = 20.0
"""How long the demo waits on the change log for the judge's verdict (milliseconds on an idle machine)."""
QUESTIONS = [
    "Which programming language does Alice like?",
    "Where is the sales data stored?",
    "How do I keep the analysis from running out of memory?",
]


DEMO_DIMENSION = 384
"""Vector size of the demo's own vectors under --embedder none (that of the bundled embedder)."""


def _print(text: str = "") -> None:
    print(text, flush=True)


def _word_vector(text: str) -> npt.NDArray[np.float32]:
    """A stand-in for an agent's own embedding pipeline: each word adds a signed unit at a hashed position.

    It matches words, not meaning, which is all a demo without a model can show honestly.
    """
    vector = np.zeros(DEMO_DIMENSION, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % DEMO_DIMENSION
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    if not vector.any():
        vector[0] = 1.0
    return vector


def run_demo(*, embedder: str = "local", judge: str = "local", stay: bool | None = None) -> int:
    """Run the scripted session and print what happened; returns the exit code.

    ``stay``: keep the sidecar and its console up until Enter after the session; None: when both stdin and stdout
    are a terminal (a person watching), never when the output goes to a pipe or a file.
    """
    from .service.server import Sidecar

    with tempfile.TemporaryDirectory(prefix="memevo-demo-") as tmp:
        root = Path(tmp)
        socket = f"unix://{root / 'memevo.sock'}"
        config = SidecarConfig(
            data_dir=root / "data",
            listen=(socket,),
            embedder=EmbedderConfig(kind=embedder),
            judge=judge,
            dimension=0 if embedder != "none" else DEMO_DIMENSION,
            grace_s=1.0,
        )
        _print(f"memevo demo: starting a sidecar on {config.data_dir} ({socket})")
        # Port 0: a free loopback port, so a demo never fails on a port another program holds.
        sidecar = Sidecar(config, console_listen="127.0.0.1:0")
        sidecar.start()
        try:
            console = sidecar.console.url if sidecar.console is not None else ""
            if console:
                _print(f"console: {console}")
            with MemoryClient(socket) as client:
                _session(client, own_vectors=embedder == "none", judged=judge != "none")
            if console:
                _offer_console(console, stay=_watched() if stay is None else stay)
        finally:
            sidecar.stop()
        _print("sidecar stopped cleanly; the temporary data directory is removed.")
    return 0


def _watched() -> bool:
    """Whether a person runs the demo: stdin and stdout are a terminal (a daemon may have no stdin at all)."""
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


def _offer_console(url: str, *, stay: bool) -> None:
    if not stay:
        _print("\nThe console closes with the demo (run in a terminal, the demo waits for Enter first).")
        return
    _print(f"\nThe console is open until you press Enter: {url}")
    with contextlib.suppress(EOFError, KeyboardInterrupt):
        input()


def _session(client: MemoryClient, *, own_vectors: bool, judged: bool) -> None:
    stats = client.stats()
    _print(f"embedder: {stats.embedder} ({stats.dimension}-d)\n")
    if own_vectors:
        _print("The sidecar embeds nothing: this session sends its own vectors (hashed words, so recall")
        _print("matches words, not meaning). Agents with an embedding pipeline send theirs the same way.\n")

    def vector(text: str) -> npt.NDArray[np.float32] | None:
        return _word_vector(text) if own_vectors else None

    _print("1. The agent remembers what it learns:")
    ids = []
    for turn, (text, kind, entity, fact) in enumerate(SESSION, start=1):
        result = client.remember(
            text,
            kind=kind,
            entity=entity,
            fact=fact,
            source=MemorySource.USER_STATEMENT if entity.startswith("user:") else MemorySource.AGENT_INFERENCE,
            turn=turn,
            vector=vector(text),
        )
        ids.append(result.memory.id)
        _print(f"   #{result.memory.id} [{kind.name.lower()}] {text}")

    _print("\n2. Later it recalls by meaning, not by keywords:" if not own_vectors else "\n2. Later it recalls:")
    for question in QUESTIONS:
        found = client.recall(question, vector=vector(question), k=2)
        _print(f"   Q: {question}")
        for hit in found:
            _print(f"      {hit.similarity:.2f}  #{hit.memory.id} {hit.memory.content}  ({hit.hint})")

    _fact_changes_in_prose(client, vector, turn=len(SESSION) + 1, wait_s=CHANGE_WAIT_S if judged else 1.0)

    forgotten = ids[-1]
    _print(f"\n4. The user asks the agent to forget #{forgotten}:")
    client.forget([forgotten], reason="user asked")
    dog = "What is the name of Alice's dog?"
    found = client.recall(dog, vector=vector(dog), k=3)
    still_there = any(hit.memory.id == forgotten for hit in found)
    _print(f"   recall for the dog's name now returns it: {still_there}")

    _print("\n5. The change log (every change is an event with a sequence number):")
    last = client.stats().last_sequence
    for event in client.watch(after_sequence=0):
        _print(f"   seq {event.sequence:>2}  {event.type.name:<13} memory #{event.memory_id}  ({event.reason})")
        if event.sequence >= last:
            break

    stats = client.stats()
    _print(f"\n6. Stats: {stats.total_count} memories stored, change log at sequence {stats.last_sequence}.")


def _fact_changes_in_prose(
    client: MemoryClient, vector: Callable[[str], npt.NDArray[np.float32] | None], *, turn: int, wait_s: float
) -> None:
    """A keyed fact retired by a statement in plain words, the fact's history, and ``restore`` undoing it."""
    _print("\n3. A fact changes: written with a key, then said in plain words (the pair judge reads them):")
    written = []
    after = client.stats().last_sequence
    for offset, (text, fact) in enumerate(CHANGE):
        result = client.remember(
            text,
            kind=MemoryKind.FACT,
            entity=CHANGE_ENTITY,
            fact=fact,
            source=MemorySource.USER_STATEMENT,
            turn=turn + offset,
            vector=vector(text),
        )
        written.append(result)
        key = f"key {CHANGE_ENTITY}.{fact[0]} = {fact[1]}" if fact else "no key"
        _print(f"   #{result.id} [fact] {text}  ({key})")
    old, new = written[0].memory, written[1].memory
    reason = _wait_until_superseded(client, old.id, after=after, wait_s=wait_s)
    if reason is None:
        _print(f"   the sidecar did not read #{new.id} as replacing #{old.id}; both stay current")
        return
    retired = client.get_one(old.id)
    _print(f"   #{old.id} is now {retired.state.name}, superseded by #{new.id}: {reason}")
    question = "Where does Ana work?"
    found = client.recall(question, vector=vector(question), k=2)
    _print(f"   Q: {question}")
    for hit in found:
        _print(f"      {hit.similarity:.2f}  #{hit.memory.id} {hit.memory.content}  ({hit.hint})")
    _print_history(client, (CHANGE_ENTITY, "employer"))

    restored = client.restore(old.id, reason="demo: undo")
    _print(f"   Had it misread #{new.id}: restore #{old.id} -> {restored.state.name}")
    client.supersede(old.id, new.id, reason="the user confirmed the new employer")
    _print(f"   the user confirms the change: supersede #{old.id} by #{new.id} -> {client.get_one(old.id).state.name}")


def _wait_until_superseded(client: MemoryClient, memory_id: int, *, after: int, wait_s: float) -> str | None:
    """The reason of ``memory_id``'s retirement once the change log has it (the judge settles off the write path, so
    the write returned before it), or None when it did not come within ``wait_s``."""
    stream = client.watch(after, types=[ChangeEventType.SUPERSEDED], timeout_s=wait_s)
    try:
        for event in stream:
            if event.memory_id == memory_id:
                return event.reason
    except DeadlineExceededError:
        return None
    finally:
        stream.cancel()
    return None


def _print_history(client: MemoryClient, key: tuple[str, str]) -> None:
    """The versions of a fact key: those written with it, those read from the text, those that retired one."""
    history = client.history(FactKey(entity=key[0], attribute=key[1]))
    _print(f"   history of {key[0]}.{key[1]}, oldest first:")
    for version in history.versions:
        current = version.state in (MemoryState.ACTIVE, MemoryState.ARCHIVED) and version.superseded_by is None
        how = "keyed" if version.fact else "read from the text" if version.inferred else "replaced a version"
        mark = "  <- current" if current else ""
        _print(f"      #{version.id} {version.state.name:<8} {version.content}  ({how}){mark}")
