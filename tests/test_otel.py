"""OpenTelemetry out: the running trials' newest values as OTLP metrics, read by the SDK's
in-memory reader and pushed by the real OTLP/HTTP exporter to a receiver on a loopback port
(a tiny http.server decoding the protobuf with opentelemetry-proto)."""

from __future__ import annotations

import gzip
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from http_helpers import free_port
from live_helpers import Expected, fill_live
from tunescope.analyze import SEVERITIES
from tunescope.metrics import CATALOG, metric
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.server._live import UNITS, Live
from tunescope.server._otel import FINDINGS, SEMCONV, OtelExport, metrics_url, otel_name
from tunescope.store import open_store

Points = dict[tuple[str, frozenset[tuple[str, str]]], float]


def attributes(e: Expected) -> dict[str, str]:
    out = {"project": e.project, "run": e.run, "trial": e.trial, "host": e.host}
    if e.gpu:
        out["gpu"] = e.gpu
        if e.key in SEMCONV:
            out |= {"hw.type": "gpu", "hw.id": e.gpu}
    return out


def wanted(live: dict[str, list[Expected]]) -> Points:
    return {
        (otel_name(metric(e.key)), frozenset(attributes(e).items())): e.value
        for es in live.values()
        for e in es
    }


@pytest.fixture
def live_url(store_file: str) -> tuple[str, dict[str, list[Expected]]]:
    return store_file, fill_live(store_file)


def test_names_are_the_hardware_conventions_else_tunescope() -> None:
    assert otel_name(metric("gpu.util")) == "hw.gpu.utilization"
    assert otel_name(metric("gpu.mem.used")) == "hw.gpu.memory.usage"
    assert otel_name(metric("gpu.mem.total")) == "hw.gpu.memory.limit"
    assert otel_name(metric("gpu.power")) == "hw.power"
    assert otel_name(metric("gpu.mem")) == "tunescope.gpu.mem"
    assert set(SEMCONV) <= {m.key for m in CATALOG}
    assert metrics_url("http://c:4318") == "http://c:4318/v1/metrics"
    assert metrics_url("http://c:4318/v1/metrics") == "http://c:4318/v1/metrics"


def test_an_in_memory_reader_gets_every_running_trials_newest_values(
    live_url: tuple[str, dict[str, list[Expected]]],
) -> None:
    url, live = live_url
    reader = InMemoryMetricReader()
    with open_store(url) as st:
        export = OtelExport(Live(st), reader, reuse_s=0.0)
        try:
            data = reader.get_metrics_data()
        finally:
            export.shutdown()
    assert data is not None
    got: Points = {}
    units = {}
    findings = []
    for rm in data.resource_metrics:
        assert rm.resource.attributes["service.name"] == "tunescope"
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                units[m.name] = m.unit
                for p in m.data.data_points:
                    attrs = dict(p.attributes or {})
                    if m.name == FINDINGS:
                        findings.append(attrs)
                        continue
                    got[(m.name, frozenset((k, str(v)) for k, v in attrs.items()))] = p.value
    assert got == wanted(live)
    assert got[
        (
            "hw.gpu.utilization",
            frozenset(
                {
                    "project": "vision",
                    "run": "vision-sweep",
                    "trial": "live",
                    "host": "gpu0",
                    "gpu": "0",
                    "hw.type": "gpu",
                    "hw.id": "0",
                }.items()
            ),
        )
    ] == pytest.approx(0.55)
    assert units["hw.gpu.utilization"] == "1" and units["tunescope.cpu.mem"] == "By"
    assert units["hw.power"] == UNITS["W"].ucum == "W"
    assert sorted((f["project"], f["severity"]) for f in findings) == sorted(
        (p, s) for p in live for s in SEVERITIES
    )


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list[ExportMetricsServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        assert self.path == "/v1/metrics"
        assert self.headers["Content-Type"] == "application/x-protobuf"
        self.got.append(req)
        answer = ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[ExportMetricsServiceRequest]]]:
    got: list[ExportMetricsServiceRequest] = []
    handler = type("Receiver", (_Receiver,), {"got": got})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _value(p: Any) -> float:
    return float(p.as_double if p.HasField("as_double") else p.as_int)


def test_the_app_pushes_otlp_http_to_a_loopback_receiver(
    live_url: tuple[str, dict[str, list[Expected]]],
    receiver: tuple[str, list[ExportMetricsServiceRequest]],
) -> None:
    url, live = live_url
    endpoint, got = receiver
    app = create_app(url, otlp_endpoint=endpoint)
    try:
        app.state.otel.shutdown()  # what the app's shutdown does: one last export, then stop
    finally:
        release_store(app.state.store)
    assert got, "the receiver got nothing"
    points: Points = {}
    kinds = {}
    for req in got:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kinds[m.name] = m.WhichOneof("data")
                    data = getattr(m, kinds[m.name])
                    for p in data.data_points:
                        attrs = frozenset((a.key, a.value.string_value) for a in p.attributes)
                        if m.name != FINDINGS:
                            points[(m.name, attrs)] = _value(p)
    assert points == wanted(live)
    assert kinds["hw.gpu.utilization"] == "gauge" and kinds["hw.power"] == "gauge"
    assert kinds[FINDINGS] == "gauge"


@pytest.mark.slow
def test_tunescope_ui_pushes_to_the_collector_its_option_names(
    live_url: tuple[str, dict[str, list[Expected]]],
    receiver: tuple[str, list[ExportMetricsServiceRequest]],
    tmp_path: Path,
) -> None:
    """`tunescope ui --otlp-endpoint URL` for real: a subprocess exporting every 0.2 s."""
    url, live = live_url
    endpoint, got = receiver
    port = free_port()
    env = {**os.environ, "OTEL_METRIC_EXPORT_INTERVAL": "200"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunescope", "ui", "--store", url, "--port", str(port),
             "--otlp-endpoint", endpoint],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        names: set[str] = set()
        while "hw.gpu.utilization" not in names:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
            names = {m.name for r in list(got) for rm in r.resource_metrics
                     for sm in rm.scope_metrics for m in sm.metrics}  # fmt: skip
        assert {otel_name(metric(e.key)) for es in live.values() for e in es} <= names
    finally:
        proc.terminate()
        proc.wait(15)
