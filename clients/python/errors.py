"""Typed errors of the memevo client: one base class, one subclass per gRPC status the sidecar uses.

Every client method raises these instead of ``grpc.RpcError``. The sidecar
sends ``google.rpc`` details with its errors: ``BadRequest`` field violations
become :attr:`MemevoError.field_violations`, ``ErrorInfo`` becomes
:attr:`MemevoError.reason` and :attr:`MemevoError.metadata`, ``RetryInfo``
becomes :attr:`MemevoError.retry_after_s`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

_RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)


class MemevoError(Exception):
    """A call to the sidecar failed; ``code`` says how and ``retryable`` whether retrying can help.

    A retry of a mutating call is safe only when it carries a ``request_id``:
    the sidecar then returns the first call's result instead of writing twice.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str = "",
        *,
        field_violations: Sequence[tuple[str, str]] = (),
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(code, details)
        self.code = code
        """The gRPC status code."""
        self.details = details
        """The sidecar's message."""
        self.field_violations: list[tuple[str, str]] = list(field_violations)
        """``(field, description)`` pairs of a ``google.rpc.BadRequest``, e.g. ``("memory.vector", ...)``."""
        self.reason = reason
        """The ``google.rpc.ErrorInfo`` reason, an UPPER_SNAKE_CASE constant; empty when none was sent."""
        self.domain = domain
        """The ``google.rpc.ErrorInfo`` domain; empty when none was sent."""
        self.metadata: dict[str, str] = dict(metadata or {})
        """The ``google.rpc.ErrorInfo`` metadata, e.g. ``committed_count`` after a failed stream."""
        self.retry_after_s = retry_after_s
        """Seconds to wait before a retry (``google.rpc.RetryInfo``); ``None`` if not given."""

    @property
    def retryable(self) -> bool:
        """True for UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and ABORTED."""
        return self.code in _RETRYABLE

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.details}" if self.details else self.code.name
        if self.field_violations:
            text += " [" + "; ".join(f"{f}: {d}" for f, d in self.field_violations) + "]"
        if self.reason:
            text += f" (reason {self.reason})"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.details!r})"


class InvalidArgumentError(MemevoError):
    """A request field is wrong (see ``field_violations``); nothing was written."""


class NotFoundError(MemevoError):
    """A memory, retrieval or other subject does not exist."""


class AlreadyExistsError(MemevoError):
    """What the request would create already exists."""


class FailedPreconditionError(MemevoError):
    """The sidecar is not in a state where the request can be applied."""


class ResourceExhaustedError(MemevoError):
    """A limit or back-pressure (e.g. a full fresh tail); retry later, after ``retry_after_s`` if given."""


class UnavailableError(MemevoError):
    """The sidecar cannot be reached or is shutting down; retry."""


class DeadlineExceededError(MemevoError):
    """The deadline (``timeout_s``) passed before the sidecar answered; a write may still have applied."""


class UnauthenticatedError(MemevoError):
    """The token is missing or wrong."""


class PermissionDeniedError(MemevoError):
    """The token is valid but not allowed to do this."""


class UnimplementedError(MemevoError):
    """The sidecar does not implement this call (yet)."""


class InternalError(MemevoError):
    """The sidecar failed in a way that is its bug, not the caller's."""


_BY_CODE: dict[grpc.StatusCode, type[MemevoError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
}


def error_class(code: grpc.StatusCode) -> type[MemevoError]:
    """The exception class for a status code; :class:`MemevoError` itself for codes without a subclass."""
    return _BY_CODE.get(code, MemevoError)


def from_status(code: grpc.StatusCode, details: str, status: status_pb2.Status | None) -> MemevoError:
    """Build the typed error for a status code, its message and the optional rich ``google.rpc.Status``."""
    violations: list[tuple[str, str]] = []
    reason = domain = ""
    metadata: dict[str, str] = {}
    retry_after_s: float | None = None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad_request = error_details_pb2.BadRequest()
                detail.Unpack(bad_request)
                violations.extend((v.field, v.description) for v in bad_request.field_violations)
            elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, domain = info.reason, info.domain
                metadata.update(info.metadata)
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_after_s = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return error_class(code)(
        code,
        details,
        field_violations=violations,
        reason=reason,
        domain=domain,
        metadata=metadata,
        retry_after_s=retry_after_s,
    )


def from_rpc_error(error: grpc.RpcError) -> MemevoError:
    """Translate a ``grpc.RpcError`` (sync or ``grpc.aio``) into its typed :class:`MemevoError`."""
    code_fn = getattr(error, "code", None)
    code = code_fn() if callable(code_fn) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_fn = getattr(error, "details", None)
    details = (details_fn() if callable(details_fn) else None) or ""
    status: status_pb2.Status | None = None
    if callable(getattr(error, "trailing_metadata", None)):
        try:
            status = rpc_status.from_call(cast(grpc.Call, error))
        except (ValueError, TypeError, DecodeError):
            # A corrupt status blob, or one contradicting the call's code or message, is not trusted.
            status = None
    return from_status(code, str(details), status)
