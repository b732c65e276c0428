"""A tunescope server killed (SIGKILL) mid-trial and started again on its port: a real
training recording through an HTTP store loses nothing and writes nothing twice.

The server is uvicorn in a process of its own, over a fresh PostgreSQL schema when
TUNESCOPE_TEST_POSTGRES is set, else over a SQLite file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import PG_URL, pg_schema
from fault_helpers import finish_training, gaps, sample_times, settled, start_training
from http_helpers import Server, make_token
from tunescope.store import open_store

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SECONDS = 8.0
INTERVAL = 0.2
DOWN_S = 3.0
HELD_BOUND = 2.5
"""As in test_faults_postgres.py: entering or leaving a trial waits at most 0.5 / 1 s."""


@pytest.fixture
def db_url(tmp_path: Path) -> Iterator[str]:
    if PG_URL:
        with pg_schema() as url:
            yield url
    else:
        yield str(tmp_path / "server.db")


def test_a_server_killed_mid_trial_loses_nothing(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(db_url, tmp_path / "server.log").start()
    try:
        token = make_token(db_url, "faults")
        monkeypatch.setenv("TUNESCOPE_TOKEN", token)
        url = server.url("faults")
        p = start_training(url, SECONDS, INTERVAL, env=dict(os.environ))
        time.sleep(1.5)
        server.kill()
        killed_at = time.time()
        time.sleep(DOWN_S)
        server.start()
        back_at = time.time()
        result = finish_training(p)
        settled(url, str(result["key"]))
        with open_store(url) as st:  # read back through the server
            info = st.trial_by_key(str(result["key"]))
            assert info.state == "completed", (info.state, info.error, result["stderr"])
            assert info.params == {"lr": 0.1} and info.name == "t"
            ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
            assert ev is not None
            names = [e.name for e in ev]
            losses = st.scalars(info.id, "loss")
            t = sample_times(st, info.id, "cpu.procs")
        assert info.end is not None
        span = info.end - info.start
        down = [x for x in t if killed_at <= x <= back_at]
        print(
            f"\nkilled for {back_at - killed_at:.1f} s of a {span:.1f} s trial: "
            f"{result['marks']} marks made, {len(names)} stored ({len(set(names))} distinct); "
            f"{len(losses)} losses; {len(t)} cpu.procs samples ({len(set(t))} distinct, "
            f"{len(down)} taken while the server was down), longest gap {gaps(t):.2f} s; "
            f"expected about {span / INTERVAL:.0f} samples"
        )
        assert len(names) == result["marks"] == len(set(names))  # one for one, none twice
        assert [s.step for s in losses] == list(range(int(str(result["marks"]))))
        assert span >= SECONDS
        assert len(t) >= 0.6 * span / INTERVAL, (len(t), span)
        assert len(down) >= 0.6 * DOWN_S / INTERVAL  # the sampler kept what it took meanwhile
        assert gaps(t) < 1.5, gaps(t)  # the outage left no hole
        assert len(t) == len(set(t))
        assert result["enter"] < HELD_BOUND and result["leave"] < HELD_BOUND, result
        assert float(str(result["longest_call"])) < HELD_BOUND, result
        assert "is unavailable (cannot reach" in str(result["stderr"])  # the outage was felt
        assert token not in str(result["stderr"])
    finally:
        server.stop()
