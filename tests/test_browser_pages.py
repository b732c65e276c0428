"""The page around the Resource Utilization tab in a real Chromium: the runs list, the run
page and its Training / Evaluation / Adapters tabs, routing, names shown as text, keyboard-only
use, the page's Content-Security-Policy, and the API docs page under it."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from browser_helpers import (
    CHROMIUM,
    EVIL_RUN,
    EVIL_TRIAL,
    Recorded,
    Server,
    after_draw,
    draws,
    shown_span,
)
from tunescope.server._security import CSP

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_runs_list(page: Any, recorded: Recorded) -> None:
    page.goto("/")
    table = page.get_by_role("table")
    table.wait_for()
    assert table.locator("th").all_inner_texts() == [
        "Name",
        "Started",
        "State",
        "Trials",
        "Duration",
        "Peak GPU memory",
        "Findings",
    ]
    cells = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert cells[0] == "lora-sweep"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[1])
    assert cells[2:4] == ["running", "4"]
    assert re.fullmatch(r"1h 0\dm", cells[4])
    assert cells[5] == "79.0 GiB"
    page.get_by_role("link", name="lora-sweep", exact=True).click()
    assert page.get_by_test_id("run-name").inner_text() == "lora-sweep"
    assert page.get_by_role("tab", name="Training").get_attribute("aria-selected") == "true"
    page.go_back()
    page.get_by_role("link", name="lora-sweep", exact=True).wait_for()


def test_run_tabs(page: Any, recorded: Recorded) -> None:
    page.goto(f"/#/runs/{recorded.run_id}")
    # Training: loss and learning-rate curves per trial by step, and the trials
    page.locator('[data-scalar="train/loss"] canvas').first.wait_for()
    names = page.locator("[data-scalar]").evaluate_all("els => els.map(e => e.dataset.scalar)")
    assert names == ["train/loss", "train/learning_rate"]
    legend = page.locator('[data-scalar="train/loss"] .legend-label').all_inner_texts()
    assert legend == ["trial-0", "trial-1", "trial-2", "trial-3"]
    trials = page.locator(".card", has=page.get_by_role("heading", name="Trials"))
    text = trials.inner_text()
    for cell in ("trial-0", "completed", "lr=0.0001, rank=16", "trial-2", "failed", "lost"):
        assert cell in text
    # Evaluation: the eval/ scalars only, and their latest values
    page.get_by_role("tab", name="Evaluation").click()
    page.locator('[data-scalar="eval/loss"] canvas').first.wait_for()
    names = page.locator("[data-scalar]").evaluate_all("els => els.map(e => e.dataset.scalar)")
    assert names == ["eval/loss", "eval/accuracy"]
    assert "Latest validation values" in page.locator("main").inner_text()
    assert page.url.endswith(f"/runs/{recorded.run_id}/evaluation")
    # Adapters: checkpoints per trial with step, time, path, size
    page.get_by_role("tab", name="Adapters").click()
    table = page.get_by_role("table")
    table.wait_for()
    assert table.locator("th").all_inner_texts() == [
        "Trial",
        "Step",
        "Time",
        "Name",
        "Path",
        "Size",
    ]
    first = table.locator("tbody tr").first.locator("td").all_inner_texts()
    tid = recorded.trials["trial-0"]
    assert first[0] == "trial-0" and first[1] == "1000"
    assert re.fullmatch(r"0:0\d:\d\d", first[2])
    assert first[4] == f"/runs/lora/t{tid}/checkpoint-1000" and first[5] == "128 MiB"
    # the back button returns to the previous tab; a link opens a tab directly
    page.go_back()
    assert page.get_by_role("tab", name="Evaluation").get_attribute("aria-selected") == "true"
    page.goto(f"/#/runs/{recorded.run_id}/adapters")
    page.reload()
    assert page.get_by_role("tab", name="Adapters").get_attribute("aria-selected") == "true"


def test_unknown_routes(page: Any, page_problems: list[str]) -> None:
    page.goto("/#/runs/no-such-run")
    page.get_by_role("heading", name="Run not found").wait_for()  # once the API said 404
    assert "no-such-run" in page.get_by_role("alert").inner_text()
    page.goto("/#/elsewhere/x")
    # the page routes on hashchange, a task queued after goto returns: wait for it
    page.get_by_role("heading", name="Page not found").wait_for()
    assert page.get_by_role("heading", name="Run not found").count() == 0
    # the API's 404 for the unknown run is logged by the browser: expected here
    page_problems[:] = [p for p in page_problems if "404 (Not Found)" not in p]


def no_injection(page: Any) -> None:
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("main img, main script, main b").count() == 0


def test_user_names_are_text(page: Any, recorded: Recorded) -> None:
    page.goto("/")
    link = page.get_by_role("link", name=EVIL_RUN, exact=True)
    assert link.inner_text() == EVIL_RUN
    no_injection(page)
    link.click()
    assert page.get_by_test_id("run-name").inner_text() == EVIL_RUN
    assert EVIL_RUN in page.locator("#crumbs").inner_text()
    trials = page.locator(".card", has=page.get_by_role("heading", name="Trials"))
    trials.wait_for()
    assert EVIL_TRIAL in trials.inner_text() and "note=<b>bold</b>" in trials.inner_text()
    no_injection(page)
    n = draws(page)
    page.get_by_role("tab", name="Resource Utilization").click()
    after_draw(page, n)
    assert page.get_by_label("Select Trials", exact=True).locator("option").all_inner_texts() == [
        f"{EVIL_TRIAL} (completed)"
    ]
    page.get_by_role("button", name="Add selected to Comparison View").click()
    assert EVIL_TRIAL in page.locator(".cmp-row").inner_text()
    assert EVIL_TRIAL in page.locator(".chart-head").inner_text()
    assert page.title() == f"{EVIL_RUN} · tunescope"
    no_injection(page)


def tab_to(page: Any, test: str, limit: int = 40) -> None:
    """Press Tab until `test` (a JS expression on the focused element `el`) holds."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(f"() => {{ const el = document.activeElement; return !!({test}); }}"):
            return
    raise AssertionError(f"Tab never reached an element where {test}")


def focus_ring(page: Any) -> str:
    return str(page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle"))


def test_keyboard_only(page: Any, recorded: Recorded) -> None:
    page.goto(f"/#/runs/{recorded.run_id}")
    page.get_by_role("tab", name="Training").wait_for()
    tab_to(page, "el.id === 'tab-training'")
    assert focus_ring(page) != "none"
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    first = after_draw(page, 0)
    assert page.evaluate("() => document.activeElement.id") == "tab-resources"
    assert first["metric"] == "cpu.util" and first["trial"] == recorded.trials["trial-1"]

    # the selects change with the arrow keys
    tab_to(page, "el.id === 'select-metric'")
    assert focus_ring(page) != "none"
    n = draws(page)
    page.keyboard.press("ArrowDown")
    after_draw(page, n, metric="gpu.util")
    tab_to(page, "el.id === 'select-trials'")
    n = draws(page)
    page.keyboard.press("ArrowUp")
    after_draw(page, n, trial=recorded.trials["trial-0"])

    # add to the comparison view
    tab_to(page, "el.textContent === 'Add selected to Comparison View'")
    page.keyboard.press("Enter")
    assert page.locator(".cmp-row").count() == 1

    # type a range
    tab_to(page, "el.getAttribute('aria-expanded') !== null")
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.name") == "from"
    page.keyboard.type("0:10:00")
    page.keyboard.press("Tab")
    page.keyboard.type("0:30:00")
    n = draws(page)
    page.keyboard.press("Enter")
    after_draw(page, n, **{"from": 600.0, "to": 1800.0})
    assert page.evaluate("() => document.activeElement.getAttribute('aria-expanded')") == "false"

    # page and zoom buttons, with Space and Enter; focus stays on the button
    tab_to(page, "el.getAttribute('aria-label') === 'Page back'")
    assert focus_ring(page) != "none"
    n = draws(page)
    page.keyboard.press("Space")
    after_draw(page, n, **{"from": 0.0, "to": 1200.0})
    tab_to(page, "el.getAttribute('aria-label') === 'Zoom in'")
    n = draws(page)
    page.keyboard.press("Enter")
    after_draw(page, n, **{"from": 300.0, "to": 900.0})

    # the chart itself: arrows page, + and - zoom, 0 resets
    tab_to(page, "el.dataset.chart === 'main'")
    n = draws(page)
    page.keyboard.press("ArrowRight")
    after_draw(page, n, **{"from": 900.0, "to": 1500.0})
    n = draws(page)
    page.keyboard.press("-")
    after_draw(page, n, **{"from": 600.0, "to": 1800.0})
    n = draws(page)
    page.keyboard.press("0")
    after_draw(page, n, **{"from": 0.0})
    assert shown_span(page)[1] > 3500

    # the alignment checkbox toggles with Space
    tab_to(page, "el.id === 'cmp-align'", limit=10)
    n = draws(page)
    page.keyboard.press("Space")
    after_draw(page, n)
    assert "align=1" in page.url

    # delete the comparison row from the keyboard
    tab_to(page, "(el.getAttribute('aria-label') || '').startsWith('Remove ')")
    page.keyboard.press("Enter")
    assert page.locator(".cmp-row").count() == 0
    assert (
        page.evaluate("() => document.activeElement.textContent")
        == "Add selected to Comparison View"
    )


def test_content_security_policy_holds(browser: Any, server: Server, recorded: Recorded) -> None:
    """Without bypassing the page's CSP, nothing it does is blocked (no inline style or
    script): every console message that is an error fails the test."""
    assert CHROMIUM
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.base)
    try:
        pg = context.new_page()
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        t0 = recorded.trials["trial-0"]
        pg.goto(
            f"/#/runs/{recorded.run_id}/resources?metric=gpu.mem&trial={t0}"
            f"&cmp={t0}:gpu.mem&sel=0&from=960&to=1080"
        )
        pg.locator('[data-chart="main"][data-drawn]').wait_for()
        pg.locator(f'[data-chart="cmp-{t0}-gpu.mem"][data-drawn]').wait_for()
        over = pg.locator('[data-chart="main"] .u-over').bounding_box()
        pg.mouse.move(over["x"] + over["width"] / 2, over["y"] + over["height"] / 2)
        pg.get_by_role("tab", name="Training").click()
        pg.locator('[data-scalar="train/loss"] canvas').wait_for()
        swatch = pg.locator(".swatch").first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert swatch != "rgba(0, 0, 0, 0)", "colours set through the CSSOM survive the CSP"
        assert pg.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
        assert not errors, errors
    finally:
        context.close()


def test_api_docs_render_every_route_under_the_csp(page: Any, server: Server) -> None:
    """/api/docs: Swagger UI lists every route of the OpenAPI document and runs one, with
    only this server's files and nothing blocked by the policy (the page fixture fails the
    test on any console error, which is how Chromium reports a CSP violation)."""
    requested: list[str] = []
    page.on("request", lambda req: requested.append(req.url))
    response = page.goto("/api/docs")
    assert response is not None and response.headers["content-security-policy"] == CSP
    paths = page.locator(".opblock-summary-path")
    paths.first.wait_for()
    with urllib.request.urlopen(f"{server.base}/api/openapi.json", timeout=10) as r:
        # one block per operation: /api/session has three (GET, POST, DELETE)
        documented = sorted(path for path, ops in json.load(r)["paths"].items() for _ in ops)
    assert len(documented) >= 13
    assert sorted(paths.evaluate_all("els => els.map(e => e.dataset.path)")) == documented
    page.locator('.opblock-summary-path[data-path="/api/health"]').click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    status = page.locator(".live-responses-table tr.response .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() == "200"
    fetched = [u for u in requested if not u.startswith("data:")]
    assert f"{server.base}/api/health" in fetched
    assert all(u.startswith(f"{server.base}/") for u in fetched), fetched
