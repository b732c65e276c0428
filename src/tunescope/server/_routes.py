"""The query routes under ``/api`` (docs/api.md lists them; a test keeps the two in step).

Routes are plain functions, so FastAPI runs them on its thread pool; they share the app's one
store, which serialises its own calls. Each route builds its JSON directly and returns it as a
response, with ``Cache-Control: no-store`` added by the app (the page polls running trials).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import JSONResponse, Response

from tunescope.metrics import CATALOG
from tunescope.server._auth import principal_of
from tunescope.server._errors import invalid, not_found
from tunescope.server._queries import (
    FindingsCache,
    RunSummaries,
    device_key,
    finding_counts,
    metric_order,
    resolve_run,
    resolve_trial,
    series_extent,
    window_bounds,
)
from tunescope.server._schema import (
    CheckpointOut,
    ErrorOut,
    EventsOut,
    FindingOut,
    HealthOut,
    MetricOut,
    RunDetailOut,
    RunFindingsOut,
    RunOut,
    ScalarsOut,
    TrialMetricOut,
    TrialOut,
    WindowOut,
)
from tunescope.server._serialize import (
    checkpoint_json,
    events_json,
    metric_json,
    run_findings_json,
    run_json,
    scalar_json,
    trial_json,
    window_series_json,
)
from tunescope.store import EVENT_KINDS, Store

__all__ = ["MAX_EVENTS", "MAX_POINTS", "api_router"]

MAX_POINTS = 10_000
"""Most buckets one series window may ask for."""

MAX_EVENTS = 10_000
"""Most events one events window may list before they are binned."""

_KNOWN_METRICS = frozenset(m.key for m in CATALOG)
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "unknown run, trial or metric"},
    422: {"model": ErrorOut, "description": "bad parameters"},
}

TrialId = Annotated[int, Path(ge=0, le=2**63 - 1, description="trial id")]
Start = Annotated[float | None, Query(description="window start, epoch seconds")]
End = Annotated[float | None, Query(description="window end, epoch seconds")]


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


def api_router(store: Store) -> APIRouter:
    """The ``/api`` routes over one store (the caller mounts them under ``/api``)."""
    router = APIRouter()
    summaries = RunSummaries(store)
    findings = FindingsCache(store)
    metrics_body = [metric_json(m) for m in CATALOG]

    @router.get("/health", response_model=HealthOut, summary="Liveness and the store URL")
    def health() -> Response:
        return _json({"ok": True, "store": store.url})

    @router.get("/metrics", response_model=list[MetricOut], summary="The metric catalog")
    def metrics() -> Response:
        return _json(metrics_body)

    @router.get("/runs", response_model=list[RunOut], summary="Every run, newest first")
    def runs(request: Request) -> Response:
        out = []
        # findings no request has computed yet: newest runs first, within a time budget
        deadline = findings.list_deadline()
        who = principal_of(request)
        projects = [who.project] if who.project is not None else store.list_projects()
        listed = [r for p in projects for r in store.list_runs(project=p)]
        listed.sort(key=lambda r: (r.start, r.id), reverse=True)
        for r in listed:
            trials = store.list_trials(r.id)
            duration, peak = summaries.summary(r, trials)
            counts = finding_counts(findings.run(trials, deadline))
            out.append(run_json(r, duration, peak, counts))
        return _json(out)

    @router.get(
        "/runs/{run}",
        response_model=RunDetailOut,
        responses=_ERRORS,
        summary="One run with its trials",
    )
    def run_detail(run: Annotated[str, Path(description="run id or name")]) -> Response:
        r = resolve_run(store, run)
        trials = store.list_trials(r.id)
        duration, peak = summaries.summary(r, trials)
        counts = finding_counts(findings.run(trials))
        return _json(run_json(r, duration, peak, counts, trials))

    @router.get(
        "/runs/{run}/findings",
        response_model=RunFindingsOut,
        responses=_ERRORS,
        summary="Findings of every trial of a run, with counts by severity",
    )
    def run_findings(run: Annotated[str, Path(description="run id or name")]) -> Response:
        r = resolve_run(store, run)
        found = {tid: fs or [] for tid, fs in findings.run(store.list_trials(r.id)).items()}
        counts = finding_counts(found)
        assert counts is not None
        return _json(run_findings_json(found, counts))

    @router.get(
        "/runs/{run}/trials",
        response_model=list[TrialOut],
        responses=_ERRORS,
        summary="A run's trials in creation order",
    )
    def run_trials(run: Annotated[str, Path(description="run id or name")]) -> Response:
        r = resolve_run(store, run)
        return _json([trial_json(t) for t in store.list_trials(r.id)])

    @router.get("/trials/{trial}", response_model=TrialOut, responses=_ERRORS, summary="One trial")
    def trial_detail(trial: TrialId) -> Response:
        return _json(trial_json(resolve_trial(store, trial)))

    @router.get(
        "/trials/{trial}/findings",
        response_model=list[FindingOut],
        responses=_ERRORS,
        summary="Findings of one trial, most severe first",
    )
    def trial_findings(trial: TrialId) -> Response:
        return _json([f.to_dict() for f in findings.trial(resolve_trial(store, trial)) or []])

    @router.get(
        "/trials/{trial}/metrics",
        response_model=list[TrialMetricOut],
        responses=_ERRORS,
        summary="The metrics a trial has series for",
    )
    def trial_metrics(trial: TrialId) -> Response:
        info = resolve_trial(store, trial)
        devices: dict[str, list[str | None]] = defaultdict(list)
        for s in store.list_series(info.id):
            devices[s.metric].append(s.device)
        return _json(
            [
                {"metric": k, "devices": sorted(devices[k], key=device_key)}
                for k in sorted(devices, key=metric_order)
            ]
        )

    @router.get(
        "/trials/{trial}/series",
        response_model=WindowOut,
        responses=_ERRORS,
        summary="A window of every device's series of one metric",
    )
    def trial_series(
        trial: TrialId,
        metric: Annotated[str, Query(description="metric key, e.g. gpu.mem")],
        start: Start = None,
        end: End = None,
        points: Annotated[
            int, Query(ge=1, le=MAX_POINTS, description="most buckets per series")
        ] = 1000,
    ) -> Response:
        info = resolve_trial(store, trial)
        series = sorted(store.list_series(info.id, metric), key=lambda s: device_key(s.device))
        if not series and metric not in _KNOWN_METRICS:
            raise not_found(f"no metric {metric!r} in trial {trial}")
        lo = hi = info.start
        if start is None or end is None:
            extent = series_extent(store, series)
            if extent is not None:
                lo, hi = extent
            else:
                hi = info.end if info.end is not None else (info.heartbeat or info.start)
        s, e = window_bounds(start, end, lo, hi, pad=max(info.interval, 0.001))
        body = [window_series_json(store.window(x.id, s, e, points)) for x in series]
        return _json({"metric": metric, "start": s, "end": e, "points": points, "series": body})

    @router.get(
        "/trials/{trial}/events",
        response_model=EventsOut,
        responses=_ERRORS,
        summary="Events in a window, binned when too many",
    )
    def trial_events(
        trial: TrialId,
        start: Start = None,
        end: End = None,
        kinds: Annotated[
            str | None, Query(description="comma-separated kinds: " + ", ".join(EVENT_KINDS))
        ] = None,
        limit: Annotated[
            int, Query(ge=1, le=MAX_EVENTS, description="most events before binning")
        ] = 2000,
    ) -> Response:
        info = resolve_trial(store, trial)
        wanted = _parse_kinds(kinds)
        hi = info.end if info.end is not None else max(time.time(), info.heartbeat or 0.0)
        s, e = window_bounds(start, end, info.start, hi, pad=max(info.interval, 0.001))
        return _json(events_json(store.events(info.id, s, e, wanted, limit)))

    @router.get(
        "/trials/{trial}/scalars",
        response_model=ScalarsOut,
        responses=_ERRORS,
        summary="Scalars a trial logged (loss, learning rate…)",
    )
    def trial_scalars(
        trial: TrialId,
        name: Annotated[str | None, Query(description="only the scalars of this name")] = None,
    ) -> Response:
        info = resolve_trial(store, trial)
        return _json(
            {
                "names": store.scalar_names(info.id),
                "scalars": [scalar_json(x) for x in store.scalars(info.id, name)],
            }
        )

    @router.get(
        "/trials/{trial}/checkpoints",
        response_model=list[CheckpointOut],
        responses=_ERRORS,
        summary="Checkpoints and adapter saves, oldest first",
    )
    def trial_checkpoints(trial: TrialId) -> Response:
        info = resolve_trial(store, trial)
        w = store.events(info.id, 0.0, 1e11, ["checkpoint"], limit=1_000_000_000)
        return _json([checkpoint_json(e) for e in w.events or ()])

    return router
