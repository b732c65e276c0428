"""Fixtures of the browser tests, loaded as a plugin by each tests/test_browser_*.py module
(``pytest_plugins = ["browser_fixtures"]``), so that the session's recorded store, server and
Chromium are made once however many of those modules run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser_helpers import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LiveWriter,
    Recorded,
    Server,
    build_store,
    ensure_built,
    serve,
    watched_page,
)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    rec = build_store(tmp_path_factory.mktemp("browser") / "store.db")
    writer = LiveWriter(rec.url, rec.trials["trial-1"])
    writer.start()
    yield rec
    writer.stop.set()
    writer.join(10)


@pytest.fixture(scope="session")
def server(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    ensure_built()
    srv = serve(recorded.url, tmp_path_factory.mktemp("server") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page_problems() -> list[str]:
    """Script and console errors of the test's page; a test expecting some removes them."""
    return []


@pytest.fixture
def page(browser: Any, server: Server, page_problems: list[str]) -> Iterator[Any]:
    """A fresh page (own storage) at 1280x900, under the page's own Content-Security-Policy;
    fails the test on a script error or a console error (a CSP violation, an API error…)."""
    with watched_page(browser, server.base, page_problems) as pg:
        yield pg
