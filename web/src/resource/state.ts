// The Resource Utilization tab's view as URL parameters, and the comparison list's copy in
// localStorage (so it survives a reload even from a link that does not carry it).

import { round3, type Span } from "./span";

export interface Pin {
  trial: number;
  metric: string;
}

export interface ResourceView {
  metric: string | null;
  trial: number | null;
  /** null: the whole run (and, for a running trial, following the live edge) */
  span: Span | null;
  pins: Pin[];
  /** index into pins of the selected row, -1 for none */
  sel: number;
  align: boolean;
  steps: boolean;
  evals: boolean;
}

function num(q: URLSearchParams, key: string): number | null {
  const raw = q.get(key);
  if (raw === null || raw.trim() === "") return null;
  const v = Number(raw);
  return Number.isFinite(v) ? v : null;
}

export function parsePins(raw: string): Pin[] {
  const pins: Pin[] = [];
  for (const part of raw.split(",")) {
    const i = part.indexOf(":");
    if (i <= 0) continue;
    const trial = Number(part.slice(0, i));
    const metric = part.slice(i + 1);
    if (Number.isInteger(trial) && metric && !pins.some((p) => p.trial === trial && p.metric === metric)) {
      pins.push({ trial, metric });
    }
  }
  return pins;
}

export function pinsParam(pins: Pin[]): string {
  return pins.map((p) => `${p.trial}:${p.metric}`).join(",");
}

/** The view a URL describes; the comparison list comes from `stored` when the URL has none. */
export function readView(q: URLSearchParams, stored: { pins: Pin[]; sel: number } | null): ResourceView {
  const from = num(q, "from");
  const to = num(q, "to");
  const fromUrl = q.has("cmp");
  const pins = fromUrl ? parsePins(q.get("cmp") ?? "") : (stored?.pins ?? []);
  const selRaw = fromUrl ? num(q, "sel") : (stored?.sel ?? null);
  const sel = selRaw !== null && selRaw >= 0 && selRaw < pins.length ? Math.floor(selRaw) : -1;
  return {
    metric: q.get("metric"),
    trial: num(q, "trial"),
    span: from !== null && to !== null && to > from ? { from, to } : null,
    pins,
    sel,
    align: q.get("align") === "1",
    steps: q.get("steps") !== "0",
    evals: q.get("evals") !== "0",
  };
}

export function viewQuery(v: ResourceView): URLSearchParams {
  const q = new URLSearchParams();
  if (v.metric) q.set("metric", v.metric);
  if (v.trial !== null) q.set("trial", String(v.trial));
  if (v.span) {
    q.set("from", String(round3(v.span.from)));
    q.set("to", String(round3(v.span.to)));
  }
  q.set("cmp", pinsParam(v.pins));
  if (v.sel >= 0) q.set("sel", String(v.sel));
  if (v.align) q.set("align", "1");
  if (!v.steps) q.set("steps", "0");
  if (!v.evals) q.set("evals", "0");
  return q;
}

const key = (run: number) => `tunescope.comparison.run.${run}`;

export function loadPins(run: number): { pins: Pin[]; sel: number } | null {
  try {
    const raw = localStorage.getItem(key(run));
    if (!raw) return null;
    const obj = JSON.parse(raw) as { pins?: unknown; sel?: unknown };
    const pins = parsePins(typeof obj.pins === "string" ? obj.pins : "");
    const sel = typeof obj.sel === "number" ? obj.sel : -1;
    return { pins, sel };
  } catch {
    return null;
  }
}

export function savePins(run: number, pins: Pin[], sel: number): void {
  try {
    localStorage.setItem(key(run), JSON.stringify({ pins: pinsParam(pins), sel }));
  } catch {
    /* storage full or disabled: the URL still carries the list */
  }
}
