"""The usage of ended trials, kept in their store once computed, so that a query over a year
reads one row per trial instead of every series of every trial.

What is kept, per trial (JSON): its GPUs and CPUs (:class:`GpuUse`, :class:`CpuUse`: model,
busy measure, idle stretches, cores) and what they used in each UTC day of its held span
(:data:`Day`); the run's keys and the trial's state are read fresh at every query. It is
kept only for a trial that has ended (``running`` trials grow) and whose whole held span lies
in the asked window, its reads having met no damaged chunk; a query whose window cuts a
trial's held span computes that trial afresh (its idle stretches, days and buckets depend on
the whole trial), so cut days stay exact.

Under a digest of what else the figures depend on (:func:`usage_digest`): the idle
thresholds of the finding settings, the GPU catalog (models matched by memory), the
definitions' constants and the tunescope version. The store answers a kept row only while
its trial's data is as it was read (its data generation: see ``store/sql/_kept_usage.py``), so
a late batch, a sample merged in, a compaction or dropped raw chunks mean it is computed again.

Kept by the first query that covers an ended trial whole (:func:`keep_computed`), or ahead of
any query by compaction (:func:`keep_usage_ahead`: ``tunescope compact``, a team server's
background compaction), which computes every ended trial that has none at its generation, in
passes a time budget bounds, each resuming where the last stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunescope import __version__
from tunescope._once import Once
from tunescope.analyze import _usage
from tunescope.analyze._gpu_catalog import GPU_CATALOG, MATCH_TOLERANCE, GpuType
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._usage import (
    CpuUse,
    Day,
    GpuUse,
    TrialUsage,
    held_span,
    trial_usage,
    usage_from_days,
)
from tunescope.errors import StoreError
from tunescope.store import RunInfo, Store, TrialInfo

__all__ = [
    "KEPT_FORMAT",
    "UsageKept",
    "decode_usage",
    "encode_usage",
    "keep_computed",
    "keep_usage_ahead",
    "usage_digest",
]

_once = Once("tunescope.usage")

KEPT_FORMAT = 1
"""The form of kept usage and of the computation behind it: raise it when either changes, so
that what earlier code kept is computed again."""


def usage_digest(settings: FindingSettings, catalog: tuple[GpuType, ...]) -> str:
    """The SHA-256 of everything a trial's kept usage depends on beyond its data."""
    doc = [
        KEPT_FORMAT,
        __version__,
        _usage.GAP_INTERVALS,
        _usage.MAX_POINTS,
        settings.idle_gpu_util_pct,
        settings.idle_stretch_min_s,
        MATCH_TOLERANCE,
        [[g.key, g.label, g.memory] for g in catalog],
    ]
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def encode_usage(u: TrialUsage) -> str | None:
    """A trial's usage over its whole held span as the JSON its store keeps (None: a figure
    JSON cannot hold exactly, so nothing is kept)."""
    n = len(u.gpus) + len(u.cpus) or 1
    days: list[Any] = []
    for i in range(0, len(u.slices), n):
        day = u.slices[i : i + n]
        gpus = [[s.busy_s, s.idle_s, s.mem_w, s.mem_sum, s.mem_peak] for s in day if s.gpu]
        cpus = [[s.cpu_core_s] for s in day if not s.gpu and u.cpus]
        days.append([gpus, cpus])
    doc = [
        KEPT_FORMAT,
        [
            [g.host, g.device, g.model, g.catalog_key, g.busy_by, g.stretches, g.mem_peak_bytes]
            for g in u.gpus
        ],
        [[c.host, c.cores] for c in u.cpus],
        days,
    ]
    try:
        return json.dumps(doc, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return None


def decode_usage(text: str, trial: TrialInfo, run: RunInfo, now: float) -> TrialUsage | None:
    """The usage of ``trial`` kept as ``text`` (by :func:`encode_usage`), over its whole held
    span; None when the text does not fit the trial (another form, another number of days)."""
    try:
        form, gpus_doc, cpus_doc, days_doc = json.loads(text)
        if form != KEPT_FORMAT:
            return None
        gpus = tuple(
            GpuUse(h, d, m, k, b, tuple((x, y) for x, y in st), p)
            for h, d, m, k, b, st, p in gpus_doc
        )
        cpus = tuple(CpuUse(h, c) for h, c in cpus_doc)
        days: list[Day] = [
            (tuple((a, b, c, d, e) for a, b, c, d, e in g), tuple((x,) for (x,) in c))
            for g, c in days_doc
        ]
        lo, hi = held_span(trial, now)
        return usage_from_days(trial, run, gpus, cpus, days, lo, hi)
    except (ValueError, TypeError):
        return None


def keep_computed(store: Store, fresh: Sequence[tuple[int, TrialUsage]], digest: str) -> int:
    """Keep in their store the usage of ended trials computed over their whole held span
    ((the data generation read before computing it, the usage) pairs), unless a read of
    theirs met damaged chunks (each query says so again); returns how many were kept. A
    store that cannot keep it (read-only, or refusing) keeps none, said once: its queries
    compute every trial."""
    if not fresh or getattr(store, "readonly", False):
        return 0
    damaged = {info.trial_id for info, _ in store.corrupt_series()}
    rows = [
        (u.trial.id, gen, text)
        for gen, u in fresh
        if u.trial.id not in damaged and (text := encode_usage(u)) is not None
    ]
    try:
        kept: int = store.keep_usage(rows, digest)  # type: ignore[attr-defined]
    except StoreError as exc:
        _once(
            f"keep:{store.url}",
            "usage figures not kept in %s (%s): each query computes them",
            store.url,
            exc,
            level=logging.INFO,
        )
        return 0
    return kept


@dataclass(frozen=True)
class UsageKept:
    """What a pass of :func:`keep_usage_ahead` did: the ended trials whose usage it computed,
    how many of those it kept (not one whose reads met damaged chunks, nor one whose data
    changed while it computed), whether it went through every ended trial that had none
    (``done``; else its budget ran out, and ``after`` is the trial id the next pass resumes
    after; 0 once done) and the seconds it took."""

    computed: int
    kept: int
    done: bool
    after: int
    seconds: float


AHEAD_PAGE = 100
"""Trials a pass of :func:`keep_usage_ahead` lists at a time."""
AHEAD_KEEP_EVERY = 32
"""Trials whose figures a pass keeps in one transaction: it keeps as it goes, so a pass that
stops or fails midway keeps what it had computed."""


def keep_usage_ahead(
    store: Store,
    settings: FindingSettings | None = None,
    *,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
    budget_s: float | None = None,
    after: int = 0,
    now: float | None = None,
) -> UsageKept:
    """Compute and keep, ahead of any query, the usage of every ended trial (with an id above
    ``after``, in id order) that has none kept at its data generation now for ``settings``
    and ``catalog`` (those ``tunescope usage`` and ``GET /api/usage`` ask with), so that the
    first query reads it back as the later ones do. ``budget_s``: start no trial once this
    many seconds have gone (each pass computes at least one); the answer's ``after`` is where
    the next pass resumes. A store that keeps no usage (an HTTP store, a read-only one) does
    nothing. Store errors are raised (the caller tries again later); what this keeps is what
    the first query would have kept, and what it could not keep that query computes."""
    t0 = time.monotonic()
    unkept: Any = getattr(store, "unkept_usage", None)
    if unkept is None or getattr(store, "readonly", False):
        return UsageKept(0, 0, True, 0, 0.0)
    s = settings if settings is not None else FindingSettings()
    digest = usage_digest(s, catalog)
    clock = time.time() if now is None else now  # an ended trial's figures do not read it
    runs: dict[int, RunInfo] = {}
    fresh: list[tuple[int, TrialUsage]] = []
    computed = kept = 0
    cursor, spent = int(after), False
    try:
        while not spent:
            page: list[tuple[int, int]] = unkept(digest, after=cursor, limit=AHEAD_PAGE)
            if not page:
                break
            for tid, gen in page:
                if budget_s is not None and computed and time.monotonic() - t0 >= budget_s:
                    spent = True
                    break
                cursor = tid
                t = store.get_trial(tid)  # read after its generation, as the figures are
                h0, h1 = held_span(t, clock)
                if t.state == "running" or h1 <= h0:
                    continue  # its queries skip it too: nothing held, or running again
                if t.run_id not in runs:
                    runs[t.run_id] = store.get_run(t.run_id)
                u = trial_usage(store, t, runs[t.run_id], h0, h1, s, now=clock, catalog=catalog)
                computed += 1
                if u is not None:
                    fresh.append((gen, u))
                if len(fresh) >= AHEAD_KEEP_EVERY:
                    kept += keep_computed(store, fresh, digest)
                    fresh = []
    finally:  # what was computed is kept, even when a read fails midway
        kept += keep_computed(store, fresh, digest)
    return UsageKept(computed, kept, not spent, cursor if spent else 0, time.monotonic() - t0)
