// The time window in view, in seconds elapsed since the chart's zero (the run's start, or each
// trial's own start when aligned). Paging steps by the window's own width; zoom keeps its centre.

export interface Span {
  from: number;
  to: number;
}

/** The narrowest window one can zoom to, in seconds. */
export const MIN_WIDTH = 5;

export function width(s: Span): number {
  return s.to - s.from;
}

/** `s` moved (not resized) to lie inside [0, extent]; the whole extent when it is wider. */
export function clamp(s: Span, extent: number): Span {
  const w = width(s);
  if (w >= extent) return { from: 0, to: extent };
  if (s.from < 0) return { from: 0, to: w };
  if (s.to > extent) return { from: extent - w, to: extent };
  return { ...s };
}

export function page(s: Span, dir: -1 | 1, extent: number): Span {
  const w = width(s);
  return clamp({ from: s.from + dir * w, to: s.to + dir * w }, extent);
}

export function zoom(s: Span, factor: number, extent: number): Span {
  const c = (s.from + s.to) / 2;
  const w = Math.max(MIN_WIDTH, width(s) * factor);
  return clamp({ from: c - w / 2, to: c + w / 2 }, extent);
}

/** Spans are rounded to milliseconds (as the URL carries them): paging and zooming a
 *  rounded span can miss an edge by a few of them. */
const SLACK = 0.005;

export function isWhole(s: Span, extent: number): boolean {
  return s.from <= SLACK && s.to >= extent - SLACK;
}

/** Whether a window's right edge is at the live edge (within 2 s or 2% of its width). */
export function atEdge(s: Span, extent: number): boolean {
  return s.to >= extent - Math.max(2, 0.02 * width(s));
}

/** Seconds rounded to milliseconds, for URLs. */
export function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
