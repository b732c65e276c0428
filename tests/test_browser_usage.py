"""The Usage page in Chromium against the generated store of known usage (tests/usage_truth.py,
SYNTHETIC readings): reached from the runs list; the range, the table's and the chart's
groupings each change what shows, to the second; the ten most wasteful trials link to their
trial with the idle stretch selected. Writes the screenshot docs/usage.md shows."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import usage_truth as ut
from browser_helpers import Server, ensure_built, serve, watched_page
from tunescope.store import open_store

pytest_plugins = ["browser_fixtures"]

PLAN = ut.plan()
LO, HI = ut.DAY0, ut.DAY0 + 90 * 86400.0
_A100 = {"NVIDIA A100-SXM4-80GB": 1.5}  # priced by its catalog key, a100-80gb
SHOT = Path(__file__).resolve().parents[1] / "docs" / "img" / "usage.png"


def hms(s: float) -> str:
    n = round(s)
    return f"{n // 3600}:{n % 3600 // 60:02d}:{n % 60:02d}"


@pytest.fixture(scope="module")
def known_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("usage-page") / "known.db"
    with open_store(str(path)) as st:
        ut.write(st, PLAN)
    ensure_built()
    srv = serve(str(path), tmp_path_factory.mktemp("usage-server") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture
def upage(browser: Any, known_server: Server, page_problems: list[str]) -> Iterator[Any]:
    with watched_page(browser, known_server.base, page_problems) as pg:
        yield pg


def _table(pg: Any, testid: str) -> list[list[str]]:
    rows = pg.locator(f"[data-testid={testid}] tbody tr")
    return [
        [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        for i in range(rows.count())
    ]


def test_the_usage_page_answers_as_the_cli_to_the_second(upage: Any) -> None:
    pg = upage
    pg.goto("/#/")
    pg.get_by_role("link", name="Usage").first.click()
    pg.wait_for_url("**/#/usage")
    pg.locator("[data-testid=usage-table], .msg").first.wait_for()
    # the range: the 90 days of the known store
    pg.locator("#usage-since").fill("2026-01-05")
    pg.locator("#usage-since").dispatch_event("change")
    pg.locator("#usage-until").fill("2026-04-05")
    pg.locator("#usage-until").dispatch_event("change")
    assert "since=2026-01-05" in pg.url and "until=2026-04-05" in pg.url
    want = ut.truth(PLAN, ["project"], LO, HI)
    pg.wait_for_function(
        "n => document.querySelectorAll('[data-testid=usage-table] tbody tr').length === n",
        arg=len(want),
    )
    got = {r[0]: r for r in _table(pg, "usage-table")}
    for (project,), t in want.items():
        r = got[project]
        assert r[1:4] == [hms(t["gpu_held_s"]), hms(t["gpu_busy_s"]), hms(t["gpu_idle_s"])]
        assert r[4] == t["busy_by"]
        assert r[7:10] == [hms(t["cpu_core_s"]), hms(t["cpu_quota_core_s"]), str(t["trials"])]
        assert r[10] == f"{t['failed_pruned_pct']:.1f}%"
    # the table's grouping
    pg.locator("#usage-by").select_option("user")
    want_u = ut.truth(PLAN, ["user"], LO, HI)
    pg.wait_for_function(
        "() => document.querySelector('[data-testid=usage-table] h2').textContent === 'By user'"
    )
    got_u = {r[0]: r for r in _table(pg, "usage-table")}
    assert set(got_u) == {k[0] for k in want_u}
    for (user,), t in want_u.items():
        assert got_u[user][1] == hms(t["gpu_held_s"])
        assert got_u[user][2] == hms(t["gpu_busy_s"])
    # prices: the cost column at the prices given (a model name and a catalog key)
    pg.locator("#usage-price").fill("NVIDIA H100 80GB HBM3=2.5, a100-80gb=1.5")
    pg.locator("#usage-price").dispatch_event("change")
    pg.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=usage-table] tbody td')]"
        ".some(td => td.textContent.startsWith('$'))"
    )
    priced = ut.truth(PLAN, ["user"], LO, HI, {"NVIDIA H100 80GB HBM3": 2.5, **_A100})
    for row in _table(pg, "usage-table"):
        # to the cent (the sums run in another order: a value at half a cent may round apart)
        assert abs(float(row[11][1:]) - priced[(row[0],)]["cost_usd"]) <= 0.005 + 1e-9
    assert "price=" in pg.url
    # the chart's grouping: one stack per day with a GPU held, by GPU model
    pg.locator("#usage-group").select_option("gpu_model")
    pg.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=usage-chart] rect[data-group]')]"
        ".some(r => r.dataset.group.startsWith('NVIDIA'))"
    )
    rects = pg.locator("[data-testid=usage-chart] rect[data-group]")
    groups = set(rects.evaluate_all("rs => rs.map(r => r.dataset.group)"))
    assert groups == set(ut.MODELS)
    days = set(rects.evaluate_all("rs => rs.map(r => r.dataset.day)"))
    want_days = {k[0] for k, t in ut.truth(PLAN, ["day"], LO, HI).items() if t["gpu_held_s"] > 0}
    assert days == want_days
    assert "group=gpu_model" in pg.url and "by=user" in pg.url
    # the ten most wasteful trials, most first
    per_trial = []
    for p in PLAN:
        t = ut.truth([p], [], LO, HI).get(())
        if t and t["gpu_held_s"] > 0:
            per_trial.append((t["gpu_held_s"] - t["gpu_busy_s"], p))
    per_trial.sort(key=lambda x: -x[0])
    wasted = _table(pg, "usage-wasted")
    assert [r[0] for r in wasted] == [f"{p.run} / {p.name}" for _, p in per_trial[:10]]
    assert [r[3] for r in wasted] == [hms(w) for w, _ in per_trial[:10]]
    SHOT.parent.mkdir(exist_ok=True)
    pg.screenshot(path=str(SHOT), full_page=True)
    # a link selects the trial's idle stretch on its page
    link = pg.locator("[data-testid=usage-wasted] a.wasted-link").first
    trial_id = link.get_attribute("data-trial")
    link.click()
    pg.wait_for_url("**/resources?*")
    q = parse_qs(urlsplit(pg.url).fragment.split("?", 1)[1])
    assert q["trial"] == [trial_id]
    plan = per_trial[0][1]
    idle = [ut._idle_minutes(g.busy()) for g in plan.gpus]
    if any(idle):
        frm, to = float(q["from"][0]), float(q["to"][0])
        run_start = next(p.start for p in PLAN if p.run == plan.run)  # made the run
        # the stretch, in seconds since the run's start, is a run of planted idle minutes
        first = round((frm - (plan.start - run_start)) / 60)
        last = round((to - (plan.start - run_start)) / 60)
        assert any(set(range(first, last)) <= i for i in idle)
    pg.locator("[data-testid=run-name]").wait_for()
    assert pg.locator("[data-testid=run-name]").inner_text() == plan.run


def _front(points: list[tuple[float, float, str]]) -> set[str]:
    """Names on the Pareto front of (cost, objective to minimize, name), counted here."""
    return {
        n
        for c, s, n in points
        if not any(c2 <= c and s2 <= s and (c2 < c or s2 < s) for c2, s2, _ in points)
    }


def test_the_cost_frontier_panel_on_a_run_page(upage: Any) -> None:
    pg = upage
    run = "synthetic-vision-ana-sweep-0"
    mine = [p for p in PLAN if p.run == run]
    pg.goto("/#/")
    run_id = pg.evaluate(
        "n => fetch('/api/runs').then(x => x.json()).then(rs => rs.find(r => r.name === n).id)",
        run,
    )
    pg.goto(f"/#/runs/{run_id}")
    marks = pg.locator("[data-testid=frontier-hours] [data-kind]")
    marks.first.wait_for()
    kinds = dict(
        marks.evaluate_all(
            "ms => ms.map(m => [m.querySelector('title').textContent.split(' ')[0],"
            " m.dataset.kind])"
        )
    )
    scored = [p for p in mine if p.objective is not None]
    assert set(kinds) == {p.name for p in scored}
    done = [
        (p.minutes * 60.0 * len(p.gpus) / 3600.0, p.objective, p.name)
        for p in scored
        if p.state == "completed" and p.objective is not None
    ]
    assert {n for n, k in kinds.items() if k == "front"} == _front(done)
    assert {n for n, k in kinds.items() if k == "pruned"} == {
        p.name for p in scored if p.state == "pruned"
    }
    mem_marks = pg.locator("[data-testid=frontier-mem] [data-kind]")
    assert mem_marks.count() == len([p for p in scored if p.gpus])
    said = pg.locator("[data-testid=frontier-saying]").inner_text()
    best = min((p for p in scored if p.state == "completed"), key=lambda p: p.objective or 0)
    assert said.startswith(f"The best trial, {best.name}, ")
    api = pg.evaluate("r => fetch(`/api/runs/${r}/frontier`).then(x => x.json())", run_id)
    assert said == api["saying"]
    pg.locator("[data-testid=frontier]").screenshot(path=str(SHOT.with_name("frontier.png")))
    # a mark links to its trial on the Resource Utilization tab
    target = pg.locator("[data-testid=frontier-hours] a").first
    href = target.get_attribute("href")
    assert href is not None and "/resources?trial=" in href
    trial = href.split("trial=", 1)[1]
    target.click()
    pg.wait_for_url(lambda url: "/resources?" in url and f"trial={trial}" in url)
