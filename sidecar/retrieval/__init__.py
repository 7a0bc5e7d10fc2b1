"""Application layer: recall and context building over current, reliable memories."""
