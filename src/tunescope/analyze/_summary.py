"""Per-trial summaries: peak and mean of each metric, how many training events ran, and the
one rule for a trial's end and duration."""

from __future__ import annotations

from dataclasses import dataclass

from tunescope.metrics import headline, metric
from tunescope.store import Store, TrialInfo

__all__ = [
    "MetricSummary",
    "TrialSummary",
    "sampler_gaps",
    "summarize_trial",
    "trial_duration",
    "trial_end",
]


def trial_end(trial: TrialInfo) -> float | None:
    """When the trial ended; while it runs (or once its sampler is gone without ending it) its
    latest heartbeat; None before either."""
    return trial.end if trial.end is not None else trial.heartbeat


def trial_duration(trial: TrialInfo) -> float | None:
    """The trial's duration: :func:`trial_end` - start (None without an end or heartbeat).
    Reports, ``tunescope trials``, trackers and right-sizing all use this one."""
    end = trial_end(trial)
    return None if end is None else end - trial.start


def sampler_gaps(store: Store, trial: TrialInfo) -> list[tuple[float, float]]:
    """(t, duration) of each span with no hardware samples: the sampler died and was
    restarted (``sampler_gap`` events)."""
    return [(e.t, e.duration or 0.0) for e in store.all_events(trial.id, kinds=["sampler_gap"])]


@dataclass(frozen=True)
class MetricSummary:
    """Peak and time-weighted mean of one metric over a trial, in base units.

    For per-GPU metrics, ``peak`` is the highest of any device and ``mean`` the mean over
    every sample of every device; ``devices`` says how many there were."""

    metric: str
    peak: float
    mean: float
    samples: int
    devices: int


@dataclass(frozen=True)
class TrialSummary:
    trial: TrialInfo
    metrics: dict[str, MetricSummary]
    optimizer_steps: int
    evaluations: int
    checkpoints: int

    @property
    def duration(self) -> float | None:
        """See :func:`trial_duration`."""
        return trial_duration(self.trial)


def summarize_metric(store: Store, trial_id: int, key: str) -> MetricSummary | None:
    """Peak and mean of one metric over the whole trial; None when it was never recorded.

    Reads one bucket per series, which the store answers from chunk summaries."""
    metric(key)  # unknown keys fail loudly
    peak = float("-inf")
    total = 0.0
    n = 0
    series = store.list_series(trial_id, key)
    for s in series:
        extent = store.series_extent(s.id)
        if extent is None:
            continue
        first, last, _ = extent
        w = store.window(s.id, first, last + 1e-3, 1)
        if w.count:
            peak = max(peak, *w.max)
            total += sum(m * c for m, c in zip(w.mean, w.count, strict=True))
            n += sum(w.count)
    if n == 0:
        return None
    return MetricSummary(key, peak, total / n, n, len(series))


def summarize_trial(
    store: Store, trial: TrialInfo, keys: tuple[str, ...] | None = None
) -> TrialSummary:
    """The headline metrics (or ``keys``) and event counts of one trial."""
    keys = keys if keys is not None else tuple(m.key for m in headline())
    metrics = {}
    for k in keys:
        s = summarize_metric(store, trial.id, k)
        if s is not None:
            metrics[k] = s
    return TrialSummary(
        trial,
        metrics,
        optimizer_steps=store.count_events(trial.id, kinds=["optimizer_step"]),
        evaluations=store.count_events(trial.id, kinds=["evaluation"]),
        checkpoints=store.count_events(trial.id, kinds=["checkpoint"]),
    )
