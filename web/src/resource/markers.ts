// Optimizer-step (green) and evaluation (orange) markers, drawn on a uPlot canvas by its draw
// hooks. When the API answers bins (too many events for the window), density strips whose
// opacity follows the counts are drawn instead, so no step is ever dropped from view.

import type uPlot from "uplot";
import type { EventBin, EventItem, EventsWindow } from "../api";
import { fmtElapsed } from "../format";
import type { MarkerStats } from "../hooks";

export const STEP_COLOR = "#1a9b50";
export const EVAL_COLOR = "#f08c00";
const STEP_RGB = "26, 155, 80";
const EVAL_RGB = "240, 140, 0";

export interface MarkerData {
  steps: EventsWindow | null;
  evals: EventsWindow | null;
}

export class MarkerLayer {
  data: MarkerData | null = null;
  /** epoch seconds of x = 0 */
  offset = 0;
  showSteps = true;
  showEvals = true;
  stats: MarkerStats = emptyStats(true, true);

  set(data: MarkerData | null, offset: number): void {
    this.data = data;
    this.offset = offset;
  }

  private stepEvents(): EventItem[] {
    return (this.data?.steps?.events ?? []).filter((e) => e.kind === "optimizer_step");
  }

  private evalEvents(): EventItem[] {
    return (this.data?.evals?.events ?? []).filter((e) => e.kind === "evaluation");
  }

  private bins(w: EventsWindow | null | undefined, kind: string): EventBin[] {
    return (w?.bins ?? []).filter((b) => b.kind === kind && b.count > 0);
  }

  /** drawAxes hook: evaluation intervals shaded behind the lines. */
  drawBehind(u: uPlot): void {
    if (!this.data || !this.showEvals) return;
    const { left, top, width, height } = u.bbox;
    const ctx = u.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.fillStyle = `rgba(${EVAL_RGB}, 0.13)`;
    for (const e of this.evalEvents()) {
      const [x0, x1] = this.span(u, e, true);
      if (x1 - x0 >= 1.5 * devicePixelRatio) ctx.fillRect(x0, top, x1 - x0, height);
    }
    ctx.restore();
  }

  /** draw hook: step ticks and lines, evaluation edges, density strips. */
  drawFront(u: uPlot): void {
    const dpr = devicePixelRatio;
    const stats = emptyStats(this.showSteps, this.showEvals);
    this.stats = stats;
    if (!this.data) return;
    const { left, top, width, height } = u.bbox;
    const bottom = top + height;
    const ctx = u.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    const css = (x: number) => x / dpr - left / dpr;

    if (this.showEvals) {
      for (const e of this.evalEvents()) {
        const [x0, x1] = this.span(u, e, true);
        if (x1 < left || x0 > left + width) continue;
        stats.evals += 1;
        if (stats.firstEvalX === null) stats.firstEvalX = [css(x0), css(x1)];
        ctx.fillStyle = EVAL_COLOR;
        if (x1 - x0 >= 1.5 * dpr) {
          ctx.fillRect(x0, top, x1 - x0, 4 * dpr);
          ctx.fillStyle = `rgba(${EVAL_RGB}, 0.7)`;
          ctx.fillRect(x0, top, dpr, height);
          ctx.fillRect(x1 - dpr, top, dpr, height);
        } else {
          ctx.strokeStyle = EVAL_COLOR;
          ctx.lineWidth = 1.5 * dpr;
          ctx.setLineDash([4 * dpr, 3 * dpr]);
          ctx.beginPath();
          ctx.moveTo(x0, top);
          ctx.lineTo(x0, bottom);
          ctx.stroke();
          ctx.setLineDash([]);
        }
      }
      const bins = this.bins(this.data.evals, "evaluation");
      stats.evalBins = this.strip(u, bins, EVAL_RGB, top, 5 * dpr);
    }

    if (this.showSteps) {
      const steps = this.stepEvents();
      const xs: number[] = [];
      for (const e of steps) {
        const x = u.valToPos(e.t - this.offset, "x", true);
        if (x >= left - 1 && x <= left + width + 1) xs.push(x);
      }
      stats.steps = xs.length;
      if (xs.length) stats.firstStepX = css(xs[0]);
      if (xs.length && xs.length < width / (6 * dpr)) {
        // sparse enough to read one by one: a faint full-height line for each
        ctx.strokeStyle = `rgba(${STEP_RGB}, 0.28)`;
        ctx.lineWidth = dpr;
        ctx.beginPath();
        for (const x of xs) {
          const px = Math.round(x) + 0.5;
          ctx.moveTo(px, top);
          ctx.lineTo(px, bottom);
        }
        ctx.stroke();
      }
      ctx.fillStyle = STEP_COLOR;
      const tick = 7 * dpr;
      for (const x of xs) ctx.fillRect(Math.round(x), bottom - tick, Math.max(1, dpr), tick);
      const bins = this.bins(this.data.steps, "optimizer_step");
      stats.stepBins = this.strip(u, bins, STEP_RGB, bottom - 8 * dpr, 8 * dpr);
      if (bins.length && stats.firstStepX === null) {
        stats.firstStepX = css(u.valToPos(bins[0].t0 - this.offset, "x", true));
      }
    }
    ctx.restore();
  }

  /** A strip of density cells, opacity following count / max count; returns cells drawn. */
  private strip(u: uPlot, bins: EventBin[], rgb: string, y: number, h: number): number {
    if (!bins.length) return 0;
    const ctx = u.ctx;
    const max = Math.max(...bins.map((b) => b.count));
    let drawn = 0;
    for (const b of bins) {
      const x0 = u.valToPos(b.t0 - this.offset, "x", true);
      const x1 = u.valToPos(b.t1 - this.offset, "x", true);
      if (x1 < u.bbox.left || x0 > u.bbox.left + u.bbox.width) continue;
      ctx.fillStyle = `rgba(${rgb}, ${(0.18 + 0.82 * (b.count / max)).toFixed(3)})`;
      ctx.fillRect(x0, y, Math.max(x1 - x0, devicePixelRatio), h);
      drawn += 1;
    }
    return drawn;
  }

  private span(u: uPlot, e: EventItem, canvas: boolean): [number, number] {
    const x0 = u.valToPos(e.t - this.offset, "x", canvas);
    const x1 = u.valToPos(e.t + (e.duration ?? 0) - this.offset, "x", canvas);
    return [x0, x1];
  }

  /** Tooltip lines for the cursor at `left` CSS px inside the plot; empty when none is near. */
  describe(u: uPlot, left: number): string[] {
    if (!this.data) return [];
    const lines: string[] = [];
    const near = 5;
    if (this.showEvals) {
      for (const e of this.evalEvents()) {
        const [x0, x1] = this.span(u, e, false);
        if (left >= x0 - near && left <= x1 + near) {
          const name = e.name ?? "evaluation";
          const step = e.step !== null ? ` at step ${e.step}` : "";
          const t0 = e.t - this.offset;
          const when = e.duration ? `${fmtElapsed(t0)} – ${fmtElapsed(t0 + e.duration)}`
            : fmtElapsed(t0);
          lines.push(`Evaluation “${name}”${step} · ${when}`);
        }
      }
      const at = u.posToVal(left, "x") + this.offset;
      for (const b of this.bins(this.data.evals, "evaluation")) {
        if (at >= b.t0 && at < b.t1) lines.push(`${b.count} evaluation${b.count === 1 ? "" : "s"} here`);
      }
    }
    if (this.showSteps) {
      const steps = this.stepEvents();
      if (steps.length) {
        const close = nearby(steps, (e) => u.valToPos(e.t - this.offset, "x"), left, near);
        if (close.length === 1) {
          const e = close[0];
          lines.push(`Optimizer step ${e.step ?? "?"} · ${fmtElapsed(e.t - this.offset, 1)}`);
        } else if (close.length > 1) {
          const a = close[0];
          const b = close[close.length - 1];
          lines.push(`Optimizer steps ${a.step ?? "?"}–${b.step ?? "?"} (${close.length}) · ` +
            `${fmtElapsed(a.t - this.offset)}`);
        }
      }
      const at = u.posToVal(left, "x") + this.offset;
      for (const b of this.bins(this.data.steps, "optimizer_step")) {
        if (at >= b.t0 && at < b.t1) {
          lines.push(`${b.count} optimizer step${b.count === 1 ? "" : "s"} · ` +
            `${fmtElapsed(b.t0 - this.offset)} – ${fmtElapsed(b.t1 - this.offset)}`);
        }
      }
    }
    return lines;
  }
}

/** Events (sorted by t) whose pixel position lies within `near` px of `left`. */
function nearby(events: EventItem[], px: (e: EventItem) => number, left: number,
                near: number): EventItem[] {
  let lo = 0;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (px(events[mid]) < left - near) lo = mid + 1;
    else hi = mid;
  }
  const out: EventItem[] = [];
  for (let i = lo; i < events.length && px(events[i]) <= left + near; i++) out.push(events[i]);
  return out;
}

function emptyStats(stepsShown: boolean, evalsShown: boolean): MarkerStats {
  return {
    steps: 0, stepBins: 0, evals: 0, evalBins: 0, stepsShown, evalsShown,
    firstStepX: null, firstEvalX: null,
  };
}
