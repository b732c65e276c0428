"""The store contract: what every backend (SQLite, PostgreSQL, HTTP client) promises.

Promises common to every method:

* **Thread safety.** A store may be shared by threads; calls are serialised inside it. Several
  processes may use one database at once (the sampler process and the training process do):
  each process opens its own store.
* **Immutability.** Returned records are frozen dataclasses; changing the database later never
  changes a record already returned.
* **Units.** Times are UNIX epoch seconds (float). Sample values are in the catalog's base unit
  (bytes, percent, watts…), stored as float32 with millisecond timestamps: a value read back
  equals ``float(numpy.float32(v))`` of the value written.
* **None means missing.** A metric that could not be read is not written; NULL is never zero.
* **Errors.** Methods raise only :class:`~tunescope.errors.StoreError` subclasses:
  ``NotFound`` for an unknown id or name, ``Conflict`` for a duplicate unique name,
  ``SchemaError`` when the database is not usable, ``StoreError`` for everything else.
  Driver exceptions never escape.
* **Atomicity.** Each write method is one transaction: on error nothing of it is kept.

Derived queries (windows, event binning, the ``lost`` state) are written once here, on top of
the few primitives each backend implements.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tunescope.store._codec import F64, decode
from tunescope.store._model import (
    Bucket,
    Event,
    EventBin,
    EventsWindow,
    RunInfo,
    Scalar,
    SeriesInfo,
    TrialInfo,
    Window,
)

__all__ = ["CHUNK_SAMPLES", "LOST_AFTER_S", "Store"]

CHUNK_SAMPLES = 256
"""Samples per compressed chunk. Small enough that decoding the chunks a window's bucket
edges cut through stays cheap; large enough that per-chunk overhead is a fraction of a byte
per sample."""

LOST_AFTER_S = 30.0
"""A running trial whose heartbeat is older than max(this, 10 sampling intervals) reads as
``lost``."""


class Store(abc.ABC):
    """Abstract store. Backends implement the primitives marked abstract."""

    url: str

    # ------------------------------------------------------------------ lifecycle
    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release the connection. Safe to call twice."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ runs and trials
    @abc.abstractmethod
    def ensure_run(self, name: str, start: float | None = None) -> RunInfo:
        """The run called ``name``, created (starting at ``start`` or now) if it is new."""

    @abc.abstractmethod
    def get_run(self, run: int | str) -> RunInfo:
        """A run by id or name; NotFound otherwise."""

    @abc.abstractmethod
    def list_runs(self) -> list[RunInfo]:
        """Every run, newest first."""

    @abc.abstractmethod
    def create_trial(
        self,
        run_id: int,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        *,
        host: str = "",
        pids: Sequence[int] = (),
        start: float | None = None,
        interval: float = 1.0,
    ) -> TrialInfo:
        """A new ``running`` trial. ``name`` defaults to ``trial-<k>`` (k counts from 0 within
        the run); a name the run already has raises Conflict. Params must be JSON values."""

    @abc.abstractmethod
    def get_trial(self, trial_id: int) -> TrialInfo:
        """A trial by id, its state derived as described in :meth:`derive_state`."""

    @abc.abstractmethod
    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        """A trial of a run by name; NotFound otherwise."""

    @abc.abstractmethod
    def list_trials(self, run_id: int) -> list[TrialInfo]:
        """The run's trials in creation order."""

    @abc.abstractmethod
    def update_trial(
        self,
        trial_id: int,
        *,
        state: str | None = None,
        end: float | None = None,
        error: str | None = None,
        pids: Sequence[int] | None = None,
        heartbeat: float | None = None,
        only_if_running: bool = False,
        exit_code: int | None = None,
    ) -> bool:
        """Change the given fields (None leaves a field as it is). With ``only_if_running``
        nothing changes unless the stored state is still ``running``. True if a row changed;
        NotFound for an unknown trial (unless ``only_if_running``)."""

    @abc.abstractmethod
    def exit_code(self, trial_id: int) -> int | None:
        """The exit code of the command a trial ran (``tunescope run``), None if not known."""

    # ------------------------------------------------------------------ series and samples
    @abc.abstractmethod
    def series(self, trial_id: int, metric: str, device: str | None = None,
               note: str | None = None) -> SeriesInfo:
        """The series of (trial, metric, device), created if new (``note`` is kept from the
        first call that gives one)."""

    @abc.abstractmethod
    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        """The trial's series, optionally of one metric, ordered by metric then device."""

    @abc.abstractmethod
    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        """Write (series_id, t, value) samples. Within a series, times must not go back
        before what is already stored (older samples raise StoreError). Returns the count."""

    @abc.abstractmethod
    def compact(self, series_id: int | None = None) -> None:
        """Pack every pending sample (of one series or all) into chunks. Writers call it when
        they finish; queries see pending samples either way."""

    @abc.abstractmethod
    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        """(chunk_id, t_first, t_last, n, min, max, sum) of chunks overlapping [start, end],
        ordered by time."""

    @abc.abstractmethod
    def _chunk_blobs(self, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        """The encoded blobs of the given chunks."""

    @abc.abstractmethod
    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        """Samples not yet packed into chunks, with start <= t <= end, sorted."""

    @abc.abstractmethod
    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        """(first t, last t, sample count) of a series, None when it has no sample."""

    # ------------------------------------------------------------------ events and scalars
    @abc.abstractmethod
    def add_events(self, events: Iterable[Event]) -> int:
        """Write events; returns the count."""

    @abc.abstractmethod
    def _count_events(self, trial_id: int, start: float, end: float,
                      kinds: Sequence[str] | None) -> int: ...

    @abc.abstractmethod
    def _fetch_events(self, trial_id: int, start: float, end: float,
                      kinds: Sequence[str] | None) -> list[Event]: ...

    @abc.abstractmethod
    def _bin_events(self, trial_id: int, start: float, end: float,
                    kinds: Sequence[str] | None, bins: int) -> list[tuple[str, int, int]]:
        """(kind, bin index, count) for events whose interval overlaps each bin."""

    @abc.abstractmethod
    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        """Write scalars; returns the count."""

    @abc.abstractmethod
    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        """The trial's scalars (of one name or all) ordered by name, step, time."""

    @abc.abstractmethod
    def scalar_names(self, trial_id: int) -> list[str]:
        """Names of the trial's scalars, sorted."""

    # ------------------------------------------------------------------ derived, written once
    @staticmethod
    def derive_state(state: str, heartbeat: float | None, start: float, interval: float,
                     now: float | None = None) -> str:
        """``running`` becomes ``lost`` when the last heartbeat (or the start, before any) is
        older than max(LOST_AFTER_S, 10 x interval)."""
        if state != "running":
            return state
        last = heartbeat if heartbeat is not None else start
        now = time.time() if now is None else now
        return "lost" if now - last > max(LOST_AFTER_S, 10.0 * interval) else "running"

    def read_samples(self, series_id: int, start: float = -np.inf,
                     end: float = np.inf) -> tuple[F64, F64]:
        """Every raw sample with start <= t <= end, sorted by time."""
        summaries = self._chunk_summaries(series_id, start, end)
        blobs = self._chunk_blobs([c[0] for c in summaries])
        ts: list[F64] = []
        vs: list[F64] = []
        for cid, *_ in summaries:
            t, v = decode(blobs[cid])
            keep = (t >= start) & (t <= end)
            ts.append(t[keep])
            vs.append(v[keep])
        pt, pv = self._pending(series_id, start, end)
        ts.append(pt)
        vs.append(pv)
        return np.concatenate(ts), np.concatenate(vs)

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        """A window [start, end] of a series as at most ``points`` buckets.

        The window is cut into ``points`` equal spans; each non-empty span becomes a Bucket
        holding the exact count, min, max and mean of the raw samples inside it, so a spike
        is never averaged away. When the window holds no more than ``points`` samples, the raw
        samples are returned instead. Cost is bounded whatever the window's length: chunks
        that lie inside one span contribute their stored summary; only chunks cut by a span
        edge are decoded (at most points + 1 of them).
        """
        if points < 1:
            raise ValueError("points must be at least 1")
        if not end > start:
            raise ValueError("a window needs end > start")
        info = self._series_info(series_id)
        summaries = self._chunk_summaries(series_id, start, end)
        pt, pv = self._pending(series_id, start, end)
        inside = [c for c in summaries if c[1] >= start and c[2] <= end]
        approx = sum(c[3] for c in inside) + (len(summaries) - len(inside)) * 1 + len(pt)
        width = (end - start) / points

        def span(t: float) -> int:
            return min(points - 1, int((t - start) / width))

        whole: list[tuple[int, float, float, int, float, float, float]] = []
        cut: list[int] = []
        if approx <= points * 2:
            cut = [c[0] for c in summaries]
        else:
            for c in summaries:
                if c[1] >= start and c[2] <= end and span(c[1]) == span(c[2]):
                    whole.append(c)
                else:
                    cut.append(c[0])
        blobs = self._chunk_blobs(cut)
        ts_parts: list[F64] = [pt]
        vs_parts: list[F64] = [pv]
        for cid in cut:
            t, v = decode(blobs[cid])
            keep = (t >= start) & (t <= end)
            ts_parts.append(t[keep])
            vs_parts.append(v[keep])
        ts = np.concatenate(ts_parts)
        vs = np.concatenate(vs_parts)
        total = len(ts) + sum(c[3] for c in whole)
        if total <= points and not whole:
            order = np.argsort(ts, kind="stable")
            return Window(info, start, end,
                          samples=list(zip(ts[order].tolist(), vs[order].tolist(), strict=True)))
        return Window(info, start, end, buckets=_bucketize(ts, vs, whole, start, width, points))

    def events(self, trial_id: int, start: float, end: float,
               kinds: Sequence[str] | None = None, limit: int = 2000) -> EventsWindow:
        """Events whose interval [t, t + duration] overlaps [start, end]. When more than
        ``limit`` match, counts per kind in ``limit`` equal bins instead (an interval counts in
        every bin it overlaps), so dense optimizer steps show as density, never dropped."""
        total = self._count_events(trial_id, start, end, kinds)
        if total <= limit:
            return EventsWindow(start, end, total,
                                events=self._fetch_events(trial_id, start, end, kinds))
        width = (end - start) / limit
        bins = [EventBin(kind, start + i * width, start + (i + 1) * width, n)
                for kind, i, n in self._bin_events(trial_id, start, end, kinds, limit)]
        return EventsWindow(start, end, total, bins=bins)

    @abc.abstractmethod
    def _series_info(self, series_id: int) -> SeriesInfo: ...


def _bucketize(ts: F64, vs: F64, whole: list[tuple[int, float, float, int, float, float, float]],
               start: float, width: float, points: int) -> list[Bucket]:
    """Merge decoded samples and whole-chunk summaries into per-span buckets."""
    n = len(ts) + len(whole)
    idx = np.empty(n, dtype=np.int64)
    t_lo = np.empty(n)
    t_hi = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    vmin = np.empty(n)
    vmax = np.empty(n)
    vsum = np.empty(n)
    k = len(ts)
    idx[:k] = np.minimum(points - 1, ((ts - start) / width).astype(np.int64))
    t_lo[:k] = ts
    t_hi[:k] = ts
    cnt[:k] = 1
    vmin[:k] = vs
    vmax[:k] = vs
    vsum[:k] = vs
    if whole:
        w = np.array([c[1:] for c in whole], dtype=np.float64)
        idx[k:] = np.minimum(points - 1, ((w[:, 0] - start) / width).astype(np.int64))
        t_lo[k:] = w[:, 0]
        t_hi[k:] = w[:, 1]
        cnt[k:] = w[:, 2].astype(np.int64)
        vmin[k:] = w[:, 3]
        vmax[k:] = w[:, 4]
        vsum[k:] = w[:, 5]
    order = np.argsort(idx, kind="stable")
    idx = idx[order]
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    counts = np.add.reduceat(cnt[order], starts)
    sums = np.add.reduceat(vsum[order], starts)
    mins = np.minimum.reduceat(vmin[order], starts)
    maxs = np.maximum.reduceat(vmax[order], starts)
    firsts = np.minimum.reduceat(t_lo[order], starts)
    lasts = np.maximum.reduceat(t_hi[order], starts)
    return [
        Bucket(float(a), float(b), int(c), float(lo), float(hi), float(s / c))
        for a, b, c, lo, hi, s in zip(firsts, lasts, counts, mins, maxs, sums, strict=True)
    ]
