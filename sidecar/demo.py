"""``memevo demo``: a sidecar on a temporary directory and a short scripted agent session against it.

The sidecar runs in this process but the session talks to it exactly as an
agent would: through the Python client, over a unix socket.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

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
            dimension=0 if embedder != "none" else DEMO_DIMENSION,
            grace_s=1.0,
        )
        _print(f"memevo demo: starting a sidecar on {config.data_dir} ({socket})")
        sidecar = Sidecar(config)
        sidecar.start()
        try:
            with MemoryClient(socket) as client:
                _session(client, own_vectors=embedder == "none")
        finally:
            sidecar.stop()
        _print("sidecar stopped cleanly; the temporary data directory is removed.")
    return 0


def _session(client: MemoryClient, *, own_vectors: bool) -> None:
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

    forgotten = ids[-1]
    _print(f"\n3. The user asks the agent to forget #{forgotten}:")
    client.forget([forgotten], reason="user asked")
    dog = "What is the name of Alice's dog?"
    found = client.recall(dog, vector=vector(dog), k=3)
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
