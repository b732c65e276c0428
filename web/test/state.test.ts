// state.ts: the Resource Utilization tab's view in the URL, and the comparison list's copy in
// localStorage.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import {
  loadPins, parsePins, pinsParam, readView, type ResourceView, savePins, viewQuery,
} from "../src/resource/state";

const view = (over: Partial<ResourceView> = {}): ResourceView => ({
  metric: null, trial: null, span: null, pins: [], sel: -1, align: false, steps: true, evals: true,
  ...over,
});

test("a view survives the URL: viewQuery then readView gives it back", () => {
  const views = [
    view(),
    view({ metric: "gpu.util", trial: 3, span: { from: 12.5, to: 300 } }),
    view({
      metric: "cpu.mem", trial: 0, pins: [{ trial: 1, metric: "gpu.mem" }, { trial: 2, metric: "a:b" }],
      sel: 1, align: true, steps: false, evals: false,
    }),
  ];
  for (const v of views) {
    const q = new URLSearchParams(viewQuery(v).toString());
    assert.deepEqual(readView(q, null), v);
  }
});

test("viewQuery writes only what differs from the defaults, spans to the millisecond", () => {
  const q = viewQuery(view({ metric: "gpu.util", span: { from: 1.23456, to: 99.99999 } }));
  assert.equal(q.toString(), "metric=gpu.util&from=1.235&to=100&cmp=");
  assert.equal(viewQuery(view({ align: true, steps: false })).toString(), "cmp=&align=1&steps=0");
});

test("readView ignores what it cannot use", () => {
  const v = readView(new URLSearchParams("trial=x&from=50&to=10&cmp=1:gpu.util&sel=7&steps=no"), null);
  assert.equal(v.trial, null); // not a number
  assert.equal(v.span, null); // to before from
  assert.deepEqual(v.pins, [{ trial: 1, metric: "gpu.util" }]);
  assert.equal(v.sel, -1); // no 8th pin
  assert.equal(v.steps, true); // only "0" turns markers off
  assert.equal(readView(new URLSearchParams("from=&to=5"), null).span, null);
});

test("the comparison list comes from storage only when the URL has none", () => {
  const stored = { pins: [{ trial: 4, metric: "cpu.util" }], sel: 0 };
  assert.deepEqual(readView(new URLSearchParams("metric=m"), stored).pins, stored.pins);
  assert.equal(readView(new URLSearchParams("metric=m"), stored).sel, 0);
  const fromUrl = readView(new URLSearchParams("cmp="), stored);
  assert.deepEqual(fromUrl.pins, []); // an empty list in the URL wins
  assert.equal(fromUrl.sel, -1);
});

test("parsePins keeps valid, distinct trial:metric pairs in order", () => {
  assert.deepEqual(parsePins("1:gpu.util,2:cpu.mem,1:gpu.util,x:gpu.mem,:a,3:,4,1.5:m,5:a:b"), [
    { trial: 1, metric: "gpu.util" },
    { trial: 2, metric: "cpu.mem" },
    { trial: 5, metric: "a:b" },
  ]);
  assert.deepEqual(parsePins(""), []);
  const pins = [{ trial: 7, metric: "gpu.mem" }, { trial: 8, metric: "gpu.util" }];
  assert.equal(pinsParam(pins), "7:gpu.mem,8:gpu.util");
  assert.deepEqual(parsePins(pinsParam(pins)), pins);
});

// Node 20 has no localStorage: a Map stands in for the browser's.
const g = globalThis as { localStorage?: unknown };
afterEach(() => {
  delete g.localStorage;
});

function memoryStorage(): Map<string, string> {
  const items = new Map<string, string>();
  g.localStorage = {
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => void items.set(k, v),
  };
  return items;
}

test("savePins and loadPins keep each run's list apart", () => {
  const items = memoryStorage();
  assert.equal(loadPins(1), null);
  savePins(1, [{ trial: 3, metric: "gpu.util" }], 0);
  savePins(2, [], -1);
  assert.deepEqual(loadPins(1), { pins: [{ trial: 3, metric: "gpu.util" }], sel: 0 });
  assert.deepEqual(loadPins(2), { pins: [], sel: -1 });
  assert.deepEqual([...items.keys()].sort(), ["tunescope.comparison.run.1", "tunescope.comparison.run.2"]);
});

test("a damaged or missing store reads as no list, and saving never throws", () => {
  const items = memoryStorage();
  items.set("tunescope.comparison.run.1", "{not json");
  assert.equal(loadPins(1), null);
  items.set("tunescope.comparison.run.1", JSON.stringify({ pins: 5, sel: "x" }));
  assert.deepEqual(loadPins(1), { pins: [], sel: -1 });
  g.localStorage = {
    getItem: () => { throw new Error("disabled"); },
    setItem: () => { throw new Error("quota"); },
  };
  assert.equal(loadPins(1), null);
  assert.doesNotThrow(() => savePins(1, [{ trial: 1, metric: "m" }], 0));
  delete g.localStorage; // no storage at all (as in Node)
  assert.equal(loadPins(1), null);
  assert.doesNotThrow(() => savePins(1, [], -1));
});
