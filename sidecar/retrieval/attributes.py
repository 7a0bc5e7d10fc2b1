"""What a fact attribute's name means, as a vector: evidence for the questions that paraphrase it.

A question rarely says the attribute it asks about the way the client named it: "What should I order
for Zane at the team lunch?" asks for ``diet``, "Who is responsible for billing?" for ``owner``. Words
do not meet there, and the fact's own text mixes the attribute with its value and the entity, which
pulls its embedding away from the question. The attribute's name alone, embedded with the sidecar's
model, is close to such questions: over the evolving-world benchmark's 57 question forms, the name
nearest to the question was the asked attribute's among its entity type's 7 to 10 for 52.

Names are few and never change, so each is embedded once (on the first recall that meets it) and kept.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ..errors import MemevoError

CACHE_SIZE = 65_536
"""Attribute vectors kept (384-d float32: ~100 MB at most); a store has far fewer distinct attributes."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\W_]+")

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


def attribute_phrase(attribute: str) -> str:
    """The words of an attribute's name: "working_hours" -> "working hours", "rateLimit" -> "rate limit"."""
    return " ".join(_SEPARATORS.sub(" ", _CAMEL.sub(" ", attribute)).split()).lower()


class AttributeMeanings:
    """Unit vectors of attribute names, embedded on first use and cached (thread-safe)."""

    def __init__(self, embed: Embed, capacity: int = CACHE_SIZE) -> None:
        self._embed = embed
        self._capacity = capacity
        self._lock = threading.Lock()
        self._vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()

    def similarities(self, attributes: Sequence[str], query: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """Cosine between ``query`` and each attribute's name; NaN for an empty name or one that failed to embed."""
        out = np.full(len(attributes), np.nan, dtype=np.float64)
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or not np.isfinite(norm):
            return out
        vectors = self._lookup([a for a in dict.fromkeys(attributes) if a])
        unit = np.asarray(query, dtype=np.float32) / norm
        for position, attribute in enumerate(attributes):
            vector = vectors.get(attribute)
            if vector is not None:
                out[position] = float(vector @ unit)
        return out

    def _lookup(self, attributes: list[str]) -> dict[str, npt.NDArray[np.float32]]:
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._lock:
            for attribute in attributes:
                vector = self._vectors.get(attribute)
                if vector is not None:
                    self._vectors.move_to_end(attribute)
                    found[attribute] = vector
        missing = [a for a in attributes if a not in found]
        phrases = [attribute_phrase(a) for a in missing]
        wanted = [(a, p) for a, p in zip(missing, phrases, strict=True) if p]
        if not wanted:
            return found
        try:
            embedded = np.asarray(self._embed([p for _, p in wanted]), dtype=np.float32)
        except MemevoError:  # no evidence rather than a failed recall; the next recall tries again
            return found
        norms = np.linalg.norm(embedded, axis=1, keepdims=True)
        embedded = (embedded / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        with self._lock:
            for (attribute, _), vector in zip(wanted, embedded, strict=True):
                found[attribute] = self._vectors[attribute] = vector
                self._vectors.move_to_end(attribute)
            while len(self._vectors) > self._capacity:
                self._vectors.popitem(last=False)
        return found
