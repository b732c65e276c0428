"""OpenTelemetry out: the live snapshot (``_live.py``) as OTLP metrics (the ``otel`` extra).

Every catalog metric is an observable instrument named by the OpenTelemetry hardware
semantic conventions where they have one (:data:`SEMCONV`: ``hw.gpu.utilization``,
``hw.gpu.memory.usage``, ``hw.gpu.memory.limit``, ``hw.power``, ``hw.energy``, with
``hw.type="gpu"`` and ``hw.id`` the device), else ``tunescope.<key>``; values in the same
base units as the Prometheus series (a ratio for a percentage, bytes, watts, joules…), with
the attributes ``project``, ``run``, ``trial``, ``host`` and ``gpu`` (the device; absent for a
trial's or host's metric). ``tunescope.findings`` counts a running trial's findings by
``severity``.

:func:`start_otlp` pushes them to an OTLP/HTTP endpoint every export interval (the SDK's
``OTEL_METRIC_EXPORT_INTERVAL``, 60 s by default) from the SDK's own thread, which reads the
store once per export: the instruments of one collection share one snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from tunescope import __version__
from tunescope._once import Once
from tunescope.errors import StoreError
from tunescope.metrics import CATALOG, Metric
from tunescope.server._live import UNITS, Labels, Live, Snapshot

__all__ = [
    "FINDINGS",
    "SEMCONV",
    "SNAPSHOT_REUSE_S",
    "OtelExport",
    "metrics_url",
    "otel_name",
    "start_otlp",
]

log = logging.getLogger("tunescope.server")
_once = Once(log)

SEMCONV: dict[str, tuple[str, str]] = {
    "gpu.util": ("hw.gpu.utilization", "gauge"),
    "gpu.mem.used": ("hw.gpu.memory.usage", "updowncounter"),
    "gpu.mem.total": ("hw.gpu.memory.limit", "updowncounter"),
    "gpu.power": ("hw.power", "gauge"),
    "gpu.energy": ("hw.energy", "counter"),
}
"""Catalog keys with a name in the OpenTelemetry hardware semantic conventions (GPU and
common hardware metrics), and the instrument kind the conventions give it."""

FINDINGS = "tunescope.findings"

SNAPSHOT_REUSE_S = 1.0
"""The instruments of one collection share a snapshot taken at most this long ago."""


def otel_name(m: Metric) -> str:
    """The instrument name of a catalog metric (see the module doc)."""
    return SEMCONV[m.key][0] if m.key in SEMCONV else f"tunescope.{m.key}"


def _attributes(labels: Labels, hw: bool = False) -> dict[str, str]:
    """The attributes of a value: ``hw``: with the hardware conventions' own as well."""
    out = {
        "project": labels.project,
        "run": labels.run,
        "trial": labels.trial,
        "host": labels.host,
    }
    if labels.gpu:
        out["gpu"] = labels.gpu
        if hw:
            out.update({"hw.type": "gpu", "hw.id": labels.gpu})
    return out


class OtelExport:
    """Observable instruments over a :class:`Live` source, read by ``reader``; every project
    of the store (the exporter is the server's, set up by whoever runs it)."""

    def __init__(
        self,
        live: Live,
        reader: MetricReader,
        *,
        reuse_s: float = SNAPSHOT_REUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.live = live
        self._reuse_s = reuse_s
        self._clock = clock
        self._lock = threading.Lock()
        self._taken: tuple[float, Snapshot] | None = None
        self.provider = MeterProvider(
            metric_readers=[reader],
            resource=Resource.create({"service.name": "tunescope", "service.version": __version__}),
        )
        meter = self.provider.get_meter("tunescope", __version__)
        make = {
            "gauge": meter.create_observable_gauge,
            "updowncounter": meter.create_observable_up_down_counter,
            "counter": meter.create_observable_counter,
        }
        for m in CATALOG:
            kind = SEMCONV[m.key][1] if m.key in SEMCONV else "gauge"
            make[kind](
                otel_name(m),
                callbacks=[self._observer(m)],
                unit=UNITS[m.unit].ucum,
                description=f"{m.label}: {m.description}",
            )
        meter.create_observable_gauge(
            FINDINGS,
            callbacks=[self._findings],
            unit="{finding}",
            description="Findings of a running trial, by severity (docs/findings.md).",
        )

    def snapshot(self) -> Snapshot:
        """The snapshot of this collection (see :data:`SNAPSHOT_REUSE_S`); an empty one,
        logged once, while the store cannot be read."""
        with self._lock:
            now = self._clock()
            if self._taken is not None and now - self._taken[0] < self._reuse_s:
                return self._taken[1]
            try:
                snap = self.live.snapshot()
            except StoreError as exc:
                _once("otel-store", "OpenTelemetry export: the store cannot be read: %s", exc)
                snap = Snapshot([], [])
            self._taken = (now, snap)
            return snap

    def _observer(self, m: Metric) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(v.value, _attributes(v.labels, m.key in SEMCONV))
                for v in self.snapshot().values
                if v.metric.key == m.key
            ]

        return observe

    def _findings(self, options: CallbackOptions) -> Iterable[Observation]:
        out: list[Observation] = []
        for labels, counts in self.snapshot().findings:
            attrs = _attributes(labels)
            out.extend(Observation(n, {**attrs, "severity": s}) for s, n in counts.items())
        return out

    def shutdown(self) -> None:
        """Export one last time and stop (the reader's thread too)."""
        self.provider.shutdown()


def metrics_url(endpoint: str) -> str:
    """The OTLP/HTTP metrics URL of a collector's base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``
    style): ``/v1/metrics`` appended unless it is there."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/metrics") else base + "/v1/metrics"


def start_otlp(live: Live, endpoint: str, *, interval_s: float | None = None) -> OtelExport:
    """Push the live snapshot to the OTLP/HTTP collector at ``endpoint`` (its base URL) every
    ``interval_s`` seconds (None: the SDK's ``OTEL_METRIC_EXPORT_INTERVAL``, else 60 s)."""
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=metrics_url(endpoint)),
        export_interval_millis=None if interval_s is None else interval_s * 1000.0,
    )
    return OtelExport(live, reader)
