"""The Serving tab in a real Chromium, on a load run made per SERVING_CONTRACT (the synthetic
engine of tests/serving_helpers.py) served by the real app: three levels in the charts and the
table, the SLO drawn as a line, and a level's link opening its trial on the Resource
Utilization tab, where Select Metric lists the engine's serve.* series. A training run shows
no Serving tab."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from browser_helpers import Server, ensure_built, serve, watched_page
from serving_helpers import write_load_run
from tunescope.store import open_store

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


Served = tuple[Server, dict[int, int]]
"""The server, and the load run's trial ids by level."""


@pytest.fixture(scope="module")
def load_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = str(tmp_path_factory.mktemp("serving") / "store.db")
    with open_store(url) as st:
        ids = write_load_run(st)
        plain = st.ensure_run("plain")
        t = st.create_trial(plain.id, "t", {"lr": 0.1})
        st.update_trial(t.id, state="completed", end=t.start + 1)
    ensure_built()
    srv = serve(url, tmp_path_factory.mktemp("serving-log") / "server.log")
    yield srv, ids
    srv.stop()


@pytest.fixture
def spage(browser: Any, load_server: Served) -> Iterator[Any]:
    problems: list[str] = []
    with watched_page(browser, load_server[0].base, problems) as pg:
        yield pg


def test_serving_tab_levels_slo_and_a_level_opens_its_trial(
    spage: Any, load_server: Served
) -> None:
    ids = load_server[1]
    spage.goto("/#/runs/serve")
    tab = spage.get_by_role("tab", name="Serving")
    tab.click()
    assert tab.get_attribute("aria-selected") == "true"
    spage.wait_for_function("() => window.__tunescope.serving !== null")
    info = spage.evaluate("() => window.__tunescope.serving")
    assert info["levels"] == [1, 2, 6]
    assert info["charts"]["ttft"] == {"lines": ["p50", "p90", "p99"], "slo": 0.5}
    assert info["charts"]["tpot"]["slo"] == 0.05 and info["charts"]["e2el"]["slo"] is None
    assert info["charts"]["throughput"]["lines"] == ["requests/s", "goodput"]
    # each chart is drawn, the SLO a line of its legend
    for chart in ("ttft", "tpot", "e2el", "throughput"):
        spage.locator(f'[data-serving-chart="{chart}"] canvas').first.wait_for()
    ttft = spage.locator('[data-serving-chart="ttft"]')
    assert ttft.locator('[data-line="SLO 500 ms"]').count() == 1
    assert spage.get_by_test_id("slo").inner_text() == "SLO (p99): TTFT ≤ 500 ms, TPOT ≤ 50 ms"
    # the table: one row per level, sorted, with queueing's TTFT at 6
    rows = spage.locator(".serving-tab table tbody tr")
    assert rows.count() == 3
    cells = [rows.nth(i).locator("td").all_inner_texts() for i in range(3)]
    assert [c[0] for c in cells] == ["1 concurrent", "2 concurrent", "6 concurrent"]
    assert [c[1] for c in cells] == ["c1", "c2", "c6"]
    assert cells[0][4] == "50 / 50 / 50" and cells[2][4].endswith("/ 1390")
    # a level opens its trial on the Resource Utilization tab
    spage.get_by_role("link", name="c6", exact=True).click()
    spage.get_by_role("tab", name="Resource Utilization").wait_for()
    spage.wait_for_function(
        "id => document.querySelector('#select-trials')?.value === String(id)", arg=ids[6]
    )
    assert f"trial={ids[6]}" in spage.url and "/resources" in spage.url
    # where Select Metric lists the engine's series the level has
    listed = spage.get_by_label("Select Metric", exact=True).locator("option")
    values = set(listed.evaluate_all("os => os.map(o => o.value)"))
    assert values >= {"serve.running", "serve.waiting", "serve.kv_use", "serve.gen_tokens"}


def test_no_serving_tab_on_other_runs(spage: Any) -> None:
    spage.goto("/#/runs/plain")
    spage.get_by_role("tab", name="Resource Utilization").wait_for()
    assert spage.get_by_role("tab", name="Serving").count() == 0
