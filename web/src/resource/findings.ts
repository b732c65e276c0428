// The Findings panel: the run's diagnoses (input-bound, near out-of-memory, …), most severe
// first, each with its severity, title, trial, span in elapsed time and message, and its advice
// behind a disclosure. Choosing one (a button) shows its metric and trial on the chart with the
// window around its span. Everything shown comes from the API as text, never as markup.

import { api, type Finding, type FindingCounts, isAbort, type MetricInfo, SEVERITIES, type Trial } from "../api";
import { h, replace } from "../dom";
import { fmtElapsed } from "../format";
import { hooks, recordError } from "../hooks";
import { countsText, message, severityBadge, stateBadge } from "../widgets";
import { deviceLabel } from "./chart";

export interface FindingsHost {
  /** the run's trials, in creation order */
  trials(): Trial[];
  trial(id: number): Trial | undefined;
  metric(key: string): MetricInfo | undefined;
  /** epoch seconds of x = 0 for this trial's chart */
  offset(trial: Trial): number;
  showFinding(f: Finding): void;
}

export class FindingsPanel {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly summary: HTMLElement;
  private findings: Finding[] = [];
  private counts: FindingCounts | null = null;
  private active: string | null = null;
  private readonly open = new Set<string>();
  private loaded = false;
  private ctrl: AbortController | null = null;
  private loads = 0;

  constructor(private readonly runId: number, private readonly host: FindingsHost) {
    this.summary = h("span", { class: "muted findings-summary", "data-testid": "findings-summary" });
    this.body = h("div", { class: "findings-body" }, message("info", "Loading findings…"));
    this.el = h("section", { class: "card findings", "aria-labelledby": "findings-title" },
      h("div", { class: "section-head" },
        h("h2", { id: "findings-title" }, "Findings"), this.summary),
      h("p", { class: "muted findings-intro" },
        "Diagnoses drawn from each trial's series and training events, most severe first. " +
        "Choose one to show its series and span on the chart."),
      this.body);
  }

  /** Fetch the run's findings and list them (again, when polled). */
  async load(): Promise<void> {
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    try {
      const body = await api.runFindings(this.runId, ctrl.signal);
      if (ctrl.signal.aborted) return;
      const order = new Map(this.host.trials().map((t, i) => [t.id, i]));
      const all: Finding[] = [];
      for (const list of Object.values(body.trials)) all.push(...list);
      const rank = (f: Finding) => SEVERITIES.indexOf(f.severity);
      const at = new Map(all.map((f, i) => [f.id, i]));
      all.sort((a, b) => rank(a) - rank(b)
        || (order.get(a.trial_id) ?? 1e9) - (order.get(b.trial_id) ?? 1e9)
        || (at.get(a.id) ?? 0) - (at.get(b.id) ?? 0));
      this.findings = all;
      this.counts = body.counts;
      this.loaded = true;
      this.loads += 1;
      this.render();
    } catch (e) {
      if (isAbort(e) || ctrl.signal.aborted) return;
      const text = e instanceof Error ? e.message : String(e);
      recordError(text);
      if (!this.loaded) replace(this.body, message("error", `Could not load the findings: ${text}`));
      this.publish(text);
    } finally {
      if (this.ctrl === ctrl) this.ctrl = null;
    }
  }

  /** Mark the finding shown on the chart (null: none). */
  setActive(id: string | null): void {
    if (id === this.active) return;
    this.active = id;
    for (const li of this.body.querySelectorAll<HTMLElement>(".finding")) {
      const on = li.dataset.finding === id;
      li.classList.toggle("is-selected", on);
      const b = li.querySelector(".finding-select");
      if (on) b?.setAttribute("aria-current", "true");
      else b?.removeAttribute("aria-current");
    }
    this.publish(null);
  }

  /** The chart now shows `metric` of `trial`: a finding of another series is no longer shown. */
  viewChanged(trial: number | null, metric: string | null): void {
    const f = this.findings.find((x) => x.id === this.active);
    if (f && (f.trial_id !== trial || (f.metric !== null && f.metric !== metric))) this.setActive(null);
  }

  /** Times changed (trials aligned on their own start or not): redraw the spans. */
  refresh(): void {
    if (this.loaded) this.render();
  }

  destroy(): void {
    this.ctrl?.abort();
    this.ctrl = null;
    hooks.findings = null;
  }

  private render(): void {
    const focused = document.activeElement instanceof HTMLElement
      && this.body.contains(document.activeElement)
      ? (document.activeElement.closest<HTMLElement>(".finding")?.dataset.finding ?? null) : null;
    const focusedSummary = focused !== null && document.activeElement?.tagName === "SUMMARY";
    this.summary.textContent = this.counts ? countsText(this.counts) : "";
    if (!this.findings.length) {
      const running = this.host.trials().some((t) => t.state === "running");
      replace(this.body, h("p", { class: "muted findings-empty" },
        "No findings: nothing in this run's series and training events calls for attention.",
        running ? " Running trials are checked again every few seconds." : ""));
    } else {
      replace(this.body, h("ul", { class: "finding-list", "aria-label": "Findings of this run" },
        this.findings.map((f, i) => this.item(f, i))));
    }
    if (focused !== null) {
      const li = this.body.querySelector<HTMLElement>(`.finding[data-finding="${CSS.escape(focused)}"]`);
      li?.querySelector<HTMLElement>(focusedSummary ? "summary" : ".finding-select")?.focus();
    }
    this.publish(null);
  }

  private item(f: Finding, i: number): HTMLElement {
    const trial = this.host.trial(f.trial_id);
    const metric = f.metric !== null ? this.host.metric(f.metric) : undefined;
    const selected = f.id === this.active;
    const msgId = `finding-msg-${i}`;
    const series = metric
      ? `${metric.label}${metric.scope === "gpu" && f.device !== null ? ` · ${deviceLabel(metric, f.device)}` : ""}`
      : (f.metric ?? "");
    const advice = f.advice.length
      ? h("details", {
        class: "finding-advice",
        open: this.open.has(f.id),
        ontoggle: (ev: Event) => {
          if ((ev.currentTarget as HTMLDetailsElement).open) this.open.add(f.id);
          else this.open.delete(f.id);
        },
      },
      h("summary", {}, `Advice (${f.advice.length})`),
      h("ol", { class: "advice-list" }, f.advice.map((a) => h("li", {}, a))))
      : null;
    return h("li", {
      class: `finding sev-row-${f.severity}${selected ? " is-selected" : ""}`,
      "data-finding": f.id, "data-rule": f.rule, "data-trial": String(f.trial_id),
    },
    h("button", {
      type: "button", class: "finding-select", "aria-describedby": msgId,
      "aria-current": selected ? "true" : null,
      title: "Show this finding's series and span on the chart",
      onclick: () => this.host.showFinding(f),
    },
    h("span", { class: "finding-line" }, severityBadge(f.severity),
      h("span", { class: "finding-title" }, f.title)),
    h("span", { class: "finding-meta" },
      h("span", { class: "finding-trial" }, trial ? trial.name : `trial ${f.trial_id}`),
      trial ? stateBadge(trial.state) : "",
      h("span", { class: "finding-span mono", "data-testid": "finding-span" }, this.spanText(f, trial)),
      series ? h("span", { class: "finding-series" }, series) : "")),
    h("p", { class: "finding-msg", id: msgId }, f.message),
    advice);
  }

  private spanText(f: Finding, trial: Trial | undefined): string {
    if (f.t0 === null || f.t1 === null || !trial) return "whole trial";
    const off = this.host.offset(trial);
    const d = f.t1 - f.t0 < 20 ? 1 : 0;
    // a span that starts with the trial may lie a hair before x = 0 (clock rounding)
    return `${fmtElapsed(Math.max(0, f.t0 - off), d)} – ${fmtElapsed(Math.max(0, f.t1 - off), d)}`;
  }

  private publish(error: string | null): void {
    hooks.findings = {
      run: this.runId,
      loads: this.loads,
      items: this.findings.map((f) => ({
        id: f.id, trial: f.trial_id, rule: f.rule, severity: f.severity, metric: f.metric,
        device: f.device, t0: f.t0, t1: f.t1,
      })),
      counts: this.counts ? { ...this.counts } : null,
      active: this.active,
      error,
    };
  }
}
