/**
 * Start a memevo sidecar as a child process: one sidecar per agent, on a unix socket plus a
 * loopback TCP port, stopped with SIGTERM. Used by the tests and the example; an agent can use it
 * to run its own sidecar.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";

/** How {@link startSidecar} runs the sidecar. */
export interface SidecarOptions {
  /**
   * The command before `serve`. Default: `[$MEMEVO_PYTHON or "python", "-m", "memevo.sidecar.cli"]`;
   * the interpreter must have memevo installed (`pip install memevo`).
   */
  command?: readonly string[];
  /** Data directory. Default: a new temporary directory, deleted by `stop()`. */
  dataDir?: string;
  /** Unix socket path (absolute). Default: `memevo.sock` in a new temporary directory. */
  socketPath?: string;
  /** `--embedder`: `"none"` (clients send vectors), `"local"` (bundled model) or `"openai"`. Default `"none"`. */
  embedder?: string;
  /** `--dimension` of a new data directory with `embedder: "none"`. Default 8. */
  dimension?: number;
  /** More `serve` arguments, e.g. `["--token-file", path]`. */
  args?: readonly string[];
  /** How long to wait for the sidecar to serve, milliseconds. Default 60000. */
  readyTimeoutMs?: number;
}

/** A running sidecar. */
export interface Sidecar {
  /** `unix:///.../memevo.sock` */
  readonly unix: string;
  /** `127.0.0.1:PORT` */
  readonly tcp: string;
  /** The process id. */
  readonly pid: number;
  /** SIGTERM, wait for a clean exit (SIGKILL after 15 s), delete a temporary data directory; resolves with the exit code. */
  stop(): Promise<number | null>;
}

const STOP_TIMEOUT_MS = 15_000;

/** Start a sidecar and resolve once its ready file names the addresses it listens on. */
export async function startSidecar(options: SidecarOptions = {}): Promise<Sidecar> {
  const runDir = mkdtempSync(join(tmpdir(), "memevo-"));
  const dataDir = options.dataDir ?? join(runDir, "data");
  const readyFile = join(runDir, "ready.json");
  const [program, ...prefix] = options.command ?? [process.env.MEMEVO_PYTHON || "python", "-m", "memevo.sidecar.cli"];
  const args = [
    ...prefix,
    "serve",
    "--data", dataDir,
    "--listen", `unix://${options.socketPath ?? join(runDir, "memevo.sock")}`,
    "--listen", "127.0.0.1:0",
    "--embedder", options.embedder ?? "none",
    ...(options.embedder === undefined || options.embedder === "none" ? ["--dimension", String(options.dimension ?? 8)] : []),
    "--ready-file", readyFile,
    ...(options.args ?? []),
  ];
  const child = spawn(program!, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-20_000);
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on("exit", (code) => resolve(code));
    child.on("error", (error) => {
      stderr += `\n${String(error)}`;
      resolve(null);
    });
  });
  let hasExited = false;
  void exited.then(() => {
    hasExited = true;
  });
  const cleanup = (): void => rmSync(runDir, { recursive: true, force: true });
  const fail = async (message: string): Promise<never> => {
    await kill(child, exited);
    cleanup();
    throw new Error(`${message} (${program} ${args.join(" ")}):\n${stderr}`);
  };

  const timeoutMs = options.readyTimeoutMs ?? 60_000;
  const started = Date.now();
  let listen: string[] | undefined;
  while (listen === undefined) {
    await delay(50);
    if (hasExited) return fail("the sidecar exited before it was ready");
    if (Date.now() - started > timeoutMs) return fail(`the sidecar was not ready after ${timeoutMs} ms`);
    try {
      listen = (JSON.parse(readFileSync(readyFile, "utf8")) as { listen: string[] }).listen;
    } catch {
      // Not written yet (or half-written): poll again.
    }
  }
  const unix = listen.find((a) => a.startsWith("unix:"));
  const tcp = listen.find((a) => !a.startsWith("unix:"));
  if (unix === undefined || tcp === undefined) return fail(`unexpected ready file: ${JSON.stringify(listen)}`);
  return {
    unix,
    tcp,
    pid: child.pid!,
    async stop() {
      const code = await kill(child, exited);
      cleanup();
      if (code !== 0) process.stderr.write(`memevo sidecar exited with ${String(code)}:\n${stderr}\n`);
      return code;
    },
  };
}

async function kill(child: ChildProcess, exited: Promise<number | null>): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return exited;
  child.kill("SIGTERM");
  const timer = new AbortController();
  const code = await Promise.race([
    exited,
    delay(STOP_TIMEOUT_MS, "timeout" as const, { signal: timer.signal }).catch(() => "timeout" as const),
  ]);
  timer.abort(); // a pending timer would keep the process alive
  if (code !== "timeout") return code;
  child.kill("SIGKILL");
  return exited;
}
