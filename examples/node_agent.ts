/**
 * A small agent loop on memevo: task -> BuildContext -> act -> ReportOutcome -> new facts.
 *
 * Run it with one command from the repository root (after `pip install -e .`):
 *
 *     npm --prefix clients/typescript ci && npm --prefix clients/typescript run example
 *
 * It starts its own sidecar on a temporary directory (the offline `local` embedder), plays a
 * scripted session and stops the sidecar. The "LLM" is a stand-in that reads the context text and
 * decides. The session shows a preference change (only the current value reaches the context, the
 * history keeps both), a strategy upgrade driven by outcomes (the old strategy becomes a
 * counter-example) and the hints attached to every memory; a Watch counts the change log meanwhile.
 * The same story as examples/python_agent.py. Exits 1 when an expected effect did not happen.
 */

import {
  ChangeEventType,
  MemoryClient,
  MemoryKind,
  MemorySource,
  MemoryState,
  Outcome,
  RecallMode,
  WriteOutcome,
  startSidecar,
  type ChangeEvent,
} from "../clients/typescript/src/index.js";

const USER = "user:alice";
const DEPLOY = "deploy:billing-service";
/** What the agent knew about deploying before this session, oldest first. */
const STRATEGIES: [string, MemorySource][] = [
  ["To deploy the billing service, copy its files to the servers over ssh and restart it.", MemorySource.IMPORT],
  ["To deploy the billing service, build a container image and roll it out.", MemorySource.AGENT_INFERENCE],
];

/** One turn: what the agent is asked, and the [attribute, value] the user states in it, if any. */
interface Task {
  text: string;
  states?: [string, string];
}

const DEPLOY_TASK: Task = { text: "Deploy the billing service to the servers." };
const SCRIPT: Task[] = [
  { text: "Alice says: 'Please keep me posted by email.'", states: ["contact_channel", "email"] },
  { text: "Send Alice the weekly status update." },
  DEPLOY_TASK,
  DEPLOY_TASK,
  DEPLOY_TASK,
  { text: "Alice says: 'Actually, call me — I never read email.'", states: ["contact_channel", "phone"] },
  { text: "Send Alice the weekly status update." },
  DEPLOY_TASK,
];

/** The scripted stand-in for the model: the context lines it acts on, in the order it would try them. */
function llm(task: string, context: string): string[] {
  if (task.startsWith("Send")) return context.split("\n").filter((line) => line.includes("contacted by")).slice(0, 1);
  if (task.startsWith("Deploy")) {
    // The strategies as ranked, best first.
    const section = context.split("## Strategies\n")[1]?.split("\n## ")[0] ?? "";
    return section.split("\n").filter((line) => line.startsWith("- "));
  }
  return [];
}

/** Whether acting on `line` worked: Alice answers on her real channel; the servers now run containers. */
function world(task: string, line: string, channel: string): boolean {
  return task.startsWith("Send") ? line.includes(`by ${channel}.`) : line.includes("container");
}

const indent = (text: string): string => text.split("\n").map((line) => `    | ${line}`).join("\n");

async function main(): Promise<boolean> {
  const failures: string[] = [];
  const expect = (ok: boolean, effect: string): void => {
    console.log(`  ${ok ? "ok" : "FAILED"}: ${effect}`);
    if (!ok) failures.push(effect);
  };

  const sidecar = await startSidecar({ embedder: "local", args: ["--sweep-interval-s", "0"] });
  const memory = new MemoryClient(sidecar.unix, { timeoutMs: 30_000 });
  const events: ChangeEvent[] = [];
  const watch = memory.watch({ afterSequence: 0 });
  const watching = (async () => {
    for await (const event of watch) events.push(event);
  })();
  try {
    await memory.declareFramework("planner-v1", { description: "the agent's first planning prompt" });
    const strategyIds: bigint[] = [];
    for (const [content, source] of STRATEGIES) {
      const written = await memory.remember({ content, kind: MemoryKind.STRATEGY, taskSignature: DEPLOY, source });
      strategyIds.push(written.memory.id);
    }
    const [runbook = 0n, containers = 0n] = strategyIds;
    console.log(`known strategies for ${DEPLOY}: #${runbook} (the old runbook), #${containers} (a newer idea)`);

    let channel = ""; // what Alice really wants, as she last said it
    const shown = new Map<string, number>(); // context text -> the turn that printed it
    const contacted: string[] = []; // the channel of every status update
    const firstTried: bigint[] = []; // the strategy each deploy tried first
    for (const [index, task] of SCRIPT.entries()) {
      const turn = index + 1;
      console.log(`\nturn ${turn}: ${task.text}`);
      const context = await memory.buildContext(task.text, { tokenBudget: 300, turn });
      console.log(shown.has(context.text) ? `    | (as in turn ${shown.get(context.text)})` : indent(context.text));
      if (!shown.has(context.text)) shown.set(context.text, turn);
      // One line per item, in rendering order.
      const lines = context.text.split("\n").filter((line) => line.startsWith("- "));
      if (lines.length !== context.items.length) throw new Error("the context text and its items disagree");
      const byLine = new Map(lines.map((line, i) => [line, context.items[i]!]));
      const attempts = llm(task.text, context.text);
      if (task.text.startsWith("Send")) {
        contacted.push(...attempts.map((line) => /contacted by (\w+)/.exec(line)?.[1] ?? ""));
      } else if (attempts[0] !== undefined) {
        firstTried.push(byLine.get(attempts[0])!.memory!.id);
      }
      for (const line of attempts) {
        const used = byLine.get(line)!.memory!;
        const worked = world(task.text, line, channel);
        const outcome = worked ? Outcome.SUCCESS : Outcome.FAILURE;
        await memory.reportOutcome(context.retrievalId, outcome, { usedMemoryIds: [used.id], turn });
        console.log(`  act on #${used.id}: ${used.content} -> ${Outcome[outcome]}`);
        if (worked) break;
      }
      if (task.states !== undefined) {
        const [attribute, value] = task.states;
        channel = value;
        const written = await memory.remember(
          {
            content: `Alice prefers to be contacted by ${value}.`,
            kind: MemoryKind.PREFERENCE,
            entity: USER,
            fact: { attribute, value },
            source: MemorySource.USER_STATEMENT,
          },
          { turn },
        );
        const replaced = written.affectedIds.length ? `, replaced #${written.affectedIds[0]}` : "";
        console.log(`  remembered #${written.memory.id} (${WriteOutcome[written.outcome]}${replaced})`);
      }
    }

    console.log("\n(a) the preference change");
    const contactedBy = contacted.join(", ");
    expect(contactedBy === "email, phone", `the agent contacted Alice by [${contactedBy}], email then phone`);
    const current = (await memory.buildContext("How should I contact Alice?", { tokenBudget: 200 })).text;
    expect(current.includes("by phone") && !current.includes("by email"), "the context shows only the current value");
    const { versions } = await memory.history({ entity: USER, attribute: "contact_channel" });
    for (const v of versions) {
      console.log(`    #${v.id} ${MemoryState[v.state]}: ${v.fact?.value} (superseded by ${v.supersededBy || "none"})`);
    }
    const phone = versions.at(-1)?.id ?? 0n;
    const states = versions.map((v) => `${v.fact?.value} ${MemoryState[v.state]} ${v.supersededBy}`).join(", ");
    expect(
      states === `email OBSOLETE ${phone}, phone ACTIVE 0`,
      `the history keeps both: email OBSOLETE and superseded by #${phone}, phone ACTIVE`,
    );
    const past = (
      await memory.buildContext("How should I contact Alice?", { mode: RecallMode.HISTORY, tokenBudget: 200 })
    ).text;
    console.log(indent(past));
    expect(past.includes(`superseded by memory ${phone}`), "a history-mode context marks the old value superseded");

    console.log("\n(b) the strategy upgrade");
    console.log(`  the strategy each deploy tried first: [${firstTried.join(", ")}]`);
    expect(firstTried[0] === runbook, `at first the agent tried the runbook #${runbook} (ranked first)`);
    expect(firstTried.at(-1) === containers, `after the outcomes it tries #${containers} first`);
    expect((await memory.getOne(runbook)).demotedBy === containers, `#${containers} demoted #${runbook}`);
    const now = (await memory.buildContext(DEPLOY_TASK.text, { tokenBudget: 300 })).text;
    expect(now.includes(`counter-example (strategy ${containers} did better)`), "the runbook is now a counter-example");

    console.log("\n(c) hints after a new framework: older memories are to be re-interpreted");
    const declared = await memory.declareFramework("planner-v2", { description: "a new planning prompt" });
    console.log(`  planner-v2 declared; ${declared.flaggedCount} memories formed under ${declared.previousVersion}`);
    const later = (await memory.buildContext(DEPLOY_TASK.text, { tokenBudget: 300 })).text;
    console.log(indent(later));
    expect(later.includes("formed under an older framework (planner-v1)"), "older memories carry that hint");

    // The audit trail: every change above is an event in the sidecar's change log.
    const last = (await memory.stats()).lastSequence;
    for (let waited = 0; events.at(-1)?.sequence !== last && waited < 50; waited++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const byType = new Map<string, number>();
    for (const { type } of events) byType.set(ChangeEventType[type], (byType.get(ChangeEventType[type]) ?? 0) + 1);
    const summary = [...byType].map(([type, count]) => `${type} ${count}`).join(", ");
    console.log(`\nchange log watched: ${events.length} events (${summary})`);
    expect(events.at(-1)?.sequence === last, `the watch saw the whole change log, up to #${last}`);
  } finally {
    watch.cancel();
    await watching;
    memory.close();
    if ((await sidecar.stop()) !== 0) failures.push("the sidecar did not stop cleanly");
  }
  console.log(failures.length ? `\nFAILED: ${failures.join("; ")}` : "\ndone: every expected effect happened");
  return failures.length === 0;
}

if (!(await main())) process.exitCode = 1;
