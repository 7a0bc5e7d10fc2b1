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

Recall compares a query with every attribute of its candidates' entity types on each call: ``AttributeMatrices``
keeps, per namespace and entity type, all those vectors as the rows of one matrix (``AttributeDirections``), so that
the comparison is one product instead of a locked cache lookup and a dot product per attribute.

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
from dataclasses import dataclass

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
MATRICES_KEPT = 4_096
"""(namespace, entity type) matrices kept (``AttributeMatrices``): ~45 KB each for ten 384-d attributes."""

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
        return self.lookup(keys)[0]

    def lookup(self, keys: Sequence[tuple[str, str]]) -> tuple[list[npt.NDArray[np.float32] | None], bool]:
        """:meth:`vectors`, and whether all were answered (False when the embedder failed: ask again later)."""
        wanted = [key for key in dict.fromkeys(keys) if key[0]]
        found = self._lookup(wanted)
        return [found.get(key) for key in keys], len(found) == len(wanted)

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
        self._versions: dict[int, int] = {}
        """Per namespace: how many of its means have been drawn or forgotten (see :meth:`version`)."""

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

    def means(
        self, namespace: int, size: int, attributes: Sequence[str]
    ) -> tuple[list[npt.NDArray[np.float32] | None], float]:
        """:meth:`mean` of each attribute, and the namespace size at which the first of them will be drawn again.

        Until the namespace holds that many memories and while :meth:`version` stays the same, :meth:`mean` gives
        the same vectors.
        """
        found = [self.mean(namespace, size, attribute) for attribute in attributes]
        until = np.inf
        with self._lock:
            for attribute in attributes:
                cached = self._means.get((namespace, attribute))
                if cached is not None:
                    until = min(until, cached[1] * _growth(cached[2]))
        return found, float(until)

    def version(self, namespace: int) -> int:
        """A number that changes whenever one of the namespace's means is drawn or forgotten."""
        return self._versions.get(namespace, 0)

    def _mean(self, namespace: int, size: int, attribute: str) -> npt.NDArray[np.float32] | None:
        key = (namespace, attribute)
        with self._lock:
            cached = self._means.get(key)
            if cached is not None:
                self._means.move_to_end(key)
                mean, drawn_at, drawn = cached
                if size < drawn_at * _growth(drawn):
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
            self._versions[namespace] = self._versions.get(namespace, 0) + 1
            while len(self._means) > self._capacity:
                forgotten = self._means.popitem(last=False)[0][0]
                self._versions[forgotten] = self._versions.get(forgotten, 0) + 1
        return found


def _growth(drawn: int) -> float:
    """How many times its namespace's size at the draw a sample of ``drawn`` facts is drawn again at."""
    return REFRESH_GROWTH if drawn >= EXAMPLES else REFRESH_GROWTH_PARTIAL


@dataclass(frozen=True)
class AttributeDirections:
    """One entity type's attributes in one namespace as the rows of one matrix: bare names, names said of the type,
    examples' means (see ``AttributeMeanings`` and ``AttributeExamples``).

    Made by ``AttributeMatrices``; never changed, so recall threads share it without a lock.
    """

    entity_type: str
    known: tuple[str, ...]
    """The attributes asked for when it was made; the first rows, in this order."""
    attributes: tuple[str, ...]
    """Every attribute with rows: ``known``, then others met since (see :meth:`AttributeMatrices.get`)."""
    index: dict[str, int]
    """Attribute -> its row in each block."""
    matrix: npt.NDArray[np.float32]
    """3 x len(attributes) unit rows: the bare names, the names said of ``entity_type``, the examples' means; zero
    where there is none (``absent``)."""
    absent: npt.NDArray[np.bool_]
    """Rows of ``matrix`` without a vector."""
    examples_until: float
    """Namespace size at which one of the examples' means is drawn again."""
    examples_version: int
    """``AttributeExamples.version`` of the namespace before the means were read."""
    complete: bool
    """Every name was answered (False after an embedder failure: made again on the next call)."""

    def cosines(self, unit: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """3 x len(attributes): the cosines of a unit query to each block's rows; NaN where a row is absent."""
        out = np.asarray(self.matrix @ unit, dtype=np.float64)
        out[self.absent] = np.nan
        return out.reshape(3, -1)

    def block(self, which: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """One block's rows and which of them hold a vector: 0 bare names, 1 names said of the type, 2 examples."""
        count = len(self.attributes)
        rows = slice(which * count, (which + 1) * count)
        return self.matrix[rows], ~self.absent[rows]


class AttributeMatrices:
    """``AttributeDirections`` per (namespace, entity type), kept while they say what the caches would say.

    A matrix is made again when the attributes asked for change, when one of its examples' means is due to be drawn
    again or has been (``AttributeExamples.version``), or after an embedder failure. Thread-safe: two recalls may
    both make one, and the later one is kept.
    """

    def __init__(
        self,
        meanings: AttributeMeanings | None,
        examples: AttributeExamples,
        dimension: int,
        capacity: int = MATRICES_KEPT,
    ) -> None:
        self.meanings = meanings
        """Where the names come from; None: no name rows."""
        self._examples = examples
        self._dimension = dimension
        self._capacity = capacity
        self._lock = threading.Lock()
        self._kept: dict[tuple[int, str], AttributeDirections] = {}

    def get(
        self, namespace: int, size: int, entity_type: str, known: tuple[str, ...], others: Sequence[str] = ()
    ) -> AttributeDirections:
        """The directions of ``known`` (the first rows, in order) and of ``others`` in a namespace of ``size``.

        The matrix may hold more rows: attributes asked for as ``others`` before stay until ``known`` changes.
        """
        key = (namespace, entity_type)
        kept = self._kept.get(key)
        if (
            kept is not None
            and kept.known == known
            and kept.complete
            and size < kept.examples_until
            and kept.examples_version == self._examples.version(namespace)
            and all(attribute in kept.index for attribute in others)
        ):
            return kept
        extra = [] if kept is None or kept.known != known else list(kept.attributes[len(known) :])
        attributes = tuple(dict.fromkeys([*known, *extra, *others]))
        made = self._make(namespace, size, entity_type, known, attributes)
        with self._lock:
            self._kept.pop(key, None)
            self._kept[key] = made
            while len(self._kept) > self._capacity:  # the oldest made goes first
                del self._kept[next(iter(self._kept))]
        return made

    def _make(
        self, namespace: int, size: int, entity_type: str, known: tuple[str, ...], attributes: tuple[str, ...]
    ) -> AttributeDirections:
        count = len(attributes)
        matrix = np.zeros((3 * count, self._dimension), dtype=np.float32)
        absent = np.ones(3 * count, dtype=bool)
        complete = True
        if self.meanings is not None:
            names, complete = self.meanings.lookup(
                [(a, "") for a in attributes] + [(a, entity_type) for a in attributes]
            )
            for row, vector in enumerate(names):
                if vector is not None:
                    matrix[row], absent[row] = vector, False
        version = self._examples.version(namespace)
        means, until = self._examples.means(namespace, size, attributes)
        for row, mean in enumerate(means, start=2 * count):
            if mean is not None:
                matrix[row], absent[row] = mean, False
        index = {attribute: row for row, attribute in enumerate(attributes)}
        return AttributeDirections(entity_type, known, attributes, index, matrix, absent, until, version, complete)
