// DOM helpers. Everything a user typed (run, trial and param names) reaches the page through
// text nodes or textContent here: nothing in the app ever assigns innerHTML.

export type Child = Node | string | number | null | undefined | false;
type Handler = (ev: Event) => void;
export type Props = Record<string, string | number | boolean | Handler | null | undefined>;

/** An element: `props` keys starting with "on" are listeners, `class` sets the class,
 *  false/null/undefined values are skipped, true sets an empty attribute. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, props: Props = {}, ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
    } else if (key === "class") {
      el.className = String(value);
    } else if (key === "style") {
      // through the CSSOM: the page's Content-Security-Policy forbids inline style attributes
      for (const decl of String(value).split(";")) {
        const i = decl.indexOf(":");
        if (i > 0) el.style.setProperty(decl.slice(0, i).trim(), decl.slice(i + 1).trim());
      }
    } else if (key === "text") {
      el.textContent = String(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

/** Replace every child of `el`. */
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

const SVG = "http://www.w3.org/2000/svg";

/** A 16x16 stroked icon drawn from SVG path data (ours, never user input). */
export function icon(name: keyof typeof ICONS): SVGSVGElement {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "16");
  svg.setAttribute("height", "16");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.classList.add("icon");
  for (const d of ICONS[name]) {
    const p = document.createElementNS(SVG, "path");
    p.setAttribute("d", d);
    svg.appendChild(p);
  }
  return svg;
}

const ICONS = {
  clock: ["M8 1.5a6.5 6.5 0 1 0 0 13a6.5 6.5 0 1 0 0-13", "M8 4.5V8l2.5 1.5"],
  back: ["M8 3.5L3.5 8L8 12.5", "M12.5 3.5L8 8l4.5 4.5"],
  forward: ["M8 3.5L12.5 8L8 12.5", "M3.5 3.5L8 8l-4.5 4.5"],
  zoomIn: ["M7 2a5 5 0 1 0 0 10a5 5 0 1 0 0-10", "M10.5 10.5L14 14", "M5 7h4", "M7 5v4"],
  zoomOut: ["M7 2a5 5 0 1 0 0 10a5 5 0 1 0 0-10", "M10.5 10.5L14 14", "M5 7h4"],
  reset: ["M2.5 8a5.5 5.5 0 1 0 1.7-4", "M2.5 2.5v3h3"],
  pin: ["M8 2v8", "M4 6h8", "M3 13.5h10"],
  close: ["M4 4l8 8", "M12 4l-8 8"],
} as const;

/** A short-lived message for screen readers (and a visible status line). */
export function announce(region: HTMLElement | null, message: string): void {
  if (region) region.textContent = message;
}
