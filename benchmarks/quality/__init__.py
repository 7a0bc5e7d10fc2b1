"""Quality benchmarks: retrieval quality of memevo against plain baselines, on public data (issue 5)."""
