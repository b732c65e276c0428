// The page's session: in the header, the projects it may see (a label, or a selector when
// there are several) and, on a team server, "Log out"; and the login form a team server's
// page shows until it has a token. The token itself lives in an HttpOnly cookie the server
// sets: no script of the page ever holds it after the form is sent.

import { api, ApiError, type Project, type Session } from "./api";
import { h, replace } from "./dom";
import { runsHref } from "./route";
import { message } from "./widgets";

/** Fill the header's session area; `current` is the project the runs list shows (null:
 *  every one). */
export function renderSession(el: HTMLElement, session: Session, projects: Project[],
                              current: string | null, onLogout: () => void): void {
  const names = projects.map((p) => p.name);
  let which: HTMLElement | null = null;
  if (names.length > 1) {
    const select = h("select", { id: "project-select", class: "select select-compact" },
      h("option", { value: "" }, "All projects"),
      names.map((n) => h("option", { value: n }, n)));
    select.value = current !== null && names.includes(current) ? current : "";
    select.addEventListener("change", () => {
      location.hash = runsHref(select.value === "" ? null : select.value);
    });
    which = h("label", { class: "session-project", for: "project-select" },
      h("span", { class: "session-key" }, "Project"), select);
  } else if (names.length === 1) {
    which = h("span", { class: "session-project", "data-project": names[0] },
      h("span", { class: "session-key" }, "Project"), h("strong", {}, names[0]));
  }
  const logout = session.mode === "tokens"
    ? h("button", {
      type: "button", class: "btn btn-compact", onclick: () => {
        void api.logout().catch(() => undefined).then(onLogout);
      },
    }, "Log out")
    : null;
  replace(el, which, logout);
}

/** Point the header's project selector at the project the runs list shows. */
export function showProject(el: HTMLElement, current: string | null): void {
  const select = el.querySelector<HTMLSelectElement>("#project-select");
  if (select) select.value = current ?? "";
}

/** The login form: a token, sent once to the server, which answers with a session. */
export function loginForm(onSession: (s: Session) => void): HTMLElement {
  const input = h("input", {
    type: "password", id: "login-token", name: "token", class: "input login-input",
    autocomplete: "off", spellcheck: "false", required: true, "aria-describedby": "login-help",
  });
  const button = h("button", { type: "submit", class: "btn btn-primary" }, "Log in");
  const status = h("div", { class: "login-status" });
  const form = h("form", { class: "card login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Log in"),
    h("p", { id: "login-help", class: "muted" },
      "This tunescope server needs an access token. Its admin makes one with “tunescope token create”."),
    h("div", { class: "field" }, h("label", { for: "login-token" }, "Access token"), input),
    h("div", { class: "login-actions" }, button),
    status);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    replace(status);
    api.login(token).then((s) => {
      input.value = "";
      onSession(s);
    }, (e: unknown) => {
      const why = e instanceof ApiError ? e.message : String(e);
      input.setAttribute("aria-invalid", "true");
      replace(status, message("error", `Could not log in: ${why}`));
      input.select();
    }).finally(() => { button.disabled = false; });
  });
  return h("div", { class: "page login-page" }, form);
}
