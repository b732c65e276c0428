// span.ts: paging and zoom arithmetic of the Resource Utilization tab's time window.
import assert from "node:assert/strict";
import { test } from "node:test";
import { atEdge, clamp, isWhole, MIN_WIDTH, page, round3, width, zoom } from "../src/resource/span";

test("clamp moves a span inside the extent without resizing it", () => {
  assert.deepEqual(clamp({ from: -10, to: 20 }, 100), { from: 0, to: 30 });
  assert.deepEqual(clamp({ from: 90, to: 120 }, 100), { from: 70, to: 100 });
  assert.deepEqual(clamp({ from: 10, to: 40 }, 100), { from: 10, to: 40 });
  assert.deepEqual(clamp({ from: -5, to: 200 }, 100), { from: 0, to: 100 }); // wider: the whole
  const s = { from: 10, to: 40 };
  assert.notEqual(clamp(s, 100), s); // a copy, never the caller's object
});

test("page steps by the window's own width and stops at the edges", () => {
  const s = { from: 100, to: 200 };
  assert.deepEqual(page(s, 1, 1000), { from: 200, to: 300 });
  assert.deepEqual(page(s, -1, 1000), { from: 0, to: 100 });
  assert.deepEqual(page({ from: 50, to: 150 }, -1, 1000), { from: 0, to: 100 });
  assert.deepEqual(page({ from: 850, to: 950 }, 1, 1000), { from: 900, to: 1000 });
  assert.equal(width(page({ from: 850, to: 950 }, 1, 1000)), 100);
});

test("zoom keeps the centre, never goes below MIN_WIDTH and never past the extent", () => {
  assert.deepEqual(zoom({ from: 100, to: 200 }, 0.5, 1000), { from: 125, to: 175 });
  assert.deepEqual(zoom({ from: 100, to: 200 }, 2, 1000), { from: 50, to: 250 });
  const tiny = zoom({ from: 100, to: 102 }, 0.5, 1000);
  assert.equal(width(tiny), MIN_WIDTH);
  assert.equal((tiny.from + tiny.to) / 2, 101);
  assert.deepEqual(zoom({ from: 0, to: 100 }, 2, 1000), { from: 0, to: 200 }); // pushed inside
  assert.deepEqual(zoom({ from: 0, to: 800 }, 2, 1000), { from: 0, to: 1000 });
});

test("isWhole allows the milliseconds a URL rounds away", () => {
  assert.equal(isWhole({ from: 0, to: 1000 }, 1000), true);
  assert.equal(isWhole({ from: 0.004, to: 999.996 }, 1000), true);
  assert.equal(isWhole({ from: 0.01, to: 1000 }, 1000), false);
  assert.equal(isWhole({ from: 0, to: 999.9 }, 1000), false);
});

test("atEdge: the right edge within 2 s or 2% of the width of the live edge", () => {
  assert.equal(atEdge({ from: 0, to: 98.5 }, 100), true);
  assert.equal(atEdge({ from: 0, to: 97.9 }, 100), false);
  assert.equal(atEdge({ from: 0, to: 9850 }, 10000), true); // 2% of 9850 s is 197 s
  assert.equal(atEdge({ from: 0, to: 9700 }, 10000), false);
});

test("round3 rounds seconds to milliseconds", () => {
  assert.equal(round3(1.23456), 1.235);
  assert.equal(round3(1234.0004), 1234);
  assert.equal(round3(-0.0006), -0.001);
});
