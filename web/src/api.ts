// The JSON API of docs/api.md, typed. Times are UNIX epoch seconds; values are in the metric's
// base unit (multiply by `scale` for its display unit); null means missing.

import type { components, paths } from "./api-types";

// Every shape below is the OpenAPI document's (web/openapi.json, written from the server's
// pydantic models by `make openapi`); `npm run types` turns it into api-types.ts, which the
// build generates first. A name here is only an alias: when the page reads a field the API does
// not send, or calls a route, query parameter or body the document lacks, tsc fails the build.
type Schemas = components["schemas"];

/** One row of the metric catalog. */
export type MetricInfo = Schemas["MetricOut"];
export type TrialState = Schemas["TrialOut"]["state"];
export type Severity = Schemas["FindingOut"]["severity"];

// A Record, so that tsc fails when the API gains or loses a severity.
const SEVERITY_ORDER: Record<Severity, null> = { high: null, moderate: null, low: null };
/** Every severity, most severe first. */
export const SEVERITIES = Object.keys(SEVERITY_ORDER) as Severity[];

/** How many findings a run has, by severity. */
export type FindingCounts = Schemas["FindingCountsOut"];
/** A diagnosis of one trial (docs/findings.md): the span it refers to and the series to look at. */
export type Finding = Schemas["FindingOut"];
/** A run's findings: trial id (as a string) -> its findings, most severe first. */
export type RunFindings = Schemas["RunFindingsOut"];
/** A run of the runs list; `findings` is null while the server has not computed them yet. */
export type RunSummary = Schemas["RunOut"];
export type Trial = Schemas["TrialOut"];
export type RunDetail = Schemas["RunDetailOut"];
export type DeviceSeries = Schemas["SeriesOut"];
export type SeriesWindow = Schemas["WindowOut"];
export type EventItem = Schemas["EventOut"];
export type EventBin = Schemas["EventBinOut"];
export type EventsWindow = Schemas["EventsOut"];
export type ScalarPoint = Schemas["ScalarOut"];
export type Scalars = Schemas["ScalarsOut"];
export type Checkpoint = Schemas["CheckpointOut"];
export type TrialMetric = Schemas["TrialMetricOut"];
/** A load run's levels (docs/serving_analysis.md): latency percentiles, throughput, goodput. */
export type Serving = Schemas["ServingOut"];
export type ServingLevel = Schemas["ServingLevelOut"];
/** Who is asking: a local viewer (every project) or a team server's token (one project). */
export type Session = Schemas["SessionOut"];
export type Project = Schemas["ProjectOut"];
/** `GET /api/usage`: rows of `tunescope usage`, held and busy per day, the most wasteful trials. */
export type UsageReport = Schemas["UsageOut"];
/** `GET /api/runs/{run}/frontier`: the sweep's cost frontier. */
export type Frontier = Schemas["FrontierOut"];

// A route of the document, typed from it: its path and query parameters, its JSON body and
// its 200 answer. Only routes that answer JSON on that method can be called.
type Method = "get" | "post" | "delete";
type Op<P extends keyof paths, M extends Method> = paths[P][M];
type JsonOf<O> = O extends { responses: { 200: { content: { "application/json": infer R } } } }
  ? R : never;
type BodyOf<O> = O extends { requestBody: { content: { "application/json": infer B } } }
  ? B : undefined;
type ArgsOf<O> = O extends { parameters: infer X }
  ? Pick<X, "path" & keyof X> & Pick<X, "query" & keyof X> : never;
type JsonRoute<M extends Method> = {
  [P in keyof paths]: [JsonOf<Op<P, M>>] extends [never] ? never : P;
}[keyof paths];

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

async function call<M extends Method, P extends JsonRoute<M>>(
  method: M, path: P, args: ArgsOf<Op<P, M>>, body: BodyOf<Op<P, M>>, signal?: AbortSignal,
): Promise<JsonOf<Op<P, M>>> {
  const { path: inPath = {}, query = {} } = args as {
    path?: Record<string, string | number>;
    query?: Record<string, string | number | null | undefined>;
  };
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) q.set(k, String(v));
  const route = path.replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(inPath[k])));
  const url = `${route}${q.toString() ? `?${q}` : ""}`;
  const headers: Record<string, string> = { Accept: "application/json" };
  if (method !== "get") headers["X-CSRF-Token"] = csrfToken();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp: Response;
  try {
    resp = await fetch(url, {
      method: method.toUpperCase(), signal, headers, credentials: "same-origin",
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
    if (resp.status === 401 && path !== "/api/session") for (const l of unauthorizedListeners) l();
    throw new ApiError(resp.status, message, code);
  }
  return (await resp.json()) as JsonOf<Op<P, M>>;
}

function get<P extends JsonRoute<"get">>(path: P, args: ArgsOf<Op<P, "get">>,
                                         signal?: AbortSignal): Promise<JsonOf<Op<P, "get">>> {
  return call("get", path, args, undefined as BodyOf<Op<P, "get">>, signal);
}

let catalog: Promise<MetricInfo[]> | null = null;

export const api = {
  /** The metric catalog, fetched once per page load. */
  metrics(): Promise<MetricInfo[]> {
    if (!catalog) {
      catalog = get("/api/metrics", {});
      catalog.catch(() => { catalog = null; });
    }
    return catalog;
  },
  runs: (project?: string, signal?: AbortSignal): Promise<RunSummary[]> =>
    get("/api/runs", { query: { project } }, signal),
  projects: (): Promise<Project[]> => get("/api/projects", {}),
  /** Who is asking; a team server answers 401 until the page logs in. */
  session: (): Promise<Session> => get("/api/session", {}),
  login: (token: string): Promise<Session> => call("post", "/api/session", {}, { token }),
  logout: () => call("delete", "/api/session", {}, undefined),
  run: (run: string | number, signal?: AbortSignal): Promise<RunDetail> =>
    get("/api/runs/{run}", { path: { run: String(run) } }, signal),
  runFindings: (run: string | number, signal?: AbortSignal): Promise<RunFindings> =>
    get("/api/runs/{run}/findings", { path: { run: String(run) } }, signal),
  serving: (run: string | number, signal?: AbortSignal): Promise<Serving> =>
    get("/api/runs/{run}/serving", { path: { run: String(run) } }, signal),
  trialFindings: (trial: number, signal?: AbortSignal): Promise<Finding[]> =>
    get("/api/trials/{trial}/findings", { path: { trial } }, signal),
  trialMetrics: (trial: number, signal?: AbortSignal): Promise<TrialMetric[]> =>
    get("/api/trials/{trial}/metrics", { path: { trial } }, signal),
  series: (trial: number, metric: string, start: number, end: number, points: number,
           signal?: AbortSignal): Promise<SeriesWindow> =>
    get("/api/trials/{trial}/series", { path: { trial }, query: { metric, start, end, points } },
        signal),
  events: (trial: number, start: number, end: number, kinds: string[], limit: number,
           signal?: AbortSignal): Promise<EventsWindow> =>
    get("/api/trials/{trial}/events",
        { path: { trial }, query: { start, end, kinds: kinds.join(","), limit } }, signal),
  /** A trial's scalars; `points`: at most that many of each name, thinned for a chart. */
  scalars: (trial: number, points?: number, signal?: AbortSignal): Promise<Scalars> =>
    get("/api/trials/{trial}/scalars", { path: { trial }, query: { points } }, signal),
  frontier: (run: string | number, signal?: AbortSignal): Promise<Frontier> =>
    get("/api/runs/{run}/frontier", { path: { run: String(run) } }, signal),
  usage: (since: number, until: number, by: string, group: string, price: string,
          signal?: AbortSignal): Promise<UsageReport> =>
    get("/api/usage", { query: { since, until, by, group, price: price || undefined } }, signal),
  checkpoints: (trial: number, signal?: AbortSignal): Promise<Checkpoint[]> =>
    get("/api/trials/{trial}/checkpoints", { path: { trial } }, signal),
};
