// route.ts: the hash routes of the page and the links that make them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseRoute, runHref, runsHref, runTabs, TABS } from "../src/route";

test("the runs list, of every project or of one", () => {
  assert.deepEqual(parseRoute(""), { page: "runs", project: null });
  assert.deepEqual(parseRoute("#/"), { page: "runs", project: null });
  assert.deepEqual(parseRoute("#/runs"), { page: "runs", project: null });
  assert.deepEqual(parseRoute("#/?project=vision"), { page: "runs", project: "vision" });
  for (const project of [null, "vision", "a b&c=d/é"]) {
    assert.deepEqual(parseRoute(runsHref(project)), { page: "runs", project });
  }
});

test("a run page: the run, its tab (training by default) and the view's query", () => {
  const r = parseRoute("#/runs/7/resources?metric=gpu.util&from=1.5");
  assert.equal(r.page, "run");
  if (r.page !== "run") return;
  assert.equal(r.run, "7");
  assert.equal(r.tab, "resources");
  assert.equal(r.q.get("metric"), "gpu.util");
  assert.equal(r.q.get("from"), "1.5");
  const d = parseRoute("#/runs/lora-sweep");
  assert.ok(d.page === "run" && d.tab === "training" && d.q.toString() === "");
});

test("runHref makes links parseRoute reads back, for every tab and odd names", () => {
  for (const run of [3, "lora sweep/β", "a?b#c", "100%"]) {
    for (const tab of TABS) {
      const q = new URLSearchParams({ metric: "gpu.mem", cmp: "1:gpu.util,2:cpu.mem" });
      const r = parseRoute(runHref(run, tab, q));
      assert.ok(r.page === "run", runHref(run, tab, q));
      assert.equal(r.run, String(run));
      assert.equal(r.tab, tab);
      assert.equal(r.q.toString(), q.toString());
    }
  }
  assert.equal(runHref(5), "#/runs/5");
  assert.equal(runHref(5, "adapters", new URLSearchParams()), "#/runs/5/adapters");
});

test("anything else is missing, and a bad escape is kept as typed", () => {
  assert.deepEqual(parseRoute("#/runs/7/nope"), { page: "missing", path: "/runs/7/nope" });
  assert.deepEqual(parseRoute("#/runs/7/resources/x"), { page: "missing", path: "/runs/7/resources/x" });
  assert.deepEqual(parseRoute("#/trials/3"), { page: "missing", path: "/trials/3" });
  const r = parseRoute("#/runs/50%zz");
  assert.ok(r.page === "run" && r.run === "50%zz");
});

test("the Serving tab shows on load runs only", () => {
  const train = [{ params: { lr: 0.1 } }];
  const load = [{ params: { command: "llama-server" } }, { params: { "load.mode": "concurrency" } }];
  assert.deepEqual(runTabs(train), ["training", "evaluation", "adapters", "resources"]);
  assert.deepEqual(runTabs(load), [...TABS]);
  assert.ok(!runTabs([{ params: { "load.mode": "bogus" } }]).includes("serving"));
});
