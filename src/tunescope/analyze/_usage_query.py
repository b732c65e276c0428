"""Usage across trials: :func:`usage_of` sums the slices of every trial of the asked projects
that held something in the window into one row per group (``tunescope usage``, ``GET
/api/usage``). The definitions are :mod:`tunescope.analyze._usage`'s; an ended trial's figures
come from its store when they were kept there (:mod:`tunescope.analyze._usage_kept`), else are
computed and kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._usage import GROUPINGS, Slice, TrialUsage, held_span, trial_usage
from tunescope.analyze._usage_kept import decode_usage, keep_computed, usage_digest
from tunescope.errors import ConfigError
from tunescope.store import RunInfo, Store, TrialInfo

__all__ = ["Usage", "UsageRow", "check_query", "group_rows", "usage_of"]


@dataclass(frozen=True)
class UsageRow:
    """One group's figures (see the module doc); seconds, shares in %, USD."""

    keys: dict[str, str | None]
    gpu_held_s: float
    gpu_busy_s: float
    gpu_idle_s: float
    busy_by: str | None
    mem_peak_pct: float | None
    mem_mean_pct: float | None
    cpu_core_s: float
    cpu_quota_core_s: float
    trials: int
    failed_gpu_s: float
    pruned_gpu_s: float
    failed_pruned_pct: float | None
    cost_usd: float | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.keys)
        out.update(
            {k: v for k, v in self.__dict__.items() if k != "keys"},
        )
        return out


@dataclass(frozen=True)
class Usage:
    """The answer of :func:`usage_of`: rows per group (sorted by their keys) and every
    trial's usage (for the most wasteful trials and the daily chart)."""

    since: float
    until: float
    by: tuple[str, ...]
    rows: tuple[UsageRow, ...]
    trials: tuple[TrialUsage, ...] = field(default=())

    def most_wasted(self, n: int = 10) -> list[TrialUsage]:
        """The ``n`` trials with the most held-but-not-busy GPU-seconds, most first."""
        held = [t for t in self.trials if t.held_s > 0]
        return sorted(held, key=lambda t: (-t.wasted_s, t.trial.id))[:n]


def _price_of(g_model: str | None, key: str | None, prices: Mapping[str, float]) -> float | None:
    if g_model is not None and g_model in prices:
        return prices[g_model]
    if key is not None and key in prices:
        return prices[key]
    return None


def group_rows(
    slices: Iterable[Slice], by: Sequence[str], prices: Mapping[str, float]
) -> list[UsageRow]:
    """Sum slices into one row per distinct value of the ``by`` keys (every slice in one
    row when ``by`` is empty), sorted by those values (None first)."""
    groups: dict[tuple[str | None, ...], list[Slice]] = {}
    for s in slices:
        groups.setdefault(tuple(s.keys[k] for k in by), []).append(s)
    rows = []
    for key in sorted(groups, key=lambda k: tuple((v is not None, v or "") for v in k)):
        ss = groups[key]
        g = [s for s in ss if s.gpu]
        held = sum(s.held_s for s in g)
        mem_w = sum(s.mem_w for s in g)
        peaks = [s.mem_peak for s in g if s.mem_peak is not None]
        failed = sum(s.held_s for s in g if s.state == "failed")
        pruned = sum(s.held_s for s in g if s.state == "pruned")
        quota = sum(s.cpu_quota_core_s for s in ss)
        base, lost = held, failed + pruned
        if held == 0:
            base = quota
            lost = sum(s.cpu_quota_core_s for s in ss if s.state in ("failed", "pruned"))
        priced = [
            (s.held_s, p)
            for s in g
            if (p := _price_of(s.keys["gpu_model"], s.catalog_key, prices)) is not None
        ]
        kinds = sorted({s.busy_by for s in g if s.busy_by is not None})
        rows.append(
            UsageRow(
                keys=dict(zip(by, key, strict=True)),
                gpu_held_s=held,
                gpu_busy_s=sum(s.busy_s for s in g),
                gpu_idle_s=sum(s.idle_s for s in g),
                busy_by="+".join(kinds) if kinds else None,
                mem_peak_pct=100.0 * max(peaks) if peaks else None,
                mem_mean_pct=100.0 * sum(s.mem_sum for s in g) / mem_w if mem_w > 0 else None,
                cpu_core_s=sum(s.cpu_core_s for s in ss),
                cpu_quota_core_s=quota,
                trials=len({s.trial_id for s in ss}),
                failed_gpu_s=failed,
                pruned_gpu_s=pruned,
                failed_pruned_pct=100.0 * lost / base if base > 0 else None,
                cost_usd=sum(h / 3600.0 * p for h, p in priced) if priced else None,
            )
        )
    return rows


def check_query(
    since: float, until: float, by: Sequence[str], prices: Mapping[str, float] | None
) -> dict[str, float]:
    """The prices as a dict, once the query is known good; ConfigError (one line) for an
    unknown or repeated grouping, ``until`` not after ``since``, or a negative or non-finite
    price. Nothing is read: callers check before they open a store."""
    for b in by:
        if b not in GROUPINGS:
            raise ConfigError(f"unknown grouping {b!r}: use {', '.join(GROUPINGS)}")
    if len(set(by)) != len(by):
        raise ConfigError(f"a grouping is given twice: {', '.join(by)}")
    if not until > since:
        raise ConfigError("the window's end (--until) must be after its start (--since)")
    out = dict(prices or {})
    for k, p in out.items():
        if not math.isfinite(p) or p < 0:
            raise ConfigError(f"price of {k} must be a number >= 0 (USD per GPU-hour), not {p:g}")
    return out


def usage_of(
    store: Store,
    since: float,
    until: float,
    by: Sequence[str],
    *,
    prices: Mapping[str, float] | None = None,
    settings: FindingSettings | None = None,
    now: float,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
    projects: Sequence[str] | None = None,
) -> Usage:
    """The usage of ``projects`` (default: the store's, ``store.project``; a team server's:
    its token's) within [since, until], grouped ``by`` (names of :data:`GROUPINGS`): the
    checks of
    :func:`check_query`, then ConfigError for a price of a GPU that is neither a model the
    store recorded nor a catalog key. An ended trial whose held span lies in the window is
    answered from the usage its store kept for it, or computed and kept there (a SQL store
    or its pool; see :mod:`tunescope.analyze._usage_kept`)."""
    prices = check_query(since, until, by, prices)
    s = settings if settings is not None else FindingSettings()
    asked: list[tuple[RunInfo, TrialInfo]] = []
    runs = [r for p in projects or [store.project] for r in store.list_runs(project=p)]
    for run in sorted(runs, key=lambda r: r.id):
        if run.start > until:
            continue
        asked.extend((run, t) for t in store.list_trials(run.id) if t.start < until)
    kept: Any = getattr(store, "kept_usage", None)
    digest = usage_digest(s, catalog)
    wanted = [t.id for _, t in asked if _keepable(t, since, until, now)]
    found: dict[int, tuple[int, str | None]] = kept(wanted, digest) if kept and wanted else {}
    trials = []
    fresh: list[tuple[int, TrialUsage]] = []
    for run, t in asked:
        gen, text = found.get(t.id, (None, None))
        u = None if text is None else decode_usage(text, t, run, now)
        if u is None:
            if gen is not None:  # what is kept must rest on nothing read before its generation
                t = store.get_trial(t.id)
            u = trial_usage(store, t, run, since, until, s, now=now, catalog=catalog)
            if gen is not None and u is not None and _keepable(t, since, until, now):
                fresh.append((gen, u))
        if u is not None:
            trials.append(u)
    known = {g.model for u in trials for g in u.gpus} | {c.key for c in catalog}
    for k in prices:
        if k not in known:
            raise ConfigError(
                f"--price {k!r} names no GPU model of this store and no catalog GPU "
                f"({', '.join(sorted(known))})"
            )
    if fresh:  # a query refused for its input writes nothing
        keep_computed(store, fresh, digest)
    rows = group_rows((sl for u in trials for sl in u.slices), by, prices)
    return Usage(since, until, tuple(by), tuple(rows), tuple(trials))


def _keepable(t: TrialInfo, since: float, until: float, now: float) -> bool:
    """Whether a trial's usage in [since, until] may be kept (or answered from what was
    kept): it has ended, held something, and all it held lies in the window."""
    h0, h1 = held_span(t, now)
    return t.state != "running" and h0 < h1 and since <= h0 and h1 <= until
