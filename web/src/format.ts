// Formatting and parsing of times, durations, bytes and values. None/null means missing: it
// is shown as an em dash, never as zero.

const DASH = "—";

function pad(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** Elapsed seconds as h:mm:ss (h:mm:ss.s when `decimals` is 1, for short spans). */
export function fmtElapsed(seconds: number, decimals = 0): string {
  if (!Number.isFinite(seconds)) return DASH;
  const sign = seconds < 0 ? "-" : "";
  const f = 10 ** decimals;
  let s = Math.round(Math.abs(seconds) * f) / f;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const whole = Math.floor(s);
  const frac = decimals > 0 ? (s - whole).toFixed(decimals).slice(1) : "";
  return `${sign}${h}:${pad(m)}:${pad(whole)}${frac}`;
}

/** "h:mm:ss", "m:ss" or "s" (fractions allowed) as seconds; null when it is not a time. */
export function parseElapsed(text: string): number | null {
  const t = text.trim();
  if (!/^\d+(:\d{1,2}){0,2}(\.\d+)?$/.test(t)) return null;
  const parts = t.split(":").map(Number);
  let s = 0;
  for (const p of parts) s = s * 60 + p;
  if (parts.length > 1 && parts.slice(1).some((p) => p >= 60)) return null;
  return s;
}

/** A duration for people: "2h 05m", "4m 09s", "12s". */
export function fmtDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return DASH;
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  const h = Math.floor(s / 3600);
  if (h < 48) return `${h}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** An epoch time as local "YYYY-MM-DD HH:MM:SS". */
export function fmtDate(epoch: number | null | undefined): string {
  if (epoch === null || epoch === undefined) return DASH;
  const d = new Date(epoch * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Bytes in binary units: "1.50 GiB". */
export function fmtBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[i]}`;
}

/** A display value with a precision that suits its size, and its unit. */
export function fmtValue(v: number | null | undefined, unit = ""): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return DASH;
  const a = Math.abs(v);
  const text = a >= 1e7 ? expo(v, 2) : a >= 1000 ? v.toFixed(0) : a >= 100 ? v.toFixed(1)
    : a >= 1 ? v.toFixed(2) : a === 0 ? "0" : a >= 1e-3 ? v.toPrecision(3) : expo(v, 2);
  if (!unit || unit === "count") return text;
  return unit === "%" ? `${text}%` : `${text} ${unit}`;
}

function expo(v: number, digits: number): string {
  return v.toExponential(digits).replace(/\.?0+e/, "e").replace("e+", "e");
}

/** A compact axis tick label: plain numbers (0.25, 12, 2000), 1e-4 for tiny or huge ones. */
export function fmtTick(v: number): string {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a < 1e-3 || a >= 1e7) return expo(v, 1);
  return String(Number(v.toPrecision(6)));
}

/** Axis tick steps for elapsed time, in seconds (nice h:mm:ss boundaries). */
export const ELAPSED_INCRS = [
  0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
  21600, 43200, 86400, 172800, 604800,
];
