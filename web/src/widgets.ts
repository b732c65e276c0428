// Small shared pieces: state badges, messages, tables.

import { type Child, h } from "./dom";

const STATES = new Set(["running", "completed", "failed", "lost", "pruned", "empty"]);

export function stateBadge(state: string): HTMLElement {
  const known = STATES.has(state) ? state : "other";
  return h("span", { class: `badge state-${known}`, "data-state": state }, state);
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
