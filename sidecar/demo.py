"""``memevo demo``: a sidecar on a temporary directory and a short scripted agent session against it.

The sidecar runs in this process but the session talks to it exactly as an
agent would: through the Python client, over a unix socket.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from memevo.client import MemoryClient, MemoryKind, MemorySource

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

QUESTIONS = [
    "Which programming language does Alice like?",
    "Where is the sales data stored?",
    "How do I keep the analysis from running out of memory?",
]


def _print(text: str = "") -> None:
    print(text, flush=True)


def run_demo(*, embedder: str = "local") -> int:
    """Run the scripted session and print what happened; returns the exit code."""
    from .service.server import Sidecar

    with tempfile.TemporaryDirectory(prefix="memevo-demo-") as tmp:
        root = Path(tmp)
        socket = f"unix://{root / 'memevo.sock'}"
        config = SidecarConfig(
            data_dir=root / "data",
            listen=(socket,),
            embedder=EmbedderConfig(kind=embedder),
            dimension=0 if embedder != "none" else 384,
            grace_s=1.0,
        )
        _print(f"memevo demo: starting a sidecar on {config.data_dir} ({socket})")
        sidecar = Sidecar(config)
        sidecar.start()
        try:
            with MemoryClient(socket) as client:
                _session(client)
        finally:
            sidecar.stop()
        _print("sidecar stopped cleanly; the temporary data directory is removed.")
    return 0


def _session(client: MemoryClient) -> None:
    stats = client.stats()
    _print(f"embedder: {stats.embedder} ({stats.dimension}-d)\n")
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
        )
        ids.append(result.memory.id)
        _print(f"   #{result.memory.id} [{kind.name.lower()}] {text}")

    _print("\n2. Later it recalls by meaning, not by keywords:")
    for question in QUESTIONS:
        found = client.recall(question, k=2)
        _print(f"   Q: {question}")
        for hit in found:
            _print(f"      {hit.similarity:.2f}  #{hit.memory.id} {hit.memory.content}  ({hit.hint})")

    forgotten = ids[-1]
    _print(f"\n3. The user asks the agent to forget #{forgotten}:")
    client.forget([forgotten], reason="user asked")
    found = client.recall("What is the name of Alice's dog?", k=3)
    still_there = any(hit.memory.id == forgotten for hit in found)
    _print(f"   recall for the dog's name now returns it: {still_there}")

    _print("\n4. The change log (every change is an event with a sequence number):")
    last = client.stats().last_sequence
    for event in client.watch(after_sequence=0):
        _print(f"   seq {event.sequence:>2}  {event.type.name:<8} memory #{event.memory_id}  ({event.reason})")
        if event.sequence >= last:
            break

    stats = client.stats()
    _print(f"\n5. Stats: {stats.total_count} memories stored, change log at sequence {stats.last_sequence}.")
