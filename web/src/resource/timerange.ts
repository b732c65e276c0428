// The clock control: shows the span in view as elapsed time ("0:00:00 – 1:23:45") and opens a
// small form where a span can be typed (From / To in h:mm:ss, Apply).

import { h, icon } from "../dom";
import { fmtElapsed, parseElapsed } from "../format";
import type { Span } from "./span";

let uid = 0;

export class TimeRange {
  readonly el: HTMLElement;
  private readonly toggle: HTMLButtonElement;
  private readonly text: HTMLElement;
  private readonly form: HTMLFormElement;
  private readonly fromIn: HTMLInputElement;
  private readonly toIn: HTMLInputElement;
  private readonly err: HTMLElement;
  private span: Span = { from: 0, to: 0 };

  constructor(private readonly onApply: (span: Span) => void) {
    const id = `timerange-${++uid}`;
    this.text = h("span", { class: "tr-span", "data-testid": "time-span" }, "—");
    this.toggle = h("button", {
      type: "button", class: "btn tr-toggle", "aria-expanded": "false", "aria-controls": id,
      title: "Time range in view (elapsed time) — click to type a range",
      onclick: () => (this.form.hidden ? this.open() : this.close(false)),
    }, icon("clock"), h("span", { class: "visually-hidden" }, "Time range "), this.text);
    this.fromIn = h("input", {
      id: `${id}-from`, name: "from", class: "input mono", inputmode: "numeric",
      autocomplete: "off", spellcheck: "false", placeholder: "h:mm:ss", size: 9,
      "aria-describedby": `${id}-err`,
    });
    this.toIn = h("input", {
      id: `${id}-to`, name: "to", class: "input mono", inputmode: "numeric",
      autocomplete: "off", spellcheck: "false", placeholder: "h:mm:ss", size: 9,
      "aria-describedby": `${id}-err`,
    });
    this.err = h("div", { id: `${id}-err`, class: "tr-error", role: "alert" });
    this.form = h("form", {
      id, class: "tr-form popover", hidden: true, "aria-label": "Set time range",
      onsubmit: (ev: Event) => { ev.preventDefault(); this.submit(); },
      onkeydown: (ev: Event) => {
        if ((ev as KeyboardEvent).key === "Escape") { ev.preventDefault(); this.close(true); }
      },
    },
    h("div", { class: "tr-row" },
      h("label", { for: this.fromIn.id }, "From"), this.fromIn,
      h("label", { for: this.toIn.id }, "To"), this.toIn),
    this.err,
    h("div", { class: "tr-actions" },
      h("button", { type: "button", class: "btn", onclick: () => this.close(true) }, "Cancel"),
      h("button", { type: "submit", class: "btn btn-primary" }, "Apply")));
    this.el = h("div", { class: "timerange" }, this.toggle, this.form);
    // a click elsewhere closes the form; the listener goes once the control has left the page
    const outside = (ev: Event) => {
      if (!this.el.isConnected) document.removeEventListener("pointerdown", outside);
      else if (!this.form.hidden && !this.el.contains(ev.target as Node)) this.close(false);
    };
    document.addEventListener("pointerdown", outside);
  }

  show(span: Span): void {
    this.span = { ...span };
    const short = span.to - span.from < 20;
    this.text.textContent = `${fmtElapsed(span.from, short ? 1 : 0)} – ${fmtElapsed(span.to, short ? 1 : 0)}`;
    this.el.dataset.from = String(span.from);
    this.el.dataset.to = String(span.to);
  }

  open(): void {
    this.fromIn.value = fmtElapsed(this.span.from);
    this.toIn.value = fmtElapsed(this.span.to);
    this.setError(null);
    this.form.hidden = false;
    this.toggle.setAttribute("aria-expanded", "true");
    this.fromIn.focus();
    this.fromIn.select();
  }

  close(refocus: boolean): void {
    this.form.hidden = true;
    this.toggle.setAttribute("aria-expanded", "false");
    if (refocus) this.toggle.focus();
  }

  private setError(message: string | null, which?: HTMLInputElement): void {
    this.err.textContent = message ?? "";
    for (const input of [this.fromIn, this.toIn]) {
      input.setAttribute("aria-invalid", String(message !== null && (!which || which === input)));
    }
  }

  private submit(): void {
    const from = parseElapsed(this.fromIn.value);
    const to = parseElapsed(this.toIn.value);
    if (from === null) return this.invalid("From", this.fromIn);
    if (to === null) return this.invalid("To", this.toIn);
    if (!(to > from)) {
      this.setError("“To” must be after “From”.", this.toIn);
      this.toIn.focus();
      return;
    }
    this.setError(null);
    this.close(true);
    this.onApply({ from, to });
  }

  private invalid(name: string, input: HTMLInputElement): void {
    this.setError(`${name}: type an elapsed time as h:mm:ss, e.g. 0:15:00.`, input);
    input.focus();
  }
}
