"""What a query asks for, read from its wording: a way of doing something, or anything else.

A question that asks how to do something ("How do I deploy billing?", "What should I do when
billing goes down?") wants a strategy: the lesson the agent kept about that task. A fact about
the same service ("billing runs v2.3") is often closer in words and in the embedding, since it
names the service and little else. The cues below are the common English and Chinese ways of
asking for a procedure; they say nothing about which task, only that the answer is a how-to.
"""

from __future__ import annotations

import re

_PROCEDURAL_EN = re.compile(
    r"""\b(?:
        how\s+(?:do|should|shall|can|could|would|might|must)\s+(?:i|we|you|one)\b
      | how\s+to\b
      | what\s+(?:should|do|can|must|shall)\s+(?:i|we|you|one)\s+do\b
      | what\s+to\s+do\b
      | (?:right|safe|proper|recommended|correct|usual|standard)\s+
        (?:way|approach|process|procedure|method|practice)\s+(?:to|for|of)\b
      | (?:process|procedure|playbook|runbook|checklist|steps)\s+(?:for|to)\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_PROCEDURAL_ZH = re.compile("如何|怎么|怎样|该怎|步骤|流程|什么办法|什么方法")


def asks_how(text: str) -> bool:
    """Whether ``text`` asks how to do something (a procedure, a playbook, what to do when …)."""
    return bool(_PROCEDURAL_EN.search(text) or _PROCEDURAL_ZH.search(text))
