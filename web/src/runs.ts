// The runs list: name, start, state, trials, duration, peak GPU memory and findings by
// severity, of every project the page may see or of one; refreshed every 5 s.

import { api, type RunSummary } from "./api";
import { h, replace } from "./dom";
import { fmtBytes, fmtDate, fmtDuration } from "./format";
import { hooks } from "./hooks";
import { runHref } from "./route";
import { findingCounts, message, stateBadge } from "./widgets";

export class RunsPage {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private timer = 0;
  private dead = false;

  constructor(private readonly project: string | null = null) {
    this.body = h("div", { class: "card" }, message("info", "Loading runs…"));
    const what = project === null
      ? "Every fine-tune run you may see in this store, newest first."
      : `The runs of project “${project}”, newest first.`;
    this.el = h("div", { class: "page runs-page" },
      h("div", { class: "page-head" }, h("h1", {}, "Runs"), h("p", { class: "muted" }, what,
        " ", h("a", { href: "#/usage", class: "usage-link" }, "Usage: GPU-hours held, busy and wasted →"))),
      this.body);
  }

  start(): void {
    document.title = "Runs · tunescope";
    void this.load();
    this.timer = window.setInterval(() => { if (!document.hidden) void this.load(); }, 5000);
  }

  destroy(): void {
    this.dead = true;
    window.clearInterval(this.timer);
  }

  private async load(): Promise<void> {
    let runs: RunSummary[];
    try {
      runs = await api.runs(this.project ?? undefined);
    } catch (e) {
      if (!this.dead) replace(this.body, message("error", `Could not load runs: ${(e as Error).message}`));
      return;
    }
    if (this.dead) return;
    hooks.runs = {
      loads: hooks.runs.loads + 1,
      findings: Object.fromEntries(runs.map((r) => [String(r.id), r.findings ?? null])),
    };
    if (!runs.length) {
      replace(this.body, message("info",
        "No runs recorded yet. Record one with “tunescope run -- python train.py”, or try “tunescope demo”."));
      return;
    }
    const rows = runs.map((r) => h("tr", { "data-run": String(r.id) },
      h("td", {}, h("a", { href: runHref(r.id), class: "run-link" }, r.name)),
      h("td", { class: "nowrap" }, fmtDate(r.start)),
      h("td", {}, stateBadge(r.state)),
      h("td", { class: "num" }, String(r.trials)),
      h("td", { class: "num nowrap" }, fmtDuration(r.duration_s)),
      h("td", { class: "num nowrap" }, fmtBytes(r.peak_gpu_mem)),
      h("td", { class: "nowrap findings-cell" },
        findingCounts(r.findings ?? null, runHref(r.id, "resources")))));
    replace(this.body, h("div", { class: "table-wrap" },
      h("table", { class: "table runs-table" },
        h("caption", { class: "visually-hidden" }, "Runs"),
        h("thead", {}, h("tr", {},
          ["Name", "Started", "State", "Trials", "Duration", "Peak GPU memory", "Findings"].map((c, i) =>
            h("th", { scope: "col", class: i >= 3 && i <= 5 ? "num" : "" }, c)))),
        h("tbody", {}, rows))));
  }
}
