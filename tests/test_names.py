"""A run's default name and the page's links, each written once (``tunescope/_names.py``)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tunescope._names import RUN_STAMP, default_run_name, page_link, page_root

ROUTE_TS = Path(__file__).resolve().parents[1] / "web" / "src" / "route.ts"


def test_a_default_run_name_is_its_maker_and_the_local_time() -> None:
    before = time.strftime(RUN_STAMP)
    name = default_run_name("load")
    after = time.strftime(RUN_STAMP)
    assert re.fullmatch(r"load-\d{8}-\d{6}", name), name
    assert before <= name.removeprefix("load-") <= after
    assert default_run_name("torchrun", "job-7") == "torchrun-job-7"


def test_a_page_link_names_the_run_and_trial_as_the_page_reads_them() -> None:
    assert page_link("http://127.0.0.1:8765", 3, 12) == (
        "http://127.0.0.1:8765/#/runs/3/resources?trial=12"
    )
    link = page_link("https://ts.example.org/", "sweep a/b#1")
    assert link == "https://ts.example.org/#/runs/sweep%20a%2Fb%231/resources"
    fragment = urlsplit(link).fragment
    path = fragment.split("?", 1)[0].split("/")
    assert [unquote(p) for p in path] == ["", "runs", "sweep a/b#1", "resources"]
    tabs = re.search(r"export const TABS = \[([^\]]*)\]", ROUTE_TS.read_text(encoding="utf-8"))
    assert tabs and '"resources"' in tabs.group(1)  # the tab the link opens is one of the page's


def test_a_team_server_serves_its_page_at_the_root_of_its_address() -> None:
    assert page_root("https://ts.example.org:8443/vision") == "https://ts.example.org:8443"
    assert page_root("HTTP://Host:1/p") == "http://Host:1"
    assert page_root("http://user@host:2/p") == "http://host:2"
    for other in ("tunescope.db", "sqlite:///x.db", "postgresql://u@h/db", "http:///p"):
        assert page_root(other) is None, other
