"""Response models: the shapes of docs/api.md, for the OpenAPI document.

Routes build their JSON with :mod:`tunescope.server._serialize` and return it directly (no
per-request validation cost); the tests validate every response against these models so the
document and the responses cannot drift apart. Times are UNIX epoch seconds, values are in the
metric's base unit, ``None`` (JSON ``null``) means missing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tunescope.metrics import Scope, Source

__all__ = [
    "CheckpointOut",
    "ErrorBody",
    "ErrorOut",
    "EventBinOut",
    "EventOut",
    "EventsOut",
    "FindingCountsOut",
    "FindingOut",
    "FrontierOut",
    "FrontierTrialOut",
    "HealthOut",
    "LoginIn",
    "LogoutOut",
    "MetricOut",
    "MetricSeriesOut",
    "ProjectOut",
    "RunDetailOut",
    "RunFindingsOut",
    "RunOut",
    "RunState",
    "ScalarOut",
    "ScalarsOut",
    "SeriesOut",
    "ServingLevelOut",
    "ServingOut",
    "SessionOut",
    "TrialDetailOut",
    "TrialMetricOut",
    "TrialOut",
    "UsageDayOut",
    "UsageOut",
    "UsageRowOut",
    "WastedTrialOut",
    "WindowOut",
]


RunState = Literal["running", "completed", "failed", "lost", "empty"]
"""A run's state, from its trials': running while any runs, else failed or lost when any did,
completed when every trial ended well (or was pruned), empty without trials."""


class ErrorBody(BaseModel):
    status: int = Field(description="the HTTP status, repeated")
    code: str = Field(description="not_found, invalid, method_not_allowed, store_error…")
    message: str = Field(description="one line for people")


class ErrorOut(BaseModel):
    """The one error shape."""

    error: ErrorBody


class HealthOut(BaseModel):
    ok: bool
    store: str | None = Field(
        None, description="URL of the store the server reads (a local viewer only)"
    )


class SessionOut(BaseModel):
    """Who is asking."""

    mode: Literal["local", "tokens"] = Field(
        description="local: a loopback viewer (tunescope ui); tokens: a team server"
    )
    project: str | None = Field(description="the project the token may see; null: every one")
    scope: Literal["read", "write"]


class LoginIn(BaseModel):
    """The page's login (read by hand: the route refuses anything but JSON)."""

    token: str = Field(description="an access token, ts_…")


class LogoutOut(BaseModel):
    ok: bool


class ProjectOut(BaseModel):
    name: str


class MetricOut(BaseModel):
    """One row of the metric catalog."""

    key: str
    label: str
    unit: str = Field(description="display unit")
    scale: float = Field(description="multiply a stored base-unit value by this for `unit`")
    source: Source = Field(description="what measures it: host, nvml, gpm, torch, sdk or engine")
    scope: Scope = Field(description="trial, gpu (one series per GPU), host or netns")
    headline: bool
    markers: bool = Field(description="whether step / evaluation markers belong on its chart")
    max_value: float | None = Field(description="fixed top of the y axis in display units")
    equivalent: str
    description: str


class TrialOut(BaseModel):
    id: int
    run_id: int
    name: str
    state: Literal["running", "completed", "failed", "lost", "pruned"]
    params: dict[str, Any]
    host: str
    pids: list[int]
    start: float
    end: float | None
    heartbeat: float | None
    error: str | None
    interval: float = Field(description="sampling interval in seconds")


class TrialDetailOut(TrialOut):
    """One trial, with where it ran."""

    hosts: list[str] = Field(
        description="every host the trial ran on (has series on, or is its own host), sorted"
    )
    where: dict[str, dict[str, Any]] = Field(
        description="by host, what its sampler recorded of where the trial ran there "
        "(hostname, gpus, cuda_visible_devices, slurm, kubernetes, container; only keys "
        "known); {} for a host that said nothing"
    )


class FindingCountsOut(BaseModel):
    """How many findings a run has, by severity."""

    high: int
    moderate: int
    low: int


class FindingOut(BaseModel):
    """A diagnosis of one trial (docs/findings.md)."""

    id: str = Field(description="unique in a store: trial:rule:metric:device")
    rule: str = Field(description="the rule's key, e.g. input_bound")
    trial_id: int
    severity: Literal["high", "moderate", "low"]
    title: str = Field(description="one line, with the headline number")
    message: str = Field(description="what was measured, with the numbers")
    evidence: dict[str, Any] = Field(description="the numbers behind it, in base units")
    t0: float | None = Field(description="start of the span it refers to (null when none)")
    t1: float | None = Field(description="end of the span it refers to (null when none)")
    metric: str | None = Field(description="catalog key of the series to look at")
    device: str | None = Field(description="GPU index of that series; null for trial-wide")
    advice: list[str] = Field(description="what to try, most effective first")


class RunFindingsOut(BaseModel):
    trials: dict[str, list[FindingOut]] = Field(
        description="trial id -> its findings, most severe first; trials in creation order"
    )
    counts: FindingCountsOut


class RunOut(BaseModel):
    id: int
    name: str
    project: str = Field(description="the project the run belongs to")
    os_user: str | None = Field(description="the OS user that made the run, when known")
    host: str | None = Field(description="the host that made the run, when known")
    start: float
    end: float | None = Field(description="null while a trial has not ended")
    state: RunState = Field(description="running, completed, failed, lost or empty")
    trials: int
    duration_s: float = Field(
        description="end - start; while not ended, up to the latest trial end or heartbeat"
    )
    peak_gpu_mem: float | None = Field(
        description="highest gpu.mem sample of any trial on any GPU, bytes"
    )
    findings: FindingCountsOut | None = Field(
        description="findings by severity; null while not computed yet (poll again)"
    )


class RunDetailOut(BaseModel):
    id: int
    name: str
    project: str
    os_user: str | None
    host: str | None
    start: float
    end: float | None
    state: RunState
    trials: list[TrialOut]
    duration_s: float
    peak_gpu_mem: float | None
    findings: FindingCountsOut | None = Field(
        description="findings by severity; null while not computed yet (poll again)"
    )


class MetricSeriesOut(BaseModel):
    host: str = Field(description="the host that measured it (a node of a multi-node trial)")
    device: str | None = Field(description="GPU index; null for a trial-wide series")


class TrialMetricOut(BaseModel):
    metric: str
    devices: list[str | None] = Field(
        description="GPU indices (each once, whatever its hosts); null for a trial-wide series"
    )
    series: list[MetricSeriesOut] = Field(
        description="every series of the metric, one per host and device, by host then device"
    )


class SeriesOut(BaseModel):
    """One host's device's series in a window: raw samples, or one entry per non-empty
    bucket."""

    host: str = Field(description="the host that measured it (a node of a multi-node trial)")
    device: str | None
    note: str | None
    mode: Literal["raw", "buckets"]
    t: list[float] = Field(description="sample time (raw), midpoint of a bucket's samples")
    mean: list[float] = Field(description="sample value (raw) or bucket mean")
    min: list[float] | None
    max: list[float] | None
    n: list[int] | None
    corrupt_chunks: int = Field(
        description="stored chunks of this window whose samples could not be decoded: 0 when "
        "the window is exact; otherwise those inside it are one bucket each (their stored "
        "count, min, max and mean) and those cut by its edges are missing"
    )


class WindowOut(BaseModel):
    metric: str
    start: float
    end: float
    points: int
    series: list[SeriesOut]


class EventOut(BaseModel):
    kind: str
    name: str | None
    step: int | None
    t: float
    duration: float | None
    value: float | None
    data: dict[str, Any] | None


class EventBinOut(BaseModel):
    kind: str
    t0: float
    t1: float
    count: int


class EventsOut(BaseModel):
    start: float
    end: float
    total: int
    events: list[EventOut] | None
    bins: list[EventBinOut] | None
    next: str | None = Field(
        description="a cursor for the next page of events (send it back as `cursor`); null "
        "when nothing more is listed"
    )


class ScalarOut(BaseModel):
    name: str
    step: int | None
    t: float
    value: float


class ScalarsOut(BaseModel):
    names: list[str]
    scalars: list[ScalarOut]
    next: str | None = Field(
        description="a cursor for the next page (send it back as `cursor`); null after the last"
    )


class CheckpointOut(BaseModel):
    t: float
    name: str | None
    step: int | None
    path: str | None
    bytes: int | None


class RunRefOut(BaseModel):
    """A run by id and name."""

    id: int
    name: str


class SloOut(BaseModel):
    """A latency target, seconds; null where not set."""

    ttft_s: float | None = Field(description="time to first token")
    tpot_s: float | None = Field(description="time per output token after the first")
    e2el_s: float | None = Field(description="end-to-end latency")


class DistOut(BaseModel):
    """Mean and percentiles of one latency over a level, seconds (null without values)."""

    n: int = Field(description="how many values")
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class LevelStatsOut(BaseModel):
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


class ServingLevelOut(BaseModel):
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


class ServingOut(BaseModel):
    """A load run's levels, sorted by mode then level (empty for other runs)."""

    run: RunRefOut
    slo: SloOut = Field(description="the run's SLO (its first level's that has one)")
    levels: list[ServingLevelOut]


class UsageRowOut(BaseModel):
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


class UsageDayOut(BaseModel):
    day: str = Field(description="UTC date, YYYY-MM-DD")
    group: str | None = Field(description="the value of the chart's grouping")
    held_s: float
    busy_s: float


class WastedTrialOut(BaseModel):
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


class UsageOut(BaseModel):
    since: float
    until: float
    by: list[str]
    group: str = Field(description="the grouping of ``days``")
    rows: list[UsageRowOut]
    days: list[UsageDayOut] = Field(description="held and busy GPU-seconds per UTC day and group")
    wasted: list[WastedTrialOut] = Field(description="the ten trials that wasted most")


class FrontierTrialOut(BaseModel):
    trial_id: int
    name: str
    state: str
    objective: float | None = Field(description="the first objective value, null without one")
    gpu_hours: float = Field(description="GPU-hours held (attributed GPUs x its span)")
    peak_gpu_mem: float | None = Field(description="bytes, null without gpu.mem")
    on_hours_front: bool = Field(description="on the Pareto front of objective vs GPU-hours")
    on_mem_front: bool = Field(description="on the front of objective vs peak GPU memory")


class FrontierOut(BaseModel):
    direction: str | None = Field(description="minimize or maximize; null: unknown (minimized)")
    trials: list[FrontierTrialOut]
    best_trial_id: int | None = Field(description="the best completed trial")
    fit: dict[str, Any] | None = Field(
        description="the best trial's right-size evidence (the right_size finding's), or null"
    )
    saying: str | None = Field(description="the best trial would have fit on X, at $Y ...")
