// Run by npm before `npm test` and `npm run example` (pretest, preexample): on a fresh clone there is no
// node_modules, and tsc and tsx are dev dependencies, so the scripts failed with "tsc: not found". Installs
// the versions package-lock.json pins (npm ci) when node_modules is missing or older than the lock file;
// otherwise it does nothing, so a test run needs no network once installed.
import { execSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";

const marker = "node_modules/.package-lock.json"; // npm writes it on every install
if (!existsSync(marker) || statSync(marker).mtimeMs < statSync("package-lock.json").mtimeMs) {
  console.error("installing the locked dependencies first (npm ci)");
  execSync("npm ci --no-audit --no-fund --loglevel=error", { stdio: "inherit" });
}
