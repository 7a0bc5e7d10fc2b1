"""What a fact attribute means, as a vector: evidence for the questions that paraphrase it.

A question rarely says the attribute it asks about the way the client named it: "What should I order
for Zane at the team lunch?" asks for ``diet``, "Who is responsible for billing?" for ``owner``. Words
do not meet there, and the fact's own text mixes the attribute with its value and the entity, which
pulls its embedding away from the question. Two readings of an attribute are close to such questions:

- its name, embedded with the sidecar's model (``AttributeMeanings``), said of its fact's entity
  type ("the project's tracker") when it is compared with other attributes: names are few and never
  change, so each is embedded once, on the first recall that meets it, and kept;
- what its facts say (``AttributeExamples``): the mean direction of the namespace's most recent facts
  of that attribute, whose entities and values differ and so average out, leaving what they share.
  It is in the space of the stored vectors, so it needs no embedder.

Over the evolving-world benchmark's questions (10k memories, real embeddings), the attribute nearest to
the question among its entity type's 7 to 10 was the asked one for 88 % by name, 87 % by examples and
94 % by the mean of the two cosines (1k: 84 / 74 / 89 %; 100k: 85 / 93 / 94 %). Counting examples only
where they cover 3 or more entities, as recall does: the bare name with the examples picked 94.4 % (1k: 86.4 %);
the name said of the entity type ("the project's tracker") 91.2 % alone and 94.7 % with them (1k: 89.6 / 89.5 %).
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

EXAMPLES = 64
"""Facts averaged into an attribute's examples: its namespace's most recent this many (64 gave 94.4 % where all
gave 94.7 % in the study above)."""
EXAMPLES_MIN_ENTITIES = 3
"""Examples count only when they are about this many entities: one entity's facts say its value, not the attribute's
meaning (a single fact's "mean direction" is that fact, and its cosine to the query is already its match)."""
REFRESH_GROWTH = 2.0
"""Examples drawn from a full sample are drawn again once their namespace holds this many times the memories."""
REFRESH_GROWTH_PARTIAL = 1.25
"""The same for a sample that found fewer than ``EXAMPLES`` facts: a young attribute's meaning is still forming."""

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]
Sample = Callable[[int, str], npt.NDArray[np.float32]]
"""(namespace code, attribute) -> unit vectors of up to ``EXAMPLES`` of the namespace's live facts of the attribute."""


def attribute_phrase(attribute: str, entity_type: str = "") -> str:
    """The words of an attribute's name, said of its entity's type when there is one.

    "working_hours" -> "working hours", "rateLimit" -> "rate limit"; ("tracker", "project") -> "the project's
    tracker". A bare name is ambiguous to an embedding model (a fitness tracker, a GPS tracker); said of a project,
    it is the place a question about filing a bug points to. Empty for an attribute without words.
    """
    words = _words(attribute)
    kind = _words(entity_type)
    return f"the {kind}'s {words}" if words and kind else words


def _words(name: str) -> str:
    return " ".join(_SEPARATORS.sub(" ", _CAMEL.sub(" ", name)).split()).lower()


class AttributeMeanings:
    """Unit vectors of attribute names (alone or said of an entity type), embedded on first use and cached.

    Thread-safe.
    """

    def __init__(self, embed: Embed, capacity: int = CACHE_SIZE) -> None:
        self._embed = embed
        self._capacity = capacity
        self._lock = threading.Lock()
        self._vectors: OrderedDict[tuple[str, str], npt.NDArray[np.float32] | None] = OrderedDict()
        """(attribute, entity type) -> unit vector of its phrase (see :func:`attribute_phrase`); None for no words."""

    def similarities(
        self,
        attributes: Sequence[str],
        query: npt.NDArray[np.float32],
        entity_types: Sequence[str] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Cosine between ``query`` and each attribute's name (said of ``entity_types[i]`` when given).

        NaN for an empty name or one that failed to embed.
        """
        out = np.full(len(attributes), np.nan, dtype=np.float64)
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or not np.isfinite(norm):
            return out
        keys = list(zip(attributes, entity_types if entity_types is not None else [""] * len(attributes), strict=True))
        vectors = self._lookup([key for key in dict.fromkeys(keys) if key[0]])
        unit = np.asarray(query, dtype=np.float32) / norm
        for position, key in enumerate(keys):
            vector = vectors.get(key)
            if vector is not None:
                out[position] = float(vector @ unit)
        return out

    def vectors(self, keys: Sequence[tuple[str, str]]) -> list[npt.NDArray[np.float32] | None]:
        """Unit vectors of (attribute, entity type) names; None for an empty name or one that failed to embed."""
        found = self._lookup([key for key in dict.fromkeys(keys) if key[0]])
        return [found.get(key) for key in keys]

    def _lookup(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], npt.NDArray[np.float32] | None]:
        found: dict[tuple[str, str], npt.NDArray[np.float32] | None] = {}
        with self._lock:
            for key in keys:
                if key in self._vectors:
                    self._vectors.move_to_end(key)
                    found[key] = self._vectors[key]
        # Phrases are built only for names not seen before: a recall meets dozens of names, and building each
        # phrase (two regular expressions per word group) on every recall cost ~0.4 ms at 100k memories.
        missing = [(key, attribute_phrase(*key)) for key in keys if key not in found]
        wanted = [(key, phrase) for key, phrase in missing if phrase]
        if not missing:
            return found
        vectors: list[npt.NDArray[np.float32]] = []
        if wanted:
            try:
                embedded = np.asarray(self._embed([phrase for _, phrase in wanted]), dtype=np.float32)
            except MemevoError:  # no evidence rather than a failed recall; the next recall tries again
                return found
            norms = np.linalg.norm(embedded, axis=1, keepdims=True)
            vectors = list((embedded / np.where(norms > 0, norms, 1.0)).astype(np.float32))
        with self._lock:
            for key, phrase in missing:
                vector = vectors.pop(0) if phrase else None
                found[key] = self._vectors[key] = vector
                self._vectors.move_to_end(key)
            while len(self._vectors) > self._capacity:
                self._vectors.popitem(last=False)
        return found


class AttributeExamples:
    """Mean unit vectors of each (namespace, attribute)'s recent facts, drawn lazily and again as the namespace grows.

    Drawing costs a scan of the namespace's field column, so it is not done per write: a namespace that has
    doubled (or grown by a quarter, while the attribute had fewer than ``EXAMPLES`` facts) is drawn again.
    A forgotten fact leaves the mean at the next draw.
    """

    def __init__(self, sample: Sample, capacity: int = CACHE_SIZE) -> None:
        self._sample = sample
        self._capacity = capacity
        self._lock = threading.Lock()
        self._means: OrderedDict[tuple[int, str], tuple[npt.NDArray[np.float32] | None, int, int]] = OrderedDict()
        """(namespace, attribute) -> (mean unit vector or None, namespace size when drawn, facts drawn)."""

    def similarities(
        self, namespace: int, size: int, attributes: Sequence[str], query: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float64]:
        """Cosine between ``query`` and each attribute's examples in a namespace holding ``size`` memories.

        NaN for an empty attribute or one without a live fact in the namespace.
        """
        out = np.full(len(attributes), np.nan, dtype=np.float64)
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or not np.isfinite(norm):
            return out
        unit = np.asarray(query, dtype=np.float32) / norm
        means = {a: self._mean(namespace, size, a) for a in dict.fromkeys(attributes) if a}
        for position, attribute in enumerate(attributes):
            mean = means.get(attribute)
            if mean is not None:
                out[position] = float(mean @ unit)
        return out

    def mean(self, namespace: int, size: int, attribute: str) -> npt.NDArray[np.float32] | None:
        """The unit mean direction of an attribute's examples in a namespace holding ``size`` memories, or None."""
        return self._mean(namespace, size, attribute) if attribute else None

    def _mean(self, namespace: int, size: int, attribute: str) -> npt.NDArray[np.float32] | None:
        key = (namespace, attribute)
        with self._lock:
            cached = self._means.get(key)
            if cached is not None:
                self._means.move_to_end(key)
                mean, drawn_at, drawn = cached
                if size < drawn_at * (REFRESH_GROWTH if drawn >= EXAMPLES else REFRESH_GROWTH_PARTIAL):
                    return mean
        # Drawn outside the lock: two recalls may both draw, and the later one's result is kept.
        vectors = np.asarray(self._sample(namespace, attribute), dtype=np.float32)
        found: npt.NDArray[np.float32] | None = None
        if vectors.size:
            total = vectors.sum(axis=0, dtype=np.float64)
            length = float(np.linalg.norm(total))
            if length > 0.0 and np.isfinite(length):
                found = (total / length).astype(np.float32)
        with self._lock:
            self._means[key] = (found, max(size, 1), len(vectors))
            self._means.move_to_end(key)
            while len(self._means) > self._capacity:
                self._means.popitem(last=False)
        return found
