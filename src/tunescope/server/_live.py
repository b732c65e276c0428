"""What every running trial uses now: the one "live snapshot" that the Prometheus collector
(``_prometheus.py``) and the OpenTelemetry exporter (``_otel.py``) both turn into series.

A snapshot holds the newest sample of every series of every running trial (``lost``,
finished and pruned trials are left out), each in the base unit of its kind
(:data:`UNITS`: a percentage as a 0–1 ratio, GiB as bytes, MHz as hertz, kJ as joules),
labelled by project, run, trial, host and GPU, and the trial's finding counts by severity.

Scrape cost is bounded: one runs list per project, the trials of running runs only, and one
:meth:`~tunescope.store.Store.latest` a running trial (at most one chunk decoded per series,
never a whole series). Findings read whole series, so they come from a
:class:`~tunescope.server._queries.FindingsCache` (a running trial is analysed again at most
every ``FINDINGS_REFRESH_S`` seconds) within a time budget per snapshot: a trial not yet
analysed has no finding counts until a later snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunescope.analyze import SEVERITIES
from tunescope.metrics import CATALOG, Metric
from tunescope.server._queries import FindingsCache, finding_counts
from tunescope.store import Store, TrialInfo

__all__ = ["UNITS", "Labels", "Live", "LiveValue", "Snapshot", "Unit", "base_value"]


@dataclass(frozen=True)
class Unit:
    """How a catalog display unit is exported: ``suffix`` (Prometheus' base unit name, ""
    for none), ``factor`` (multiplies a value in the display unit into it) and ``ucum``
    (the OpenTelemetry unit)."""

    suffix: str
    factor: float
    ucum: str


UNITS: dict[str, Unit] = {
    "%": Unit("ratio", 0.01, "1"),
    "GiB": Unit("bytes", 1024.0**3, "By"),
    "W": Unit("watts", 1.0, "W"),
    "°C": Unit("celsius", 1.0, "Cel"),
    "MHz": Unit("hertz", 1e6, "Hz"),
    "kJ": Unit("joules", 1e3, "J"),
    "s": Unit("seconds", 1.0, "s"),
    "cores": Unit("cores", 1.0, "{core}"),
    "count": Unit("", 1.0, "{count}"),
    "bitmask": Unit("", 1.0, "1"),
    "steps/s": Unit("steps_per_second", 1.0, "{step}/s"),
    "MiB/s": Unit("bytes_per_second", 1024.0**2, "By/s"),
}
"""Every display unit of the catalog (a test checks none is missing)."""


def base_value(m: Metric, stored: float) -> float:
    """A stored value of ``m`` in the exported base unit (stored x scale x factor)."""
    return stored * (m.scale * UNITS[m.unit].factor)


@dataclass(frozen=True)
class Labels:
    """Who a value is of. ``gpu`` is the device ("" for a trial's or host's metric)."""

    project: str
    run: str
    trial: str
    host: str
    gpu: str = ""


@dataclass(frozen=True)
class LiveValue:
    metric: Metric
    labels: Labels
    t: float
    value: float
    """In the base unit (:func:`base_value`)."""


@dataclass(frozen=True)
class Snapshot:
    values: list[LiveValue]
    findings: list[tuple[Labels, dict[str, int]]]
    """A running trial's finding counts by severity (every severity, 0 included), for the
    trials analysed in time (see the module doc); labels without a GPU."""


_CATALOG = {m.key: m for m in CATALOG}


class Live:
    """Snapshots of a store's running trials (see the module doc)."""

    def __init__(self, store: Store, findings: FindingsCache | None = None) -> None:
        self.store = store
        self.findings = findings if findings is not None else FindingsCache(store)

    def running(self, project: str | None) -> list[tuple[str, str, TrialInfo]]:
        """(project, run name, trial) of every running trial of ``project`` (None: every
        project), oldest run first."""
        projects = self.store.list_projects() if project is None else [project]
        out: list[tuple[str, str, TrialInfo]] = []
        for p in projects:
            for r in reversed(self.store.list_runs(project=p)):
                if r.state != "running":
                    continue
                out.extend((p, r.name, t) for t in self.store.list_trials(r.id))
        return [x for x in out if x[2].state == "running"]

    def snapshot(self, project: str | None = None) -> Snapshot:
        """The newest value of every metric of every running trial of ``project`` (None:
        every project), and their finding counts."""
        values: list[LiveValue] = []
        findings: list[tuple[Labels, dict[str, int]]] = []
        deadline = self.findings.list_deadline()
        for p, run, trial in self.running(project):
            base = Labels(p, run, trial.name, trial.host)
            for info, t, v in self.store.latest(trial.id):
                m = _CATALOG.get(info.metric)
                if m is None:  # a key this version does not know: no name or unit for it
                    continue
                # each node of a multi-node trial measures its own series
                labels = Labels(p, run, trial.name, info.host or trial.host, info.device or "")
                values.append(LiveValue(m, labels, t, base_value(m, v)))
            found = self.findings.trial(trial, deadline)
            counts = None if found is None else finding_counts({trial.id: found})
            if counts is not None:
                findings.append((base, {s: counts[s] for s in SEVERITIES}))
        return Snapshot(values, findings)
