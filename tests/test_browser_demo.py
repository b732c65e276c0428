"""The seed's workflow on a REAL recorded run: `tunescope demo` (three small PyTorch models
trained on the CPU under the real SDK and sampler, the third through a slow loader) served by
the real app and driven in a real Chromium. Runs list, run page, Resource Utilization tab;
each headline metric of each trial (GPU metrics show the page's "no data" state on this
CPU-only machine); the CPU Memory Usage chart read against the store (unit, span, values,
optimizer-step and evaluation markers); paging, zoom and a typed range; the comparison view;
the slow-loader trial's input-bound finding. The README screenshot is taken from this run."""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from browser_helpers import (
    SCREENSHOTS,
    Server,
    after_draw,
    draws,
    ensure_built,
    last_draw,
    painted,
    serve,
    shown_span,
    watched_page,
)
from tunescope.metrics import GIB
from tunescope.store import TrialInfo, open_store

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEADLINE = {
    "CPU Utilization Percent": ("cpu.util", "%"),
    "GPU Utilization Percent": ("gpu.util", "%"),
    "CPU Memory Usage": ("cpu.mem", "GiB"),
    "GPU Memory Usage": ("gpu.mem", "GiB"),
}
SHOT_NAME = "resource-utilization.png"


@dataclass
class Demo:
    url: str
    name: str
    run_id: int
    run_start: float
    trials: list[TrialInfo]  # creation order, every one ended (completed or pruned)
    slow: TrialInfo  # the slow-loader trial (params slow_loader=1)
    steps: dict[int, int]  # trial id -> optimizer steps in the store
    evals: dict[int, int]  # trial id -> evaluations in the store
    cpu_mem_peak: dict[int, float]  # trial id -> highest cpu.mem sample, bytes
    gpu_series: int  # GPU series of the run (none on a CPU-only machine)

    def extent(self) -> float:
        """Seconds from the run's start to its last trial's end (the page's whole window)."""
        return max(t.end or t.start for t in self.trials) - self.run_start


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    from tunescope.cli._demo import run_demo

    tmp = tmp_path_factory.mktemp("demo")
    # long enough for the slow-loader trial to reach the input-bound rule's 20 batches even
    # on a loaded machine (it makes about 4 a second when quiet)
    url, name = run_demo(str(tmp / "demo.db"), seconds_per_trial=12.0, eval_every_s=4.0)
    with open_store(url) as st:
        run = st.get_run(name)
        trials = st.list_trials(run.id)
        steps = {t.id: st.count_events(t.id, kinds=["optimizer_step"]) for t in trials}
        evals = {t.id: st.count_events(t.id, kinds=["evaluation"]) for t in trials}
        peaks = {}
        for t in trials:
            (mem,) = st.list_series(t.id, "cpu.mem")
            peaks[t.id] = float(st.read_samples(mem.id)[1].max())
        gpu = sum(
            len(st.list_series(t.id, "gpu.util") + st.list_series(t.id, "gpu.mem")) for t in trials
        )
    (slow,) = [t for t in trials if t.params.get("slow_loader")]
    assert all(t.end is not None for t in trials), [(t.name, t.state) for t in trials]
    return Demo(url, name, run.id, run.start, trials, slow, steps, evals, peaks, gpu)


@pytest.fixture(scope="module")
def demo_server(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    ensure_built()
    srv = serve(demo.url, tmp_path_factory.mktemp("demo-server") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture
def page(browser: Any, demo_server: Server, page_problems: list[str]) -> Iterator[Any]:
    """As browser_fixtures' page (1280x900, fails on script and console errors), on the
    demo's server."""
    with watched_page(browser, demo_server.base, page_problems, 15_000) as pg:
        yield pg


# ---------------------------------------------------------------------------------- helpers
def select(page: Any, control: str, label: str) -> dict[str, Any]:
    """Choose an option of Select Metric / Select Trials and wait for the chart to draw it."""
    box = page.get_by_label(control, exact=True)
    current = box.evaluate("s => s.options[s.selectedIndex] && s.options[s.selectedIndex].text")
    if current == label:
        return last_draw(page)
    n = draws(page)
    box.select_option(label=label)
    return after_draw(page, n)


def click(page: Any, name: str) -> dict[str, Any]:
    n = draws(page)
    page.get_by_role("button", name=name, exact=True).click()
    return after_draw(page, n)


def marker_pixels(page: Any) -> dict[str, int]:
    """Pixels of the main chart painted in the step green and in the evaluation orange
    (evaluations of the demo are short: dashed lines, each next to the step before it)."""
    return dict(
        page.evaluate(
            """() => {
             const c = document.querySelector('[data-chart="main"] canvas');
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let steps = 0, evals = 0;
             for (let i = 0; i < d.length; i += 4) {
               const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
               if (a < 200) continue;
               const near = (x, y) => Math.abs(x - y) < 25;
               if (near(r, 26) && near(g, 155) && near(b, 80)) steps++;
               // orange, also where a faint step line crosses it (0.28 green over it)
               if (r > 150 && r - b > 80 && g > 90 && g < 180) evals++;
             }
             return { steps, evals }; }"""
        )
    )


def trial_label(t: TrialInfo) -> str:
    return f"{t.name} ({t.state})"


def elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def open_tab(page: Any, demo: Demo, query: str) -> dict[str, Any]:
    page.goto(f"/#/runs/{demo.run_id}/resources{query}")
    return after_draw(page, 0)


# ---------------------------------------------------------------------------------- tests
def test_open_the_run_and_choose_every_metric_and_trial(page: Any, demo: Demo) -> None:
    # 1. the runs list: the demo run, its three trials, its findings counted by severity
    page.goto("/")
    link = page.get_by_role("link", name=demo.name, exact=True)
    row = page.locator("tr", has=link)
    assert re.search(rf"completed\s+{len(demo.trials)}\b", row.inner_text())
    page.wait_for_function(
        "(id) => window.__tunescope.runs.findings[id]", arg=str(demo.run_id), timeout=30_000
    )
    counts = page.evaluate(f"() => window.__tunescope.runs.findings['{demo.run_id}']")
    assert counts["high"] >= 1, counts  # the slow loader's input-bound finding
    assert row.locator(".sev-count.sev-high").inner_text() == f"{counts['high']} high"
    # open it, then its Resource Utilization tab
    link.click()
    assert page.get_by_test_id("run-name").inner_text() == demo.name
    page.get_by_role("tab", name="Resource Utilization").click()
    first = after_draw(page, 0)
    assert first["trial"] == demo.trials[0].id and first["metric"] == "cpu.util"

    # 2. every trial, with its state; every headline metric of each
    options = page.get_by_label("Select Trials", exact=True).locator("option").all_inner_texts()
    assert options == [trial_label(t) for t in demo.trials]
    assert demo.gpu_series == 0, "this test expects a CPU-only machine"
    for t in demo.trials:
        drawn = select(page, "Select Trials", trial_label(t))
        assert drawn["trial"] == t.id
        assert page.locator(".trial-state").inner_text() == t.state
        for label, (key, unit) in HEADLINE.items():
            drawn = select(page, "Select Metric", label)
            assert (drawn["metric"], drawn["unit"], drawn["trial"]) == (key, unit, t.id)
            assert page.get_by_test_id("chart-title").inner_text() == label
            assert page.get_by_test_id("chart-unit").inner_text() == unit
            msg = page.locator('[data-chart="main"] .chart-msg')
            if key.startswith("cpu."):
                assert len(drawn["series"]) == 1 and drawn["series"][0]["count"] >= 3
                assert not msg.is_visible()
                assert painted(page) > 50, f"{label} of {t.name}: no line drawn"
            else:
                # no GPU here: a clear "no data" message over an empty, sane chart
                assert drawn["series"] == []
                assert msg.is_visible()
                assert msg.inner_text() == f"No samples of {label} in this window"
                assert msg.get_attribute("role") == "status"
                assert painted(page) == 0
                assert drawn["yMax"] is not None and math.isfinite(drawn["yMax"])
                assert drawn["yMax"] > 0
                legend = page.locator('[data-chart="main"] .chart-legend').inner_text()
                assert "NaN" not in legend and "undefined" not in legend


def test_read_the_cpu_memory_chart_with_its_markers(page: Any, demo: Demo) -> None:
    slow = demo.slow
    drawn = open_tab(page, demo, f"?metric=cpu.mem&trial={slow.id}&cmp=")
    # unit, span: the whole run, from its start
    assert page.get_by_test_id("chart-title").inner_text() == "CPU Memory Usage"
    assert page.get_by_test_id("chart-unit").inner_text() == drawn["unit"] == "GiB"
    a, b = shown_span(page)
    assert a == 0 and b == pytest.approx(demo.extent(), abs=1.5)
    assert re.fullmatch(
        r"0:00:00(\.0)? – 0:0\d:\d\d(\.\d)?", page.get_by_test_id("time-span").inner_text()
    )
    # the line is the store's samples (few: raw), in GiB
    (series,) = drawn["series"]
    assert series["mode"] == "raw" and series["count"] >= 5
    assert series["max"] == pytest.approx(demo.cpu_mem_peak[slow.id] / GIB, rel=1e-5)
    assert 0.02 < series["max"] < 16
    # both kinds of markers, one for each step and evaluation the store holds
    marks = drawn["markers"]
    assert demo.steps[slow.id] >= 1 and demo.evals[slow.id] >= 1
    assert marks["steps"] == demo.steps[slow.id] and marks["stepBins"] == 0
    assert marks["evals"] == demo.evals[slow.id] and marks["evalBins"] == 0
    assert marks["stepsShown"] and marks["evalsShown"]
    px = marker_pixels(page)
    assert px["steps"] > 5 and px["evals"] > 5, px
    assert page.get_by_label("Optimizer Steps", exact=True).is_checked()
    assert page.get_by_label("Evaluations", exact=True).is_checked()

    # zoom in and out around the centre, page back and forward by the window's width
    whole = b - a
    click(page, "Zoom in")
    z0, z1 = shown_span(page)
    assert z1 - z0 == pytest.approx(whole / 2, abs=0.01)
    assert (z0 + z1) / 2 == pytest.approx(whole / 2, abs=0.01)
    click(page, "Page back")
    p0, p1 = shown_span(page)
    assert (p0, p1) == (pytest.approx(0, abs=0.01), pytest.approx(z1 - z0, abs=0.01))
    click(page, "Page forward")
    f0, f1 = shown_span(page)
    assert (f0, f1) == (pytest.approx(whole / 2, abs=0.01), pytest.approx(b, abs=0.01))
    forward = page.get_by_role("button", name="Page forward", exact=True)
    assert forward.get_attribute("aria-disabled") == "true", "paging stops at the run's end"
    drawn = last_draw(page)
    assert drawn["from"] == pytest.approx(f0) and drawn["to"] == pytest.approx(f1)
    # zooming out of a half-run window shows the whole run again; so does Reset zoom
    click(page, "Zoom out")
    assert shown_span(page) == (0, pytest.approx(b, abs=0.01))
    reset = page.get_by_role("button", name="Reset zoom", exact=True)
    assert reset.get_attribute("aria-disabled") == "true"
    click(page, "Zoom in")
    click(page, "Zoom in")
    assert shown_span(page)[1] - shown_span(page)[0] == pytest.approx(whole / 4, abs=0.01)
    click(page, "Reset zoom")
    assert shown_span(page) == (0, pytest.approx(b, abs=0.01))

    # a typed range: the slow trial's own span, where every one of its markers lies
    lo = math.floor(slow.start - demo.run_start)
    hi = math.ceil((slow.end or slow.start) - demo.run_start)
    page.get_by_role("button", name=re.compile("^Time range")).click()
    page.get_by_label("From", exact=True).fill(elapsed(lo))
    page.get_by_label("To", exact=True).fill(elapsed(hi))
    n = draws(page)
    page.get_by_role("button", name="Apply").click()
    drawn = after_draw(page, n, **{"from": float(lo), "to": float(hi)})
    assert page.get_by_test_id("time-span").inner_text().startswith(elapsed(lo))
    assert drawn["markers"]["steps"] == demo.steps[slow.id]
    assert drawn["markers"]["evals"] == demo.evals[slow.id]
    assert drawn["series"][0]["count"] >= 5
    assert f"from={lo}" in page.url and f"to={hi}" in page.url


def test_comparison_view(page: Any, demo: Demo) -> None:
    slow = demo.slow
    fast = next(t for t in demo.trials if t.id != slow.id)
    open_tab(page, demo, f"?metric=cpu.mem&trial={slow.id}&cmp=")
    add = page.get_by_role("button", name="Add selected to Comparison View")
    add.click()
    select(page, "Select Trials", trial_label(fast))
    select(page, "Select Metric", "CPU Utilization Percent")
    add.click()
    rows = page.locator(".cmp-row .cmp-select")
    assert [r.replace("\n", " ") for r in rows.all_inner_texts()] == [
        f"{slow.name} {slow.state} CPU Memory Usage GiB",
        f"{fast.name} {fast.state} CPU Utilization Percent %",
    ]
    page.wait_for_function("() => Object.keys(window.__tunescope.charts).length >= 3")
    charts = page.evaluate("() => window.__tunescope.charts")
    assert charts[f"cmp-{slow.id}-cpu.mem"]["series"][0]["count"] >= 5
    # selecting an entry draws its graph
    n = draws(page)
    rows.first.click()
    drawn = after_draw(page, n, metric="cpu.mem", trial=slow.id)
    assert drawn["markers"]["steps"] == demo.steps[slow.id]
    assert rows.first.get_attribute("aria-pressed") == "true"
    assert "is-selected" in (page.locator(".cmp-row").first.get_attribute("class") or "")
    # deleting one leaves the other
    page.get_by_role(
        "button", name=f"Remove {fast.name} · CPU Utilization Percent from comparison"
    ).click()
    assert [r.replace("\n", " ") for r in rows.all_inner_texts()] == [
        f"{slow.name} {slow.state} CPU Memory Usage GiB"
    ]
    assert page.locator(".cmp-card").count() == 1


def test_the_slow_loader_is_input_bound_in_the_findings_panel(
    page: Any, demo: Demo, demo_server: Server
) -> None:
    slow = demo.slow
    open_tab(page, demo, f"?metric=cpu.mem&trial={demo.trials[0].id}&cmp=")
    page.wait_for_function(
        "() => window.__tunescope.findings && window.__tunescope.findings.loads >= 1"
    )
    panel = page.get_by_role("region", name="Findings", exact=True)
    bound = panel.locator('.finding[data-rule="input_bound"]')
    assert bound.count() == 1, "only the slow loader waits for its batches"
    item = bound.first
    assert item.get_attribute("data-trial") == str(slow.id)
    assert item.locator(".sev").inner_text() == "high"
    assert re.fullmatch(
        r"Input-bound: \d+% of step time waiting for data",
        item.locator(".finding-title").inner_text(),
    )
    assert item.locator(".finding-trial").inner_text() == slow.name
    assert "Training waited for the next batch" in item.locator(".finding-msg").inner_text()
    assert re.fullmatch(
        r"\d:\d\d:\d\d(\.\d)? – \d:\d\d:\d\d(\.\d)?",
        item.get_by_test_id("finding-span").inner_text(),
    )
    summary = item.locator("summary")
    assert summary.inner_text().startswith("Advice (")
    assert not item.locator(".advice-list").is_visible()
    summary.click()
    assert "num_workers" in item.locator(".advice-list").inner_text()

    # choosing it shows the slow trial's data-wait share around the finding's span
    info = page.evaluate("() => window.__tunescope.findings.items")
    (f,) = [x for x in info if x["rule"] == "input_bound"]
    n = draws(page)
    item.locator(".finding-select").click()
    drawn = after_draw(page, n, metric="train.data_wait", trial=slow.id)
    t0, t1 = f["t0"] - demo.run_start, f["t1"] - demo.run_start
    margin = max(0.1 * (t1 - t0), 2 * slow.interval)
    assert drawn["from"] <= t0 + 1e-3 and drawn["to"] >= min(t1, demo.extent()) - 1e-3
    assert drawn["to"] - drawn["from"] == pytest.approx(t1 - t0 + 2 * margin, abs=0.01)
    assert drawn["series"][0]["count"] >= 3
    assert page.get_by_label("Select Trials", exact=True).input_value() == str(slow.id)
    assert "metric=train.data_wait" in page.url and f"trial={slow.id}" in page.url


def test_readme_screenshot(page: Any, demo: Demo, tmp_path: Path) -> None:
    """The README's picture: CPU Memory Usage of the slow-loader trial, with its optimizer-step
    and evaluation markers, a comparison entry and the Findings panel. Taken into a temporary
    folder; `make screenshot` takes it into docs/img (``TUNESCOPE_SCREENSHOTS``)."""
    folder = Path(os.environ.get("TUNESCOPE_SCREENSHOTS") or tmp_path)
    shot = folder / SHOT_NAME
    slow = demo.slow
    lo = max(0.0, math.floor(slow.start - demo.run_start) - 1)
    hi = math.ceil((slow.end or slow.start) - demo.run_start) + 1
    drawn = open_tab(
        page,
        demo,
        f"?metric=cpu.mem&trial={slow.id}&from={lo}&to={hi}"
        f"&cmp={slow.id}:cpu.mem,{slow.id}:cpu.util&sel=0",
    )
    assert drawn["markers"]["steps"] > 0 and drawn["markers"]["evals"] > 0
    page.wait_for_function("() => Object.keys(window.__tunescope.charts).length >= 3")
    page.wait_for_function(
        "() => window.__tunescope.findings && window.__tunescope.findings.loads >= 1"
    )
    panel = page.get_by_role("region", name="Findings", exact=True)
    assert panel.locator('.finding[data-rule="input_bound"]').count() == 1
    page.mouse.move(0, 0)
    page.wait_for_timeout(300)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    width, height = png_size(shot)
    assert width == 1280 and height > 900
    assert shot.stat().st_size > 20_000
    assert (SCREENSHOTS / SHOT_NAME).is_file()  # the README's copy exists


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", head[16:24])
    return int(w), int(h)
