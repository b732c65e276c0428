"""The sweep's cost frontier: each trial's objective against what it cost (GPU-hours held, as
``tunescope usage`` counts them, and peak GPU memory), the Pareto front of the completed
trials on each, and what the best trial would have cost on the GPU the right-size rule picks.

A trial is on a front when no other completed trial scored at least as well for no more cost
and strictly better on one of the two. Pruned and failed trials are drawn but not on a front:
their objective is not a final one. Without a known direction the objective is minimized and
``direction`` says ``None``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tunescope.analyze._data import TrialData
from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType
from tunescope.analyze._objective import trial_objective
from tunescope.analyze._rules._rightsize import Fit, RightSize
from tunescope.analyze._rules._rule import Case
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._usage import held_gpu_seconds, series_peak
from tunescope.store import Store, TrialInfo

__all__ = ["Frontier", "FrontierPoint", "cost_frontier", "pareto"]


@dataclass(frozen=True)
class FrontierPoint:
    """One trial: its objective (the first value; None without one), GPU-hours held, peak
    GPU memory (bytes; None without ``gpu.mem``) and whether it is on each front."""

    trial: TrialInfo
    objective: float | None
    gpu_hours: float
    peak_gpu_mem: float | None
    on_hours_front: bool
    on_mem_front: bool


@dataclass(frozen=True)
class Frontier:
    """A run's points, the objective's direction, its best completed trial and that trial's
    right-size fit (None where the rule finds nothing to say)."""

    direction: str | None
    points: tuple[FrontierPoint, ...]
    best: TrialInfo | None
    fit: Fit | None

    def saying(self) -> str | None:
        """ "The best trial would have fit on GPU X, at $Y instead of $Z" (None without a
        best trial or a fit)."""
        if self.best is None or self.fit is None:
            return None
        f = self.fit
        at = "" if f.cost_recommended_usd is None else f", at ${f.cost_recommended_usd:.2f}"
        was = (
            f" instead of ${f.cost_current_usd:.2f} on {f.current.label}"
            if f.current is not None and f.cost_current_usd is not None
            else " (the GPU it ran on is not in the catalog)"
        )
        if f.current is not None and f.best.price >= f.current.price:
            return (
                f"The best trial, {self.best.name}, ran on {f.current.label}: no cheaper GPU "
                "of the catalog holds its peak memory with headroom."
            )
        return (
            f"The best trial, {self.best.name}, would have fit on {f.best.label} "
            f"({f.gpus} x){at}{was}."
        )


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For (cost, score) pairs where lower is better on both: whether each is on the front
    (no other pair is at least as good on both and better on one)."""
    out = []
    for i, (c, s) in enumerate(points):
        beaten = any(
            c2 <= c and s2 <= s and (c2 < c or s2 < s)
            for j, (c2, s2) in enumerate(points)
            if j != i
        )
        out.append(not beaten)
    return out


def _peak_mem(store: Store, trial: TrialInfo) -> float | None:
    peaks = [series_peak(store, s) for s in store.list_series(trial.id, "gpu.mem")]
    return max((p for p in peaks if p is not None), default=None)


def cost_frontier(
    store: Store,
    run_id: int,
    settings: FindingSettings | None = None,
    *,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
    now: float | None = None,
) -> Frontier:
    """The cost frontier of a run's trials (see the module doc)."""
    now = time.time() if now is None else now
    s = settings if settings is not None else FindingSettings()
    rows = []
    direction: str | None = None
    for t in store.list_trials(run_id):
        obj = trial_objective(store, t)
        if obj.directions and direction is None:
            direction = obj.directions[0]
        value = obj.values[0] if obj.values else None
        rows.append((t, value, held_gpu_seconds(store, t, now) / 3600.0, _peak_mem(store, t)))
    sign = -1.0 if direction == "maximize" else 1.0
    scores = {
        i: sign * v
        for i, (t, v, _, _) in enumerate(rows)
        if t.state == "completed" and v is not None and math.isfinite(v)
    }
    on_h = dict(zip(scores, pareto([(rows[i][2], sc) for i, sc in scores.items()]), strict=True))
    mems = {i: m for i in scores if (m := rows[i][3]) is not None}
    on_m = dict(zip(mems, pareto([(m, scores[i]) for i, m in mems.items()]), strict=True))
    points = tuple(
        FrontierPoint(t, v, h, m, on_h.get(i, False), on_m.get(i, False))
        for i, (t, v, h, m) in enumerate(rows)
    )
    best_i = min(scores, key=scores.__getitem__, default=None)
    best = None if best_i is None else rows[best_i][0]
    fit = None
    if best is not None:
        fit = RightSize().measure(Case(TrialData(store, best), s, catalog))
    return Frontier(direction, points, best, fit)
