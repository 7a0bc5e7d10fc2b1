"""Perception: annotate writes and detect change (hard and soft conflicts, duplicates, outcomes)."""
