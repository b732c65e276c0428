"""``tunescope compact --keep-raw`` and ``serve --keep-raw`` (issue 20, a store bounded for
years), on real SQLite and PostgreSQL stores: the dry run says what would go and changes
nothing; the run drops the old raw chunks, keeps windows, latest values and a finished trial's
findings as they were, and loses nothing of what another process writes meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from api_helpers import app_over, request
from cli_helpers import cli
from fault_helpers import wait_for
from tunescope.analyze import findings_for_trial, to_dict
from tunescope.store import SQLStore, Store, open_store

DAY = 86400.0
OLD = time.time() - 40 * DAY  # a trial older than --keep-raw 30d
NEW = time.time() - 3600.0  # one inside it
METRICS = (("gpu.util", "0", 3.0), ("gpu.mem", "0", 2e9), ("cpu.util", None, 30.0))


def _trial(st: Store, run: str, t0: float, n: int, finished: bool = True) -> dict[str, int]:
    """A trial of ``n`` seconds from ``t0`` at 1 Hz (a GPU at 3-9%, 2 GB of memory: it
    has findings); its series ids by metric."""
    r = st.ensure_run(run, start=t0)
    tr = st.create_trial(r.id, start=t0)
    ids = {}
    for metric, device, base in METRICS:
        sid = st.series(tr.id, metric, device).id
        st.append_samples((sid, t0 + i, base + i % 7) for i in range(n))
        ids[metric] = sid
    if finished:
        st.update_trial(tr.id, state="finished", end=t0 + n)
    st.compact()
    return ids


# compacting a month of samples is slow on a loaded machine; the store is the one given, never
# one from the environment the tests run in
SLOW = 300.0
NO_STORE = ("TUNESCOPE_STORE",)


def _totals(st: Store, sid: int, lo: float, hi: float) -> tuple[int, float, float, float]:
    w = st.window(sid, lo, hi, 50)
    assert w.buckets is not None
    return (
        sum(b.n for b in w.buckets),
        min(b.min for b in w.buckets),
        max(b.max for b in w.buckets),
        round(sum(b.mean * b.n for b in w.buckets), 3),
    )


def _chunks(st: SQLStore) -> int:
    with st._tx() as cur:
        return int(st._q(cur, "SELECT COUNT(*) FROM chunks").fetchone()[0])


def test_compact_dry_run_then_drops_and_keeps_what_readers_see(
    sql_store_url: str, request: pytest.FixtureRequest
) -> None:
    # SQL stores only: the CLI runs in a second process, and the embedded ClickHouse opens its
    # folder in one process at a time; compact on ClickHouse runs in-process in
    # test_usage_kept_ahead.py and tests/test_clickhouse_retention.py
    with open_store(sql_store_url) as st:
        assert isinstance(st, SQLStore)
        old = _trial(st, "old", OLD, 3600)
        new = _trial(st, "new", NEW, 600)
        old_trial = st._series_info(old["gpu.util"]).trial_id
        found = to_dict(findings_for_trial(st, old_trial))
        assert {f["rule"] for f in found} >= {"gpu_underused"}
        lo, hi = np.floor(OLD / 60) * 60, OLD + 3600 + 60
        windows = {sid: _totals(st, sid, lo, hi) for sid in old.values()}
        latest = st.latest(old_trial)
        gone = [c for sid in old.values() for c in st._chunk_summaries(sid, -np.inf, np.inf)]
        chunks = _chunks(st)

    dry = cli(
        "compact",
        "--keep-raw",
        "30d",
        "--dry-run",
        "--store",
        sql_store_url,
        timeout=SLOW,
        drop=NO_STORE,
    )
    assert dry.returncode == 0, dry.stderr
    samples = 3 * 3600
    assert dry.stdout.startswith(f"would drop {len(gone)} raw chunks ({samples} samples, ")
    assert "of 3 series" in dry.stdout
    with open_store(sql_store_url) as st:
        assert isinstance(st, SQLStore)
        assert _chunks(st) == chunks and st.kept_findings(old_trial) is None

    p = cli("compact", "--keep-raw", "30d", "--store", sql_store_url, timeout=SLOW, drop=NO_STORE)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"dropped {len(gone)} raw chunks ({samples} samples, ")
    with open_store(sql_store_url) as st:
        assert isinstance(st, SQLStore)
        assert _chunks(st) == chunks - len(gone)
        for sid in old.values():
            assert st.read_samples(sid)[0].size == 0  # the raw is gone
            assert _totals(st, sid, lo, hi) == windows[sid]  # its rollups answer
        assert st.latest(old_trial) == latest
        assert st.kept_findings(old_trial) is not None
        assert to_dict(findings_for_trial(st, old_trial)) == found
        for sid in new.values():  # inside --keep-raw: untouched
            assert st.read_samples(sid)[0].size == 600 and st.raw_from(sid) is None
    # the raw kept, the rest said
    exported = cli("export", "old", "--store", sql_store_url, timeout=SLOW, drop=NO_STORE)
    assert exported.returncode == 0 and exported.stdout.splitlines()[1:] == []
    warned = exported.stderr.splitlines()
    assert len(warned) == 3 and all("were dropped by compaction" in w for w in warned)
    assert (
        cli("export", "new", "--store", sql_store_url, timeout=SLOW, drop=NO_STORE).stdout.count(
            "\n"
        )
        == 1 + 3 * 600
    )
    again = cli(
        "compact", "--keep-raw", "30d", "--store", sql_store_url, timeout=SLOW, drop=NO_STORE
    )
    assert again.returncode == 0 and again.stdout.startswith("dropped 0 raw chunks (0 samples")


_WRITER = """
import os, sys
from tunescope.store import open_store
url, stop, t = sys.argv[1], sys.argv[2], float(sys.argv[3])
sids = [int(x) for x in sys.argv[4:]]
st = open_store(url)
batches = 0
while not os.path.exists(stop) or batches < 3:
    st.append_samples([(sid, t + k, 7.0) for sid in sids for k in range(100)])
    t += 100
    batches += 1
    if batches == 1:
        print("ready", flush=True)
st.close()
print(batches * 100, flush=True)
"""


def test_compact_while_another_process_writes_loses_nothing(
    sql_store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A second process appends to the very series being compacted, in batches, from before
    compact starts until after it ends: every sample of both is counted after."""
    # SQL stores only: the embedded ClickHouse opens its folder in one process at a time, and this
    # test opens the store from a second one (a ClickHouse server would run it)
    n_old = 2 * 3600
    with open_store(sql_store_url) as st:
        ids = [sid for k in range(4) for sid in _trial(st, f"old{k}", OLD, n_old).values()]
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, sql_store_url, str(stop), str(NEW), *map(str, ids)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        p = cli(
            "compact", "--keep-raw", "30d", "--store", sql_store_url, timeout=SLOW, drop=NO_STORE
        )
        stop.touch()
        out, _ = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert p.returncode == 0, p.stderr
    assert writer.returncode == 0
    written = int(out.split()[-1])
    assert f"raw chunks ({len(ids) * n_old} samples, " in p.stdout  # all of the old
    with open_store(sql_store_url) as st:
        for sid in ids:
            extent = st.series_extent(sid)
            assert extent is not None and extent[2] == n_old + written
            assert st.raw_from(sid) is not None
            whole = st.window(sid, OLD - 60, NEW + written + 60, 10)
            assert whole.buckets is not None
            assert sum(b.n for b in whole.buckets) == n_old + written
            assert st.read_samples(sid)[0].size == written  # the new raw is all there


def test_serve_keep_raw_compacts_on_its_own(sqlite_url: str) -> None:
    """``serve --keep-raw`` (create_app's keep_raw): the server drops the old raw by itself,
    and answers the old trial's findings and windows as before."""
    with open_store(sqlite_url) as st:
        assert isinstance(st, SQLStore)
        old = _trial(st, "old", OLD, 3600)
        tid = st._series_info(old["gpu.util"]).trial_id
        found = to_dict(findings_for_trial(st, tid))
        chunks = _chunks(st)
    with (
        app_over(sqlite_url, keep_raw=30 * DAY, compact_first_after=0.0) as app,
        _lifespan(app),
    ):
        assert wait_for(lambda: app.state.compactor.runs >= 1, timeout=60.0)
        got = request(app, f"/api/trials/{tid}/findings")
        assert got.status_code == 200 and got.json() == json.loads(json.dumps(found))
    with open_store(sqlite_url) as st:
        assert isinstance(st, SQLStore)
        assert _chunks(st) == 0 < chunks
        assert st.kept_findings(tid) is not None


class _lifespan:
    """Runs the app's lifespan (startup now, shutdown on exit) on a thread of its own."""

    def __init__(self, app: object) -> None:
        from fastapi.testclient import TestClient

        self._client = TestClient(app)  # type: ignore[arg-type]

    def __enter__(self) -> None:
        self._client.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._client.__exit__(*exc)
