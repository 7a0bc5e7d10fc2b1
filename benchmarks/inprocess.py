"""Calling the servicer in-process, without gRPC: the least of a ServicerContext that its unary calls touch.

Several benchmarks time ``servicer.Recall`` and friends in the sidecar's own
process (server-side latency, no client or transport in the figure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.machine import load_average

Cell = tuple[str, str]
"""(variant, case): one side of a side-by-side comparison on one set of requests."""


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


@dataclass
class CellTimes:
    """One cell's figures: per repeat, milliseconds of wall and CPU time (this process's) per call."""

    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    cpu_p50_ms: list[float] = field(default_factory=list)
    answers: list[Any] = field(default_factory=list)
    """What each call returned, in the first repeat."""


def time_cells(
    cells: Sequence[Cell],
    requests: Mapping[str, Sequence[Any]],
    call: Callable[[str, Any], Any],
    *,
    repeats: int,
    warmup: int,
    log: Callable[[str], None],
) -> tuple[dict[Cell, CellTimes], list[list[float]]]:
    """Time ``call(variant, request)`` over every case's requests, cells interleaved in every repeat (reversed in
    every other one, so that load falls on all alike), after ``warmup`` untimed calls per cell; returns each
    cell's figures and the load averages at the start of each repeat."""
    for variant, case in cells:
        for request in requests[case][:warmup]:
            call(variant, request)
    times = {cell: CellTimes() for cell in cells}
    loads = []
    for repeat in range(repeats):
        loads.append(load_average())
        for cell in cells if repeat % 2 == 0 else cells[::-1]:
            variant, case = cell
            wall, cpu, answers = [], [], []
            for request in requests[case]:
                began, began_cpu = time.perf_counter(), time.process_time()
                answers.append(call(variant, request))
                cpu.append(time.process_time() - began_cpu)
                wall.append(time.perf_counter() - began)
            times[cell].p50_ms.append(float(np.percentile(wall, 50) * 1e3))
            times[cell].p99_ms.append(float(np.percentile(wall, 99) * 1e3))
            times[cell].cpu_p50_ms.append(float(np.percentile(cpu, 50) * 1e3))
            if not times[cell].answers:
                times[cell].answers = answers
        log(
            f"  repeat {repeat + 1}/{repeats}: "
            + ", ".join(f"{v} {c} {times[(v, c)].p50_ms[-1]:.2f} ms" for v, c in cells)
        )
    return times, loads
