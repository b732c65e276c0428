// The sweep's cost frontier (a panel of the run page; docs/usage.md): each trial's objective
// against its GPU-hours and against its peak GPU memory, the Pareto front of the completed
// trials drawn, pruned and failed trials marked, and what the best trial would have cost on
// the GPU the right-size rule picks.

import { api, type Frontier } from "./api";
import { h, replace } from "./dom";
import { runHref } from "./route";
import { message } from "./widgets";

const SVG = "http://www.w3.org/2000/svg";
const GIB = 1024 ** 3;
type Trial = Frontier["trials"][number];

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function text(x: number, y: number, s: string, anchor = "middle"): SVGTextElement {
  const t = svg("text", { x, y, "text-anchor": anchor, "font-size": 11, fill: "#6b7280" });
  t.textContent = s;
  return t;
}

/** One scatter: objective (y) against `cost` (x), the front as a step line. */
function scatter(f: Frontier, run: number, label: string, unit: string,
                 cost: (t: Trial) => number | null, front: (t: Trial) => boolean, testid: string): HTMLElement {
  const pts = f.trials.filter((t) => t.objective !== null && cost(t) !== null);
  if (!pts.length) {  // e.g. a sweep on the CPU: no trial held a GPU
    return h("figure", { class: "frontier-figure", "data-testid": testid },
      h("p", { class: "muted" }, `No scored trial has a ${label} figure (none held a GPU): nothing to plot.`));
  }
  const W = 360, H = 230, L = 52, B = 34, T = 10, R = 12;
  const xs = pts.map((t) => cost(t)!), ys = pts.map((t) => t.objective!);
  const x0 = 0, x1 = Math.max(1e-9, ...xs) * 1.05;
  const y0 = Math.min(...ys), y1 = Math.max(...ys);
  const pad = (y1 - y0) * 0.08 || 1;
  const X = (v: number) => L + ((v - x0) / (x1 - x0)) * (W - L - R);
  const Y = (v: number) => H - B - ((v - (y0 - pad)) / (y1 - y0 + 2 * pad)) * (H - B - T);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "frontier-chart", role: "img",
    "aria-label": `Objective against ${label}`, "data-testid": testid });
  root.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#9ca3af" }));
  root.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#9ca3af" }));
  root.appendChild(text((L + W - R) / 2, H - 4, `${label} (${unit})`));
  root.appendChild(text(L - 4, Y(y1) + 4, y1.toPrecision(3), "end"));
  root.appendChild(text(L - 4, Y(y0) + 4, y0.toPrecision(3), "end"));
  root.appendChild(text(W - R, H - B + 14, x1.toPrecision(3), "end"));
  const fr = pts.filter(front).sort((a, b) => cost(a)! - cost(b)!);
  if (fr.length) {
    let d = `M${X(cost(fr[0])!)},${Y(fr[0].objective!)}`;
    for (let i = 1; i < fr.length; i++) d += ` H${X(cost(fr[i])!)} V${Y(fr[i].objective!)}`;
    root.appendChild(svg("path", { d, fill: "none", stroke: "#2563eb", "stroke-width": 1.5, class: "front" }));
  }
  for (const t of pts) {
    const cx = X(cost(t)!), cy = Y(t.objective!);
    const kind = t.state === "pruned" ? "pruned" : t.state === "failed" ? "failed" : front(t) ? "front" : "trial";
    const link = document.createElementNS(SVG, "a");
    link.setAttribute("href", runHref(run, "resources", new URLSearchParams({ trial: String(t.trial_id) })));
    let mark: SVGElement;
    if (kind === "pruned" || kind === "failed") {
      mark = svg("path", { d: `M${cx - 4},${cy - 4} L${cx + 4},${cy + 4} M${cx - 4},${cy + 4} L${cx + 4},${cy - 4}`,
        stroke: kind === "failed" ? "#dc2626" : "#9ca3af", "stroke-width": 2 });
    } else {
      mark = svg("circle", { cx, cy, r: 4.5, fill: kind === "front" ? "#2563eb" : "#fff", stroke: "#2563eb", "stroke-width": 1.5 });
    }
    mark.setAttribute("data-trial", String(t.trial_id));
    mark.setAttribute("data-kind", kind);
    const title = svg("title", {});
    title.textContent = `${t.name} (${t.state}): objective ${t.objective}, ${cost(t)!.toPrecision(3)} ${unit}`;
    mark.appendChild(title);
    link.appendChild(mark);
    root.appendChild(link);
  }
  const wrap = h("figure", { class: "frontier-figure" });
  wrap.appendChild(root);
  wrap.appendChild(h("figcaption", { class: "muted" }, `Objective against ${label}`));
  return wrap;
}

/** The panel: loads the frontier once; says so when the run has no objective to plot. */
export function frontierPanel(run: number): HTMLElement {
  const body = h("div", {}, message("info", "Loading the cost frontier…"));
  const el = h("section", { class: "card frontier-panel", "data-testid": "frontier" },
    h("h2", {}, "Cost frontier"), body);
  void api.frontier(run).then((f) => {
    const scored = f.trials.filter((t) => t.objective !== null);
    if (!scored.length) {
      replace(body, message("info", "No trial recorded an objective (eval/objective): nothing to weigh against its cost."));
      return;
    }
    const dir = f.direction ?? "minimize (direction unknown)";
    replace(body,
      h("p", { class: "muted" }, `Objective (${dir}) against what each trial cost. Filled: on the Pareto front of the completed trials; × grey: pruned; × red: failed.`),
      h("div", { class: "frontier-charts" },
        scatter(f, run, "GPU-hours", "h", (t) => t.gpu_hours, (t) => t.on_hours_front, "frontier-hours"),
        scatter(f, run, "peak GPU memory", "GiB", (t) => (t.peak_gpu_mem === null ? null : t.peak_gpu_mem / GIB),
          (t) => t.on_mem_front, "frontier-mem")),
      f.saying ? h("p", { class: "frontier-saying", "data-testid": "frontier-saying" }, f.saying) : null);
  }).catch((e: Error) => replace(body, message("error", `Could not load the cost frontier: ${e.message}`)));
  return el;
}
