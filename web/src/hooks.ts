// Test and benchmark hooks: `window.__tunescope` describes what the page last drew, and
// performance marks time it: "chart-drawn" once, when the main chart first drew data, and
// "chart-complete" when it first drew data and its markers.

export interface MarkerStats {
  /** optimizer-step events drawn, density bins drawn, and the same for evaluations */
  steps: number;
  stepBins: number;
  evals: number;
  evalBins: number;
  stepsShown: boolean;
  evalsShown: boolean;
  /** where the first drawn step / evaluation lie, CSS px from the plot's left edge */
  firstStepX: number | null;
  firstEvalX: [number, number] | null;
}

export interface DrawInfo {
  chart: string;
  metric: string;
  unit: string;
  trial: number;
  from: number;
  to: number;
  width: number;
  points: number;
  /** per device: points drawn, the largest value (band top), the x of the last point */
  series: { device: string | null; mode: string; count: number; max: number | null; last: number | null }[];
  yMax: number | null;
  markers: MarkerStats | null;
  /** sampler gaps drawn (null until the window's gaps were fetched) */
  gaps: { drawn: number; firstX: [number, number] | null } | null;
  /** false for the first draw of a window whose markers are still being fetched */
  complete: boolean;
  seq: number;
}

export interface FindingsInfo {
  run: number;
  /** completed loads of the run's findings (each poll counts) */
  loads: number;
  /** the findings listed, in the panel's order; t0/t1 in epoch seconds */
  items: { id: string; trial: number; rule: string; severity: string; metric: string | null;
           device: string | null; t0: number | null; t1: number | null }[];
  counts: { high: number; moderate: number; low: number } | null;
  /** the finding last chosen in the panel, while the chart still shows its metric and trial */
  active: string | null;
  error: string | null;
}

interface Hooks {
  version: 1;
  drawCount: number;
  lastDraw: DrawInfo | null;
  charts: Record<string, DrawInfo>;
  polls: number;
  live: boolean;
  errors: string[];
  /** the Resource Utilization tab's findings panel */
  findings: FindingsInfo | null;
  /** the runs list: loads so far, and each run's finding counts (null: not computed yet) */
  runs: { loads: number; findings: Record<string, { high: number; moderate: number; low: number } | null> };
  /** resolves with the first main-chart draw after the `after`-th (complete: with markers) */
  waitForDraw(after: number, complete?: boolean): Promise<DrawInfo>;
}

const waiters: { after: number; complete: boolean; resolve: (d: DrawInfo) => void }[] = [];

export const hooks: Hooks = {
  version: 1,
  drawCount: 0,
  lastDraw: null,
  charts: {},
  polls: 0,
  live: false,
  errors: [],
  findings: null,
  runs: { loads: 0, findings: {} },
  waitForDraw(after: number, complete = false): Promise<DrawInfo> {
    const last = hooks.lastDraw;
    if (hooks.drawCount > after && last && (last.complete || !complete)) return Promise.resolve(last);
    return new Promise((resolve) => waiters.push({ after, complete, resolve }));
  },
};
(window as unknown as { __tunescope: Hooks }).__tunescope = hooks;

let firstMarked = false;
let firstComplete = false;

export function recordDraw(info: DrawInfo): void {
  hooks.charts[info.chart] = info;
  if (info.chart !== "main") return;
  hooks.drawCount += 1;
  info.seq = hooks.drawCount;
  hooks.lastDraw = info;
  if (!firstMarked && info.series.some((s) => s.count > 0)) {
    firstMarked = true;
    performance.mark("chart-drawn");
  }
  if (!firstComplete && info.complete && info.series.some((s) => s.count > 0)) {
    firstComplete = true;
    performance.mark("chart-complete");
  }
  for (let i = waiters.length - 1; i >= 0; i--) {
    const w = waiters[i];
    if (hooks.drawCount > w.after && (info.complete || !w.complete)) waiters.splice(i, 1)[0].resolve(info);
  }
}

export function recordError(message: string): void {
  hooks.errors.push(message);
}
