"""Requests through the real ASGI app, in-process (no socket)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from http_helpers import run_async
from tunescope.server import create_app, release_store

__all__ = ["app_over", "request"]


@contextmanager
def app_over(store_url: str, **options: Any) -> Iterator[FastAPI]:
    """The real app over ``store_url`` (``create_app``'s options), its store released after."""
    application = create_app(store_url, **options)
    try:
        yield application
    finally:
        release_store(application.state.store)


def request(
    app: FastAPI,
    path: str,
    *,
    method: str = "GET",
    host: str | None = None,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    json: Any = None,
    content: bytes | None = None,
    scheme: str = "http",
    raise_app_exceptions: bool = True,
) -> httpx.Response:
    """One request through the app in-process; ``host`` replaces the Host header, ``json``
    is a body sent as JSON, ``content`` a raw body, ``scheme`` the one the app sees
    (``https``: as if over TLS)."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        base = f"{scheme}://localhost"
        async with httpx.AsyncClient(transport=transport, base_url=base) as c:
            sent = dict(headers or {})
            if host is not None:
                sent["Host"] = host
            return await c.request(
                method, path, headers=sent, params=params, json=json, content=content
            )

    return run_async(go())
