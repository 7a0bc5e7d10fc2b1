package dev.memevo.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Every failed call of {@link MemevoClient}: the gRPC code, the sidecar's message and the {@code
 * google.rpc} details it sent. Each code the sidecar uses has a subclass ({@link NotFound}, {@link
 * InvalidArgument}, ...) to catch; {@link #isRetryable()} says whether a retry can help. A retry of
 * a mutating call is safe only with a request id: the sidecar then returns the first call's result.
 */
public class MemevoException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** One {@code google.rpc.BadRequest} field violation: which request field is wrong and why. */
  public record FieldViolation(String field, String description) {}

  private final Status.Code code;
  private final transient List<FieldViolation> fieldViolations;
  private final String reason;
  private final String domain;
  private final transient Map<String, String> metadata;
  private final transient Duration retryAfter;

  MemevoException(Status.Code code, String message, List<FieldViolation> fieldViolations, ErrorInfo info,
      Duration retryAfter, Throwable cause) {
    super(describe(code, message, fieldViolations, info.getReason()), cause);
    this.code = code;
    this.fieldViolations = List.copyOf(fieldViolations);
    this.reason = info.getReason();
    this.domain = info.getDomain();
    this.metadata = Map.copyOf(info.getMetadataMap());
    this.retryAfter = retryAfter;
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The {@code google.rpc.BadRequest} field violations; empty when none were sent. */
  public List<FieldViolation> fieldViolations() {
    return fieldViolations;
  }

  /** The {@code google.rpc.ErrorInfo} reason (UPPER_SNAKE_CASE, e.g. NOT_RETIRED); empty when none was sent. */
  public String reason() {
    return reason;
  }

  /** The {@code google.rpc.ErrorInfo} domain; empty when none was sent. */
  public String domain() {
    return domain;
  }

  /** The {@code google.rpc.ErrorInfo} metadata, e.g. {@code committed_count} after a failed RememberStream. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** The {@code google.rpc.RetryInfo} delay; {@link Duration#ZERO} when not given. */
  public Duration retryAfter() {
    return retryAfter;
  }

  /** True for UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and ABORTED: the same call may work later. */
  public boolean isRetryable() {
    return switch (code) {
      case UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED -> true;
      default -> false;
    };
  }

  /** The typed exception of a failed gRPC call (a {@code StatusRuntimeException} or {@code StatusException}). */
  public static MemevoException from(Throwable error) {
    if (error instanceof MemevoException typed) {
      return typed;
    }
    Status status = Status.fromThrowable(error);
    List<FieldViolation> violations = new ArrayList<>();
    ErrorInfo info = ErrorInfo.getDefaultInstance();
    Duration retryAfter = Duration.ZERO;
    com.google.rpc.Status rich = StatusProto.fromThrowable(error);
    if (rich != null) {
      for (Any detail : rich.getDetailsList()) {
        try {
          if (detail.is(BadRequest.class)) {
            for (BadRequest.FieldViolation v : detail.unpack(BadRequest.class).getFieldViolationsList()) {
              violations.add(new FieldViolation(v.getField(), v.getDescription()));
            }
          } else if (detail.is(ErrorInfo.class)) {
            info = detail.unpack(ErrorInfo.class);
          } else if (detail.is(RetryInfo.class)) {
            var delay = detail.unpack(RetryInfo.class).getRetryDelay();
            retryAfter = Duration.ofSeconds(delay.getSeconds(), delay.getNanos());
          }
        } catch (InvalidProtocolBufferException ignored) {
          // A detail that does not parse carries nothing we can use; the code and message still do.
        }
      }
    }
    String message = status.getDescription() == null ? "" : status.getDescription();
    return switch (status.getCode()) {
      case INVALID_ARGUMENT -> new InvalidArgument(message, violations, info, retryAfter, error);
      case NOT_FOUND -> new NotFound(message, violations, info, retryAfter, error);
      case ALREADY_EXISTS -> new AlreadyExists(message, violations, info, retryAfter, error);
      case FAILED_PRECONDITION -> new FailedPrecondition(message, violations, info, retryAfter, error);
      case RESOURCE_EXHAUSTED -> new ResourceExhausted(message, violations, info, retryAfter, error);
      case UNAVAILABLE -> new Unavailable(message, violations, info, retryAfter, error);
      case DEADLINE_EXCEEDED -> new DeadlineExceeded(message, violations, info, retryAfter, error);
      case CANCELLED -> new Cancelled(message, violations, info, retryAfter, error);
      case UNAUTHENTICATED -> new Unauthenticated(message, violations, info, retryAfter, error);
      case PERMISSION_DENIED -> new PermissionDenied(message, violations, info, retryAfter, error);
      case UNIMPLEMENTED -> new Unimplemented(message, violations, info, retryAfter, error);
      default -> new MemevoException(status.getCode(), message, violations, info, retryAfter, error);
    };
  }

  private static String describe(Status.Code code, String message, List<FieldViolation> violations, String reason) {
    StringBuilder text = new StringBuilder("memevo: ").append(code);
    if (!message.isEmpty()) {
      text.append(": ").append(message);
    }
    if (!violations.isEmpty()) {
      text.append(" [");
      for (int i = 0; i < violations.size(); i++) {
        text.append(i == 0 ? "" : "; ").append(violations.get(i).field()).append(": ").append(violations.get(i).description());
      }
      text.append(']');
    }
    if (!reason.isEmpty()) {
      text.append(" (reason ").append(reason).append(')');
    }
    return text.toString();
  }

  /** INVALID_ARGUMENT: a request field is wrong; {@link #fieldViolations()} says which and why. */
  public static final class InvalidArgument extends MemevoException {
    private static final long serialVersionUID = 1L;

    InvalidArgument(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.INVALID_ARGUMENT, m, v, i, r, c);
    }
  }

  /** NOT_FOUND: an id, retrieval id or arm that does not exist. */
  public static final class NotFound extends MemevoException {
    private static final long serialVersionUID = 1L;

    NotFound(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.NOT_FOUND, m, v, i, r, c);
    }
  }

  /** ALREADY_EXISTS: e.g. a request id reused for a different request (reason REQUEST_ID_REUSED). */
  public static final class AlreadyExists extends MemevoException {
    private static final long serialVersionUID = 1L;

    AlreadyExists(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.ALREADY_EXISTS, m, v, i, r, c);
    }
  }

  /** FAILED_PRECONDITION: the memory is not in a state the call needs (e.g. Restore of a current memory). */
  public static final class FailedPrecondition extends MemevoException {
    private static final long serialVersionUID = 1L;

    FailedPrecondition(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.FAILED_PRECONDITION, m, v, i, r, c);
    }
  }

  /** RESOURCE_EXHAUSTED: a limit was reached; retry later ({@link #retryAfter()}). */
  public static final class ResourceExhausted extends MemevoException {
    private static final long serialVersionUID = 1L;

    ResourceExhausted(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.RESOURCE_EXHAUSTED, m, v, i, r, c);
    }
  }

  /** UNAVAILABLE: the sidecar cannot be reached or is shutting down; retry. */
  public static final class Unavailable extends MemevoException {
    private static final long serialVersionUID = 1L;

    Unavailable(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.UNAVAILABLE, m, v, i, r, c);
    }
  }

  /** DEADLINE_EXCEEDED: the call's deadline passed. */
  public static final class DeadlineExceeded extends MemevoException {
    private static final long serialVersionUID = 1L;

    DeadlineExceeded(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.DEADLINE_EXCEEDED, m, v, i, r, c);
    }
  }

  /** CANCELLED: the caller cancelled the call. */
  public static final class Cancelled extends MemevoException {
    private static final long serialVersionUID = 1L;

    Cancelled(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.CANCELLED, m, v, i, r, c);
    }
  }

  /** UNAUTHENTICATED: the sidecar wants a token ({@link MemevoClient.Builder#token}) and got none or another. */
  public static final class Unauthenticated extends MemevoException {
    private static final long serialVersionUID = 1L;

    Unauthenticated(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.UNAUTHENTICATED, m, v, i, r, c);
    }
  }

  /** PERMISSION_DENIED: the caller's token may not do this (e.g. in another namespace). */
  public static final class PermissionDenied extends MemevoException {
    private static final long serialVersionUID = 1L;

    PermissionDenied(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.PERMISSION_DENIED, m, v, i, r, c);
    }
  }

  /** UNIMPLEMENTED: the sidecar does not offer this (yet). */
  public static final class Unimplemented extends MemevoException {
    private static final long serialVersionUID = 1L;

    Unimplemented(String m, List<FieldViolation> v, ErrorInfo i, Duration r, Throwable c) {
      super(Status.Code.UNIMPLEMENTED, m, v, i, r, c);
    }
  }
}
