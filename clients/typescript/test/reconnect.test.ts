/**
 * A long-lived client, and a new one, answer within a second or two of their sidecar coming back after
 * a SIGKILL. gRPC's default reconnect backoff (1 s, x1.6 per failed attempt) grows while the sidecar is
 * down, and grpc-js shares it between every channel to one address in the process; the client's own
 * backoff settings cap it at 1 s and give each client its own.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";

import { MemoryClient, UnavailableError, defaultTarget, startSidecar } from "../src/index.js";

const DIM = 8;
/**
 * The sidecar stays dead this long while the old client keeps calling: gRPC's own attempts are then about
 * 26 and 43 s after the crash, so a sidecar ready after 30–36 s waits 5 s or more for the old client.
 */
const DOWN_MS = 30_000;
/** Ready to first answer, at most: the backoff cap is 1 s, the rest is slack for a loaded machine. */
const ANSWER_WITHIN_MS = 3_000;

const vector = new Float32Array(DIM).fill(1);

/** Milliseconds until `client` answers a Recall, calling every 50 ms. */
async function msToFirstAnswer(client: MemoryClient, limitMs = 30_000): Promise<number> {
  const start = Date.now();
  for (;;) {
    try {
      await client.recall(vector, { k: 1, timeoutMs: 2_000 });
      return Date.now() - start;
    } catch (e) {
      if (!(e instanceof UnavailableError) || Date.now() - start > limitMs) throw e;
      await delay(50);
    }
  }
}

test("a long-lived client and a new one answer soon after the sidecar restarts", { timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "memevo-reconnect-"));
  const where = { dataDir: join(dir, "data"), socketPath: join(dir, "memevo.sock"), dimension: DIM };
  let sidecar = await startSidecar(where);
  const old = new MemoryClient(sidecar.unix);
  try {
    await old.remember({ content: "before the crash", vector });
    process.kill(sidecar.pid, "SIGKILL");
    await sidecar.stop();
    const end = Date.now() + DOWN_MS;
    while (Date.now() < end) {
      await assert.rejects(old.recall(vector, { k: 1, timeoutMs: 2_000 }), UnavailableError);
      await delay(50);
    }
    sidecar = await startSidecar(where);
    const fresh = new MemoryClient(sidecar.unix);
    try {
      const [oldMs, freshMs] = await Promise.all([msToFirstAnswer(old), msToFirstAnswer(fresh)]);
      console.log(`first answer after the restart: long-lived client ${oldMs} ms, new client ${freshMs} ms`);
      assert.ok(oldMs <= ANSWER_WITHIN_MS, `the long-lived client first answered ${oldMs} ms after the restart`);
      assert.ok(freshMs <= ANSWER_WITHIN_MS, `a new client first answered ${freshMs} ms after the restart`);
    } finally {
      fresh.close();
    }
    const recalled = await old.recall(vector, { k: 1 });
    assert.deepEqual(recalled.memories.map((m) => m.memory?.content), ["before the crash"]);
  } finally {
    old.close();
    await sidecar.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("without an address a client talks to $MEMEVO_ADDRESS, else memevo serve's default socket", () => {
  const saved = { address: process.env.MEMEVO_ADDRESS, runtime: process.env.XDG_RUNTIME_DIR };
  try {
    process.env.MEMEVO_ADDRESS = "127.0.0.1:7070";
    const named = new MemoryClient();
    named.close();
    assert.equal(named.target, "127.0.0.1:7070");
    delete process.env.MEMEVO_ADDRESS;
    process.env.XDG_RUNTIME_DIR = "/run/user/1234";
    assert.equal(defaultTarget(), `unix:///run/user/1234/memevo-${process.getuid!()}.sock`);
    delete process.env.XDG_RUNTIME_DIR;
    const fallback = new MemoryClient();
    fallback.close();
    assert.equal(fallback.target, `unix:///tmp/memevo-${process.getuid!()}.sock`);
  } finally {
    for (const [name, value] of [["MEMEVO_ADDRESS", saved.address], ["XDG_RUNTIME_DIR", saved.runtime]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
});
