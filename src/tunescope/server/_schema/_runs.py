"""The shapes of the store's records: errors, session, catalog, runs, trials, findings,
series windows, events, scalars and checkpoints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from tunescope.analyze import Finding
from tunescope.metrics import Scope, Source
from tunescope.server._schema._shape import Json, Shape
from tunescope.store import Event, EventsWindow, RunInfo, SeriesInfo, TrialInfo, Window

RunState = Literal["running", "completed", "failed", "lost", "empty"]
"""A run's state, from its trials': running while any runs, else failed or lost when any did,
completed when every trial ended well (or was pruned), empty without trials."""


class ErrorBody(Shape):
    status: int = Field(description="the HTTP status, repeated")
    code: str = Field(description="not_found, invalid, method_not_allowed, store_error…")
    message: str = Field(description="one line for people")


class ErrorOut(Shape):
    """The one error shape."""

    error: ErrorBody


class HealthOut(Shape):
    ok: bool
    store: str | None = Field(
        None, description="URL of the store the server reads (a local viewer only)"
    )


class SessionOut(Shape):
    """Who is asking."""

    mode: Literal["local", "tokens"] = Field(
        description="local: a loopback viewer (tunescope ui); tokens: a team server"
    )
    project: str | None = Field(description="the project the token may see; null: every one")
    scope: Literal["read", "write"]


class LoginIn(BaseModel):
    """The page's login (read by hand: the route refuses anything but JSON)."""

    token: str = Field(description="an access token, ts_…")


class LogoutOut(Shape):
    ok: bool


class ProjectOut(Shape):
    name: str


class MetricOut(Shape):
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


class TrialOut(Shape):
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

    @classmethod
    def of_trial(cls, t: TrialInfo, hosts: dict[str, dict[str, Any]]) -> Json:
        """A trial and where it ran (``Store.hosts``)."""
        return cls.of(t, hosts=list(hosts), where=hosts)


class FindingCountsOut(Shape):
    """How many findings a run has, by severity."""

    high: int
    moderate: int
    low: int


class FindingOut(Shape):
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

    @classmethod
    def of_finding(cls, f: Finding) -> Json:
        """A finding, as ``Finding.to_dict`` gives it (``report --format json``'s shape)."""
        return cls.make(**f.to_dict())


class RunFindingsOut(Shape):
    trials: dict[str, list[FindingOut]] = Field(
        description="trial id -> its findings, most severe first; trials in creation order"
    )
    counts: FindingCountsOut

    @classmethod
    def of_findings(
        cls, findings: Mapping[int, Iterable[Finding]], counts: Mapping[str, int]
    ) -> Json:
        """A run's findings per trial (keys are trial ids as strings, in creation order) and
        their counts by severity."""
        return cls.make(
            trials={
                str(tid): [FindingOut.of_finding(f) for f in fs] for tid, fs in findings.items()
            },
            counts=FindingCountsOut.make(**counts),
        )


class RunOut(Shape):
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

    @classmethod
    def of_run(
        cls,
        r: RunInfo,
        duration_s: float,
        peak_gpu_mem: float | None,
        findings: Mapping[str, int] | None,
    ) -> Json:
        """A run of the runs list; ``findings`` counts its findings by severity (None while
        they are not computed yet)."""
        counts = None if findings is None else FindingCountsOut.make(**findings)
        return cls.of(r, duration_s=duration_s, peak_gpu_mem=peak_gpu_mem, findings=counts)


class RunDetailOut(Shape):
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

    @classmethod
    def of_run(
        cls,
        r: RunInfo,
        trials: Iterable[TrialInfo],
        duration_s: float,
        peak_gpu_mem: float | None,
        findings: Mapping[str, int] | None,
    ) -> Json:
        """One run with its trials (see :meth:`RunOut.of_run`)."""
        counts = None if findings is None else FindingCountsOut.make(**findings)
        return cls.of(
            r,
            trials=TrialOut.of_each(trials),
            duration_s=duration_s,
            peak_gpu_mem=peak_gpu_mem,
            findings=counts,
        )


class MetricSeriesOut(Shape):
    host: str = Field(description="the host that measured it (a node of a multi-node trial)")
    device: str | None = Field(description="GPU index; null for a trial-wide series")


class TrialMetricOut(Shape):
    metric: str
    devices: list[str | None] = Field(
        description="GPU indices (each once, whatever its hosts); null for a trial-wide series"
    )
    series: list[MetricSeriesOut] = Field(
        description="every series of the metric, one per host and device, by host then device"
    )

    @classmethod
    def of_series(cls, metric: str, series: list[SeriesInfo], devices: list[str | None]) -> Json:
        """A metric with its series (in order) and its devices."""
        return cls.make(metric=metric, devices=devices, series=MetricSeriesOut.of_each(series))


class SeriesOut(Shape):
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

    @classmethod
    def of_window(cls, w: Window) -> Json:
        """One host's device's series in a window: ``raw`` samples or ``buckets``."""
        raw = w.raw
        return cls.make(
            host=w.series.host,
            device=w.series.device,
            note=w.series.note,
            mode="raw" if raw else "buckets",
            t=w.t,
            mean=w.mean,
            # raw samples send their values once (as mean); min, max and n would repeat them
            min=None if raw else w.min,
            max=None if raw else w.max,
            n=None if raw else w.count,
            corrupt_chunks=w.corrupt_chunks,
        )


class WindowOut(Shape):
    metric: str
    start: float
    end: float
    points: int
    series: list[SeriesOut]


class EventOut(Shape):
    kind: str
    name: str | None
    step: int | None
    t: float
    duration: float | None
    value: float | None
    data: dict[str, Any] | None


class EventBinOut(Shape):
    kind: str
    t0: float
    t1: float
    count: int


class EventsOut(Shape):
    start: float
    end: float
    total: int
    events: list[EventOut] | None
    bins: list[EventBinOut] | None
    next: str | None = Field(
        description="a cursor for the next page of events (send it back as `cursor`); null "
        "when nothing more is listed"
    )

    @classmethod
    def of_window(cls, w: EventsWindow, next_cursor: str | None = None) -> Json:
        """Events of a window, or their counts per bin and kind when there are too many; and
        the cursor of the next page of events, if any."""
        return cls.make(
            start=w.start,
            end=w.end,
            total=w.total,
            events=None if w.events is None else EventOut.of_each(w.events),
            bins=None if w.bins is None else EventBinOut.of_each(w.bins),
            next=next_cursor,
        )


class ScalarOut(Shape):
    name: str
    step: int | None
    t: float
    value: float


class ScalarsOut(Shape):
    names: list[str]
    scalars: list[ScalarOut]
    next: str | None = Field(
        description="a cursor for the next page (send it back as `cursor`); null after the last"
    )


class CheckpointOut(Shape):
    t: float
    name: str | None
    step: int | None
    path: str | None
    bytes: int | None

    @classmethod
    def of_event(cls, e: Event) -> Json:
        """A ``checkpoint`` event as a checkpoint: ``path`` and ``bytes`` come from its data."""
        data = e.data or {}
        path = data.get("path")
        size = data.get("bytes")
        return cls.make(
            t=e.t,
            name=e.name,
            step=e.step,
            path=path if isinstance(path, str) else None,
            bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
        )
