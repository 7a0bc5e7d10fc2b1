"""Errors of the sidecar: one base class, each subclass carrying its gRPC status code.

The service layer turns them into gRPC statuses with google.rpc details
(``BadRequest`` field violations, ``ErrorInfo`` reason and metadata).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grpc


class MemevoError(Exception):
    """Base of every error the sidecar reports to a caller.

    ``code`` is the gRPC status code, ``retryable`` says whether the same call
    can succeed later, ``reason`` is a short UPPER_SNAKE identifier for
    ``google.rpc.ErrorInfo`` and ``metadata`` adds machine-readable detail.
    """

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retryable: bool = False
    reason: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})


class InvalidArgument(MemevoError):
    """A request field is wrong; nothing was written.

    ``violations`` lists ``(field_path, description)`` pairs, e.g.
    ``("memories[3].vector", "has 5 floats, the data directory's dimension is 8")``.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(self, violations: Sequence[tuple[str, str]], **kwargs: object) -> None:
        self.violations = list(violations)
        text = "; ".join(f"{name}: {description}" for name, description in self.violations)
        super().__init__(text or "invalid argument", **kwargs)  # type: ignore[arg-type]

    @classmethod
    def field(cls, name: str, description: str) -> InvalidArgument:
        """One violation of one field."""
        return cls([(name, description)])


class NotFound(MemevoError):
    """The memory (or other object) asked for does not exist."""

    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"


class FailedPrecondition(MemevoError):
    """The data directory or the memory is not in a state that allows the call."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class ResourceExhausted(MemevoError):
    """A limit was reached or the write path is saturated; retry later or send less."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retryable = True
    reason = "RESOURCE_EXHAUSTED"


class Unavailable(MemevoError):
    """The sidecar is starting up or shutting down, or storage failed transiently; retry."""

    code = grpc.StatusCode.UNAVAILABLE
    retryable = True
    reason = "UNAVAILABLE"


class DeadlineExceeded(MemevoError):
    """The call's deadline is about to pass; what the metadata says was done is done, the rest was not."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retryable = True
    reason = "DEADLINE_EXCEEDED"


class Unimplemented(MemevoError):
    """The RPC is part of the contract but not built yet."""

    code = grpc.StatusCode.UNIMPLEMENTED
    reason = "UNIMPLEMENTED"


class Unauthenticated(MemevoError):
    """The call carried no token, or the wrong one."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class StorageError(MemevoError):
    """RocksDB refused a write (disk full, read-only directory); nothing of the call was stored."""

    code = grpc.StatusCode.UNAVAILABLE
    retryable = True
    reason = "STORAGE_WRITE_FAILED"
