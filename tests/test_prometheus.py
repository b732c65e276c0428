"""``GET /metrics``: the newest value of every metric of every running trial, in Prometheus'
text format, on the real ASGI app over a real SQLite file; a real Prometheus scraping a real
``tunescope serve`` with a bearer token; the names, the docs' table and the Grafana dashboard
checked against the catalog."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from api_helpers import request
from http_helpers import free_port
from live_helpers import Expected, fill_live, read_token
from tunescope.analyze import SEVERITIES
from tunescope.metrics import CATALOG, metric
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.server._live import UNITS
from tunescope.server._otel import otel_name
from tunescope.server._prometheus import FINDINGS, prometheus_name

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "prometheus.md"
DASHBOARD = ROOT / "docs" / "grafana" / "tunescope.json"
PROMETHEUS = "/usr/bin/prometheus"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, sorted labels) -> value of every sample of an exposition."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def key_of(e: Expected) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"project": e.project, "run": e.run, "trial": e.trial, "host": e.host, "gpu": e.gpu}
    return prometheus_name(metric(e.key)), tuple(sorted(labels.items()))


@pytest.fixture
def live_url(store_file: str) -> tuple[str, dict[str, list[Expected]]]:
    return store_file, fill_live(store_file)


@pytest.fixture
def local_app(live_url: tuple[str, dict[str, list[Expected]]]) -> Iterator[FastAPI]:
    app = create_app(live_url[0])
    try:
        yield app
    finally:
        release_store(app.state.store)


def test_names_follow_prometheus_rules_and_cover_the_catalog() -> None:
    names = [prometheus_name(m) for m in CATALOG]
    assert len(set(names)) == len(names)
    for m, name in zip(CATALOG, names, strict=True):
        assert re.fullmatch(r"tunescope(_[a-z0-9]+)+", name), name
        assert m.unit in UNITS, f"no exported unit for {m.unit!r} ({m.key})"
        assert name.endswith(UNITS[m.unit].suffix)
    assert prometheus_name(metric("gpu.util")) == "tunescope_gpu_utilization_ratio"
    assert prometheus_name(metric("cpu.mem")) == "tunescope_cpu_memory_bytes"
    assert prometheus_name(metric("gpu.clock.sm")) == "tunescope_gpu_clock_sm_hertz"
    assert prometheus_name(metric("gpu.power")) == "tunescope_gpu_power_watts"


def test_the_docs_table_is_the_catalogs() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `tunescope_")]
    want = []
    for m in CATALOG:
        u = UNITS[m.unit]
        want.append(
            f"| `{prometheus_name(m)}` | `{m.key}` | `{m.unit}` → {u.suffix or 'no unit'} "
            f"| `{otel_name(m)}` (`{u.ucum}`) |"
        )
    assert rows == want


def test_metrics_shows_the_running_trials_newest_values_scaled(
    local_app: FastAPI, live_url: tuple[str, dict[str, list[Expected]]]
) -> None:
    r = request(local_app, "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    got = samples(r.text)
    want = {key_of(e): e.value for es in live_url[1].values() for e in es}
    assert len(want) == 2 * 7
    shown = {k: v for k, v in got.items() if k[0] != FINDINGS}
    assert shown == want  # the finished trials' series are not there
    newest = {(e.key, e.gpu): e for e in live_url[1]["vision"]}
    assert got[key_of(newest["gpu.util", "0"])] == 0.55  # 55 % as a ratio
    assert got[key_of(newest["gpu.clock.sm", ""])] == 1980e6  # MHz as hertz
    assert got[key_of(newest["gpu.mem", "0"])] == 3.5 * 2**30  # bytes as stored
    for project in ("vision", "nlp"):
        for severity in SEVERITIES:
            labels = {
                "severity": severity,
                "project": project,
                "run": f"{project}-sweep",
                "trial": "live",
                "host": "gpu0" if project == "vision" else "gpu1",
            }
            assert (FINDINGS, tuple(sorted(labels.items()))) in got


def test_a_lost_trial_leaves_the_metrics(live_url: tuple[str, dict[str, list[Expected]]]) -> None:
    from tunescope.store import open_store

    url = live_url[0]
    with open_store(url) as st:
        run = st.list_runs(project="nlp")[0]
        live = st.find_trial(run.id, "live")
        st.update_trial(live.id, heartbeat=time.time() - 3600)  # no heartbeat for an hour
        assert st.get_trial(live.id).state == "lost"
    app = create_app(url)
    try:
        got = samples(request(app, "/metrics").text)
    finally:
        release_store(app.state.store)
    assert {dict(labels)["project"] for _, labels in got} == {"vision"}


def test_only_the_route_metrics_is_new(local_app: FastAPI) -> None:
    """Paths next to /metrics answer as any unknown page path does."""
    other = request(local_app, "/no-such-page")
    for path in ("/metrics/", "/metricsx", "/metrics/x", "/api/metricsx"):
        r = request(local_app, path)
        if path.startswith("/api/"):
            assert r.status_code == 404
            continue
        assert (r.status_code, r.text) == (other.status_code, other.text), path
        assert "tunescope_" not in r.text


def test_a_team_server_needs_a_token_and_shows_its_project_only(
    live_url: tuple[str, dict[str, list[Expected]]],
) -> None:
    url, want = live_url
    tokens = {p: read_token(url, p) for p in want}
    app = create_app(url, auth="tokens")
    try:
        r = request(app, "/metrics")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "unauthorized"
        bad = request(app, "/metrics", headers={"Authorization": "Bearer ts_nonsense"})
        assert bad.status_code == 401
        for project, token in tokens.items():
            r = request(app, "/metrics", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200
            got = samples(r.text)
            assert {dict(labels)["project"] for _, labels in got} == {project}
            assert {k: v for k, v in got.items() if k[0] != FINDINGS} == {
                key_of(e): e.value for e in want[project]
            }
    finally:
        release_store(app.state.store)


def _exprs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "query") and isinstance(v, str):  # panels' and variables' queries
                yield v
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


def test_the_grafana_dashboard_queries_only_metrics_the_exporter_emits() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = list(_exprs(board))
    assert len(exprs) >= 6
    emitted = {prometheus_name(m) for m in CATALOG} | {FINDINGS}
    used = set()
    for expr in exprs:
        names = set(re.findall(r"\btunescope_[a-z0-9_]+", expr))
        assert names, f"no tunescope metric in {expr!r}"
        assert names <= emitted, f"{expr!r} names {sorted(names - emitted)}"
        used |= names
    for key in ("gpu.util", "cpu.util", "gpu.mem", "cpu.mem"):
        assert prometheus_name(metric(key)) in used


# ---------------------------------------------------------------------- a real Prometheus
def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.slow
def test_a_real_prometheus_scrapes_tunescope_serve_with_a_bearer_token(
    tmp_path: Path, live_url: tuple[str, dict[str, list[Expected]]]
) -> None:
    url, want = live_url
    token_file = tmp_path / "token"
    token_file.write_text(read_token(url, "vision"))
    serve_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: tunescope\n"
        "    metrics_path: /metrics\n"
        f"    authorization: {{type: Bearer, credentials_file: {token_file}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]\n"
    )
    procs: list[subprocess.Popen[bytes]] = []
    logs = {"serve": tmp_path / "serve.log", "prometheus": tmp_path / "prometheus.log"}
    try:
        serve = [sys.executable, "-m", "tunescope", "serve", "--store", url,
                 "--port", str(serve_port)]  # fmt: skip
        with logs["serve"].open("wb") as out:
            procs.append(subprocess.Popen(serve, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        _wait_http(f"http://127.0.0.1:{serve_port}/api/health", procs[0], logs["serve"], deadline)
        prometheus = [PROMETHEUS, f"--config.file={config}",
                      f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                      f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
        with logs["prometheus"].open("wb") as out:
            procs.append(subprocess.Popen(prometheus, stdout=out, stderr=subprocess.STDOUT))
        api = f"http://127.0.0.1:{prom_port}/api/v1/query"
        _wait_http(f"http://127.0.0.1:{prom_port}/-/ready", procs[1], logs["prometheus"], deadline)

        def query(q: str) -> list[dict[str, object]]:
            body = httpx.get(api, params={"query": q}, timeout=5).json()
            assert body["status"] == "success", body
            return list(body["data"]["result"])

        names = sorted({prometheus_name(metric(e.key)) for e in want["vision"]})
        q = "{__name__=~'" + "|".join(names) + "'}"
        while len(result := query(q)) < len(want["vision"]):
            assert time.monotonic() < deadline, (result, logs["prometheus"].read_text()[-3000:])
            time.sleep(0.2)
        got = {}
        for series in result:
            labels = dict(series["metric"])  # type: ignore[call-overload]
            assert labels.pop("job") == "tunescope"
            assert labels.pop("instance") == f"127.0.0.1:{serve_port}"
            name = labels.pop("__name__")
            labels.setdefault("gpu", "")  # Prometheus drops an empty label
            got[(name, tuple(sorted(labels.items())))] = float(series["value"][1])  # type: ignore[index]
        assert got == {key_of(e): e.value for e in want["vision"]}
        # the token's project only: nlp's running trial is not scraped
        assert query("count(tunescope_gpu_utilization_ratio{project='nlp'})") == []
        up = query("up{job='tunescope'}")
        assert up and up[0]["value"][1] == "1"  # type: ignore[index]
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(15)
