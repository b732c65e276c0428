// Sampler gaps: spans with no hardware samples because the trial's sampler died and was
// started again (`sampler_gap` events). Drawn on every metric's chart as a hatched grey band
// behind the lines, named in the tooltip, so a hole in a line is never mistaken for an idle
// machine.

import type uPlot from "uplot";
import type { EventItem } from "../api";
import { fmtElapsed } from "../format";

export interface GapStats {
  /** gaps drawn in view, and where the first lies (CSS px from the plot's left edge) */
  drawn: number;
  firstX: [number, number] | null;
}

export class GapLayer {
  events: EventItem[] = [];
  /** epoch seconds of x = 0 */
  offset = 0;
  /** whether the window's gaps have been fetched (the chart says null until then) */
  known = false;
  stats: GapStats = { drawn: 0, firstX: null };

  /** The window's gaps (null: not fetched yet; drawn as none meanwhile). */
  set(events: EventItem[] | null, offset: number): void {
    this.events = (events ?? []).filter((e) => e.kind === "sampler_gap");
    this.known = events !== null;
    this.offset = offset;
  }

  private span(u: uPlot, e: EventItem, canvas: boolean): [number, number] {
    return [
      u.valToPos(e.t - this.offset, "x", canvas),
      u.valToPos(e.t + (e.duration ?? 0) - this.offset, "x", canvas),
    ];
  }

  /** drawAxes hook: the bands, behind everything else. */
  draw(u: uPlot): void {
    const stats: GapStats = { drawn: 0, firstX: null };
    this.stats = stats;
    if (!this.events.length) return;
    const dpr = devicePixelRatio;
    const { left, top, width, height } = u.bbox;
    const ctx = u.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    for (const e of this.events) {
      const [x0, x1raw] = this.span(u, e, true);
      const x1 = Math.max(x1raw, x0 + 2 * dpr);
      if (x1 < left || x0 > left + width) continue;
      stats.drawn += 1;
      if (stats.firstX === null) stats.firstX = [x0 / dpr - left / dpr, x1 / dpr - left / dpr];
      ctx.fillStyle = "rgba(138, 143, 152, 0.16)";
      ctx.fillRect(x0, top, x1 - x0, height);
      ctx.strokeStyle = "rgba(138, 143, 152, 0.45)";
      ctx.lineWidth = dpr;
      ctx.beginPath();
      for (let x = x0 - height; x < x1; x += 8 * dpr) {
        ctx.moveTo(Math.max(x, x0), top + height - Math.max(0, x0 - x));
        ctx.lineTo(Math.min(x + height, x1), top + height - Math.min(height, x1 - x));
      }
      ctx.stroke();
    }
    ctx.restore();
  }

  /** Tooltip lines for the cursor at `left` CSS px inside the plot. */
  describe(u: uPlot, left: number): string[] {
    const lines: string[] = [];
    for (const e of this.events) {
      const [x0, x1] = this.span(u, e, false);
      if (left >= x0 - 4 && left <= Math.max(x1, x0 + 2) + 4) {
        const t0 = e.t - this.offset;
        const d = e.duration ?? 0;
        lines.push(`No samples ${fmtElapsed(t0)} – ${fmtElapsed(t0 + d)} (${d.toFixed(1)} s): ` +
          "the sampler died and was restarted");
      }
    }
    return lines;
  }
}
