// The Serving tab of a load run (`tunescope load`): p50/p90/p99 TTFT, TPOT and end-to-end
// latency, and request throughput and goodput, against the load level (a chart each, the SLO as
// a dashed line), and a table of the levels; a level's link opens its trial on the Resource
// Utilization tab. Definitions: docs/serving_analysis.md.

import uPlot from "uplot";
import { api, type RunDetail, type Serving, type ServingLevel } from "./api";
import { h, replace } from "./dom";
import { fmtTick } from "./format";
import { hooks } from "./hooks";
import { PALETTE } from "./resource/chart";
import { runHref } from "./route";
import { cardAxes, cardSize, watchSize } from "./scalars";
import { message, stateBadge, table } from "./widgets";

const SLO_COLOR = "#dc2626";
const DASH = "—";

type Dist = ServingLevel["stats"]["ttft"];
type LatencyKey = "ttft" | "tpot" | "e2el";

interface ChartSpec {
  id: string;
  title: string;
  unit: string;
  lines: { label: string; values: (number | null)[] }[];
  slo: number | null;
  /** multiply stored values by this for the unit shown */
  scale: number;
}

const LATENCIES: { key: LatencyKey; title: string; slo: "ttft_s" | "tpot_s" | "e2el_s" }[] = [
  { key: "ttft", title: "Time to first token (TTFT)", slo: "ttft_s" },
  { key: "tpot", title: "Time per output token (TPOT)", slo: "tpot_s" },
  { key: "e2el", title: "End-to-end latency (E2EL)", slo: "e2el_s" },
];

function ms(v: number | null | undefined): string {
  return v === null || v === undefined ? DASH : `${(v * 1000).toFixed(v < 0.01 ? 1 : 0)}`;
}

function rate(v: number | null | undefined): string {
  return v === null || v === undefined ? DASH : v.toPrecision(3);
}

function pcts(d: Dist): string {
  return `${ms(d.p50)} / ${ms(d.p90)} / ${ms(d.p99)}`;
}

function levelText(lv: ServingLevel): string {
  const n = lv.level === null ? "?" : String(lv.level);
  return lv.mode === "rate" ? `${n} req/s` : `${n} concurrent`;
}

class LevelChart {
  readonly el: HTMLElement;
  private u: uPlot | null = null;
  private readonly ro: ResizeObserver;

  constructor(private readonly spec: ChartSpec, private readonly xs: number[], private readonly xLabel: string) {
    this.el = h("div", { class: "card scalar-card", "data-serving-chart": spec.id });
    this.ro = watchSize(this.el, () => this.u);
  }

  mount(): void {
    const s = this.spec;
    const lines = s.lines.map((l, i) => ({ ...l, color: PALETTE[i % PALETTE.length], dash: undefined as number[] | undefined }));
    if (s.slo !== null) {
      lines.push({ label: `SLO ${fmtTick(s.slo * s.scale)} ${s.unit}`, values: this.xs.map(() => s.slo),
                   color: SLO_COLOR, dash: [6, 4] });
    }
    const legend = h("div", { class: "chart-legend" }, lines.map((l) =>
      h("span", { class: "legend-item", "data-line": l.label },
        h("span", { class: "swatch", style: `--c:${l.color}` }), h("span", { class: "legend-label" }, l.label))));
    const plot = h("div", { class: "chart-plot" });
    replace(this.el, h("h3", { class: "scalar-title" }, `${s.title} (${s.unit})`), plot, legend);
    const data = [this.xs, ...lines.map((l) => l.values.map((v) => (v === null ? null : v * s.scale)))];
    this.u = new uPlot({
      ...cardSize(this.el),
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: false } },
      series: [{}, ...lines.map((l) => ({
        label: l.label, stroke: l.color, width: 1.5, dash: l.dash, spanGaps: true,
        points: { show: l.dash === undefined },
      }))],
      axes: cardAxes(this.xLabel, true),
    }, data as uPlot.AlignedData, plot);
    this.ro.observe(this.el);
  }

  destroy(): void {
    this.ro.disconnect();
    this.u?.destroy();
  }
}

export class ServingTab {
  readonly el: HTMLElement;
  private charts: LevelChart[] = [];
  private dead = false;

  constructor(private readonly run: RunDetail) {
    this.el = h("div", { class: "serving-tab" }, message("info", "Loading load levels…"));
  }

  start(): void {
    void this.load();
  }

  destroy(): void {
    this.dead = true;
    for (const c of this.charts) c.destroy();
  }

  private async load(): Promise<void> {
    let s: Serving;
    try {
      s = await api.serving(this.run.id);
    } catch (e) {
      if (!this.dead) replace(this.el, message("error", `Could not load the load levels: ${(e as Error).message}`));
      return;
    }
    if (this.dead) return;
    if (!s.levels.length) {
      replace(this.el, message("info", "This run has no load levels (made by tunescope load)."));
      return;
    }
    // the charts draw the levels of the first mode; a table lists every level
    const mode = s.levels[0].mode;
    const drawn = s.levels.filter((lv) => lv.mode === mode && lv.level !== null);
    const xs = drawn.map((lv) => lv.level as number);
    const specs: ChartSpec[] = LATENCIES.map(({ key, title, slo }) => ({
      id: key, title, unit: "ms", scale: 1000, slo: s.slo[slo],
      lines: (["p50", "p90", "p99"] as const).map((p) => ({ label: p, values: drawn.map((lv) => lv.stats[key][p]) })),
    }));
    const withSlo = Object.values(s.slo).some((v) => v !== null);
    specs.push({
      id: "throughput", title: "Throughput", unit: "req/s", scale: 1, slo: null,
      lines: [
        { label: "requests/s", values: drawn.map((lv) => lv.stats.request_throughput) },
        ...(withSlo ? [{ label: "goodput", values: drawn.map((lv) => lv.stats.goodput) }] : []),
      ],
    });
    const xLabel = mode === "rate" ? "requests/s sent" : "concurrency";
    this.charts = specs.map((spec) => new LevelChart(spec, xs, xLabel));
    replace(this.el,
      h("section", { class: "card" }, h("h2", {}, "Load levels"), this.sloLine(s), this.levelsTable(s.levels)),
      h("div", { class: "scalar-grid" }, this.charts.map((c) => c.el)));
    for (const c of this.charts) c.mount();
    hooks.serving = {
      run: this.run.id,
      levels: xs,
      charts: Object.fromEntries(specs.map((sp) => [sp.id, {
        lines: sp.lines.map((l) => l.label), slo: sp.slo,
      }])),
    };
  }

  private sloLine(s: Serving): HTMLElement {
    const parts = LATENCIES.filter(({ slo }) => s.slo[slo] !== null)
      .map(({ key, slo }) => `${key.toUpperCase()} ≤ ${ms(s.slo[slo])} ms`);
    return h("p", { class: "muted", "data-testid": "slo" },
      parts.length ? `SLO (p99): ${parts.join(", ")}` : "No SLO given (tunescope load --slo).");
  }

  private levelsTable(levels: ServingLevel[]): HTMLElement {
    const rows = levels.map((lv) => {
      const st = lv.stats;
      const q = new URLSearchParams({ trial: String(lv.trial_id) });
      return [
        levelText(lv),
        h("a", { href: runHref(this.run.id, "resources", q), "data-level-trial": String(lv.trial_id) }, lv.trial),
        stateBadge(lv.state),
        `${st.ok} / ${st.errors}`,
        pcts(st.ttft), pcts(st.tpot), pcts(st.e2el),
        rate(st.request_throughput), rate(st.output_throughput), rate(st.goodput),
      ];
    });
    return table("Load levels", ["Level", "Trial", "State", "OK / errors", "TTFT p50 / p90 / p99 (ms)",
      "TPOT p50 / p90 / p99 (ms)", "E2EL p50 / p90 / p99 (ms)", "Requests/s", "Output tokens/s", "Goodput (req/s)"],
    rows, [3, 4, 5, 6, 7, 8, 9]);
  }
}
