// Small shared pieces: state and severity badges, finding counts, messages, tables.

import { type FindingCounts, SEVERITIES, type Severity } from "./api";
import { type Child, h } from "./dom";

const STATES = new Set(["running", "completed", "failed", "lost", "pruned", "empty"]);

export function stateBadge(state: string): HTMLElement {
  const known = STATES.has(state) ? state : "other";
  return h("span", { class: `badge state-${known}`, "data-state": state }, state);
}

/** A finding's severity: high (red), moderate (amber), low (grey). */
export function severityBadge(severity: Severity): HTMLElement {
  const known = SEVERITIES.includes(severity) ? severity : "low";
  return h("span", { class: `badge sev sev-${known}`, "data-severity": severity }, severity);
}

/** "2 high-severity findings, 1 moderate-severity finding" (or "No findings"). */
export function countsText(counts: FindingCounts): string {
  const parts = SEVERITIES.filter((s) => counts[s] > 0)
    .map((s) => `${counts[s]} ${s}-severity finding${counts[s] === 1 ? "" : "s"}`);
  return parts.length ? parts.join(", ") : "No findings";
}

/** A run's findings as small coloured counts ("2 high · 1 moderate"), read out in full by
 *  screen readers; a link when `href` is given. null: not computed yet. */
export function findingCounts(counts: FindingCounts | null, href?: string): HTMLElement {
  if (counts === null) {
    return h("span", { class: "sev-counts muted", "data-counts": "pending" },
      h("span", { "aria-hidden": "true" }, "…"), h("span", { class: "visually-hidden" }, "Findings not computed yet"));
  }
  const shown = SEVERITIES.filter((s) => counts[s] > 0);
  const visual = shown.length
    ? shown.flatMap((s, i) => [
      i > 0 ? h("span", { class: "sev-sep" }, " · ") : null,
      h("span", { class: `sev-count sev-${s}`, "data-severity": s }, `${counts[s]} ${s}`),
    ])
    : [h("span", { class: "muted" }, "none")];
  const text = countsText(counts);
  const key = SEVERITIES.map((s) => `${s}:${counts[s]}`).join(",");
  const body = [h("span", { class: "visually-hidden" }, text), h("span", { "aria-hidden": "true" }, visual)];
  return href
    ? h("a", { class: "sev-counts", href, title: `${text} — show them`, "data-counts": key }, body)
    : h("span", { class: "sev-counts", title: text, "data-counts": key }, body);
}

export function message(kind: "info" | "error", text: string): HTMLElement {
  return h("div", { class: `msg msg-${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** A table; the columns whose indexes are in `numeric` are right-aligned. */
export function table(caption: string, head: string[], rows: Child[][],
                      numeric: number[] = []): HTMLElement {
  const cls = (i: number) => (numeric.includes(i) ? "num" : "");
  return h("div", { class: "table-wrap" },
    h("table", { class: "table" },
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { scope: "col", class: cls(i) }, c)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: cls(i) }, c)))))));
}
