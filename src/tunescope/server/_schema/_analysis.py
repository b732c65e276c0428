"""The shapes of the analysis' answers: a load run's levels, usage, the cost frontier."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from tunescope.analyze import Frontier, ServingRun, Usage, UsageRow, jsonable
from tunescope.server._schema._shape import Json, Shape
from tunescope.store import RunInfo


class RunRefOut(Shape):
    """A run by id and name."""

    id: int
    name: str


class SloOut(Shape):
    """A latency target, seconds; null where not set."""

    ttft_s: float | None = Field(description="time to first token")
    tpot_s: float | None = Field(description="time per output token after the first")
    e2el_s: float | None = Field(description="end-to-end latency")


class DistOut(Shape):
    """Mean and percentiles of one latency over a level, seconds (null without values)."""

    n: int = Field(description="how many values")
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class LevelStatsOut(Shape):
    """One load level's figures, as `vllm bench serve` defines them (docs/serving_analysis.md)."""

    requests: int
    ok: int
    errors: int
    duration_s: float | None = Field(description="first request sent to last request done")
    ttft: DistOut
    tpot: DistOut
    itl: DistOut
    e2el: DistOut
    prompt_tokens: int
    completion_tokens: int
    request_throughput: float | None = Field(description="successful requests per second")
    output_throughput: float | None = Field(description="output tokens per second")
    total_token_throughput: float | None = Field(description="prompt and output tokens/s")
    good: int | None = Field(description="requests meeting every SLO target; null without one")
    goodput: float | None = Field(description="good requests per second; null without an SLO")


class ServingLevelOut(Shape):
    """One load level: its trial and figures."""

    trial_id: int
    trial: str = Field(description="the trial's name, e.g. c6")
    state: Literal["running", "completed", "failed", "lost", "pruned"]
    error: str | None = Field(description="why a failed level did not run")
    mode: Literal["concurrency", "rate"]
    level: float | None = Field(description="concurrency, or requests per second")
    start: float
    end: float | None
    slo: SloOut = Field(description="the SLO the level was run with")
    stats: LevelStatsOut


class ServingOut(Shape):
    """A load run's levels, sorted by mode then level (empty for other runs)."""

    run: RunRefOut
    slo: SloOut = Field(description="the run's SLO (its first level's that has one)")
    levels: list[ServingLevelOut]

    @classmethod
    def of_run(cls, r: RunInfo, sr: ServingRun | None) -> Json:
        """A run's load levels, as ``ServingRun.to_dict`` gives them (``report --format
        json``'s shape, non-finite numbers as null); no levels for another run."""
        if sr is None:
            none = SloOut.make(ttft_s=None, tpot_s=None, e2el_s=None)
            return cls.make(run=RunRefOut.of(r), slo=none, levels=[])
        return cls.make(**jsonable(sr.to_dict()))


class UsageRowOut(Shape):
    """One group of ``tunescope usage`` (docs/usage.md): GPU- and core-seconds, shares in %."""

    keys: dict[str, str | None] = Field(description="the grouping -> this row's value of it")
    gpu_held_s: float = Field(description="GPU-seconds held")
    gpu_busy_s: float = Field(description="held GPU-seconds weighted by the busy measure")
    gpu_idle_s: float = Field(description="held GPU-seconds inside idle stretches")
    busy_by: str | None = Field(description="sm_active, util, or sm_active+util")
    mem_peak_pct: float | None
    mem_mean_pct: float | None
    cpu_core_s: float
    cpu_quota_core_s: float
    trials: int
    failed_gpu_s: float
    pruned_gpu_s: float
    failed_pruned_pct: float | None
    cost_usd: float | None = Field(description="null without a price for the row's GPUs")

    @classmethod
    def of_row(cls, r: UsageRow) -> Json:
        """A row of ``usage_of`` (its fields are this shape's)."""
        return cls.of(r, keys=dict(r.keys))


class UsageDayOut(Shape):
    day: str = Field(description="UTC date, YYYY-MM-DD")
    group: str | None = Field(description="the value of the chart's grouping")
    held_s: float
    busy_s: float


class WastedTrialOut(Shape):
    trial_id: int
    trial: str
    run_id: int
    run: str
    run_start: float = Field(description="the run's start (the trial page's time zero)")
    project: str
    held_s: float
    busy_s: float
    wasted_s: float = Field(description="held - busy GPU-seconds")
    idle_device: str | None = Field(description="the GPU of the longest idle stretch")
    idle_t0: float | None = Field(description="the longest idle stretch's start")
    idle_t1: float | None = Field(description="its end")


class UsageOut(Shape):
    since: float
    until: float
    by: list[str]
    group: str = Field(description="the grouping of ``days``")
    rows: list[UsageRowOut]
    days: list[UsageDayOut] = Field(description="held and busy GPU-seconds per UTC day and group")
    wasted: list[WastedTrialOut] = Field(description="the ten trials that wasted most")

    @classmethod
    def of_usage(cls, u: Usage, group: str, days: Iterable[UsageRow]) -> Json:
        """``GET /api/usage``: the rows, the daily held and busy GPU-seconds by ``group``
        (``days``: rows grouped by day and ``group``), and the ten trials that wasted most."""
        wasted = []
        for t in u.most_wasted(10):
            stretch = t.longest_stretch()
            wasted.append(
                WastedTrialOut.make(
                    trial_id=t.trial.id,
                    trial=t.trial.name,
                    run_id=t.run.id,
                    run=t.run.name,
                    run_start=t.run.start,
                    project=t.run.project,
                    held_s=t.held_s,
                    busy_s=t.busy_s,
                    wasted_s=t.wasted_s,
                    idle_device=None if stretch is None else stretch[0],
                    idle_t0=None if stretch is None else stretch[1],
                    idle_t1=None if stretch is None else stretch[2],
                )
            )
        return cls.make(
            since=u.since,
            until=u.until,
            by=list(u.by),
            group=group,
            rows=[UsageRowOut.of_row(r) for r in u.rows],
            days=[
                UsageDayOut.make(
                    day=d.keys["day"], group=d.keys[group], held_s=d.gpu_held_s, busy_s=d.gpu_busy_s
                )
                for d in days
            ],
            wasted=wasted,
        )


class FrontierTrialOut(Shape):
    trial_id: int
    name: str
    state: str
    objective: float | None = Field(description="the first objective value, null without one")
    gpu_hours: float = Field(description="GPU-hours held (attributed GPUs x its span)")
    peak_gpu_mem: float | None = Field(description="bytes, null without gpu.mem")
    on_hours_front: bool = Field(description="on the Pareto front of objective vs GPU-hours")
    on_mem_front: bool = Field(description="on the front of objective vs peak GPU memory")


class FrontierOut(Shape):
    direction: str | None = Field(description="minimize or maximize; null: unknown (minimized)")
    trials: list[FrontierTrialOut]
    best_trial_id: int | None = Field(description="the best completed trial")
    fit: dict[str, Any] | None = Field(
        description="the best trial's right-size evidence (the right_size finding's), or null"
    )
    saying: str | None = Field(description="the best trial would have fit on X, at $Y ...")

    @classmethod
    def of_frontier(cls, f: Frontier) -> Json:
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
        trials = [
            FrontierTrialOut.of(p, trial_id=p.trial.id, name=p.trial.name, state=p.trial.state)
            for p in f.points
        ]
        return cls.make(
            direction=f.direction,
            trials=trials,
            best_trial_id=None if f.best is None else f.best.id,
            fit=fit,
            saying=f.saying(),
        )
