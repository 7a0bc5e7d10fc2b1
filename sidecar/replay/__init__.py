"""Offline replay: export a data directory's log, replay it under another policy, tune policies."""
