"""Findings in a real Chromium against the real server: the counts by severity in the runs
list, and the Resource Utilization tab's Findings panel (severity, title, trial, span,
message, advice behind a disclosure), where choosing a finding, by mouse or keyboard, shows
its metric and trial with the window around its span."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from browser_helpers import (
    EVIL_RUN,
    EVIL_TRIAL,
    INPUT_BOUND,
    Recorded,
    Server,
    after_draw,
    draws,
    open_resources,
    shown_span,
)

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEVERITIES = ("high", "moderate", "low")


def get(server: Server, path: str) -> Any:
    with urllib.request.urlopen(server.base + path, timeout=30) as resp:
        return json.load(resp)


def counts_text(counts: dict[str, int]) -> tuple[str, str]:
    """(what the list shows, what it says to a screen reader)."""
    shown = [s for s in SEVERITIES if counts[s]]
    visual = " · ".join(f"{counts[s]} {s}" for s in shown) or "none"
    spoken = ", ".join(
        f"{counts[s]} {s}-severity finding{'' if counts[s] == 1 else 's'}" for s in shown
    )
    return visual, spoken or "No findings"


def wait_findings(page: Any, loads: int = 1) -> dict[str, Any]:
    page.wait_for_function(
        "(n) => { const f = window.__tunescope.findings; return f && f.loads >= n; }", arg=loads
    )
    return dict(page.evaluate("() => window.__tunescope.findings"))


def test_runs_list_counts_findings_by_severity(
    page: Any, recorded: Recorded, server: Server
) -> None:
    page.goto("/")
    page.get_by_role("table").wait_for()
    # counts the server has not computed yet read "…"; the list polls until they come
    page.wait_for_function(
        "(ids) => ids.every((id) => window.__tunescope.runs.findings[id])",
        arg=[str(recorded.run_id), str(recorded.evil_run_id)],
        timeout=30_000,
    )
    for run_id in (recorded.run_id, recorded.evil_run_id):
        listed = page.evaluate(f"() => window.__tunescope.runs.findings['{run_id}']")
        visual, spoken = counts_text(listed)
        cell = page.locator(f'tr[data-run="{run_id}"] .findings-cell')
        assert cell.locator('[aria-hidden="true"]').inner_text() == visual
        assert cell.locator(".visually-hidden").inner_text() == spoken
        assert page.get_by_role("link", name=spoken, exact=True).count() >= 1
    # the finished run's counts are the API's; the sweep's running trial (trial-1) keeps
    # growing, so only its finished trials' findings are certain
    evil = get(server, f"/api/runs/{recorded.evil_run_id}/findings")["counts"]
    assert page.evaluate(f"() => window.__tunescope.runs.findings['{recorded.evil_run_id}']") == (
        evil
    )
    assert evil == {"high": 0, "moderate": 0, "low": 1}
    sweep = page.evaluate(f"() => window.__tunescope.runs.findings['{recorded.run_id}']")
    assert sweep["high"] == 1 and sweep["moderate"] >= 3 and sweep["low"] >= 3
    # each severity in its own colour
    row = page.locator(f'tr[data-run="{recorded.run_id}"]')
    colours = {
        s: row.locator(f".sev-count.sev-{s}").evaluate("e => getComputedStyle(e).color")
        for s in SEVERITIES
    }
    assert len(set(colours.values())) == 3, colours
    # the counts link to the run's Resource Utilization tab, where the panel lists them
    row.locator(".findings-cell a").click()
    after_draw(page, 0)
    assert page.url.endswith(f"#/runs/{recorded.run_id}/resources") or "/resources?" in page.url
    assert page.get_by_role("region", name="Findings").is_visible()


def test_findings_panel_lists_the_runs_findings(
    page: Any, recorded: Recorded, server: Server
) -> None:
    open_resources(page, recorded)
    info = wait_findings(page)
    api = get(server, f"/api/runs/{recorded.run_id}/findings")
    everything = [f for fs in api["trials"].values() for f in fs]
    panel = page.get_by_role("region", name="Findings", exact=True)
    items = panel.locator(".finding")
    assert items.count() == len(info["items"])
    assert [i.get_attribute("data-finding") for i in items.all()] == [
        i["id"] for i in info["items"]
    ]
    # every trial's findings (the running trial-1's may have been recomputed since)
    live = str(recorded.trials["trial-1"])
    assert {i["id"] for i in info["items"] if i["trial"] != int(live)} == {
        f["id"] for t, fs in api["trials"].items() if t != live for f in fs
    }
    assert {i["trial"] for i in info["items"]} == set(recorded.trials.values())
    # most severe first
    shown = panel.locator(".finding .sev").all_inner_texts()
    assert shown == sorted(shown, key=SEVERITIES.index) and shown[0] == "high"
    assert panel.get_by_test_id("findings-summary").inner_text() == counts_text(info["counts"])[1]

    # the input-bound trial: badge, title, trial and its state, span in elapsed time, message
    t2 = recorded.trials["trial-2"]
    (f,) = [f for f in everything if f["rule"] == "input_bound"]
    assert f["trial_id"] == t2 and info["items"][0]["id"] == f["id"]
    first = items.first
    assert first.locator(".sev").inner_text() == "high"
    assert first.locator(".finding-title").inner_text() == f["title"]
    assert re.fullmatch(r"Input-bound: \d\d% of step time waiting for data", f["title"])
    assert first.locator(".finding-trial").inner_text() == "trial-2"
    assert first.locator(".badge[data-state]").inner_text() == "failed"
    assert first.get_by_test_id("finding-span").inner_text() == "0:05:30 – 0:14:30"
    assert first.locator(".finding-series").inner_text() == "Data-Wait Share"
    assert first.locator(".finding-msg").inner_text() == f["message"]
    # advice: collapsed behind a disclosure until asked for
    advice = first.locator(".advice-list li")
    assert not advice.first.is_visible()
    first.get_by_text(f"Advice ({len(f['advice'])})").click()
    assert advice.all_inner_texts() == f["advice"]
    assert advice.first.is_visible()

    # a GPU finding names its device
    gpu = [g for g in everything if g["metric"] == "gpu.mem" and g["rule"] == "eval_memory_spike"]
    row = panel.locator(f'.finding[data-finding="{gpu[0]["id"]}"]')
    assert re.fullmatch(r"GPU Memory Usage · GPU \d", row.locator(".finding-series").inner_text())


def test_choosing_a_finding_shows_its_metric_trial_and_span(
    page: Any, recorded: Recorded, server: Server
) -> None:
    t0, t2 = recorded.trials["trial-0"], recorded.trials["trial-2"]
    open_resources(page, recorded, f"?metric=cpu.util&trial={t0}&cmp=")
    wait_findings(page)
    panel = page.get_by_role("region", name="Findings", exact=True)
    api = get(server, f"/api/runs/{recorded.run_id}/findings")["trials"]

    # by mouse: the input-bound finding of trial-2, its span with a 10% margin on each side
    (f,) = [x for x in api[str(t2)] if x["rule"] == "input_bound"]
    n = draws(page)
    panel.locator(f'.finding[data-finding="{f["id"]}"] .finding-select').click()
    a, b = INPUT_BOUND
    margin = 0.1 * (b - a)
    drawn = after_draw(page, n, metric="train.data_wait", trial=t2)
    assert (drawn["from"], drawn["to"]) == (pytest.approx(a - margin), pytest.approx(b + margin))
    assert shown_span(page) == (pytest.approx(a - margin), pytest.approx(b + margin))
    assert drawn["series"][0]["count"] > 0, "the finding's series is drawn"
    assert page.get_by_label("Select Metric", exact=True).input_value() == "train.data_wait"
    assert page.get_by_label("Select Trials", exact=True).input_value() == str(t2)
    assert page.get_by_test_id("chart-title").inner_text() == "Data-Wait Share"
    assert "metric=train.data_wait" in page.url and f"trial={t2}" in page.url
    assert f"from={a - margin:g}" in page.url and f"to={b + margin:g}" in page.url
    chosen = panel.locator(f'.finding[data-finding="{f["id"]}"]')
    assert "is-selected" in (chosen.get_attribute("class") or "")
    assert chosen.locator(".finding-select").get_attribute("aria-current") == "true"
    assert page.evaluate("() => window.__tunescope.findings.active") == f["id"]

    # by keyboard: an evaluation spike on trial-0's GPU memory (a 40 s span)
    (g,) = [x for x in api[str(t0)] if x["rule"] == "eval_memory_spike" and x["severity"] == "low"]
    button = panel.locator(f'.finding[data-finding="{g["id"]}"] .finding-select')
    button.focus()
    n = draws(page)
    page.keyboard.press("Enter")
    drawn = after_draw(page, n, metric="gpu.mem", trial=t0)
    ga, gb = g["t0"] - recorded.run_start, g["t1"] - recorded.run_start
    gm = max(0.1 * (gb - ga), 2.0)
    assert drawn["from"] == pytest.approx(ga - gm, abs=0.01)
    assert drawn["to"] == pytest.approx(gb + gm, abs=0.01)
    assert drawn["markers"]["evals"] == 1, "the evaluation it refers to is in view"
    assert page.evaluate("() => document.activeElement.className") == "finding-select"
    assert page.evaluate("() => window.__tunescope.findings.active") == g["id"]
    # Space works too; and the previous choice is no longer marked
    button = panel.locator(f'.finding[data-finding="{f["id"]}"] .finding-select')
    button.focus()
    n = draws(page)
    page.keyboard.press("Space")
    after_draw(page, n, metric="train.data_wait", trial=t2)
    assert panel.locator(".finding.is-selected").count() == 1

    # choosing another metric leaves the finding: it is no longer marked as shown
    n = draws(page)
    page.get_by_label("Select Metric", exact=True).select_option(label="CPU Memory Usage")
    after_draw(page, n, metric="cpu.mem")
    assert panel.locator(".finding.is-selected").count() == 0
    assert page.evaluate("() => window.__tunescope.findings.active") is None


def test_findings_show_names_as_text(page: Any, recorded: Recorded) -> None:
    page.goto(f"/#/runs/{recorded.evil_run_id}/resources")
    after_draw(page, 0)
    info = wait_findings(page)
    assert info["items"], "the run's trial has a right-size finding"
    panel = page.get_by_role("region", name="Findings", exact=True)
    assert panel.locator(".finding-trial").first.inner_text() == EVIL_TRIAL
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("main img, main script, main b").count() == 0
    page.goto("/")
    page.get_by_role("link", name=EVIL_RUN, exact=True).wait_for()
    assert page.evaluate("() => window.__xss") is None
