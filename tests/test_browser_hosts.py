"""A trial written by two hosts (a two-node job: a sampler on each node) in a real Chromium:
the Resource Utilization chart draws one line per host and GPU, labelled "host · GPU 0", and
the trial's line across hosts: the total for GPU memory, the mean for GPU utilization. A trial
of one host is drawn as before (a line per GPU, no aggregate). Its own store and server: the
session's recorded run stays as the other browser tests know it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from browser_helpers import Server, after_draw, ensure_built, serve, watched_page
from tunescope.metrics import GIB
from tunescope.store import open_store

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

MINUTES = 10
# per host: GPU memory (GiB) and GPU utilization (%) of its GPU 0
NODES = {"node-a": (30.0, 80.0), "node-b": (20.0, 60.0)}


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, int]]]:
    path = tmp_path_factory.mktemp("hosts") / "store.db"
    t0 = time.time() - 3600
    t = t0 + np.arange(MINUTES * 60, dtype=np.float64)
    with open_store(path) as store:
        run = store.ensure_run("ddp-two-nodes", start=t0)
        ddp = store.create_trial(run.id, "ddp", {"nodes": 2}, host="node-a", start=t0)
        solo = store.create_trial(run.id, "solo", {"nodes": 1}, host="node-a", start=t0)
        rows = []
        for k, (host, (mem, util)) in enumerate(NODES.items()):
            # the nodes' samplers tick out of step with each other (0.3 s apart)
            tk = t + 0.3 * k
            for metric, value in (("gpu.mem", mem * GIB), ("gpu.util", util)):
                sid = store.series(ddp.id, metric, "0", host=host).id
                rows += [(sid, float(x), value) for x in tk]
        for metric, value in (("gpu.mem", 30.0 * GIB), ("gpu.util", 80.0)):
            sid = store.series(solo.id, metric, "0").id
            rows += [(sid, float(x), value) for x in t]
        store.append_samples(rows)
        for trial in (ddp, solo):
            store.update_trial(trial.id, state="completed", end=t[-1] + 1, heartbeat=t[-1] + 1)
        store.compact()
        ids = {"run": run.id, "ddp": ddp.id, "solo": solo.id}
    ensure_built()
    srv = serve(str(path), tmp_path_factory.mktemp("hosts-server") / "server.log")
    yield srv, ids
    srv.stop()


@pytest.fixture
def hosts_page(  # browser_fixtures' page, over this module's server
    browser: Any, two_hosts: tuple[Server, dict[str, int]], page_problems: list[str]
) -> Iterator[Any]:
    srv, _ = two_hosts
    with watched_page(browser, srv.base, page_problems) as pg:
        yield pg


def _legend(page: Any) -> list[str]:
    return list(page.locator('[data-chart="main"] .legend-label').all_inner_texts())


def test_a_line_per_host_and_the_trials_total_or_mean(
    hosts_page: Any, two_hosts: tuple[Server, dict[str, int]]
) -> None:
    _, ids = two_hosts
    page = hosts_page
    page.goto(f"/#/runs/{ids['run']}/resources?metric=gpu.mem&trial={ids['ddp']}")
    draw = after_draw(page, 0, metric="gpu.mem", trial=ids["ddp"])
    series = draw["series"]
    assert [(s["host"], s["device"], s["label"]) for s in series] == [
        ("node-a", "0", "node-a · GPU 0"),
        ("node-b", "0", "node-b · GPU 0"),
        (None, None, "Total (2 hosts)"),
    ]
    assert [s["max"] for s in series[:2]] == pytest.approx([30.0, 20.0])
    assert series[2]["mode"] == "total" and series[2]["count"] > 100
    assert series[2]["max"] == pytest.approx(50.0)  # each host's GPU memory, added
    assert _legend(page) == ["node-a · GPU 0", "node-b · GPU 0", "Total (2 hosts)"]
    assert page.locator('[data-chart="main"] .swatch-dashed').count() == 1

    n = page.evaluate("() => window.__tunescope.drawCount")
    page.get_by_label("Select Metric").select_option("gpu.util")
    draw = after_draw(page, n, metric="gpu.util", trial=ids["ddp"])
    total = draw["series"][2]
    assert (total["label"], total["mode"]) == ("Mean (2 hosts)", "mean")
    assert total["max"] == pytest.approx(70.0)  # utilization is averaged, never added
    assert _legend(page) == ["node-a · GPU 0", "node-b · GPU 0", "Mean (2 hosts)"]


def test_a_trial_of_one_host_is_drawn_as_before(
    hosts_page: Any, two_hosts: tuple[Server, dict[str, int]]
) -> None:
    _, ids = two_hosts
    page = hosts_page
    page.goto(f"/#/runs/{ids['run']}/resources?metric=gpu.mem&trial={ids['solo']}")
    draw = after_draw(page, 0, metric="gpu.mem", trial=ids["solo"])
    assert [(s["host"], s["label"]) for s in draw["series"]] == [("node-a", "GPU 0")]
    assert _legend(page) == ["GPU 0"]
    assert page.locator('[data-chart="main"] .swatch-dashed').count() == 0
