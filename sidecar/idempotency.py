"""Idempotent calls: a retry with the same request id gets the first call's whole response, and only its caller does.

A record in the requests column family is keyed by (rpc, caller, namespace,
request id) and holds a fingerprint of the request next to the serialised
response. The same key with the same fingerprint replays the response; the
same key with a different fingerprint is a reused request id: ALREADY_EXISTS,
and nothing is written. The caller is an opaque digest of the bearer token (or
of the client certificate), never the token itself; a sidecar without
authentication has one caller, "".

Records written before this format (keys without the leading format byte) were
neither scoped nor fingerprinted, so they cannot be replayed safely: start-up
drops them (see :func:`drop_unscoped_records`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.protobuf.message import Message

from .errors import MemevoError
from .store.rocks import CF_REQUESTS, RocksStore, Txn

log = logging.getLogger(__name__)

RECORD_FORMAT = b"\x01"
"""First byte of every key and value of this format. Older keys begin with a lowercase rpc name."""
FINGERPRINT_BYTES = 32
NOT_A_FINGERPRINT_FIELD = ("request_id", "turn")
"""Fields left out of a fingerprint: the key itself, and the agent's turn, a clock reading that a retry
made a turn later may carry without meaning a different call."""


class RequestIdReused(MemevoError):
    """The request id was used before by this caller for a different request; nothing was written."""

    code = grpc.StatusCode.ALREADY_EXISTS
    reason = "REQUEST_ID_REUSED"

    def __init__(self, field: str, request_id: str) -> None:
        super().__init__(
            f"{field}: {request_id!r} was already used for a different request; nothing was written. "
            "Use a new request id for each new call (one per logical write, e.g. a uuid)",
            metadata={"field": field, "request_id": request_id},
        )
        self.violations = [(field, "already used by this caller for a different request")]
        """Shown as a google.rpc BadRequest field violation, like an INVALID_ARGUMENT."""


class _Reader(Protocol):
    def get(self, cf: str, key: bytes) -> bytes | None: ...


def fingerprint(rpc: str, message: Message) -> bytes:
    """A stable digest of what ``message`` asks for: its deterministic encoding without request id and turn."""
    copy = type(message)()
    copy.CopyFrom(message)
    for name in NOT_A_FINGERPRINT_FIELD:
        if name in type(message).DESCRIPTOR.fields_by_name:
            copy.ClearField(name)
    return hashlib.sha256(rpc.encode() + b"\0" + copy.SerializeToString(deterministic=True)).digest()


@dataclass(frozen=True)
class RequestKey:
    """One call's idempotency key and the fingerprint of what it asks for."""

    rpc: str
    request_id: str
    fingerprint: bytes
    caller: str = ""
    """Digest of who called (see :func:`memevo.sidecar.service.auth.caller_identity`); "" without authentication."""
    namespace: str = ""
    """The namespace(s) the request writes to, comma-separated; "" for calls that name memories by id."""
    field: str = "request_id"
    """Where the request id sits in the request, for the error that refuses a reused one."""

    @classmethod
    def of(
        cls, rpc: str, request_id: str, message: Message, *, caller: str, namespace: str = "", field: str = "request_id"
    ) -> RequestKey | None:
        """The key of a call, None when it carries no request id."""
        if not request_id:
            return None
        return cls(rpc, request_id, fingerprint(rpc, message), caller, namespace, field)

    def derived(self, rpc: str) -> RequestKey:
        """The key of a step of this call that keeps its own record (e.g. PromoteArm's policy update)."""
        return RequestKey(rpc, self.request_id, self.fingerprint, self.caller, self.namespace, self.field)

    @property
    def key(self) -> bytes:
        # Separators cannot occur in the rpc, the hex caller or a namespace; the request id comes last.
        return RECORD_FORMAT + "\0".join((self.rpc, self.caller, self.namespace, self.request_id)).encode(
            "utf-8", errors="surrogatepass"
        )

    def previous(self, reader: _Reader) -> bytes | None:
        """The first call's serialised response; None when there was none. RequestIdReused on another payload."""
        raw = reader.get(CF_REQUESTS, self.key)
        if raw is None:
            return None
        if raw[:1] != RECORD_FORMAT or raw[1 : 1 + FINGERPRINT_BYTES] != self.fingerprint:
            raise RequestIdReused(self.field, self.request_id)
        return raw[1 + FINGERPRINT_BYTES :]

    def record(self, txn: Txn, response: bytes) -> None:
        """Keep ``response`` (serialised) as this call's result, in the call's own transaction."""
        txn.put(CF_REQUESTS, self.key, RECORD_FORMAT + self.fingerprint + response)


def id_of(request: RequestKey | None) -> str:
    """The request id for the change log ("" without one)."""
    return "" if request is None else request.request_id


def drop_unscoped_records(store: RocksStore) -> None:
    """Delete request records of the old format (keyed by rpc and request id only).

    Replaying them could hand one tenant another's result and cannot tell a
    retry from a different request, so a retry of a call made before the
    upgrade runs again instead (an identical Remember is then confirmed, not
    duplicated).
    """
    # Old keys begin with a lowercase rpc name; every key of this format begins with RECORD_FORMAT.
    first = next(store.iterate(CF_REQUESTS, b"a", b"{"), None)
    if first is None:
        return
    log.info("dropping idempotency records written before request ids were scoped by caller and namespace")
    store.delete_range_unsynced(CF_REQUESTS, b"a", b"{")
