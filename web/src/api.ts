// The JSON API of docs/api.md, typed. Times are UNIX epoch seconds; values are in the metric's
// base unit (multiply by `scale` for its display unit); null means missing.

export interface MetricInfo {
  key: string;
  label: string;
  unit: string;
  scale: number;
  source: string;
  scope: "trial" | "gpu" | "host" | "netns";
  headline: boolean;
  markers: boolean;
  max_value: number | null;
  equivalent: string;
  description: string;
}

export type TrialState = "running" | "completed" | "failed" | "lost" | "pruned" | string;

export type Severity = "high" | "moderate" | "low";
export const SEVERITIES: Severity[] = ["high", "moderate", "low"];

/** How many findings a run has, by severity. */
export interface FindingCounts {
  high: number;
  moderate: number;
  low: number;
}

/** A diagnosis of one trial (docs/findings.md): the span it refers to and the series to look at. */
export interface Finding {
  id: string;
  rule: string;
  trial_id: number;
  severity: Severity;
  title: string;
  message: string;
  evidence: Record<string, unknown>;
  t0: number | null;
  t1: number | null;
  metric: string | null;
  device: string | null;
  advice: string[];
}

export interface RunFindings {
  /** trial id (as a string) -> its findings, most severe first; trials in creation order */
  trials: Record<string, Finding[]>;
  counts: FindingCounts;
}

export interface RunSummary {
  id: number;
  name: string;
  /** the project the run belongs to; who made it and where, when recorded */
  project: string;
  os_user: string | null;
  host: string | null;
  start: number;
  end: number | null;
  state: string;
  trials: number;
  duration_s: number | null;
  peak_gpu_mem: number | null;
  /** null while the server has not computed them yet */
  findings: FindingCounts | null;
}

export interface Trial {
  id: number;
  run_id: number;
  name: string;
  state: TrialState;
  params: Record<string, unknown>;
  host: string;
  pids: number[];
  start: number;
  end: number | null;
  heartbeat: number | null;
  error: string | null;
  /** sampling interval in seconds */
  interval?: number;
}

export interface RunDetail extends Omit<RunSummary, "trials"> {
  trials: Trial[];
}

export interface DeviceSeries {
  device: string | null;
  note: string | null;
  mode: "raw" | "buckets";
  t: number[];
  mean: (number | null)[];
  min: (number | null)[] | null;
  max: (number | null)[] | null;
  n: number[] | null;
  /** stored chunks of this window the server could not decode (0: the window is exact) */
  corrupt_chunks: number;
}

export interface SeriesWindow {
  metric: string;
  start: number;
  end: number;
  points: number;
  series: DeviceSeries[];
}

export interface EventItem {
  kind: string;
  name: string | null;
  step: number | null;
  t: number;
  duration: number | null;
  value: number | null;
  data: Record<string, unknown> | null;
}

export interface EventBin {
  kind: string;
  t0: number;
  t1: number;
  count: number;
}

export interface EventsWindow {
  start: number;
  end: number;
  total: number;
  events: EventItem[] | null;
  bins: EventBin[] | null;
}

export interface ScalarPoint {
  name: string;
  step: number | null;
  t: number;
  value: number;
}

export interface Checkpoint {
  t: number;
  name: string | null;
  step: number | null;
  path: string | null;
  bytes: number | null;
}

export interface TrialMetric {
  metric: string;
  devices: (string | null)[];
}

/** Who is asking: a local viewer (every project) or a team server's token (one project). */
export interface Session {
  mode: "local" | "tokens";
  project: string | null;
  scope: "read" | "write";
}

export interface Project {
  name: string;
}

/** An error answered by the API (its one error shape), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(readonly status: number, message: string, readonly code: string = "") {
    super(message);
  }
}

// A team server answers 401 when the request has no usable token (none yet, or the session's
// token was revoked or expired): the page then asks for one (main.ts).
const unauthorizedListeners: (() => void)[] = [];

export function onUnauthorized(listener: () => void): void {
  unauthorizedListeners.push(listener);
}

/** The CSRF cookie's value, which every request that changes something sends back. */
function csrfToken(): string {
  for (const part of document.cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === "tunescope_csrf") return v.join("=");
  }
  return "";
}

function isAbort(e: unknown): boolean {
  return e instanceof DOMException && e.name === "AbortError";
}

export { isAbort };

async function call<T>(method: string, path: string, params: Record<string, string | number | undefined>,
                      body: unknown, signal?: AbortSignal): Promise<T> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const url = `/api${path}${q.toString() ? `?${q}` : ""}`;
  const headers: Record<string, string> = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp: Response;
  try {
    resp = await fetch(url, {
      method, signal, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (isAbort(e)) throw e;
    throw new ApiError(0, `cannot reach the tunescope server (${String(e)})`);
  }
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    let code = "";
    try {
      const err = await resp.json();
      if (err && err.error && typeof err.error.message === "string") message = err.error.message;
      if (err && err.error && typeof err.error.code === "string") code = err.error.code;
    } catch {
      /* not JSON: keep the status line */
    }
    // a failed login is the login form's to show; anything else that is 401 asks for a token
    if (resp.status === 401 && path !== "/session") for (const l of unauthorizedListeners) l();
    throw new ApiError(resp.status, message, code);
  }
  return (await resp.json()) as T;
}

function get<T>(path: string, params: Record<string, string | number | undefined> = {},
                signal?: AbortSignal): Promise<T> {
  return call<T>("GET", path, params, undefined, signal);
}

const enc = encodeURIComponent;
let catalog: Promise<MetricInfo[]> | null = null;

export const api = {
  /** The metric catalog, fetched once per page load. */
  metrics(): Promise<MetricInfo[]> {
    if (!catalog) {
      catalog = get<MetricInfo[]>("/metrics");
      catalog.catch(() => { catalog = null; });
    }
    return catalog;
  },
  runs: (project?: string, signal?: AbortSignal) => get<RunSummary[]>("/runs", { project }, signal),
  projects: () => get<Project[]>("/projects"),
  /** Who is asking; a team server answers 401 until the page logs in. */
  session: () => get<Session>("/session"),
  login: (token: string) => call<Session>("POST", "/session", {}, { token }),
  logout: () => call<{ ok: boolean }>("DELETE", "/session", {}, undefined),
  run: (run: string | number, signal?: AbortSignal) => get<RunDetail>(`/runs/${enc(String(run))}`, {}, signal),
  runFindings: (run: string | number, signal?: AbortSignal) =>
    get<RunFindings>(`/runs/${enc(String(run))}/findings`, {}, signal),
  trialFindings: (trial: number, signal?: AbortSignal) =>
    get<Finding[]>(`/trials/${trial}/findings`, {}, signal),
  trialMetrics: (trial: number, signal?: AbortSignal) =>
    get<TrialMetric[]>(`/trials/${trial}/metrics`, {}, signal),
  series: (trial: number, metric: string, start: number, end: number, points: number,
           signal?: AbortSignal) =>
    get<SeriesWindow>(`/trials/${trial}/series`, { metric, start, end, points }, signal),
  events: (trial: number, start: number, end: number, kinds: string[], limit: number,
           signal?: AbortSignal) =>
    get<EventsWindow>(`/trials/${trial}/events`,
      { start, end, kinds: kinds.join(","), limit }, signal),
  scalars: (trial: number, signal?: AbortSignal) =>
    get<{ names: string[]; scalars: ScalarPoint[] }>(`/trials/${trial}/scalars`, {}, signal),
  checkpoints: (trial: number, signal?: AbortSignal) =>
    get<Checkpoint[]>(`/trials/${trial}/checkpoints`, {}, signal),
};
