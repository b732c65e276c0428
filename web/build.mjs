// Bundles web/src into src/tunescope/server/static/: the page (index.html, app.js, app.css,
// uPlot.min.css) and the API docs page served at /api/docs (api-docs/: index.html, init.js and
// Swagger UI's own files from swagger-ui-dist, so that nothing comes from a CDN).
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
  entryPoints: {
    app: join(here, "src", "main.ts"),
    "api-docs/init": join(here, "src", "api-docs.ts"),
  },
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

// Swagger UI's files the docs page loads, and its licence (the bundle's header points to it).
const SWAGGER_FILES = [
  "swagger-ui-bundle.js",
  "swagger-ui-bundle.js.LICENSE.txt",
  "swagger-ui.css",
  "LICENSE",
  "NOTICE",
];

function writeApiDocs() {
  const docs = join(out, "api-docs");
  mkdirSync(docs, { recursive: true });
  const dist = join(here, "node_modules", "swagger-ui-dist");
  for (const name of SWAGGER_FILES) copyFileSync(join(dist, name), join(docs, name));
  const html = readFileSync(join(here, "src", "api-docs.html"), "utf8")
    .replace("swagger-ui.css", `swagger-ui.css?v=${hash(join(docs, "swagger-ui.css"))}`)
    .replace("swagger-ui-bundle.js", `swagger-ui-bundle.js?v=${hash(join(docs, "swagger-ui-bundle.js"))}`)
    .replace("init.js", `init.js?v=${hash(join(docs, "init.js"))}`);
  writeFileSync(join(docs, "index.html"), html);
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
  writeApiDocs();
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
