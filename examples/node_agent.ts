/**
 * A small agent loop against a memevo sidecar that this script starts (and stops).
 *
 * Run it with one command from the repository root (after `pip install -e '.[test]'`):
 *
 *     npm --prefix clients/typescript ci && npm --prefix clients/typescript run example
 *
 * The "LLM" is a scripted stand-in: each turn has a task and what the agent learns from it.
 * The loop is:  task -> recall memories -> build a context -> act -> report the outcome -> remember
 * what was learned, while a Watch prints the sidecar's change log as it happens. It shows a
 * preference change (the new value supersedes the old one, which drops out of recall but stays
 * in the fact's history) and the reading hints the sidecar attaches to each memory. When
 * BuildContext is not built yet, the context is assembled from Recall's hints instead.
 * Exits non-zero if the preference change did not take.
 */

import {
  ChangeEventType,
  MemoryClient,
  MemoryKind,
  MemorySource,
  MemoryState,
  Outcome,
  UnimplementedError,
  WriteOutcome,
  startSidecar,
  type ChangeEvent,
  type RecallResponse,
} from "../clients/typescript/src/index.js";

interface Turn {
  task: string;
  /** What the scripted "LLM" concludes in this turn. */
  learned: { text: string; kind: MemoryKind; attribute?: string; value?: string; source: MemorySource }[];
  /** Whether the scripted action succeeded (reported as outcome feedback). */
  succeeded: boolean;
}

const USER = "user:alice";

const SCRIPT: Turn[] = [
  {
    task: "Alice introduces herself and asks for a script to rename her photos.",
    learned: [
      { text: "Alice prefers Python for small scripts.", kind: MemoryKind.PREFERENCE, attribute: "script_language", value: "Python", source: MemorySource.USER_STATEMENT },
      { text: "Alice keeps her photos in ~/Pictures/2024.", kind: MemoryKind.FACT, attribute: "photo_folder", value: "~/Pictures/2024", source: MemorySource.USER_STATEMENT },
    ],
    succeeded: true,
  },
  {
    task: "Write a script that resizes Alice's photos.",
    learned: [
      { text: "Resizing photos in place worked when done with a dry run first.", kind: MemoryKind.STRATEGY, source: MemorySource.REFLECTION },
    ],
    succeeded: true,
  },
  {
    task: "Alice says she moved to Go and wants all new scripts in Go.",
    learned: [
      { text: "Alice now prefers Go for small scripts.", kind: MemoryKind.PREFERENCE, attribute: "script_language", value: "Go", source: MemorySource.USER_STATEMENT },
    ],
    succeeded: true,
  },
  {
    task: "Write a script that backs up Alice's photos.",
    learned: [],
    succeeded: true,
  },
];

function show(label: string, found: RecallResponse): void {
  console.log(`  ${label}:`);
  for (const hit of found.memories) {
    console.log(`    - ${hit.memory?.content}  [${hit.hint}; similarity ${hit.similarity.toFixed(2)}]`);
  }
}

/** The scripted stand-in for the LLM: it writes scripts in the language the context names. */
function act(task: string, context: string): string {
  if (!task.startsWith("Write")) return "noted";
  const language = /prefers (\w+)/.exec(context)?.[1] ?? "Python";
  return `wrote it in ${language}`;
}

async function main(): Promise<void> {
  const sidecar = await startSidecar({ embedder: "local" });
  const memory = new MemoryClient(sidecar.unix);
  const events: ChangeEvent[] = [];
  const watch = memory.watch({ afterSequence: 0 });
  const watching = (async () => {
    for await (const event of watch) {
      events.push(event);
      const type = ChangeEventType[event.type];
      console.log(`  [log #${event.sequence}] ${type} memory ${event.memoryId}${event.reason ? ` (${event.reason})` : ""}`);
    }
  })();

  let failed = false;
  try {
    for (const [index, step] of SCRIPT.entries()) {
      const turn = index + 1;
      console.log(`\nturn ${turn}: ${step.task}`);

      // 1. Recall what is current about the user and the task.
      const found = await memory.recall(step.task, { k: 4, filter: { entity: USER }, turn });
      show("recalled", found);

      // 2. A context for the prompt: BuildContext when the sidecar has it, else Recall's hints.
      let context: string;
      try {
        context = (await memory.buildContext(step.task, { tokenBudget: 300, filter: { entity: USER }, turn })).text;
      } catch (error) {
        if (!(error instanceof UnimplementedError)) throw error;
        context = found.memories.map((m) => `- ${m.memory?.content} (${m.hint})`).join("\n");
      }

      // 3. Act (the scripted LLM) and report whether the recalled memories helped.
      console.log(`  act: ${act(step.task, context)}`);
      if (found.memories.length > 0) {
        try {
          const outcome = step.succeeded ? Outcome.SUCCESS : Outcome.FAILURE;
          const reported = await memory.reportOutcome(found.retrievalId, outcome, { turn, requestId: `outcome-${turn}` });
          console.log(`  outcome reported for ${reported.updatedCount} memories`);
        } catch (error) {
          if (!(error instanceof UnimplementedError)) throw error;
          console.log("  (ReportOutcome is not built yet)");
        }
      }

      // 4. Remember what was learned; a retry with the same request id would not store twice.
      for (const [n, fact] of step.learned.entries()) {
        const written = await memory.remember(
          {
            content: fact.text,
            kind: fact.kind,
            entity: USER,
            source: fact.source,
            fact: fact.attribute === undefined ? undefined : { attribute: fact.attribute, value: fact.value ?? "" },
            taskSignature: fact.kind === MemoryKind.STRATEGY ? "photos:batch-edit" : undefined,
          },
          { requestId: `turn-${turn}-${n}`, turn },
        );
        const replaced = written.affectedIds.length ? `, replaced ${written.affectedIds.join(", ")}` : "";
        console.log(`  remembered #${written.memory.id} (${WriteOutcome[written.outcome]}${replaced}): ${fact.text}`);
      }
    }

    // The preference change took: Go is current, Python is history.
    console.log("\nwhat is current about Alice's script language:");
    const now = await memory.recall("Which language does Alice want scripts in?", { k: 3, filter: { entity: USER, kinds: [MemoryKind.PREFERENCE] } });
    show("current", now);
    const history = await memory.history({ entity: USER, attribute: "script_language" });
    console.log("  history of (user:alice, script_language), oldest first:");
    for (const version of history.versions) {
      console.log(`    - #${version.id} ${MemoryState[version.state]}: ${version.fact?.value}${version.supersededBy ? ` -> superseded by #${version.supersededBy}` : ""}`);
    }
    const top = now.memories[0]?.memory;
    if (top?.fact?.value !== "Go" || now.memories.some((m) => m.memory?.fact?.value === "Python")) {
      console.error("FAILED: the newer preference (Go) should be the only current one");
      failed = true;
    }
    if (!history.versions.some((v) => v.fact?.value === "Python" && v.state === MemoryState.OBSOLETE)) {
      console.error("FAILED: the old preference should remain as OBSOLETE history");
      failed = true;
    }

    const stats = await memory.stats();
    await new Promise((resolve) => setTimeout(resolve, 200)); // let the last log events arrive
    console.log(`\n${stats.totalCount} memories, change log at #${stats.lastSequence}, ${events.length} events watched`);
  } finally {
    watch.cancel();
    await watching;
    memory.close();
    const code = await sidecar.stop();
    if (code !== 0) failed = true;
  }
  if (failed) process.exitCode = 1;
  else console.log("done: the sidecar stopped cleanly");
}

await main();
