/**
 * A consumer of the packed @memevo/client, as an agent builder would write one: pack-check.sh
 * installs the tarball into a scratch project, compiles this file with tsc against the installed
 * types and runs it against a live sidecar. Exits 1 when an expected effect did not happen.
 */

import {
  FailedPreconditionError,
  MemoryClient,
  MemoryKind,
  MemorySource,
  MemoryState,
  Outcome,
  WriteOutcome,
  startSidecar,
} from "@memevo/client";

const DIMENSION = 8;

/** A vector pointing mostly along one axis: the sidecar runs without an embedder here. */
function vector(axis: number, jitter = 0): Float32Array {
  const v = new Float32Array(DIMENSION).fill(0.01);
  v[axis % DIMENSION] = 1;
  v[(axis + 1) % DIMENSION] = jitter;
  return v;
}

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`pack-check agent: ${what}`);
}

const sidecar = await startSidecar({ dimension: DIMENSION });
const memory = new MemoryClient(sidecar.unix);
let failed = false;
try {
  const drink = (value: string) => ({
    content: `Alice drinks ${value}`,
    vector: vector(0, 0.2),
    kind: MemoryKind.PREFERENCE,
    entity: "user:alice",
    fact: { attribute: "drink", value },
    source: MemorySource.USER_STATEMENT,
  });
  const tea = await memory.remember(drink("green tea"), { requestId: "pack-tea", turn: 1 });
  check(tea.outcome === WriteOutcome.CREATED, `first write outcome ${tea.outcome}`);
  const changed = await memory.supersede(tea.memory.id, drink("black coffee"), { reason: "Alice switched", turn: 2 });
  check(changed.oldMemory?.state === MemoryState.OBSOLETE, "the old preference is OBSOLETE");

  const found = await memory.recall(vector(0, 0.2), { k: 3, filter: { entity: "user:alice" } });
  const top = found.memories[0]?.memory;
  check(top?.content === "Alice drinks black coffee", `recall's best is ${top?.content}`);
  await memory.reportOutcome(found.retrievalId, Outcome.SUCCESS, { note: "served coffee" });

  const context = await memory.buildContext(vector(0, 0.2), { tokenBudget: 200 });
  check(context.text.includes("black coffee") && !context.text.includes("green tea"), `context:\n${context.text}`);

  const refused = await memory.restore(changed.newMemory!.id).then(
    () => undefined,
    (e: unknown) => e,
  );
  check(refused instanceof FailedPreconditionError, `restore of a current memory: ${String(refused)}`);
  console.log(`pack-check agent: recalled "${top?.content}", context of ${context.tokensUsed} tokens`);
} catch (error) {
  console.error(error);
  failed = true;
} finally {
  memory.close();
  if ((await sidecar.stop()) !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
