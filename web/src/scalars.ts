// The Training and Evaluation tabs: one chart per scalar (loss, learning rate…, or the
// `eval/` ones) with a line per trial against the optimizer step, and a trials table.

import uPlot from "uplot";
import { api, type RunDetail, type ScalarPoint } from "./api";
import { h, replace } from "./dom";
import { fmtDuration, fmtElapsed, fmtTick, fmtValue } from "./format";
import { recordScalarsDrawn } from "./hooks";
import { PALETTE } from "./resource/chart";
import { message, stateBadge, table } from "./widgets";

type Kind = "training" | "evaluation";

/** Scalars of each name and trial a chart asks for (the API thins longer curves, keeping
 *  each stretch's lowest and highest value and the latest). */
const CURVE_POINTS = 2000;

function order(name: string): number {
  if (/loss/i.test(name)) return 0;
  if (/(^|[/_.])(lr|learning_rate)$/i.test(name)) return 1;
  return 2;
}

function paramsText(params: Record<string, unknown>): string {
  return Object.entries(params).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(", ") || "—";
}

/** A card chart's size: the card's width less its padding, 220 px high. */
export function cardSize(el: HTMLElement): { width: number; height: number } {
  return { width: Math.max(200, el.clientWidth - 32), height: 220 };
}

/** Resizes a card's chart (once drawn) with the card. */
export function watchSize(el: HTMLElement, chart: () => uPlot | null): ResizeObserver {
  return new ResizeObserver(() => chart()?.setSize(cardSize(el)));
}

/** A card chart's axes: x labelled `xLabel` (its ticks compact too with `xTicks`), y with
 *  compact ticks. */
export function cardAxes(xLabel: string, xTicks = false): uPlot.Axis[] {
  const compact = (_u: uPlot, splits: number[]) => splits.map((v) => fmtTick(v));
  return [
    { stroke: "#5b6675", grid: { stroke: "#eef1f5" }, label: xLabel, labelSize: 16,
      labelFont: "12px system-ui, sans-serif", ...(xTicks ? { values: compact } : {}) },
    { stroke: "#5b6675", grid: { stroke: "#eef1f5" }, size: 56, values: compact },
  ];
}

class ScalarChart {
  readonly el: HTMLElement;
  private u: uPlot | null = null;
  private readonly ro: ResizeObserver;

  constructor(private readonly name: string, private readonly run: RunDetail,
              private readonly byTrial: ScalarPoint[][]) {
    this.el = h("div", { class: "card scalar-card", "data-scalar": name });
    this.ro = watchSize(this.el, () => this.u);
  }

  mount(): void {
    const tables: uPlot.AlignedData[] = [];
    const labels: { name: string; color: string; last: number | null }[] = [];
    this.run.trials.forEach((t, i) => {
      const pts = this.byTrial[i].filter((s) => s.name === this.name);
      if (!pts.length) return;
      const xs = pts.map((p, j) => p.step ?? j);
      const idx = xs.map((_, j) => j).sort((a, b) => xs[a] - xs[b]);
      tables.push([idx.map((j) => xs[j]), idx.map((j) => pts[j].value)] as uPlot.AlignedData);
      labels.push({ name: t.name, color: PALETTE[i % PALETTE.length], last: pts[pts.length - 1].value });
    });
    const legend = h("div", { class: "chart-legend" }, labels.map((l) =>
      h("span", { class: "legend-item" }, h("span", { class: "swatch", style: `--c:${l.color}` }),
        h("span", { class: "legend-label" }, l.name), h("span", { class: "legend-value" }, fmtValue(l.last)))));
    const plot = h("div", { class: "chart-plot" });
    replace(this.el, h("h3", { class: "scalar-title" }, this.name), plot, legend);
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    this.u = new uPlot({
      ...cardSize(this.el),
      legend: { show: false },
      cursor: { sync: { key: "tunescope-step" }, drag: { x: true, y: false } },
      scales: { x: { time: false } },
      hooks: { draw: [() => recordScalarsDrawn()] },
      series: [{}, ...labels.map((l) => ({ label: l.name, stroke: l.color, width: 1.5, spanGaps: true }))],
      axes: cardAxes("step"),
    }, data, plot);
    this.ro.observe(this.el);
  }

  destroy(): void {
    this.ro.disconnect();
    this.u?.destroy();
  }
}

export class ScalarsTab {
  readonly el: HTMLElement;
  private charts: ScalarChart[] = [];
  private dead = false;

  constructor(private readonly run: RunDetail, private readonly kind: Kind) {
    this.el = h("div", { class: "scalars-tab" }, message("info", "Loading scalars…"));
  }

  start(): void {
    void this.load();
  }

  destroy(): void {
    this.dead = true;
    for (const c of this.charts) c.destroy();
  }

  private async load(): Promise<void> {
    let byTrial: ScalarPoint[][];
    try {
      // thinned to what a chart can show: a long trial logs tens of thousands per name
      byTrial = (await Promise.all(this.run.trials.map((t) => api.scalars(t.id, CURVE_POINTS))))
        .map((r) => r.scalars);
    } catch (e) {
      if (!this.dead) replace(this.el, message("error", `Could not load scalars: ${(e as Error).message}`));
      return;
    }
    if (this.dead) return;
    const isEval = (n: string) => n.startsWith("eval/");
    const names = [...new Set(byTrial.flat().map((s) => s.name))]
      .filter((n) => (this.kind === "evaluation") === isEval(n))
      .sort((a, b) => order(a) - order(b) || a.localeCompare(b));
    this.charts = names.map((n) => new ScalarChart(n, this.run, byTrial));
    const parts: HTMLElement[] = [];
    if (this.kind === "training") parts.push(this.trialsTable());
    else if (names.length) parts.push(this.evalSummary(names, byTrial));
    parts.push(names.length
      ? h("div", { class: "scalar-grid" }, this.charts.map((c) => c.el))
      : message("info", this.kind === "training"
        ? "No training curves recorded (log them with trial.log(step=…, loss=…))."
        : "No validation curves recorded (scalars whose names start with “eval/”)."));
    replace(this.el, parts);
    for (const c of this.charts) c.mount();
  }

  private trialsTable(): HTMLElement {
    const rows = this.run.trials.map((t) => [
      t.name, stateBadge(t.state), h("span", { class: "params" }, paramsText(t.params)), t.host || "—",
      fmtElapsed(t.start - this.run.start),
      fmtDuration((t.end ?? (t.state === "running" ? Date.now() / 1000 : (t.heartbeat ?? t.start))) - t.start),
    ]);
    return h("section", { class: "card" }, h("h2", {}, "Trials"),
      table("Trials", ["Trial", "State", "Params", "Host", "Started at", "Duration"], rows));
  }

  private evalSummary(names: string[], byTrial: ScalarPoint[][]): HTMLElement {
    const rows = this.run.trials.map((t, i) => [t.name, ...names.map((n) => {
      const pts = byTrial[i].filter((s) => s.name === n);
      return fmtValue(pts.length ? pts[pts.length - 1].value : null);
    })]);
    return h("section", { class: "card" }, h("h2", {}, "Latest validation values"),
      table("Latest validation values", ["Trial", ...names], rows));
  }
}
