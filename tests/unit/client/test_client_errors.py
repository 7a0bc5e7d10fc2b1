"""Mapping gRPC failures, with their google.rpc details, to the client's typed errors."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from memevo.client import errors
from memevo.client.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    MemevoError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)


class FakeRpcError(grpc.RpcError):
    """What grpc raises: an RpcError that is also a Call with code, details and trailing metadata."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        trailing: tuple[tuple[str, str | bytes], ...] | None = (),
    ) -> None:
        super().__init__()
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...] | None:  # type: ignore[override]
        return self._trailing


def pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def rich_error(code: grpc.StatusCode, message: str, *details: object) -> FakeRpcError:
    """An RpcError carrying a google.rpc.Status as the server's rpc_status.to_status would send it."""
    status = status_pb2.Status(code=code.value[0], message=message, details=[pack(d) for d in details])
    grpc_status = rpc_status.to_status(status)
    return FakeRpcError(grpc_status.code, grpc_status.details, grpc_status.trailing_metadata)


def test_bad_request_and_error_info_are_parsed() -> None:
    err = errors.from_rpc_error(
        rich_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "memory.vector: expected 8 dimensions, got 3",
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field="memory.vector", description="expected 8 dimensions, got 3"
                    ),
                    error_details_pb2.BadRequest.FieldViolation(field="memory.tags[2]", description="too long"),
                ]
            ),
            error_details_pb2.ErrorInfo(
                reason="VECTOR_DIMENSION_MISMATCH", domain="memevo.dev", metadata={"expected": "8", "got": "3"}
            ),
        )
    )
    assert isinstance(err, InvalidArgumentError)
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert err.details == "memory.vector: expected 8 dimensions, got 3"
    assert err.field_violations == [
        ("memory.vector", "expected 8 dimensions, got 3"),
        ("memory.tags[2]", "too long"),
    ]
    assert err.reason == "VECTOR_DIMENSION_MISMATCH"
    assert err.domain == "memevo.dev"
    assert err.metadata == {"expected": "8", "got": "3"}
    assert err.retryable is False
    assert "memory.vector" in str(err)
    assert "VECTOR_DIMENSION_MISMATCH" in str(err)


def test_stream_error_carries_committed_count() -> None:
    err = errors.from_rpc_error(
        rich_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "item 3 is invalid",
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field="memories[3].memory.content", description="x")
                ]
            ),
            error_details_pb2.ErrorInfo(reason="INVALID_STREAM_ITEM", metadata={"committed_count": "3"}),
        )
    )
    assert int(err.metadata["committed_count"]) == 3


def test_retry_info_is_parsed() -> None:
    err = errors.from_rpc_error(
        rich_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "fresh tail full",
            error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1, nanos=500_000_000)),
        )
    )
    assert isinstance(err, ResourceExhaustedError)
    assert err.retryable
    assert err.retry_after_s == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("code", "cls", "retryable"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError, False),
        (grpc.StatusCode.NOT_FOUND, NotFoundError, False),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExistsError, False),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPreconditionError, False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhaustedError, True),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceededError, True),
        (grpc.StatusCode.UNAUTHENTICATED, UnauthenticatedError, False),
        (grpc.StatusCode.PERMISSION_DENIED, PermissionDeniedError, False),
        (grpc.StatusCode.UNIMPLEMENTED, UnimplementedError, False),
        (grpc.StatusCode.INTERNAL, InternalError, False),
        (grpc.StatusCode.ABORTED, MemevoError, True),
        (grpc.StatusCode.CANCELLED, MemevoError, False),
        (grpc.StatusCode.UNKNOWN, MemevoError, False),
        (grpc.StatusCode.DATA_LOSS, MemevoError, False),
    ],
)
def test_each_code_maps_to_its_class(code: grpc.StatusCode, cls: type[MemevoError], retryable: bool) -> None:
    err = errors.from_rpc_error(FakeRpcError(code, "boom"))
    assert type(err) is cls
    assert isinstance(err, MemevoError)
    assert err.code is code
    assert err.retryable is retryable
    assert err.details == "boom"
    assert err.field_violations == []
    assert err.reason == ""
    assert err.metadata == {}


def test_no_trailing_metadata_at_all() -> None:
    err = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down", trailing=None))
    assert isinstance(err, UnavailableError)
    assert err.field_violations == []


def test_status_that_contradicts_the_call_is_ignored() -> None:
    status = status_pb2.Status(
        code=code_pb2.NOT_FOUND,
        message="other",
        details=[pack(error_details_pb2.ErrorInfo(reason="LIES"))],
    )
    trailing = (("grpc-status-details-bin", status.SerializeToString()),)
    err = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad", trailing))
    assert isinstance(err, InvalidArgumentError)
    assert err.reason == ""


def test_corrupt_status_blob_does_not_crash() -> None:
    trailing = (("grpc-status-details-bin", b"\xff\xff\xff not a proto"),)
    err = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "oops", trailing))
    assert isinstance(err, InternalError)
    assert err.field_violations == []


def test_unknown_detail_types_are_skipped() -> None:
    err = errors.from_rpc_error(
        rich_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "not yet",
            error_details_pb2.DebugInfo(detail="stack"),
            error_details_pb2.ErrorInfo(reason="NOT_READY"),
        )
    )
    assert isinstance(err, FailedPreconditionError)
    assert err.reason == "NOT_READY"


def test_error_built_by_hand_for_a_missing_memory() -> None:
    err = NotFoundError(grpc.StatusCode.NOT_FOUND, "memory 5 not found")
    assert not err.retryable
    assert str(err) == "NOT_FOUND: memory 5 not found"
    assert repr(err) == "NotFoundError(NOT_FOUND, 'memory 5 not found')"
