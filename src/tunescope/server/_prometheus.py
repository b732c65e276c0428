"""``GET /metrics``: the live snapshot (``_live.py``) in Prometheus' text format.

Names are derived from the catalog, by Prometheus' naming rules: ``tunescope_`` + the
metric's key with its words spelled out (``mem`` → ``memory``, :data:`WORDS`) + the base
unit of its display unit (``_live.UNITS``): ``gpu.util`` → ``tunescope_gpu_utilization_ratio``,
``cpu.mem`` → ``tunescope_cpu_memory_bytes``. Every series is a gauge labelled ``project``,
``run``, ``trial``, ``host`` and ``gpu`` (the device; empty for a trial's or host's metric);
``tunescope_findings{severity, project, run, trial, host}`` counts a trial's findings.

The collector reads the store when Prometheus scrapes (no thread of its own), for the
request's principal: a team server's token sees its project only, the local viewer every
project. docs/prometheus.md has the table of names (a test keeps it true).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from tunescope.metrics import CATALOG
from tunescope.metrics import Metric as CatalogMetric
from tunescope.server._live import UNITS, Live

__all__ = ["CONTENT_TYPE", "FINDINGS", "LABELS", "WORDS", "exposition", "prometheus_name"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

WORDS = {
    "util": "utilization",
    "mem": "memory",
    "bw": "bandwidth",
    "temp": "temperature",
    "procs": "processes",
}
"""Abbreviations of the catalog's keys, spelled out in exported names."""

LABELS = ("project", "run", "trial", "host", "gpu")
FINDINGS = "tunescope_findings"


def prometheus_name(m: CatalogMetric) -> str:
    """The exported name of a catalog metric (see the module doc)."""
    words = [WORDS.get(w, w) for w in re.split(r"[._]", m.key)]
    suffix = UNITS[m.unit].suffix
    return "_".join(["tunescope", *words, *([suffix] if suffix else [])])


_NAMES = {m.key: prometheus_name(m) for m in CATALOG}


class _Collector:
    """The snapshot of ``project`` (None: every project) as metric families."""

    def __init__(self, live: Live, project: str | None) -> None:
        self.live = live
        self.project = project

    def collect(self) -> Iterator[Metric]:
        snap = self.live.snapshot(self.project)
        families: dict[str, GaugeMetricFamily] = {}
        for v in snap.values:
            fam = families.get(v.metric.key)
            if fam is None:
                fam = families[v.metric.key] = GaugeMetricFamily(
                    _NAMES[v.metric.key], f"{v.metric.label}: {v.metric.description}", labels=LABELS
                )
            lab = v.labels
            fam.add_metric([lab.project, lab.run, lab.trial, lab.host, lab.gpu], v.value)
        yield from families.values()
        found = GaugeMetricFamily(
            FINDINGS,
            "Findings of a running trial, by severity (docs/findings.md).",
            labels=("severity", *LABELS[:4]),
        )
        for lab, counts in snap.findings:
            for severity, n in counts.items():
                found.add_metric([severity, lab.project, lab.run, lab.trial, lab.host], n)
        yield found


def exposition(live: Live, project: str | None) -> bytes:
    """The text Prometheus scrapes: the snapshot of ``project`` (None: every project)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(live, project))
    return generate_latest(registry)
