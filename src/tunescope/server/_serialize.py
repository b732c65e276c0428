"""Store records into the JSON shapes of docs/api.md (plain dicts and lists, no validation).

The shapes are described by the models in :mod:`tunescope.server._schema`.
"""

from __future__ import annotations

from typing import Any

from tunescope.analyze import Finding, Frontier, Usage, UsageRow
from tunescope.metrics import Metric
from tunescope.store import Event, EventsWindow, RunInfo, Scalar, TrialInfo, Window

__all__ = [
    "checkpoint_json",
    "event_json",
    "events_json",
    "frontier_json",
    "metric_json",
    "run_findings_json",
    "run_json",
    "scalar_json",
    "trial_json",
    "usage_json",
    "window_series_json",
]

Json = dict[str, Any]


def metric_json(m: Metric) -> Json:
    """One catalog row."""
    return {
        "key": m.key,
        "label": m.label,
        "unit": m.unit,
        "scale": m.scale,
        "source": m.source,
        "scope": m.scope,
        "headline": m.headline,
        "markers": m.markers,
        "max_value": m.max_value,
        "equivalent": m.equivalent,
        "description": m.description,
    }


def trial_json(t: TrialInfo, hosts: dict[str, dict[str, Any]] | None = None) -> Json:
    """One trial; with where it ran when ``hosts`` (``Store.hosts``) is given."""
    out: Json = {
        "id": t.id,
        "run_id": t.run_id,
        "name": t.name,
        "state": t.state,
        "params": t.params,
        "host": t.host,
        "pids": list(t.pids),
        "start": t.start,
        "end": t.end,
        "heartbeat": t.heartbeat,
        "error": t.error,
        "interval": t.interval,
    }
    if hosts is not None:
        out["hosts"] = list(hosts)
        out["where"] = hosts
    return out


def run_json(
    r: RunInfo,
    duration_s: float,
    peak_gpu_mem: float | None,
    findings: dict[str, int] | None,
    trials: list[TrialInfo] | None = None,
) -> Json:
    """One run: with the trial count, or with the trials themselves when given; ``findings``
    counts its findings by severity (None while they are not computed yet)."""
    return {
        "id": r.id,
        "name": r.name,
        "project": r.project,
        "os_user": r.os_user,
        "host": r.host,
        "start": r.start,
        "end": r.end,
        "state": r.state,
        "trials": r.trials if trials is None else [trial_json(t) for t in trials],
        "duration_s": duration_s,
        "peak_gpu_mem": peak_gpu_mem,
        "findings": findings,
    }


def run_findings_json(findings: dict[int, list[Finding]], counts: dict[str, int]) -> Json:
    """A run's findings per trial (keys are trial ids as strings, in creation order) and
    their counts by severity."""
    return {
        "trials": {str(tid): [f.to_dict() for f in fs] for tid, fs in findings.items()},
        "counts": counts,
    }


def window_series_json(w: Window) -> Json:
    """One host's device's series in a window: ``raw`` samples or ``buckets``, and how many
    damaged chunks the window could not decode."""
    return {
        "host": w.series.host,
        "device": w.series.device,
        "note": w.series.note,
        "mode": "raw" if w.raw else "buckets",
        "t": w.t,
        "mean": w.mean,
        # raw samples send their values once (as mean); min, max and n would repeat them
        "min": None if w.raw else w.min,
        "max": None if w.raw else w.max,
        "n": None if w.raw else w.count,
        "corrupt_chunks": w.corrupt_chunks,
    }


def event_json(e: Event) -> Json:
    """One event."""
    return {
        "kind": e.kind,
        "name": e.name,
        "step": e.step,
        "t": e.t,
        "duration": e.duration,
        "value": e.value,
        "data": e.data,
    }


def events_json(w: EventsWindow, next_cursor: str | None = None) -> Json:
    """Events of a window, or their counts per bin and kind when there are too many; and
    the cursor of the next page of events, if any."""
    return {
        "start": w.start,
        "end": w.end,
        "total": w.total,
        "events": None if w.events is None else [event_json(e) for e in w.events],
        "bins": None
        if w.bins is None
        else [{"kind": b.kind, "t0": b.t0, "t1": b.t1, "count": b.count} for b in w.bins],
        "next": next_cursor,
    }


def scalar_json(s: Scalar) -> Json:
    """One scalar."""
    return {"name": s.name, "step": s.step, "t": s.t, "value": s.value}


def checkpoint_json(e: Event) -> Json:
    """A ``checkpoint`` event as a checkpoint: ``path`` and ``bytes`` come from its data."""
    data = e.data or {}
    path = data.get("path")
    size = data.get("bytes")
    return {
        "t": e.t,
        "name": e.name,
        "step": e.step,
        "path": path if isinstance(path, str) else None,
        "bytes": size if isinstance(size, int) and not isinstance(size, bool) else None,
    }


def _usage_row(r: UsageRow) -> Json:
    out = r.to_dict()
    return {"keys": dict(r.keys), **{k: v for k, v in out.items() if k not in r.keys}}


def usage_json(u: Usage, group: str, days: list[UsageRow]) -> Json:
    """``GET /api/usage``: the rows, the daily held and busy GPU-seconds by ``group`` (rows
    grouped by day and ``group``), and the ten trials that wasted most."""
    wasted = []
    for t in u.most_wasted(10):
        stretch = t.longest_stretch()
        wasted.append(
            {
                "trial_id": t.trial.id,
                "trial": t.trial.name,
                "run_id": t.run.id,
                "run": t.run.name,
                "run_start": t.run.start,
                "project": t.run.project,
                "held_s": t.held_s,
                "busy_s": t.busy_s,
                "wasted_s": t.wasted_s,
                "idle_device": None if stretch is None else stretch[0],
                "idle_t0": None if stretch is None else stretch[1],
                "idle_t1": None if stretch is None else stretch[2],
            }
        )
    return {
        "since": u.since,
        "until": u.until,
        "by": list(u.by),
        "group": group,
        "rows": [_usage_row(r) for r in u.rows],
        "days": [
            {
                "day": d.keys["day"],
                "group": d.keys[group],
                "held_s": d.gpu_held_s,
                "busy_s": d.gpu_busy_s,
            }
            for d in days
        ],
        "wasted": wasted,
    }


def frontier_json(f: Frontier) -> Json:
    """``GET /api/runs/{run}/frontier``."""
    fit = None
    if f.fit is not None:
        fit = {
            "recommended": f.fit.best.to_dict(),
            "current": None
            if f.fit.current is None
            else {"key": f.fit.current.key, "label": f.fit.current.label},
            "gpus": f.fit.gpus,
            "duration_h": f.fit.duration_h,
            "cost_current_usd": f.fit.cost_current_usd,
            "cost_recommended_usd": f.fit.cost_recommended_usd,
        }
    return {
        "direction": f.direction,
        "trials": [
            {
                "trial_id": p.trial.id,
                "name": p.trial.name,
                "state": p.trial.state,
                "objective": p.objective,
                "gpu_hours": p.gpu_hours,
                "peak_gpu_mem": p.peak_gpu_mem,
                "on_hours_front": p.on_hours_front,
                "on_mem_front": p.on_mem_front,
            }
            for p in f.points
        ],
        "best_trial_id": None if f.best is None else f.best.id,
        "fit": fit,
        "saying": f.saying(),
    }
