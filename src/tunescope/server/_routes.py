"""The query routes under ``/api`` (docs/api.md lists them; a test keeps the two in step).

Routes are plain functions, so FastAPI runs them on its thread pool; they share the app's one
store, which serialises its own calls. Each route builds its JSON with the model of its answer
(``_schema``, also its ``response_model``: the document's) and returns it as a response
(FastAPI's validation of the answer is skipped: its cost grows with a window's points), with
``Cache-Control: no-store`` added by the app (the page polls running trials).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import JSONResponse, Response

from tunescope.analyze import (
    GROUPINGS,
    cost_frontier,
    group_rows,
    parse_prices,
    serving_run,
    trial_end,
    usage_of,
)
from tunescope.errors import ConfigError
from tunescope.metrics import CATALOG
from tunescope.server._auth import Mode, principal_of
from tunescope.server._errors import ApiError, invalid, not_found
from tunescope.server._queries import (
    FindingsCache,
    RunSummaries,
    ScalarCurves,
    device_key,
    finding_counts,
    host_device_key,
    metric_order,
    read_cursor,
    resolve_run,
    resolve_trial,
    series_extent,
    visible_projects,
    window_bounds,
    write_cursor,
)
from tunescope.server._schema import (
    CheckpointOut,
    ErrorOut,
    EventsOut,
    FindingOut,
    FrontierOut,
    HealthOut,
    MetricOut,
    ProjectOut,
    RunDetailOut,
    RunFindingsOut,
    RunOut,
    ScalarOut,
    ScalarsOut,
    SeriesOut,
    ServingOut,
    TrialDetailOut,
    TrialMetricOut,
    TrialOut,
    UsageOut,
    WindowOut,
)
from tunescope.store import EVENT_KINDS, EventsWindow, PooledStore, SeriesInfo, Store

__all__ = ["MAX_EVENTS", "MAX_POINTS", "MAX_SCALARS", "SCALARS_PAGE", "api_router", "public_router"]

MAX_POINTS = 10_000
"""Most buckets one series window may ask for."""

MAX_EVENTS = 10_000
"""Most events one events window may list before they are binned, and most in one page."""

MAX_SCALARS = 100_000
"""Most scalars one page may hold."""

SCALARS_PAGE = 10_000
"""Scalars in a page when a cursor comes without a limit."""

_KNOWN_METRICS = frozenset(m.key for m in CATALOG)
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "unknown run, trial or metric"},
    422: {"model": ErrorOut, "description": "bad parameters"},
}
_FINDINGS_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    503: {"model": ErrorOut, "description": "findings not computed yet (Retry-After)"},
}
MAX_TIME_S = 1e11
"""Window bounds are epoch seconds within this of the epoch."""
NAME = 512
"""Longest name (metric, scalar, project, run) a query may give, in characters."""

TrialId = Annotated[int, Path(ge=0, le=2**63 - 1, description="trial id")]
Start = Annotated[
    float | None,
    Query(ge=-MAX_TIME_S, le=MAX_TIME_S, description="window start, epoch seconds"),
]
End = Annotated[
    float | None, Query(ge=-MAX_TIME_S, le=MAX_TIME_S, description="window end, epoch seconds")
]
Cursor = Annotated[
    str | None,
    Query(max_length=1000, description="the `next` of the previous page (opaque)"),
]
RunRef = Annotated[str, Path(max_length=NAME, description="run id or name")]


def _findings_pending(what: str) -> ApiError:
    return ApiError(
        503,
        "findings_pending",
        f"the findings of {what} are not computed yet (or took too long): try again later",
        {"Retry-After": "5"},
    )


def _json(content: Any) -> Response:
    return JSONResponse(content)


def _parse_kinds(kinds: str | None) -> list[str] | None:
    """``a,b`` into a list of known event kinds; None for all kinds."""
    if kinds is None or not kinds.strip():
        return None
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in EVENT_KINDS]
    if unknown:
        raise invalid(f"kinds: unknown event kind {unknown[0]!r}; known: {', '.join(EVENT_KINDS)}")
    return wanted


def public_router(store: Store, mode: Mode) -> APIRouter:
    """The ``/api`` routes that need no token: liveness (which names the store only on a
    local viewer: a team server tells nobody where its database is)."""
    router = APIRouter()

    @router.get("/health", response_model=HealthOut, summary="Liveness (and the store URL)")
    def health() -> Response:
        return _json(
            HealthOut.make(ok=True, store=store.url) if mode == "local" else HealthOut.make(ok=True)
        )

    return router


def api_router(store: PooledStore, findings: FindingsCache | None = None) -> APIRouter:
    """The ``/api`` routes over one store that need a principal (the caller mounts them
    under ``/api`` behind the Authenticator). Each answers only what the request's principal
    may see: a run, trial or project of another project is a 404, as if it did not exist.
    ``findings``: the app's one findings cache (with the project's thresholds), shared with
    ``/metrics``; by default one of the routes' own with the default thresholds."""
    router = APIRouter()
    c = _Shared(store, findings if findings is not None else FindingsCache(store))
    for add in (
        _project_routes,
        _usage_routes,
        _run_routes,
        _trial_routes,
        _trial_data_routes,
        _trial_scalar_routes,
    ):
        add(router, c)
    return router


class _Shared:
    """What the routes share: the store, the findings cache, the run summaries and scalar
    curves (caches over the store), the catalog's JSON."""

    def __init__(self, store: PooledStore, findings: FindingsCache) -> None:
        self.store = store
        self.findings = findings
        self.summaries = RunSummaries(store)
        self.curves = ScalarCurves(store)
        self.metrics_body = MetricOut.of_each(CATALOG)


def _project_routes(router: APIRouter, c: _Shared) -> None:
    """The catalog, the projects and the runs list."""
    store, findings = c.store, c.findings

    @router.get("/metrics", response_model=list[MetricOut], summary="The metric catalog")
    def metrics() -> Response:
        return _json(c.metrics_body)

    @router.get(
        "/projects",
        response_model=list[ProjectOut],
        summary="The projects this request may see, by name",
    )
    def projects(request: Request) -> Response:
        return _json(
            [ProjectOut.make(name=p) for p in visible_projects(store, principal_of(request))]
        )

    @router.get(
        "/runs", response_model=list[RunOut], responses=_ERRORS, summary="Every run, newest first"
    )
    def runs(
        request: Request,
        project: Annotated[
            str | None, Query(max_length=NAME, description="only the runs of this project")
        ] = None,
    ) -> Response:
        out = []
        # findings no request has computed yet: newest runs first, within a time budget
        deadline = findings.list_deadline()
        shown = visible_projects(store, principal_of(request), project)
        listed = [r for p in shown for r in store.list_runs(project=p)]
        listed.sort(key=lambda r: (r.start, r.id), reverse=True)
        for r in listed:
            trials = store.list_trials(r.id)
            duration, peak = c.summaries.summary(r, trials)
            counts = finding_counts(findings.run(trials, deadline))
            out.append(RunOut.of_run(r, duration, peak, counts))
        return _json(out)


def _usage_routes(router: APIRouter, c: _Shared) -> None:
    """Usage across runs (docs/usage.md)."""
    store, findings = c.store, c.findings

    @router.get(
        "/usage",
        response_model=UsageOut,
        responses=_ERRORS,
        summary="GPU-hours held and busy, idle, memory, CPU and waste per group (docs/usage.md)",
    )
    def usage(
        request: Request,
        since: Annotated[float, Query(ge=-MAX_TIME_S, le=MAX_TIME_S, description="epoch s")],
        until: Annotated[float, Query(ge=-MAX_TIME_S, le=MAX_TIME_S, description="epoch s")],
        by: Annotated[
            str, Query(max_length=NAME, description="groupings, comma-separated")
        ] = "project",
        group: Annotated[
            str, Query(max_length=NAME, description="the daily chart's grouping")
        ] = "project",
        project: Annotated[
            str | None, Query(max_length=NAME, description="only this project")
        ] = None,
        price: Annotated[
            str,
            Query(
                max_length=4 * NAME,
                description="hourly prices, MODEL=USD comma-separated (a recorded model name "
                "or a right-size catalog key)",
            ),
        ] = "",
    ) -> Response:
        groups = [b for b in by.split(",") if b]
        shown = visible_projects(store, principal_of(request), project)
        try:
            prices = parse_prices([p.strip() for p in price.split(",") if p.strip()])
            got = usage_of(
                store,
                since,
                until,
                groups,
                prices=prices,
                settings=findings.settings,
                now=time.time(),
                projects=shown,
            )
            if group not in GROUPINGS:
                raise ConfigError(f"unknown group {group!r}: use {', '.join(GROUPINGS)}")
            keys = ["day"] if group == "day" else ["day", group]
            days = group_rows((s for t in got.trials for s in t.slices), keys, prices)
        except ConfigError as exc:
            raise invalid(str(exc)) from None
        return _json(UsageOut.of_usage(got, group, days))


def _run_routes(router: APIRouter, c: _Shared) -> None:
    """One run: its detail, findings, serving levels, cost frontier and trials."""
    store, findings = c.store, c.findings

    @router.get(
        "/runs/{run}",
        response_model=RunDetailOut,
        responses=_ERRORS,
        summary="One run with its trials",
    )
    def run_detail(request: Request, run: RunRef) -> Response:
        r = resolve_run(store, run, principal_of(request))
        trials = store.list_trials(r.id)
        duration, peak = c.summaries.summary(r, trials)
        counts = finding_counts(findings.run(trials))
        return _json(RunDetailOut.of_run(r, trials, duration, peak, counts))

    @router.get(
        "/runs/{run}/findings",
        response_model=RunFindingsOut,
        responses=_FINDINGS_ERRORS,
        summary="Findings of every trial of a run, with counts by severity",
    )
    def run_findings(request: Request, run: RunRef) -> Response:
        r = resolve_run(store, run, principal_of(request))
        got = findings.run(store.list_trials(r.id))
        if any(fs is None for fs in got.values()):
            raise _findings_pending(f"run {run!r}")
        found = {tid: fs or [] for tid, fs in got.items()}
        counts = finding_counts(found)
        assert counts is not None
        return _json(RunFindingsOut.of_findings(found, counts))

    @router.get(
        "/runs/{run}/serving",
        response_model=ServingOut,
        responses=_ERRORS,
        summary="A load run's levels: latency percentiles, throughput and goodput",
    )
    def run_serving(request: Request, run: RunRef) -> Response:
        r = resolve_run(store, run, principal_of(request))
        return _json(ServingOut.of_run(r, serving_run(store, r.id)))

    @router.get(
        "/runs/{run}/frontier",
        response_model=FrontierOut,
        responses=_ERRORS,
        summary="The sweep's cost frontier: objective against GPU-hours and peak GPU memory",
    )
    def run_frontier(request: Request, run: RunRef) -> Response:
        r = resolve_run(store, run, principal_of(request))
        return _json(FrontierOut.of_frontier(cost_frontier(store, r.id, findings.settings)))

    @router.get(
        "/runs/{run}/trials",
        response_model=list[TrialOut],
        responses=_ERRORS,
        summary="A run's trials in creation order",
    )
    def run_trials(request: Request, run: RunRef) -> Response:
        r = resolve_run(store, run, principal_of(request))
        return _json(TrialOut.of_each(store.list_trials(r.id)))


def _trial_routes(router: APIRouter, c: _Shared) -> None:
    """One trial: its detail, findings and the metrics it has series for."""
    store, findings = c.store, c.findings

    @router.get(
        "/trials/{trial}",
        response_model=TrialDetailOut,
        responses=_ERRORS,
        summary="One trial, with where it ran",
    )
    def trial_detail(request: Request, trial: TrialId) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        return _json(TrialDetailOut.of_trial(info, store.hosts(info.id)))

    @router.get(
        "/trials/{trial}/findings",
        response_model=list[FindingOut],
        responses=_FINDINGS_ERRORS,
        summary="Findings of one trial, most severe first",
    )
    def trial_findings(request: Request, trial: TrialId) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        found = findings.trial(info)
        if found is None:
            raise _findings_pending(f"trial {trial}")
        return _json([FindingOut.of_finding(f) for f in found])

    @router.get(
        "/trials/{trial}/metrics",
        response_model=list[TrialMetricOut],
        responses=_ERRORS,
        summary="The metrics a trial has series for",
    )
    def trial_metrics(request: Request, trial: TrialId) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        series: dict[str, list[SeriesInfo]] = defaultdict(list)
        for s in store.list_series(info.id):
            series[s.metric].append(s)
        out = []
        for k in sorted(series, key=metric_order):
            mine = sorted(series[k], key=host_device_key)
            devices = sorted({s.device for s in mine}, key=device_key)
            out.append(TrialMetricOut.of_series(k, mine, devices))
        return _json(out)


def _trial_data_routes(router: APIRouter, c: _Shared) -> None:
    """One trial's series windows and its events (paged or binned)."""
    store = c.store

    @router.get(
        "/trials/{trial}/series",
        response_model=WindowOut,
        responses=_ERRORS,
        summary="A window of every device's series of one metric",
    )
    def trial_series(
        request: Request,
        trial: TrialId,
        metric: Annotated[str, Query(max_length=NAME, description="metric key, e.g. gpu.mem")],
        start: Start = None,
        end: End = None,
        points: Annotated[
            int, Query(ge=1, le=MAX_POINTS, description="most buckets per series")
        ] = 1000,
    ) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        series = sorted(store.list_series(info.id, metric), key=host_device_key)
        if not series and metric not in _KNOWN_METRICS:
            raise not_found(f"no metric {metric!r} in trial {trial}")
        lo = hi = info.start
        if start is None or end is None:
            extent = series_extent(store, series)
            if extent is not None:
                lo, hi = extent
            else:
                hi = trial_end(info) or info.start
        s, e = window_bounds(start, end, lo, hi, pad=max(info.interval, 0.001))
        body = [SeriesOut.of_window(store.window(x.id, s, e, points)) for x in series]
        return _json(WindowOut.make(metric=metric, start=s, end=e, points=points, series=body))

    @router.get(
        "/trials/{trial}/events",
        response_model=EventsOut,
        responses=_ERRORS,
        summary="Events in a window, binned when too many",
    )
    def trial_events(
        request: Request,
        trial: TrialId,
        start: Start = None,
        end: End = None,
        kinds: Annotated[
            str | None,
            Query(max_length=NAME, description="comma-separated kinds: " + ", ".join(EVENT_KINDS)),
        ] = None,
        limit: Annotated[
            int,
            Query(ge=1, le=MAX_EVENTS, description="most events before binning; a page's size"),
        ] = 2000,
        cursor: Cursor = None,
    ) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        wanted = _parse_kinds(kinds)
        # read_cursor checked the key's types
        after: Any = None if cursor is None else read_cursor("events", cursor, (float, int))
        hi = info.end if info.end is not None else max(time.time(), info.heartbeat or 0.0)
        s, e = window_bounds(start, end, info.start, hi, pad=max(info.interval, 0.001))
        if cursor is None:
            w = store.events(info.id, s, e, kinds=wanted, limit=limit)
            # too many to list at once: the bins, and the way to page through the events
            first = None if w.events is not None else write_cursor("events", None)
            return _json(EventsOut.of_window(w, first))
        page, key = store.event_page(info.id, s, e, wanted, after, limit)
        total = store.count_events(info.id, s, e, kinds=wanted)
        more = None if key is None else write_cursor("events", key)
        return _json(EventsOut.of_window(EventsWindow(s, e, total, events=page), more))


def _trial_scalar_routes(router: APIRouter, c: _Shared) -> None:
    """One trial's scalars (paged, or thinned for a chart) and its checkpoints."""
    store = c.store

    @router.get(
        "/trials/{trial}/scalars",
        response_model=ScalarsOut,
        responses=_ERRORS,
        summary="Scalars a trial logged (loss, learning rate…)",
    )
    def trial_scalars(
        request: Request,
        trial: TrialId,
        name: Annotated[
            str | None, Query(max_length=NAME, description="only the scalars of this name")
        ] = None,
        limit: Annotated[
            int | None,
            Query(ge=1, le=MAX_SCALARS, description="most scalars in this page (default: all)"),
        ] = None,
        cursor: Cursor = None,
        points: Annotated[
            int | None,
            Query(
                ge=4,
                le=MAX_POINTS,
                description="at most this many scalars of each name, thinned for a chart "
                "(not with limit or cursor)",
            ),
        ] = None,
    ) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        if points is not None and (limit is not None or cursor is not None):
            raise invalid("points cannot be combined with limit or cursor")
        if points is not None:
            return Response(c.curves.answer(info, name, points), media_type="application/json")
        names = store.scalar_names(info.id)
        if limit is None and cursor is None:
            rows, more = store.scalars(info.id, name), None
        else:
            after: Any = (  # read_cursor checked the key's types
                None if cursor is None else read_cursor("scalars", cursor, (str, int, float, int))
            )
            rows, key = store.scalar_page(
                info.id, name, after, SCALARS_PAGE if limit is None else limit
            )
            more = None if key is None else write_cursor("scalars", key)
        return _json(ScalarsOut.make(names=names, scalars=ScalarOut.of_each(rows), next=more))

    @router.get(
        "/trials/{trial}/checkpoints",
        response_model=list[CheckpointOut],
        responses=_ERRORS,
        summary="Checkpoints and adapter saves, oldest first",
    )
    def trial_checkpoints(request: Request, trial: TrialId) -> Response:
        info = resolve_trial(store, trial, principal_of(request))
        every = store.all_events(info.id, kinds=["checkpoint"])
        return _json([CheckpointOut.of_event(e) for e in every])
