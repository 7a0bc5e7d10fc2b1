/**
 * {@link MemoryClient}: the memevo.v1 MemoryService over @grpc/grpc-js, with async/await,
 * typed errors, default deadlines and vectors as Float32Array.
 */

import * as grpc from "@grpc/grpc-js";
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";

import type { ChangeEvent, ChangeEventType } from "./gen/memevo/v1/events_pb.js";
import { MemoryInputSchema, type Memory, type MemoryInput } from "./gen/memevo/v1/memory_pb.js";
import {
  MemoryService,
  RecallFilterSchema,
  RememberStreamItemSchema,
  type RememberStreamItem,
  type BeliefsResponse,
  type BuildContextResponse,
  type BuildContextRequestSchema,
  type DeclareFrameworkResponse,
  type FactKeySchema,
  type ForgetRequestSchema,
  type ForgetResponse,
  type GetResponse,
  type GetStatsResponse,
  type GovernRequestSchema,
  type GovernResponse,
  type HistoryResponse,
  type ListEntitiesResponse,
  type RecallFilter,
  type RecallRequestSchema,
  type RecallResponse,
  type RememberStreamResponse,
  type ReportOutcomeRequestSchema,
  type ReportOutcomeResponse,
  type Outcome,
  type PromoteArmResponse,
  type ReviewRequestSchema,
  type ReviewResponse,
  type SupersedeResponse,
  type UnconsolidateResponse,
  type WriteOutcome,
} from "./gen/memevo/v1/memory_service_pb.js";
import { ExperimentSchema, PolicySchema, type Experiment, type Policy } from "./gen/memevo/v1/policy_pb.js";
import { DecisionSchema, Verdict, type ProposalKind } from "./gen/memevo/v1/review_pb.js";
import { CancelledError, NotFoundError, Status, UnavailableError, toMemevoError } from "./errors.js";
import { encodeVector, type VectorLike } from "./vectors.js";

/** Largest message the client sends or accepts: 64 MiB, the sidecar's limit. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** Deadline of unary and client-streaming calls unless the client or the call sets another. */
export const DEFAULT_TIMEOUT_MS = 10_000;

/** First delay before the channel reconnects to a sidecar it lost, milliseconds. */
export const RECONNECT_BACKOFF_INITIAL_MS = 100;
/**
 * Longest delay between the channel's reconnect attempts, milliseconds: a restarted sidecar is answered
 * at most this long after it serves again.
 */
export const RECONNECT_BACKOFF_MAX_MS = 1_000;

/**
 * The address a client without one talks to: `$MEMEVO_ADDRESS` when set, else the socket `memevo serve`
 * listens on by default (`unix://$XDG_RUNTIME_DIR/memevo-UID.sock`, `/tmp` without `$XDG_RUNTIME_DIR`).
 */
export function defaultTarget(): string {
  const address = process.env.MEMEVO_ADDRESS;
  if (address) return address;
  return `unix://${process.env.XDG_RUNTIME_DIR || "/tmp"}/memevo-${process.getuid?.() ?? 0}.sock`;
}

/** Channel options every client sets; {@link ClientOptions.channelOptions} override them key by key. */
export const DEFAULT_CHANNEL_OPTIONS: Readonly<grpc.ChannelOptions> = {
  // gRPC's 4 MiB default receive limit is smaller than one large RememberBatch or a Recall with vectors.
  "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
  "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
  // Pings find a peer that vanished without closing the socket, which would otherwise leave a Watch
  // hanging forever. 6 minutes stays above the 5-minute minimum a default gRPC server enforces.
  "grpc.keepalive_time_ms": 6 * 60 * 1000,
  "grpc.keepalive_timeout_ms": 20 * 1000,
  "grpc.keepalive_permit_without_calls": 0,
  "grpc.primary_user_agent": "memevo-node",
  // gRPC's reconnect backoff starts at 1 s and grows x1.6 per failed attempt up to 2 minutes, so a client
  // that kept calling through a sidecar restart failed on for seconds after the sidecar was back. An
  // attempt at a local sidecar costs one refused connect; 0.1 s growing to at most 1 s keeps that cheap.
  "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_INITIAL_MS,
  "grpc.max_reconnect_backoff_ms": RECONNECT_BACKOFF_MAX_MS,
  // By default every channel to one address in the process shares a subchannel, and with it a failing
  // sibling's backoff: a client made after the restart waited out the old client's delay.
  "grpc.use_local_subchannel_pool": 1,
};

/** First delay before a resuming Watch reconnects; it doubles up to {@link WATCH_BACKOFF_MAX_MS}. */
export const WATCH_BACKOFF_INITIAL_MS = 100;
/** Longest delay between Watch reconnect attempts. */
export const WATCH_BACKOFF_MAX_MS = 5_000;
/** Consecutive failed reconnects after which a resuming Watch gives up. */
export const WATCH_MAX_ATTEMPTS = 10;

/** How a client is built. */
export interface ClientOptions {
  /** Sent as `authorization: Bearer <token>` on every call (the sidecar's `--token-file`). */
  token?: string;
  /** Deadline of unary and client-streaming calls, milliseconds. Default {@link DEFAULT_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Wait (up to the deadline) for an unreachable sidecar instead of failing at once with UNAVAILABLE. Default false. */
  waitForReady?: boolean;
  /** Extra grpc-js channel options, applied over {@link DEFAULT_CHANNEL_OPTIONS}. */
  channelOptions?: grpc.ChannelOptions;
}

/** Per-call options every method takes. */
export interface CallOptions {
  /** Deadline of this call, milliseconds; overrides the client's. Streams have none unless given. */
  timeoutMs?: number;
  /** Cancels the call; the method then rejects with {@link CancelledError}. */
  signal?: AbortSignal;
}

/** A memory id: sidecar ids are uint64, so bigint; a safe non-negative integer number is accepted too. */
export type Id = bigint | number;

/** A timestamp as a Date or a protobuf Timestamp. */
export type TimeLike = Date | Timestamp;

/** The agent's turn counter. */
export type Turn = bigint | number;

type Init<D extends DescMessage> = Omit<MessageInitShape<D>, "$typeName">;

/** A memory to store: {@link MemoryInput}'s fields, with the vector as float32 values and validFrom as a Date. */
export type MemoryInputInit = Omit<Init<typeof MemoryInputSchema>, "vector" | "validFrom"> & {
  /** Float32 values (packed for the wire), or already-packed little-endian float32 bytes. */
  vector?: VectorLike | Uint8Array;
  /** World time: when this became true. Default: the sidecar's time of the write. */
  validFrom?: TimeLike;
};

/** A memory to store: its text alone, or all of its fields. */
export type MemoryLike = string | MemoryInputInit;

/** One item of {@link MemoryClient.rememberStream}: a memory, or a memory with its own request id and turn. */
export type StreamItem = MemoryLike | { memory: MemoryLike; requestId?: string; turn?: Turn };

/** Recall filters, with the validity bounds as Dates. */
export type RecallFilterInit = Omit<Init<typeof RecallFilterSchema>, "validFromAfter" | "validFromBefore"> & {
  /** World time: keep memories valid from this instant on. */
  validFromAfter?: TimeLike;
  /** World time: keep memories valid from before this instant. */
  validFromBefore?: TimeLike;
};

/** The write options shared by the mutating calls. */
export interface WriteOptions extends CallOptions {
  /** Idempotency key (at most 128 bytes): a retry with the same id returns the first call's result. */
  requestId?: string;
  /** The agent's current turn counter. */
  turn?: Turn;
}

/** Options of {@link MemoryClient.recall}. */
export type RecallOptions = Omit<Init<typeof RecallRequestSchema>, "query" | "queryVector" | "filter" | "asOf" | "turn"> &
  CallOptions & { filter?: RecallFilterInit; asOf?: TimeLike; turn?: Turn };

/** Options of {@link MemoryClient.beliefs}. */
export type BeliefsOptions = CallOptions & {
  /** Namespace; default "default". */
  namespace?: string;
  /** World time: the values held at this instant; default now (the current values). */
  asOf?: TimeLike;
};

/** Options of {@link MemoryClient.buildContext}. */
export type BuildContextOptions = Omit<
  Init<typeof BuildContextRequestSchema>,
  "query" | "queryVector" | "filter" | "asOf" | "turn"
> &
  CallOptions & { filter?: RecallFilterInit; asOf?: TimeLike; turn?: Turn };

/** Options of {@link MemoryClient.reportOutcome}. */
export type ReportOutcomeOptions = Omit<
  Init<typeof ReportOutcomeRequestSchema>,
  "retrievalId" | "outcome" | "usedMemoryIds" | "turn"
> &
  CallOptions & { usedMemoryIds?: Iterable<Id>; turn?: Turn };

/** Options of {@link MemoryClient.forget}. */
export type ForgetOptions = Omit<Init<typeof ForgetRequestSchema>, "ids" | "turn"> & WriteOptions;

/** Options of {@link MemoryClient.govern}. */
export type GovernOptions = Omit<Init<typeof GovernRequestSchema>, "turn"> & CallOptions & { turn?: Turn };

/** Options of {@link MemoryClient.watch}. */
export interface WatchOptions extends CallOptions {
  /** Deliver events with a sequence above this; 0 replays the whole log. Default: only events after the call. */
  afterSequence?: Id;
  /** Only events of this namespace (sidecar-wide events always come). Default: all. */
  namespace?: string;
  /** Only events of these types. Default: all. */
  types?: Iterable<ChangeEventType>;
  /**
   * Reconnect from the last delivered sequence when the stream is cut with UNAVAILABLE or ended by
   * a sidecar shutting down, so no event is lost or repeated. Default false.
   */
  resume?: boolean;
  /** Consecutive failed reconnects before a resuming watch gives up. Default {@link WATCH_MAX_ATTEMPTS}. */
  maxAttempts?: number;
}

/** The result of storing one memory. */
export interface Written {
  /** The stored (or confirmed) memory, without its vector. */
  readonly memory: Memory;
  readonly outcome: WriteOutcome;
  /** Other memories the write changed (e.g. the one it superseded). */
  readonly affectedIds: readonly bigint[];
  /** True when the request id matched an earlier call and this is that call's result. */
  readonly replayed: boolean;
}

/** A change-log stream: iterate it with `for await`; `cancel()` (or `break`) ends it. */
export interface WatchStream extends AsyncIterableIterator<ChangeEvent> {
  /** End the stream; a pending `next()` resolves as done. Safe to call twice. */
  cancel(): void;
}

// ---------------------------------------------------------------------------------------------

type Method<I extends DescMessage, O extends DescMessage> = DescMethod & { input: I; output: O };

function path(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

function serializer<D extends DescMessage>(schema: D): (message: MessageShape<D>) => Buffer {
  return (message) => {
    const bytes = toBinary(schema, message);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function deserializer<D extends DescMessage>(schema: D): (bytes: Buffer) => MessageShape<D> {
  return (bytes) => fromBinary(schema, bytes);
}

function checkTarget(target: string): string {
  if (typeof target !== "string" || !target.trim()) {
    throw new TypeError("target must be 'unix:///absolute/path.sock' or 'host:port'");
  }
  if (target.startsWith("unix://") && !target.startsWith("unix:///")) {
    // grpc would read the first path segment as an authority and fail to connect much later.
    throw new TypeError(`${target}: a unix socket target needs an absolute path, e.g. unix:///run/memevo.sock`);
  }
  return target;
}

function checkTimeout(timeoutMs: number, name = "timeoutMs"): number {
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0) || !Number.isFinite(timeoutMs)) {
    throw new RangeError(`${name} must be a positive number of milliseconds, got ${String(timeoutMs)}`);
  }
  return timeoutMs;
}

/** Memory ids as bigints. `RangeError` for negative, fractional or unsafe numbers. */
export function toIds(ids: Id | Iterable<Id>): bigint[] {
  const items: Iterable<Id> = typeof ids === "bigint" || typeof ids === "number" ? [ids] : ids;
  return Array.from(items, (id) => toId(id));
}

function toId(id: Id, name = "id"): bigint {
  if (typeof id === "bigint") {
    if (id < 0n) throw new RangeError(`${name} must not be negative, got ${id}`);
    return id;
  }
  if (!Number.isSafeInteger(id) || id < 0) {
    throw new RangeError(`${name} must be a non-negative safe integer or a bigint, got ${String(id)}`);
  }
  return BigInt(id);
}

/** Items {@link MemoryClient.rememberStream} puts in one message at most. */
export const STREAM_GROUP_ITEMS = 64;

function toTurn(turn: Turn | undefined): bigint | undefined {
  if (turn === undefined) return undefined;
  if (typeof turn === "bigint") return turn;
  if (!Number.isSafeInteger(turn)) throw new RangeError(`turn must be an integer, got ${String(turn)}`);
  return BigInt(turn);
}

function toTimestamp(time: TimeLike | undefined): Timestamp | undefined {
  return time instanceof Date ? timestampFromDate(time) : time;
}

/** Build the wire MemoryInput from a text or a {@link MemoryInputInit}. */
export function toMemoryInput(memory: MemoryLike): MemoryInput {
  if (typeof memory === "string") return create(MemoryInputSchema, { content: memory });
  const { vector, validFrom, ...fields } = memory;
  return create(MemoryInputSchema, {
    ...fields,
    vector: vector === undefined ? undefined : vector instanceof Uint8Array ? vector : encodeVector(vector),
    validFrom: toTimestamp(validFrom),
  });
}

function toFilter(filter: RecallFilterInit | undefined): RecallFilter | undefined {
  if (filter === undefined) return undefined;
  const { validFromAfter, validFromBefore, ...fields } = filter;
  return create(RecallFilterSchema, {
    ...fields,
    validFromAfter: toTimestamp(validFromAfter),
    validFromBefore: toTimestamp(validFromBefore),
  });
}

/** The query of Recall and BuildContext: text is embedded by the sidecar, a vector is sent packed. */
function query(q: string | VectorLike): { query: string } | { queryVector: Uint8Array } {
  return typeof q === "string" ? { query: q } : { queryVector: encodeVector(q) };
}

function written(
  result: { memory?: Memory; outcome: WriteOutcome; affectedIds: bigint[] } | undefined,
  replayed: boolean,
): Written {
  if (result?.memory === undefined) {
    throw new TypeError("the sidecar answered a write without the stored memory");
  }
  return { memory: result.memory, outcome: result.outcome, affectedIds: result.affectedIds, replayed };
}

function cancelledError(): CancelledError {
  return new CancelledError(Status.CANCELLED, "cancelled by the caller");
}

/** Run `onAbort` when `signal` fires; returns the function that detaches it. */
function onAbort(signal: AbortSignal | undefined, abort: () => void): () => void {
  if (signal === undefined) return () => {};
  signal.addEventListener("abort", abort, { once: true });
  return () => signal.removeEventListener("abort", abort);
}

function backoffMs(attempt: number): number {
  const base = Math.min(WATCH_BACKOFF_MAX_MS, WATCH_BACKOFF_INITIAL_MS * 2 ** Math.min(attempt - 1, 30));
  return base * (0.5 + Math.random() / 2); // jitter against reconnect stampedes
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    const detach = onAbort(signal, done);
    function done(): void {
      clearTimeout(timer);
      detach();
      resolve();
    }
  });
}

/**
 * A client of one memevo sidecar over one HTTP/2 channel; share one per process.
 *
 * `target` is `unix:///absolute/path.sock` or `host:port`; without one, {@link defaultTarget}. Every
 * unary and client-streaming call has a deadline ({@link ClientOptions.timeoutMs}, default 10 s)
 * unless the call passes its own `timeoutMs`; `watch` and `review` have none unless given. Every method rejects with a
 * {@link MemevoError} subclass for a failed call, and throws `TypeError`/`RangeError` for
 * arguments the client can reject itself.
 */
export class MemoryClient {
  readonly target: string;
  private readonly channel: grpc.Client;
  private readonly timeoutMs: number;
  private readonly token: string | undefined;
  private readonly waitForReady: boolean;

  constructor(target: string = defaultTarget(), options: ClientOptions = {}) {
    this.target = checkTarget(target);
    this.timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    if (options.token !== undefined && (!options.token || /[\r\n]/.test(options.token))) {
      throw new TypeError("token must be a non-empty string without line breaks");
    }
    this.token = options.token;
    this.waitForReady = options.waitForReady ?? false;
    this.channel = new grpc.Client(this.target, grpc.credentials.createInsecure(), {
      ...DEFAULT_CHANNEL_OPTIONS,
      ...options.channelOptions,
    });
  }

  /** Close the channel; calls in flight are cancelled. Safe to call twice. */
  close(): void {
    this.channel.close();
  }

  // --- writes --------------------------------------------------------------------------------

  /** Store one memory; resolves once it is durable. A text alone is embedded by the sidecar. */
  async remember(memory: MemoryLike, options: WriteOptions = {}): Promise<Written> {
    const response = await this.unary(
      MemoryService.method.remember,
      { memory: toMemoryInput(memory), requestId: options.requestId, turn: toTurn(options.turn) },
      options,
    );
    return written(response.result, response.replayed);
  }

  /** Store several memories, all or nothing: one bad item rejects the whole batch (InvalidArgumentError). */
  async rememberBatch(memories: Iterable<MemoryLike>, options: WriteOptions = {}): Promise<Written[]> {
    const response = await this.unary(
      MemoryService.method.rememberBatch,
      { memories: Array.from(memories, toMemoryInput), requestId: options.requestId, turn: toTurn(options.turn) },
      options,
    );
    return response.results.map((result) => written(result, response.replayed));
  }

  /**
   * Stream memories to the sidecar, which commits them in groups as they arrive; resolves with the
   * ids once the stream is done. Respects HTTP/2 flow control (waits when the send buffer is full).
   * A bad item ends the stream with InvalidArgumentError whose `metadata.committed_count` says how
   * many items before it were stored; give items a `requestId` to resend safely after a failure.
   */
  async rememberStream(
    items: Iterable<StreamItem> | AsyncIterable<StreamItem>,
    options: CallOptions = {},
  ): Promise<RememberStreamResponse> {
    const method = MemoryService.method.rememberStream;
    if (options.signal?.aborted) throw cancelledError();
    let settled = false;
    let call!: grpc.ClientWritableStream<MessageShape<typeof method.input>>;
    const response = new Promise<RememberStreamResponse>((resolve, reject) => {
      call = this.channel.makeClientStreamRequest(
        path(method),
        serializer(method.input),
        deserializer(method.output),
        this.metadata(),
        this.callOptions(options.timeoutMs ?? this.timeoutMs),
        (error, value) => {
          settled = true;
          if (error) reject(toMemevoError(error));
          else resolve(value!);
        },
      );
    });
    // Settled early means the sidecar ended the stream (e.g. a bad item): stop sending, report why.
    const ended = response.then(
      () => undefined,
      () => undefined,
    );
    call.on("error", () => {});
    const detach = onAbort(options.signal, () => call.cancel());
    // Items travel STREAM_GROUP_ITEMS to a message (one turn per message): the sidecar pays a fixed
    // cost per message, which one item per message made the limit of a bulk load.
    let group: RememberStreamItem[] = [];
    let groupTurn: bigint | undefined;
    const send = async () => {
      if (group.length === 0) return;
      const message = create(method.input, { items: group, turn: groupTurn });
      group = [];
      if (!call.write(message)) {
        // HTTP/2 flow control: wait until the sidecar has taken what was sent (or the call ended).
        await Promise.race([new Promise((resolve) => call.once("drain", resolve)), ended]);
      }
    };
    try {
      for await (const item of items) {
        if (settled) break;
        const tagged = typeof item === "object" && "memory" in item;
        const entry = create(RememberStreamItemSchema, {
          memory: toMemoryInput(tagged ? item.memory : item),
          requestId: tagged ? item.requestId : undefined,
        });
        const turn = tagged ? toTurn(item.turn) : undefined;
        if (group.length > 0 && turn !== groupTurn) await send();
        groupTurn = turn;
        group.push(entry);
        if (group.length >= STREAM_GROUP_ITEMS) await send();
      }
      if (!settled) {
        await send();
        if (!settled) call.end();
      }
      return await response;
    } catch (error) {
      if (!settled) {
        // The items iterator (or converting an item) failed: abandon the call so nothing more is committed.
        call.cancel();
        await ended;
      }
      throw error;
    } finally {
      detach();
    }
  }

  /** Delete memories (or, with `keepHistory`, mark them OBSOLETE as history). */
  forget(ids: Id | Iterable<Id>, options: ForgetOptions = {}): Promise<ForgetResponse> {
    const { timeoutMs, signal, turn, ...fields } = options;
    return this.unary(
      MemoryService.method.forget,
      { ...fields, ids: toIds(ids), turn: toTurn(turn) },
      { timeoutMs, signal },
    );
  }

  /** Declare that `oldId` is replaced by an existing memory (an id) or by a new one to store. */
  supersede(
    oldId: Id,
    replacement: Id | MemoryLike,
    options: WriteOptions & { reason?: string } = {},
  ): Promise<SupersedeResponse> {
    const choice =
      typeof replacement === "bigint" || typeof replacement === "number"
        ? ({ case: "newId", value: toId(replacement, "replacement") } as const)
        : ({ case: "newMemory", value: toMemoryInput(replacement) } as const);
    return this.unary(
      MemoryService.method.supersede,
      {
        oldId: toId(oldId, "oldId"),
        replacement: choice,
        reason: options.reason,
        requestId: options.requestId,
        turn: toTurn(options.turn),
      },
      options,
    );
  }

  /** Undo a consolidation: the members become ACTIVE again, the abstraction OBSOLETE. */
  unconsolidate(abstractionId: Id, options: WriteOptions = {}): Promise<UnconsolidateResponse> {
    return this.unary(
      MemoryService.method.unconsolidate,
      { abstractionId: toId(abstractionId, "abstractionId"), requestId: options.requestId },
      options,
    );
  }

  /**
   * Undo a supersession (the memory is ACTIVE again with no successor; its successor stays current)
   * or a doubt (`possiblyOutdatedBy` cleared), e.g. for a plain-text statement the sidecar's
   * perception read as another slot's; resolves with the restored memory. Rejects with
   * FailedPreconditionError when the memory is neither superseded nor doubted (reason
   * `NOT_RETIRED`) or its fact key has another current value (`KEY_HELD`: supersede that one
   * instead), NotFoundError for an unknown id.
   */
  async restore(id: Id, options: WriteOptions & { reason?: string } = {}): Promise<Memory> {
    const response = await this.unary(
      MemoryService.method.restore,
      { memoryId: toId(id), reason: options.reason, requestId: options.requestId, turn: toTurn(options.turn) },
      options,
    );
    if (response.memory === undefined) throw new TypeError("the sidecar answered a restore without the memory");
    return response.memory;
  }

  /** Tell the sidecar whether the memories of a retrieval (`retrievalId` of recall/buildContext) helped. */
  reportOutcome(retrievalId: string, outcome: Outcome, options: ReportOutcomeOptions = {}): Promise<ReportOutcomeResponse> {
    const { timeoutMs, signal, usedMemoryIds, turn, ...fields } = options;
    return this.unary(
      MemoryService.method.reportOutcome,
      {
        ...fields,
        retrievalId,
        outcome,
        usedMemoryIds: usedMemoryIds === undefined ? undefined : toIds(usedMemoryIds),
        turn: toTurn(turn),
      },
      { timeoutMs, signal },
    );
  }

  /** Declare a new cognitive-framework version; older memories are flagged for re-interpretation. */
  declareFramework(
    version: string,
    options: WriteOptions & { description?: string } = {},
  ): Promise<DeclareFrameworkResponse> {
    return this.unary(
      MemoryService.method.declareFramework,
      { version, description: options.description, requestId: options.requestId, turn: toTurn(options.turn) },
      options,
    );
  }

  /** Replace the governance policy; resolves with the policy now in force. */
  async updatePolicy(policy: Init<typeof PolicySchema>, options: WriteOptions = {}): Promise<Policy> {
    const response = await this.unary(
      MemoryService.method.updatePolicy,
      { policy: create(PolicySchema, policy), requestId: options.requestId },
      options,
    );
    return response.policy ?? create(PolicySchema);
  }

  /**
   * Start (or replace) an online experiment: 2 to 16 arms, each a policy ranking its share of
   * retrievals (chosen by a hash of the retrieval id), with per-arm counts reset. An experiment
   * with no arms (or none) ends the running one. Resolves with the experiment now running; an
   * invalid one rejects with InvalidArgumentError naming each bad field and changes nothing. The
   * arm that ranked a retrieval is its `arm`; `stats().experiment` has the per-arm outcomes.
   * `experiment.adaptive` asks for outcome-driven traffic (`AllocationMode.THOMPSON`) and automatic
   * promotion with rollback; its decisions are in `stats().experiment.decisions` and the change log.
   */
  async setExperiment(experiment: Init<typeof ExperimentSchema> = {}, options: WriteOptions = {}): Promise<Experiment> {
    const response = await this.unary(
      MemoryService.method.setExperiment,
      { experiment: create(ExperimentSchema, experiment), requestId: options.requestId },
      options,
    );
    return response.experiment ?? create(ExperimentSchema);
  }

  /**
   * Make the named arm's policy the data directory's policy and end the experiment. Resolves with
   * the policy now in force (`policy`) and the per-arm outcomes at the end (`finalStats`); rejects
   * with NotFoundError (reason `UNKNOWN_ARM`) when no running arm has that name.
   */
  promoteArm(arm: string, options: WriteOptions = {}): Promise<PromoteArmResponse> {
    return this.unary(MemoryService.method.promoteArm, { arm, requestId: options.requestId }, options);
  }

  /**
   * Run a governance sweep now. Resolves with the sweep's statistics (`sweep`) and, unless
   * `dryRun`, those of the consolidation pass run with it (`consolidation`: groups found,
   * proposals opened for review, abstractions written by policy, proposals expired).
   */
  govern(options: GovernOptions = {}): Promise<GovernResponse> {
    const { timeoutMs, signal, turn, ...fields } = options;
    return this.unary(MemoryService.method.govern, { ...fields, turn: toTurn(turn) }, { timeoutMs, signal });
  }

  // --- reads ---------------------------------------------------------------------------------

  /** Find the memories that answer a query (text, embedded by the sidecar, or a vector); best first. */
  recall(q: string | VectorLike, options: RecallOptions = {}): Promise<RecallResponse> {
    const { timeoutMs, signal, filter, asOf, turn, ...fields } = options;
    return this.unary(
      MemoryService.method.recall,
      { ...fields, ...query(q), filter: toFilter(filter), asOf: toTimestamp(asOf), turn: toTurn(turn) },
      { timeoutMs, signal },
    );
  }

  /** Build an annotated context block for a prompt within a token budget. */
  buildContext(q: string | VectorLike, options: BuildContextOptions = {}): Promise<BuildContextResponse> {
    const { timeoutMs, signal, filter, asOf, turn, ...fields } = options;
    return this.unary(
      MemoryService.method.buildContext,
      { ...fields, ...query(q), filter: toFilter(filter), asOf: toTimestamp(asOf), turn: toTurn(turn) },
      { timeoutMs, signal },
    );
  }

  /** Read memories by id, in any state but EVICTED; unknown ids are listed in `missingIds`. */
  get(ids: Id | Iterable<Id>, options: CallOptions & { includeVectors?: boolean } = {}): Promise<GetResponse> {
    return this.unary(
      MemoryService.method.get,
      { ids: toIds(ids), includeVectors: options.includeVectors },
      options,
    );
  }

  /** Read one memory; rejects with NotFoundError when it does not exist or was evicted. */
  async getOne(id: Id, options: CallOptions & { includeVectors?: boolean } = {}): Promise<Memory> {
    const response = await this.get([id], options);
    const memory = response.memories[0];
    if (memory === undefined) {
      throw new NotFoundError(Status.NOT_FOUND, `memory ${String(id)} does not exist or was evicted`);
    }
    return memory;
  }

  /** The versions of a fact key, or the lineage of a memory (an id), oldest first. */
  history(subject: Id | Init<typeof FactKeySchema>, options: CallOptions = {}): Promise<HistoryResponse> {
    const choice =
      typeof subject === "bigint" || typeof subject === "number"
        ? ({ case: "memoryId", value: toId(subject, "subject") } as const)
        : ({ case: "factKey", value: subject } as const);
    return this.unary(MemoryService.method.history, { subject: choice }, options);
  }

  /**
   * What the agent believes about `entity` now (namespace default "default"): one belief per attribute with
   * a current value, keyed or read from prose (`readFromText`), each with the memory holding it (validFrom,
   * source, confidence), open doubts (`possiblyOutdatedBy`), other current values and the `historyKey` to pass
   * to {@link history}. An unknown entity has no beliefs (not an error). `asOf` (world time) answers with the
   * values held then: a version superseded since counts, one that became true later does not; the response's
   * `asOf` says which instant it answers for.
   */
  beliefs(entity: string, options: BeliefsOptions = {}): Promise<BeliefsResponse> {
    return this.unary(
      MemoryService.method.beliefs,
      { entity, namespace: options.namespace, asOf: toTimestamp(options.asOf) },
      options,
    );
  }

  /**
   * The entities of a namespace, most recently changed first, with their counts and last change: `query` keeps
   * the ids that contain it (any case), `limit` is 1 to the sidecar's max_k (default 100); `totalCount` says how
   * many matched.
   */
  listEntities(
    options: CallOptions & { namespace?: string; query?: string; limit?: number } = {},
  ): Promise<ListEntitiesResponse> {
    const { namespace, query, limit } = options;
    return this.unary(MemoryService.method.listEntities, { namespace, query, limit }, options);
  }

  /** Counts, index status, the last change-log sequence and the last sweeps. */
  stats(options: CallOptions = {}): Promise<GetStatsResponse> {
    return this.unary(MemoryService.method.getStats, {}, options);
  }

  /** The governance policy in force. */
  async getPolicy(options: CallOptions = {}): Promise<Policy> {
    const response = await this.unary(MemoryService.method.getPolicy, {}, options);
    return response.policy ?? create(PolicySchema);
  }

  // --- streams -------------------------------------------------------------------------------

  /**
   * Stream change-log events with a sequence above `afterSequence`, then live ones, as an async
   * iterator. No deadline unless `timeoutMs` is given (then it ends with DeadlineExceededError).
   * Stop it with `cancel()`, an AbortSignal, or `break` in a `for await` loop.
   */
  watch(options: WatchOptions = {}): WatchStream {
    const controller = new AbortController();
    const detach = onAbort(options.signal, () => controller.abort());
    const iterator = this.watchEvents(options, controller.signal);
    const stream: WatchStream = {
      next: () => iterator.next(),
      return: async (value?: unknown) => {
        controller.abort();
        detach();
        return iterator.return(value as undefined);
      },
      throw: (error?: unknown) => iterator.throw(error),
      cancel: () => {
        controller.abort();
        detach();
      },
      [Symbol.asyncIterator]() {
        return stream;
      },
    };
    return stream;
  }

  private async *watchEvents(options: WatchOptions, signal: AbortSignal): AsyncGenerator<ChangeEvent, void, undefined> {
    const method = MemoryService.method.watch;
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + checkTimeout(options.timeoutMs);
    const types = options.types === undefined ? [] : Array.from(options.types);
    const maxAttempts = options.maxAttempts ?? WATCH_MAX_ATTEMPTS;
    let after = options.afterSequence === undefined ? undefined : toId(options.afterSequence, "afterSequence");
    if (options.resume && after === undefined) {
      // A reconnect needs a place to resume from: the log's end now.
      after = (await this.stats({ signal })).lastSequence;
    }
    let failures = 0;
    while (!signal.aborted) {
      const call = this.channel.makeServerStreamRequest(
        path(method),
        serializer(method.input),
        deserializer(method.output),
        create(method.input, { afterSequence: after, namespace: options.namespace, types }),
        this.metadata(),
        deadline === undefined ? {} : { deadline },
      );
      // The async iterator below sees errors too; this keeps a late CANCELLED from being unhandled.
      call.on("error", () => {});
      const detach = onAbort(signal, () => call.cancel());
      try {
        for await (const response of call as AsyncIterable<MessageShape<typeof method.output>>) {
          if (response.event === undefined) continue;
          after = response.event.sequence;
          failures = 0;
          yield response.event;
        }
        // A Watch never ends by itself: a clean end means the sidecar shut down gracefully.
        if (!options.resume || signal.aborted || failures >= maxAttempts) return;
      } catch (error) {
        if (signal.aborted) return;
        const typed = toMemevoError(error);
        if (!options.resume || !(typed instanceof UnavailableError) || failures >= maxAttempts) throw typed;
      } finally {
        detach();
        call.cancel();
      }
      failures += 1;
      await sleep(backoffMs(failures), signal);
    }
  }

  /**
   * Open the bidirectional Review stream. Send {@link ReviewSession.hello} first, then one
   * {@link ReviewSession.decide} per proposal received; iterate the session for proposals and
   * settled proposal ids. No deadline unless `timeoutMs` is given.
   */
  review(options: CallOptions = {}): ReviewSession {
    const method = MemoryService.method.review;
    const call = this.channel.makeBidiStreamRequest(
      path(method),
      serializer(method.input),
      deserializer(method.output),
      this.metadata(),
      options.timeoutMs === undefined ? {} : { deadline: Date.now() + checkTimeout(options.timeoutMs) },
    );
    return new ReviewSession(call, options.signal);
  }

  // --- plumbing ------------------------------------------------------------------------------

  private metadata(): grpc.Metadata {
    const metadata = new grpc.Metadata({ waitForReady: this.waitForReady });
    if (this.token !== undefined) metadata.set("authorization", `Bearer ${this.token}`);
    return metadata;
  }

  private callOptions(timeoutMs: number): grpc.CallOptions {
    return { deadline: Date.now() + checkTimeout(timeoutMs) };
  }

  private unary<I extends DescMessage, O extends DescMessage>(
    method: Method<I, O>,
    request: MessageInitShape<I>,
    options: CallOptions,
  ): Promise<MessageShape<O>> {
    if (options.signal?.aborted) return Promise.reject(cancelledError());
    const message = create(method.input, request);
    return new Promise((resolve, reject) => {
      let detach = (): void => {};
      const call = this.channel.makeUnaryRequest(
        path(method),
        serializer(method.input),
        deserializer(method.output),
        message,
        this.metadata(),
        this.callOptions(options.timeoutMs ?? this.timeoutMs),
        (error, value) => {
          detach();
          if (error) reject(toMemevoError(error));
          else resolve(value!);
        },
      );
      detach = onAbort(options.signal, () => call.cancel());
    });
  }
}

/**
 * One Review conversation: an async iterator of {@link ReviewResponse}s (proposals to decide, ids of
 * settled proposals) plus methods that send the reviewer's side.
 */
export class ReviewSession implements AsyncIterable<ReviewResponse> {
  private readonly detach: () => void;

  /** @internal */
  constructor(
    private readonly call: grpc.ClientDuplexStream<
      MessageShape<typeof ReviewRequestSchema>,
      MessageShape<typeof MemoryService.method.review.output>
    >,
    signal: AbortSignal | undefined,
  ) {
    call.on("error", () => {});
    this.detach = onAbort(signal, () => call.cancel());
  }

  /** Send the first message: who reviews, and which proposal kinds it takes (default all). */
  hello(reviewer: string, kinds: Iterable<ProposalKind> = []): void {
    this.send({ message: { case: "hello", value: { reviewer, kinds: Array.from(kinds) } } });
  }

  /**
   * Answer one proposal (`{proposalId, verdict, abstractionText, memoryIds, note}`). The sidecar
   * answers with a response whose `message` is `{case: "settledProposalId"}` once it is settled.
   */
  decide(decision: Init<typeof DecisionSchema>): void {
    this.send({ message: { case: "decision", value: create(DecisionSchema, decision) } });
  }

  /** Apply a proposal whole; for a consolidation, `abstractionText` is the abstraction's text. */
  accept(proposalId: string, abstractionText = "", note = ""): void {
    this.decide({ proposalId, verdict: Verdict.ACCEPT, abstractionText, note });
  }

  /** Decline a proposal: its memories stay as they are. */
  reject(proposalId: string, note = ""): void {
    this.decide({ proposalId, verdict: Verdict.REJECT, note });
  }

  /** Apply a proposal to `memoryIds` only (a subset of its memories); an id outside it ends the stream. */
  modify(proposalId: string, memoryIds: Iterable<Id>, abstractionText = "", note = ""): void {
    this.decide({ proposalId, verdict: Verdict.MODIFY, memoryIds: toIds(memoryIds), abstractionText, note });
  }

  /** Send a raw ReviewRequest. */
  send(request: Init<typeof ReviewRequestSchema>): void {
    this.call.write(create(MemoryService.method.review.input, request));
  }

  /** Half-close: no more decisions; proposals already in flight still arrive. */
  end(): void {
    this.call.end();
  }

  /** Abandon the conversation; iteration ends. */
  cancel(): void {
    this.detach();
    this.call.cancel();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ReviewResponse> {
    try {
      for await (const response of this.call as AsyncIterable<ReviewResponse>) yield response;
    } catch (error) {
      const typed = toMemevoError(error);
      if (typed instanceof CancelledError) return;
      throw typed;
    } finally {
      this.detach();
    }
  }
}
