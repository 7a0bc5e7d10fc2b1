"""BM25 over memory text, kept incrementally: the lexical signal fused with the vector one.

Embeddings blur names, numbers and dates; exact word matches keep them. The
index is an in-memory inverted index (token -> ids and term counts in compact
arrays) rebuilt from RocksDB at start and updated after each durable write.
Deleted memories stay in the postings and are dropped by the state filter;
their document length no longer counts in the average. A memory's reasoning
context (see :func:`context_text`) is indexed with it at half weight.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import compress

import numpy as np
import numpy.typing as npt
import snowballstemmer

from memevo.kernels.lexical import Scratch, bm25, length_code
from memevo.sidecar.store.snapshot import SnapshotError, SnapshotReader, SnapshotWriter, copy_parts, first_items
from memevo.v1 import memory_pb2

K1 = 1.2
B = 0.75
MAX_QUERY_TOKENS = 64
CONTEXT_WEIGHT = 0.5
"""What a word of a memory's reasoning context counts for against a word of its own text (see :func:`context_text`).

A conversational turn often makes sense only after the one it answers ("Yes! Last Saturday." after "Did you go
to the parade?"): the words it answered find it too, at half weight, so its own words still lead. Measured on
LoCoMo (RESULTS.md): single-hop recall@5 0.647 -> 0.738 with the previous turn as context.
"""
_UNITS = 2
"""Term counts and lengths are stored in half-occurrences, so that a context word's half is a whole number."""
_CONTEXT_UNITS = round(CONTEXT_WEIGHT * _UNITS)
COMMON_SHARE = 0.05
COMMON_MIN_POSTINGS = 50_000
"""A query word held by more than COMMON_SHARE of a namespace's memories and by more than COMMON_MIN_POSTINGS
of them is common: when the query also has a rarer word, the common one adds its score only to the memories a
rarer word matches (Lucene's cutoff-frequency "common terms" query). Its postings are still read, but a memory
holding only common words is not listed, which saves its scattered update and the caller's filtering of it:
in a million chat turns a speaker's name or "how" is in 6-23 % of them, 150 thousand matches per question of
which recall keeps the best few dozen. The best few dozen nearly always hold a rarer word (measured: the 40
best scores were the same for 500 of 500 LoCoMo questions over a million turns); a memory that outscores them
with common words alone is left to the vector side. Below the absolute floor, a namespace under a million
memories in practice, nothing changes.
"""
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_POSSESSIVE = re.compile(r"(?<=\w)['\u2019]s\b")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# Words that carry no evidence in a memory ranking; short on purpose (names and numbers must stay).
STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    )
)


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed word tokens; CJK text becomes single characters (no word breaks to rely on).

    An English possessive or "is" clitic ('s) is dropped, as English analyzers do: left as a word of its
    own, the "s" of "What's" matched every memory that says "Bianca's", whatever it was about. Words
    are reduced to their stem (see :func:`stem`), so "researching" meets "research".
    """
    if text.isascii():
        # ASCII is its own NFKC form, casefolds as it lowercases and holds no CJK: the common case, cheaply.
        return [stem(w) for w in _WORD.findall(_POSSESSIVE.sub("", text.lower())) if w not in STOPWORDS]
    folded = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", text).casefold())
    tokens: list[str] = []
    for word in _WORD.findall(folded):
        if _CJK.search(word):
            tokens.extend(ch for ch in word if not ch.isspace())
        elif word not in STOPWORDS:
            tokens.append(stem(word))
    return tokens


STEM_MIN_LETTERS = 4
"""Shorter words are kept whole: stems of two or three letters merge unrelated words ("us", "use")."""
_STEMMER = snowballstemmer.stemmer("english")
_STEMMER_LOCK = threading.Lock()


@lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of an ASCII alphabetic word; any other word as it is.

    English analyzers stem (Lucene's, Elasticsearch's "english"): a question rarely uses the
    inflection its answer did ("Where did she move?" / "she moved to Lisbon"). Numbers, codes
    ("v2", "8080") and words in other scripts stay whole. Measured on LoCoMo (RESULTS.md): recall@10
    0.634 -> 0.660. Cached: an agent's vocabulary is small and the stemmer is pure Python (~25 µs a word).
    """
    if len(word) < STEM_MIN_LETTERS or not word.isascii() or not word.isalpha():
        return word
    with _STEMMER_LOCK:  # the stemmer keeps its working state in the object
        return str(_STEMMER.stemWord(word))


_WORD_SEPARATOR = "\0"
"""Between words in a snapshot (a token never holds one: see :func:`tokenize`)."""


def _joined(words: list[str]) -> npt.NDArray[np.uint8]:
    """Words as one UTF-8 array for a snapshot: a million of them are encoded in ~30 ms, where JSON took 0.3 s
    holding the GIL (every writer waiting)."""
    return np.frombuffer(_WORD_SEPARATOR.join(words).encode(), dtype=np.uint8).copy()


def _split(joined: npt.NDArray[np.uint8]) -> list[str]:
    """The words :func:`_joined` stored; SnapshotError when they are not UTF-8."""
    if not joined.size:
        return []
    try:
        return joined.tobytes().decode().split(_WORD_SEPARATOR)
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"snapshot words are not UTF-8: {exc}") from exc


_Joined = tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.uint16]]
"""Postings as a snapshot stores them: the words, each one's number of postings, their ids and counts joined."""


class _Restored:
    """The postings a start-up snapshot held, as the file gave them: one array of every word's ids, one of its
    counts, and where each word's begin; never changed. A word's postings become an appendable array of the index
    (:meth:`LexicalIndex._thaw`) only when a memory adds to it: building a million of them at start took 2 s on an
    idle machine and 8-18 s under load, for words most of which no write touches again."""

    def __init__(
        self,
        words: list[str],
        lengths: npt.NDArray[np.int64],
        ids: npt.NDArray[np.uint64],
        counts: npt.NDArray[np.uint16],
    ) -> None:
        self.words = words
        self.position = dict(zip(words, range(len(words)), strict=True))
        if len(self.position) != len(words):
            raise SnapshotError("snapshot word index lists a word twice")
        self.starts = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.starts[1:])
        self.ids = ids
        self.counts = counts
        self.thawed = np.zeros(len(words), dtype=bool)
        """Words whose postings the index now holds as its own arrays (the ones here are then stale)."""

    def posting(self, word: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16]] | None:
        position = self.position.get(word)
        if position is None or self.thawed[position]:
            return None
        span = slice(int(self.starts[position]), int(self.starts[position + 1]))
        return self.ids[span], self.counts[span]

    def untouched(self, thawed: npt.NDArray[np.bool_]) -> _Joined:
        """The words not ``thawed`` (a copy of :attr:`thawed`), with their postings (for a snapshot)."""
        keep = ~thawed
        lengths = np.diff(self.starts)
        if keep.all():
            return self.words, lengths, self.ids, self.counts
        items = np.repeat(keep, lengths)
        return list(compress(self.words, keep.tolist())), lengths[keep], self.ids[items], self.counts[items]


class LexicalIndex:
    """An Okapi BM25 index keyed by memory id. Thread-safe: writes take a lock, reads copy views."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, array[int]] = {}
        self._counts: dict[str, array[int]] = {}
        self._length: array[int] = array("I")
        self._length_code: array[int] = array("B")
        """Each length as the kernel reads it (see ``memevo.kernels.lexical.length_code``); exact ones keep the sum."""
        self._documents = 0
        self._total_length = 0
        self._in_order = True
        """Whether every id was added above all earlier ones (the engine adds them as it gives them out): a snapshot
        then tells the postings it holds from later ones by id alone (see :meth:`save_snapshot`)."""
        self._restored: _Restored | None = None
        """Postings of the start-up snapshot not yet copied into ``_ids`` and ``_counts`` (see :class:`_Restored`)."""

    def add(self, memory_id: int, text: str, context: str = "") -> None:
        """Index ``text`` under ``memory_id``, and the words of its ``context`` at CONTEXT_WEIGHT (ids are added once,
        in any order)."""
        counts: Counter[str] = Counter()
        for token in tokenize(text):
            counts[token] += _UNITS
        if context:
            for token in tokenize(context):
                counts[token] += _CONTEXT_UNITS
        length = sum(counts.values())
        with self._lock:
            self._in_order = self._in_order and memory_id >= len(self._length)
            if memory_id >= len(self._length):
                self._length.extend([0] * (memory_id + 1 - len(self._length)))
                self._length_code.extend([0] * (memory_id + 1 - len(self._length_code)))
            self._length[memory_id] = length
            self._length_code[memory_id] = length_code(length)
            self._documents += 1
            self._total_length += length
            for token, count in counts.items():
                ids = self._ids.get(token)
                if ids is None:
                    ids = self._thaw(token)
                ids.append(memory_id)
                self._counts[token].append(min(count, 65_535))

    def _thaw(self, word: str) -> array[int]:
        """A new posting of ``word`` to append to, holding what the start-up snapshot held of it; under the lock."""
        ids, counts = array("Q"), array("H")
        restored = self._restored.posting(word) if self._restored is not None else None
        if restored is not None:
            ids.frombytes(restored[0].tobytes())
            counts.frombytes(restored[1].tobytes())
            assert self._restored is not None
            self._restored.thawed[self._restored.position[word]] = True
        self._ids[word] = ids
        self._counts[word] = counts
        return ids

    def _posting(self, word: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16]] | None:
        """A word's ids and counts (views; under the lock, and let go before it is released), None when no memory
        holds it."""
        ids = self._ids.get(word)
        if ids is not None:
            return np.frombuffer(ids, dtype=np.uint64), np.frombuffer(self._counts[word], dtype=np.uint16)
        return self._restored.posting(word) if self._restored is not None else None

    def _frequency(self, word: str) -> int:
        """How many postings a word has; under the lock."""
        ids = self._ids.get(word)
        if ids is not None:
            return len(ids)
        restored = self._restored.posting(word) if self._restored is not None else None
        return 0 if restored is None else int(restored[0].size)

    def save_snapshot(self, writer: SnapshotWriter) -> None:
        """Write the postings, lengths and totals as they are now (start-up snapshot; nothing may write meanwhile).

        Only the lengths and totals are copied now: postings only grow, and while ids come in order every posting
        added from now on has an id at or above the current length, so the postings are copied later
        (:meth:`SnapshotWriter.finish`, writers running meanwhile) and those ids left out. A million words'
        postings took 0.3 s to copy, every writer waiting.
        """
        with self._lock:
            below = len(self._length)
            in_order = self._in_order
            writer.ndarray("length", np.frombuffer(self._length, dtype=np.uint32))
            writer.ndarray("length_code", np.frombuffer(self._length_code, dtype=np.uint8))
            writer.value("documents", self._documents)
            writer.value("total_length", self._total_length)
            if not in_order:  # added out of order (never by the engine): copied now, the way that needs no order
                self._save_postings_now(writer)
                return
        writer.defer(lambda: self._save_postings_below(writer, below))

    def _save_postings_now(self, writer: SnapshotWriter) -> None:
        # Both dicts gain a word at the same time, so their values come in the order of the words (no lookup per
        # word: a million of them).
        words = list(self._ids)
        ids, held = copy_parts(list(self._ids.values()), "Q")
        counts, _ = copy_parts(list(self._counts.values()), "H")
        self._save_joined(writer, words, held, ids, counts, self._restored_part())

    def _restored_part(self, thawed: npt.NDArray[np.bool_] | None = None) -> _Joined:
        """The restored postings no write had touched when ``thawed`` was copied (now by default); they never
        change, so this may run outside the lock."""
        if self._restored is None:
            return [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint16)
        return self._restored.untouched(self._restored.thawed.copy() if thawed is None else thawed)

    @staticmethod
    def _save_joined(
        writer: SnapshotWriter,
        words: list[str],
        lengths: npt.NDArray[np.int64],
        ids: npt.NDArray[np.uint64],
        counts: npt.NDArray[np.uint16],
        restored: _Joined,
    ) -> None:
        """Store the index's own postings and the untouched restored ones as one list of words."""
        old_words, old_lengths, old_ids, old_counts = restored
        writer.own("words", _joined(old_words + words))
        writer.joined_array_list("ids", np.concatenate((old_lengths, lengths)), np.concatenate((old_ids, ids)))
        writer.joined_array_list("counts", np.concatenate((old_lengths, lengths)), np.concatenate((old_counts, counts)))

    def _save_postings_below(self, writer: SnapshotWriter, below: int) -> None:
        """The postings of ids below ``below`` (those added before :meth:`save_snapshot`), copied while writers run."""
        with self._lock:  # words, postings and counts that belong together (references only: ~10 ms a million)
            words = list(self._ids)
            ids_parts = list(self._ids.values())
            counts_parts = list(self._counts.values())
            thawed = self._restored.thawed.copy() if self._restored is not None else None
        ids, held = copy_parts(ids_parts, "Q")
        counts, counted = copy_parts(counts_parts, "H")
        # Postings are appended in id order, so the ids below ``below`` are each posting's first ones.
        earlier = ids < below
        running = np.concatenate(([0], np.cumsum(earlier, dtype=np.int64)))
        ends = np.cumsum(held)
        kept = running[ends] - running[ends - held]
        present = kept > 0  # a word first met after save_snapshot has none: left out
        restored = self._restored_part(thawed)
        self._save_joined(
            writer,
            list(compress(words, present.tolist())),
            kept[present],
            ids[earlier],
            first_items(counts, counted, kept),
            restored,
        )

    @classmethod
    def load_snapshot(cls, reader: SnapshotReader) -> LexicalIndex:
        """The index :meth:`save_snapshot` wrote; SnapshotError when its parts do not fit together."""
        index = cls()
        words = _split(reader.ndarray("words", np.uint8))
        (lengths, ids), (counted, counts) = reader.joined("ids", "Q"), reader.joined("counts", "H")
        if not len(words) == lengths.size or not np.array_equal(lengths, counted):
            raise SnapshotError("snapshot word index: words, postings and counts do not fit together")
        index._restored = _Restored(words, lengths, ids, counts)
        index._length = array("I", reader.ndarray("length", np.uint32).tobytes())
        index._length_code = array("B", reader.ndarray("length_code", np.uint8).tobytes())
        if len(index._length) != len(index._length_code):
            raise SnapshotError("snapshot word index: lengths and their codes do not fit together")
        index._documents = reader.value("documents", int)
        index._total_length = reader.value("total_length", int)
        return index

    def remove(self, memory_id: int) -> None:
        """Forget a deleted memory's length (its postings are filtered out by state)."""
        with self._lock:
            if memory_id < len(self._length) and self._length[memory_id]:
                self._total_length -= self._length[memory_id]
                self._documents -= 1
                self._length[memory_id] = 0
                self._length_code[memory_id] = 0

    def idf(self, terms: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Each term's BM25 idf in this index (a term no document holds gets the highest), and whether one does."""
        with self._lock:
            documents = max(self._documents, 1)
            frequencies = [self._frequency(term) for term in terms]
        return [_idf(documents, frequency) for frequency in frequencies], [frequency > 0 for frequency in frequencies]

    def postings(self, terms: Sequence[str]) -> int:
        """How many postings the terms hold together: what a search for them reads, the measure of its cost."""
        with self._lock:
            return sum(self._frequency(term) for term in terms)

    def search(self, query: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every id matching a query word and its BM25 score, unsorted (the caller filters, then ranks).

        When the query has a rarer word, ids holding only common words are left out (see COMMON_SHARE).
        """
        return self.search_terms(tokenize(query))

    def search_terms(self, tokens: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """:meth:`search` for a query already tokenized (by :func:`tokenize`; repeats are ignored)."""
        terms = list(dict.fromkeys(tokens))[:MAX_QUERY_TOKENS]
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scratch = _SCRATCH.take()
        try:
            with self._lock:
                # Scored under the lock: the postings are views of growing arrays, which must be gone
                # before an append may resize them; the kernel reads each posting once (tens of µs).
                documents = max(self._documents, 1)
                average = self._total_length / documents if self._total_length else 1.0
                postings: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16], float]] = []
                common: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint16], float]] = []
                cutoff = max(COMMON_SHARE * documents, COMMON_MIN_POSTINGS)
                for term in terms:
                    found = self._posting(term)
                    if found is not None and found[0].size:
                        frequency = int(found[0].size)
                        (common if frequency > cutoff else postings).append(
                            (found[0], found[1], _idf(documents, frequency))
                        )
                    # A local left holding a view after the lock is released (the frame lives until the function
                    # returns) made a concurrent add() fail with BufferError.
                    del found
                if not postings:  # only common words: they alone say which memories match
                    postings, common = common, []
                if not postings:
                    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
                codes = np.frombuffer(self._length_code, dtype=np.uint8)
                try:
                    return bm25(postings, codes, average, K1, B, scratch, common, count_unit=1.0 / _UNITS)
                finally:
                    del codes, postings, common
        finally:
            _SCRATCH.give_back(scratch)


def _idf(documents: int, frequency: int) -> float:
    """Okapi BM25's idf (the formula :meth:`LexicalIndex.search` scores with), always positive.

    Deleted memories stay in the postings but not in the document count, so a word's postings can
    outnumber the documents; counted as held by every document it is then merely common, where the plain
    formula turned negative and ranked the memories that say the word below those that do not.
    """
    return math.log(1.0 + (max(documents - frequency, 0) + 0.5) / (frequency + 0.5))


class _ScratchPool:
    """BM25 accumulators shared by every index: one per concurrent search, reused (see kernels/lexical.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[Scratch] = []

    def take(self) -> Scratch:
        with self._lock:
            return self._free.pop() if self._free else Scratch()

    def give_back(self, scratch: Scratch) -> None:
        with self._lock:
            self._free.append(scratch)


_SCRATCH = _ScratchPool()


class NamespacedLexicalIndex:
    """One BM25 index per namespace: word rarity and document length are a tenant's own.

    A name that is rare across all tenants but common in one conversation must
    not dominate that conversation's ranking.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._indexes: dict[str, LexicalIndex] = {}

    def _index(self, namespace: str) -> LexicalIndex:
        with self._lock:
            index = self._indexes.get(namespace)
            if index is None:
                index = self._indexes[namespace] = LexicalIndex()
            return index

    def save_snapshot(self, writer: SnapshotWriter) -> None:
        """Write each namespace's index (start-up snapshot; nothing may write meanwhile)."""
        with self._lock:
            indexes = list(self._indexes.items())
        writer.value("namespaces", [namespace for namespace, _ in indexes])
        for position, (_, index) in enumerate(indexes):
            index.save_snapshot(writer.child(str(position)))

    @classmethod
    def load_snapshot(cls, reader: SnapshotReader) -> NamespacedLexicalIndex:
        """The indexes :meth:`save_snapshot` wrote; SnapshotError when they do not fit together."""
        namespaced = cls()
        namespaces = reader.strings("namespaces")
        namespaced._indexes = {
            namespace: LexicalIndex.load_snapshot(reader.child(str(position)))
            for position, namespace in enumerate(namespaces)
        }
        if len(namespaced._indexes) != len(namespaces):
            raise SnapshotError("snapshot word index lists a namespace twice")
        return namespaced

    def add(self, namespace: str, memory_id: int, text: str, context: str = "") -> None:
        """Index ``text`` (and its ``context`` at CONTEXT_WEIGHT) under ``memory_id`` in ``namespace``."""
        self._index(namespace).add(memory_id, text, context)

    def remove(self, namespace: str, memory_id: int) -> None:
        """Forget a deleted memory's length in its namespace."""
        self._index(namespace).remove(memory_id)

    def idf(self, namespace: str, terms: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Each term's idf in ``namespace`` and whether a memory there holds it (see :meth:`LexicalIndex.idf`)."""
        with self._lock:
            index = self._indexes.get(namespace)
        return (index or LexicalIndex()).idf(terms)

    def postings(self, namespace: str, terms: Sequence[str]) -> int:
        """How many postings ``terms`` hold together in ``namespace`` (see :meth:`LexicalIndex.postings`)."""
        with self._lock:
            index = self._indexes.get(namespace)
        return index.postings(terms) if index is not None else 0

    def search(self, namespace: str, query: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Ids of ``namespace`` matching a query word, with BM25 scores."""
        return self.search_terms(namespace, tokenize(query))

    def search_terms(
        self, namespace: str, tokens: Sequence[str]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """:meth:`search` for a query already tokenized (by :func:`tokenize`)."""
        with self._lock:
            index = self._indexes.get(namespace)
        if index is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return index.search_terms(tokens)


def searchable_text(record: memory_pb2.Memory) -> str:
    """What BM25 indexes for a memory: its text plus the fields an agent names in questions.

    The entity, the fact's attribute and a strategy's task signature are where
    a question's words ("What is Bianca's job title?") meet the memory most
    reliably, and an embedding of a long text dilutes them.
    """
    about = (record.entity or record.inferred.entity, record.fact.attribute or record.inferred.attribute)
    extra = " ".join(part for part in (*about, record.task_signature) if part)
    return f"{record.content} {extra}" if extra else record.content


CONTEXT_MEMORIES = 4
"""At most this many of the memories a reasoning context names lend their text to it (the first ones named)."""


def context_text(record: memory_pb2.Memory, contents: Mapping[int, tuple[str, str]]) -> str:
    """What BM25 indexes at CONTEXT_WEIGHT for a memory: its reasoning context's text and the text of the first
    CONTEXT_MEMORIES memories it names (``contents``: id -> (namespace, text); ids missing there are skipped).

    Only memories of the record's own namespace lend their words: a memory naming another namespace's would let
    its words be probed by a word search in this one.
    """
    context = record.reasoning_context
    parts: list[str] = []
    for memory_id in list(context.memory_ids)[:CONTEXT_MEMORIES]:
        found = contents.get(memory_id)
        if found is not None and found[0] == record.namespace:
            parts.append(found[1])
    if context.text:
        parts.append(context.text)
    return " ".join(parts)
