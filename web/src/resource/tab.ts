// The Resource Utilization tab: Select Metric / Select Trials, the chart with its time range,
// paging and zoom controls and marker toggles, live following of a running trial, the
// comparison view and the run's findings. Every change is written to the URL (and the
// comparison list to localStorage), so a link or a reload reproduces the view.

import type { Finding, MetricInfo, RunDetail, Trial } from "../api";
import { announce, h, replace } from "../dom";
import { hooks } from "../hooks";
import { stateBadge } from "../widgets";
import { type ComparisonHost, ComparisonPanel } from "./comparison";
import { type FindingsHost, FindingsPanel } from "./findings";
import { LoadStep, SeriesPanel } from "./panel";
import * as S from "./span";
import { loadPins, type ResourceView, readView, savePins, viewQuery } from "./state";
import { TimeRange } from "./timerange";
import { Toolbar } from "./toolbar";

export interface RunContext {
  run: RunDetail;
  catalog: MetricInfo[];
  reloadRun(): Promise<RunDetail>;
  writeQuery(q: URLSearchParams): void;
}

const SYNC = "tunescope-time";
const POLL_MS = 1000;
/** Polls between two loads of the findings while a trial runs (the server recomputes a
 *  running trial's findings at most every 10 s). */
const FINDINGS_EVERY = 10;

export class ResourceTab implements ComparisonHost, FindingsHost {
  readonly el: HTMLElement;
  private view: ResourceView;
  private readonly bar: Toolbar;
  private readonly range: TimeRange;
  private readonly main: SeriesPanel;
  private readonly cmp: ComparisonPanel;
  private readonly findings: FindingsPanel;
  private readonly chartCard: HTMLElement;
  private readonly head: HTMLElement;
  private readonly status: HTMLElement;
  private readonly byKey: Map<string, MetricInfo>;
  private timer = 0;
  private ticks = 0;
  private live = false;
  private dead = false;

  constructor(private readonly ctx: RunContext, q: URLSearchParams) {
    this.byKey = new Map(ctx.catalog.map((m) => [m.key, m]));
    this.view = readView(q, loadPins(ctx.run.id));
    this.fixDefaults();
    this.range = new TimeRange((span) => this.setSpan(span, true));
    this.bar = new Toolbar(ctx.catalog, this.range, {
      metric: (key) => { this.view.metric = key; this.selectionChanged(); },
      trial: (id) => { this.view.trial = id; this.selectionChanged(); },
      pin: () => this.pin(),
      page: (dir) => this.setSpan(S.page(this.span(), dir, this.extent()), false),
      zoom: (factor) => this.setSpan(S.zoom(this.span(), factor, this.extent()), false),
      reset: () => { this.view.span = null; this.apply(); },
      markers: (steps, evals) => {
        this.view.steps = steps;
        this.view.evals = evals;
        this.main.chart.markers.showSteps = steps;
        this.main.chart.markers.showEvals = evals;
        this.main.chart.redraw();
        this.writeUrl();
      },
    });
    this.head = h("div", { class: "chart-head" });
    this.main = new SeriesPanel({
      id: "main", height: 340, syncKey: SYNC,
      onSelect: (span) => this.setSpan(span, false),
      onResize: () => void this.load(),
    });
    const plot = this.main.chart.el;
    plot.tabIndex = 0;
    plot.setAttribute("role", "group");
    plot.setAttribute("aria-label",
      "Chart. Drag to zoom; keys: left and right arrows page, + and − zoom, 0 resets.");
    plot.addEventListener("keydown", (ev) => this.chartKey(ev));
    this.cmp = new ComparisonPanel(this, SYNC);
    this.findings = new FindingsPanel(ctx.run.id, this);
    this.status = h("div", { class: "visually-hidden", role: "status", "aria-live": "polite" });
    this.chartCard = h("section", { class: "card chart-card", "aria-label": "Resource utilization chart" },
      this.bar.selection, this.bar.tools, this.head, plot);
    this.el = h("div", { class: "resource-tab" }, this.chartCard, this.cmp.el, this.findings.el,
      this.status);
  }

  /** Call once the element is in the document (the chart needs its width). */
  start(): void {
    this.bar.setTrials(this.ctx.run.trials, this.view.trial);
    this.bar.setMetric(this.view.metric);
    this.bar.setMarkers(this.view.steps, this.view.evals);
    this.main.chart.markers.showSteps = this.view.steps;
    this.main.chart.markers.showEvals = this.view.evals;
    this.cmp.render(this.view.pins, this.view.sel, this.view.align);
    this.apply();
    void this.findings.load();
    this.timer = window.setInterval(() => this.tick(), POLL_MS);
  }

  destroy(): void {
    this.dead = true;
    window.clearInterval(this.timer);
    this.main.destroy();
    this.cmp.destroy();
    this.findings.destroy();
    hooks.live = false;
  }

  // ------------------------------------------------------------------ ComparisonHost
  trial(id: number): Trial | undefined {
    return this.ctx.run.trials.find((t) => t.id === id);
  }

  metric(key: string): MetricInfo | undefined {
    return this.byKey.get(key);
  }

  offset(trial: Trial): number {
    return this.view.align ? trial.start : this.ctx.run.start;
  }

  select(index: number): void {
    const pin = this.view.pins[index];
    if (!pin) return;
    this.view.sel = index;
    this.view.metric = pin.metric;
    this.view.trial = pin.trial;
    this.bar.setMetric(pin.metric);
    this.bar.setTrials(this.ctx.run.trials, pin.trial);
    this.savePins();
    this.cmp.render(this.view.pins, this.view.sel, this.view.align);
    this.say(`Showing ${this.pinName(index)}`);
    this.apply();
  }

  remove(index: number): void {
    const name = this.pinName(index);
    this.view.pins.splice(index, 1);
    if (this.view.sel === index) this.view.sel = -1;
    else if (this.view.sel > index) this.view.sel -= 1;
    this.savePins();
    this.cmp.render(this.view.pins, this.view.sel, this.view.align);
    this.writeUrl();
    this.say(`Removed ${name} from the comparison view`);
    // keep keyboard focus in the list
    const rows = this.cmp.el.querySelectorAll<HTMLButtonElement>(".cmp-delete");
    const next = rows[Math.min(index, rows.length - 1)];
    (next ?? this.bar.addButton).focus();
  }

  setAlign(align: boolean): void {
    this.view.align = align;
    this.view.span = null;
    this.findings.refresh();
    this.apply();
  }

  zoomTo(span: S.Span): void {
    this.setSpan(span, false);
  }

  // ------------------------------------------------------------------ FindingsHost
  trials(): Trial[] {
    return this.ctx.run.trials;
  }

  /** Show a finding: its trial and metric, the window around its span (with a margin). */
  showFinding(f: Finding): void {
    const trial = this.trial(f.trial_id);
    if (!trial) return;
    this.view.trial = trial.id;
    if (f.metric !== null && this.byKey.has(f.metric)) this.view.metric = f.metric;
    this.bar.setMetric(this.view.metric);
    this.bar.setTrials(this.ctx.run.trials, trial.id);
    this.unselectPin();
    this.findings.setActive(f.id);
    this.say(`Showing ${f.title} (${trial.name})`);
    if (f.t0 !== null && f.t1 !== null && f.t1 >= f.t0) {
      const off = this.offset(trial);
      const margin = Math.max(0.1 * (f.t1 - f.t0), 2 * (trial.interval ?? 1));
      this.setSpan({ from: f.t0 - off - margin, to: f.t1 - off + margin }, false);
    } else {
      this.view.span = null;
      this.apply();
    }
    // bring the chart into view when the list has scrolled it off the top
    if (this.chartCard.getBoundingClientRect().top < 0) this.chartCard.scrollIntoView({ block: "start" });
  }

  // ------------------------------------------------------------------ view changes
  private fixDefaults(): void {
    const trials = this.ctx.run.trials;
    if (this.view.trial === null || !trials.some((t) => t.id === this.view.trial)) {
      const running = trials.find((t) => t.state === "running");
      this.view.trial = (running ?? trials[0])?.id ?? null;
    }
    if (!this.view.metric || !this.byKey.has(this.view.metric)) {
      this.view.metric = this.ctx.catalog.find((m) => m.headline)?.key ?? this.ctx.catalog[0]?.key ?? null;
    }
  }

  private selectionChanged(): void {
    this.bar.markTrial(this.ctx.run.trials, this.view.trial);
    this.unselectPin();
    this.apply();
  }

  /** The selected comparison row stays selected only while it is what the chart shows. */
  private unselectPin(): void {
    const pin = this.view.pins[this.view.sel];
    if (pin && (pin.metric !== this.view.metric || pin.trial !== this.view.trial)) {
      this.view.sel = -1;
      this.savePins();
      this.cmp.render(this.view.pins, this.view.sel, this.view.align);
    }
  }

  private setSpan(span: S.Span, typed: boolean): void {
    const ext = this.extent();
    let s: S.Span = { from: Math.max(0, span.from), to: span.to };
    if (s.to - s.from < S.MIN_WIDTH) {
      const c = (s.from + s.to) / 2;
      s = { from: c - S.MIN_WIDTH / 2, to: c + S.MIN_WIDTH / 2 };
    }
    s = S.clamp(s, Math.max(ext, typed ? s.to : ext));
    s = { from: S.round3(s.from), to: S.round3(s.to) }; // as the URL will carry it
    this.view.span = S.isWhole(s, ext) && !typed ? null : s;
    this.apply();
  }

  private pin(): void {
    const { trial, metric } = this.view;
    if (trial === null || metric === null) return;
    const i = this.view.pins.findIndex((p) => p.trial === trial && p.metric === metric);
    if (i >= 0) {
      this.view.sel = i;
      this.say(`${this.pinName(i)} is already in the comparison view`);
    } else {
      this.view.pins.push({ trial, metric });
      this.view.sel = this.view.pins.length - 1;
      this.say(`Added ${this.pinName(this.view.sel)} to the comparison view`);
    }
    this.savePins();
    this.cmp.render(this.view.pins, this.view.sel, this.view.align);
    this.writeUrl();
    void this.cmp.load(this.span());
  }

  private pinName(i: number): string {
    const p = this.view.pins[i];
    if (!p) return "";
    return `${this.trial(p.trial)?.name ?? `trial ${p.trial}`} · ${this.metric(p.metric)?.label ?? p.metric}`;
  }

  /** Seconds from x = 0 to the end of what can be shown (now, for a running trial). */
  private extent(): number {
    const now = Date.now() / 1000;
    const ids = new Set([this.view.trial, ...this.view.pins.map((p) => p.trial)]);
    let ext = 1;
    for (const t of this.ctx.run.trials) {
      if (this.view.align && !ids.has(t.id)) continue;
      const end = t.end ?? (t.state === "running" ? Math.max(now, t.heartbeat ?? 0)
        : (t.heartbeat ?? t.start));
      ext = Math.max(ext, end - this.offset(t));
    }
    return ext;
  }

  private span(ext: number = this.extent()): S.Span {
    return this.view.span ? { ...this.view.span } : { from: 0, to: ext };
  }

  private apply(): void {
    const ext = this.extent();
    const span = this.span(ext);
    const trial = this.view.trial !== null ? this.trial(this.view.trial) : undefined;
    this.live = trial?.state === "running" && (this.view.span === null || S.atEdge(span, ext));
    hooks.live = this.live;
    this.range.show(span);
    this.bar.update(span, ext, this.view.span === null, this.live,
      this.metric(this.view.metric ?? "")?.markers ?? false);
    this.main.chart.showSpan(span);
    this.cmp.showSpan(span);
    this.findings.viewChanged(this.view.trial, this.view.metric);
    this.renderHead();
    this.writeUrl();
    void this.load();
  }

  private async load(onlyLive = false): Promise<void> {
    const trial = this.view.trial !== null ? this.trial(this.view.trial) : undefined;
    const metric = this.metric(this.view.metric ?? "");
    const span = this.span();
    // every chart's series first, then their markers
    const step = new LoadStep();
    const jobs: Promise<unknown>[] = [this.cmp.load(span, onlyLive, step)];
    if (!trial) {
      this.main.chart.setMessage("This run has no trials yet.");
    } else if (metric) {
      jobs.push(this.main.load(trial, metric, span, this.offset(trial), step));
    }
    step.seal();
    await Promise.all(jobs);
  }

  private renderHead(): void {
    const trial = this.view.trial !== null ? this.trial(this.view.trial) : undefined;
    const metric = this.metric(this.view.metric ?? "");
    if (!metric) return replace(this.head);
    replace(this.head,
      h("div", { class: "chart-title" },
        h("h2", { "data-testid": "chart-title" }, metric.label),
        h("span", { class: "unit", "data-testid": "chart-unit", title: "unit" }, metric.unit),
        trial ? h("span", { class: "chart-trial" }, "· ", h("span", {}, trial.name), " ") : "",
        trial ? stateBadge(trial.state) : ""),
      h("p", { class: "chart-desc muted" }, metric.description,
        " Time is elapsed since ", this.view.align ? "each trial's own start." : "the run began."));
  }

  private writeUrl(): void {
    if (!this.dead) this.ctx.writeQuery(viewQuery(this.view));
  }

  private savePins(): void {
    savePins(this.ctx.run.id, this.view.pins, this.view.sel);
  }

  private say(text: string): void {
    announce(this.status, text);
    this.bar.flash(text);
  }

  private chartKey(ev: KeyboardEvent): void {
    const actions: Record<string, () => void> = {
      ArrowLeft: () => this.setSpan(S.page(this.span(), -1, this.extent()), false),
      ArrowRight: () => this.setSpan(S.page(this.span(), 1, this.extent()), false),
      "+": () => this.setSpan(S.zoom(this.span(), 0.5, this.extent()), false),
      "=": () => this.setSpan(S.zoom(this.span(), 0.5, this.extent()), false),
      "-": () => this.setSpan(S.zoom(this.span(), 2, this.extent()), false),
      "0": () => { this.view.span = null; this.apply(); },
    };
    const act = actions[ev.key];
    if (act && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
      ev.preventDefault();
      act();
    }
  }

  // ------------------------------------------------------------------ live
  private async tick(): Promise<void> {
    if (this.dead || document.hidden) return;
    this.ticks += 1;
    const running = this.ctx.run.trials.some((t) => t.state === "running");
    if (running && this.ticks % FINDINGS_EVERY === 0) void this.findings.load();
    if (this.ticks % 5 === 0 && running) {
      await this.refreshRun();
    }
    if (!this.live || this.main.loading) return;
    if (this.view.span) {
      const w = S.width(this.view.span);
      const end = this.extent();
      this.view.span = { from: S.round3(Math.max(0, end - w)), to: S.round3(end) };
    }
    hooks.polls += 1;
    const ext = this.extent();
    const span = this.span(ext);
    this.range.show(span);
    this.bar.update(span, ext, this.view.span === null, this.live,
      this.metric(this.view.metric ?? "")?.markers ?? false);
    this.writeUrl();
    await this.load(true);
  }

  private async refreshRun(): Promise<void> {
    try {
      const run = await this.ctx.reloadRun();
      if (this.dead) return;
      const states = (r: RunDetail) => r.trials.map((t) => `${t.id}:${t.state}`).join(",");
      const changed = states(run) !== states(this.ctx.run);
      this.ctx.run = run;
      // a trial that ended (or a new one) has final findings now: list them at once
      if (changed) void this.findings.load();
      this.bar.setTrials(run.trials, this.view.trial);
      this.cmp.refreshStates(this.view.sel, this.view.align);
      this.renderHead();
      const trial = this.view.trial !== null ? this.trial(this.view.trial) : undefined;
      if (this.live && trial?.state !== "running") this.apply();
    } catch {
      /* a missed poll is retried on the next one */
    }
  }
}
