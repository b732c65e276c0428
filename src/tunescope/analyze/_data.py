"""What the rules read of one trial: its series as arrays, its evaluation intervals and the
span in which it trained. Costs are bounded whatever the trial's length: a series with more
than ``max_points`` samples is read as that many buckets (mean, min and max of each), which
the store answers from its chunk summaries."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tunescope.analyze._summary import trial_end
from tunescope.store import SeriesInfo, Store, TrialInfo

__all__ = ["MAX_POINTS", "Trace", "TrialData"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

MAX_POINTS = 4000
"""Buckets a long series is read as."""


@dataclass(frozen=True)
class Trace:
    """One series as arrays: ``t`` sample times (bucket midpoints when bucketed), ``v`` values
    (bucket means), ``lo``/``hi`` bucket minima/maxima (the values when raw), ``n`` samples per
    point (1 when raw)."""

    series: SeriesInfo
    t: F64
    v: F64
    lo: F64
    hi: F64
    n: F64

    def __len__(self) -> int:
        return len(self.t)

    @property
    def samples(self) -> int:
        return int(self.n.sum())

    def mean(self, mask: B | None = None) -> float:
        """Sample-weighted mean (of the points where ``mask``), NaN when none."""
        w = self.n if mask is None else self.n[mask]
        v = self.v if mask is None else self.v[mask]
        total = float(w.sum())
        return float((v * w).sum() / total) if total > 0 else math.nan

    def peak(self, mask: B | None = None) -> float:
        hi = self.hi if mask is None else self.hi[mask]
        return float(hi.max()) if len(hi) else math.nan

    def at(self, times: F64, tolerance: float) -> F64:
        """The value of the point nearest each of ``times``; NaN where none is within
        ``tolerance`` seconds."""
        if not len(self.t):
            return np.full(len(times), np.nan)
        idx = np.clip(np.searchsorted(self.t, times), 1, max(1, len(self.t) - 1))
        left = np.clip(idx - 1, 0, len(self.t) - 1)
        right = np.clip(idx, 0, len(self.t) - 1)
        pick = np.where(np.abs(self.t[left] - times) <= np.abs(self.t[right] - times), left, right)
        out = self.v[pick].copy()
        out[np.abs(self.t[pick] - times) > tolerance] = np.nan
        return out

    def rolling(self, window: float) -> F64:
        """Sample-weighted mean of the points in the trailing ``window`` seconds of each
        point (the point itself included)."""
        if window <= 0 or not len(self.t):
            return self.v.copy()
        cs = np.concatenate([[0.0], np.cumsum(self.v * self.n)])
        cn = np.concatenate([[0.0], np.cumsum(self.n)])
        lo = np.searchsorted(self.t, self.t - window, side="right")
        hi = np.arange(1, len(self.t) + 1)
        return np.asarray((cs[hi] - cs[lo]) / (cn[hi] - cn[lo]), dtype=np.float64)

    def after(self, times: F64, within: float) -> F64:
        """The value of the first point at or after each of ``times`` (the period that
        covers it, for series whose sample at ``t`` sums up the period ending at ``t``); NaN
        where there is none within ``within`` seconds."""
        if not len(self.t):
            return np.full(len(times), np.nan)
        idx = np.searchsorted(self.t, times, side="left")
        ok = idx < len(self.t)
        pick = np.clip(idx, 0, len(self.t) - 1)
        out = self.v[pick].copy()
        out[~ok | (self.t[pick] - times > within)] = np.nan
        return out


class TrialData:
    """Lazily loaded series and events of one trial (see the module doc)."""

    def __init__(
        self,
        store: Store,
        trial: TrialInfo,
        *,
        max_points: int = MAX_POINTS,
        now: float | None = None,
    ) -> None:
        self.store = store
        self.trial = trial
        self.max_points = max_points
        self._series: dict[str, list[SeriesInfo]] | None = None
        self._traces: dict[tuple[str, str | None, str | None], Trace | None] = {}
        self._evals: list[tuple[float, float]] | None = None
        self._steps: tuple[int, float | None, float | None] | None = None
        self._bounds: tuple[float, float] | None = None
        self._now = now

    # ------------------------------------------------------------------ series
    def _all_series(self) -> dict[str, list[SeriesInfo]]:
        if self._series is None:
            grouped: dict[str, list[SeriesInfo]] = {}
            for s in self.store.list_series(self.trial.id):
                grouped.setdefault(s.metric, []).append(s)
            self._series = grouped
        return self._series

    def hosts(self) -> list[str]:
        """The hosts the trial has series on, sorted (several for a multi-node trial)."""
        return sorted({s.host for infos in self._all_series().values() for s in infos})

    def devices(self, metric: str, host: str | None = None) -> list[str | None]:
        """Devices that have a series of ``metric`` on ``host`` (None: on any host), each
        once, in the store's order."""
        infos = self._all_series().get(metric, [])
        return list(dict.fromkeys(s.device for s in infos if host is None or s.host == host))

    def has(self, metric: str) -> bool:
        return metric in self._all_series()

    def trace(
        self, metric: str, device: str | None = None, host: str | None = None
    ) -> Trace | None:
        """The series of ``metric`` on ``device`` of ``host``; None when there is none or it
        is empty. ``host`` None: the trial's own host's series when it has one, else the
        first host's by name (a multi-node trial's other nodes are read by naming them)."""
        key = (metric, device, host)
        if key not in self._traces:
            mine = [s for s in self._all_series().get(metric, []) if s.device == device]
            if host is not None:
                mine = [s for s in mine if s.host == host]
            own = [s for s in mine if s.host == self.trial.host]
            pick = own or mine
            self._traces[key] = self._load(pick[0]) if pick else None
        return self._traces[key]

    def _load(self, info: SeriesInfo) -> Trace | None:
        extent = self.store.series_extent(info.id)
        if extent is None:
            return None
        first, last, count = extent
        if count <= self.max_points:
            t, v = self.store.read_samples(info.id)
            if not len(t):
                return None
            return Trace(info, t, v, v, v, np.ones(len(t)))
        w = self.store.window(info.id, first, last + 1e-3, self.max_points)
        if not w.raw and not w.buckets:
            return None
        return Trace(
            info,
            np.asarray(w.t, dtype=np.float64),
            np.asarray(w.mean, dtype=np.float64),
            np.asarray(w.min, dtype=np.float64),
            np.asarray(w.max, dtype=np.float64),
            np.asarray(w.count, dtype=np.float64),
        )

    # ------------------------------------------------------------------ time
    def bounds(self) -> tuple[float, float]:
        """A finite span holding everything of the trial: its start to its end (or last
        heartbeat, or now), widened to every series' extent, plus a minute each side."""
        if self._bounds is None:
            tr = self.trial
            lo = tr.start
            hi = trial_end(tr)
            if hi is None:
                hi = self._now if self._now is not None else time.time()
            for infos in self._all_series().values():
                for s in infos:
                    ext = self.store.series_extent(s.id)
                    if ext is not None:
                        lo, hi = min(lo, ext[0]), max(hi, ext[1])
            self._bounds = (lo - 60.0, max(hi, lo) + 60.0)
        return self._bounds

    def evaluations(self) -> list[tuple[float, float]]:
        """(start, end) of every evaluation, sorted."""
        if self._evals is None:
            lo, hi = self.bounds()
            every = self.store.all_events(self.trial.id, lo, hi, kinds=["evaluation"])
            self._evals = sorted((e.t, e.t + (e.duration or 0.0)) for e in every)
        return self._evals

    def steps(self) -> tuple[int, float | None, float | None]:
        """(count, time of the first, time of the last) optimizer step; times to within one
        bin of a 2000-bin window when there are more than 2000 steps."""
        if self._steps is None:
            n = self.store.count_events(self.trial.id, kinds=["optimizer_step"])
            if n == 0:
                self._steps = (0, None, None)
            else:
                lo, hi = self.bounds()
                w = self.store.events(self.trial.id, lo, hi, kinds=["optimizer_step"], limit=2000)
                if w.events:
                    ts = [e.t for e in w.events]
                    self._steps = (n, min(ts), max(ts))
                else:
                    bins = [b for b in (w.bins or []) if b.count > 0]
                    self._steps = (n, bins[0].t0 if bins else None, bins[-1].t1 if bins else None)
        return self._steps

    def train_span(self) -> tuple[float, float] | None:
        """From the first to the last optimizer step, None without steps."""
        n, first, last = self.steps()
        if n < 2 or first is None or last is None or not last > first:
            return None
        return first, last

    def in_eval(self, t: F64, pad: float = 0.0) -> B:
        """Which of ``t`` fall inside an evaluation interval (extended by ``pad`` seconds
        after its end)."""
        out = np.zeros(len(t), dtype=bool)
        for a, b in self.evaluations():
            out |= (t >= a) & (t <= b + pad)
        return out

    def training(self, trace: Trace) -> B:
        """Points of ``trace`` taken while training: inside the training span (the whole
        trace without optimizer steps) and outside evaluations. A sample covers the interval
        before it, so the one just after an evaluation is left out too."""
        span = self.train_span()
        mask = np.ones(len(trace.t), dtype=bool)
        if span is not None:
            mask &= (trace.t >= span[0]) & (trace.t <= span[1] + self.interval())
        return mask & ~self.in_eval(trace.t, pad=self.interval())

    def interval(self) -> float:
        """The trial's sampling interval in seconds."""
        return self.trial.interval if self.trial.interval > 0 else 1.0
