"""docs/api.md and the app agree: every route the app serves is documented, and every
documented route exists."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api_helpers import app_over
from browser_helpers import ensure_built
from http_helpers import run_async
from tunescope import server
from tunescope.server import create_app
from tunescope.server._app import release_store

API_MD = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.fixture
def app(store_file: str) -> Iterator[FastAPI]:
    with app_over(store_file) as application:
        yield application


def _documented() -> set[tuple[str, str]]:
    routes = set()
    for line in API_MD.read_text().splitlines():
        m = re.match(r"\|\s*`(GET|POST|PUT|PATCH|DELETE) (/api/[^`?\s]*|/metrics)[^`]*`\s*\|", line)
        if m:
            routes.add((m.group(1), m.group(2)))
    return routes


def _served(app: FastAPI) -> set[tuple[str, str]]:
    doc = app.openapi()
    return {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}


def test_every_route_is_documented_and_every_documented_route_exists(app: FastAPI) -> None:
    documented, served = _documented(), _served(app)
    assert len(documented) >= 11
    assert served - documented == set(), "routes missing from docs/api.md"
    assert documented - served == set(), "docs/api.md lists routes the app lacks"


def test_openapi_and_docs_are_under_api(app: FastAPI) -> None:
    assert app.openapi_url == "/api/openapi.json" and "/api/openapi.json" in API_MD.read_text()
    assert app.docs_url is None, "FastAPI's own docs page loads Swagger UI from a CDN"
    assert "/api/docs" in {getattr(r, "path", None) for r in app.routes}


def test_serve_binds_localhost_by_default() -> None:
    params = inspect.signature(server.serve).parameters
    assert params["host"].default == "127.0.0.1"
    assert params["port"].default == 8765 and params["open_browser"].default is False


def test_public_face() -> None:
    assert sorted(server.__all__) == [
        "ApiError",
        "create_app",
        "page_host",
        "release_store",
        "serve",
    ]
    for name in server.__all__:
        assert getattr(server, name).__doc__


class _Assets(HTMLParser):
    """The scripts, stylesheets and inline code of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.inline: list[str] = []
        self._in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a.get("src") or "")
            self._in_code = True
        elif tag == "style":
            self._in_code = True
        elif tag == "link" and a.get("rel") == "stylesheet":
            self.styles.append(a.get("href") or "")
        self.inline += [f"{k}=" for k, _ in attrs if k == "style" or k.startswith("on")]

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._in_code = False

    def handle_data(self, data: str) -> None:
        if self._in_code and data.strip():
            self.inline.append(data.strip())


def _get(app: FastAPI, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(url)

    return run_async(go())


@pytest.fixture
def built_app(store_file: str) -> Iterator[FastAPI]:
    """The app over the package's built page (built now when missing or stale)."""
    ensure_built()
    with app_over(store_file) as application:
        yield application


def test_api_docs_load_only_same_origin_files(built_app: FastAPI) -> None:
    r = _get(built_app, "/api/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = _Assets()
    page.feed(r.text)
    assert len(page.scripts) == 2 and len(page.styles) == 1
    assert page.inline == [], "inline script or style: the CSP blocks it"
    assert not re.search(r"(?i)\b(https?:)?//", r.text), "a URL to another host"
    for url in page.scripts + page.styles:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = _get(built_app, url)
        assert asset.status_code == 200, url
        kind = "text/css" if url in page.styles else "text/javascript"
        assert asset.headers["content-type"].startswith(kind), url
    bundle, init = (_get(built_app, u).text for u in page.scripts)
    assert "SwaggerUIBundle" in bundle
    assert '"/api/openapi.json"' in init and "validatorUrl:null" in init


def test_api_docs_before_the_page_is_built(store_file: str, tmp_path: Path) -> None:
    application = create_app(store_file, static_dir=tmp_path / "nothing-here")
    try:
        r = _get(application, "/api/docs")
    finally:
        release_store(application.state.store)
    assert r.status_code == 200 and "make web" in r.text
    assert 'href="/api/openapi.json"' in r.text and "<script" not in r.text
