"""The web page at ``/``: built files, the page's routes, the not-built note, and that nothing
outside the static folder is ever served. Also: creating the app binds no socket."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from api_helpers import app_over
from http_helpers import run_async
from tunescope.server import create_app
from tunescope.server._app import release_store

INDEX = "<!doctype html><title>tunescope page</title>"


def get(app: FastAPI, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(url)

    return run_async(go())


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "app.js").write_text("console.log('page')")
    (tmp_path / "secret.txt").write_text("do not serve")
    try:
        (root / "assets" / "link.txt").symlink_to(tmp_path / "secret.txt")
    except OSError:
        pass
    return root


@pytest.fixture
def app(store_file: str, site: Path) -> Iterator[FastAPI]:
    with app_over(store_file, static_dir=site) as application:
        yield application


def test_index_and_files(app: FastAPI) -> None:
    r = get(app, "/")
    assert r.status_code == 200 and r.text == INDEX
    assert r.headers["content-type"].startswith("text/html")
    assert "no-store" not in r.headers.get("cache-control", "")
    js = get(app, "/assets/app.js")
    assert js.status_code == 200 and js.text == "console.log('page')"


@pytest.mark.parametrize("path", ["/runs/3", "/runs/search/trials/2", "/compare"])
def test_page_routes_fall_back_to_index(app: FastAPI, path: str) -> None:
    r = get(app, path)
    assert r.status_code == 200 and r.text == INDEX


def test_missing_asset_and_unknown_api_route_are_404(app: FastAPI) -> None:
    r = get(app, "/assets/missing.js")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    api = get(app, "/api/runs/1/nothing/here")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
    assert api.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "path",
    [
        "/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/assets/%2e%2e/%2e%2e/secret.txt",
        "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets/link.txt",
    ],
)
def test_nothing_outside_the_static_folder_is_served(app: FastAPI, path: str) -> None:
    r = get(app, path)
    assert "do not serve" not in r.text and "root:" not in r.text
    assert r.status_code in (200, 404)
    if r.status_code == 200:  # a page route: the index, never the file
        assert r.text == INDEX


async def _raw_get(app: FastAPI, path: str) -> tuple[int, bytes]:
    """A GET whose path reaches the app exactly as given (no client normalisation)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 1),
        "server": ("localhost", 80),
    }
    sent: list[MutableMapping[str, Any]] = []
    requested = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal requested
        if requested:  # the client stays connected until the app is done
            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(int(m["status"]) for m in sent if m["type"] == "http.response.start")
    body = b"".join(bytes(m.get("body", b"")) for m in sent if m["type"] == "http.response.body")
    return status, body


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/assets/../../secret.txt",
        "//etc/passwd",
        "/../../../../../../etc/passwd",
        "/assets/../../static/../secret.txt",
    ],
)
def test_raw_traversal_paths_are_refused(app: FastAPI, path: str) -> None:
    status, body = run_async(_raw_get(app, path))
    assert b"do not serve" not in body and b"root:" not in body
    assert status == 404 or body == INDEX.encode()


def test_not_built_page_says_how_to_build(store_file: str, tmp_path: Path) -> None:
    application = create_app(store_file, static_dir=tmp_path / "nothing-here")
    try:
        for path in ("/", "/runs/1"):
            r = get(application, path)
            assert r.status_code == 200 and "make web" in r.text
        assert get(application, "/api/health").status_code == 200
    finally:
        release_store(application.state.store)


def test_creating_the_app_binds_nothing_and_keeps_layering(store_file: str) -> None:
    script = textwrap.dedent(f"""
        import socket, sys
        def refuse(*a, **k):
            raise AssertionError("bound a socket")
        socket.socket.bind = refuse
        socket.socket.listen = refuse
        import tunescope.server as server
        app = server.create_app({store_file!r})
        bad = [m for m in sys.modules if m.startswith(("tunescope.collect", "tunescope.record"))]
        assert not bad, bad
        print("ok")
    """)
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
