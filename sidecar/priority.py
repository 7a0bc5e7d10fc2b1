"""Thread priorities: background work (index building, consolidation passes) yields the cores to requests."""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

MAX_NICE = 19


def lower_thread_priority(increment: int, *, what: str) -> bool:
    """Raise the calling thread's nice value by ``increment`` (capped at 19); False where not done.

    Linux only: there ``setpriority`` on a thread id changes that thread alone, so the gRPC and
    committer threads keep theirs. Elsewhere, or when the system refuses, the thread keeps running
    at normal priority (``what`` names it in the log).
    """
    if increment <= 0:
        return False
    current = thread_nice()
    if current is None:
        return False
    return set_thread_nice(min(current + increment, MAX_NICE), what=what)


def thread_nice() -> int | None:
    """The calling thread's nice value (Linux), or None where it cannot be read."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:
        return None


def set_thread_nice(value: int, *, what: str) -> bool:
    """Set the calling thread's nice value (Linux); False where refused.

    Raising a thread's priority back (a lower nice value) needs privilege or an RLIMIT_NICE that allows
    it, so callers treat a refusal as "stay where you are".
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), max(min(value, MAX_NICE), -20))
    except OSError as exc:
        log.info("%s cannot change its priority to nice %d (%s)", what, value, exc)
        return False
    return True
