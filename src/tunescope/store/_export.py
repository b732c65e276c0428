"""A run's raw samples and events as rows: what ``tunescope export`` writes (CSV or JSON) and
what :func:`tunescope.load` turns into a pandas DataFrame, produced once, here.

Samples: ``run, trial, metric, host, device, t, elapsed_s, value`` (``host`` the host that
measured the series: each node of a multi-node trial has its own; ``device`` ``""`` for a
trial-level series, ``t`` UNIX seconds, ``elapsed_s`` since the run began rounded to 1 ms,
``value`` in the metric's base unit, see docs/metrics.md). Events: ``run, trial, kind, name,
step, t, elapsed_s, duration_s``. Samples the store cannot decode (a damaged database) are left
out (see :meth:`~tunescope.store.Store.corrupt_series`), and so are raw samples ``tunescope
compact`` dropped (listed in :attr:`ExportRows.dropped`; docs/retention.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunescope.errors import ConfigError, NotFound
from tunescope.metrics import metric
from tunescope.store._contract import Store
from tunescope.store._model import RunInfo, SeriesInfo, TrialInfo
from tunescope.store._open import open_store

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EVENT_COLUMNS", "SAMPLE_COLUMNS", "ExportRows", "export_rows", "load"]

SAMPLE_COLUMNS = ("run", "trial", "metric", "host", "device", "t", "elapsed_s", "value")
EVENT_COLUMNS = ("run", "trial", "kind", "name", "step", "t", "elapsed_s", "duration_s")


@dataclass
class ExportRows:
    """Rows in :data:`SAMPLE_COLUMNS` / :data:`EVENT_COLUMNS` order."""

    samples: list[list[Any]] = field(default_factory=list)
    events: list[list[Any]] = field(default_factory=list)
    dropped: list[tuple[RunInfo, TrialInfo, SeriesInfo, float]] = field(default_factory=list)
    """Series exported whose raw samples before a time were dropped (``tunescope compact``):
    only the raw samples kept are exported; their rollups answer windows (a SQL store says
    so; an HTTP store's rows carry what its server kept, unsaid)."""


def run_and_trials(
    st: Store, run: int | str, trial: str | None = None
) -> tuple[RunInfo, list[TrialInfo]]:
    """Run ``run`` (id or name) and its trials, or only its trial named ``trial``; NotFound
    (naming the run) for an unknown run or trial. Exports and reports pick trials this way."""
    r = st.get_run(run)
    ts = st.list_trials(r.id)
    if trial is not None:
        ts = [t for t in ts if t.name == trial]
        if not ts:
            raise NotFound(f"run {r.name!r} has no trial {trial!r}")
    return r, ts


def _metric_keys(metrics: str | Iterable[str] | None) -> list[str | None]:
    """``[None]`` (every metric) or the keys asked for, each checked against the catalog."""
    if metrics is None:
        return [None]
    keys = [metrics] if isinstance(metrics, str) else list(metrics)
    for key in keys:
        try:
            metric(key)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0])) from None
    return list(dict.fromkeys(keys))


def export_rows(
    st: Store,
    run: int | str,
    *,
    trial: str | None = None,
    metrics: str | Iterable[str] | None = None,
    samples: bool = True,
    events: bool = True,
) -> ExportRows:
    """The rows of run ``run`` (id or name), of one trial (by name) or all, of the metric
    keys asked for or all; NotFound for an unknown run or trial, ConfigError for an unknown
    metric key."""
    keys = _metric_keys(metrics)
    r, selected = run_and_trials(st, run, trial)
    t0 = r.start
    out = ExportRows()
    raw_from = getattr(st, "raw_from", None)
    for t in selected:
        if samples:
            for key in keys:
                for s in st.list_series(t.id, key):
                    ts, vs = st.read_samples(s.id)
                    gone = None if raw_from is None else raw_from(s.id)
                    if gone is not None:
                        out.dropped.append((r, t, s, gone))
                    out.samples.extend(
                        [r.name, t.name, s.metric, s.host, s.device or "", a, round(a - t0, 3), b]
                        for a, b in zip(ts.tolist(), vs.tolist(), strict=True)
                    )
        if events:
            out.events.extend(
                [r.name, t.name, e.kind, e.name or "", e.step, e.t, round(e.t - t0, 3), e.duration]
                for e in st.all_events(t.id)
            )
    return out


def load(
    run: int | str,
    store: str | None = None,
    trial: str | None = None,
    metrics: str | Iterable[str] | None = None,
) -> pd.DataFrame:
    """A run's samples as a pandas DataFrame in long form, one row per sample, with the
    columns of ``tunescope export`` (:data:`SAMPLE_COLUMNS`) and the same values.

    ``run``: an id (int) or a name; ``store``: a store URL (default ``$TUNESCOPE_STORE``,
    else ``./tunescope.db``; never created); ``trial``: only the trial of this name;
    ``metrics``: a catalog key or several (default all). Needs pandas
    (``pip install 'tunescope[pandas]'``)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("tunescope.load needs pandas: pip install 'tunescope[pandas]'") from None
    with open_store(store, create=False) as st:
        rows = export_rows(st, run, trial=trial, metrics=metrics, events=False)
    frame = pd.DataFrame(rows.samples, columns=list(SAMPLE_COLUMNS))
    return frame.astype({"t": "float64", "elapsed_s": "float64", "value": "float64"})
