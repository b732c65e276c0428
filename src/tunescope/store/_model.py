"""Plain immutable records the store returns. Times are UNIX epoch seconds (float);
None means missing, never zero."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TrialState = Literal["running", "completed", "failed", "lost", "pruned"]
TRIAL_STATES: tuple[str, ...] = ("running", "completed", "failed", "lost", "pruned")
EVENT_KINDS: tuple[str, ...] = (
    "optimizer_step",
    "evaluation",
    "checkpoint",
    "data_wait",
    "mark",
    "sampler_gap",
    "request",
)
"""``sampler_gap``: an interval with no hardware samples because the trial's sampler died and
was restarted, or was starved of CPU past its schedule (t = last sample before, duration =
until the first one after; name says which). ``request``: one request of a load level
(``tunescope load``): t = sent, duration = end-to-end latency, value = time to first token
(None when none came), name ``ok`` or ``error``, step = its index in the level, data = ttft,
tpot, itl, prompt_tokens, completion_tokens, t_first, error, status (see
docs/serving_analysis.md)."""


@dataclass(frozen=True)
class RunInfo:
    id: int
    name: str
    start: float
    end: float | None
    state: str
    trials: int
    project: str = "default"
    """The project the run belongs to (run names are unique within a project)."""
    os_user: str | None = None
    host: str | None = None
    """The OS user and host that made the run, when known."""


@dataclass(frozen=True)
class TrialInfo:
    id: int
    run_id: int
    name: str
    params: dict[str, Any]
    state: str
    host: str
    pids: tuple[int, ...]
    start: float
    end: float | None
    heartbeat: float | None
    error: str | None
    interval: float
    key: str = ""
    """The key the trial's writers name it by (see ``store/produce/_batch.py``)."""


@dataclass(frozen=True)
class SeriesInfo:
    id: int
    trial_id: int
    metric: str
    device: str | None
    note: str | None
    host: str
    """The host that measured the series (a node of a multi-node trial; the trial's host for
    series written before hosts were recorded)."""


@dataclass(frozen=True)
class Bucket:
    """Aggregate of the raw samples with ``t_first <= t <= t_last`` (all of them, exactly)."""

    t_first: float
    t_last: float
    n: int
    min: float
    max: float
    mean: float


@dataclass(frozen=True)
class Window:
    """A window of one series: raw samples when few enough, else buckets.

    Exactly one of ``samples`` and ``buckets`` is not None. ``corrupt_chunks`` counts the
    chunks of the window whose stored samples could not be decoded: those inside the window
    are in it as their stored summary (a coarser bucket, exact count, min, max and mean),
    those cut by its edges are missing. 0 means the window is exact as promised.

    Read it, raw or bucketed alike, as points: :attr:`t`, :attr:`mean`, :attr:`min`,
    :attr:`max` and :attr:`count` are equally long, one entry per point (a raw sample is a
    point of one sample whose min, max and mean are its value; a bucket's point is at the
    middle of ``t_first`` and ``t_last``). :attr:`raw` says which the window holds.
    """

    series: SeriesInfo
    start: float
    end: float
    samples: list[tuple[float, float]] | None = None
    buckets: list[Bucket] | None = None
    corrupt_chunks: int = 0

    @property
    def raw(self) -> bool:
        """Whether the window holds the raw samples (else buckets)."""
        return self.samples is not None

    @property
    def t(self) -> list[float]:
        """Each point's time: a sample's, or the middle of a bucket."""
        if self.samples is not None:
            return [s[0] for s in self.samples]
        return [(b.t_first + b.t_last) / 2.0 for b in self.buckets or ()]

    @property
    def mean(self) -> list[float]:
        """Each point's mean (a sample's value)."""
        if self.samples is not None:
            return [s[1] for s in self.samples]
        return [b.mean for b in self.buckets or ()]

    @property
    def min(self) -> list[float]:
        """Each point's lowest sample (a sample's value)."""
        if self.samples is not None:
            return [s[1] for s in self.samples]
        return [b.min for b in self.buckets or ()]

    @property
    def max(self) -> list[float]:
        """Each point's highest sample (a sample's value)."""
        if self.samples is not None:
            return [s[1] for s in self.samples]
        return [b.max for b in self.buckets or ()]

    @property
    def count(self) -> list[int]:
        """How many samples each point stands for (1 for a raw sample)."""
        if self.samples is not None:
            return [1] * len(self.samples)
        return [b.n for b in self.buckets or ()]

    @property
    def peak(self) -> float | None:
        """The highest sample in the window; None when it holds none."""
        return max(self.max, default=None)


@dataclass(frozen=True)
class Event:
    trial_id: int
    kind: str
    t: float
    name: str | None = None
    step: int | None = None
    duration: float | None = None
    value: float | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class EventBin:
    kind: str
    t0: float
    t1: float
    count: int


@dataclass(frozen=True)
class EventsWindow:
    """Events in a window: the events themselves, or counts per bin and kind when too many."""

    start: float
    end: float
    total: int
    events: list[Event] | None = None
    bins: list[EventBin] | None = field(default=None)


@dataclass(frozen=True)
class Scalar:
    trial_id: int
    name: str
    step: int | None
    t: float
    value: float
