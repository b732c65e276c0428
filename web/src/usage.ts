// The Usage page (docs/usage.md): for a time range, a stacked chart of held vs busy GPU-hours
// per UTC day by a chosen grouping, the table of `tunescope usage`, and the ten trials that
// wasted most (held − busy), each linking to its trial with its longest idle stretch selected.
// The view (range, groupings) lives in the hash: #/usage?since=DATE&until=DATE&by=G&group=G.

import { api, type UsageReport } from "./api";
import { h, replace } from "./dom";
import { fmtElapsed } from "./format";
import { replaceHash, runHref } from "./route";
import { message, table } from "./widgets";

export const GROUPINGS = ["project", "user", "run", "host", "gpu_model", "day", "week"] as const;
const DAY = 86400;
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563", "#db2777"];

export interface UsageView {
  since: string;
  until: string;
  by: string;
  group: string;
  /** hourly prices, MODEL=USD comma-separated ("" for none) */
  price: string;
}

function isoDay(t: number): string {
  return new Date(t * 1000).toISOString().slice(0, 10);
}

/** The view a URL describes: the last 30 days by project unless it says otherwise. */
export function readUsageView(q: URLSearchParams, now: number = Date.now() / 1000): UsageView {
  const day = (k: string, d: string) => (/^\d{4}-\d{2}-\d{2}$/.test(q.get(k) ?? "") ? q.get(k)! : d);
  const group = (k: string) => ((GROUPINGS as readonly string[]).includes(q.get(k) ?? "") ? q.get(k)! : "project");
  return {
    since: day("since", isoDay(now - 30 * DAY)),
    until: day("until", isoDay(now + DAY)),
    by: group("by"),
    group: group("group"),
    price: q.get("price") ?? "",
  };
}

export function usageHref(v: UsageView): string {
  return `#/usage?${new URLSearchParams({ ...v }).toString()}`;
}

function epoch(day: string): number {
  return Date.parse(`${day}T00:00:00Z`) / 1000;
}

function pct(v: number | null): string {
  return v === null ? "—" : `${v.toFixed(1)}%`;
}

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** Held vs busy GPU-hours per day, stacked by group: busy solid, held but not busy light. */
function chart(u: UsageReport): HTMLElement {
  const groups = [...new Set(u.days.filter((d) => d.held_s > 0).map((d) => d.group ?? "—"))].sort();
  const days = [...new Set(u.days.map((d) => d.day))].sort();
  const W = 760, H = 220, L = 48, B = 24;
  const held = new Map<string, number>();
  for (const d of u.days) held.set(d.day, (held.get(d.day) ?? 0) + d.held_s / 3600);
  const top = Math.max(1e-9, ...held.values());
  const bw = days.length ? (W - L) / days.length : 0;
  const y = (v: number) => H - B - (v / top) * (H - B - 8);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "usage-chart", role: "img",
    "aria-label": "Held and busy GPU-hours per day" });
  root.appendChild(svg("line", { x1: L, y1: H - B, x2: W, y2: H - B, stroke: "#9ca3af" }));
  for (const f of [0, 0.5, 1]) {
    const t = svg("text", { x: L - 6, y: y(top * f) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" });
    t.textContent = `${(top * f).toFixed(1)} h`;
    root.appendChild(t);
  }
  days.forEach((day, i) => {
    let base = 0;
    const x = L + i * bw;
    const of = u.days.filter((d) => d.day === day);
    const parts: [string, number, boolean][] = [];
    for (const g of groups) {
      const d = of.find((e) => (e.group ?? "—") === g);
      if (d) parts.push([g, d.busy_s / 3600, true]);
    }
    for (const g of groups) {
      const d = of.find((e) => (e.group ?? "—") === g);
      if (d) parts.push([g, (d.held_s - d.busy_s) / 3600, false]);
    }
    for (const [g, v, busy] of parts) {
      if (v <= 0) continue;
      const rect = svg("rect", {
        x: x + 1, y: y(base + v), width: Math.max(1, bw - 2), height: y(base) - y(base + v),
        fill: COLORS[groups.indexOf(g) % COLORS.length], "fill-opacity": busy ? 0.9 : 0.25,
        "data-day": day, "data-group": g, "data-kind": busy ? "busy" : "idle",
      });
      const title = svg("title", {});
      title.textContent = `${day} · ${g}: ${v.toFixed(2)} GPU-h ${busy ? "busy" : "held, not busy"}`;
      rect.appendChild(title);
      root.appendChild(rect);
      base += v;
    }
    if (days.length <= 31 || i % Math.ceil(days.length / 15) === 0) {
      const t = svg("text", { x: x + bw / 2, y: H - 8, "text-anchor": "middle", "font-size": 10, fill: "#6b7280" });
      t.textContent = day.slice(5);
      root.appendChild(t);
    }
  });
  const legend = h("ul", { class: "usage-legend" }, groups.map((g, i) => {
    const sw = svg("svg", { width: 12, height: 12, "aria-hidden": "true" });
    sw.appendChild(svg("rect", { width: 12, height: 12, fill: COLORS[i % COLORS.length] }));
    return h("li", {}, sw, ` ${g}`);
  }), h("li", { class: "muted" }, "solid: busy · light: held, not busy"));
  const wrap = h("div", { class: "usage-chart-wrap", "data-testid": "usage-chart" });
  wrap.appendChild(root);
  wrap.appendChild(legend);
  return wrap;
}

export class UsagePage {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private view: UsageView;
  private dead = false;
  private seq = 0;

  constructor(q: URLSearchParams) {
    this.view = readUsageView(q);
    this.body = h("div", {}, message("info", "Loading usage…"));
    this.el = h("div", { class: "page usage-page" },
      h("div", { class: "page-head" }, h("h1", {}, "Usage"),
        h("p", { class: "muted" },
          "GPU-hours held and busy, idle stretches, memory, CPU and waste across runs, people and GPUs (docs/usage.md). Days are UTC.")),
      this.controls(), this.body);
  }

  private controls(): HTMLElement {
    const v = this.view;
    const date = (id: string, label: string, value: string, set: (x: string) => void) =>
      h("label", { class: "field", for: id }, label,
        h("input", { id, type: "date", class: "input", value,
          onchange: (ev: Event) => { const x = (ev.target as HTMLInputElement).value; if (x) { set(x); this.changed(); } } }));
    const pick = (id: string, label: string, value: string, set: (x: string) => void) =>
      h("label", { class: "field", for: id }, label,
        h("select", { id, class: "select select-compact",
          onchange: (ev: Event) => { set((ev.target as HTMLSelectElement).value); this.changed(); } },
          GROUPINGS.map((g) => h("option", { value: g, selected: g === value }, g.replace("_", " ")))));
    return h("div", { class: "card usage-controls toolbar" },
      date("usage-since", "From ", v.since, (x) => { this.view.since = x; }),
      date("usage-until", "To ", v.until, (x) => { this.view.until = x; }),
      pick("usage-by", "Table by ", v.by, (x) => { this.view.by = x; }),
      pick("usage-group", "Chart by ", v.group, (x) => { this.view.group = x; }),
      h("label", { class: "field", for: "usage-price" }, "Prices ",
        h("input", { id: "usage-price", class: "input", value: v.price, size: 40,
          placeholder: "MODEL=USD per GPU-hour, comma-separated",
          onchange: (ev: Event) => { this.view.price = (ev.target as HTMLInputElement).value.trim(); this.changed(); } })));
  }

  start(): void {
    document.title = "Usage · tunescope";
    void this.load();
  }

  destroy(): void {
    this.dead = true;
  }

  private changed(): void {
    replaceHash(usageHref(this.view));
    void this.load();
  }

  private async load(): Promise<void> {
    const v = this.view;
    const since = epoch(v.since), until = epoch(v.until);
    if (!(until > since)) {
      replace(this.body, message("error", "The range's end must be after its start."));
      return;
    }
    const mine = ++this.seq;
    let u: UsageReport;
    try {
      u = await api.usage(since, until, v.by, v.group, v.price);
    } catch (e) {
      if (!this.dead && mine === this.seq) replace(this.body, message("error", `Could not load usage: ${(e as Error).message}`));
      return;
    }
    if (this.dead || mine !== this.seq) return;
    if (!u.rows.length) {
      replace(this.body, message("info", "No trial held anything in this range."));
      return;
    }
    const rows = u.rows.map((r) => [
      r.keys[v.by] ?? "—",
      fmtElapsed(r.gpu_held_s), fmtElapsed(r.gpu_busy_s), fmtElapsed(r.gpu_idle_s), r.busy_by ?? "—",
      pct(r.mem_peak_pct), pct(r.mem_mean_pct), fmtElapsed(r.cpu_core_s), fmtElapsed(r.cpu_quota_core_s),
      String(r.trials), pct(r.failed_pruned_pct), r.cost_usd === null ? "—" : `$${r.cost_usd.toFixed(2)}`,
    ]);
    const wasted = u.wasted.map((t) => {
      const q = new URLSearchParams({ trial: String(t.trial_id), metric: "gpu.util" });
      if (t.idle_t0 !== null && t.idle_t1 !== null) {
        q.set("from", String(Math.round((t.idle_t0 - t.run_start) * 1000) / 1000));
        q.set("to", String(Math.round((t.idle_t1 - t.run_start) * 1000) / 1000));
      }
      return [
        h("a", { href: runHref(t.run_id, "resources", q), class: "wasted-link", "data-trial": String(t.trial_id) },
          `${t.run} / ${t.trial}`),
        fmtElapsed(t.held_s), fmtElapsed(t.busy_s), fmtElapsed(t.wasted_s),
        t.idle_t0 === null || t.idle_t1 === null ? "—" : `GPU ${t.idle_device}: ${fmtElapsed(t.idle_t1 - t.idle_t0)}`,
      ];
    });
    replace(this.body,
      h("section", { class: "card" }, h("h2", {}, `Held vs busy GPU-hours per day, by ${v.group.replace("_", " ")}`), chart(u)),
      h("section", { class: "card", "data-testid": "usage-table" }, h("h2", {}, `By ${v.by.replace("_", " ")}`),
        table("Usage", [v.by.replace("_", " "), "GPU-h held", "GPU-h busy", "GPU-h idle", "busy by", "mem peak",
          "mem mean", "CPU core-h", "quota core-h", "trials", "failed+pruned", "cost"], rows,
        [1, 2, 3, 5, 6, 7, 8, 9, 10, 11])),
      h("section", { class: "card", "data-testid": "usage-wasted" }, h("h2", {}, "The ten trials that wasted most (held − busy)"),
        table("Most wasteful trials", ["trial", "GPU-h held", "GPU-h busy", "wasted", "longest idle stretch"], wasted,
          [1, 2, 3])));
  }
}
