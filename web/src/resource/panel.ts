// A chart bound to the API: fetches a window of one (trial, metric) — the series at the
// chart's pixel width as points, its sampler gaps, and for marker metrics its optimizer steps
// and evaluations — and draws it. A newer load cancels an older one still in flight.

import { api, type EventItem, isAbort, type MetricInfo, type Trial } from "../api";
import { recordError } from "../hooks";
import { type ChartOptions, MetricChart } from "./chart";
import type { Span } from "./span";

/** Most events one events request lists before it bins them (the API's limit). */
const MAX_EVENTS = 10000;

/** The gaps among `gaps` that reach into [start, end] (as the API selects them). */
function gapsIn(gaps: EventItem[], start: number, end: number): EventItem[] {
  return gaps.filter((g) => g.t <= end && g.t + (g.duration ?? 0) >= start);
}

/** One step of a redraw of several charts: each says when its series is drawn, and fetches
 *  its markers once `markers` resolves (when every chart's series is drawn). */
export class LoadStep {
  readonly markers: Promise<void>;
  private release: () => void = () => {};
  private sealed = false;
  private count = 0;

  constructor() {
    this.markers = new Promise((resolve) => { this.release = resolve; });
  }

  /** A chart's load joins the step (at once, when it starts); it calls drawn() once. */
  join(): void {
    this.count += 1;
  }

  drawn(): void {
    this.count -= 1;
    if (this.sealed && this.count <= 0) this.release();
  }

  /** Every chart has joined: release the markers once all have drawn. */
  seal(): void {
    this.sealed = true;
    if (this.count <= 0) this.release();
  }
}

export class SeriesPanel {
  readonly chart: MetricChart;
  private ctrl: AbortController | null = null;
  /** the trial whose markers the chart holds */
  private markersOf: number | null = null;
  /** the last load ended in an error (shown on the chart) */
  failed = false;
  /** a finished trial's sampler gaps, all of them (rare: one request per trial, not one per
   *  window); null when not fetched or too many to list */
  private gapsOf: { key: string; gaps: EventItem[] } | null = null;

  constructor(opts: ChartOptions) {
    this.chart = new MetricChart(opts);
  }

  get loading(): boolean {
    return this.ctrl !== null;
  }

  /** Fetch and draw; resolves false when a newer load superseded this one. `step`: when the
   *  tab redraws several charts at once, it is told when this one's series is drawn (or its
   *  load ended) and says when the markers may be fetched, so that no chart's series waits
   *  behind another's markers (dense ones cost the server far more than a series). */
  async load(trial: Trial, metric: MetricInfo, span: Span, offset: number,
             step: LoadStep | null = null): Promise<boolean> {
    step?.join();
    let told = false;
    const drawn = () => {
      if (!told) step?.drawn();
      told = true;
    };
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    const signal = ctrl.signal;
    const points = Math.min(10000, this.chart.plotWidth()); // the API's limit
    const start = offset + span.from;
    const end = offset + span.to;
    this.chart.setBusy(true);
    try {
      // the series, and the window's sampler gaps (rare, a short answer) beside it; the line
      // is drawn before the markers (which can be dense) arrive
      const [win, gaps] = await Promise.all([
        api.series(trial.id, metric.key, start, end, points, signal),
        this.gaps(trial, start, end, points, signal),
      ]);
      if (signal.aborted) return false;
      this.failed = false;
      const keep = metric.markers && this.markersOf === trial.id;
      this.chart.setData(win, metric, trial.id, offset, span,
        metric.markers ? (keep ? "keep" : "none") : null, gaps);
      this.markersOf = metric.markers ? trial.id : null;
      drawn();
      if (!metric.markers) return true;
      if (step) await step.markers;
      if (signal.aborted) return false;
      const [steps, evals] = await Promise.all([
        api.events(trial.id, start, end, ["optimizer_step"], points, signal),
        api.events(trial.id, start, end, ["evaluation"], points, signal),
      ]);
      if (signal.aborted) return false;
      this.chart.setMarkers({ steps, evals });
      return true;
    } catch (e) {
      if (isAbort(e) || signal.aborted) return false;
      const message = e instanceof Error ? e.message : String(e);
      this.failed = true;
      recordError(message);
      this.chart.setMessage(`Could not load ${metric.label} of ${trial.name}: ${message}`);
      return true;
    } finally {
      drawn();
      if (this.ctrl === ctrl) {
        this.ctrl = null;
        this.chart.setBusy(false);
      }
    }
  }

  /** The sampler gaps of [start, end]: a finished trial's from all of its gaps, fetched
   *  once; a running trial's (which may gain one any second) for this window. */
  private async gaps(trial: Trial, start: number, end: number, points: number,
                     signal: AbortSignal): Promise<EventItem[]> {
    if (trial.state !== "running") {
      const last = trial.end ?? trial.heartbeat ?? trial.start;
      const key = `${trial.id}|${trial.state}|${last}`; // a trial written again is fetched again
      if (this.gapsOf?.key !== key) {
        const all = await api.events(trial.id, trial.start, last, ["sampler_gap"], MAX_EVENTS,
          signal);
        this.gapsOf = all.events ? { key, gaps: all.events } : null;
      }
      if (this.gapsOf?.key === key) return gapsIn(this.gapsOf.gaps, start, end);
    }
    return (await api.events(trial.id, start, end, ["sampler_gap"], points, signal)).events ?? [];
  }

  cancel(): void {
    this.ctrl?.abort();
    this.ctrl = null;
  }

  destroy(): void {
    this.cancel();
    this.chart.destroy();
  }
}
