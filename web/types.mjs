// Writes src/api-types.ts, the TypeScript types of the API, from openapi.json (the OpenAPI
// document the server serves at /api/openapi.json, which `make openapi` writes here and
// tests/test_web_openapi.py keeps true). src/api.ts aliases them, so the page fails to
// type-check when it reads a field, calls a route or sends a parameter the API does not have.
// The file is rewritten only when it changes, so a build that did not change it leaves the
// page's sources as old as they were. Usage: node types.mjs (`npm run types`).
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const target = join(here, "src", "api-types.ts");
const doc = JSON.parse(readFileSync(join(here, "openapi.json"), "utf8"));
const text = "// Generated from web/openapi.json by web/types.mjs (openapi-typescript): do not edit.\n\n" +
  astToString(await openapiTS(doc));

let old = null;
try {
  old = readFileSync(target, "utf8");
} catch {
  /* not generated yet */
}
if (old !== text) writeFileSync(target, text);
