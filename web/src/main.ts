// Entry point: routes the hash to the runs list or a run page.

import "./hooks";
import { h, replace } from "./dom";
import { parseRoute } from "./route";
import { RunPage } from "./runpage";
import { RunsPage } from "./runs";
import { message } from "./widgets";

let page: RunsPage | RunPage | null = null;
let pageRun: string | null = null;
let routed: string | null = null;

function route(): void {
  // the back button fires both hashchange and popstate: route once per location
  if (routed === location.hash && page) return;
  routed = location.hash;
  const r = parseRoute();
  const main = document.getElementById("main")!;
  if (r.page === "run" && page instanceof RunPage && pageRun === r.run) {
    page.route(r.tab, r.q);
    return;
  }
  page?.destroy();
  page = null;
  pageRun = null;
  const crumbs = document.getElementById("crumbs");
  if (crumbs) replace(crumbs);
  if (r.page === "runs") {
    const p = new RunsPage();
    page = p;
    replace(main, p.el);
    p.start();
  } else if (r.page === "run") {
    const p = new RunPage(r.run, r.tab, r.q);
    page = p;
    pageRun = r.run;
    replace(main, p.el);
    void p.start();
  } else {
    replace(main, h("div", { class: "page" }, h("h1", {}, "Page not found"),
      message("error", `Nothing lives at “${r.path}”.`), h("a", { href: "#/" }, "Back to the runs")));
  }
}

// history.replaceState/pushState (our own view updates) fire neither event; the back button
// and links do.
window.addEventListener("hashchange", route);
window.addEventListener("popstate", route);
route();
