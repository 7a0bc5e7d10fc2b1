"""Calling the servicer in-process, without gRPC: the least of a ServicerContext that its unary calls touch.

Several benchmarks time ``servicer.Recall`` and friends in the sidecar's own
process (server-side latency, no client or transport in the figure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class InProcessContext:
    """The least of grpc.ServicerContext the servicer touches on unary calls in-process; aborts raise."""

    def abort_with_status(self, status: Any) -> None:
        raise RuntimeError(f"aborted: {status.code} {status.details}")

    def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"aborted: {code} {details}")

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return True

    def is_active(self) -> bool:
        return True

    def time_remaining(self) -> float | None:
        return None

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer_identities(self) -> None:
        return None
