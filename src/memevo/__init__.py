"""memevo: a gRPC sidecar that governs the memory of long-running LLM agents."""

__version__ = "0.1.0"
