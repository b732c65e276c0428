"""The JSON report: :func:`report_dict`, the report as JSON values."""

from __future__ import annotations

from typing import Any

from tunescope.analyze._report_model import Report
from tunescope.analyze._rules import jsonable
from tunescope.metrics import metric

__all__ = ["report_dict"]


def report_dict(report: Report) -> dict[str, Any]:
    """The report as JSON values."""
    r = report.run
    return {
        "run": {
            "id": r.id,
            "name": r.name,
            "start": r.start,
            "end": r.end,
            "state": r.state,
            "trials": r.trials,
        },
        "store": report.store_url,
        "generated": report.generated,
        "trials": [
            {
                "id": t.trial.id,
                "name": t.trial.name,
                "state": t.trial.state,
                "params": jsonable(t.trial.params),
                "start": t.trial.start,
                "end": t.trial.end,
                "duration_s": jsonable(t.duration),
                "objective": jsonable(t.objective.values),
                "direction": list(t.objective.directions),
                "metrics": {
                    k: {
                        "label": metric(k).label,
                        "unit": metric(k).unit,
                        "scale": metric(k).scale,
                        "peak": jsonable(m.peak),
                        "mean": jsonable(m.mean),
                        "samples": m.samples,
                        "devices": m.devices,
                    }
                    for k, m in t.metrics.items()
                },
                "events": {
                    "optimizer_steps": t.optimizer_steps,
                    "evaluations": t.evaluations,
                    "checkpoints": t.checkpoints,
                    "sampler_gaps": [{"t": a, "duration_s": d} for a, d in t.gaps],
                },
                "findings": [f.to_dict() for f in t.findings],
            }
            for t in report.trials
        ],
        "settings": report.settings.to_dict(),
        "serving": None if report.serving is None else jsonable(report.serving.to_dict()),
        "sizing": None if report.sizing is None else jsonable(report.sizing.to_dict()),
    }
