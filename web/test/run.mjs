// Runs the page's unit tests: each test/*.test.ts, with the modules it imports from src/, is
// bundled by esbuild into .test-out/ (git-ignored) and run by Node's own test runner.
// Usage: node test/run.mjs (`npm test`, which type-checks first). Only modules without a DOM
// are tested here; the page itself is tested in a real browser (tests/test_browser_*.py).
import { spawnSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", ".test-out");
const tests = readdirSync(here).filter((f) => f.endsWith(".test.ts")).sort();
if (tests.length === 0) throw new Error(`no *.test.ts in ${here}`);

rmSync(out, { recursive: true, force: true });
await esbuild.build({
  entryPoints: tests.map((f) => join(here, f)),
  bundle: true,
  platform: "node",
  format: "esm",
  target: ["node20"],
  outdir: out,
  outExtension: { ".js": ".mjs" },
  logLevel: "warning",
});
const files = tests.map((f) => join(out, f.replace(/\.ts$/, ".mjs")));
const result = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
process.exit(result.status ?? 1);
