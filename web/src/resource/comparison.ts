// The comparison view: the pinned (trial, metric) rows — each naming the trial, its state and
// the metric, with a delete control — and a stacked chart of every pin on one shared time axis
// with a synced cursor.

import type { MetricInfo, Trial } from "../api";
import { h, icon, replace } from "../dom";
import { stateBadge } from "../widgets";
import { type LoadStep, SeriesPanel } from "./panel";
import type { Pin } from "./state";
import type { Span } from "./span";

export interface ComparisonHost {
  trial(id: number): Trial | undefined;
  metric(key: string): MetricInfo | undefined;
  offset(trial: Trial): number;
  select(index: number): void;
  remove(index: number): void;
  setAlign(align: boolean): void;
  zoomTo(span: Span): void;
}

const pinKey = (p: Pin) => `${p.trial}:${p.metric}`;

export class ComparisonPanel {
  readonly el: HTMLElement;
  private readonly list: HTMLElement;
  private readonly empty: HTMLElement;
  private readonly stack: HTMLElement;
  private readonly stackBox: HTMLElement;
  private readonly alignBox: HTMLInputElement;
  private readonly count: HTMLElement;
  /** `window`: the window the chart shows or is fetching (trial, metric, offset, span), so
   *  a view change that leaves it as it was (another trial or metric in the main chart)
   *  fetches nothing for it */
  private readonly panels = new Map<string, {
    panel: SeriesPanel; card: HTMLElement; title: HTMLElement; window: string | null;
  }>();
  private pins: Pin[] = [];

  constructor(private readonly host: ComparisonHost, syncKey: string) {
    this.syncKey = syncKey;
    this.count = h("span", { class: "count" });
    this.list = h("ul", { class: "cmp-list", "aria-label": "Comparison list" });
    this.empty = h("p", { class: "muted cmp-empty" },
      "Nothing pinned yet. Choose a metric and a trial, then “Add selected to Comparison View”.");
    this.alignBox = h("input", {
      type: "checkbox", id: "cmp-align",
      onchange: () => this.host.setAlign(this.alignBox.checked),
    });
    this.stack = h("div", { class: "cmp-stack" });
    this.stackBox = h("section", { class: "cmp-stack-box", "aria-label": "Stacked view", hidden: true },
      h("div", { class: "section-head" },
        h("h3", {}, "Stacked view"),
        h("span", { class: "muted" }, "one time axis for every pinned graph — drag on any of them to zoom all")),
      this.stack);
    this.el = h("section", { class: "card comparison", "aria-labelledby": "cmp-title" },
      h("div", { class: "section-head" },
        h("h2", { id: "cmp-title" }, "Comparison View ", this.count),
        h("label", { class: "check", for: "cmp-align" }, this.alignBox,
          "Align trials on their own start")),
      this.empty, this.list, this.stackBox);
  }

  private readonly syncKey: string;

  render(pins: Pin[], sel: number, align: boolean): void {
    this.pins = pins.map((p) => ({ ...p }));
    this.alignBox.checked = align;
    this.count.textContent = pins.length ? `(${pins.length})` : "";
    this.empty.hidden = pins.length > 0;
    this.stackBox.hidden = pins.length === 0;
    replace(this.list, pins.map((p, i) => this.row(p, i, i === sel)));
    // charts: keep those still pinned, drop the others, add new ones in list order
    const keep = new Set(pins.map(pinKey));
    for (const [k, v] of this.panels) {
      if (!keep.has(k)) {
        v.panel.destroy();
        v.card.remove();
        this.panels.delete(k);
      }
    }
    pins.forEach((p, i) => {
      let entry = this.panels.get(pinKey(p));
      if (!entry) {
        const panel = new SeriesPanel({
          id: `cmp-${p.trial}-${p.metric}`, height: 150, syncKey: this.syncKey, compact: true,
          onSelect: (span) => this.host.zoomTo(span),
        });
        const title = h("div", { class: "cmp-card-title" });
        const card = h("div", { class: "cmp-card" }, title, panel.chart.el);
        entry = { panel, card, title, window: null };
        this.panels.set(pinKey(p), entry);
      }
      entry.card.classList.toggle("is-selected", i === sel);
      replace(entry.title, this.describe(p));
      this.stack.appendChild(entry.card);
    });
  }

  /** Refresh the trial states shown (after the run was polled). */
  refreshStates(sel: number, align: boolean): void {
    this.render(this.pins, sel, align);
  }

  /** Load every stacked chart for `span` whose window changed (every running trial's, which
   *  grows, when `onlyLive`; only those then). */
  load(span: Span, onlyLive = false, step: LoadStep | null = null): Promise<unknown> {
    const jobs: Promise<unknown>[] = [];
    for (const p of this.pins) {
      const entry = this.panels.get(pinKey(p));
      const trial = this.host.trial(p.trial);
      const metric = this.host.metric(p.metric);
      if (!entry) continue;
      if (!trial || !metric) {
        entry.panel.chart.setMessage(!trial ? `Trial ${p.trial} is not in this run` : `Unknown metric ${p.metric}`);
        continue;
      }
      if (onlyLive && trial.state !== "running") continue;
      const offset = this.host.offset(trial);
      const window = `${trial.id}|${metric.key}|${offset}|${span.from}|${span.to}`;
      if (!onlyLive && entry.window === window) continue;
      const e = entry;
      e.window = window;
      jobs.push(e.panel.load(trial, metric, span, offset, step).then((done) => {
        // superseded (by a newer window) or failed: the next view change fetches it again
        if ((!done || e.panel.failed) && e.window === window) e.window = null;
      }));
    }
    return Promise.all(jobs);
  }

  showSpan(span: Span): void {
    for (const { panel } of this.panels.values()) panel.chart.showSpan(span);
  }

  destroy(): void {
    for (const { panel } of this.panels.values()) panel.destroy();
    this.panels.clear();
  }

  private describe(p: Pin): (Node | string)[] {
    const trial = this.host.trial(p.trial);
    const metric = this.host.metric(p.metric);
    return [
      h("span", { class: "cmp-trial" }, trial ? trial.name : `trial ${p.trial}`),
      trial ? stateBadge(trial.state) : "",
      h("span", { class: "cmp-metric" }, metric ? metric.label : p.metric),
      metric ? h("span", { class: "unit" }, metric.unit) : "",
    ];
  }

  private row(p: Pin, i: number, selected: boolean): HTMLElement {
    const trial = this.host.trial(p.trial);
    const metric = this.host.metric(p.metric);
    const name = `${trial ? trial.name : `trial ${p.trial}`} · ${metric ? metric.label : p.metric}`;
    return h("li", { class: `cmp-row${selected ? " is-selected" : ""}`, "data-pin": pinKey(p) },
      h("button", {
        type: "button", class: "cmp-select", "aria-pressed": String(selected),
        title: `Draw ${name}`, onclick: () => this.host.select(i),
      }, this.describe(p)),
      h("button", {
        type: "button", class: "btn-icon cmp-delete", "aria-label": `Remove ${name} from comparison`,
        title: "Remove from comparison", onclick: () => this.host.remove(i),
      }, icon("close")));
  }
}
