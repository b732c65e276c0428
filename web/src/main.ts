// Entry point: routes the hash to the runs list or a run page, and asks who the page reads as
// (for the header) meanwhile. A team server answers 401 until the page has logged in: the
// login form then takes the page's place.

import "./hooks";
import { api, ApiError, onUnauthorized, type Session } from "./api";
import { h, replace } from "./dom";
import { parseRoute } from "./route";
import { RunPage } from "./runpage";
import { RunsPage } from "./runs";
import { UsagePage } from "./usage";
import { loginForm, renderSession, showProject } from "./session";
import { message } from "./widgets";

let page: RunsPage | RunPage | UsagePage | null = null;
let pageRun: string | null = null;
let routed: string | null = null;
/** false while the login form shows */
let loggedIn = true;
/** what the server said the page reads as (null: not known yet) */
let session: Session | null = null;

const main = document.getElementById("main")!;
const sessionArea = document.getElementById("session")!;

function leave(): void {
  page?.destroy();
  page = null;
  pageRun = null;
  routed = null;
  const crumbs = document.getElementById("crumbs");
  if (crumbs) replace(crumbs);
}

function route(): void {
  if (!loggedIn) return; // the login form shows: nothing to route to yet
  // the back button fires both hashchange and popstate: route once per location
  if (routed === location.hash && page) return;
  routed = location.hash;
  const r = parseRoute();
  showProject(sessionArea, r.page === "runs" ? r.project : null);
  if (r.page === "run" && page instanceof RunPage && pageRun === r.run) {
    page.route(r.tab, r.q);
    return;
  }
  leave();
  routed = location.hash;
  if (r.page === "runs") {
    const p = new RunsPage(r.project);
    page = p;
    replace(main, p.el);
    p.start();
  } else if (r.page === "usage") {
    const p = new UsagePage(r.q);
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

/** The login form, in place of whatever showed (no token yet, or the session ended). */
function askForToken(): void {
  session = null;
  if (!loggedIn) return;
  loggedIn = false;
  leave();
  replace(sessionArea);
  document.title = "Log in · tunescope";
  replace(main, loginForm((s) => {
    loggedIn = true;
    void showSession(s);
    route();
  }));
  main.querySelector<HTMLInputElement>("#login-token")?.focus();
}

/** The header's session area: the projects `s` may see, and Log out on a team server. */
async function showSession(s: Session): Promise<void> {
  session = s;
  let projects: { name: string }[] = [];
  try {
    projects = await api.projects();
  } catch {
    /* the header goes without its project list; the pages say what failed */
  }
  if (session !== s || !loggedIn) return; // logged out meanwhile
  const r = parseRoute();
  renderSession(sessionArea, s, projects, r.page === "runs" ? r.project : null, askForToken);
}

async function boot(): Promise<void> {
  route();
  try {
    await showSession(await api.session());
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) askForToken();
    // anything else (the server away): no header; each page says what it could not load
  }
}

onUnauthorized(askForToken);
// history.replaceState/pushState (our own view updates) fire neither event; the back button
// and links do.
window.addEventListener("hashchange", route);
window.addEventListener("popstate", route);
void boot();
