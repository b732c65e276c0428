"""Reads the routes share: lookups that turn NotFound into 404s, window bounds, run summaries.

Everything here only reads the store. The store serialises its own calls, so these functions
may run on any thread of the server's pool.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from tunescope._kept import Kept
from tunescope.analyze import SEVERITIES, Finding, FindingSettings, findings_for_trial, trial_end
from tunescope.errors import NotFound, StoreError
from tunescope.metrics import CATALOG
from tunescope.server._auth import Principal
from tunescope.server._errors import invalid, not_found
from tunescope.server._schema import ScalarOut, ScalarsOut
from tunescope.store import RunInfo, Scalar, SeriesInfo, Store, TrialInfo

log = logging.getLogger("tunescope.server")

__all__ = [
    "FINDINGS_BUDGET_S",
    "FINDINGS_REFRESH_S",
    "FINDINGS_WAIT_S",
    "RUNS_LIST_BUDGET_S",
    "FindingsCache",
    "RunSummaries",
    "ScalarCurves",
    "device_key",
    "finding_counts",
    "host_device_key",
    "metric_order",
    "read_cursor",
    "resolve_run",
    "resolve_trial",
    "thin_scalars",
    "visible_projects",
    "window_bounds",
    "write_cursor",
]

_FINISHED = frozenset({"completed", "failed", "pruned"})
_CATALOG_ORDER = {m.key: i for i, m in enumerate(CATALOG)}


def resolve_run(store: Store, run: str, who: Principal) -> RunInfo:
    """A run ``who`` may see, by id (all digits) or by name within its project (the store's
    project for a local viewer); a run whose name is all digits is found too. A run of
    another project is a 404, as if it did not exist."""
    if run.isascii() and run.isdigit() and len(run) < 19:
        try:
            found = store.get_run(int(run))
            if who.sees(found.project):
                return found
        except NotFound:
            pass
    try:
        return store.get_run(run, project=who.project)
    except NotFound:
        raise not_found(f"no run {run!r}") from None


def resolve_trial(store: Store, trial: int, who: Principal) -> TrialInfo:
    """A trial ``who`` may see, by id; a 404 for an unknown one or one of another project."""
    try:
        info = store.get_trial(trial)
        if who.project is None or store.owner(trial=info.id) == who.project:
            return info
    except NotFound:
        pass
    raise not_found(f"no trial {trial}")


def visible_projects(store: Store, who: Principal, project: str | None = None) -> list[str]:
    """The projects ``who`` may see (its own; every one for a local viewer), or just
    ``project`` when given: a 404 when it is not one of them (or does not exist)."""
    if who.project is not None:
        mine = [who.project]
    elif project is not None:  # one lookup, not every name, to check a local viewer's choice
        mine = [project] if project in store.list_projects() else []
    else:
        mine = store.list_projects()
    if project is None:
        return mine
    if project not in mine:
        raise not_found(f"no project {project!r}")
    return [project]


def write_cursor(kind: str, key: Sequence[object] | None) -> str:
    """An opaque cursor for the page of ``kind`` that follows ``key`` (None: the first)."""
    raw = json.dumps({"k": kind, "after": None if key is None else list(key)})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def read_cursor(kind: str, cursor: str, types: Sequence[type]) -> tuple[object, ...] | None:
    """The key a cursor of :func:`write_cursor` holds (None: the first page), its fields of
    ``types``; a 422 for anything else (a cursor of another route, a damaged one)."""
    bad = invalid(f"cursor: not a cursor of this route ({cursor[:40]!r})")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
    except (ValueError, TypeError):
        raise bad from None
    if not isinstance(body, dict) or body.get("k") != kind:
        raise bad
    after = body.get("after")
    if after is None:
        return None
    if not isinstance(after, list) or len(after) != len(types):
        raise bad
    for v, t in zip(after, types, strict=True):
        if not isinstance(v, t) or isinstance(v, bool):
            raise bad
        if isinstance(v, float) and not math.isfinite(v):
            raise bad
    return tuple(after)


def metric_order(key: str) -> tuple[int, str]:
    """Sort key: catalog order (headline metrics first), then unknown keys by name."""
    return (_CATALOG_ORDER.get(key, len(_CATALOG_ORDER)), key)


def device_key(device: str | None) -> tuple[int, int, str]:
    """Sort key for devices: trial-wide (None) first, then numbers in numeric order."""
    if device is None:
        return (0, 0, "")
    m = re.fullmatch(r"\d+", device)
    return (1, int(device), "") if m else (2, 0, device)


def host_device_key(s: SeriesInfo) -> tuple[str, tuple[int, int, str]]:
    """Sort key for the series of one metric: by host, then device (:func:`device_key`)."""
    return (s.host, device_key(s.device))


def _check_finite(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise invalid(f"{name}: must be a finite number of seconds, not {value}")


def window_bounds(
    start: float | None, end: float | None, lo: float, hi: float, pad: float
) -> tuple[float, float]:
    """The [start, end] of a window: given values win over the default extent [lo, hi].

    Both given: end must exceed start (else a 422). One or none given: when the result is
    empty (a single sample, a start past the data) it is widened by ``pad`` seconds on the side
    that was not given, so a request for "what came after t" is valid and simply empty.
    """
    _check_finite("start", start)
    _check_finite("end", end)
    if start is not None and end is not None:
        if not end > start:
            raise invalid(f"start ({start}) must be before end ({end})")
        return start, end
    s = lo if start is None else start
    e = hi if end is None else end
    if not e > s:
        if end is None:
            e = s + pad
        else:
            s = e - pad
        if not e > s:  # so far from 0 that the pad is lost in rounding
            which, value = ("start", s) if end is None else ("end", e)
            raise invalid(f"{which} ({value}) is out of range")
    return s, e


def series_extent(store: Store, infos: list[SeriesInfo]) -> tuple[float, float] | None:
    """(first t, last t) over the given series, None when none has a sample."""
    extents = [e for e in (store.series_extent(s.id) for s in infos) if e is not None]
    if not extents:
        return None
    return min(e[0] for e in extents), max(e[1] for e in extents)


def thin_scalars(rows: Sequence[Scalar], points: int) -> list[Scalar]:
    """At most ``points`` (>= 4) of each name's scalars, in their order (``rows`` ordered by
    name, then step): a name with more keeps its first and last, and the lowest and highest
    value of each of ``(points - 2) // 2`` equal runs of the rows between them, so a curve
    drawn from them keeps its spikes and its latest value."""
    out: list[Scalar] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j].name == rows[i].name:
            j += 1
        if j - i <= points:
            out.extend(rows[i:j])
        else:
            runs = (points - 2) // 2
            inner = rows[i + 1 : j - 1]
            out.append(rows[i])
            for k in range(runs):
                part = inner[k * len(inner) // runs : (k + 1) * len(inner) // runs]
                lo = min(range(len(part)), key=lambda x: part[x].value)
                hi = max(range(len(part)), key=lambda x: part[x].value)
                out.extend(part[x] for x in sorted({lo, hi}))
            out.append(rows[j - 1])
        i = j
    return out


def series_peak(store: Store, info: SeriesInfo) -> float | None:
    """The highest sample of a series, from stored chunk summaries (no decoding)."""
    extent = store.series_extent(info.id)
    if extent is None:
        return None
    lo, hi, _ = extent
    w = store.window(info.id, lo, hi if hi > lo else lo + 1.0, 1)
    return w.peak


class RunSummaries:
    """Duration and peak GPU memory of runs, for the runs list.

    The peak of a trial that has finished is remembered: its series no longer grow.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._peaks: Kept[int, tuple[float | None]] = Kept(PEAKS_KEPT)

    def trial_peak(self, trial: TrialInfo) -> float | None:
        """Highest gpu.mem sample of the trial on any GPU, bytes; None without GPU series."""
        kept = self._peaks.get(trial.id)
        if kept is not None:
            return kept[0]
        peaks = [
            p
            for p in (
                series_peak(self._store, s) for s in self._store.list_series(trial.id, "gpu.mem")
            )
            if p is not None
        ]
        peak = max(peaks) if peaks else None
        if trial.state in _FINISHED:
            self._peaks.put(trial.id, (peak,))
        return peak

    def summary(self, run: RunInfo, trials: list[TrialInfo]) -> tuple[float, float | None]:
        """(duration_s, peak_gpu_mem) of a run whose trials are given."""
        if run.end is not None:
            last = run.end
        else:
            marks = [trial_end(t) or t.start for t in trials]
            last = max(marks, default=run.start)
        peaks = [p for p in (self.trial_peak(t) for t in trials) if p is not None]
        return max(0.0, last - run.start), (max(peaks) if peaks else None)


FINDINGS_KEPT = 10_000
"""Trials whose findings a server remembers (the least recently asked are forgotten)."""
PEAKS_KEPT = 100_000
"""Finished trials whose peak GPU memory a server remembers."""
FINDINGS_REFRESH_S = 10.0
"""A running trial's findings are recomputed at most this often (seconds): they read every
series of the trial, and a running trial's heartbeat changes every second."""

RUNS_LIST_BUDGET_S = 1.0
"""Seconds one runs-list request may spend computing findings that no earlier request has;
runs left over show ``findings: null`` until a later request (the page polls) gets to them."""


def _fingerprint(trial: TrialInfo) -> tuple[str, float | None, float | None, str | None]:
    """What changes when a trial's findings may change: every writer (sampler, SDK flusher,
    ingest) refreshes the heartbeat when it writes, and a trial that ends sets state and end."""
    return (trial.state, trial.end, trial.heartbeat, trial.error)


CURVES_KEPT = 128
"""Thinned scalar answers (trial, name, points) a server remembers."""
CURVES_MAX_ROWS = 10_000
"""Thinned answers longer than this are not remembered (a bound on the cache's memory)."""


class ScalarCurves:
    """The scalars route's answer with a trial's scalars thinned for a chart
    (:func:`thin_scalars`), as JSON, remembered while the trial's fingerprint (state, end,
    heartbeat, error: every writer refreshes the heartbeat when it writes) is unchanged, so a
    finished trial's curves are read and encoded once. A day-long trial logs tens of thousands
    of scalars, and a run's Training tab asks for every trial's each time it opens."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._kept: Kept[tuple[int, str | None, int], tuple[object, bytes]] = Kept(CURVES_KEPT)

    def answer(self, trial: TrialInfo, name: str | None, points: int) -> bytes:
        """``{names, scalars, next: null}`` of ``GET /api/trials/{trial}/scalars?points=``."""
        key = (trial.id, name, points)
        fingerprint = _fingerprint(trial)
        hit = self._kept.get(key)
        if hit is not None and hit[0] == fingerprint:
            return hit[1]
        rows = thin_scalars(self._store.scalars(trial.id, name), points)
        body = JSONResponse(
            ScalarsOut.make(
                names=self._store.scalar_names(trial.id), scalars=ScalarOut.of_each(rows), next=None
            )
        ).body
        if len(rows) <= CURVES_MAX_ROWS:
            self._kept.put(key, (fingerprint, bytes(body)))
        return bytes(body)


FINDINGS_WAIT_S = 5.0
"""Longest a request waits for a trial's findings being computed; past it, the request
answers without them (counts ``null``, or 503 for a trial's or run's findings) and the
computation goes on for a later request."""
FINDINGS_BUDGET_S = 10.0
"""Longest the analysis of one trial may run: past it (checked at each store call it
makes) it stops, and the trial's findings are unavailable until the trial changes."""
FINDINGS_WORKERS = 2
"""Threads that compute findings, off the request path. A project has at most one of them
at a time (its other trials wait their turn), so one project's large trial leaves the
others a worker."""


_IDLE_S = 5.0
"""A findings worker with nothing to do for this long ends (another starts when needed)."""


class FindingsTooSlow(Exception):
    """The analysis of a trial ran past :data:`FINDINGS_BUDGET_S`."""


class _Deadline:
    """A store whose calls raise :class:`FindingsTooSlow` once ``deadline`` (monotonic) has
    passed: bounds the time of an analysis that reads through it."""

    def __init__(self, store: Store, deadline: float) -> None:
        self._store = store
        self._deadline = deadline

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if time.monotonic() > self._deadline:
                raise FindingsTooSlow(name)
            return attr(*args, **kwargs)

        return call


@dataclass(frozen=True)
class _Entry:
    fingerprint: tuple[str, float | None, float | None, str | None]
    at: float
    findings: tuple[Finding, ...] | None
    """None: the analysis ran past its budget."""


class _Fair:
    """Jobs run by :data:`FINDINGS_WORKERS` daemon threads, at most one per project at a
    time, projects taken in turn."""

    def __init__(self, workers: int = FINDINGS_WORKERS) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Callable[[], None]]] = {}
        self._order: deque[str] = deque()
        self._running: set[str] = set()
        self._workers = workers
        self._threads: list[threading.Thread] = []

    def submit(self, project: str, job: Callable[[], None]) -> None:
        with self._cond:
            if len(self._threads) < self._workers:
                t = threading.Thread(target=self._loop, name="tunescope-findings", daemon=True)
                self._threads.append(t)
                t.start()
            q = self._queues.setdefault(project, deque())
            if not q and project not in self._order:
                self._order.append(project)
            q.append(job)
            self._cond.notify()

    def _next(self) -> tuple[str, Callable[[], None]] | None:
        """The next job and its project; None when none came for :data:`_IDLE_S` (the
        worker then ends: a server that asks for no findings holds no thread)."""
        with self._cond:
            while True:
                for _ in range(len(self._order)):
                    project = self._order.popleft()
                    if project in self._running:
                        self._order.append(project)
                        continue
                    q = self._queues[project]
                    job = q.popleft()
                    if q:
                        self._order.append(project)
                    else:
                        del self._queues[project]
                    self._running.add(project)
                    return project, job
                if not self._cond.wait(_IDLE_S) and not self._order:
                    self._threads.remove(threading.current_thread())
                    return None

    def _loop(self) -> None:
        while True:
            got = self._next()
            if got is None:
                return
            project, job = got
            try:
                job()
            except Exception:  # a job reports its own failure; the worker goes on
                log.exception("findings worker")
            finally:
                with self._cond:
                    self._running.discard(project)
                    self._cond.notify_all()


class FindingsCache:
    """Findings of trials, computed off the request path and remembered (they read every
    series).

    A trial's findings are reused while its fingerprint (state, end, heartbeat, error) is
    unchanged, so a finished trial is analysed once; a running trial, whose heartbeat moves
    every second, is analysed again at most every :data:`FINDINGS_REFRESH_S` seconds (in
    between, the last result is answered). The analysis runs on the workers of a fair queue
    (:data:`FINDINGS_WORKERS`, at most one per project), each bounded by
    :data:`FINDINGS_BUDGET_S`; a request waits for it at most :data:`FINDINGS_WAIT_S` (or
    its own deadline). Two requests that need the same trial at once share one analysis.
    ``settings``: the rules' thresholds (default: the defaults). The clock is injectable for
    tests.
    """

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float] = time.monotonic,
        settings: FindingSettings | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._entries: Kept[int, _Entry] = Kept(FINDINGS_KEPT)
        self._lock = threading.Lock()
        self._busy: dict[int, threading.Event] = {}
        self._owners: Kept[int, str] = Kept(FINDINGS_KEPT)
        self._fair = _Fair()

    @property
    def settings(self) -> FindingSettings:
        """The thresholds the rules judge by (the usage route's idle stretches too)."""
        return self._settings if self._settings is not None else FindingSettings()

    def _usable(self, entry: _Entry | None, trial: TrialInfo) -> bool:
        if entry is None:
            return False
        if entry.fingerprint == _fingerprint(trial):
            return True
        return trial.state == "running" and self._clock() - entry.at < FINDINGS_REFRESH_S

    def _project(self, trial: TrialInfo) -> str:
        project = self._owners.get(trial.id)
        if project is None:
            project = self._store.owner(trial=trial.id)
            self._owners.put(trial.id, project)
        return project

    def _start(self, trial: TrialInfo) -> threading.Event:
        """The event set when the trial's analysis in progress (or one started now) ends."""
        with self._lock:
            done = self._busy.get(trial.id)
            if done is not None:
                return done
            done = self._busy[trial.id] = threading.Event()

        def job() -> None:
            try:
                found: tuple[Finding, ...] | None
                budget = _Deadline(self._store, time.monotonic() + FINDINGS_BUDGET_S)
                try:
                    found = tuple(findings_for_trial(budget, trial, self._settings))  # type: ignore[arg-type]
                except FindingsTooSlow:
                    log.warning(
                        "findings of trial %d took more than %g s: not computed",
                        trial.id,
                        FINDINGS_BUDGET_S,
                    )
                    found = None
                except StoreError as exc:  # not remembered: a later request tries again
                    log.warning("findings of trial %d not computed: %s", trial.id, exc)
                    return
                self._entries.put(trial.id, _Entry(_fingerprint(trial), self._clock(), found))
            finally:
                with self._lock:
                    self._busy.pop(trial.id, None)
                done.set()

        try:
            self._fair.submit(self._project(trial), job)
        except BaseException:
            with self._lock:
                self._busy.pop(trial.id, None)
            done.set()
            raise
        return done

    def trial(self, trial: TrialInfo, deadline: float | None = None) -> list[Finding] | None:
        """The trial's findings, most severe first; None when they are not known (yet, or
        the analysis ran past its budget). With a ``deadline`` (on this cache's clock) that
        has passed, nothing is computed: the last result is answered, stale or not, and None
        when there is none yet. Otherwise the analysis is started (off the request path) and
        waited for until the deadline, at most :data:`FINDINGS_WAIT_S`."""
        entry = self._entries.get(trial.id)
        if self._usable(entry, trial):
            assert entry is not None
            return None if entry.findings is None else list(entry.findings)
        now = self._clock()
        if deadline is not None and now >= deadline:
            return None if entry is None or entry.findings is None else list(entry.findings)
        wait = FINDINGS_WAIT_S if deadline is None else min(FINDINGS_WAIT_S, deadline - now)
        self._start(trial).wait(max(0.0, wait))
        entry = self._entries.get(trial.id)
        if entry is None or entry.findings is None:
            return None
        return list(entry.findings)

    def run(
        self, trials: list[TrialInfo], deadline: float | None = None
    ) -> dict[int, list[Finding] | None]:
        """Findings of each of a run's trials, keyed by trial id in the given order (their
        analyses run side by side, within one wait)."""
        now = self._clock()
        if deadline is None:
            deadline = now + FINDINGS_WAIT_S
        if now < deadline:
            for t in trials:
                if not self._usable(self._entries.get(t.id), t):
                    self._start(t)
        return {t.id: self.trial(t, deadline) for t in trials}

    def list_deadline(self) -> float:
        """The deadline of one runs-list request: :data:`RUNS_LIST_BUDGET_S` from now."""
        return self._clock() + RUNS_LIST_BUDGET_S


def finding_counts(findings: Mapping[int, Sequence[Finding] | None]) -> dict[str, int] | None:
    """How many findings of each severity; None when a trial's are not computed yet."""
    counts: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
    for fs in findings.values():
        if fs is None:
            return None
        for f in fs:
            counts[f.severity] += 1
    return counts
