// hosts.ts: a line per host and device, and the trial's total or mean across hosts.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { DeviceSeries } from "../src/api";
import { aggregate, aggregateLabel, aggregation, hostsOf, seriesLabel } from "../src/resource/hosts";

function raw(host: string, device: string | null, t: number[], mean: number[]): DeviceSeries {
  return { host, device, note: null, mode: "raw", t, mean, min: null, max: null, n: null, corrupt_chunks: 0 };
}

test("memory-like units add up across hosts, percentages and the like average, a bitmask neither", () => {
  for (const unit of ["GiB", "W", "kJ", "MiB/s", "cores", "count"]) assert.equal(aggregation({ unit }), "total");
  for (const unit of ["%", "°C", "MHz", "s", "steps/s"]) assert.equal(aggregation({ unit }), "mean");
  assert.equal(aggregation({ unit: "bitmask" }), null);
  assert.equal(aggregateLabel("total", 2), "Total (2 hosts)");
  assert.equal(aggregateLabel("mean", 3), "Mean (3 hosts)");
});

test("labels name the host only when the trial ran on several", () => {
  assert.equal(seriesLabel("node-a", "0", "GPU 0", false), "GPU 0");
  assert.equal(seriesLabel("node-a", "0", "GPU 0", true), "node-a · GPU 0");
  assert.equal(seriesLabel("node-b", null, "Trial", true), "node-b");
  assert.equal(seriesLabel("node-b", null, "Trial", false), "Trial");
  const series = [raw("node-a", "0", [], []), raw("node-a", "1", [], []), raw("node-b", "0", [], [])];
  assert.deepEqual(hostsOf(series), ["node-a", "node-b"]);
});

test("the total adds each host's value in every cell; the mean averages them", () => {
  // two hosts sampling at 1 Hz, out of step by 0.4 s; node-b's GPU at 10 more
  const ta = [0.1, 1.1, 2.1, 3.1, 4.1];
  const tb = [0.5, 1.5, 2.5, 3.5, 4.5];
  const win = {
    start: 0, end: 5, points: 1000,
    series: [raw("node-a", "0", ta, [1, 2, 3, 4, 5]), raw("node-b", "0", tb, [11, 12, 13, 14, 15])],
  };
  const total = aggregate(win, "total");
  assert.deepEqual(total.t, [0.5, 1.5, 2.5, 3.5, 4.5]);
  assert.deepEqual(total.v, [12, 14, 16, 18, 20]);
  const mean = aggregate(win, "mean");
  assert.deepEqual(mean.v, [6, 7, 8, 9, 10]);
});

test("a host that misses one cell is held, one that has not started is left out", () => {
  // node-a's sample of the 3rd second landed in the 4th (jitter): its line joins 1.9 to 3.05,
  // so the total keeps counting it at 2.5; node-b starts at 3 s: before, the total is node-a's
  const win = {
    start: 0, end: 5, points: 1000,
    series: [
      raw("node-a", "0", [0.5, 1.5, 1.9, 3.05, 3.6, 4.5], [1, 1, 2, 3, 3, 3]),
      raw("node-b", "0", [3.5, 4.5], [10, 10]),
    ],
  };
  const total = aggregate(win, "total");
  assert.deepEqual(total.t, [0.5, 1.5, 2.5, 3.5, 4.5]);
  assert.deepEqual(total.v, [1, 1.5, 2, 13, 13]);
});

test("where no host has samples the aggregate line breaks (missing is never zero)", () => {
  const win = {
    start: 0, end: 20, points: 1000,
    series: [
      raw("node-a", "0", [0.5, 1.5, 2.5, 15.5, 16.5], [1, 1, 1, 1, 1]),
      raw("node-b", "0", [0.5, 1.5, 2.5, 15.5, 16.5], [2, 2, 2, 2, 2]),
    ],
  };
  const total = aggregate(win, "total");
  const i = total.v.indexOf(null);
  assert.ok(i > 0, "a null between the two stretches");
  assert.ok(total.t[i] > 2.5 && total.t[i] < 15.5);
  assert.deepEqual(total.v.filter((v) => v !== null), [3, 3, 3, 3, 3]);
  assert.ok(!total.v.includes(0));
});

test("bucketed windows add bucket by bucket", () => {
  const b = (host: string, mean: number[]): DeviceSeries => ({
    host, device: "0", note: null, mode: "buckets", t: [5, 15, 25, 35], mean,
    min: mean, max: mean, n: [10, 10, 10, 10], corrupt_chunks: 0,
  });
  const win = { start: 0, end: 40, points: 4, series: [b("a", [1, 2, 3, 4]), b("b", [10, 20, 30, 40])] };
  assert.deepEqual(aggregate(win, "total"), { t: [5, 15, 25, 35], v: [11, 22, 33, 44] });
});
