"""Prompts the sidecar sends to a language model. Kept here, in the repository, so they are reviewed and versioned."""

from __future__ import annotations

CONSOLIDATE_SYSTEM = """\
You maintain the long-term memory of an AI agent. You receive several memories that say nearly the same \
thing: repeated experiences, near-identical strategies or overlapping observations. Write ONE memory that \
replaces them all.

Rules:
- Keep every fact, name, number, date and condition that the memories agree on.
- Where they disagree, keep the version that is more recent or more successful, and say what varied.
- State the pattern as a reusable lesson or fact, in the memories' own language.
- No preamble, no list of sources, no markdown: reply with the memory's text only, at most 3 sentences."""

CONSOLIDATE_USER = """\
Memories to merge ({count}, kind {kind}{about}):
{items}

The merged memory:"""

CONSOLIDATE_ITEM = "- [{successes} successes, {failures} failures, recorded {recorded}] {content}"
"""One member in the user message; successes/failures come from the agent's outcome reports."""

SUPERSEDE_SYSTEM = """\
You maintain the long-term memory of an AI agent. You receive two memories: an older one and a newer one that \
may replace it. Decide whether the newer memory states a new value of the same thing the older one says (the \
same fact about the same subject, now different), so that the older one is no longer true; or whether both \
can hold at once (different things, an added value, a detail, or an unrelated statement).

Answer with exactly one word and nothing else:
REPLACES  if the newer memory makes the older one outdated;
BOTH_HOLD if both memories can be true now.
If unsure, answer BOTH_HOLD: retiring a true memory loses it."""

SUPERSEDE_USER = """\
Older memory:
{older}

Newer memory:
{newer}

Does the newer memory replace the older one? Answer REPLACES or BOTH_HOLD."""

SUPERSEDE_ITEM = """\
- kind: {kind}
- about: {about}
- true since (world time): {valid_from}
- recorded: {recorded}
- text: {content}"""
"""One of the two memories in the user message; "true since" is the memory's valid_from."""

SUPERSEDE_BATCH_SYSTEM = """\
You maintain the long-term memory of an AI agent. You receive numbered pairs of memories: in each pair an older \
one and a newer one that may replace it. Judge every pair on its own. Decide whether the newer memory states a new \
value of the same thing the older one says (the same fact about the same subject, now different), so that the \
older one is no longer true; or whether both can hold at once (different things, an added value, a detail, or an \
unrelated statement).

Answer with one JSON object and nothing else: each key a pair's number as a string, each value one word,
REPLACES  if the newer memory of that pair makes its older one outdated;
BOTH_HOLD if both memories of that pair can be true now.
For example {"1": "BOTH_HOLD", "2": "REPLACES"}. Give a verdict for every pair.
If unsure, answer BOTH_HOLD: retiring a true memory loses it."""

SUPERSEDE_BATCH_USER = """\
{pairs}

For each of the {count} pairs: does the newer memory replace the older one? Answer with the JSON object."""

SUPERSEDE_BATCH_PAIR = """\
Pair {number}
Older memory:
{older}
Newer memory:
{newer}"""
"""One pair in the batched user message (pairs separated by a blank line); each memory as ``SUPERSEDE_ITEM``."""
