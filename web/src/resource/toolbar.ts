// The tab's controls: Select Metric / Select Trials / Add selected to Comparison View, and the
// chart toolbar — time range, << >> paging, zoom in / out / reset, live badge, marker toggles.
// All are native selects, buttons and checkboxes, so the keyboard works everywhere; buttons
// that cannot act are aria-disabled (not disabled) so that focus stays where it was.

import type { MetricInfo, Trial } from "../api";
import { h, icon } from "../dom";
import { stateBadge } from "../widgets";
import { EVAL_COLOR, STEP_COLOR } from "./markers";
import * as S from "./span";
import type { TimeRange } from "./timerange";

export interface ToolbarActions {
  metric(key: string): void;
  trial(id: number): void;
  pin(): void;
  page(dir: -1 | 1): void;
  zoom(factor: number): void;
  reset(): void;
  markers(steps: boolean, evals: boolean): void;
}

function toolButton(label: string, content: (Node | string)[], act: () => void,
                    cls = "btn btn-icon"): HTMLButtonElement {
  const b = h("button", { type: "button", class: cls, "aria-label": label, title: label }, content);
  b.addEventListener("click", () => {
    if (b.getAttribute("aria-disabled") !== "true") act();
  });
  return b;
}

function enable(b: HTMLButtonElement, on: boolean): void {
  b.setAttribute("aria-disabled", String(!on));
}

export class Toolbar {
  readonly selection: HTMLElement;
  readonly tools: HTMLElement;
  readonly addButton: HTMLButtonElement;
  private readonly metricSel: HTMLSelectElement;
  private readonly trialSel: HTMLSelectElement;
  private readonly trialState: HTMLElement;
  private readonly back: HTMLButtonElement;
  private readonly fwd: HTMLButtonElement;
  private readonly zin: HTMLButtonElement;
  private readonly zout: HTMLButtonElement;
  private readonly reset: HTMLButtonElement;
  private readonly liveBadge: HTMLElement;
  private readonly markerBox: HTMLElement;
  private readonly steps: HTMLInputElement;
  private readonly evals: HTMLInputElement;
  private readonly note: HTMLElement;
  private noteTimer = 0;

  constructor(catalog: MetricInfo[], range: TimeRange, act: ToolbarActions) {
    this.metricSel = h("select", { id: "select-metric", class: "select",
      onchange: () => act.metric(this.metricSel.value) });
    const head = catalog.filter((m) => m.headline);
    const more = catalog.filter((m) => !m.headline);
    const opt = (m: MetricInfo) => h("option", { value: m.key, title: m.description }, m.label);
    this.metricSel.append(
      h("optgroup", { label: "Headline metrics" }, head.map(opt)),
      h("optgroup", { label: "More metrics" }, more.map(opt)));
    this.trialSel = h("select", { id: "select-trials", class: "select",
      onchange: () => act.trial(Number(this.trialSel.value)) });
    this.trialState = h("span", { class: "trial-state" });
    this.addButton = h("button", { type: "button", class: "btn btn-primary", onclick: () => act.pin() },
      icon("pin"), "Add selected to Comparison View");
    this.note = h("span", { class: "flash muted", "aria-hidden": "true" });
    this.selection = h("div", { class: "selection-bar" },
      h("div", { class: "field" }, h("label", { for: "select-metric" }, "Select Metric"), this.metricSel),
      h("div", { class: "field" }, h("label", { for: "select-trials" }, "Select Trials"),
        h("div", { class: "with-badge" }, this.trialSel, this.trialState)),
      h("div", { class: "field field-action" }, this.addButton, this.note));

    this.back = toolButton("Page back", [icon("back")], () => act.page(-1));
    this.fwd = toolButton("Page forward", [icon("forward")], () => act.page(1));
    this.zin = toolButton("Zoom in", [icon("zoomIn")], () => act.zoom(0.5));
    this.zout = toolButton("Zoom out", [icon("zoomOut")], () => act.zoom(2));
    this.reset = toolButton("Reset zoom", [icon("reset"), h("span", {}, "Reset zoom")], () => act.reset(),
      "btn");
    this.liveBadge = h("span", { class: "live", hidden: true, title: "Following the running trial: new samples appear every second" },
      h("span", { class: "live-dot", "aria-hidden": "true" }), "Live");
    const toggle = () => act.markers(this.steps.checked, this.evals.checked);
    this.steps = h("input", { type: "checkbox", id: "mk-steps", checked: true, onchange: toggle });
    this.evals = h("input", { type: "checkbox", id: "mk-evals", checked: true, onchange: toggle });
    this.markerBox = h("div", { class: "marker-toggles", role: "group", "aria-label": "Markers" },
      h("label", { class: "check", for: "mk-steps" }, this.steps,
        h("span", { class: "mk", style: `--c:${STEP_COLOR}`, "aria-hidden": "true" }), "Optimizer Steps"),
      h("label", { class: "check", for: "mk-evals" }, this.evals,
        h("span", { class: "mk mk-band", style: `--c:${EVAL_COLOR}`, "aria-hidden": "true" }), "Evaluations"));
    this.tools = h("div", { class: "chart-toolbar", role: "toolbar", "aria-label": "Time window" },
      range.el,
      h("div", { class: "btn-group" }, this.back, this.fwd),
      h("div", { class: "btn-group" }, this.zin, this.zout),
      this.reset, this.liveBadge,
      h("div", { class: "spacer" }), this.markerBox);
  }

  setTrials(trials: Trial[], selected: number | null): void {
    const focused = document.activeElement === this.trialSel;
    this.trialSel.replaceChildren(...trials.map((t) =>
      h("option", { value: String(t.id), "data-state": t.state }, `${t.name} (${t.state})`)));
    if (selected !== null) this.trialSel.value = String(selected);
    this.markTrial(trials, selected);
    if (focused) this.trialSel.focus();
  }

  /** The state badge beside Select Trials. */
  markTrial(trials: Trial[], selected: number | null): void {
    const t = trials.find((x) => x.id === selected);
    this.trialState.replaceChildren(t ? stateBadge(t.state) : "");
  }

  setMetric(key: string | null): void {
    if (key) this.metricSel.value = key;
  }

  setMarkers(steps: boolean, evals: boolean): void {
    this.steps.checked = steps;
    this.evals.checked = evals;
  }

  /** `whole`: the view is the whole run (by choice, so it grows with a running trial). */
  update(span: S.Span, extent: number, whole: boolean, live: boolean, markers: boolean): void {
    const all = whole || S.isWhole(span, extent);
    enable(this.back, span.from > 0);
    // spans are rounded to milliseconds (as the URL carries them), so a paged window can end
    // a hair before the extent: nothing worth a page is left within 0.1% of its width
    enable(this.fwd, !whole && span.to < extent - Math.max(1e-3, 1e-3 * S.width(span)));
    enable(this.zin, S.width(span) > S.MIN_WIDTH + 1e-6);
    enable(this.zout, !all);
    enable(this.reset, !all);
    this.liveBadge.hidden = !live;
    this.markerBox.hidden = !markers;
  }

  flash(text: string): void {
    this.note.textContent = text;
    window.clearTimeout(this.noteTimer);
    this.noteTimer = window.setTimeout(() => { this.note.textContent = ""; }, 4000);
  }
}
