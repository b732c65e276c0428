// Test and benchmark hooks: `window.__tunescope` describes what the page last drew, and
// performance marks time it: "chart-drawn" once, when the main chart first drew data,
// "chart-complete" when it first drew data and its markers, and "scalars-drawn" when the
// Training or Evaluation tab first drew its charts. Every chart (the main one and each
// stacked comparison chart) also counts its draws (`draws`) and the performance.now() of its
// first draw with data (`firstDrawn`), so a benchmark can wait for all of them at once
// (`waitForCharts`).

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
  /** per host and device (then the trial's line across hosts: host null, mode "total" or
   *  "mean"): its legend label, points drawn, the largest value (band top), the x of the last
   *  point */
  series: { device: string | null; host: string | null; label: string; mode: string; count: number;
            max: number | null; last: number | null }[];
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

export interface ServingInfo {
  run: number;
  /** the levels drawn, in order */
  levels: number[];
  /** per chart (ttft, tpot, e2el, throughput): its lines' labels and the SLO line's value
   *  (seconds; null: no SLO line) */
  charts: Record<string, { lines: string[]; slo: number | null }>;
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
  /** the Serving tab, once its charts drew */
  serving: ServingInfo | null;
  /** the runs list: loads so far, and each run's finding counts (null: not computed yet) */
  runs: { loads: number; findings: Record<string, { high: number; moderate: number; low: number } | null> };
  /** resolves with the first main-chart draw after the `after`-th (complete: with markers) */
  waitForDraw(after: number, complete?: boolean): Promise<DrawInfo>;
  /** draws of fetched data so far, per chart id ("main", "cmp-<trial>-<metric>") */
  draws: Record<string, number>;
  /** performance.now() of each chart's first draw that showed data */
  firstDrawn: Record<string, number>;
  /** resolves with performance.now() once every chart named in `after` has drawn more often
   *  than `after` says (complete: and its last draw had its markers) */
  waitForCharts(after: Record<string, number>, complete?: boolean): Promise<number>;
}

const waiters: { after: number; complete: boolean; resolve: (d: DrawInfo) => void }[] = [];
const chartWaiters: { after: Record<string, number>; complete: boolean; resolve: (t: number) => void }[] = [];

function chartsDone(after: Record<string, number>, complete: boolean): boolean {
  return Object.entries(after).every(([id, n]) =>
    (hooks.draws[id] ?? 0) > n && (!complete || hooks.charts[id]?.complete === true));
}

export const hooks: Hooks = {
  version: 1,
  drawCount: 0,
  lastDraw: null,
  charts: {},
  polls: 0,
  live: false,
  errors: [],
  findings: null,
  serving: null,
  runs: { loads: 0, findings: {} },
  waitForDraw(after: number, complete = false): Promise<DrawInfo> {
    const last = hooks.lastDraw;
    if (hooks.drawCount > after && last && (last.complete || !complete)) return Promise.resolve(last);
    return new Promise((resolve) => waiters.push({ after, complete, resolve }));
  },
  draws: {},
  firstDrawn: {},
  waitForCharts(after: Record<string, number>, complete = false): Promise<number> {
    if (chartsDone(after, complete)) return Promise.resolve(performance.now());
    return new Promise((resolve) => chartWaiters.push({ after, complete, resolve }));
  },
};
(window as unknown as { __tunescope: Hooks }).__tunescope = hooks;

let firstMarked = false;
let firstComplete = false;

export function recordDraw(info: DrawInfo): void {
  hooks.charts[info.chart] = info;
  hooks.draws[info.chart] = (hooks.draws[info.chart] ?? 0) + 1;
  if (!(info.chart in hooks.firstDrawn) && info.series.some((s) => s.count > 0)) {
    hooks.firstDrawn[info.chart] = performance.now();
  }
  for (let i = chartWaiters.length - 1; i >= 0; i--) {
    const w = chartWaiters[i];
    if (chartsDone(w.after, w.complete)) chartWaiters.splice(i, 1)[0].resolve(performance.now());
  }
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

let scalarsMarked = false;

/** The Training or Evaluation tab drew its charts (the first time only: a performance mark). */
export function recordScalarsDrawn(): void {
  if (scalarsMarked) return;
  scalarsMarked = true;
  performance.mark("scalars-drawn");
}

export function recordError(message: string): void {
  hooks.errors.push(message);
}
