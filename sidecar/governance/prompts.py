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
