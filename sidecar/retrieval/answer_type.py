"""What kind of value a question asks for, and what kind a fact holds: expected answer types.

"Who should I page for the scheduler?" is not answered by the scheduler's
URL, nor "When is Quill due?" by Quill's budget, however close the memories
are to the question otherwise: the question's wh-word (or a word such as
"URL") says what shape its answer has. A fact's value has a shape that plain
patterns recognise reliably for a few kinds (addresses, dates, clock times,
amounts); everything else — names, teams, places, free text — is OTHER.
Recall uses both only to tell facts apart when the candidates hold a value of
the asked shape (see ``retrieval/recall.py``), so a guess here moves facts
against facts, never a fact against an episode. For memories without a fact
value, :func:`tells_time` says whether the text dates something: what a "when"
question about an episode wants.
"""

from __future__ import annotations

import enum
import itertools
import re


class ValueType(enum.IntEnum):
    """The shape of a fact's value; stored per memory in the ``value_type`` column (a uint8)."""

    NONE = 0
    """No fact value: the memory is not judged."""
    OTHER = 1
    """Names, teams, places, free text: anything not recognised below."""
    URL = 2
    EMAIL = 3
    DATE = 4
    TIME = 5
    QUANTITY = 6


_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S|^(?:www\.)?[\w-]+(?:\.[\w-]+)+(?::\d+)?/\S*$", re.IGNORECASE)
_EMAIL = re.compile(r"^[\w.+-]+@[\w-]+(?:\.[\w-]+)+$")
_DATE = re.compile(
    rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b|\b\d{{1,2}}/\d{{1,2}}/\d{{2,4}}\b|\b{_MONTH}\s+\d{{1,4}}\b"
    rf"|\b\d{{1,2}}-{_MONTH}-\d{{2,4}}\b|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:\W|$)|^(?:19|20)\d{{2}}$|\bq[1-4]\s+(?:19|20)\d{{2}}\b"
    r"|\d{4}\s*年|\d{1,2}\s*月\s*\d{1,2}\s*[日号]",
    re.IGNORECASE,
)
# A year anywhere ("2019–20", "Beijing 2008", "Autumn 2023"), once the value is known not to be an amount.
_YEAR = re.compile(r"(?<![\d$€£¥.,])(?:1[5-9]|20)\d{2}(?![\d,]|\.\d)")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b|\b\d{1,2}\s?(?:am|pm|a\.m\.|p\.m\.)(?:\W|$)|\d{1,2}\s*点", re.IGNORECASE)
_QUANTITY = re.compile(r"^[~≈<>]?\s?[$€£¥]?\s?\d[\d,.]*\s*%?\s*[^\W\d_]*$")
_ORDINAL = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
"""A place in an order ("25th"), not an amount: "Where did Poland finish?" may want it."""


def value_type(value: str) -> ValueType:
    """The shape of a fact value (NONE for an empty one): URL, email, date, time, amount, a year anywhere, other."""
    value = value.strip()
    if not value:
        return ValueType.NONE
    if _URL.search(value):
        return ValueType.URL
    if _EMAIL.match(value):
        return ValueType.EMAIL
    if _DATE.search(value):
        return ValueType.DATE
    if _TIME.search(value):
        return ValueType.TIME
    if _QUANTITY.match(value) and not _ORDINAL.match(value):
        return ValueType.QUANTITY
    if _YEAR.search(value):
        return ValueType.DATE
    return ValueType.OTHER


WHEN_TYPES = frozenset((ValueType.DATE, ValueType.TIME))
"""What a "when" question wants: a date or a clock time."""
_NAMED = frozenset((ValueType.OTHER, ValueType.EMAIL))
_PLACE = frozenset((ValueType.OTHER, ValueType.URL))
_AMOUNT = frozenset((ValueType.QUANTITY, ValueType.DATE, ValueType.OTHER))
# The question's first wh-word (English or Chinese) and the value shapes its answer may have.
_WH = re.compile(
    r"\b(?P<who>who|whom|whose)\b|\b(?P<when>when)\b|\b(?P<where>where)\b|\b(?P<amount>how\s+(?:much|many))\b"
    r"|\b(?P<what_time>(?:what|which)\s+(?:time|date|day|year|month))\b"
    r"|(?P<zh_who>谁)|(?P<zh_when>什么时候|何时|几点|哪天|哪一天|哪年|什么时间)|(?P<zh_where>哪里|哪儿|在哪|什么地方)"
    r"|(?P<zh_amount>多少|几个)"
    # Any other wh-word comes first in "What did Bob say when he left?": that question names no shape.
    r"|\b(?P<open>what|which|why|how)\b|(?P<zh_open>什么|哪个|为什么|怎么|如何)",
    re.IGNORECASE,
)
_WH_TYPES = {
    "who": _NAMED,
    "zh_who": _NAMED,
    "when": WHEN_TYPES,
    "what_time": WHEN_TYPES,
    "zh_when": WHEN_TYPES,
    "where": _PLACE,
    "zh_where": _PLACE,
    "amount": _AMOUNT,
    "zh_amount": _AMOUNT,
}
# "How is Glacier doing?", "What's the status of the migration?": a state, told in words, not a date or an amount.
_ASKS_STATE = re.compile(
    r"\bhow\s+(?:is|are|was|were)\b[^?.!]*?\b(?:doing|going|coming\s+along|progressing|getting\s+on)\b"
    r"|\bhow's\b[^?.!]*?\b(?:doing|going|coming\s+along|progressing)\b|\bstatus\s+of\b|进展|进度|状态|怎么样",
    re.IGNORECASE,
)
_ASKS_URL = re.compile(r"\b(?:url|urls|uri|endpoint|endpoints|website|homepage|link)\b|网址|链接", re.IGNORECASE)
_ASKS_EMAIL = re.compile(r"\be-?mail\s+address(?:es)?\b|邮箱|电子邮件地址", re.IGNORECASE)


def expected_types(question: str) -> frozenset[ValueType] | None:
    """The value shapes that can answer ``question``; None when it does not say.

    "who" and "when" decide first ("Who owns the URL?" asks for someone); then a question after a state ("How is
    Glacier doing?", "the status of …": words, not a date or an amount); then a word naming an address ("url",
    "endpoint", "email address"); then "where" and "how much / how many".
    """
    wh = _WH.search(question)
    kind = wh.lastgroup if wh is not None else None
    if kind in ("who", "zh_who", "when", "what_time", "zh_when"):
        return _WH_TYPES[kind]
    if _ASKS_STATE.search(question):
        return frozenset((ValueType.OTHER,))
    if _ASKS_URL.search(question):
        return frozenset((ValueType.URL,))
    if _ASKS_EMAIL.search(question):
        return frozenset((ValueType.EMAIL,))
    return _WH_TYPES.get(kind) if kind is not None else None


_TIME_WORDS = frozenset(
    [
        "yesterday",
        "today",
        "tonight",
        "tomorrow",
        "ago",
        "recently",
        "lately",
        "weekend",
        "weekends",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "mondays",
        "tuesdays",
        "wednesdays",
        "thursdays",
        "fridays",
        "saturdays",
        "sundays",
    ]
)
_TIME_LEADS = frozenset(["last", "next", "this", "past", "coming"])
_TIME_SPANS = frozenset(
    [
        "week",
        "month",
        "year",
        "summer",
        "winter",
        "spring",
        "fall",
        "autumn",
        "night",
        "morning",
        "afternoon",
        "evening",
    ]
)
_LETTERS = re.compile(r"[a-z]+")
_DIGIT = re.compile(r"\d")
_YEAR_IN_TEXT = re.compile(r"(?<![\d$€£¥.,])(?:19|20)\d{2}(?![\d,%])")
_TIME_ZH = re.compile(
    r"昨天|今天|明天|前天|后天|上周|下周|本周|上个月|下个月|去年|明年|今年|星期|周末|最近|\d+\s*[年月日号]"
)


def tells_time(text: str) -> bool:
    """Whether ``text`` says when something happened or will: a date, a clock time, a year, a weekday, or words
    such as "yesterday", "two weeks ago", "last summer" (English and Chinese).

    A "when" question about an episode ("When did Ana visit Lisbon?") is answered by the memory that dates it
    ("We got back from Lisbon yesterday"), seldom by one that only names the same things. Run on every write and
    every memory at a rebuild: words are looked up in sets, and the patterns run only on texts with a digit.
    """
    if _DIGIT.search(text) and (_YEAR_IN_TEXT.search(text) or _DATE.search(text) or _TIME.search(text)):
        return True
    words = _LETTERS.findall(text.lower())
    if not _TIME_WORDS.isdisjoint(words):
        return True
    if any(lead in _TIME_LEADS and span in _TIME_SPANS for lead, span in itertools.pairwise(words)):
        return True
    return not text.isascii() and _TIME_ZH.search(text) is not None
