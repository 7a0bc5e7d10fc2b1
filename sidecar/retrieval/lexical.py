"""BM25 over memory text, kept incrementally: the lexical signal fused with the vector one.

Embeddings blur names, numbers and dates; exact word matches keep them. The
index is an in-memory inverted index (token -> ids and term counts in compact
arrays) rebuilt from RocksDB at start and updated after each durable write.
Deleted memories stay in the postings and are dropped by the state filter;
their document length no longer counts in the average.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from array import array
from collections import Counter

import numpy as np
import numpy.typing as npt

from memevo.v1 import memory_pb2

K1 = 1.2
B = 0.75
MAX_QUERY_TOKENS = 64
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
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
    """Lower-cased word tokens; CJK text becomes single characters (no word breaks to rely on)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    tokens: list[str] = []
    for word in _WORD.findall(folded):
        if _CJK.search(word):
            tokens.extend(ch for ch in word if not ch.isspace())
        elif word not in STOPWORDS:
            tokens.append(word)
    return tokens


class LexicalIndex:
    """An Okapi BM25 index keyed by memory id. Thread-safe: writes take a lock, reads copy views."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, array[int]] = {}
        self._counts: dict[str, array[int]] = {}
        self._length: array[int] = array("I")
        self._documents = 0
        self._total_length = 0

    def add(self, memory_id: int, text: str) -> None:
        """Index ``text`` under ``memory_id`` (ids are added once, in any order)."""
        counts = Counter(tokenize(text))
        length = sum(counts.values())
        with self._lock:
            if memory_id >= len(self._length):
                self._length.extend([0] * (memory_id + 1 - len(self._length)))
            self._length[memory_id] = length
            self._documents += 1
            self._total_length += length
            for token, count in counts.items():
                ids = self._ids.get(token)
                if ids is None:
                    ids = self._ids[token] = array("Q")
                    self._counts[token] = array("H")
                ids.append(memory_id)
                self._counts[token].append(min(count, 65_535))

    def remove(self, memory_id: int) -> None:
        """Forget a deleted memory's length (its postings are filtered out by state)."""
        with self._lock:
            if memory_id < len(self._length) and self._length[memory_id]:
                self._total_length -= self._length[memory_id]
                self._documents -= 1
                self._length[memory_id] = 0

    def search(self, query: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every id matching a query word and its BM25 score, unsorted (the caller filters, then ranks)."""
        terms = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TOKENS]
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        views: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.uint16], npt.NDArray[np.uint32]]] = []
        with self._lock:
            documents = max(self._documents, 1)
            average = self._total_length / documents if self._total_length else 1.0
            # Copy out only the postings' rows, never the whole length array (4 bytes per memory, per query);
            # every view of a growing array is gone before the lock is released (an export blocks appends).
            all_lengths = np.frombuffer(self._length, dtype=np.uint32) if len(self._length) else None
            for term in terms:
                ids_array, counts_array = self._ids.get(term), self._counts.get(term)
                if all_lengths is None or ids_array is None or counts_array is None or not len(ids_array):
                    continue
                ids = np.frombuffer(ids_array, dtype=np.uint64).astype(np.int64)
                counts = np.frombuffer(counts_array, dtype=np.uint16).copy()
                views.append((ids, counts, all_lengths[ids]))
            del all_lengths
        if not views:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        all_ids = []
        all_scores = []
        for ids, counts, lengths in views:
            frequency = ids.size
            idf = math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))
            tf = counts.astype(np.float32)
            norm = K1 * (1.0 - B + B * lengths.astype(np.float32) / average)
            all_ids.append(ids)
            all_scores.append((idf * tf * (K1 + 1.0) / (tf + norm)).astype(np.float32))
        if len(all_ids) == 1:  # postings hold each id once
            return all_ids[0], all_scores[0]
        ids = np.concatenate(all_ids)
        scores = np.concatenate(all_scores)
        # Sum per id: sort once and add runs (np.unique's inverse and np.add.at cost several times more).
        order = np.argsort(ids, kind="stable")
        ids, scores = ids[order], scores[order]
        starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
        return ids[starts], np.add.reduceat(scores, starts).astype(np.float32)


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

    def add(self, namespace: str, memory_id: int, text: str) -> None:
        """Index ``text`` under ``memory_id`` in ``namespace``."""
        self._index(namespace).add(memory_id, text)

    def remove(self, namespace: str, memory_id: int) -> None:
        """Forget a deleted memory's length in its namespace."""
        self._index(namespace).remove(memory_id)

    def search(self, namespace: str, query: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Ids of ``namespace`` matching a query word, with BM25 scores."""
        with self._lock:
            index = self._indexes.get(namespace)
        if index is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return index.search(query)


def searchable_text(record: memory_pb2.Memory) -> str:
    """What BM25 indexes for a memory: its text plus the fields an agent names in questions.

    The entity, the fact's attribute and a strategy's task signature are where
    a question's words ("What is Bianca's job title?") meet the memory most
    reliably, and an embedding of a long text dilutes them.
    """
    extra = " ".join(part for part in (record.entity, record.fact.attribute, record.task_signature) if part)
    return f"{record.content} {extra}" if extra else record.content
