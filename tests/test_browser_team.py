"""A team server's page in a real Chromium: `tunescope serve` (the real command, on a
loopback port) asks for a token, refuses a wrong one, shows the runs of the token's project
only and logs out; the local viewer's header lets one pick a project."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from browser_helpers import ROOT, Server, ensure_built, serve
from http_helpers import free_port
from tunescope.server._session import SESSION_COOKIE
from tunescope.store import open_store
from tunescope.store.sql._sql import SQLStore

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class Team:
    url: str
    token: str  # a read token of project "vision"
    runs: dict[tuple[str, str], int]  # (project, run name) -> id


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Team:
    """Two projects, each with a run named "sweep", and one more run each."""
    url = str(tmp_path_factory.mktemp("team") / "team.db")
    runs = {}
    with open_store(url) as st:
        assert isinstance(st, SQLStore)
        t0 = time.time() - 7200
        for i, (project, name) in enumerate(
            [("vision", "sweep"), ("vision", "vit-base"), ("nlp", "sweep"), ("nlp", "bert")]
        ):
            run = st.ensure_run(name, start=t0 + i, project=project)
            st.create_trial(run.id, name="trial-0", start=t0 + i)
            runs[(project, name)] = run.id
        token = st.create_token("vision", "read")[1]
    return Team(url, token, runs)


@pytest.fixture(scope="module")
def team_server(team: Team, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`tunescope serve` on a free loopback port; its base URL."""
    ensure_built()
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunescope", "serve", "--store", team.url, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )  # fmt: skip
    srv = Server(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{srv.base}/api/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield srv.base
    finally:
        srv.stop()


def open_page(browser: Any, base: str, problems: list[str]) -> tuple[Any, Any]:
    """A fresh context (own cookies) and page at ``base``; script and console errors go to
    ``problems`` (a CSP violation among them)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on(
        "console",
        lambda msg: (
            problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
        ),
    )
    return context, pg


def expected_401(problems: list[str]) -> list[str]:
    """The browser logs every 401 the API answers before the login: expected here."""
    return [p for p in problems if "401 (Unauthorized)" not in p]


def test_login_shows_the_tokens_project_only_and_logout_ends_it(
    browser: Any, team: Team, team_server: str
) -> None:
    problems: list[str] = []
    context, page = open_page(browser, team_server, problems)
    try:
        page.goto("/")
        token = page.get_by_label("Access token")
        token.wait_for()
        assert page.get_by_role("heading", name="Log in").is_visible()
        assert page.title() == "Log in · tunescope"

        token.fill("ts_" + "w" * 43)
        page.get_by_role("button", name="Log in").click()
        alert = page.get_by_role("alert")
        alert.wait_for()
        assert alert.inner_text() == "Could not log in: the token is unknown, revoked or expired"
        assert context.cookies() == []

        token.fill(team.token)
        page.get_by_role("button", name="Log in").click()
        table = page.get_by_role("table")
        table.wait_for()
        names = table.locator("tbody tr td:first-child").all_inner_texts()
        assert sorted(names) == ["sweep", "vit-base"]
        ids = table.locator("tbody tr").evaluate_all("els => els.map(e => e.dataset.run)")
        assert sorted(int(i) for i in ids) == sorted(
            team.runs[("vision", n)] for n in ("sweep", "vit-base")
        )
        project = page.locator("#session [data-project]")
        assert project.get_attribute("data-project") == "vision"
        assert project.inner_text().split() == ["Project", "vision"]

        (session,) = [c for c in context.cookies() if c["name"] == SESSION_COOKIE]
        assert session["value"] == team.token and session["httpOnly"] is True
        assert session["sameSite"] == "Strict" and session["path"] == "/"
        assert team.token not in page.evaluate("() => document.cookie"), "HttpOnly: not for scripts"

        # the run of the other project with the same name is not reachable by its id
        page.goto(f"/#/runs/{team.runs[('nlp', 'sweep')]}")
        page.get_by_role("heading", name="Run not found").wait_for()
        page.goto(f"/#/runs/{team.runs[('vision', 'sweep')]}")
        assert page.get_by_test_id("run-name").inner_text() == "sweep"

        page.get_by_role("button", name="Log out").click()
        token.wait_for()
        assert [c for c in context.cookies() if c["name"] == SESSION_COOKIE] == []
        status = page.evaluate("() => fetch('/api/runs').then(r => r.status)")
        assert status == 401
        page.reload()
        page.get_by_label("Access token").wait_for()
        assert page.locator("#session").inner_text() == ""
    finally:
        context.close()
    # the 404 of the other project's run is expected too
    assert [p for p in expected_401(problems) if "404 (Not Found)" not in p] == []


@pytest.fixture(scope="module")
def local_server(team: Team, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    ensure_built()
    srv = serve(team.url, tmp_path_factory.mktemp("local") / "server.log")
    yield srv
    srv.stop()


def test_the_local_viewer_picks_a_project(
    browser: Any, team: Team, local_server: Server, page_problems: list[str]
) -> None:
    context, page = open_page(browser, local_server.base, page_problems)
    try:
        page.goto("/")
        table = page.get_by_role("table")
        table.wait_for()
        assert sorted(table.locator("tbody tr td:first-child").all_inner_texts()) == [
            "bert",
            "sweep",
            "sweep",
            "vit-base",
        ]
        select = page.get_by_label("Project")
        # the header's selector comes from its own request, which may answer after the table's
        select.wait_for()
        assert select.locator("option").all_inner_texts() == [
            "All projects",
            "default",
            "nlp",
            "vision",
        ]
        assert page.get_by_role("button", name="Log out").count() == 0
        select.select_option("nlp")
        page.wait_for_url("**/#/?project=nlp")
        page.get_by_text("The runs of project “nlp”").wait_for()
        # the heading may come before the project's runs replace the table's rows
        page.wait_for_function("n => document.querySelectorAll('tbody tr').length === n", arg=2)
        rows = page.locator("tbody tr")
        assert sorted(rows.locator("td:first-child").all_inner_texts()) == ["bert", "sweep"]
        ids = rows.evaluate_all("els => els.map(e => Number(e.dataset.run))")
        assert sorted(ids) == sorted(team.runs[("nlp", n)] for n in ("bert", "sweep"))
        page.reload()
        page.get_by_text("The runs of project “nlp”").wait_for()
        assert page.get_by_label("Project").input_value() == "nlp"
    finally:
        context.close()
