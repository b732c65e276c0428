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
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tunescope import __version__
from tunescope.analyze import _usage
from tunescope.analyze._gpu_catalog import MATCH_TOLERANCE, GpuType
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._usage import CpuUse, Day, GpuUse, TrialUsage, held_span, usage_from_days
from tunescope.store import RunInfo, TrialInfo

__all__ = ["KEPT_FORMAT", "decode_usage", "encode_usage", "usage_digest"]

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
