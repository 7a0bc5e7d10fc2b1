"""Governance: the lifecycle daemon that applies the evaluation to every memory."""
