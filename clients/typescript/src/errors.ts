/**
 * Typed errors of the memevo client: one base class, one subclass per gRPC status the sidecar uses.
 *
 * Every client method rejects with a {@link MemevoError} instead of grpc-js's `ServiceError`. The
 * sidecar sends `google.rpc` details with its errors (in the `grpc-status-details-bin` trailer):
 * `BadRequest` field violations become {@link MemevoError.fieldViolations}, `ErrorInfo` becomes
 * {@link MemevoError.reason} and {@link MemevoError.metadata}, `RetryInfo` becomes
 * {@link MemevoError.retryAfterMs}.
 */

import { status as Status, type Metadata, type ServiceError } from "@grpc/grpc-js";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

export { Status };

/** One `google.rpc.BadRequest.FieldViolation`: which request field is wrong and why. */
export interface FieldViolation {
  /** Path of the field, e.g. `memory.vector` or `memories[3].namespace`. */
  readonly field: string;
  /** What is wrong with it and what to send instead. */
  readonly description: string;
}

/** Codes where the same call can succeed later (a mutating call only with a `requestId`). */
const RETRYABLE: ReadonlySet<Status> = new Set([
  Status.UNAVAILABLE,
  Status.RESOURCE_EXHAUSTED,
  Status.DEADLINE_EXCEEDED,
  Status.ABORTED,
]);

/** What {@link MemevoError}'s constructor takes besides the code and message. */
export interface ErrorDetails {
  readonly fieldViolations?: readonly FieldViolation[];
  readonly reason?: string;
  readonly domain?: string;
  readonly metadata?: Readonly<Record<string, string>>;
  readonly retryAfterMs?: number;
  readonly cause?: unknown;
}

/**
 * A call to the sidecar failed: {@link code} says how and {@link retryable} whether retrying can help.
 *
 * A retry of a mutating call is safe only when it carries a `requestId`: the sidecar then returns the
 * first call's result instead of writing twice.
 */
export class MemevoError extends Error {
  /** The gRPC status code (`Status.INVALID_ARGUMENT`, ...). */
  readonly code: Status;
  /** The sidecar's message, without the code prefix. */
  readonly details: string;
  /** `google.rpc.BadRequest` field violations; empty when none were sent. */
  readonly fieldViolations: readonly FieldViolation[];
  /** The `google.rpc.ErrorInfo` reason (UPPER_SNAKE_CASE); empty when none was sent. */
  readonly reason: string;
  /** The `google.rpc.ErrorInfo` domain; empty when none was sent. */
  readonly domain: string;
  /** The `google.rpc.ErrorInfo` metadata, e.g. `committed_count` after a failed RememberStream. */
  readonly metadata: Readonly<Record<string, string>>;
  /** Milliseconds to wait before a retry (`google.rpc.RetryInfo`); undefined when not given. */
  readonly retryAfterMs: number | undefined;

  constructor(code: Status, details: string, extra: ErrorDetails = {}) {
    super(describe(code, details, extra), extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = details;
    this.fieldViolations = extra.fieldViolations ?? [];
    this.reason = extra.reason ?? "";
    this.domain = extra.domain ?? "";
    this.metadata = extra.metadata ?? {};
    this.retryAfterMs = extra.retryAfterMs;
  }

  /** The status code's name, e.g. `"INVALID_ARGUMENT"`. */
  get codeName(): string {
    return Status[this.code] ?? `CODE_${this.code}`;
  }

  /** True for UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and ABORTED. */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }
}

function describe(code: Status, details: string, extra: ErrorDetails): string {
  let text = Status[code] ?? `CODE_${code}`;
  if (details) text += `: ${details}`;
  if (extra.fieldViolations?.length) {
    text += ` [${extra.fieldViolations.map((v) => `${v.field}: ${v.description}`).join("; ")}]`;
  }
  if (extra.reason) text += ` (reason ${extra.reason})`;
  return text;
}

/** A request field is wrong (see `fieldViolations`); nothing was written. */
export class InvalidArgumentError extends MemevoError {}
/** A memory, retrieval or other subject does not exist. */
export class NotFoundError extends MemevoError {}
/** What the request would create already exists. */
export class AlreadyExistsError extends MemevoError {}
/** The sidecar is not in a state where the request can be applied. */
export class FailedPreconditionError extends MemevoError {}
/** A limit or back-pressure (e.g. a full fresh tail); retry later, after `retryAfterMs` if given. */
export class ResourceExhaustedError extends MemevoError {}
/** The sidecar cannot be reached or is shutting down; retry. */
export class UnavailableError extends MemevoError {}
/** The deadline passed before the sidecar answered; a write may still have been applied. */
export class DeadlineExceededError extends MemevoError {}
/** The call was cancelled by the caller (an AbortSignal, `cancel()`, or closing the client). */
export class CancelledError extends MemevoError {}
/** The token is missing or wrong. */
export class UnauthenticatedError extends MemevoError {}
/** The token is valid but not allowed to do this. */
export class PermissionDeniedError extends MemevoError {}
/** The sidecar does not implement this call (yet). */
export class UnimplementedError extends MemevoError {}
/** The sidecar failed in a way that is its bug, not the caller's. */
export class InternalError extends MemevoError {}

const BY_CODE: ReadonlyMap<Status, typeof MemevoError> = new Map<Status, typeof MemevoError>([
  [Status.INVALID_ARGUMENT, InvalidArgumentError],
  [Status.NOT_FOUND, NotFoundError],
  [Status.ALREADY_EXISTS, AlreadyExistsError],
  [Status.FAILED_PRECONDITION, FailedPreconditionError],
  [Status.RESOURCE_EXHAUSTED, ResourceExhaustedError],
  [Status.UNAVAILABLE, UnavailableError],
  [Status.DEADLINE_EXCEEDED, DeadlineExceededError],
  [Status.CANCELLED, CancelledError],
  [Status.UNAUTHENTICATED, UnauthenticatedError],
  [Status.PERMISSION_DENIED, PermissionDeniedError],
  [Status.UNIMPLEMENTED, UnimplementedError],
  [Status.INTERNAL, InternalError],
]);

/** The error class for a status code; {@link MemevoError} itself for codes without a subclass. */
export function errorClass(code: Status): typeof MemevoError {
  return BY_CODE.get(code) ?? MemevoError;
}

/** The decoded content of a `google.rpc.Status` that matters to a caller. */
export interface RichStatus {
  code: number;
  message: string;
  fieldViolations: FieldViolation[];
  reason: string;
  domain: string;
  metadata: Record<string, string>;
  retryAfterMs: number | undefined;
}

const BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest";
const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo";

/**
 * Decode a serialized `google.rpc.Status` (the `grpc-status-details-bin` trailer).
 *
 * Only the three detail types the sidecar sends are read (BadRequest, ErrorInfo, RetryInfo);
 * others are skipped. Decoding by field number keeps the googleapis protos out of the
 * generated code. Throws on malformed input.
 */
export function decodeRichStatus(bytes: Uint8Array): RichStatus {
  const out: RichStatus = {
    code: 0,
    message: "",
    fieldViolations: [],
    reason: "",
    domain: "",
    metadata: {},
    retryAfterMs: undefined,
  };
  forEachField(bytes, (no, wire, r) => {
    if (no === 1 && wire === WireType.Varint) out.code = r.int32();
    else if (no === 2 && wire === WireType.LengthDelimited) out.message = r.string();
    else if (no === 3 && wire === WireType.LengthDelimited) readAny(r.bytes(), out);
    else r.skip(wire, no);
  });
  return out;
}

function readAny(bytes: Uint8Array, out: RichStatus): void {
  let typeUrl = "";
  let value: Uint8Array = new Uint8Array(0);
  forEachField(bytes, (no, wire, r) => {
    if (no === 1 && wire === WireType.LengthDelimited) typeUrl = r.string();
    else if (no === 2 && wire === WireType.LengthDelimited) value = r.bytes();
    else r.skip(wire, no);
  });
  if (typeUrl === BAD_REQUEST) {
    forEachField(value, (no, wire, r) => {
      if (no !== 1 || wire !== WireType.LengthDelimited) return void r.skip(wire, no);
      let field = "";
      let description = "";
      forEachField(r.bytes(), (vno, vwire, vr) => {
        if (vno === 1 && vwire === WireType.LengthDelimited) field = vr.string();
        else if (vno === 2 && vwire === WireType.LengthDelimited) description = vr.string();
        else vr.skip(vwire, vno);
      });
      out.fieldViolations.push({ field, description });
    });
  } else if (typeUrl === ERROR_INFO) {
    forEachField(value, (no, wire, r) => {
      if (no === 1 && wire === WireType.LengthDelimited) out.reason = r.string();
      else if (no === 2 && wire === WireType.LengthDelimited) out.domain = r.string();
      else if (no === 3 && wire === WireType.LengthDelimited) {
        let key = "";
        let val = "";
        forEachField(r.bytes(), (eno, ewire, er) => {
          if (eno === 1 && ewire === WireType.LengthDelimited) key = er.string();
          else if (eno === 2 && ewire === WireType.LengthDelimited) val = er.string();
          else er.skip(ewire, eno);
        });
        out.metadata[key] = val;
      } else r.skip(wire, no);
    });
  } else if (typeUrl === RETRY_INFO) {
    forEachField(value, (no, wire, r) => {
      if (no !== 1 || wire !== WireType.LengthDelimited) return void r.skip(wire, no);
      let seconds = 0;
      let nanos = 0;
      forEachField(r.bytes(), (dno, dwire, dr) => {
        if (dno === 1 && dwire === WireType.Varint) seconds = Number(dr.int64());
        else if (dno === 2 && dwire === WireType.Varint) nanos = dr.int32();
        else dr.skip(dwire, dno);
      });
      out.retryAfterMs = seconds * 1000 + nanos / 1e6;
    });
  }
}

function forEachField(bytes: Uint8Array, visit: (no: number, wire: WireType, reader: BinaryReader) => void): void {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [no, wire] = reader.tag();
    visit(no, wire, reader);
  }
}

function richStatusOf(metadata: Metadata | undefined): RichStatus | undefined {
  const blob = metadata?.get("grpc-status-details-bin")[0];
  if (!(blob instanceof Uint8Array)) return undefined;
  try {
    return decodeRichStatus(blob);
  } catch {
    // A corrupt details blob is not trusted; the status code and message still hold.
    return undefined;
  }
}

function isServiceError(error: unknown): error is ServiceError {
  return error instanceof Error && typeof (error as Partial<ServiceError>).code === "number" && "metadata" in error;
}

/** Translate whatever a grpc-js call failed with into its typed {@link MemevoError}. */
export function toMemevoError(error: unknown): MemevoError {
  if (error instanceof MemevoError) return error;
  if (!isServiceError(error)) {
    const message = error instanceof Error ? error.message : String(error);
    return new MemevoError(Status.UNKNOWN, message, { cause: error });
  }
  const rich = richStatusOf(error.metadata);
  const Class = errorClass(error.code);
  return new Class(error.code, error.details ?? "", {
    fieldViolations: rich?.fieldViolations,
    reason: rich?.reason,
    domain: rich?.domain,
    metadata: rich?.metadata,
    retryAfterMs: rich?.retryAfterMs,
    cause: error,
  });
}
