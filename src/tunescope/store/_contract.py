"""The store contract: what every backend (SQLite, PostgreSQL, HTTP client) promises.

Promises common to every method:

* **Thread safety.** A store may be shared by threads; each call is serialised inside it,
  from its first statement to its commit (an append reads the series' newest time and writes
  under the same lock). Several processes may use one database at once (the sampler and the
  training process do): each process opens its own store.
* **Ownership.** A series has one writer: the process that measures it (the sampler for
  hardware series, the SDK's flusher for ``train.*`` and ``torch.*`` ones). The store keeps a
  series right with more than one writer too, as happens when a restarted sampler takes over
  or the spool replays what a dead one left: appends to one series are serialised across
  connections, and samples older than the newest stored are merged in time order (slower, as
  the chunks they fall into are rewritten). Runs and trials are shared by every writer.
* **Immutability.** Returned records are frozen dataclasses; changing the database later never
  changes a record already returned.
* **Units.** Times are UNIX epoch seconds (float). Sample values are in the catalog's base unit
  (bytes, percent, watts…), stored as float32 with millisecond timestamps: a value read back
  equals ``float(numpy.float32(v))`` of the value written.
* **None means missing.** A metric that could not be read is not written; NULL is never zero.
* **Errors.** Methods raise only :class:`~tunescope.errors.StoreError` subclasses:
  ``NotFound`` for an unknown id or name, ``Conflict`` for a duplicate unique name,
  ``SchemaError`` when the database is not usable, ``StoreUnavailable`` when it cannot be
  reached now (a lost connection that one new attempt did not cure, a lock held elsewhere past
  the busy timeout), ``StoreError`` for everything else. Driver exceptions never escape.
* **Atomicity.** Each write method is one transaction: on error nothing of it is kept. A
  connection lost while committing leaves unknown whether the commit happened: the call raises
  StoreUnavailable, and :meth:`Store.write` is the way to write what must land exactly once.
* **Damage stays local.** A chunk whose stored bytes cannot be decoded (or disagree with its
  summary row) is skipped by reads, never raised: :meth:`read_samples` leaves its samples out,
  :meth:`window` uses its stored count, min, max and sum where the chunk lies inside the
  window and says how many chunks it could not decode (``Window.corrupt_chunks``), and
  :meth:`corrupt_series` lists every series a store had to skip chunks of.

Derived queries (windows, event binning, the ``lost`` state) are written once here, on top of
the few primitives each backend implements.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from tunescope.errors import CorruptData
from tunescope.store._codec import F64, check_chunks, decode, decode_blocks_many, decode_many
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
from tunescope.store._rollup import LEVELS, plan
from tunescope.store.produce._batch import Batch

__all__ = ["CHUNK_SAMPLES", "LOST_AFTER_S", "Store"]

_S = TypeVar("_S", bound="Store")

_Summary = tuple[int, float, float, int, float, float, float]
"""A chunk's summary row: (chunk_id, t_first, t_last, n, min, max, sum)."""

CHUNK_SAMPLES = 512
"""Samples per compressed chunk. Small enough that decoding the chunks a window's bucket
edges cut through stays cheap; large enough that per-chunk overhead is a fraction of a byte
per sample."""

LOST_AFTER_S = 30.0
"""A running trial whose last heartbeat landed longer ago than max(this, 10 sampling
intervals), on the store's clock, reads as ``lost``."""


class Store(abc.ABC):
    """Abstract store. Backends implement the primitives marked abstract."""

    url: str

    # ------------------------------------------------------------------ lifecycle
    @abc.abstractmethod
    def close(self) -> None:
        """Pack the samples this store wrote that are still pending, and release the
        connection. A store that only read writes nothing. Safe to call twice."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ runs and trials
    project: str = "default"
    """The project that run names, run lists and new runs refer to unless a call names
    another (``open_store(url, project=…)``; for an HTTP store, the project of its URL)."""

    @abc.abstractmethod
    def ensure_run(
        self,
        name: str,
        start: float | None = None,
        *,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> RunInfo:
        """The run called ``name`` in ``project`` (the store's by default), created if new:
        starting at ``start`` or now, made by ``os_user`` on ``host`` (the project too)."""

    @abc.abstractmethod
    def get_run(self, run: int | str, *, project: str | None = None) -> RunInfo:
        """A run by id (of any project) or by name (in ``project``, the store's by default);
        NotFound otherwise."""

    @abc.abstractmethod
    def list_runs(self, *, project: str | None = None) -> list[RunInfo]:
        """Every run of ``project`` (the store's by default), newest first."""

    @abc.abstractmethod
    def list_projects(self) -> list[str]:
        """The names of every project, sorted."""

    @abc.abstractmethod
    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        """The project of a trial or a series (one of the two); NotFound for an unknown id."""

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
    def write(self, batch: Batch) -> int:
        """Write a :class:`~tunescope.store.Batch` in one transaction, exactly once, and
        return its trial's id. A batch whose id was written before in the trial's project,
        with the same content (its spec aside), is skipped (and its trial's id returned), so
        a writer may send a batch again whenever it cannot tell whether it landed; the same id
        with other content raises Conflict (nothing of it is written). Two projects may use
        the same batch id. The trial is found by ``batch.trial`` (its key); when the store has
        none it is created from ``batch.spec`` (its run too, if new; a taken name gets a
        ``-2``… suffix), and NotFound is raised when there is no spec. Samples older than a series'
        newest are merged in; ``heartbeat`` never moves back; ``pids`` add to the trial's;
        ``heartbeat``, ``pids`` and an ``end`` with ``only_if_running`` change a running trial
        only. A batch with a ``heartbeat`` (and one that creates its trial) notes the
        store's own time, by which :meth:`derive_state` judges ``lost``: the writer's clock
        is never compared with a reader's."""

    @abc.abstractmethod
    def trial_by_key(self, key: str) -> TrialInfo:
        """A trial by the key its writers name it by; NotFound otherwise."""

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
        params: dict[str, Any] | None = None,
    ) -> bool:
        """Change the given fields (None leaves a field as it is; ``params`` replaces the
        trial's params, JSON values only). With ``only_if_running`` nothing changes unless the
        stored state is still ``running``. True if a row changed; NotFound for an unknown
        trial (unless ``only_if_running``). A ``heartbeat`` given here is a time the caller
        names: ``lost`` is judged by it until a batch's heartbeat lands."""

    @abc.abstractmethod
    def exit_code(self, trial_id: int) -> int | None:
        """The exit code of the command a trial ran (``tunescope run``), None if not known."""

    # ------------------------------------------------------------------ series and samples
    @abc.abstractmethod
    def series(
        self,
        trial_id: int,
        metric: str,
        device: str | None = None,
        note: str | None = None,
        host: str | None = None,
    ) -> SeriesInfo:
        """The series of (trial, metric, host, device), created if new (``note`` is kept from
        the first call that gives one). ``host`` None: the trial's host."""

    @abc.abstractmethod
    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        """The trial's series, optionally of one metric, ordered by metric, host, device."""

    @abc.abstractmethod
    def hosts(self, trial_id: int) -> dict[str, dict[str, Any]]:
        """Where the trial ran: every host it has series on (its own host too, when it has
        one), each with what its writers there said in ``Batch.where`` merged (``{}`` when
        none did), sorted by host. NotFound for an unknown trial."""

    @abc.abstractmethod
    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        """Write (series_id, t, value) samples; returns the count. Samples older than the
        series' newest stored one are merged in time order (see Ownership above)."""

    @abc.abstractmethod
    def compact(self, series_id: int | None = None) -> None:
        """Pack every pending sample (of one series or all) into chunks, and add them to the
        series' minute and hour rollups where the store keeps them (SQL stores). Writers call
        it when they finish; queries see pending samples either way."""

    @abc.abstractmethod
    def _chunk_summaries(self, series_id: int, start: float, end: float) -> list[_Summary]:
        """(chunk_id, t_first, t_last, n, min, max, sum) of chunks overlapping [start, end],
        ordered by time."""

    @abc.abstractmethod
    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        """The encoded samples (``data``) or block summaries (``blocks``) of the given
        chunks."""

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
    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int: ...

    @abc.abstractmethod
    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]: ...

    @abc.abstractmethod
    def _bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int]]:
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
    def derive_state(
        state: str, heartbeat: float | None, start: float, interval: float, now: float | None = None
    ) -> str:
        """``running`` becomes ``lost`` when the last heartbeat (or the start, before any) is
        older than max(LOST_AFTER_S, 10 x interval) at ``now``. Stores call it with the time
        their clock noted the last heartbeat landing and their clock's ``now`` (see
        :meth:`write`), so a writer's clock skew never makes a live trial read ``lost``;
        ``now`` None is this process's clock."""
        if state != "running":
            return state
        last = heartbeat if heartbeat is not None else start
        now = time.time() if now is None else now
        return "lost" if now - last > max(LOST_AFTER_S, 10.0 * interval) else "running"

    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        """Every raw sample with start <= t <= end, sorted by time. The samples of a chunk that
        cannot be decoded are left out, and the series is listed by :meth:`corrupt_series`."""
        summaries = self._chunk_summaries(series_id, start, end)
        t, v, bad = self._decode_chunks(summaries)
        self._note_corrupt(series_id, bad)
        keep = (t >= start) & (t <= end)
        pt, pv = self._pending(series_id, start, end)
        return np.concatenate([t[keep], pt]), np.concatenate([v[keep], pv])

    def latest(self, trial_id: int) -> list[tuple[SeriesInfo, float, float]]:
        """The newest sample ``(series, t, value)`` of every series of a trial that has one,
        ordered as :meth:`list_series`: what a trial uses now, for a live view (a Prometheus
        scrape). Its cost does not grow with a series' length: at most one chunk is decoded
        per series. A newest chunk that cannot be decoded is skipped as :meth:`read_samples`
        skips it (the series' pending samples, if any, still answer)."""
        out = []
        for s in self.list_series(trial_id):
            extent = self.series_extent(s.id)
            if extent is None:
                continue
            t, v = self.read_samples(s.id, extent[1], extent[1])
            if len(t):
                out.append((s, float(t[-1]), float(v[-1])))
        return out

    def corrupt_series(self) -> list[tuple[SeriesInfo, int]]:
        """Series whose reads through this store skipped chunks that could not be decoded
        (or that disagree with their summary row), with how many distinct chunks each, by
        series id. For a command that reads through many layers (a report, an export) to say
        once what it had to leave out."""
        seen = dict(self._corrupt_seen())
        return [(self._series_info(sid), len(seen[sid])) for sid in sorted(seen)]

    def _corrupt_seen(self) -> dict[int, set[int]]:
        # created on first use, so backends need not call a base initialiser
        seen: dict[int, set[int]] = vars(self).setdefault("_corrupt_chunks_seen", {})
        return seen

    def _note_corrupt(self, series_id: int, bad: Sequence[_Summary]) -> None:
        if bad:
            self._corrupt_seen().setdefault(series_id, set()).update(r[0] for r in bad)

    def _decode_chunks(
        self, rows: Sequence[_Summary], blobs: dict[int, bytes] | None = None
    ) -> tuple[F64, F64, list[_Summary]]:
        """The samples of the given chunks, concatenated in their order, and the rows of those
        that could not be decoded or whose samples disagree with their summary row (see
        :func:`check_chunks`); those are left out. ``blobs``: their bytes by chunk id, read
        by the caller (default: read here)."""
        if not rows:
            return np.empty(0), np.empty(0), []
        if blobs is None:
            blobs = self._chunk_blobs([r[0] for r in rows])
        summ = np.asarray(rows, dtype=np.float64)[:, 1:]
        try:  # every chunk at once, the common case
            t, v, counts = decode_many([blobs[r[0]] for r in rows])
            check_chunks(t, v, counts, summ)
            return t, v, []
        except CorruptData:
            pass
        ts: list[F64] = []
        vs: list[F64] = []
        bad: list[_Summary] = []
        for i, r in enumerate(rows):
            try:
                t, v = decode(blobs[r[0]])
                check_chunks(t, v, np.array([len(t)]), summ[i : i + 1])
            except CorruptData:
                bad.append(r)
                continue
            ts.append(t)
            vs.append(v)
        if not ts:
            return np.empty(0), np.empty(0), bad
        return np.concatenate(ts), np.concatenate(vs), bad

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        """A window [start, end] of a series as at most ``points`` buckets.

        The window is cut into ``points`` equal spans. Every raw sample in the window lands in
        exactly one bucket, and each bucket holds the exact count, min, max and mean of the
        samples it covers (``t_first`` to ``t_last``), so a spike is never averaged away.
        When the window holds no more than ``points`` samples, the raw samples are returned.

        Cost is bounded whatever the window's length, by working at five resolutions: an
        hour's or a minute's rollup row (see :mod:`tunescope.store._rollup`), a chunk
        (CHUNK_SAMPLES samples) or a block (BLOCK_SAMPLES). The coarsest rollup level no
        longer than a span gives the window's whole rows, the next level the edges they leave,
        and chunks and blocks the last seconds at each edge (:meth:`_raw_parts`): a chunk or
        block no longer than a span goes whole into the span holding its midpoint, using its
        stored summary; only chunks with a block longer than a span, and those cut by the
        pieces' edges, are decoded. A span shorter than a block means a window of fewer than
        points x BLOCK_SAMPLES samples. Assigning whole items by midpoint keeps buckets
        ordered and disjoint, since items never overlap in time.

        Where a series' raw chunks were dropped (``tunescope compact --keep-raw``), the
        minute rows stand in for them: a window there is exact to the minute at its edges (a
        minute row cut by an edge goes in whole when the midpoint of its samples lies inside
        the window, else not at all), its buckets at least a minute long, and it returns
        buckets even when it holds fewer samples than ``points``.

        A chunk that must be decoded but cannot be (see :meth:`_decode_chunks`) is counted in
        ``corrupt_chunks``: one inside the window goes in whole as its stored summary (its
        bucket is coarser, its count, min, max and mean still exact); one cut by the window's
        edges is left out. Damaged block summaries fall back to decoding the chunk, which
        loses nothing and is not counted.
        """
        if points < 1:
            raise ValueError("points must be at least 1")
        if not end > start:
            raise ValueError("a window needs end > start")
        info = self._series_info(series_id)
        width = (end - start) / points
        rolled, raw_from = self._rollup_state(series_id)
        levels = tuple(level for level in LEVELS if level <= width)
        dropped = raw_from is not None and raw_from > start
        if not rolled or not (levels or dropped):
            return self._raw_window(info, start, end, points)
        parts = _Parts()
        corrupt = 0
        pieces = plan(start, end, levels)
        if not pieces or pieces[-1][0]:
            pieces.append((0, end, end))  # samples at the window's end, after the last row
        for level, lo, hi in pieces:
            if level:
                parts.rows(self._rollups(series_id, level, lo, hi))
                continue
            if raw_from is not None and lo < raw_from:  # raw dropped: the minute rows
                minute = LEVELS[-1]
                rows = self._rollups(
                    series_id, minute, math.floor(lo / minute) * minute, min(hi, raw_from)
                )
                mid = (rows[:, 0] + rows[:, 1]) / 2.0
                parts.rows(rows[(mid >= start) & (mid <= end)])
                if hi <= raw_from:
                    continue
                lo = raw_from
            last = hi >= end  # the window's end is inside it, pieces' ends are not
            if lo < hi or (last and lo <= hi):
                top = hi if last else float(np.nextafter(hi, -np.inf))
                corrupt += self._raw_parts(series_id, lo, top, width, parts, decode_all=False)
        # pending last, as _raw_window reads them: a pack in between misses, never doubles
        parts.samples(*self._pending(series_id, start, end))
        if not dropped and parts.count() <= points:
            return self._raw_window(info, start, end, points)  # few samples: them, raw
        return Window(
            info, start, end, buckets=parts.buckets(start, width, points), corrupt_chunks=corrupt
        )

    def _raw_window(self, info: SeriesInfo, start: float, end: float, points: int) -> Window:
        """:meth:`window` from chunks, blocks and samples only."""
        width = (end - start) / points
        parts = _Parts()
        corrupt = self._raw_parts(info.id, start, end, width, parts, points=points)
        if not parts.has_items() and parts.sample_count() <= points:
            ts, vs = parts.sorted_samples()
            return Window(
                info,
                start,
                end,
                samples=list(zip(ts.tolist(), vs.tolist(), strict=True)),
                corrupt_chunks=corrupt,
            )
        return Window(
            info, start, end, buckets=parts.buckets(start, width, points), corrupt_chunks=corrupt
        )

    def _raw_parts(
        self,
        series_id: int,
        start: float,
        end: float,
        width: float,
        parts: _Parts,
        *,
        decode_all: bool | None = None,
        points: int = 0,
    ) -> int:
        """Add the packed samples with start <= t <= end to ``parts`` as whole chunks, blocks
        and decoded samples (see :meth:`window`); returns how many chunks could not be
        decoded. ``decode_all`` None: the pending samples too (read after the chunks' rows, so
        that a pack in between misses samples rather than doubling them), and decode every
        chunk when the chunks inside and the pending samples number at most 2 x ``points``."""
        summ = self._chunk_summaries(series_id, start, end)
        pending = 0
        if decode_all is None:
            pt, pv = self._pending(series_id, start, end)
            parts.samples(pt, pv)
            pending = len(pt)
        if not summ:
            return 0
        corrupt = 0
        c = np.asarray(summ, dtype=np.float64)
        inside = (c[:, 1] >= start) & (c[:, 2] <= end)
        if decode_all is None:
            decode_all = bool(c[inside, 3].sum() + pending <= 2 * points)
        if decode_all:
            whole = np.zeros(len(c), dtype=bool)
            finer = np.zeros(len(c), dtype=bool)
        else:
            whole = inside & (c[:, 2] - c[:, 1] <= width)
            finer = inside & ~whole
        parts.chunks(c[whole])
        to_decode = [summ[i] for i in np.flatnonzero(~inside | (~whole & ~finer))]
        finer_rows = [summ[i] for i in np.flatnonzero(finer)]
        if finer_rows:
            blobs = self._chunk_blobs([r[0] for r in finer_rows], "blocks")
            rows = np.asarray([(r[1], r[2], r[3]) for r in finer_rows], dtype=np.float64)
            b, owner, ok = decode_blocks_many([blobs[r[0]] for r in finer_rows], rows)
            wide = np.bincount(
                owner, weights=b["t_last"] - b["t_first"] > width, minlength=len(rows)
            )
            use = ok & (wide == 0)
            to_decode.extend(finer_rows[i] for i in np.flatnonzero(~use))
            b = b[use[owner]]
            parts.items(
                b["t_first"],
                b["t_last"],
                b["n"].astype(np.float64),
                b["min"].astype(np.float64),
                b["max"].astype(np.float64),
                b["sum"],
            )
        if to_decode:
            ts, vs, bad = self._decode_chunks(to_decode)
            keep = (ts >= start) & (ts <= end)
            parts.samples(ts[keep], vs[keep])
            if bad:
                self._note_corrupt(series_id, bad)
                corrupt = len(bad)
                lost = np.asarray(bad, dtype=np.float64)
                parts.chunks(lost[(lost[:, 1] >= start) & (lost[:, 2] <= end)])
        return corrupt

    def _rollup_state(self, series_id: int) -> tuple[bool, float | None]:
        """Whether every packed sample of the series is in its rollups, and the time before
        which its raw chunks were dropped (None: none were). Stores without rollups answer
        (False, None): their windows read chunks only."""
        return False, None

    def _rollups(self, series_id: int, level: int, lo: float, hi: float) -> F64:
        """Rows (t_first, t_last, n, min, max, sum) of the rollup ``level`` of spans starting
        at lo <= t < hi, ordered by time."""
        return np.empty((0, 6))

    # The event reads take the same arguments in the same order: the trial, the span
    # [start, end] (all time by default, except for events, whose bins need a finite span),
    # then by name the kinds (None: every kind) and, for events, the limit.
    def count_events(
        self,
        trial_id: int,
        start: float = -np.inf,
        end: float = np.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> int:
        """How many events (of the given kinds) overlap [start, end]."""
        return self._count_events(trial_id, start, end, kinds)

    def all_events(
        self,
        trial_id: int,
        start: float = -np.inf,
        end: float = np.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> list[Event]:
        """Every event (of the given kinds) whose interval overlaps [start, end], in time
        order, however many: for readers that need each one (analysis, export), not a
        drawing (see :meth:`events`)."""
        return self._fetch_events(trial_id, start, end, kinds)

    def events(
        self,
        trial_id: int,
        start: float,
        end: float,
        *,
        kinds: Sequence[str] | None = None,
        limit: int = 2000,
    ) -> EventsWindow:
        """Events whose interval [t, t + duration] overlaps [start, end]. When more than
        ``limit`` match, counts per kind in ``limit`` equal bins instead (an interval counts in
        every bin it overlaps), so dense optimizer steps show as density, never dropped."""
        total = self._count_events(trial_id, start, end, kinds)
        if total <= limit:
            return EventsWindow(
                start, end, total, events=self._fetch_events(trial_id, start, end, kinds)
            )
        width = (end - start) / limit
        bins = [
            EventBin(kind, start + i * width, start + (i + 1) * width, n)
            for kind, i, n in self._bin_events(trial_id, start, end, kinds, limit)
        ]
        return EventsWindow(start, end, total, bins=bins)

    @abc.abstractmethod
    def _series_info(self, series_id: int) -> SeriesInfo: ...


class _Parts:
    """Items (whole chunks or blocks, as summaries) and raw samples gathered for a window."""

    def __init__(self) -> None:
        self._items: list[tuple[F64, F64, F64, F64, F64, F64]] = []
        self._samples: list[tuple[F64, F64]] = []

    def items(self, t_first: F64, t_last: F64, n: F64, vmin: F64, vmax: F64, vsum: F64) -> None:
        if len(t_first):
            self._items.append((t_first, t_last, n, vmin, vmax, vsum))

    def rows(self, rows: F64) -> None:
        """Rollup rows as items, as :meth:`Store._rollups` gives them."""
        if len(rows):
            self.items(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5])

    def count(self) -> int:
        """Samples gathered, those in items included."""
        return int(sum(float(x[2].sum()) for x in self._items)) + self.sample_count()

    def chunks(self, rows: F64) -> None:
        """Whole chunks as items, from their summary rows (as an array of _Summary)."""
        self.items(rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5], rows[:, 6])

    def samples(self, ts: F64, vs: F64) -> None:
        if len(ts):
            self._samples.append((ts, vs))

    def has_items(self) -> bool:
        return bool(self._items)

    def sample_count(self) -> int:
        return sum(len(t) for t, _ in self._samples)

    def sorted_samples(self) -> tuple[F64, F64]:
        if not self._samples:
            return np.empty(0), np.empty(0)
        ts = np.concatenate([t for t, _ in self._samples])
        vs = np.concatenate([v for _, v in self._samples])
        order = np.argsort(ts, kind="stable")
        return ts[order], vs[order]

    def buckets(self, start: float, width: float, points: int) -> list[Bucket]:
        """Merge every item and sample into per-span buckets."""
        cols: list[list[F64]] = (
            [list(x) for x in zip(*self._items, strict=True)]
            if self._items
            else [[] for _ in range(6)]
        )
        for ts, vs in self._samples:
            for col, arr in zip(cols, (ts, ts, np.ones(len(ts)), vs, vs, vs), strict=True):
                col.append(arr)
        t_lo, t_hi, cnt, vmin, vmax, vsum = (np.concatenate(c) if c else np.empty(0) for c in cols)
        if not len(t_lo):
            return []
        rep = (t_lo + t_hi) / 2.0
        idx = np.clip(((rep - start) / width).astype(np.int64), 0, points - 1)
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
            Bucket(a, b, int(c), lo, hi, s / c)
            for a, b, c, lo, hi, s in zip(
                firsts.tolist(),
                lasts.tolist(),
                counts.tolist(),
                mins.tolist(),
                maxs.tolist(),
                sums.tolist(),
                strict=True,
            )
        ]
