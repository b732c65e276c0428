"""Faults of a real PostgreSQL server under a real training: a restart, an idle-session
timeout, a frozen (SIGSTOPped) server, a server that is down when training starts or ends, a
password. Each test counts what was kept: samples against the seconds elapsed, events one for
one, the final state, and how long the training thread was held.

The server is a private cluster the session starts (``pg_cluster.py``), never the shared one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api_helpers import request
from fault_helpers import (
    finish_training,
    gaps,
    sample_times,
    settled,
    start_training,
    wait_for,
)
from pg_cluster import PrivateCluster, private_cluster
from tunescope.store import open_store

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SECONDS = 6.0
INTERVAL = 0.2
HELD_BOUND = 2.5
"""Entering or leaving a trial may take ENTER/EXIT_WAIT_S (0.5 / 1 s); this bound leaves room
for a loaded machine while a store that holds the thread would take the fault's seconds."""


@pytest.fixture(scope="session")
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster() as c:
        yield c


@pytest.fixture
def pg(cluster: PrivateCluster) -> str:
    """A fresh database on a running, default-configured private server."""
    cluster.reset()
    return cluster.fresh_database(f"t{uuid.uuid4().hex[:10]}")


def later(seconds: float, fn: Any) -> threading.Thread:
    th = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    th.start()
    return th


def check_everything_kept(url: str, result: dict[str, Any], seconds: float) -> None:
    """Every mark and loss, once; samples over the whole trial with no long gap; completed.
    (Once the trial's sampler, which outlives the training, has written what it holds.)"""
    settled(url, str(result["key"]))
    with open_store(url, create=False) as st:
        info = st.trial_by_key(str(result["key"]))
        assert info.state == "completed", (info.state, info.error, result["stderr"])
        assert info.params == {"lr": 0.1} and info.name == "t"
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None
        names = [e.name for e in ev]
        assert len(names) == result["marks"] == len(set(names))  # one for one, none twice
        assert len(st.scalars(info.id, "loss")) == result["marks"]
        t = sample_times(st, info.id, "cpu.procs")
        assert info.end is not None
        span = info.end - info.start
        assert span >= seconds
        assert len(t) >= 0.6 * span / INTERVAL, (len(t), span)
        assert gaps(t) < 1.5, gaps(t)  # the outage left no hole
        assert len(t) == len(set(t))
    assert result["enter"] < HELD_BOUND and result["leave"] < HELD_BOUND, result
    assert result["enter_run"] < HELD_BOUND, result


def test_a_server_restart_mid_trial_loses_nothing(cluster: PrivateCluster, pg: str) -> None:
    p = start_training(pg, SECONDS, INTERVAL)
    later(1.5, lambda: cluster.restart_after(3.0)).join()
    result = finish_training(p)
    check_everything_kept(pg, result, SECONDS)


def test_idle_session_timeout_loses_nothing(cluster: PrivateCluster, pg: str) -> None:
    """Poolers and cloud databases close idle sessions: every connection is cut between the
    writes, with no outage at all."""
    cluster.configure(idle_session_timeout="300ms")
    p = start_training(pg, 4.0, 1.0)
    result = finish_training(p)
    with open_store(pg, create=False) as st:
        info = st.trial_by_key(str(result["key"]))
        assert info.state == "completed"
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None and len(ev) == result["marks"]
        assert len(sample_times(st, info.id, "cpu.procs")) >= 3
    assert "unavailable" not in str(result["stderr"])  # healed without a warning


def test_a_frozen_server_holds_no_training_thread(cluster: PrivateCluster, pg: str) -> None:
    """SIGSTOP of the server: connections stay open and nothing answers (no TCP error ever
    comes). Training is not held; everything lands once the server is thawed."""
    p = start_training(pg, SECONDS, INTERVAL)
    time.sleep(1.5)
    cluster.freeze()
    try:
        time.sleep(3.0)
    finally:
        cluster.cont()
    result = finish_training(p)
    check_everything_kept(pg, result, SECONDS)


def test_a_server_down_at_the_end_is_written_after_it(cluster: PrivateCluster, pg: str) -> None:
    """The server goes away before the trial ends: leaving the trial returns at once, the
    process exits, and the sampler (which outlives it) writes everything, the trial's end
    included, once the server is back."""
    p = start_training(pg, 3.0, INTERVAL)
    time.sleep(1.0)
    cluster.stop()
    result = finish_training(p)
    time.sleep(1.0)
    cluster.start()
    check_everything_kept(pg, result, 3.0)


def test_a_server_down_at_the_start_holds_nothing(cluster: PrivateCluster, pg: str) -> None:
    """Training starts while the server is down: run() and the trial return within their
    bounds, and the trial (with its name and params) is created when the server is back."""
    cluster.stop()
    later(2.0, cluster.start)
    result = finish_training(start_training(pg, 4.0, INTERVAL))
    check_everything_kept(pg, result, 4.0)


def test_a_terminated_backend_is_replaced(cluster: PrivateCluster, pg: str) -> None:
    """pg_terminate_backend on every client mid-trial, twice: the writers reconnect."""
    p = start_training(pg, 4.0, INTERVAL)
    for _ in range(2):
        time.sleep(1.2)
        cluster.terminate_clients()
    check_everything_kept(pg, finish_training(p), 4.0)


def test_the_page_recovers_by_itself(cluster: PrivateCluster, pg: str) -> None:
    """`tunescope ui` on a server that restarts: 503 while it is down, 200 after, with no
    restart of the page's process."""
    from tunescope.server import create_app
    from tunescope.server._app import release_store

    with open_store(pg) as st:
        st.ensure_run("r")
    app = create_app(pg)
    try:
        assert request(app, "/api/runs").status_code == 200
        cluster.stop()
        down = request(app, "/api/runs")
        assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable"
        assert down.headers["retry-after"] == "2"
        cluster.start()
        assert wait_for(lambda: request(app, "/api/runs").status_code == 200, 30)
    finally:
        release_store(app.state.store)


PASSWORD = "s3cr3t-Pa55"


def test_a_password_in_the_url_works_everywhere_and_shows_nowhere(
    cluster: PrivateCluster, pg: str
) -> None:
    """A store URL with a password: the SDK, its sampler and its children record; the
    password is on no command line, in no output, in no answer of the page."""
    from tunescope.server import create_app
    from tunescope.server._app import release_store

    db = pg.rsplit("/", 1)[1]
    cluster.password_user("writer", PASSWORD, db)
    url = f"postgresql://writer:{PASSWORD}@127.0.0.1:{cluster.port}/{db}"
    with pytest.raises(Exception, match="password authentication failed"):
        open_store(f"postgresql://writer:wrong@127.0.0.1:{cluster.port}/{db}").close()
    env = dict(os.environ, TUNESCOPE_STORE=url)
    p = start_training("", 3.0, INTERVAL, env=env)
    time.sleep(1.0)
    cmdlines = _cmdlines_of_children(p.pid)
    assert cmdlines and all(PASSWORD not in c for c in cmdlines), cmdlines
    result = finish_training(p)
    assert PASSWORD not in str(result["stderr"])
    check_everything_kept(url, result, 3.0)
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "run", "--run", "cli", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0 and PASSWORD not in out.stdout + out.stderr, out.stderr
    assert "writer@127.0.0.1" in out.stderr
    for shown in (url, f"postgresql://writer@127.0.0.1:{cluster.port}/{db}?password={PASSWORD}"):
        app = create_app(shown)
        try:
            health = request(app, "/api/health")
            assert health.status_code == 200 and PASSWORD not in health.text
            assert "writer@127.0.0.1" in health.json()["store"]
            assert PASSWORD not in request(app, "/api/runs").text
        finally:
            release_store(app.state.store)


def _cmdlines_of_children(pid: int) -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return out
