// A run page: its header and the Training | Evaluation | Adapters | Resource Utilization tabs
// (an ARIA tablist: arrow keys move between tabs).

import { AdaptersTab } from "./adapters";
import { api, type MetricInfo, type RunDetail } from "./api";
import { h, replace } from "./dom";
import { fmtBytes, fmtDate, fmtDuration } from "./format";
import { frontierPanel } from "./frontier";
import { ResourceTab } from "./resource/tab";
import { pushHash, replaceHash, runHref, runTabs, type Tab, TAB_LABELS } from "./route";
import { ScalarsTab } from "./scalars";
import { ServingTab } from "./serving";
import { message, stateBadge } from "./widgets";

interface TabView {
  el: HTMLElement;
  start(): void;
  destroy(): void;
}

export class RunPage {
  readonly el: HTMLElement;
  private readonly header: HTMLElement;
  private readonly tabBar: HTMLElement;
  private readonly panel: HTMLElement;
  private run: RunDetail | null = null;
  private catalog: MetricInfo[] = [];
  private current: TabView | null = null;
  private tab: Tab;
  private dead = false;

  constructor(private readonly runRef: string, tab: Tab, private q: URLSearchParams) {
    this.tab = tab;
    this.header = h("div", { class: "page-head" }, h("h1", {}, "Loading run…"));
    this.tabBar = h("div", { class: "tabs", role: "tablist", "aria-label": "Run views" });
    this.panel = h("div", { class: "tab-panel", role: "tabpanel", id: "tab-panel", tabindex: "-1" });
    this.el = h("div", { class: "page run-page" }, this.header, this.tabBar, this.panel);
  }

  async start(): Promise<void> {
    try {
      [this.run, this.catalog] = await Promise.all([api.run(this.runRef), api.metrics()]);
    } catch (e) {
      if (!this.dead) replace(this.header, h("h1", {}, "Run not found"), message("error", (e as Error).message));
      return;
    }
    if (this.dead) return;
    this.renderHeader();
    this.renderTabs();
    this.showTab(this.tab, this.q);
    this.el.appendChild(frontierPanel(this.run.id));
  }

  /** The route changed to this run: another tab, or a view typed into the URL. */
  route(tab: Tab, q: URLSearchParams): void {
    this.q = q;
    if (!this.run) {
      this.tab = tab;
      return;
    }
    this.renderTabs(tab);
    this.showTab(tab, q);
  }

  destroy(): void {
    this.dead = true;
    this.current?.destroy();
  }

  private renderHeader(): void {
    const r = this.run!;
    document.title = `${r.name} · tunescope`;
    const dur = r.duration_s ?? ((r.end ?? Date.now() / 1000) - r.start);
    replace(this.header,
      h("div", { class: "title-row" }, h("h1", { "data-testid": "run-name" }, r.name), stateBadge(r.state)),
      h("dl", { class: "facts" },
        h("div", {}, h("dt", {}, "Started"), h("dd", {}, fmtDate(r.start))),
        h("div", {}, h("dt", {}, "Duration"), h("dd", {}, fmtDuration(dur))),
        h("div", {}, h("dt", {}, "Trials"), h("dd", {}, String(r.trials.length))),
        h("div", {}, h("dt", {}, "Peak GPU memory"), h("dd", {}, fmtBytes(r.peak_gpu_mem)))));
    const crumbs = document.getElementById("crumbs");
    if (crumbs) replace(crumbs, h("a", { href: "#/" }, "Runs"), h("span", { "aria-hidden": "true" }, " / "),
      h("span", { "aria-current": "page" }, r.name));
  }

  private tabs(): Tab[] {
    return runTabs(this.run?.trials ?? []);
  }

  private renderTabs(active: Tab = this.tab): void {
    replace(this.tabBar, this.tabs().map((t) => {
      const selected = t === active;
      return h("button", {
        type: "button", role: "tab", id: `tab-${t}`, "aria-selected": String(selected),
        "aria-controls": "tab-panel", tabindex: selected ? "0" : "-1", class: "tab",
        onclick: () => this.choose(t),
        onkeydown: (ev: Event) => this.tabKey(ev as KeyboardEvent, t),
      }, TAB_LABELS[t]);
    }));
  }

  private tabKey(ev: KeyboardEvent, t: Tab): void {
    const tabs = this.tabs();
    const i = tabs.indexOf(t);
    const to = ev.key === "ArrowRight" ? (i + 1) % tabs.length
      : ev.key === "ArrowLeft" ? (i + tabs.length - 1) % tabs.length
        : ev.key === "Home" ? 0 : ev.key === "End" ? tabs.length - 1 : -1;
    if (to < 0) return;
    ev.preventDefault();
    this.choose(tabs[to]);
    document.getElementById(`tab-${tabs[to]}`)?.focus();
  }

  private choose(t: Tab): void {
    if (t === this.tab && this.current) return;
    pushHash(runHref(this.run!.id, t));
    this.renderTabs(t);
    this.showTab(t, new URLSearchParams());
  }

  private showTab(t: Tab, q: URLSearchParams): void {
    const run = this.run!;
    this.current?.destroy();
    this.tab = t;
    this.panel.setAttribute("aria-labelledby", `tab-${t}`);
    let view: TabView;
    if (t === "resources") {
      view = new ResourceTab({
        run, catalog: this.catalog,
        reloadRun: () => api.run(run.id),
        writeQuery: (query) => { if (this.tab === "resources") replaceHash(runHref(run.id, "resources", query)); },
      }, q);
    } else if (t === "adapters") {
      view = new AdaptersTab(run);
    } else if (t === "serving") {
      view = new ServingTab(run);
    } else {
      view = new ScalarsTab(run, t);
    }
    this.current = view;
    replace(this.panel, view.el);
    view.start();
  }
}
