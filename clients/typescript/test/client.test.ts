/**
 * The TypeScript client against a live sidecar (started here, stopped with SIGTERM at the end).
 *
 * Every RPC has a test below. Consolidation and review run on a second sidecar of their own whose
 * sweeps run only on govern (`--sweep-interval-s 0`), so their counts are exact.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  AllocationMode,
  AlreadyExistsError,
  ChangeEventType,
  DeadlineExceededError,
  ExperimentPhase,
  CancelledError,
  FailedPreconditionError,
  InvalidArgumentError,
  MemevoError,
  MemoryClient,
  MemoryKind,
  MemoryService,
  MemorySource,
  MemoryState,
  NotFoundError,
  Outcome,
  ProposalKind,
  RecallMode,
  STREAM_GROUP_ITEMS,
  Status,
  WriteOutcome,
  decodeVector,
  encodeVector,
  startSidecar,
  type ChangeEvent,
  type Proposal,
  type ReviewResponse,
  type ReviewSession,
  type Sidecar,
} from "../src/index.js";

const DIM = 8;

/** A unit-ish vector pointing mostly along axis `axis` (distinct per axis, never all zeros). */
/** The error a promise rejects with; fails the test when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => assert.fail(`expected a rejection, got ${String(value)}`),
    (e: unknown) => e,
  );
}

function axisVector(axis: number, jitter = 0): Float32Array {
  const v = new Float32Array(DIM).fill(0.01);
  v[axis % DIM] = 1;
  v[(axis + 1) % DIM] = jitter;
  return v;
}

let sidecar: Sidecar;
let client: MemoryClient; // over the unix socket
let tcpClient: MemoryClient; // over 127.0.0.1

before(async () => {
  sidecar = await startSidecar({ dimension: DIM });
  client = new MemoryClient(sidecar.unix);
  tcpClient = new MemoryClient(sidecar.tcp, { timeoutMs: 5_000 });
});

after(async () => {
  client?.close();
  tcpClient?.close();
  if (sidecar !== undefined) assert.equal(await sidecar.stop(), 0, "the sidecar stops cleanly on SIGTERM");
});

describe("vectors", () => {
  test("round-trip as packed little-endian float32", () => {
    const bytes = encodeVector([1.5, -2, 0.25]);
    assert.deepEqual([...bytes.subarray(0, 4)], [0x00, 0x00, 0xc0, 0x3f]); // 1.5f, little-endian
    assert.deepEqual([...decodeVector(bytes)], [1.5, -2, 0.25]);
    assert.equal(decodeVector(new Uint8Array(0)).length, 0);
    assert.throws(() => encodeVector([1, Number.NaN]), TypeError);
    assert.throws(() => decodeVector(new Uint8Array(3)), RangeError);
  });
});

describe("coverage", () => {
  test("every RPC of MemoryService has a MemoryClient method", () => {
    const renamed: Record<string, string> = { getStats: "stats" };
    const missing = Object.keys(MemoryService.method).filter((rpc) => {
      const name = renamed[rpc] ?? rpc;
      return typeof (MemoryClient.prototype as unknown as Record<string, unknown>)[name] !== "function";
    });
    assert.deepEqual(missing, []);
    assert.ok(Object.keys(MemoryService.method).length >= 21);
  });
});

describe("client arguments", () => {
  test("bad targets, timeouts and ids are rejected before any call", () => {
    assert.throws(() => new MemoryClient("unix://relative.sock"), TypeError);
    assert.throws(() => new MemoryClient(""), TypeError);
    assert.throws(() => new MemoryClient("127.0.0.1:1", { timeoutMs: 0 }), RangeError);
    assert.throws(() => client.get(-1), RangeError);
    assert.throws(() => client.get(1.5), RangeError);
  });
});

describe("writes and reads", () => {
  test("remember stores a memory with its fields and is idempotent with a requestId", async () => {
    const input = {
        content: "Alice prefers green tea",
        vector: axisVector(0),
        kind: MemoryKind.PREFERENCE,
        entity: "user:alice",
        fact: { attribute: "drink", value: "green tea" },
        source: MemorySource.USER_STATEMENT,
        tags: ["drinks"],
        metadata: { origin: "ts-test" },
        importance: 7,
        validFrom: new Date("2024-01-02T03:04:05Z"),
      };
    const first = await client.remember(input, { requestId: "ts-remember-1", turn: 3 });
    assert.equal(first.outcome, WriteOutcome.CREATED);
    assert.equal(first.replayed, false);
    assert.ok(first.memory.id > 0n);
    assert.equal(first.memory.kind, MemoryKind.PREFERENCE);
    assert.equal(first.memory.state, MemoryState.ACTIVE);
    assert.equal(first.memory.entity, "user:alice");
    assert.equal(first.memory.fact?.value, "green tea");
    assert.equal(first.memory.turn, 3n);
    assert.equal(first.memory.validFrom?.seconds, BigInt(Date.parse("2024-01-02T03:04:05Z") / 1000));

    // A retry differs only in its turn, which the request's fingerprint leaves out.
    const again = await client.remember(input, { requestId: "ts-remember-1", turn: 4 });
    assert.equal(again.replayed, true);
    assert.equal(again.memory.id, first.memory.id);
    assert.equal(again.memory.turn, 3n);
    const reused = await rejection(client.remember({ content: "another memory", vector: axisVector(0) }, { requestId: "ts-remember-1" }));
    assert.ok(reused instanceof AlreadyExistsError);
    assert.equal(reused.reason, "REQUEST_ID_REUSED");
    assert.deepEqual(
      reused.fieldViolations.map((v) => v.field),
      ["request_id"],
    );
  });

  test("the TCP address serves the same data directory", async () => {
    const stored = await tcpClient.remember({ content: "over tcp", vector: axisVector(5) });
    const got = await client.getOne(stored.memory.id);
    assert.equal(got.content, "over tcp");
  });

  test("a peek recall counts no access and records no retrieval", async () => {
    const stored = await client.remember({ content: "peeked at from ts", vector: axisVector(6), namespace: "ts-peek" });
    const looked = await client.recall(axisVector(6), { k: 1, filter: { namespace: "ts-peek" }, peek: true });
    assert.equal(looked.retrievalId, "");
    assert.equal(looked.memories[0]?.memory?.id, stored.memory!.id);
    assert.equal((await client.getOne(stored.memory!.id)).accessCount, 0n);
    const used = await client.recall(axisVector(6), { k: 1, filter: { namespace: "ts-peek" } });
    assert.ok(used.retrievalId.length > 0);
    assert.equal((await client.getOne(stored.memory!.id)).accessCount, 1n);
  });

  test("recall by vector ranks the nearest first, filters, and returns vectors on request", async () => {
    await client.rememberBatch([
      { content: "Bob deploys with blue-green", vector: axisVector(1), entity: "user:bob", tags: ["ops"] },
      { content: "Bob likes coffee", vector: axisVector(2), entity: "user:bob" },
      { content: "Carol likes coffee", vector: axisVector(2, 0.3), entity: "user:carol" },
    ]);
    const found = await client.recall(axisVector(2), { k: 3, includeVectors: true });
    assert.ok(found.retrievalId.length > 0);
    assert.equal(found.memories[0]?.memory?.content, "Bob likes coffee");
    assert.ok(found.memories[0]!.similarity > 0.99);
    const vector = decodeVector(found.memories[0]!.memory!.vector);
    assert.equal(vector.length, DIM);
    assert.ok(Math.abs(vector[2]! - 1) < 1e-6);

    const carol = await client.recall(axisVector(2), { k: 5, filter: { entity: "user:carol" } });
    assert.deepEqual(
      carol.memories.map((m) => m.memory?.content),
      ["Carol likes coffee"],
    );
    const tagged = await client.recall([0, 1, 0, 0, 0, 0, 0, 0], { filter: { tags: ["ops"] } });
    assert.deepEqual(
      tagged.memories.map((m) => m.memory?.content),
      ["Bob deploys with blue-green"],
    );
  });

  test("rememberBatch keeps input order and is all or nothing", async () => {
    const results = await client.rememberBatch([
      { content: "batch one", vector: axisVector(3) },
      { content: "batch two", vector: axisVector(4) },
    ]);
    assert.deepEqual(
      results.map((r) => r.memory.content),
      ["batch one", "batch two"],
    );
    assert.ok(results[1]!.memory.id > results[0]!.memory.id);

    const before = (await client.stats()).totalCount;
    const error = await client
      .rememberBatch([
        { content: "good", vector: axisVector(3) },
        { content: "bad", vector: [1, 2, 3] },
      ])
      .then(
        () => assert.fail("a batch with a bad item must be rejected"),
        (e: unknown) => e,
      );
    assert.ok(error instanceof InvalidArgumentError);
    assert.deepEqual(
      error.fieldViolations.map((v) => v.field),
      ["memories[1].vector"],
    );
    assert.equal((await client.stats()).totalCount, before, "nothing of the batch was written");
  });

  test("rememberStream sends an async iterable and reports ids and counts", async () => {
    async function* items() {
      for (let i = 0; i < 50; i++) {
        yield { memory: { content: `streamed ${i}`, vector: axisVector(i, 0.5) }, requestId: `ts-stream-${i}` };
      }
    }
    const response = await client.rememberStream(items());
    assert.equal(response.ids.length, 50);
    assert.equal(response.createdCount, 50n);
    assert.equal(response.replayedCount, 0n);

    // Resending with the same request ids writes nothing twice.
    const replay = await client.rememberStream(items());
    assert.equal(replay.replayedCount, 50n);
    assert.deepEqual(replay.ids, response.ids);
  });

  test("rememberStream sends many items per message, split where the turn changes, in order", async () => {
    const total = 2 * STREAM_GROUP_ITEMS + 9;
    const items = Array.from({ length: total }, (_, i) => ({
      memory: { content: `grouped ${i}`, vector: axisVector(i % DIM, 0.3) },
      turn: i < 70 ? 4 : 5,
    }));
    const response = await client.rememberStream(items);
    assert.equal(response.createdCount, BigInt(total));
    const got = await client.get(response.ids);
    assert.deepEqual(
      got.memories.map((m) => m.content),
      items.map((item) => item.memory.content),
    );
    assert.deepEqual(
      got.memories.map((m) => Number(m.turn)),
      items.map((item) => item.turn),
    );
  });

  test("rememberStream stops at a bad item and says how many were committed", async () => {
    const items = [
      { content: "s-ok-1", vector: axisVector(1) },
      { content: "s-ok-2", vector: axisVector(2) },
      { content: "s-bad", vector: new Float32Array(DIM) }, // all zeros: no direction
    ];
    const error = await client.rememberStream(items).then(
      () => assert.fail("expected InvalidArgumentError"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof InvalidArgumentError);
    assert.equal(error.fieldViolations[0]?.field, "[2].memory.vector");
    assert.equal(error.metadata.failed_index, "2");
    assert.ok(["0", "1", "2"].includes(error.metadata.committed_count ?? ""));

    // A long stream stops pulling items once the sidecar has rejected one.
    let pulled = 0;
    async function* endless() {
      for (let i = 0; ; i++) {
        pulled += 1;
        yield i === 5 ? { content: "bad", vector: [1, 2, 3] } : { content: `long ${i}`, vector: axisVector(i, 0.1) };
        if (pulled % 64 === 0) await new Promise((r) => setTimeout(r, 1));
      }
    }
    await assert.rejects(client.rememberStream(endless()), InvalidArgumentError);
    assert.ok(pulled < 100_000, `pulled ${pulled} items after the stream failed`);
  });

  test("get returns memories in request order and lists the missing ids", async () => {
    const [a, b] = await client.rememberBatch([
      { content: "get a", vector: axisVector(6) },
      { content: "get b", vector: axisVector(7) },
    ]);
    const got = await client.get([b!.memory.id, 999_999n, a!.memory.id]);
    assert.deepEqual(
      got.memories.map((m) => m.content),
      ["get b", "get a"],
    );
    assert.deepEqual(got.missingIds, [999_999n]);
    await assert.rejects(client.getOne(999_999), NotFoundError);
  });

  test("forget deletes, or keeps history as OBSOLETE", async () => {
    const [gone, kept] = await client.rememberBatch([
      { content: "forget me", vector: axisVector(1, 0.2) },
      { content: "keep me as history", vector: axisVector(3, 0.2) },
    ]);
    const deleted = await client.forget(gone!.memory.id, { reason: "test", requestId: "ts-forget-1" });
    assert.deepEqual(deleted.forgottenIds, [gone!.memory.id]);
    assert.deepEqual((await client.get(gone!.memory.id)).missingIds, [gone!.memory.id]);

    await client.forget([kept!.memory.id], { keepHistory: true });
    const obsolete = await client.getOne(kept!.memory.id);
    assert.equal(obsolete.state, MemoryState.OBSOLETE);

    const missing = await client.forget([888_888n]);
    assert.deepEqual(missing.missingIds, [888_888n]);
  });

  test("stats reports counts, dimension, embedder and the last sequence", async () => {
    const stats = await client.stats();
    assert.equal(stats.dimension, DIM);
    assert.equal(stats.embedder, "none");
    assert.ok(stats.totalCount > 0n);
    assert.ok(stats.lastSequence > 0n);
    assert.ok(stats.counts.some((c) => c.state === MemoryState.ACTIVE && c.count > 0n));
  });
});

describe("watch", () => {
  test("replays the log from a sequence, in order", async () => {
    const stored = await client.remember({ content: "watched", vector: axisVector(4, 0.7) });
    const stream = client.watch({ afterSequence: 0 });
    const seen: ChangeEvent[] = [];
    for await (const event of stream) {
      seen.push(event);
      if (event.memoryId === stored.memory.id && event.type === ChangeEventType.CREATED) break;
    }
    assert.ok(seen.length > 1);
    assert.equal(seen[0]!.sequence, 1n);
    for (let i = 1; i < seen.length; i++) assert.equal(seen[i]!.sequence, seen[i - 1]!.sequence + 1n);
  });

  test("delivers live events and ends on cancel()", async () => {
    const stream = client.watch({ types: [ChangeEventType.CREATED] });
    const next = stream.next(); // subscribes before the write below
    await new Promise((r) => setTimeout(r, 200));
    const stored = await client.remember({ content: "live event", vector: axisVector(2, 0.9) });
    const first = await next;
    assert.equal(first.done, false);
    assert.equal(first.value?.memoryId, stored.memory.id);
    assert.equal(first.value?.type, ChangeEventType.CREATED);
    stream.cancel();
    assert.equal((await stream.next()).done, true);
  });

  test("an AbortSignal ends the stream", async () => {
    const controller = new AbortController();
    const stream = client.watch({ signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    let count = 0;
    for await (const _ of stream) count += 1;
    assert.equal(count, 0);
  });

  test("resume: true reconnects across a sidecar restart, losing and repeating nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "memevo-resume-"));
    const options = { dimension: DIM, dataDir: join(dir, "data"), socketPath: join(dir, "memevo.sock") };
    let first: Sidecar | undefined = await startSidecar(options);
    let second: Sidecar | undefined;
    const own = new MemoryClient(first.unix);
    const stream = own.watch({ afterSequence: 0, resume: true, types: [ChangeEventType.CREATED] });
    try {
      await own.remember({ content: "before the restart", vector: axisVector(1) });
      const a = await stream.next();
      assert.equal(a.value?.sequence, 1n);
      assert.equal(await first.stop(), 0);
      first = undefined;
      second = await startSidecar(options); // same data directory, same socket
      await own.remember({ content: "after the restart", vector: axisVector(2) });
      const b = await stream.next();
      assert.equal(b.done, false);
      assert.ok(b.value!.sequence > a.value!.sequence);
      assert.equal((await own.getOne(b.value!.memoryId)).content, "after the restart");
    } finally {
      stream.cancel();
      own.close();
      await first?.stop();
      await second?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a stream deadline ends with DeadlineExceededError (retryable)", async () => {
    const stream = client.watch({ timeoutMs: 200 });
    const error = await stream.next().then(
      () => assert.fail("expected a deadline error"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof DeadlineExceededError);
    assert.equal(error.retryable, true);
  });
});

describe("errors", () => {
  test("a wrong vector size is InvalidArgumentError with a field violation and ErrorInfo", async () => {
    const error = await client.remember({ content: "short", vector: [1, 2, 3] }).then(
      () => assert.fail("expected INVALID_ARGUMENT"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof InvalidArgumentError);
    assert.ok(error instanceof MemevoError);
    assert.equal(error.code, Status.INVALID_ARGUMENT);
    assert.equal(error.codeName, "INVALID_ARGUMENT");
    assert.equal(error.retryable, false);
    assert.equal(error.fieldViolations.length, 1);
    assert.equal(error.fieldViolations[0]!.field, "memory.vector");
    assert.match(error.fieldViolations[0]!.description, /dimension is 8/);
    assert.equal(error.reason, "INVALID_ARGUMENT");
    assert.equal(error.domain, "memevo.dev");
  });

  test("a text query without an embedder names query_vector", async () => {
    const error = await client.recall("no embedder here").then(
      () => assert.fail("expected INVALID_ARGUMENT"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof InvalidArgumentError);
    assert.equal(error.fieldViolations[0]?.field, "query_vector");
  });

  test("an already-aborted signal rejects with CancelledError without a call", async () => {
    await assert.rejects(client.stats({ signal: AbortSignal.abort() }), CancelledError);
  });

  test("an unreachable sidecar is UnavailableError (retryable)", async () => {
    const nowhere = new MemoryClient("unix:///nonexistent/memevo.sock", { timeoutMs: 2_000 });
    try {
      const error = await nowhere.stats().then(
        () => assert.fail("expected UNAVAILABLE"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof MemevoError);
      assert.equal(error.code, Status.UNAVAILABLE);
      assert.equal(error.retryable, true);
    } finally {
      nowhere.close();
    }
  });
});

describe("lifecycle and feedback", () => {
  const fact = (value: string) => ({
    content: `Dana's editor is ${value}`,
    vector: axisVector(3, 0.4),
    kind: MemoryKind.FACT,
    entity: "user:dana",
    fact: { attribute: "editor", value },
  });

  test("supersede makes the old memory OBSOLETE and links it to its replacement", async () => {
    const old = await client.remember(fact("vim"));
    const response = await client.supersede(old.memory.id, fact("helix"), {
      reason: "user switched",
      requestId: "ts-supersede-1",
    });
    assert.equal(response.oldMemory?.state, MemoryState.OBSOLETE);
    assert.equal(response.newMemory?.state, MemoryState.ACTIVE);
    assert.equal(response.oldMemory?.supersededBy, response.newMemory?.id);

    const byKey = await client.history({ entity: "user:dana", attribute: "editor" });
    const ids = byKey.versions.map((m) => m.id);
    const [i, j] = [ids.indexOf(old.memory.id), ids.indexOf(response.newMemory!.id)];
    assert.ok(i >= 0 && j > i, `fact-key history ${ids.join(",")}: old before new`);
    assert.ok(byKey.events.length > 0, "history carries change-log events");
    const lineage = await client.history(old.memory.id);
    assert.equal(lineage.versions.at(-1)?.id, response.newMemory?.id);
  });

  test("reportOutcome credits the memories of a retrieval", async () => {
    await client.remember({ content: "use the staging cluster first", vector: axisVector(6, 0.6) });
    const found = await client.recall(axisVector(6, 0.6), { k: 2 });
    const response = await client.reportOutcome(found.retrievalId, Outcome.SUCCESS, {
      note: "worked",
      requestId: "ts-outcome-1",
    });
    assert.ok(response.updatedCount > 0n);
    await assert.rejects(client.reportOutcome("no-such-retrieval", Outcome.FAILURE), NotFoundError);
  });

  test("getPolicy and updatePolicy read and replace the policy", async () => {
    const policy = await client.getPolicy();
    assert.ok(policy.name.length > 0);
    const updated = await client.updatePolicy({ ...policy, name: "ts-test-arm" }, { requestId: "ts-policy-1" });
    assert.equal(updated.name, "ts-test-arm");
    assert.equal((await client.getPolicy()).name, "ts-test-arm");
    const error = await client.updatePolicy({ ...policy, softConflictSimilarity: 2 }).then(
      () => assert.fail("expected INVALID_ARGUMENT"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof InvalidArgumentError);
    assert.ok(error.fieldViolations.some((v) => v.field.endsWith("soft_conflict_similarity")));
  });

  test("declareFramework makes a new framework version current", async () => {
    const before = (await client.stats()).frameworkVersion;
    const response = await client.declareFramework("ts-planner-v2", {
      description: "new planner",
      requestId: "ts-framework-1",
    });
    assert.equal(response.previousVersion, before);
    assert.equal((await client.stats()).frameworkVersion, "ts-planner-v2");
  });
});

describe("context and governance", () => {
  test("buildContext groups current memories with their hints within the budget", async () => {
    const namespace = "ts-context";
    const preference = (value: string, at: number) => ({
      content: `Erin prefers ${value} for meetings`,
      vector: axisVector(7, 0.2),
      namespace,
      kind: MemoryKind.PREFERENCE,
      entity: "user:erin",
      fact: { attribute: "meetings", value },
      validFrom: new Date(at * 1000),
    });
    const old = await client.remember(preference("mornings", 1_000));
    const current = await client.remember(preference("afternoons", 2_000));
    await client.remember({
      content: "Book the small room for one-to-ones",
      vector: axisVector(7, 0.3),
      namespace,
      kind: MemoryKind.STRATEGY,
    });
    const context = await client.buildContext(axisVector(7), { tokenBudget: 300, filter: { namespace } });
    const hints = new Map(context.items.map((item) => [item.memory?.content, item.hint]));
    assert.equal(hints.get("Erin prefers afternoons for meetings"), "current");
    assert.ok(!hints.has("Erin prefers mornings for meetings"), "the superseded value stays out");
    assert.deepEqual(
      context.items.map((item) => item.group),
      ["facts", "strategies"],
    );
    assert.ok(context.tokensUsed <= 300);
    assert.match(context.text, /## Facts\n- Erin prefers afternoons for meetings \(current\)/);
    assert.ok(context.retrievalId.length > 0);
    const history = await client.buildContext(axisVector(7), {
      tokenBudget: 300,
      filter: { namespace },
      mode: RecallMode.HISTORY,
      language: "zh",
    });
    const superseded = history.items.find((item) => item.memory?.id === old.memory.id);
    assert.equal(superseded?.hint, `历史参考——情况可能已经变化；已被记忆 ${current.memory.id} 取代`);
    const tiny = await client.buildContext(axisVector(7), { tokenBudget: 1, filter: { namespace } });
    assert.equal(tiny.items.length, 0);
    const updated = await client.reportOutcome(context.retrievalId, Outcome.SUCCESS);
    assert.equal(updated.updatedCount, BigInt(context.items.length));
  });

  test("govern sweeps on demand and stats list the sweep", async () => {
    const { sweep, consolidation } = await client.govern({ dryRun: true });
    assert.ok(sweep !== undefined);
    assert.ok(sweep.evaluatedCount > 0n);
    assert.match(sweep.trigger, /dry run/);
    assert.equal(consolidation, undefined, "a dry run runs no consolidation pass");
    const stats = await client.stats();
    assert.ok(stats.recentSweeps.length >= 1);
  });
});

/** `count` unit vectors around one direction near `axis` (pairwise cosine above 0.99), the same for the same seed. */
function nearDuplicates(count: number, axis: number, seed: number): Float32Array[] {
  let state = seed;
  const noise = (): number => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31; // a fixed LCG: the same vectors every run
    return (state / 2 ** 31 - 0.5) * 0.04;
  };
  const base = axisVector(axis, 0.3);
  return Array.from({ length: count }, () => {
    const v = base.map((x) => x + noise());
    const norm = Math.hypot(...v);
    return v.map((x) => x / norm);
  });
}

describe("consolidation and review", () => {
  const namespace = "ts-review";
  let own: Sidecar;
  let memory: MemoryClient;
  let session: ReviewSession | undefined;
  let responses: AsyncIterator<ReviewResponse>;
  let waiting: bigint[] = [];

  before(async () => {
    own = await startSidecar({ dimension: DIM, args: ["--sweep-interval-s", "0"] });
    memory = new MemoryClient(own.unix);
  });

  after(async () => {
    session?.cancel();
    memory?.close();
    if (own !== undefined) assert.equal(await own.stop(), 0, "the second sidecar stops cleanly");
  });

  /** Store one STRATEGY per vector with task signature `signature` and distinct contents; resolves with the ids. */
  async function rememberStrategies(vectors: Float32Array[], signature: string): Promise<bigint[]> {
    const written = await memory.rememberBatch(
      vectors.map((vector, i) => ({
        content: `To ${signature}, run the migration first, then restart the workers (attempt ${i}).`,
        vector,
        namespace,
        kind: MemoryKind.STRATEGY,
        taskSignature: signature,
      })),
    );
    return written.map((w) => w.memory.id);
  }

  async function states(ids: bigint[]): Promise<MemoryState[]> {
    const found = new Map((await memory.get(ids)).memories.map((m) => [m.id, m.state]));
    return ids.map((id) => found.get(id) ?? MemoryState.EVICTED);
  }

  /** Poll `condition` until it holds; fail naming `what` if it still does not after 30 s. */
  async function waitFor(what: string, condition: () => Promise<boolean>): Promise<void> {
    const giveUp = Date.now() + 30_000;
    while (!(await condition())) {
      if (Date.now() > giveUp) assert.fail(`${what}: still not true after 30 s`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  async function next(): Promise<ReviewResponse> {
    const { value, done } = await responses.next();
    assert.ok(!done, "the review stream ended");
    return value;
  }

  async function nextProposal(): Promise<Proposal> {
    for (;;) {
      const response = await next();
      if (response.message.case === "proposal") return response.message.value;
    }
  }

  async function nextSettlement(): Promise<string> {
    const response = await next();
    assert.equal(response.message.case, "settledProposalId", `got ${response.message.case}, want a settlement`);
    return response.message.value as string;
  }

  const sortedIds = (ids: Iterable<bigint>): bigint[] => [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

  test("govern reports sweep and consolidation stats; without a reviewer the proposal waits", { timeout: 60_000 }, async () => {
    waiting = sortedIds(await rememberStrategies(nearDuplicates(5, 1, 1), "triage-alerts"));
    const dry = await memory.govern({ dryRun: true });
    assert.ok(dry.sweep !== undefined && dry.sweep.evaluatedCount >= 5n);
    assert.equal(dry.consolidation, undefined);
    assert.equal((await memory.stats()).review?.openConsolidations, 0n, "a dry run opens no proposal");

    const { sweep, consolidation } = await memory.govern();
    assert.ok(sweep !== undefined && sweep.evaluatedCount >= 5n && sweep.trigger.length > 0);
    assert.ok(consolidation !== undefined);
    assert.ok(consolidation.seedsExamined >= 5n);
    assert.equal(consolidation.groupsFound, 1n);
    assert.equal(consolidation.proposalsOpened, 1n);
    assert.equal(consolidation.consolidatedCount, 0n, "the default policy waits for a reviewer");
    assert.deepEqual(await states(waiting), Array(5).fill(MemoryState.ACTIVE));
    assert.equal((await memory.stats()).review?.openConsolidations, 1n);
    assert.equal((await memory.govern()).consolidation?.proposalsOpened, 0n, "no second proposal for an open group");
  });

  test("a reviewer is offered the waiting proposal and modifies it, then accepts a new one", { timeout: 60_000 }, async () => {
    session = memory.review({ timeoutMs: 55_000 });
    responses = session[Symbol.asyncIterator]();
    session.hello("ts-test", [ProposalKind.CONSOLIDATE]);

    const offered = await nextProposal();
    assert.equal(offered.kind, ProposalKind.CONSOLIDATE);
    assert.deepEqual(sortedIds(offered.memories.map((m) => m.id)), waiting);
    session.modify(offered.id, waiting.slice(0, 3), "Triage alerts by severity.", "only the first three");
    assert.equal(await nextSettlement(), offered.id);
    const partly = [...Array(3).fill(MemoryState.CONSOLIDATED), ...Array(2).fill(MemoryState.ACTIVE)];
    await waitFor("the modified subset consolidated", async () => {
      const now = await states(waiting);
      return now.every((state, i) => state === partly[i]);
    });
    // A late decision on a settled proposal changes nothing and is answered with the settlement.
    session.reject(offered.id, "changed my mind");
    assert.equal(await nextSettlement(), offered.id);
    assert.deepEqual(await states(waiting), partly);
    await waitFor("attached, nothing open", async () => {
      const review = (await memory.stats()).review;
      return review?.reviewers === 1 && review.openConsolidations === 0n;
    });

    const vectors = nearDuplicates(6, 5, 2);
    const members = sortedIds(await rememberStrategies(vectors, "deploy-service"));
    const reported = await memory.reportOutcome("", Outcome.SUCCESS, { usedMemoryIds: members });
    assert.equal(reported.updatedCount, BigInt(members.length));
    const passed = (await memory.govern()).consolidation;
    assert.equal(passed?.groupsFound, 1n);
    assert.equal(passed?.proposalsOpened, 1n);
    const proposal = await nextProposal();
    assert.deepEqual(sortedIds(proposal.memories.map((m) => m.id)), members);
    assert.ok(proposal.memories.some((m) => m.content === proposal.suggestedText), "an extractive suggestion");
    assert.ok(proposal.reason.length > 0 && proposal.deadline !== undefined);

    const text = "Deploys succeed when migrations run before the workers restart.";
    session.accept(proposal.id, text, "merged by the ts test");
    assert.equal(await nextSettlement(), proposal.id);
    await waitFor("members consolidated", async () =>
      (await states(members)).every((s) => s === MemoryState.CONSOLIDATED),
    );

    const found = await memory.recall(vectors[0]!, { k: 10, filter: { namespace } });
    const top = found.memories[0];
    assert.equal(top?.memory?.kind, MemoryKind.ABSTRACTION);
    assert.equal(top.memory.content, text);
    assert.deepEqual(sortedIds(top.memory.members), members);
    assert.equal(top.memory.successes, members.length);
    assert.equal(top.hint, `pattern distilled from ${members.length} successful experiences`);
    assert.ok(!found.memories.some((hit) => members.includes(hit.memory!.id)), "members are not recalled as current");

    for (const attempt of ["first", "retry"]) {
      const undone = await memory.unconsolidate(top.memory.id, { requestId: "ts-undo-1" });
      assert.deepEqual(sortedIds(undone.restoredIds), members, `${attempt} unconsolidate`);
    }
    assert.deepEqual(await states(members), Array(members.length).fill(MemoryState.ACTIVE));
    assert.deepEqual(await states([top.memory.id]), [MemoryState.OBSOLETE]);
    await assert.rejects(memory.unconsolidate(members[0]!), FailedPreconditionError);

    session.end();
    session.cancel();
    session = undefined;
    await waitFor("detached", async () => (await memory.stats()).review?.reviewers === 0);
  });
});

describe("unconsolidate errors", () => {
  test("no id is INVALID_ARGUMENT naming the field; an unknown id is NOT_FOUND", async () => {
    const error = await client.unconsolidate(0).then(
      () => assert.fail("expected INVALID_ARGUMENT"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof InvalidArgumentError);
    assert.deepEqual(
      error.fieldViolations.map((v) => v.field),
      ["abstraction_id"],
    );
    await assert.rejects(client.unconsolidate(2n ** 40n), NotFoundError);
  });
});

describe("restore", () => {
  test("restore undoes a supersession: ACTIVE again, no successor, recalled as current", async () => {
    const old = await client.remember({ content: "restore: the payments runbook, first edition", vector: axisVector(5, 0.2) });
    const replacement = await client.remember({ content: "restore: a dead-letter queue for failed refunds", vector: axisVector(2, 0.9) });
    assert.equal(old.outcome, WriteOutcome.CREATED);
    assert.equal(replacement.outcome, WriteOutcome.CREATED);
    const oldId = old.memory.id;
    const recalled = async () => (await client.recall(axisVector(5, 0.2), { k: 5 })).memories.map((m) => m.memory?.id);
    await client.supersede(oldId, replacement.memory.id, { reason: "read as the same slot" });
    assert.ok(!(await recalled()).includes(oldId), "a superseded memory is not current");

    const restored = await client.restore(oldId, { reason: "not the same slot", requestId: "ts-restore-1" });
    assert.equal(restored.id, oldId);
    assert.equal(restored.state, MemoryState.ACTIVE);
    assert.equal(restored.supersededBy, 0n);
    assert.equal(restored.validTo, undefined);
    const successor = await client.getOne(replacement.memory.id);
    assert.equal(successor.state, MemoryState.ACTIVE);
    assert.ok(!successor.supersedes.includes(oldId), "the successor no longer lists the restored memory");
    assert.ok((await recalled()).includes(oldId), "the restored memory is recalled as current");

    const again = await client.restore(oldId, { reason: "not the same slot", requestId: "ts-restore-1" });
    assert.equal(again.id, oldId);
    const twice = await rejection(client.restore(oldId));
    assert.ok(twice instanceof FailedPreconditionError);
    assert.equal(twice.reason, "NOT_RETIRED");
  });

  test("restore refuses a memory nothing replaced, a fact whose key is held, no id and an unknown id", async () => {
    const plain = await client.remember({ content: "restore: nothing replaced this", vector: axisVector(7, 0.3) });
    const active = await rejection(client.restore(plain.memory.id));
    assert.ok(active instanceof FailedPreconditionError);
    assert.equal(active.reason, "NOT_RETIRED");

    const fact = (value: string) => ({
      content: `Noor's shell is ${value}`,
      vector: axisVector(4, 0.5),
      kind: MemoryKind.FACT,
      entity: "user:noor",
      fact: { attribute: "shell", value },
    });
    const bash = await client.remember(fact("bash"));
    await client.supersede(bash.memory.id, fact("fish"));
    const held = await rejection(client.restore(bash.memory.id));
    assert.ok(held instanceof FailedPreconditionError);
    assert.equal(held.reason, "KEY_HELD");

    const none = await rejection(client.restore(0));
    assert.ok(none instanceof InvalidArgumentError);
    assert.deepEqual(
      none.fieldViolations.map((v) => v.field),
      ["memory_id"],
    );
    await assert.rejects(client.restore(2n ** 62n), NotFoundError);
  });
});

describe("experiments", () => {
  test("setExperiment splits retrievals between arms, promoteArm makes one the policy", async () => {
    const policy = await client.getPolicy();
    const arm = (name: string) => ({ name, policy: { ...policy, name } });
    await client.remember({ content: "experiment: retry the flaky upload once", vector: axisVector(1, 0.8) });

    const running = await client.setExperiment(
      { name: "ts-exp", arms: [arm("ts-control"), arm("ts-fresh")] },
      { requestId: "ts-experiment-1" },
    );
    assert.equal(running.name, "ts-exp");
    assert.deepEqual(
      running.arms.map((a) => a.name),
      ["ts-control", "ts-fresh"],
    );

    // Every retrieval is ranked by one arm; an outcome counts for that arm.
    const counted = new Map<string, bigint>();
    let reported = "";
    for (let i = 0; i < 4; i++) {
      const found = await client.recall(axisVector(1, 0.8), { k: 3 });
      assert.ok(["ts-control", "ts-fresh"].includes(found.arm), `ranked by arm ${found.arm}`);
      counted.set(found.arm, (counted.get(found.arm) ?? 0n) + 1n);
      if (reported === "") {
        reported = found.arm;
        await client.reportOutcome(found.retrievalId, Outcome.SUCCESS);
      }
    }
    const stats = (await client.stats()).experiment;
    assert.equal(stats?.name, "ts-exp");
    assert.deepEqual(
      stats.arms.map((a) => [a.name, a.share, a.retrievalCount, a.outcomeCount]),
      ["ts-control", "ts-fresh"].map((name) => [name, 0.5, counted.get(name) ?? 0n, name === reported ? 1n : 0n]),
    );

    const invalid = await rejection(client.setExperiment({ name: "ts-bad", arms: [arm("twice"), arm("twice")] }));
    assert.ok(invalid instanceof InvalidArgumentError);
    assert.deepEqual(
      invalid.fieldViolations.map((v) => v.field),
      ["experiment.arms[1].name"],
    );
    assert.equal((await client.stats()).experiment?.name, "ts-exp", "a refused experiment changes nothing");

    const unknown = await rejection(client.promoteArm("no-such-arm"));
    assert.ok(unknown instanceof NotFoundError);
    assert.equal(unknown.reason, "UNKNOWN_ARM");
    const promoted = await client.promoteArm("ts-fresh", { requestId: "ts-promote-1" });
    assert.equal(promoted.policy?.name, "ts-fresh");
    assert.equal(promoted.finalStats?.name, "ts-exp");
    assert.equal(promoted.finalStats?.arms.length, 2);
    const again = await client.promoteArm("ts-fresh", { requestId: "ts-promote-1" });
    assert.equal(again.policy?.name, "ts-fresh");
    assert.equal((await client.getPolicy()).name, "ts-fresh");
    assert.equal((await client.stats()).experiment, undefined);
    assert.equal((await client.recall(axisVector(1, 0.8), { k: 3 })).arm, "");

    // No arms ends an experiment.
    await client.setExperiment({ arms: [arm("a"), arm("b")] });
    assert.equal((await client.stats()).experiment?.arms.length, 2);
    const ended = await client.setExperiment();
    assert.equal(ended.arms.length, 0);
    assert.equal((await client.stats()).experiment, undefined);
  });

  test("setExperiment takes adaptive settings: Thompson allocation shows in stats, bad ones name the field", async () => {
    const policy = await client.getPolicy();
    const arm = (name: string) => ({ name, policy: { ...policy, name } });
    const running = await client.setExperiment({
      name: "ts-adaptive",
      arms: [arm("ts-a"), arm("ts-b")],
      adaptive: { allocation: AllocationMode.THOMPSON, floorShare: 0.1, snapshotOutcomes: 5 },
    });
    assert.equal(running.adaptive?.allocation, AllocationMode.THOMPSON);
    const stats = (await client.stats()).experiment;
    assert.equal(stats?.allocation, AllocationMode.THOMPSON);
    assert.equal(stats?.phase, ExperimentPhase.RUNNING);
    assert.equal(stats?.controlArm, "ts-a");
    assert.deepEqual(
      stats?.arms.map((a) => [a.share, a.probabilityBest]),
      [
        [0.5, 0.5],
        [0.5, 0.5],
      ],
    );
    const invalid = await rejection(
      client.setExperiment({
        name: "ts-adaptive-bad",
        arms: [arm("ts-a"), arm("ts-b")],
        adaptive: { allocation: AllocationMode.THOMPSON, promoteProbability: 0.99 },
      }),
    );
    assert.ok(invalid instanceof InvalidArgumentError);
    assert.deepEqual(
      invalid.fieldViolations.map((v) => v.field),
      ["experiment.adaptive.tunable_parameters"],
    );
    await client.setExperiment();
  });
});
