// Runs the server test suite under node's test runner: every *.test.mjs here, against
// $KVSERVE_BIN (default ../../build/kvserve). Exits 77 (CTest's skip code) when node_modules is
// missing: run `npm ci` in tests/server first (scripts/setup.sh does). Extra arguments go to
// `node --test` (e.g. --test-name-pattern=stop). KVSERVE_SERVER_TEST_FILES (comma-separated
// names without .test.mjs) runs only those files. The files run as many at a time as the machine
// has cores (KVSERVE_SERVER_TEST_CONCURRENCY overrides), each against servers of its own: most of
// a file's time is spent waiting on its server, and node's default is one file at a time on a
// 2-core machine.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
if (!["openai", "@anthropic-ai/sdk"].every((dep) => existsSync(path.join(here, "node_modules", dep)))) {
  console.log("server tests skipped: run `npm ci` in tests/server");
  process.exit(77);
}
const only = (process.env.KVSERVE_SERVER_TEST_FILES ?? "").split(",").filter((f) => f !== "");
const files = readdirSync(here)
  .filter((f) => f.endsWith(".test.mjs"))
  .filter((f) => only.length === 0 || only.includes(f.replace(/\.test\.mjs$/, "")))
  .sort();
// --test-concurrency exists from node 20.10 (and 21); an older node keeps its own default.
const [major, minor] = process.versions.node.split(".").map(Number);
const concurrency = process.env.KVSERVE_SERVER_TEST_CONCURRENCY ??
  String(os.availableParallelism?.() ?? os.cpus().length);
const flags = major > 20 || (major === 20 && minor >= 10) ? [`--test-concurrency=${concurrency}`] : [];
const r = spawnSync(process.execPath, ["--test", ...flags, ...process.argv.slice(2), ...files],
  { cwd: here, stdio: "inherit" });
process.exit(r.status ?? 1);
