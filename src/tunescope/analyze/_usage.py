"""Usage: the GPU-hours the trials of a project held and the share they computed, idle
stretches, GPU memory share, CPU core-hours against the quota and cost, grouped by project,
user, run, host, GPU model, day or week (``tunescope usage``, the Usage page).

Definitions (docs/usage.md says the same for people):

* **held**: a GPU is held by a trial from the trial's start to its end (its last heartbeat
  while it runs, now for a running trial that has none yet), on every GPU the trial has a
  ``gpu.util``, ``gpu.sm_active`` or ``gpu.mem`` series of (by host and device): the GPUs its
  sampler attributed to it. Its model is the name the sampler recorded for that index in
  ``Store.hosts`` (``where["gpus"]``), else ``unknown``.
* **a sample stands for the time since the previous one** (the sampler's samples sum up the
  period that ends at them) when that came at most :data:`GAP_INTERVALS` sampling intervals
  before it, else (the first sample, the first after a gap) for one interval; the rest of a
  gap is held but neither busy nor idle (unknown). Every
  span is cut to the trial's held span and to the asked window.
* **busy**: held time weighted by SM activity (``gpu.sm_active``, NVML GPM) on a GPU that has
  it, else by GPU utilization (``gpu.util``); each row says which (``busy_by``).
* **idle**: held time inside an idle stretch: consecutive samples each at or under
  ``idle_gpu_util_pct`` busy (by the same measure) covering at least ``idle_stretch_min_s``
  without a gap (both :class:`FindingSettings`); a stretch counts whole when it is that long
  over the trial, even where the asked window cuts it.
* **memory share**: ``gpu.mem`` over the device's ``gpu.mem.total`` (its highest sample: a
  constant): the peak sample and the time-weighted mean. ``cpu.capacity`` likewise.
* **CPU**: core-seconds used = ``cpu.util`` (a share of ``cpu.capacity``, the cores the
  trial may use: its cgroup quota or affinity) x ``cpu.capacity`` x time; the quota is
  ``cpu.capacity`` x held time. Trials without GPUs report these the same way.
* **failed and pruned**: the held GPU-seconds of trials whose state is ``failed`` or
  ``pruned``, and their share of the row's held GPU-seconds (of its CPU quota when it holds
  no GPU).
* **cost**: held GPU-hours x the price given for the GPU's model (by its recorded name, or by
  the key of the right-size catalog GPU whose memory it matches); None when no GPU of the
  row has a price.
* **day** and **week** are UTC (weeks as ISO weeks, ``2026-W05``); a span that crosses
  midnight is split between the days.

A series longer than :data:`MAX_POINTS` samples is read as that many buckets of
``Store.window`` (count, mean and max of each: the store's summaries), so the cost of a
trial is bounded whatever its length; a bucket counts as idle when its highest sample is.

This module computes one trial's figures (:func:`trial_usage`); :mod:`._usage_query` sums
them across trials, and :mod:`._usage_kept` keeps an ended trial's in its store.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType, match_gpu
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._summary import trial_end
from tunescope.store import RunInfo, SeriesInfo, Store, TrialInfo

__all__ = [
    "BUSY_METRICS",
    "GAP_INTERVALS",
    "GROUPINGS",
    "MAX_POINTS",
    "CpuDay",
    "CpuUse",
    "Day",
    "GpuDay",
    "GpuUse",
    "Points",
    "Slice",
    "TrialUsage",
    "attributed_gpus",
    "held_gpu_seconds",
    "held_span",
    "idle_stretches",
    "read_points",
    "series_peak",
    "trial_usage",
    "usage_from_days",
]

F64 = npt.NDArray[np.float64]

GROUPINGS = ("project", "user", "run", "host", "gpu_model", "day", "week")
"""What ``--by`` takes, in the order a row's keys are shown."""
BUSY_METRICS = ("gpu.sm_active", "gpu.util")
"""The busy measure of a GPU: the first of these it has a series of."""
GAP_INTERVALS = 1.5
"""A sample stands for the time since the previous one when that came at most this many
sampling intervals before it; after a longer gap, for one interval (the rest of the gap is
held, neither busy nor idle)."""
MAX_POINTS = 20_000
"""Points a series is read as at most (buckets beyond)."""
_GPU_SERIES = ("gpu.util", "gpu.sm_active", "gpu.mem")
_DAY = 86400.0


@dataclass(frozen=True)
class Points:
    """A series as spans: point i stands for (``a[i]``, ``b[i]``] with mean ``mean[i]`` and
    highest sample ``top[i]`` (a raw sample's value twice)."""

    a: F64
    b: F64
    mean: F64
    top: F64

    def overlap(self, lo: float, hi: float) -> F64:
        """Seconds of each point's span inside [lo, hi]."""
        out: F64 = np.clip(np.minimum(self.b, hi) - np.maximum(self.a, lo), 0.0, None)
        return out


def read_points(store: Store, series: SeriesInfo, interval: float) -> Points | None:
    """The whole series as :class:`Points` (see the module doc); None when it is empty."""
    ext = store.series_extent(series.id)
    if ext is None:
        return None
    first, last, count = ext
    w = store.window(series.id, first, last + 1e-3, max(1, min(count, MAX_POINTS)))
    if w.samples is not None:
        tf = np.asarray([s[0] for s in w.samples], dtype=np.float64)
        tl = tf
        mean = np.asarray([s[1] for s in w.samples], dtype=np.float64)
        top = mean
    else:
        bs = w.buckets or []
        tf = np.asarray([b.t_first for b in bs], dtype=np.float64)
        tl = np.asarray([b.t_last for b in bs], dtype=np.float64)
        mean = np.asarray([b.mean for b in bs], dtype=np.float64)
        top = np.asarray([b.max for b in bs], dtype=np.float64)
    if not len(tf):
        return None
    iv = interval if interval > 0 else 1.0
    prev = np.concatenate([[-np.inf], tl[:-1]])
    a = np.where(tf - prev <= GAP_INTERVALS * iv, prev, tf - iv)
    return Points(a, tl, mean, top)


def idle_stretches(
    p: Points, lo: float, hi: float, threshold_pct: float, min_s: float
) -> list[tuple[float, float]]:
    """The idle stretches of a busy measure within the held span [lo, hi]: runs of points
    whose highest sample is at or under ``threshold_pct``, each starting where the previous
    ends (no gap), lasting at least ``min_s`` seconds inside [lo, hi]."""
    a, b = np.maximum(p.a, lo), np.minimum(p.b, hi)
    ok = (p.top <= threshold_pct) & (b > a)
    prev_ok = np.concatenate([[False], ok[:-1]])
    prev_b = np.concatenate([[-np.inf], b[:-1]])
    first = ok & (~prev_ok | (a > prev_b))
    if not first.any():
        return []
    run = np.cumsum(first) - 1
    starts = a[first]
    ends = np.full(len(starts), -np.inf)
    np.maximum.at(ends, run[ok], b[ok])
    keep = ends - starts >= min_s
    return list(zip(starts[keep].tolist(), ends[keep].tolist(), strict=True))


@dataclass(frozen=True)
class GpuUse:
    """One GPU a trial held: where, which model, its busy measure, its idle stretches over
    the trial, and its highest ``gpu.mem`` sample (None without one)."""

    host: str
    device: str
    model: str
    catalog_key: str | None
    busy_by: str | None
    stretches: tuple[tuple[float, float], ...]
    mem_peak_bytes: float | None


@dataclass(frozen=True)
class CpuUse:
    """One host's CPU of a trial: the cores it may use."""

    host: str
    cores: float


GpuDay = tuple[float, float, float, float, float | None]
"""What one GPU used in one day: busy and idle seconds, the memory share's time weight, its
weighted sum and its peak (None: no memory share sample in the day)."""
CpuDay = tuple[float]
"""What one host's CPU used in one day: core-seconds."""
Day = tuple[tuple[GpuDay, ...], tuple[CpuDay, ...]]
"""What a trial's GPUs and CPUs (in their order) used in one UTC day of the asked window: the
figures of its slices that do not follow from the day's length and the cores."""


@dataclass
class Slice:
    """What one GPU (or one host's CPU, ``gpu`` False) of one trial used in one UTC day of the
    asked window, with the keys a row is grouped by."""

    keys: dict[str, str | None]
    trial_id: int
    state: str
    gpu: bool
    busy_by: str | None = None
    catalog_key: str | None = None
    held_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = 0.0
    mem_w: float = 0.0
    mem_sum: float = 0.0
    mem_peak: float | None = None
    cpu_core_s: float = 0.0
    cpu_quota_core_s: float = 0.0


@dataclass(frozen=True)
class TrialUsage:
    """A trial's usage in the asked window: its GPUs and CPUs, its slices (by day), and its
    totals over its GPUs."""

    trial: TrialInfo
    run: RunInfo
    gpus: tuple[GpuUse, ...]
    cpus: tuple[CpuUse, ...]
    slices: tuple[Slice, ...]
    held_s: float
    busy_s: float
    idle_s: float

    @property
    def wasted_s(self) -> float:
        """Held but not busy GPU-seconds."""
        return self.held_s - self.busy_s

    def longest_stretch(self) -> tuple[str, float, float] | None:
        """(device, start, end) of its longest idle stretch, None without one."""
        best = [(b - a, g.device, a, b) for g in self.gpus for a, b in g.stretches]
        if not best:
            return None
        _, device, a, b = max(best)
        return device, a, b


def attributed_gpus(
    series: Iterable[SeriesInfo],
) -> dict[tuple[str, str], dict[str, SeriesInfo]]:
    """The GPUs a trial held, (host, device) in order, each with its series by metric: every
    device it has a ``gpu.util``, ``gpu.sm_active`` or ``gpu.mem`` series of."""
    out: dict[tuple[str, str], dict[str, SeriesInfo]] = {}
    for s in series:
        if s.metric in _GPU_SERIES and s.device is not None:
            out.setdefault((s.host, s.device), {})[s.metric] = s
    return dict(sorted(out.items(), key=lambda x: (x[0][0], len(x[0][1]), x[0][1])))


def held_span(trial: TrialInfo, now: float) -> tuple[float, float]:
    """When the trial held its GPUs: its start to its end (its last heartbeat while it runs;
    ``now`` for a running trial without one)."""
    end = trial_end(trial)
    if end is None:
        end = now if trial.state == "running" else trial.start
    return trial.start, max(end, trial.start)


def held_gpu_seconds(store: Store, trial: TrialInfo, now: float) -> float:
    """GPU-seconds a trial held over its whole span: its attributed GPUs x its held span."""
    a, b = held_span(trial, now)
    return len(attributed_gpus(store.list_series(trial.id))) * (b - a)


def _model_of(where: Mapping[str, Any], device: str) -> str | None:
    for g in where.get("gpus") or ():
        if isinstance(g, Mapping) and str(g.get("index")) == device.split("/", 1)[0]:
            name = g.get("name")
            return str(name) if name else None
    return None


def series_peak(store: Store, series: SeriesInfo | None) -> float | None:
    """The highest sample of a series (None: no series, or no sample), from the store's
    chunk summaries: one bucket over its whole extent."""
    ext = None if series is None else store.series_extent(series.id)
    if series is None or ext is None:
        return None
    return store.window(series.id, ext[0], ext[1] + 1e-3, 1).peak


def _days(lo: float, hi: float) -> Iterable[tuple[float, float]]:
    d = math.floor(lo / _DAY) * _DAY
    while d < hi:
        yield max(d, lo), min(d + _DAY, hi)
        d += _DAY


def _day_keys(t: float) -> tuple[str, str]:
    day = dt.datetime.fromtimestamp(t, dt.UTC).date()
    year, week, _ = day.isocalendar()
    return day.isoformat(), f"{year}-W{week:02d}"


def trial_usage(
    store: Store,
    trial: TrialInfo,
    run: RunInfo,
    since: float,
    until: float,
    settings: FindingSettings,
    *,
    now: float,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
) -> TrialUsage | None:
    """A trial's usage within [since, until] (see the module doc); None when the trial held
    nothing in it."""
    h0, h1 = held_span(trial, now)
    lo, hi = max(h0, since), min(h1, until)
    if hi <= lo:
        return None
    iv = trial.interval if trial.interval > 0 else 1.0
    where = store.hosts(trial.id)
    series = store.list_series(trial.id)
    named = {(s.metric, s.host, s.device): s for s in series}
    cpu_series = {s.host: s for s in series if s.metric == "cpu.util"}
    gpus: list[GpuUse] = []
    busy_points: list[Points | None] = []
    mem_points: list[Points | None] = []
    for (host, device), ms in attributed_gpus(series).items():
        busy_by = next((m for m in BUSY_METRICS if m in ms), None)
        busy = None if busy_by is None else read_points(store, ms[busy_by], iv)
        stretches: list[tuple[float, float]] = []
        if busy is not None:
            stretches = idle_stretches(
                busy, h0, h1, settings.idle_gpu_util_pct, settings.idle_stretch_min_s
            )
        total = series_peak(store, named.get(("gpu.mem.total", host, device)))
        mem_share = mem_peak = None
        if "gpu.mem" in ms:
            mem = read_points(store, ms["gpu.mem"], iv)
            if mem is not None:
                mem_peak = float(mem.top.max())
                if total is not None and total > 0:
                    mem_share = Points(mem.a, mem.b, mem.mean / total, mem.top / total)
        known = None if total is None else match_gpu(total, catalog)
        gpus.append(
            GpuUse(
                host=host,
                device=device,
                model=_model_of(where.get(host, {}), device)
                or (known.label if known is not None else "unknown"),
                catalog_key=None if known is None else known.key,
                busy_by=None if busy_by is None else busy_by.removeprefix("gpu."),
                stretches=tuple(stretches),
                mem_peak_bytes=mem_peak,
            )
        )
        busy_points.append(busy)
        mem_points.append(mem_share)
    cpus: list[CpuUse] = []
    util_points: list[Points] = []
    for host, s in sorted(cpu_series.items()):
        cores = series_peak(store, named.get(("cpu.capacity", host, None)))
        util = read_points(store, s, iv)
        if cores is not None and cores > 0 and util is not None:
            cpus.append(CpuUse(host, cores))
            util_points.append(util)
    days = [
        _day(gpus, busy_points, mem_points, cpus, util_points, d0, d1) for d0, d1 in _days(lo, hi)
    ]
    return usage_from_days(trial, run, tuple(gpus), tuple(cpus), days, lo, hi)


def _day(
    gpus: Sequence[GpuUse],
    busy_points: Sequence[Points | None],
    mem_points: Sequence[Points | None],
    cpus: Sequence[CpuUse],
    util_points: Sequence[Points],
    d0: float,
    d1: float,
) -> Day:
    """What the trial's GPUs and CPUs used in (d0, d1], one day's part of the window."""
    gf: list[GpuDay] = []
    for g, busy, mem in zip(gpus, busy_points, mem_points, strict=True):
        busy_s = 0.0
        if busy is not None:
            busy_s = float((np.clip(busy.mean, 0.0, 100.0) / 100.0 * busy.overlap(d0, d1)).sum())
        idle_s = sum(max(0.0, min(b, d1) - max(a, d0)) for a, b in g.stretches)
        mem_w = mem_sum = 0.0
        mem_peak = None
        if mem is not None:
            w = mem.overlap(d0, d1)
            mem_w = float(w.sum())
            mem_sum = float((mem.mean * w).sum())
            inside = w > 0
            if inside.any():
                mem_peak = float(mem.top[inside].max())
        gf.append((busy_s, idle_s, mem_w, mem_sum, mem_peak))
    cf: list[CpuDay] = []
    for c, util in zip(cpus, util_points, strict=True):
        cf.append((float((util.mean / 100.0 * c.cores * util.overlap(d0, d1)).sum()),))
    return tuple(gf), tuple(cf)


def usage_from_days(
    trial: TrialInfo,
    run: RunInfo,
    gpus: tuple[GpuUse, ...],
    cpus: tuple[CpuUse, ...],
    days: Sequence[Day],
    lo: float,
    hi: float,
) -> TrialUsage:
    """A trial's usage within [lo, hi] (inside its held span) from what its GPUs and CPUs
    used in each UTC day of it (:func:`trial_usage` measures them; kept usage stores them):
    its slices, keyed by the run, the day and the device, and its totals."""
    slices: list[Slice] = []
    first_model = gpus[0].model if gpus else None
    for (d0, d1), (gf, cf) in zip(_days(lo, hi), days, strict=True):
        day, week = _day_keys(d0)

        def keys(host: str, model: str | None, day: str = day, week: str = week) -> dict[str, Any]:
            return {
                "project": run.project,
                "user": run.os_user or None,
                "run": run.name,
                "host": host or None,
                "gpu_model": model,
                "day": day,
                "week": week,
            }

        for g, (busy_s, idle_s, mem_w, mem_sum, mem_peak) in zip(gpus, gf, strict=True):
            slices.append(
                Slice(
                    keys(g.host, g.model),
                    trial.id,
                    trial.state,
                    True,
                    busy_by=g.busy_by,
                    catalog_key=g.catalog_key,
                    held_s=d1 - d0,
                    busy_s=busy_s,
                    idle_s=idle_s,
                    mem_w=mem_w,
                    mem_sum=mem_sum,
                    mem_peak=mem_peak,
                )
            )
        for c, (core_s,) in zip(cpus, cf, strict=True):
            slices.append(
                Slice(
                    keys(c.host, first_model),
                    trial.id,
                    trial.state,
                    False,
                    cpu_core_s=core_s,
                    cpu_quota_core_s=c.cores * (d1 - d0),
                )
            )
        if not gpus and not cpus:  # counted among the trials all the same
            slices.append(Slice(keys(trial.host, None), trial.id, trial.state, False))
    held = [s for s in slices if s.gpu]
    return TrialUsage(
        trial=trial,
        run=run,
        gpus=gpus,
        cpus=cpus,
        slices=tuple(slices),
        held_s=sum(s.held_s for s in held),
        busy_s=sum(s.busy_s for s in held),
        idle_s=sum(s.idle_s for s in held),
    )
