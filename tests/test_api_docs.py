"""docs/api.md and the app agree: every route the app serves is documented, and every
documented route exists."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from tunescope import server
from tunescope.server import create_app
from tunescope.server._app import release_store

API_MD = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.fixture
def app(sqlite_url: str) -> Iterator[FastAPI]:
    application = create_app(sqlite_url)
    try:
        yield application
    finally:
        release_store(application.state.store)


def _documented() -> set[tuple[str, str]]:
    routes = set()
    for line in API_MD.read_text().splitlines():
        m = re.match(r"\|\s*`(GET|POST|PUT|PATCH|DELETE) (/api/[^`?\s]*)[^`]*`\s*\|", line)
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
    assert app.openapi_url == "/api/openapi.json" and app.docs_url == "/api/docs"
    assert "/api/openapi.json" in API_MD.read_text()


def test_serve_binds_localhost_by_default() -> None:
    params = inspect.signature(server.serve).parameters
    assert params["host"].default == "127.0.0.1"
    assert params["port"].default == 8765 and params["open_browser"].default is False


def test_public_face() -> None:
    assert sorted(server.__all__) == ["ApiError", "create_app", "serve"]
    for name in server.__all__:
        assert getattr(server, name).__doc__


def test_interactive_docs_page(app: FastAPI) -> None:
    import asyncio

    import httpx

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get("/api/docs")

    r = asyncio.run(go())
    assert r.status_code == 200 and "/api/openapi.json" in r.text
