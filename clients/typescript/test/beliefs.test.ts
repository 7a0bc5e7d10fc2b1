/**
 * Beliefs and listEntities against a live sidecar (issue 42, item 1): what the agent believes about an entity
 * now, including a value read from a plain statement that retired a keyed one, and as of a past instant.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { InvalidArgumentError, MemoryClient, MemoryKind, MemorySource, MemoryState, WriteOutcome, startSidecar, type Sidecar } from "../src/index.js";

const DIM = 8;
const NS = "ts-beliefs";

function near(jitter: number): Float32Array {
  const v = new Float32Array(DIM).fill(0.01);
  v[3] = 1;
  v[4] = jitter;
  return v;
}

let sidecar: Sidecar;
let client: MemoryClient;

before(async () => {
  sidecar = await startSidecar({ dimension: DIM });
  client = new MemoryClient(sidecar.unix);
});

after(async () => {
  client?.close();
  if (sidecar !== undefined) assert.equal(await sidecar.stop(), 0);
});

test("an entity's beliefs include a value read from prose, with its history key", async () => {
  const about = { namespace: NS, kind: MemoryKind.FACT, entity: "person:ana" };
  const keyed = await client.remember({
    ...about, content: "Ana works at Shopify.", vector: near(0.1), fact: { attribute: "employer", value: "Shopify" },
    validFrom: new Date(1_000_000),
  });
  const prose = await client.remember({ ...about, content: "These days Ana works at Canva.", vector: near(0.12), validFrom: new Date(2_000_000) });
  assert.equal(prose.outcome, WriteOutcome.SUPERSEDED_PREVIOUS, "perception no longer reads this change: pick a wording it reads");

  const found = await client.beliefs("person:ana", { namespace: NS });
  assert.equal(found.entity, "person:ana");
  assert.equal(found.beliefs.length, 1);
  const belief = found.beliefs[0]!;
  assert.deepEqual([belief.attribute, belief.value, belief.readFromText, belief.versionCount], ["employer", "canva", true, 2n]);
  assert.equal(belief.memory?.id, prose.memory.id);
  assert.equal(belief.memory?.source, MemorySource.AGENT_INFERENCE);
  assert.equal(belief.memory?.validFrom?.seconds, 2_000n);
  assert.deepEqual(belief.possiblyOutdatedBy, []);
  const history = await client.history(belief.historyKey!);
  assert.deepEqual(history.versions.map((v) => v.id), [keyed.memory.id, prose.memory.id]);

  // As of 1 500 s, before the prose statement became true: the keyed value, superseded since.
  const then = await client.beliefs("person:ana", { namespace: NS, asOf: new Date(1_500_000) });
  assert.equal(then.asOf?.seconds, 1_500n);
  assert.deepEqual(
    then.beliefs.map((b) => [b.value, b.readFromText, b.memory?.id, b.memory?.state]),
    [["Shopify", false, keyed.memory.id, MemoryState.OBSOLETE]],
  );
  assert.deepEqual((await client.beliefs("person:ana", { namespace: NS, asOf: new Date(999_000) })).beliefs, []);

  const listed = await client.listEntities({ namespace: NS, query: "ANA" });
  assert.equal(listed.totalCount, 1n);
  const [ana] = listed.entities;
  assert.deepEqual([ana?.entity, ana?.memoryCount, ana?.currentCount, ana?.beliefCount], ["person:ana", 2n, 1n, 1n]);
  assert.ok(ana?.lastChangedAt !== undefined);
  assert.deepEqual((await client.listEntities({ namespace: "ts-beliefs-nobody" })).entities, []);

  const error = await client.beliefs("", { namespace: NS }).then(
    () => assert.fail("expected INVALID_ARGUMENT"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof InvalidArgumentError);
  assert.deepEqual(error.fieldViolations.map((v) => v.field), ["entity"]);
});
