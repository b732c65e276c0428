// Bundles web/src into src/tunescope/server/static/ (index.html, app.js, app.css, uPlot.min.css).
// Usage: node build.mjs [--watch]. Run through `npm run build`, which type-checks first.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "tunescope", "server", "static");
const watch = process.argv.includes("--watch");

const options = {
  entryPoints: { app: join(here, "src", "main.ts") },
  bundle: true,
  format: "iife",
  target: ["es2020"],
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  legalComments: "none",
  outdir: out,
  logLevel: "info",
};

function hash(path) {
  return createHash("sha256").update(readFileSync(path)).digest("hex").slice(0, 10);
}

function writeStatic() {
  copyFileSync(join(here, "src", "app.css"), join(out, "app.css"));
  copyFileSync(join(here, "node_modules", "uplot", "dist", "uPlot.min.css"), join(out, "uPlot.min.css"));
  // Cache-busting query strings, so a rebuilt bundle is never mixed with a cached one.
  const html = readFileSync(join(here, "src", "index.html"), "utf8")
    .replace("uPlot.min.css", `uPlot.min.css?v=${hash(join(out, "uPlot.min.css"))}`)
    .replace("app.css", `app.css?v=${hash(join(out, "app.css"))}`)
    .replace("app.js", `app.js?v=${hash(join(out, "app.js"))}`);
  writeFileSync(join(out, "index.html"), html);
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
if (watch) {
  const ctx = await esbuild.context({
    ...options,
    plugins: [{ name: "static", setup: (b) => b.onEnd(() => writeStatic()) }],
  });
  await ctx.watch();
} else {
  await esbuild.build(options);
  writeStatic();
}
