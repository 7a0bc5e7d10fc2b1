"""Slots of plain-text statements: which (entity, attribute) a memory written without a fact key fills.

Most agents write sentences, not fact keys. A statement about an entity still
fills a slot — "Viktor said: answer me in French from now on." sets Viktor's
language — and a newer statement of the same slot retires the older one, as a
new value of a fact key does. Nothing here uses a model or an LLM; the
evidence is the namespace's own data, read at write time:

- **Entity names** (:class:`EntityNames`): an entity id names its entity
  ("user:viktor-petrov" → "viktor petrov"); a text that says the whole name,
  or a capitalised word of it that no other entity's name has ("Viktor"), is
  about that entity.
- **Templates of keyed facts** (:class:`Templates`): a keyed fact's text with
  its entity's name and its value cut out ("<e> now listens on port <v>") is
  how that attribute is said in this namespace; a text that matches it states
  that attribute, and the span where the value was is its value. More keyed
  facts, more templates: the inference improves as keys accumulate.
- **Same template, one span different** (:func:`differing_spans`): two
  statements of one entity that differ in a single short span are two values
  of one slot ("Escalations about X go to Ana." / "... go to Bo.") — which
  needs no key at all. Two texts without an entity are compared when they
  share everything but their ending (``conflicts.head_keys``: "Who chairs
  the board? Maria Silva" / "... Tom Berg").
- **Vectors** (:class:`AttributeCentroids`): how near a text lies to each
  attribute's keyed facts (centred means per entity type), for statements no
  template covers; weaker evidence, used for soft conflicts.
"""

from __future__ import annotations

import math
import re
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..retrieval.answer_type import ValueType, value_type

ENTITY_MARK = "<e>"
"""Stands for the entity's name in a template."""
VALUE_MARK = "<v>"
"""Stands for the value in a template."""
MAX_VALUE_TOKENS = 8
"""Longest value span, in words: a longer differing span is another statement, not another value."""
MIN_FIXED_TOKENS = 2
"""Words a template must fix besides the entity and the value ("<e> <v>" says nothing about an attribute)."""
PAIR_FIXED_SHARE = 0.5
"""Two texts are one template with two values when their common head and tail hold this share of the longer.

A value may be as long as what frames it: "The best way to reach Kofi Cohen is a calendar invite with context." and
"... Kofi is a Slack DM." share 7 of 12 words. At 0.6 such pairs were missed; at 0.5 (with the rule that the span may
not be everything said after the entity) the tuning half's same-entity pairs gave 15-105 more same-slot pairs per
world (1k: 10 -> 25 of 140, 10k: 225 -> 330 of 1,764) and 1 pair of two slots in 13,052 (RESULTS.md, twenty-first
session)."""
PAIR_MIN_FIXED = 3
"""... and at least this many words."""
TEMPLATE_AGREEMENT = 0.9
"""A template names an attribute when at least this share of the keyed facts that used it set that attribute."""
MAX_TEMPLATES = 200_000
"""Templates kept per namespace (a bound on RAM; the newest keyed facts' templates are the ones learnt)."""
VALUE_MIN_COUNT = 2
"""Times a value must have been given (by keyed facts) before it says which attribute a text states."""
OWN_TRACKED_ENTITIES = 16
"""Entities per (type, attribute) whose share of the attribute's direction is kept, to leave it out (see
``AttributeCentroids.margin``): past that many, one entity's facts move the mean little."""
NAME_MARGIN = 0.15
"""How much nearer an attribute's embedded name ("the user's working hours") a statement must lie than any other
attribute's of its entity's type for its name to say which slot the statement fills (see ``AttributeNames``).

Measured on the tuning half of the evolving world, names known as keyed facts arrived: from 0.13 no remark
("Bianca was out sick today") and no other attribute's statement was read (1k: 10 of 44 statements read, 10k: 130
of 600, none wrong at 0.15); at 0.10, 12 remarks of 262 were read at 1k.
"""
NAME_RETRY_S = 60.0
"""After a failure to embed attribute names, how long writes read no new name (the embedder may be remote)."""
MIN_DIRECTIONS = 3
"""Attributes of a type with keyed facts before their directions judge a text (see ``AttributeCentroids.margin``).

Two attributes' directions, centred on their common mean, are opposite: every text lies nearer one of them, a text
of a third attribute too. "The Lyra project is now aiming for the first paying customer" read as Lyra's budget
while a project's budget and lead were the only attributes keyed, and retired it (tuning half, seed 8, 1k: 3 of 4
wrong retirements; with three, 0 of them).
"""
TABLE_CACHE_ENTRIES = 4_096
"""Direction tables kept per type, one per entity left out; cleared when full (one costs tens of microseconds)."""
MAX_PREAMBLE_TOKENS = 6
"""Words a statement may say before a known template ("Double-checked today and it still holds:")."""
NAME_WORD_MIN_CHARS = 3
"""A single word of a name identifies its entity only when it has this many characters."""

_WORD = re.compile(r"\w+", re.UNICODE)
_PUNCTUATION = re.compile(r"[\W_]+", re.UNICODE)


def normalise_text(text: str) -> str:
    """Case-, width- and punctuation-insensitive form, for "the same statement" checks."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCTUATION.sub(" ", folded).split())


def words(text: str) -> list[str]:
    """The text's words, as ``normalise_text`` keeps them."""
    return normalise_text(text).split()


CLAUSE_MARK = "<c>"
"""Stands between two clauses or sentences in ``clause_words``."""
_CLAUSES = re.compile(r"(?:(?<=\w\w\w)\.+|[?!;:]+)(?:\s+|$)")
"""Where a clause ends: ? ! ; : or a full stop after a word of three or more letters ("St. Louis", "J. B. Smith"
and "Dr. Li" go on), then a space or the end."""


def clause_words(text: str) -> list[str]:
    """The text's words with CLAUSE_MARK between its clauses ("Who chairs the board? Ana" -> ... board <c> ana)."""
    out: list[str] = []
    for clause in _CLAUSES.split(text):
        found = words(clause)
        if found:
            if out:
                out.append(CLAUSE_MARK)
            out.extend(found)
    return out


def last_clause_spans(first: Sequence[str], second: Sequence[str]) -> Spans | None:
    """``differing_spans`` of two ``clause_words`` lists whose spans lie in their last clause.

    Without an entity, what a statement is about is all that the two share: a difference in an earlier clause
    ("How many seasons of Nurse Jackie? 7" / "... of Highway Thru Hell? 9") is another question, and one that
    crosses clauses never a value.
    """
    found = differing_spans(first, second)
    if found is None or CLAUSE_MARK in found[0] or CLAUSE_MARK in found[1]:
        return None
    tail = 0
    while tail < min(len(first), len(second)) and first[len(first) - 1 - tail] == second[len(second) - 1 - tail]:
        tail += 1
    return None if CLAUSE_MARK in first[len(first) - tail :] else found


def _in_another_name(tokens: list[str], position: int, entity: str) -> bool:
    """Whether the capitalised word at ``position`` stands beside another capitalised word that ``entity``'s name and
    type do not have: then it is part of another name ("Elif Tanaka" is not Cyrus Tanaka, "Luca Yamada" not Luca
    Silva). The text's first word is capitalised as a sentence's ("Hi Bianca"), so it says nothing."""
    own = {*name_of(entity), *words(type_of(entity))}
    for neighbour in (position - 1, position + 1):
        if neighbour < 0 or neighbour >= len(tokens) or (neighbour == 0 and position == 1):
            continue
        word = tokens[neighbour]
        if word[:1].isupper() and word.isalpha() and not word.isupper() and word.casefold() not in own:
            return True
    return False


def _cased_words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).replace("_", " "))


def name_of(entity: str) -> tuple[str, ...]:
    """The words of an entity id's name: "user:viktor-petrov" → ("viktor", "petrov")."""
    return tuple(words(entity.rsplit(":", 1)[-1]))


def type_of(entity: str) -> str:
    """An entity id's type: "user" of "user:viktor-petrov"; empty without a colon."""
    return entity.split(":", 1)[0] if ":" in entity else ""


@dataclass(frozen=True)
class Mention:
    """Where a text names an entity: words ``start`` to ``end`` (exclusive)."""

    entity: str
    start: int
    end: int


class EntityNames:
    """The names of a namespace's entities, to find which one a text is about.

    Not thread-safe: used under the commit lock.
    """

    def __init__(self) -> None:
        self._names: dict[str, tuple[str, ...]] = {}
        self._by_first: dict[str, list[str]] = {}
        self._word_owners: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, entity: object) -> bool:
        return entity in self._names

    def name(self, entity: str) -> tuple[str, ...]:
        """The words of a known entity's name (empty for an unknown one)."""
        return self._names.get(entity, ())

    def add(self, entity: str) -> None:
        """Learn an entity id (idempotent)."""
        if entity in self._names:
            return
        name = name_of(entity)
        if not any(word.isalpha() for word in name):
            return  # "entity:42": a number in a text is no evidence that it names this entity
        self._names[entity] = name
        self._by_first.setdefault(name[0], []).append(entity)
        for word in set(name):
            self._word_owners.setdefault(word, set()).add(entity)

    def mentions(self, text: str, only: str = "") -> list[Mention]:
        """Every place the text names a known entity (``only``: that entity alone), longest first at a place.

        The whole name matches anywhere; one word of a name matches when no other
        entity's name has it, it is long enough and the text capitalises it as a
        proper noun ("Viktor", not "API" nor "billing").
        """
        tokens = _cased_words(text)
        folded = [t.casefold() for t in tokens]
        found: list[Mention] = []
        position = 0
        while position < len(folded):
            best: Mention | None = None
            for entity in self._by_first.get(folded[position], ()):
                if only and entity != only:
                    continue
                name = self._names[entity]
                if tuple(folded[position : position + len(name)]) == name and (
                    best is None or len(name) > best.end - best.start
                ):
                    best = Mention(entity, position, position + len(name))
            if best is None:
                word, cased = folded[position], tokens[position]
                owners = self._word_owners.get(word)
                if (
                    owners is not None
                    and len(owners) == 1
                    and len(word) >= NAME_WORD_MIN_CHARS
                    and word.isalpha()
                    and cased[:1].isupper()
                    and not cased.isupper()
                ):
                    (entity,) = owners
                    if (not only or entity == only) and not _in_another_name(tokens, position, entity):
                        best = Mention(entity, position, position + 1)
            if best is not None:
                found.append(best)
                position = best.end
            else:
                position += 1
        return found


ARTICLES = frozenset(("the", "a", "an"))
"""Words before a name that belong to how it is referred to, not to what is said of it."""


def masked(tokens: Sequence[str], mentions: Iterable[Mention], entity: str) -> list[str]:
    """``tokens`` with each mention of ``entity`` replaced by ENTITY_MARK.

    The mark takes in how the entity was referred to — an article before the name, and its type's word right
    before or after it ("the ledger-worker service", "Project Falcon", "the Falcon project") — so that one
    statement reads the same whichever way the entity was called.
    """
    kind = type_of(entity)
    out: list[str] = []
    position = 0
    for mention in sorted((m for m in mentions if m.entity == entity), key=lambda m: m.start):
        start, end = mention.start, mention.end
        if kind and start > position and tokens[start - 1] == kind:
            start -= 1
        if start > position and tokens[start - 1] in ARTICLES:
            start -= 1
        if kind and end < len(tokens) and tokens[end] == kind:
            end += 1
        out.extend(tokens[position:start])
        out.append(ENTITY_MARK)
        position = end
    out.extend(tokens[position:])
    return out


def _find(tokens: Sequence[str], part: Sequence[str]) -> int:
    """The last position where ``part`` occurs in ``tokens``; -1 when nowhere."""
    size = len(part)
    for start in range(len(tokens) - size, -1, -1):
        if list(tokens[start : start + size]) == list(part):
            return start
    return -1


def template_of(tokens: Sequence[str], value: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(head, tail) around the value's words in ``tokens``, or None when the value is not there or too long."""
    if not value or len(value) > MAX_VALUE_TOKENS:
        return None
    start = _find(tokens, value)
    if start < 0:
        return None
    head, tail = tuple(tokens[:start]), tuple(tokens[start + len(value) :])
    fixed = sum(1 for t in head + tail if t != ENTITY_MARK)
    return (head, tail) if fixed >= MIN_FIXED_TOKENS else None


def fits(template: tuple[tuple[str, ...], tuple[str, ...]], tokens: Sequence[str]) -> bool:
    """Whether ``tokens`` are ``template`` (head, tail) with a value of 1..MAX_VALUE_TOKENS words between."""
    head, tail = template
    for skip in range(min(MAX_PREAMBLE_TOKENS, len(tokens)) + 1):
        rest = tokens[skip:]
        middle = len(rest) - len(head) - len(tail)
        if (
            1 <= middle <= MAX_VALUE_TOKENS
            and tuple(rest[: len(head)]) == head
            and (not tail or tuple(rest[len(rest) - len(tail) :]) == tail)
        ):
            return True
    return False


@dataclass(frozen=True)
class TemplateMatch:
    """A text that matches a learnt template (or says a known value): the attribute, its value's words, how sure."""

    attribute: str
    value: tuple[str, ...]
    confidence: float
    fixed: int
    """Words the template fixed: the longer, the more specific."""
    method: str = "template"


class Templates:
    """How a namespace's keyed facts are worded, by attribute: head and tail around the value.

    Not thread-safe: used under the commit lock.
    """

    def __init__(self) -> None:
        self._by_head: dict[tuple[str, ...], dict[tuple[str, ...], Counter[str]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def learn(self, tokens: Sequence[str], value: Sequence[str], attribute: str) -> None:
        """Learn the template of a keyed fact (``tokens`` with its entity masked, ``value`` its value's words)."""
        found = template_of(tokens, value)
        if found is None:
            return
        head, tail = found
        tails = self._by_head.setdefault(head, {})
        counts = tails.get(tail)
        if counts is None:
            if self._count >= MAX_TEMPLATES:
                return
            counts = tails[tail] = Counter()
            self._count += 1
        counts[attribute] += 1

    def match(self, tokens: Sequence[str]) -> TemplateMatch | None:
        """The most specific learnt template ``tokens`` fit, with one value span of 1..MAX_VALUE_TOKENS words.

        A few words before the template are a preamble ("Reminder:", "As noted before,"), not a reason to read
        nothing: the text is tried from each of its first ``MAX_PREAMBLE_TOKENS`` + 1 words.
        """
        best: TemplateMatch | None = None
        for skip in range(min(MAX_PREAMBLE_TOKENS, max(len(tokens) - 1, 0)) + 1):
            found = self._match_from(tokens[skip:])
            if found is not None and (best is None or found.fixed > best.fixed):
                best = found
        return best

    def _match_from(self, tokens: Sequence[str]) -> TemplateMatch | None:
        best: TemplateMatch | None = None
        size = len(tokens)
        for cut in range(size):
            tails = self._by_head.get(tuple(tokens[:cut]))
            if not tails:
                continue
            for tail, counts in tails.items():
                middle = size - cut - len(tail)
                if not 1 <= middle <= MAX_VALUE_TOKENS or tuple(tokens[size - len(tail) :] if tail else ()) != tail:
                    continue
                fixed = sum(1 for t in tokens[:cut] if t != ENTITY_MARK) + sum(1 for t in tail if t != ENTITY_MARK)
                if best is not None and fixed <= best.fixed:
                    continue
                attribute, votes = counts.most_common(1)[0]
                share = votes / sum(counts.values())
                if share < TEMPLATE_AGREEMENT:
                    continue
                value = tuple(tokens[cut : size - len(tail)])
                best = TemplateMatch(attribute, value, share, fixed)
        return best


NAME_PREFIX_MIN = 4
"""A text's word says an attribute's name word when one is a prefix of the other and the shorter has this many
letters ("meetings" says ``meeting_preference``, "leadership" ``lead``); shorter words must be equal."""
_CAMEL_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def attribute_words(attribute: str) -> tuple[str, ...]:
    """The words of an attribute's name as a developer wrote it ("rate_limit", "meetingPreference")."""
    return tuple(words(_CAMEL_BREAK.sub(" ", attribute)))


class AttributeWords:
    """Which attribute of a set a text names by every word of its name ("Atlas status: blocked on the vendor
    contract", "Mateo's working hours changed to 7:30-15:30"; not "Mateo is still working from Athens").

    The namespace's keyed facts name their attributes; a statement that says one of those names outright says
    which slot it fills more plainly than its likeness to the attribute's other facts does. A text that says two
    attributes' names names neither. Not thread-safe: used under the commit lock.
    """

    def __init__(self, attributes: Sequence[str]) -> None:
        self.size = len(attributes)
        self._names = [(attribute, attribute_words(attribute)) for attribute in attributes]
        self._names = [(attribute, name) for attribute, name in self._names if name]
        self._vocabulary = frozenset(word for _, name in self._names for word in name)
        # A token says a longer name word it begins (4+ letters): look the token up among their beginnings.
        starts: dict[str, set[str]] = {}
        for word in self._vocabulary:
            for end in range(NAME_PREFIX_MIN, len(word)):
                starts.setdefault(word[:end], set()).add(word)
        self._starts = starts

    def named(self, tokens: Sequence[str]) -> str | None:
        """The one attribute every word of whose name a word of ``tokens`` says; None when none, or two are.

        A few dictionary lookups a word: it runs on the write path, for the new statement and its entity's
        statements read again."""
        said: set[str] = set()
        vocabulary = self._vocabulary
        for token in tokens:
            if token in vocabulary:
                said.add(token)
            if len(token) >= NAME_PREFIX_MIN:
                said.update(self._starts.get(token, ()))
                # A shorter name word (4+ letters) the token begins with ("meetings" says "meeting").
                said.update(token[:end] for end in range(NAME_PREFIX_MIN, len(token)) if token[:end] in vocabulary)
        if not said:
            return None
        found = [attribute for attribute, name in self._names if all(word in said for word in name)]
        return found[0] if len(found) == 1 else None


SHAPES_READ = frozenset((ValueType.URL, ValueType.EMAIL, ValueType.TIME))
"""Value shapes a text is read by (see ``ValueShapes``): those a word of free text seldom has by chance. Dates and
amounts are not: a history statement dates itself ("had owned it since January 2, 2023"), and "10x", "2 engineers"
read as amounts."""
SHAPES_IN_PASSING = frozenset((ValueType.TIME,))
"""Of those, shapes a text also says in passing ("no meetings before 10:00" beside keyed working hours): believed
only where the text also lies nearer the attribute's keyed facts (see ``_Slots.read``)."""
SHAPE_SAID_IN_PASSING = "value shape said in passing"
"""``TemplateMatch.method`` of a match by such a shape (the match's method is "value shape" otherwise)."""
_TOKEN_EDGES = "\"'()[]{}<>.,;!?"


def shapes_in(text: str) -> frozenset[ValueType]:
    """The ``SHAPES_READ`` shapes of the whitespace-separated words of a text ("lives at https://a.b/c." -> URL)."""
    found = set()
    for token in text.split():
        if not (token[:1].isdigit() or ":" in token or "/" in token or "@" in token):
            continue  # no URL, address or time: spare the patterns (write path)
        shape = value_type(token.strip(_TOKEN_EDGES))
        if shape in SHAPES_READ:
            found.add(shape)
    return frozenset(found)


class ValueShapes:
    """The shapes of the values a namespace's keyed facts gave each attribute of an entity type, to read which
    attribute a text states: "the warehouse store lives at https://...-v2.us2.initech.cloud/public/v1" is a
    service's endpoint once the services' keyed URLs were all endpoints. A shape names the attribute that gave
    ``TEMPLATE_AGREEMENT`` of the type's keyed values of that shape, from the first. Not thread-safe: used under
    the commit lock.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, ValueType], Counter[str]] = {}

    def learn(self, kind: str, value: str, attribute: str) -> None:
        """Count one keyed fact's value of an entity of type ``kind``."""
        shape = value_type(value)
        if shape in SHAPES_READ:
            self._counts.setdefault((kind, shape), Counter())[attribute] += 1

    def match(self, kind: str, text: str) -> TemplateMatch | None:
        """The attribute whose shape the text's words have; None when none, or two attributes' shapes are there."""
        if not self._counts:
            return None
        found: TemplateMatch | None = None
        for shape in shapes_in(text):
            counts = self._counts.get((kind, shape))
            if counts is None:
                continue
            attribute, votes = counts.most_common(1)[0]
            total = sum(counts.values())
            if votes < TEMPLATE_AGREEMENT * total:
                continue
            if found is not None and found.attribute != attribute:
                return None
            method = SHAPE_SAID_IN_PASSING if shape in SHAPES_IN_PASSING else "value shape"
            found = TemplateMatch(attribute, (), votes / total, 0, method)
        return found


class Values:
    """The values a namespace's keyed facts gave each attribute, to read which attribute a text states.

    "Beatriz moved to Helix for editing." says no template anyone used, but
    "helix" was an editor in every keyed fact that gave it. A value counts as
    evidence once it was given at least ``VALUE_MIN_COUNT`` times with one
    attribute in ``TEMPLATE_AGREEMENT`` of them. Not thread-safe: used under
    the commit lock.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, ...], Counter[str]] = {}

    def learn(self, value: Sequence[str], attribute: str) -> None:
        """Count one keyed fact's value."""
        if 1 <= len(value) <= MAX_VALUE_TOKENS and len(self._counts) < MAX_TEMPLATES:
            self._counts.setdefault(tuple(value), Counter())[attribute] += 1

    def match(self, tokens: Sequence[str]) -> TemplateMatch | None:
        """The longest known value in ``tokens`` that names one attribute; None when none or two disagree."""
        found: TemplateMatch | None = None
        size = len(tokens)
        for length in range(min(MAX_VALUE_TOKENS, size), 0, -1):
            for start in range(size - length + 1):
                span = tuple(tokens[start : start + length])
                counts = self._counts.get(span)
                if counts is None or ENTITY_MARK in span:
                    continue
                attribute, votes = counts.most_common(1)[0]
                total = sum(counts.values())
                if votes < VALUE_MIN_COUNT or votes < TEMPLATE_AGREEMENT * total:
                    continue
                if found is not None and found.attribute != attribute:
                    return None  # two attributes' values in one text: read neither
                if found is None:
                    found = TemplateMatch(attribute, span, votes / total, 0, "value")
            if found is not None:
                return found
        return found


Spans = tuple[tuple[str, ...], tuple[str, ...]]


def differing_spans(first: Sequence[str], second: Sequence[str]) -> Spans | None:
    """The one span in which two texts differ, when they share the rest: (span of first, span of second).

    None when they are equal, or differ in more than a short span: the common
    head and tail must hold PAIR_FIXED_SHARE of the longer text and at least
    PAIR_MIN_FIXED words, and neither span may exceed MAX_VALUE_TOKENS words.
    Either text may open with a preamble of up to MAX_PREAMBLE_TOKENS words
    the other lacks ("Reminder: ..."), or both with different ones ("Reminder: ..." /
    "Double-checked today: ...").
    """
    found = _one_span(first, second)
    if found is not None:
        return found
    # Of the ways to read a preamble past, the one that leaves the shortest spans: a preamble read as part of
    # a span ("noted before page ana" / "page bo kim") is a worse reading than the same words skipped.
    readings = [_one_span(first[skip:], second) for skip in range(1, min(MAX_PREAMBLE_TOKENS + 1, len(first)))]
    readings += [_one_span(first, second[skip:]) for skip in range(1, min(MAX_PREAMBLE_TOKENS + 1, len(second)))]
    readings.append(_after_preambles(first, second))
    found_any = [spans for spans in readings if spans is not None]
    return min(found_any, key=lambda spans: len(spans[0]) + len(spans[1])) if found_any else None


def _after_preambles(first: Sequence[str], second: Sequence[str]) -> Spans | None:
    """Two texts with different preambles, aligned where the words before their first entity mark agree."""
    if ENTITY_MARK not in first or ENTITY_MARK not in second:
        return None
    a, b = first.index(ENTITY_MARK), second.index(ENTITY_MARK)
    shared = 0
    while shared < min(a, b) and first[a - 1 - shared] == second[b - 1 - shared]:
        shared += 1
    skip_a, skip_b = a - shared, b - shared
    if not skip_a or not skip_b or max(skip_a, skip_b) > MAX_PREAMBLE_TOKENS:
        return None  # one side without a preamble was tried above
    return _one_span(first[skip_a:], second[skip_b:])


_MARKS = (ENTITY_MARK, CLAUSE_MARK)


def _one_span(first: Sequence[str], second: Sequence[str]) -> Spans | None:
    limit = min(len(first), len(second))
    head = 0
    while head < limit and first[head] == second[head]:
        head += 1
    tail = 0
    while tail < limit - head and first[len(first) - 1 - tail] == second[len(second) - 1 - tail]:
        tail += 1
    span_a = tuple(first[head : len(first) - tail])
    span_b = tuple(second[head : len(second) - tail])
    if not span_a and not span_b:
        return None
    fixed = sum(1 for t in first[:head] if t not in _MARKS) + sum(
        1 for t in first[len(first) - tail :] if t not in _MARKS
    )
    longer = max(len(first) - first.count(CLAUSE_MARK), len(second) - second.count(CLAUSE_MARK))
    if fixed < PAIR_MIN_FIXED or fixed < PAIR_FIXED_SHARE * longer:
        return None
    if ENTITY_MARK in span_a or ENTITY_MARK in span_b:
        return None  # a span that holds the entity's name is another sentence, not another value
    if tail == 0 and head > 0 and first[head - 1] == ENTITY_MARK:
        # Everything said of the entity differs: "Double-checked today: <e> relocated to Warsaw" / "... <e> uses
        # GoLand as their editor" share only a preamble and the name.
        return None
    if len(span_a) > MAX_VALUE_TOKENS or len(span_b) > MAX_VALUE_TOKENS or not span_a or not span_b:
        return None
    return span_a, span_b


_Table = tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.float32]]
"""An entity type's attribute names, their unit directions and the centre they are measured from."""


class AttributeCentroids:
    """Per entity type, the mean direction of each attribute's keyed facts, centred on all of them.

    The entity's name and the value differ from fact to fact and mostly cancel in
    a mean; what stays is how the attribute is said. Centring on the mean of
    every keyed fact of the type removes what all of them share. A statement is
    judged against directions learnt from *other* entities' facts (see
    :meth:`margin`): while an attribute's facts are one entity's, its mean says
    that entity's name, and every statement naming it lies near it.
    """

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str], npt.NDArray[np.float64]] = {}
        self._counts: Counter[tuple[str, str]] = Counter()
        self._own: dict[tuple[str, str], dict[str, tuple[npt.NDArray[np.float64], int]]] = {}
        """The first OWN_TRACKED_ENTITIES entities' share of each sum, to leave out when judging their statements."""
        self._cache: dict[str, dict[str, _Table | None]] = {}
        """Per type, the direction table with each entity left out ("": none), dropped when the type learns."""

    def add(self, kind: str, attribute: str, unit: npt.NDArray[np.float32], entity: str = "") -> None:
        """Count one keyed fact's unit vector (of ``entity``, when given)."""
        key = (kind, attribute)
        total = self._sums.get(key)
        if total is None:
            total = self._sums[key] = np.zeros(unit.shape[0], dtype=np.float64)
        total += unit
        self._counts[key] += 1
        own = self._own.setdefault(key, {})
        if entity and (entity in own or len(own) < OWN_TRACKED_ENTITIES):
            part, count = own.get(entity, (np.zeros(unit.shape[0], dtype=np.float64), 0))
            own[entity] = (part + unit, count + 1)
        self._cache.pop(kind, None)

    def _known(self, kind: str) -> list[tuple[str, str]]:
        return [key for key in self._sums if key[0] == kind]

    def _table(self, kind: str, entity: str = "") -> _Table | None:
        cache = self._cache.setdefault(kind, {})
        if entity in cache:
            return cache[entity]
        if len(cache) >= TABLE_CACHE_ENTRIES:
            cache.clear()
        rows: list[tuple[str, npt.NDArray[np.float64], int]] = []
        for key in self._known(kind):
            total, count = self._sums[key], self._counts[key]
            part = self._own.get(key, {}).get(entity) if entity else None
            if part is not None:
                total, count = total - part[0], count - part[1]
            if count > 0:
                rows.append((key[1], total, count))
        table = None
        if len(rows) >= MIN_DIRECTIONS:
            sums = np.stack([total for _, total, _ in rows])
            counts = np.asarray([count for _, _, count in rows], dtype=np.float64)
            centre = sums.sum(axis=0) / counts.sum()
            means = sums / counts[:, None] - centre
            norms = np.linalg.norm(means, axis=1, keepdims=True)
            directions = (means / np.maximum(norms, 1e-9)).astype(np.float32)
            table = ([name for name, _, _ in rows], directions, centre.astype(np.float32))
        cache[entity] = table
        return table

    def resemblance(self, kind: str, unit: npt.NDArray[np.float32]) -> float | None:
        """Cosine of ``unit`` to the mean of the type's keyed facts (how its statements are said, whatever the
        attribute): which of two entities a text names it is about. None while the type has no keyed fact."""
        keys = self._known(kind)
        if not keys:
            return None
        mean = sum((self._sums[k] for k in keys), np.zeros_like(self._sums[keys[0]]))
        return float(mean @ unit / max(float(np.linalg.norm(mean)), 1e-12))

    def margin(self, kind: str, attribute: str, unit: npt.NDArray[np.float32], entity: str = "") -> float | None:
        """How much nearer ``unit`` lies to ``attribute`` than to the nearest other attribute of the type.

        With ``entity``, the directions leave out that entity's own keyed facts (its first OWN_TRACKED_ENTITIES
        entities' are known per attribute; later ones weigh little in a mean of that many). None when fewer than
        MIN_DIRECTIONS attributes of the type have keyed facts (of other entities), or ``attribute`` has none.
        """
        table = self._table(kind, entity)
        if table is None:
            return None
        names, directions, centre = table
        if attribute not in names:
            return None
        scores = directions @ (unit - centre)
        own = names.index(attribute)
        others = np.delete(scores, own)
        return float(scores[own] - others.max())


Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


class AttributeNames:
    """Which keyed attribute of an entity type a statement says, by its cosine to the attributes' embedded names.

    Templates and attribute directions are learnt from keyed facts: early in a namespace's life there are too
    few of them to read a statement worded another way ("Don't ping Ana outside 9-17" when the keyed facts say
    "Ana's working hours changed to ..."). An attribute's *name*, said of its entity type ("the user's working
    hours"), needs no examples: one keyed fact of the attribute is enough to know the name. Names are embedded
    with the sidecar's model, so this reading is on only with an embedder, whose space the stored vectors are
    assumed to share (as recall's attribute names assume of queries). Each name is embedded once (tens of
    milliseconds, on the first write that needs it) and kept; thread-safe.
    """

    def __init__(self, embed: Embed, phrase: Callable[[str, str], str]) -> None:
        self._embed = embed
        self._phrase = phrase
        self._lock = threading.Lock()
        self._vectors: dict[tuple[str, str], npt.NDArray[np.float32] | None] = {}
        """(type, attribute) -> unit vector of its phrase, None when the phrase is empty or failed to embed."""
        self._failed_at = -math.inf
        """When embedding last failed (monotonic seconds): a remote embedder that is down is not asked by every
        write, only again after ``NAME_RETRY_S``."""

    def read(self, kind: str, attributes: Sequence[str], unit: npt.NDArray[np.float32]) -> tuple[str, float] | None:
        """The attribute of ``attributes`` (one entity type's) whose name ``unit`` lies nearest, and by how much
        nearer than the next one's. None with fewer than two names."""
        if len(attributes) < 2:
            return None
        vectors = self._lookup(kind, attributes)
        known = [(a, v) for a, v in zip(attributes, vectors, strict=True) if v is not None]
        if len(known) < 2:
            return None
        scores = np.stack([v for _, v in known]) @ unit
        order = np.argsort(-scores)
        return known[int(order[0])][0], float(scores[order[0]] - scores[order[1]])

    def _lookup(self, kind: str, attributes: Sequence[str]) -> list[npt.NDArray[np.float32] | None]:
        with self._lock:
            missing = [a for a in attributes if (kind, a) not in self._vectors]
        if missing and time.monotonic() - self._failed_at < NAME_RETRY_S:
            missing = []
        if missing:
            phrases = [self._phrase(a, kind) for a in missing]
            wanted = [(a, p) for a, p in zip(missing, phrases, strict=True) if p]
            found: dict[str, npt.NDArray[np.float32] | None] = dict.fromkeys(missing)
            if wanted:
                try:
                    matrix = np.asarray(self._embed([p for _, p in wanted]), dtype=np.float32)
                except Exception:  # an embedder failure must never fail a write; retried later
                    self._failed_at = time.monotonic()
                    return [None] * len(attributes)
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = matrix / np.maximum(norms, 1e-12)
                for (attribute, _), vector in zip(wanted, matrix, strict=True):
                    found[attribute] = vector if np.isfinite(vector).all() else None
            with self._lock:
                for attribute, vector in found.items():
                    self._vectors[(kind, attribute)] = vector
        with self._lock:
            return [self._vectors.get((kind, a)) for a in attributes]
