// One metric of one trial as a uPlot chart: a line per device (the mean), the min–max band
// where the window is bucketed, gaps where samples are missing, markers from a MarkerLayer,
// drag-to-zoom, a legend with the values under the cursor and a tooltip for markers.

import uPlot from "uplot";
import type { EventItem, MetricInfo, SeriesWindow } from "../api";
import { h, replace } from "../dom";
import { ELAPSED_INCRS, fmtElapsed, fmtTick, fmtValue } from "../format";
import { type DrawInfo, recordDraw } from "../hooks";
import { GapLayer } from "./gaps";
import { aggregate, aggregateLabel, aggregation, gapLimit, hostsOf, seriesLabel } from "./hosts";
import { type MarkerData, MarkerLayer } from "./markers";
import type { Span } from "./span";

export const PALETTE = ["#2563eb", "#7c3aed", "#0891b2", "#db2777", "#475569", "#a16207",
  "#4338ca", "#dc2626"];

export function rgba(hex: string, alpha: number): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

export function deviceLabel(metric: MetricInfo, device: string | null): string {
  if (metric.scope === "gpu") return device === null ? "GPU" : `GPU ${device}`;
  if (device !== null && device !== "") return device;
  if (metric.scope === "netns") return "Network namespace";
  return metric.scope === "host" ? "Host" : "Trial";
}

/** The trial's line across hosts: drawn dashed, darker, without a band. */
export const AGGREGATE_COLOR = "#111827";

interface DeviceMeta {
  device: string | null;
  /** the host that measured it; null for the trial's line across hosts */
  host: string | null;
  label: string;
  note: string | null;
  /** damaged chunks the server could not decode in this window */
  damaged: number;
  mode: string;
  count: number;
  max: number | null;
  last: number | null;
  color: string;
}

export interface ChartOptions {
  id: string;
  height: number;
  syncKey?: string;
  /** a span drag-selected on the plot, in x units */
  onSelect?: (span: Span) => void;
  /** the plot's width changed enough that its data should be fetched again */
  onResize?: () => void;
  /** a short chart (the stacked view): the y axis is labelled with the unit only */
  compact?: boolean;
}

interface Shaped {
  data: uPlot.AlignedData;
  devices: DeviceMeta[];
}

/** The API's window as uPlot columns: x, then mean/min/max per host and device (display
 *  units), then, for a trial that ran on several hosts, its total or mean across them (its
 *  min/max columns empty). */
export function shape(win: SeriesWindow, metric: MetricInfo, offset: number): Shaped {
  const tables: uPlot.AlignedData[] = [];
  const devices: DeviceMeta[] = [];
  const k = metric.scale;
  const bucket = (win.end - win.start) / Math.max(1, win.points);
  const hosts = hostsOf(win.series);
  const multiHost = hosts.length > 1;
  win.series.forEach((s, i) => {
    const x: number[] = [];
    const mean: (number | null)[] = [];
    const lo: (number | null)[] = [];
    const hi: (number | null)[] = [];
    const gap = gapLimit(s, bucket);
    let max: number | null = null;
    for (let j = 0; j < s.t.length; j++) {
      if (j > 0 && s.t[j] - s.t[j - 1] > gap) {
        // a hole in the samples: a null breaks the line (missing is never drawn as zero)
        x.push((s.t[j] + s.t[j - 1]) / 2 - offset);
        mean.push(null);
        lo.push(null);
        hi.push(null);
      }
      const m = s.mean[j];
      const a = s.min ? s.min[j] : null;
      const b = s.max ? s.max[j] : null;
      x.push(s.t[j] - offset);
      mean.push(m === null ? null : m * k);
      lo.push(a === null ? null : a * k);
      hi.push(b === null ? null : b * k);
      const top = b ?? m;
      if (top !== null && (max === null || top * k > max)) max = top * k;
    }
    tables.push([x, mean, lo, hi] as uPlot.AlignedData);
    devices.push({
      device: s.device, host: s.host,
      label: seriesLabel(s.host, s.device, deviceLabel(metric, s.device), multiHost),
      note: s.note, damaged: s.corrupt_chunks ?? 0, mode: s.mode,
      count: s.t.length, max, last: s.t.length ? s.t[s.t.length - 1] - offset : null,
      color: PALETTE[i % PALETTE.length],
    });
  });
  const kind = aggregation(metric);
  if (multiHost && kind !== null) {
    const agg = aggregate(win, kind);
    const x = agg.t.map((t) => t - offset);
    const v = agg.v.map((a) => (a === null ? null : a * k));
    const none = v.map(() => null);
    tables.push([x, v, none, none] as uPlot.AlignedData);
    let max: number | null = null;
    for (const a of v) if (a !== null && (max === null || a > max)) max = a;
    devices.push({
      device: null, host: null, label: aggregateLabel(kind, hosts.length), note: null,
      damaged: 0, mode: kind, count: x.length, max,
      last: x.length ? x[x.length - 1] : null, color: AGGREGATE_COLOR,
    });
  }
  if (!tables.length) return { data: [[]], devices };
  return { data: tables.length === 1 ? tables[0] : uPlot.join(tables), devices };
}

export class MetricChart {
  readonly el: HTMLElement;
  readonly markers = new MarkerLayer();
  readonly gaps = new GapLayer();
  private readonly plotEl: HTMLElement;
  private readonly legendEl: HTMLElement;
  private readonly tipEl: HTMLElement;
  private readonly msgEl: HTMLElement;
  private u: uPlot | null = null;
  private layout = "";
  private span: Span = { from: 0, to: 1 };
  private metric: MetricInfo | null = null;
  private devices: DeviceMeta[] = [];
  private info: DrawInfo | null = null;
  private pending = false;
  private readonly ro: ResizeObserver;
  private lastWidth = 0;
  private resizeTimer = 0;

  constructor(private readonly opts: ChartOptions) {
    this.plotEl = h("div", { class: "chart-plot" });
    this.msgEl = h("div", { class: "chart-msg", hidden: true, role: "status" });
    this.tipEl = h("div", { class: "chart-tip", role: "tooltip", hidden: true });
    this.legendEl = h("div", { class: "chart-legend", "aria-live": "off" });
    this.el = h("div", { class: "chart", "data-chart": opts.id },
      h("div", { class: "chart-busy", "aria-hidden": "true" }), this.plotEl, this.msgEl,
      this.legendEl);
    this.plotEl.style.height = `${opts.height}px`;
    this.ro = new ResizeObserver(() => this.resized());
    this.ro.observe(this.plotEl);
  }

  /** Width of the plotting area in CSS px: how many points a fetch should ask for. */
  plotWidth(): number {
    if (this.u) return Math.max(50, Math.round(this.u.bbox.width / devicePixelRatio));
    return Math.max(50, (this.plotEl.clientWidth || 800) - 80);
  }

  setBusy(busy: boolean): void {
    this.el.classList.toggle("is-busy", busy);
  }

  /** Show a message over the plot (no data, an error); null hides it. */
  setMessage(text: string | null): void {
    this.msgEl.hidden = text === null;
    this.msgEl.textContent = text ?? "";
  }

  /** Rescale the x axis at once, before new data arrive (instant feedback on zoom/page). */
  showSpan(span: Span): void {
    this.span = { ...span };
    if (this.u) this.u.setScale("x", { min: span.from, max: span.to });
  }

  /** Draw a window. `markers`: null for a metric without markers, "none" to clear them until
   *  setMarkers brings them, "keep" to keep drawing the previous ones (same trial) meanwhile.
   *  `gaps`: the window's sampler gaps (every metric shows them), null when not known. */
  setData(win: SeriesWindow, metric: MetricInfo, trial: number, offset: number, span: Span,
          markers: "keep" | "none" | null, gaps: EventItem[] | null = null): void {
    const shaped = shape(win, metric, offset);
    this.metric = metric;
    this.devices = shaped.devices;
    this.span = { ...span };
    if (markers === "keep") this.markers.offset = offset; // marker times are epoch seconds
    else this.markers.set(null, offset);
    this.gaps.set(gaps, offset);
    const layout = `${metric.key}|${shaped.devices.map((d) => d.label).join(",")}`;
    this.info = {
      chart: this.opts.id, metric: metric.key, unit: metric.unit, trial, from: span.from,
      to: span.to, width: this.plotWidth(), points: win.points,
      series: shaped.devices.map((d) => ({
        device: d.device, host: d.host, label: d.label, mode: d.mode, count: d.count, max: d.max,
        last: d.last,
      })),
      yMax: null, markers: null, gaps: null, seq: 0, complete: markers === null,
    };
    this.pending = true;
    if (!this.u || layout !== this.layout) {
      this.build(metric, shaped);
      this.layout = layout;
    } else {
      this.u.setData(shaped.data, true); // the x range function returns this.span
    }
    const empty = shaped.devices.every((d) => d.count === 0);
    this.setMessage(empty ? `No samples of ${metric.label} in this window` : null);
    this.renderLegend();
  }

  /** The window's markers have arrived: draw them (recorded as the complete draw). */
  setMarkers(data: MarkerData): void {
    if (!this.u || !this.info) return;
    this.markers.set(data, this.markers.offset);
    this.info = { ...this.info, complete: true };
    this.redraw();
  }

  /** Redraw without new data (marker toggles); recorded like a data draw. */
  redraw(): void {
    if (!this.u) return;
    this.pending = this.info !== null;
    this.u.redraw(false, false);
  }

  destroy(): void {
    this.ro.disconnect();
    window.clearTimeout(this.resizeTimer);
    this.u?.destroy();
    this.u = null;
  }

  private build(metric: MetricInfo, shaped: Shaped): void {
    this.u?.destroy();
    const series: uPlot.Series[] = [{}];
    const bands: uPlot.Band[] = [];
    shaped.devices.forEach((d, i) => {
      const total = d.host === null;
      series.push({ label: d.label, stroke: d.color, width: total ? 2 : 1.5, spanGaps: false,
        dash: total ? [6, 4] : undefined });
      // the band's edges are drawn too (faintly): a one-bucket spike is then still a line
      const edge = { stroke: rgba(d.color, 0.45), width: 1, spanGaps: false, points: { show: false } };
      series.push({ label: `${d.label} min`, ...edge });
      series.push({ label: `${d.label} max`, ...edge });
      bands.push({ series: [3 * i + 3, 3 * i + 2], fill: rgba(d.color, 0.16) });
    });
    const fixedTop = metric.max_value;
    const width = Math.max(200, this.plotEl.clientWidth || 800);
    this.lastWidth = width;
    const opts: uPlot.Options = {
      width,
      height: this.opts.height,
      legend: { show: false },
      padding: [12, 28, 0, 4],
      series,
      bands,
      scales: {
        x: { time: false, range: () => [this.span.from, this.span.to] },
        y: {
          range: (_u, lo, hi) => {
            let top = hi === null || !Number.isFinite(hi) ? 0 : hi;
            top = fixedTop !== null ? Math.max(fixedTop, top) : top > 0 ? top * 1.1 : 1;
            const bottom = lo !== null && Number.isFinite(lo) && lo < 0 ? lo * 1.1 : 0;
            return [bottom, top];
          },
        },
      },
      axes: [
        {
          stroke: "#5b6675",
          grid: { stroke: "#eef1f5", width: 1 },
          ticks: { stroke: "#d5dae1", width: 1, size: 4 },
          incrs: ELAPSED_INCRS,
          space: 70,
          values: (_u, splits, _ax, _space, incr) =>
            splits.map((v) => fmtElapsed(v, incr < 1 ? 1 : 0)),
        },
        {
          stroke: "#5b6675",
          grid: { stroke: "#eef1f5", width: 1 },
          ticks: { stroke: "#d5dae1", width: 1, size: 4 },
          label: this.opts.compact ? metric.unit : `${metric.label} (${metric.unit})`,
          labelSize: 18,
          labelFont: "12px system-ui, sans-serif",
          size: 56,
          values: (_u, splits) => splits.map((v) => fmtTick(v)),
        },
      ],
      cursor: {
        drag: { x: true, y: false, setScale: false },
        sync: this.opts.syncKey ? { key: this.opts.syncKey, setSeries: false } : undefined,
        points: { size: 6 },
      },
      hooks: {
        drawAxes: [(u) => this.gaps.draw(u), (u) => this.markers.drawBehind(u)],
        draw: [(u) => this.drawn(u)],
        setSelect: [(u) => this.selected(u)],
        setCursor: [(u) => this.cursorMoved(u)],
      },
    };
    this.u = new uPlot(opts, shaped.data, this.plotEl);
    this.u.over.appendChild(this.tipEl);
  }

  private drawn(u: uPlot): void {
    this.markers.drawFront(u);
    if (!this.pending || !this.info) return;
    this.pending = false;
    const info: DrawInfo = {
      ...this.info,
      yMax: u.scales.y.max ?? null,
      markers: this.markers.data ? { ...this.markers.stats } : null,
      gaps: this.gaps.known ? { ...this.gaps.stats } : null,
    };
    this.el.dataset.drawn = String(Number(this.el.dataset.drawn ?? 0) + 1);
    recordDraw(info);
  }

  private selected(u: uPlot): void {
    const { left, width } = u.select;
    if (width > 3 && this.opts.onSelect) {
      const from = u.posToVal(left, "x");
      const to = u.posToVal(left + width, "x");
      this.opts.onSelect({ from, to });
    }
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
  }

  private cursorMoved(u: uPlot): void {
    this.renderLegend(u);
    const left = u.cursor.left ?? -1;
    const lines = left >= 0 ? [...this.gaps.describe(u, left), ...this.markers.describe(u, left)] : [];
    if (!lines.length) {
      this.tipEl.hidden = true;
      return;
    }
    replace(this.tipEl, ...lines.map((l) => h("div", {}, l)));
    this.tipEl.hidden = false;
    const w = u.over.clientWidth;
    const x = left + 14 + this.tipEl.offsetWidth > w ? left - 14 - this.tipEl.offsetWidth : left + 14;
    this.tipEl.style.left = `${Math.max(0, x)}px`;
    this.tipEl.style.top = `${Math.max(0, (u.cursor.top ?? 0) - 10)}px`;
  }

  private renderLegend(u: uPlot | null = this.u): void {
    const metric = this.metric;
    if (!metric) return;
    const idx = u?.cursor.idx ?? null;
    const hovering = u !== null && idx !== null && idx !== undefined && (u.cursor.left ?? -1) >= 0;
    const items = this.devices.map((d, i) => {
      let text = "";
      if (u) {
        const si = 1 + 3 * i;
        const col = u.data[si] as (number | null | undefined)[];
        let di: number | null | undefined = hovering ? (u.cursor.idxs?.[si] ?? idx) : null;
        if (!hovering) {
          for (let j = col.length - 1; j >= 0; j--) if (col[j] != null) { di = j; break; }
        }
        if (di !== null && di !== undefined && col[di] != null) {
          text = fmtValue(col[di], metric.unit);
          const lo = (u.data[si + 1] as (number | null | undefined)[])[di];
          const hi = (u.data[si + 2] as (number | null | undefined)[])[di];
          if (lo != null && hi != null && hi !== lo) {
            text += ` (${fmtValue(lo)}–${fmtValue(hi)})`;
          }
        }
      }
      const damage = d.damaged
        ? `${d.damaged} damaged chunk${d.damaged === 1 ? "" : "s"} of stored samples could not ` +
          "be read: shown as one coarser bucket each, or missing at the window's edges"
        : "";
      return h("span", { class: "legend-item", title: [d.note, damage].filter(Boolean).join("; ") },
        h("span", { class: d.host === null ? "swatch swatch-dashed" : "swatch", style: `--c:${d.color}` }),
        h("span", { class: "legend-label" },
          d.label + (d.damaged ? " (damaged)" : d.note ? " *" : "")),
        h("span", { class: "legend-value" }, text || "—"));
    });
    const x = hovering && u ? u.posToVal(u.cursor.left ?? 0, "x") : null;
    const when = h("span", { class: "legend-when" }, x === null ? "latest" : `at ${fmtElapsed(x)}`);
    replace(this.legendEl, when, items);
  }

  private resized(): void {
    if (!this.u) return;
    const width = Math.max(200, this.plotEl.clientWidth);
    if (width === this.lastWidth) return;
    const grew = Math.abs(width - this.lastWidth) / this.lastWidth > 0.1;
    this.lastWidth = width;
    this.u.setSize({ width, height: this.opts.height });
    if (grew && this.opts.onResize) {
      window.clearTimeout(this.resizeTimer);
      this.resizeTimer = window.setTimeout(() => this.opts.onResize?.(), 250);
    }
  }
}
