"""Token estimates close to the BPE tokenizers of common LLMs (cl100k/o200k-like), without their vocabularies.

The estimator walks the text once: an ASCII word costs one token up to
``WORD_CHARS_PER_TOKEN`` letters and one more per further such run (BPE keeps
common words whole and splits long or rare ones); digits go in groups of
three; every other symbol is a token; each CJK character counts
``CJK_TOKENS_PER_CHAR``; other letters (accented, Cyrillic, …) count
``OTHER_TOKENS_PER_CHAR`` each. Its error against real tokenizers is measured
by ``benchmarks/tokens.py`` and recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import math
import re

WORD_CHARS_PER_TOKEN = 6.0
DIGITS_PER_TOKEN = 3.0
CJK_TOKENS_PER_CHAR = 1.2
OTHER_TOKENS_PER_CHAR = 0.6

_PIECE = re.compile(
    r"(?P<word>[A-Za-z]+)|(?P<digits>[0-9]+)|(?P<cjk>[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]+)"
    r"|(?P<space>\s+)|(?P<other>[^\sA-Za-z0-9]+)"
)


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text`` for a cl100k-like tokenizer; 0 for an empty string."""
    total = 0.0
    for piece in _PIECE.finditer(text):
        kind = piece.lastgroup
        size = piece.end() - piece.start()
        if kind == "word":
            total += math.ceil(size / WORD_CHARS_PER_TOKEN)
        elif kind == "digits":
            total += math.ceil(size / DIGITS_PER_TOKEN)
        elif kind == "cjk":
            total += size * CJK_TOKENS_PER_CHAR
        elif kind == "space":
            total += piece.group().count("\n")  # spaces merge into the next word; line breaks do not
        else:
            other = piece.group()
            ascii_symbols = sum(1 for ch in other if ord(ch) < 128)
            total += ascii_symbols + (len(other) - ascii_symbols) * OTHER_TOKENS_PER_CHAR
    return math.ceil(total)
