"""Channel settings shared by the sync and asyncio clients: options, target checks, auth metadata."""

from __future__ import annotations

import operator
import os
import random
from collections.abc import Iterable
from typing import Any

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message the client sends or accepts: 64 MiB (a batch of 10,000 memories with 1,536-d vectors)."""

RECONNECT_BACKOFF_INITIAL_MS = 100
"""First delay before the channel reconnects to a sidecar it lost, milliseconds."""
RECONNECT_BACKOFF_MAX_MS = 1000
"""Longest delay between the channel's reconnect attempts, milliseconds: a restarted sidecar is answered
at most this long after it is serving again."""

DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # gRPC's 4 MiB default receive limit is smaller than one large RememberBatch or a Recall with vectors.
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Pings find a peer that vanished without closing the socket (a TCP sidecar on a host that died),
    # which would otherwise leave a Watch hanging forever. 6 minutes keeps above the 5-minute minimum
    # ping interval a default gRPC server enforces: pinging faster gets the connection closed with
    # "too_many_pings" unless the server opted in.
    ("grpc.keepalive_time_ms", 6 * 60 * 1000),
    ("grpc.keepalive_timeout_ms", 20 * 1000),
    # No pings on an idle channel (no calls): nothing to protect, and it spares the sidecar.
    ("grpc.keepalive_permit_without_calls", 0),
    # A Watch may see no data for hours; without this the client stops pinging after two pings.
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.primary_user_agent", "memevo-python"),
    # gRPC's reconnect backoff starts at 1 s and grows x1.6 per failed attempt up to 2 minutes, so a client
    # that kept calling through a sidecar restart failed on for seconds after the sidecar was back. An
    # attempt at a local sidecar costs one refused connect; 0.1 s growing to at most 1 s keeps that cheap.
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_INITIAL_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    # By default every channel to one address in the process shares a subchannel, and with it a failing
    # sibling's backoff: a client made after the restart waited out the old client's delay.
    ("grpc.use_local_subchannel_pool", 1),
)
"""Channel options every client sets; the constructor's ``options`` override them key by key."""

WATCH_BACKOFF_INITIAL_S = 0.1
"""First delay before a Watch reconnects after UNAVAILABLE (``resume=True``)."""
WATCH_BACKOFF_MAX_S = 5.0
"""Longest delay between Watch reconnect attempts; the delay doubles from the initial one up to this."""
WATCH_MAX_ATTEMPTS = 10
"""Consecutive failed reconnects after which a resuming Watch gives up and raises UnavailableError."""


def channel_options(extra: Iterable[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The default options with ``extra`` applied on top (same key: ``extra`` wins)."""
    merged = dict(DEFAULT_CHANNEL_OPTIONS)
    merged.update(dict(extra))
    return list(merged.items())


def default_target() -> str:
    """``$MEMEVO_ADDRESS`` when set, else the socket ``memevo serve`` listens on by default.

    The default mirrors the sidecar's (``memevo.sidecar.config.default_listen``) rather than importing it:
    the client must not load the server's packages.
    """
    address = os.environ.get("MEMEVO_ADDRESS")
    if address:
        return address
    return f"unix://{os.environ.get('XDG_RUNTIME_DIR') or '/tmp'}/memevo-{os.getuid()}.sock"


def check_target(target: str) -> str:
    """Return ``target`` if it can name a sidecar; ``ValueError`` with the form to use otherwise."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError("target must be 'unix:///absolute/path.sock' or 'host:port'")
    if target.startswith("unix://") and not target.startswith("unix:///"):
        # grpc would read the first path segment as an authority and fail to connect much later.
        raise ValueError(f"{target!r}: a unix socket target needs an absolute path, e.g. unix:///run/memevo.sock")
    return target


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The per-call metadata carrying ``token`` as a bearer token; empty without a token."""
    if token is None:
        return ()
    if not token or any(c in token for c in "\r\n"):
        raise ValueError("token must be a non-empty string without line breaks")
    return (("authorization", f"Bearer {token}"),)


def check_timeout(timeout_s: float, name: str = "timeout_s") -> float:
    """Return ``timeout_s`` if it is a positive number of seconds; ``ValueError`` otherwise."""
    value: object = timeout_s
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {timeout_s!r}")
    return float(value)


def backoff_delay_s(
    attempt: int, initial_s: float = WATCH_BACKOFF_INITIAL_S, max_s: float = WATCH_BACKOFF_MAX_S
) -> float:
    """Delay before reconnect ``attempt`` (1-based): doubling, capped, jittered against stampedes."""
    base = min(max_s, initial_s * 2.0 ** min(attempt - 1, 60))
    return base * (0.5 + random.random() / 2)


def ids_list(ids: int | Iterable[int]) -> list[int]:
    """Memory ids as a list; one int is one id. ``ValueError`` for strings, bools or non-integers."""
    if isinstance(ids, (str, bytes)):
        raise ValueError("ids must be an int or an iterable of ints, not a string")
    items: Iterable[Any] = [ids] if not isinstance(ids, Iterable) else ids
    out: list[int] = []
    for i in items:
        if isinstance(i, bool):
            raise ValueError("ids must be integers, not bool")
        try:
            # operator.index accepts numpy integers too, and refuses floats.
            out.append(operator.index(i))
        except TypeError:
            raise ValueError(f"ids must be integers, got {i!r}") from None
    return out
