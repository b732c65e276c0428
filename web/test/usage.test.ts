// usage.ts: the Usage page's view in the URL, read back as written; bad values fall back.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseRoute } from "../src/route";
import { readUsageView, usageHref } from "../src/usage";

const NOW = Date.parse("2026-03-10T12:00:00Z") / 1000;

test("the last 30 days by project, unless the URL says otherwise", () => {
  assert.deepEqual(readUsageView(new URLSearchParams(), NOW),
    { since: "2026-02-08", until: "2026-03-11", by: "project", group: "project", price: "" });
});

test("a view written as a link reads back the same", () => {
  const v = { since: "2026-01-05", until: "2026-04-05", by: "gpu_model", group: "week",
    price: "NVIDIA H100 80GB HBM3=2.5,a100-80gb=1.5" };
  const r = parseRoute(usageHref(v));
  assert.equal(r.page, "usage");
  if (r.page !== "usage") return;
  assert.deepEqual(readUsageView(r.q, NOW), v);
});

test("an unknown grouping or a date that is not one falls back", () => {
  const v = readUsageView(new URLSearchParams("since=yesterday&until=2026-1-1&by=team&group=x"), NOW);
  assert.deepEqual(v, { since: "2026-02-08", until: "2026-03-11", by: "project", group: "project", price: "" });
});
