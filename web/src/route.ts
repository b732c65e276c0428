// Hash routing: "#/" is the runs list, "#/usage?<view>" the Usage page, "#/runs/<id>/<tab>?<view>"
// a run page. The whole view
// (tab, metric, trial, window, comparison list) lives in the hash, so a link reproduces it.

export const TABS = ["training", "evaluation", "adapters", "resources", "serving"] as const;
export type Tab = (typeof TABS)[number];

export const TAB_LABELS: Record<Tab, string> = {
  training: "Training",
  evaluation: "Evaluation",
  adapters: "Adapters",
  resources: "Resource Utilization",
  serving: "Serving",
};

/** The tabs a run shows: Serving only on a load run (a trial with `load.mode`). */
export function runTabs(trials: { params: Record<string, unknown> }[]): Tab[] {
  const load = trials.some((t) => t.params["load.mode"] === "concurrency" || t.params["load.mode"] === "rate");
  return TABS.filter((t) => t !== "serving" || load);
}

export type Route =
  | { page: "runs"; project: string | null }
  | { page: "usage"; q: URLSearchParams }
  | { page: "run"; run: string; tab: Tab; q: URLSearchParams }
  | { page: "missing"; path: string };

export function parseRoute(hash: string = location.hash): Route {
  const raw = hash.replace(/^#/, "") || "/";
  const [path, query = ""] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "runs")) {
    return { page: "runs", project: new URLSearchParams(query).get("project") };
  }
  if (parts.length === 1 && parts[0] === "usage") return { page: "usage", q: new URLSearchParams(query) };
  if (parts[0] === "runs" && parts.length <= 3) {
    const tab = (parts[2] ?? "training") as Tab;
    if (TABS.includes(tab)) return { page: "run", run: parts[1], tab, q: new URLSearchParams(query) };
  }
  return { page: "missing", path };
}

/** The runs list, of one project or (null) of every project the page may see. */
export function runsHref(project: string | null): string {
  return project === null ? "#/" : `#/?${new URLSearchParams({ project }).toString()}`;
}

export function runHref(run: string | number, tab?: Tab, q?: URLSearchParams): string {
  const base = `#/runs/${encodeURIComponent(String(run))}`;
  const tail = tab ? `/${tab}` : "";
  const qs = q && q.toString() ? `?${q.toString()}` : "";
  return base + tail + qs;
}

/** Rewrite the current entry's hash without a navigation (view changes: zoom, metric…). */
export function replaceHash(href: string): void {
  if (location.hash === href) return;
  history.replaceState(history.state, "", href);
}

/** A new history entry (tab changes), without re-routing. */
export function pushHash(href: string): void {
  if (location.hash === href) return;
  history.pushState(history.state, "", href);
}
