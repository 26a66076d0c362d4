// Runs the server test suite under node's test runner: every *.test.mjs here, against
// $KVSERVE_BIN (default ../../build/kvserve). Exits 77 (CTest's skip code) when node_modules is
// missing: run `npm ci` in tests/server first (scripts/setup.sh does). Extra arguments go to
// `node --test` (e.g. --test-name-pattern=stop). KVSERVE_SERVER_TEST_FILES (comma-separated
// names without .test.mjs) runs only those files.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
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
const r = spawnSync(process.execPath, ["--test", ...process.argv.slice(2), ...files],
  { cwd: here, stdio: "inherit" });
process.exit(r.status ?? 1);
