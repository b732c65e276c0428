"""Security headers on every response, and the Host check against DNS rebinding, on the real
app: the page, its files, the API and every kind of error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from api_helpers import app_over, request
from http_helpers import run_async
from tunescope.server import create_app, serve
from tunescope.server._app import release_store
from tunescope.server._security import CSP

ROOT = Path(__file__).resolve().parents[1]
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _assert_secured(r: httpx.Response) -> None:
    for name, value in HEADERS.items():
        assert r.headers.get(name) == value, (r.request.url, name)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>page</title>")
    (root / "assets" / "app.js").write_text("console.log('page')")
    return root


@pytest.fixture
def app(store_file: str, site: Path) -> Iterator[FastAPI]:
    with app_over(store_file, static_dir=site) as application:
        yield application


def _app_with(store_file: str, site: Path, hosts: list[str]) -> FastAPI:
    return create_app(store_file, static_dir=site, allowed_hosts=hosts)


# ------------------------------------------------------------------------------ headers
@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/", 200),  # the page
        ("GET", "/runs/3", 200),  # a page route
        ("GET", "/assets/app.js", 200),  # a static file
        ("GET", "/api/health", 200),  # the API
        ("GET", "/api/openapi.json", 200),
        ("GET", "/api/docs", 200),
        ("GET", "/api/runs/nope", 404),  # errors of every kind
        ("GET", "/assets/missing.js", 404),
        ("GET", "/api/trials/1/series?metric=gpu.mem&points=0", 422),
        ("DELETE", "/api/runs", 405),
    ],
)
def test_every_response_carries_the_security_headers(
    app: FastAPI, method: str, path: str, status: int
) -> None:
    r = request(app, path, method=method)
    assert r.status_code == status
    _assert_secured(r)


def test_an_unexpected_error_carries_them_too(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.state.store, "list_runs", broken)
    r = request(app, "/api/runs", raise_app_exceptions=False)
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal"
    _assert_secured(r)


def test_the_header_policy_is_the_pages_meta_policy_and_no_framing() -> None:
    html = (ROOT / "web" / "src" / "index.html").read_text(encoding="utf-8")
    meta = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', html)
    assert meta is not None
    assert f"{meta.group(1)}; frame-ancestors 'none'" == CSP


# ------------------------------------------------------------------------------ Host check
@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8765", "LocalHost:1", "127.0.0.1:8765", "[::1]:8765", "[::1]"]
)
def test_local_names_are_answered_at_any_port(app: FastAPI, host: str) -> None:
    r = request(app, "/api/health", host=host)
    assert r.status_code == 200 and r.json()["ok"] is True


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8765",
        "localhost.evil.example",
        "127.0.0.1.nip.io:8765",
        "[::1",
        "0.0.0.0:8765",
        "",
    ],
)
def test_other_names_get_400_bad_host_and_reach_nothing(
    app: FastAPI, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    list_runs = app.state.store.list_runs

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append("runs")
        return list_runs(*args, **kwargs)

    monkeypatch.setattr(app.state.store, "list_runs", counted)
    for path in ("/api/runs", "/", "/assets/app.js"):
        r = request(app, path, host=host)
        assert r.status_code == 400
        assert r.headers["content-type"] == "application/json"
        body = r.json()
        assert list(body) == ["error"] and list(body["error"]) == ["status", "code", "message"]
        assert (body["error"]["status"], body["error"]["code"]) == (400, "bad_host")
        assert "--allow-host" in body["error"]["message"]
        assert r.headers["cache-control"] == "no-store"
        _assert_secured(r)
    assert reads == []
    assert request(app, "/api/runs").status_code == 200 and reads == ["runs"]


def test_a_request_without_a_host_header_is_refused(app: FastAPI) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.0",
        "method": "GET",
        "scheme": "http",
        "path": "/api/health",
        "raw_path": b"/api/health",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8765),
    }
    run_async(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 400
    assert b'"code":"bad_host"' in b"".join(m.get("body", b"") for m in sent[1:])


def test_extra_names_and_the_wildcard(store_file: str, site: Path) -> None:
    app = _app_with(store_file, site, ["Box.LAN", "::2"])
    try:
        assert request(app, "/api/health", host="box.lan:8765").status_code == 200
        assert request(app, "/api/health", host="[::2]:8765").status_code == 200
        assert request(app, "/api/health", host="localhost").status_code == 200
        assert request(app, "/api/health", host="box.lan.evil.example").status_code == 400
    finally:
        release_store(app.state.store)
    anyhost = _app_with(store_file, site, ["*"])
    try:
        r = request(anyhost, "/api/health", host="tunescope.example.org")
        assert r.status_code == 200
        _assert_secured(r)
    finally:
        release_store(anyhost.state.store)


@pytest.mark.parametrize(
    ("bind", "extra", "answered", "refused"),
    [
        ("127.0.0.1", [], ["127.0.0.1:8765", "localhost:8765"], ["192.168.1.5:8765"]),
        ("192.168.1.5", [], ["192.168.1.5:8765", "localhost:8765"], ["box.lan:8765"]),
        ("fe80::1", [], ["[fe80::1]:8765"], ["box.lan:8765"]),
        ("0.0.0.0", [], ["localhost:8765"], ["0.0.0.0:8765", "192.168.1.5:8765"]),
        ("::", ["box.lan"], ["box.lan:8765", "[::1]:8765"], ["[::]:8765", "evil.example"]),
        ("0.0.0.0", ["*"], ["box.lan:8765", "evil.example"], []),
    ],
)
def test_serve_answers_the_bound_address_unless_a_wildcard(
    store_file: str,
    monkeypatch: pytest.MonkeyPatch,
    bind: str,
    extra: list[str],
    answered: list[str],
    refused: list[str],
) -> None:
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append((app, kwargs)))
    serve(store_file, host=bind, allowed_hosts=extra)
    ((app, kwargs),) = served
    try:
        assert kwargs["host"] == bind
        for host in answered:
            assert request(app, "/api/health", host=host).status_code == 200, host
        for host in refused:
            assert request(app, "/api/health", host=host).status_code == 400, host
    finally:
        release_store(app.state.store)
