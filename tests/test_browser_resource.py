"""The Resource Utilization tab in a real Chromium against the real server: the seed page's
workflow (metric, trial, reading the graph, time range, paging, zoom, markers, comparison
view), live following and the stacked comparison view."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from browser_helpers import (
    GAP_AT,
    SPIKE_GIB,
    SPIKE_T,
    Recorded,
    after_draw,
    draws,
    last_draw,
    open_resources,
    painted,
    shown_span,
)

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEADLINE = {
    "CPU Utilization Percent": ("cpu.util", "%"),
    "GPU Utilization Percent": ("gpu.util", "%"),
    "CPU Memory Usage": ("cpu.mem", "GiB"),
    "GPU Memory Usage": ("gpu.mem", "GiB"),
}
STATES = {"trial-0": "completed", "trial-1": "running", "trial-2": "failed", "trial-3": "lost"}


def choose(page: Any, control: str, **option: str) -> dict[str, Any]:
    n = draws(page)
    page.get_by_label(control, exact=True).select_option(**option)
    return after_draw(page, n)


def click(page: Any, name: str, **match: Any) -> dict[str, Any]:
    n = draws(page)
    page.get_by_role("button", name=name, exact=True).click()
    return after_draw(page, n, **match)


def test_seed_workflow(page: Any, recorded: Recorded) -> None:
    # 1. open a fine-tune run and select the Resource Utilization tab
    page.goto("/")
    row = page.locator("tr", has=page.get_by_role("link", name="lora-sweep", exact=True))
    assert re.search(r"running.*4.*79\.0 GiB", row.inner_text(), re.S)
    page.get_by_role("link", name="lora-sweep", exact=True).click()
    page.get_by_role("tab", name="Resource Utilization").click()
    first = after_draw(page, 0)
    assert first["trial"] == recorded.trials["trial-1"], "a running trial is shown first"

    # 2. Select Metric: the four headline metrics first, the catalog's others in a second group
    metric = page.get_by_label("Select Metric", exact=True)
    groups = metric.locator("optgroup")
    assert groups.count() == 2
    assert groups.nth(0).locator("option").all_inner_texts() == list(HEADLINE)
    assert groups.nth(1).locator("option").count() >= 10
    # Select Trials: every trial with its state
    trials = page.get_by_label("Select Trials", exact=True).locator("option").all_inner_texts()
    assert trials == [f"{name} ({state})" for name, state in STATES.items()]

    for name in STATES:
        drawn = choose(page, "Select Trials", label=f"{name} ({STATES[name]})")
        assert drawn["trial"] == recorded.trials[name]
        assert page.locator(".trial-state").inner_text() == STATES[name]
    choose(page, "Select Trials", label="trial-0 (completed)")
    for label, (key, unit) in HEADLINE.items():
        drawn = choose(page, "Select Metric", label=label)
        assert drawn["metric"] == key and drawn["unit"] == unit
        assert page.get_by_test_id("chart-title").inner_text() == label
        assert page.get_by_test_id("chart-unit").inner_text() == unit
        assert all(s["count"] > 0 for s in drawn["series"])
        assert painted(page) > 300, f"{label}: the canvas shows no line"
    # further metrics: one with samples draws them, one without says so
    drawn = choose(page, "Select Metric", label="GPU Power")
    assert drawn["unit"] == "W" and len(drawn["series"]) == 2
    drawn = choose(page, "Select Metric", label="Torch Allocated")
    assert drawn["series"] == []
    assert page.locator('[data-chart="main"] .chart-msg').inner_text() == (
        "No samples of Torch Allocated in this window"
    )
    # 3. read the graph: GPU memory of trial-0, two GPUs, the whole run, downsampled with bands
    drawn = choose(page, "Select Metric", label="GPU Memory Usage")
    assert [s["device"] for s in drawn["series"]] == ["0", "1"]
    assert all(s["mode"] == "buckets" for s in drawn["series"])
    assert drawn["series"][0]["max"] == pytest.approx(SPIKE_GIB, rel=1e-3), "spike lost"
    assert drawn["yMax"] >= SPIKE_GIB
    start, end = shown_span(page)
    assert start == 0 and 3590 < end < 3700
    assert re.fullmatch(r"0:00:00 – 1:0\d:\d\d", page.get_by_test_id("time-span").inner_text())
    assert drawn["points"] == drawn["width"], "the window is fetched at the chart's pixel width"

    # zoom in / out around the centre
    zoomed = click(page, "Zoom in")
    a, b = shown_span(page)
    assert b - a == pytest.approx((end - start) / 2, rel=1e-3)
    assert (a + b) / 2 == pytest.approx((start + end) / 2, rel=1e-3)
    assert zoomed["from"] == pytest.approx(a) and zoomed["to"] == pytest.approx(b)
    click(page, "Zoom in")
    a, b = shown_span(page)
    width = b - a
    assert width == pytest.approx((end - start) / 4, rel=1e-3)
    # page back / forward by the window's own width
    click(page, "Page back")
    a2, b2 = shown_span(page)
    assert (a2, b2) == (pytest.approx(a - width), pytest.approx(b - width))
    click(page, "Page forward")
    click(page, "Page forward")
    a3, b3 = shown_span(page)
    assert (a3, b3) == (pytest.approx(a + width), pytest.approx(b + width))
    click(page, "Zoom out")
    a4, b4 = shown_span(page)
    assert b4 - a4 == pytest.approx(2 * width, rel=1e-3)
    # the spike is inside the raw window around it, and a narrow window comes back raw
    click(page, "Reset zoom")
    assert shown_span(page)[0] == 0 and shown_span(page)[1] == pytest.approx(end, abs=30)
    assert page.get_by_role("button", name="Reset zoom").get_attribute("aria-disabled") == "true"

    # a typed range
    page.get_by_role("button", name=re.compile("^Time range")).click()
    page.get_by_label("From", exact=True).fill("0:20:00")
    page.get_by_label("To", exact=True).fill("0:21:00")
    n = draws(page)
    page.get_by_role("button", name="Apply").click()
    drawn = after_draw(page, n, **{"from": 1200.0, "to": 1260.0})
    assert page.get_by_test_id("time-span").inner_text() == "0:20:00 – 0:21:00"
    assert all(s["mode"] == "raw" for s in drawn["series"])
    assert drawn["series"][0]["max"] == pytest.approx(SPIKE_GIB, rel=1e-3)
    assert SPIKE_T - 1200 > 0
    # an invalid range is refused with a message
    page.get_by_role("button", name=re.compile("^Time range")).click()
    page.get_by_label("From", exact=True).fill("0:30:00")
    page.get_by_label("To", exact=True).fill("0:10:00")
    page.get_by_role("button", name="Apply").click()
    assert "after" in page.get_by_role("alert").inner_text()
    page.keyboard.press("Escape")
    assert shown_span(page) == (1200.0, 1260.0)

    # drag-select zooms
    over = page.locator('[data-chart="main"] .u-over').bounding_box()
    n = draws(page)
    page.mouse.move(over["x"] + over["width"] * 0.25, over["y"] + over["height"] / 2)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.75, over["y"] + over["height"] / 2, steps=8)
    page.mouse.up()
    after_draw(page, n)
    a, b = shown_span(page)
    assert a == pytest.approx(1215, abs=1) and b == pytest.approx(1245, abs=1)


def test_a_sampler_gap_is_drawn_on_every_metric_and_named(page: Any, recorded: Recorded) -> None:
    """The span a dead sampler left without samples is shaded on any metric's chart, and the
    tooltip says why, so a hole is not read as an idle machine."""
    trial = recorded.trials["trial-0"]
    lo, hi = GAP_AT - 60, GAP_AT + 60
    for metric in ("gpu.util", "gpu.mem"):  # without and with the step/evaluation markers
        page.goto(
            f"/#/runs/{recorded.run_id}/resources?metric={metric}&trial={trial}&from={lo}&to={hi}"
        )
        page.reload()
        page.wait_for_function(
            """(m) => { const d = window.__tunescope.lastDraw;
                 return d && d.metric === m && d.gaps !== null && d.complete; }""",
            arg=metric,
        )
        drawn = last_draw(page)
        assert drawn["gaps"]["drawn"] == 1, drawn["gaps"]
        x0, x1 = drawn["gaps"]["firstX"]
        over = page.locator('[data-chart="main"] .u-over').bounding_box()
        per_s = over["width"] / (drawn["to"] - drawn["from"])  # CSS px a second
        assert x0 == pytest.approx((GAP_AT - drawn["from"]) * per_s, abs=3)
        assert x1 - x0 == pytest.approx(12 * per_s, abs=3)
        page.mouse.move(over["x"] + (x0 + x1) / 2, over["y"] + over["height"] / 3)
        tip = page.get_by_role("tooltip")
        assert "the sampler died and was restarted" in tip.inner_text()
    # elsewhere in the run there is no gap to draw
    page.goto(f"/#/runs/{recorded.run_id}/resources?metric=gpu.util&trial={trial}&from=0&to=600")
    page.reload()
    page.wait_for_function(
        "() => { const d = window.__tunescope.lastDraw; return d && d.gaps !== null; }"
    )
    assert last_draw(page)["gaps"]["drawn"] == 0


def test_markers(page: Any, recorded: Recorded) -> None:
    trial = recorded.trials["trial-0"]
    drawn = open_resources(page, recorded, f"?metric=gpu.mem&trial={trial}")
    marks = drawn["markers"]
    # the whole run holds ~6000 steps: the API answers bins, drawn as a density strip
    assert marks["steps"] == 0 and marks["stepBins"] > 100
    assert marks["evals"] == 5
    assert page.get_by_label("Optimizer Steps", exact=True).is_checked()
    assert page.get_by_label("Evaluations", exact=True).is_checked()

    # two minutes around the second evaluation: single steps and one shaded interval
    n = draws(page)
    page.goto(f"/#/runs/{recorded.run_id}/resources?metric=gpu.mem&trial={trial}&from=960&to=1080")
    page.reload()
    drawn = after_draw(page, 0, **{"from": 960.0})
    marks = drawn["markers"]
    assert marks["stepBins"] == 0 and 230 <= marks["steps"] <= 242
    assert marks["evals"] == 1
    assert n >= 0

    # hovering tells the evaluation's name, and a step's number
    over = page.locator('[data-chart="main"] .u-over').bounding_box()
    x0, x1 = marks["firstEvalX"]
    page.mouse.move(over["x"] + (x0 + x1) / 2, over["y"] + over["height"] / 2)
    tip = page.get_by_role("tooltip")
    assert "eval-2" in tip.inner_text() and "Evaluation" in tip.inner_text()
    page.mouse.move(
        over["x"] + marks["firstStepX"] + 3 * (x0 - marks["firstStepX"]) / 40 + 0.5,
        over["y"] + over["height"] - 4,
    )
    assert re.search(r"Optimizer steps? \d+", tip.inner_text())

    # the legend toggles hide and show each kind
    n = draws(page)
    page.get_by_label("Optimizer Steps", exact=True).uncheck()
    drawn = after_draw(page, n)
    assert drawn["markers"]["stepsShown"] is False and drawn["markers"]["steps"] == 0
    assert drawn["markers"]["evals"] == 1
    n = draws(page)
    page.get_by_label("Evaluations", exact=True).uncheck()
    drawn = after_draw(page, n)
    assert drawn["markers"]["evals"] == 0
    assert "steps=0" in page.url and "evals=0" in page.url
    n = draws(page)
    page.get_by_label("Optimizer Steps", exact=True).check()
    assert after_draw(page, n)["markers"]["steps"] > 200

    # no markers on a metric whose catalog row says so
    drawn = choose(page, "Select Metric", label="GPU Utilization Percent")
    assert drawn["markers"] is None
    assert not page.get_by_label("Optimizer Steps", exact=True).is_visible()


def rows(page: Any) -> list[str]:
    return [t.replace("\n", " ") for t in page.locator(".cmp-row .cmp-select").all_inner_texts()]


def test_comparison_view(page: Any, recorded: Recorded) -> None:
    t0 = recorded.trials["trial-0"]
    open_resources(page, recorded, f"?metric=gpu.mem&trial={t0}&cmp=")
    add = page.get_by_role("button", name="Add selected to Comparison View")
    add.click()
    choose(page, "Select Trials", label="trial-1 (running)")
    choose(page, "Select Metric", label="GPU Utilization Percent")
    add.click()
    assert rows(page) == [
        "trial-0 completed GPU Memory Usage GiB",
        "trial-1 running GPU Utilization Percent %",
    ]
    # the stacked view draws every pinned graph on the shared time axis
    page.wait_for_function("() => Object.keys(window.__tunescope.charts).length >= 3")
    charts = page.evaluate("() => window.__tunescope.charts")
    pinned = charts[f"cmp-{t0}-gpu.mem"]
    assert pinned["trial"] == t0 and pinned["from"] == 0
    assert page.locator(".cmp-card canvas").count() >= 2
    # adding the same pair again does not duplicate it
    add.click()
    assert len(rows(page)) == 2

    # selecting a row draws its graph
    n = draws(page)
    page.locator(".cmp-row .cmp-select").first.click()
    drawn = after_draw(page, n, metric="gpu.mem", trial=t0)
    assert page.get_by_label("Select Metric", exact=True).input_value() == "gpu.mem"
    assert page.get_by_label("Select Trials", exact=True).input_value() == str(t0)
    assert page.locator(".cmp-row").first.get_attribute("class").endswith("is-selected")
    assert drawn["series"][0]["count"] > 0

    # a third pin, then delete one
    choose(page, "Select Metric", label="CPU Memory Usage")
    add.click()
    assert len(rows(page)) == 3
    page.get_by_role(
        "button", name="Remove trial-1 · GPU Utilization Percent from comparison"
    ).click()
    assert rows(page) == [
        "trial-0 completed GPU Memory Usage GiB",
        "trial-0 completed CPU Memory Usage GiB",
    ]
    assert page.locator(".cmp-card").count() == 2

    # the list survives a reload, and a link without it (localStorage) ...
    page.reload()
    after_draw(page, 0)
    assert len(rows(page)) == 2
    page.goto(f"/#/runs/{recorded.run_id}/resources")
    page.reload()
    after_draw(page, 0)
    assert len(rows(page)) == 2

    # ... and the URL alone reproduces the whole view in a fresh browser
    click(page, "Zoom in")
    view = last_draw(page)
    span = shown_span(page)
    url = page.url
    fresh = page.context.browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        other = fresh.new_page()
        other.goto(url)
        again = after_draw(other, 0)
        assert (again["metric"], again["trial"]) == (view["metric"], view["trial"])
        assert shown_span(other) == span
        assert rows(other) == rows(page)
        assert (
            other.get_by_role("tab", name="Resource Utilization").get_attribute("aria-selected")
            == "true"
        )
    finally:
        fresh.close()


def test_live_running_trial(page: Any, recorded: Recorded) -> None:
    live = recorded.trials["trial-1"]
    drawn = open_resources(page, recorded, f"?metric=cpu.util&trial={live}")
    assert page.evaluate("() => window.__tunescope.live") is True
    assert page.get_by_text("Live", exact=True).is_visible()
    page.wait_for_function("(n) => window.__tunescope.drawCount >= n + 2", arg=drawn["seq"])
    later = last_draw(page)
    assert later["to"] > drawn["to"] + 1, "the window follows the live edge"
    assert later["series"][0]["last"] > drawn["series"][0]["last"], "new samples are drawn"
    assert page.evaluate("() => window.__tunescope.polls") >= 2
    # leaving the live edge stops following
    click(page, "Zoom in")
    click(page, "Page back")
    assert page.evaluate("() => window.__tunescope.live") is False
    assert not page.get_by_text("Live", exact=True).is_visible()
    n = draws(page)
    page.wait_for_timeout(2500)
    assert draws(page) == n
    # a completed trial is never live
    choose(page, "Select Trials", label="trial-0 (completed)")
    click(page, "Reset zoom")
    assert page.evaluate("() => window.__tunescope.live") is False


def test_align_and_synced_cursor(page: Any, recorded: Recorded) -> None:
    t0, t1 = recorded.trials["trial-0"], recorded.trials["trial-1"]
    open_resources(page, recorded, f"?metric=gpu.util&trial={t0}&cmp={t0}:gpu.mem,{t1}:gpu.mem")
    page.wait_for_function("() => Object.keys(window.__tunescope.charts).length >= 3")
    # one shared cursor: hovering the main chart moves the stacked charts' cursors
    over = page.locator('[data-chart="main"] .u-over').bounding_box()
    page.mouse.move(over["x"] + over["width"] * 0.4, over["y"] + 40)
    when = page.locator('[data-chart="main"] .legend-when').inner_text()
    assert when.startswith("at ")
    for pin in (f"cmp-{t0}-gpu.mem", f"cmp-{t1}-gpu.mem"):
        assert page.locator(f'[data-chart="{pin}"] .legend-when').inner_text() == when
    # aligned on each trial's own start: trial-1 (started 600 s in) begins at 0 too
    n = draws(page)
    page.get_by_label("Align trials on their own start").check()
    after_draw(page, n)
    assert "align=1" in page.url
    assert "each trial's own start" in page.locator(".chart-desc").inner_text()
    a, b = shown_span(page)
    running_for = time.time() - (recorded.run_start + 600)  # trial-1, still running
    assert a == 0 and b == pytest.approx(max(3000, running_for), abs=5)
    page.wait_for_function(
        f"""() => {{ const c = window.__tunescope.charts['cmp-{t1}-gpu.mem'];
                     return c && c.to < 3100; }}"""
    )


def test_a_link_with_a_comparison_list_draws_every_chart(page: Any, recorded: Recorded) -> None:
    # (the README screenshot is taken from a real demo run: tests/test_browser_demo.py)
    t0, t1 = recorded.trials["trial-0"], recorded.trials["trial-1"]
    open_resources(
        page, recorded, f"?metric=gpu.mem&trial={t0}&cmp={t0}:gpu.mem,{t1}:gpu.util&sel=0"
    )
    page.wait_for_function("() => Object.keys(window.__tunescope.charts).length >= 3")
