// format.ts: times, durations, bytes and values as people read them; missing is a dash.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  fmtBytes, fmtDate, fmtDuration, fmtElapsed, fmtTick, fmtValue, parseElapsed,
} from "../src/format";

const DASH = "—";

test("fmtElapsed writes h:mm:ss, with a tenth for short spans", () => {
  assert.equal(fmtElapsed(0), "0:00:00");
  assert.equal(fmtElapsed(59.4), "0:00:59");
  assert.equal(fmtElapsed(59.6), "0:01:00"); // rounds before splitting, never 0:00:60
  assert.equal(fmtElapsed(3725), "1:02:05");
  assert.equal(fmtElapsed(100 * 3600 + 1), "100:00:01");
  assert.equal(fmtElapsed(-65), "-0:01:05");
  assert.equal(fmtElapsed(12.34, 1), "0:00:12.3");
  assert.equal(fmtElapsed(59.96, 1), "0:01:00.0");
  assert.equal(fmtElapsed(Number.NaN), DASH);
  assert.equal(fmtElapsed(Number.POSITIVE_INFINITY), DASH);
});

test("parseElapsed reads h:mm:ss, m:ss and seconds, and refuses anything else", () => {
  assert.equal(parseElapsed("1:02:05"), 3725);
  assert.equal(parseElapsed(" 4:09 "), 249);
  assert.equal(parseElapsed("90"), 90);
  assert.equal(parseElapsed("2.5"), 2.5);
  assert.equal(parseElapsed("0:00:12.3"), 12.3);
  for (const bad of ["", "abc", "1:60", "1:02:60", "1:2:3:4", "-5", "1:", ":30", "1:234"]) {
    assert.equal(parseElapsed(bad), null, bad);
  }
});

test("what fmtElapsed writes, parseElapsed reads back", () => {
  for (const s of [0, 1, 59, 60, 61, 599, 3599, 3600, 3725, 86399, 90061]) {
    assert.equal(parseElapsed(fmtElapsed(s)), s);
  }
  assert.equal(parseElapsed(fmtElapsed(12.3, 1)), 12.3);
});

test("fmtDuration picks the two largest units", () => {
  assert.equal(fmtDuration(0), "0s");
  assert.equal(fmtDuration(12.4), "12s");
  assert.equal(fmtDuration(59.6), "1m 00s");
  assert.equal(fmtDuration(249), "4m 09s");
  assert.equal(fmtDuration(7500), "2h 05m");
  assert.equal(fmtDuration(47 * 3600 + 59 * 60), "47h 59m");
  assert.equal(fmtDuration(48 * 3600), "2d 0h");
  assert.equal(fmtDuration(3 * 86400 + 5 * 3600), "3d 5h");
  assert.equal(fmtDuration(-3), "0s");
  assert.equal(fmtDuration(null), DASH);
  assert.equal(fmtDuration(undefined), DASH);
  assert.equal(fmtDuration(Number.NaN), DASH);
});

test("fmtDate writes local time as YYYY-MM-DD HH:MM:SS", () => {
  process.env.TZ = "UTC"; // Node reads TZ again when it is set
  assert.equal(fmtDate(0), "1970-01-01 00:00:00");
  assert.equal(fmtDate(1700000000.9), "2023-11-14 22:13:20");
  process.env.TZ = "Asia/Kolkata"; // +05:30
  assert.equal(fmtDate(0), "1970-01-01 05:30:00");
  process.env.TZ = "UTC";
  assert.equal(fmtDate(null), DASH);
  assert.equal(fmtDate(undefined), DASH);
});

test("fmtBytes uses binary units with three significant digits", () => {
  assert.equal(fmtBytes(0), "0 B");
  assert.equal(fmtBytes(1023), "1023 B");
  assert.equal(fmtBytes(1024), "1.00 KiB");
  assert.equal(fmtBytes(1536), "1.50 KiB");
  assert.equal(fmtBytes(10.5 * 1024), "10.5 KiB");
  assert.equal(fmtBytes(150 * 1024 ** 2), "150 MiB");
  assert.equal(fmtBytes(1.5 * 1024 ** 3), "1.50 GiB");
  assert.equal(fmtBytes(2048 * 1024 ** 4), "2048 TiB"); // no unit past TiB
  assert.equal(fmtBytes(-2048), "-2.00 KiB");
  assert.equal(fmtBytes(null), DASH);
  assert.equal(fmtBytes(Number.NaN), DASH);
});

test("fmtValue suits the precision to the size and appends the unit", () => {
  assert.equal(fmtValue(55, "%"), "55.00%");
  assert.equal(fmtValue(123.46, "W"), "123.5 W");
  assert.equal(fmtValue(1234.5, "MiB/s"), "1235 MiB/s");
  assert.equal(fmtValue(0.5, "s"), "0.500 s");
  assert.equal(fmtValue(0.000123, "s"), "1.23e-4 s");
  assert.equal(fmtValue(3e7), "3e7");
  assert.equal(fmtValue(12345678), "1.23e7");
  assert.equal(fmtValue(0, "GiB"), "0 GiB");
  assert.equal(fmtValue(7, "count"), "7.00");
  assert.equal(fmtValue(-2.5, "°C"), "-2.50 °C");
  assert.equal(fmtValue(null, "%"), DASH);
  assert.equal(fmtValue(Number.POSITIVE_INFINITY), DASH);
});

test("fmtTick writes short axis labels", () => {
  assert.equal(fmtTick(0), "0");
  assert.equal(fmtTick(0.25), "0.25");
  assert.equal(fmtTick(2000), "2000");
  assert.equal(fmtTick(0.1 + 0.2), "0.3"); // float noise trimmed
  assert.equal(fmtTick(0.0001), "1e-4");
  assert.equal(fmtTick(25000000), "2.5e7");
  assert.equal(fmtTick(-0.00015), "-1.5e-4");
});
