// A trial that ran on several hosts (a multi-node job: a sampler per node) has a series per
// host and device. The chart draws a line for each, labelled "host · GPU 0" (as before, "GPU 0",
// when the trial ran on one host), and one more for the trial as a whole: the total across
// hosts where adding up makes sense (memory, power, energy, throughput in bytes, counts), the
// mean where it does not (percentages, temperatures, clocks, times). No DOM: unit-tested in
// web/test/hosts.test.ts.

import type { DeviceSeries, MetricInfo, SeriesWindow } from "../api";

/** Display units whose values add up across hosts into the trial's total. */
const SUMMED_UNITS = new Set(["GiB", "MiB/s", "W", "kJ", "cores", "count"]);
/** Display units that do not aggregate at all (a bitmask's mean or sum means nothing). */
const NOT_AGGREGATED = new Set(["bitmask"]);

export type Aggregation = "total" | "mean";

/** How a metric's series combine into the trial's line: null when they do not. */
export function aggregation(metric: Pick<MetricInfo, "unit">): Aggregation | null {
  if (NOT_AGGREGATED.has(metric.unit)) return null;
  return SUMMED_UNITS.has(metric.unit) ? "total" : "mean";
}

/** The hosts of a window's series, each once, in the window's order (by host). */
export function hostsOf(series: Pick<DeviceSeries, "host">[]): string[] {
  return [...new Set(series.map((s) => s.host))];
}

/** A series' legend label: `device` (the device's own label) alone for a one-host trial,
 *  else "host · device", or the host alone for a trial-wide series. */
export function seriesLabel(host: string, device: string | null, deviceText: string,
                            multiHost: boolean): string {
  if (!multiHost) return deviceText;
  return device === null || device === "" ? host : `${host} · ${deviceText}`;
}

/** The aggregate line's label: "Total (2 hosts)" or "Mean (2 hosts)". */
export function aggregateLabel(kind: Aggregation, hosts: number): string {
  return `${kind === "total" ? "Total" : "Mean"} (${hosts} hosts)`;
}

/** Median of the positive gaps between successive times (sampled for long arrays). */
export function medianStep(t: number[]): number {
  const d: number[] = [];
  const stride = Math.max(1, Math.floor(t.length / 512));
  for (let i = stride; i < t.length; i += stride) d.push((t[i] - t[i - stride]) / stride);
  if (!d.length) return 0;
  d.sort((a, b) => a - b);
  return d[d.length >> 1];
}

/** Longest gap between two successive points of `s` that a line still joins (the chart breaks
 *  the line at a longer one: missing is never drawn). */
export function gapLimit(s: Pick<DeviceSeries, "t" | "mode">, bucket: number): number {
  const step = medianStep(s.t);
  return s.mode === "buckets" ? 2.5 * Math.max(bucket, step) : 3 * Math.max(step, 1e-3);
}

/** The trial's line across every series of the window (base units, like the window): on a
 *  grid of cells as wide as the window's buckets (or the samples' step, when coarser), each
 *  series counts in a cell with the mean of its values there, or, between two of its points
 *  that its line joins, with the last value before the cell; a cell's value is the sum
 *  ("total") or the mean of the series counted in it. Cells no series counts in are left out,
 *  and a null breaks the line where they are. `t` is each cell's midpoint. */
export function aggregate(win: Pick<SeriesWindow, "start" | "end" | "points" | "series">,
                          kind: Aggregation): { t: number[]; v: (number | null)[] } {
  const span = Math.max(win.end - win.start, 1e-9);
  const bucket = span / Math.max(1, win.points);
  let width = bucket;
  for (const s of win.series) width = Math.max(width, medianStep(s.t));
  const cells = Math.max(1, Math.min(100_000, Math.ceil(span / width)));
  width = span / cells;
  const sum = new Float64Array(cells);
  const count = new Int32Array(cells);
  const cellOf = (t: number) => Math.min(cells - 1, Math.max(0, Math.floor((t - win.start) / width)));
  for (const s of win.series) {
    const own = new Float64Array(cells);
    const ownN = new Int32Array(cells);
    const pts: [number, number][] = [];
    s.t.forEach((t, j) => {
      const v = s.mean[j];
      if (v === null || v === undefined) return;
      own[cellOf(t)] += v;
      ownN[cellOf(t)] += 1;
      pts.push([t, v]);
    });
    if (!pts.length) continue;
    const limit = gapLimit(s, bucket);
    let p = 0; // the last point at or before the cell
    for (let c = cellOf(pts[0][0]); c <= cellOf(pts[pts.length - 1][0]); c++) {
      const mid = win.start + (c + 0.5) * width;
      while (p + 1 < pts.length && pts[p + 1][0] <= mid) p++;
      let v: number | null = null;
      if (ownN[c] > 0) v = own[c] / ownN[c];
      else if (p + 1 < pts.length && pts[p + 1][0] - pts[p][0] <= limit) v = pts[p][1];
      if (v === null) continue;
      sum[c] += v;
      count[c] += 1;
    }
  }
  const t: number[] = [];
  const v: (number | null)[] = [];
  let last = -2;
  for (let c = 0; c < cells; c++) {
    if (!count[c]) continue;
    if (last >= 0 && c > last + 1) {
      t.push(win.start + (c - 0.5) * width);
      v.push(null);
    }
    t.push(win.start + (c + 0.5) * width);
    v.push(kind === "total" ? sum[c] : sum[c] / count[c]);
    last = c;
  }
  return { t, v };
}
