"""The store is where it was (rule 8, SQLite): the store's file deleted, or replaced by
another store, while a trial records. The writers notice at their next write, write no more
(into the unlinked file nor the newcomer), spool the rest and say so once; no new empty
store appears at the path. Put back, the store takes the spool once from ``tunescope
sync``: everything of the trial is then in it, once. Each test counts what was kept where."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from collect_helpers import Proc, clean_env
from fault_helpers import (
    finish_training,
    gaps,
    restarts,
    sample_times,
    samplers_of,
    start_training,
    wait_for,
    wait_samplers_gone,
)
from tunescope._env import ENV_SAMPLER_SPEC, ENV_STORE_FILE
from tunescope.store import Batch, TrialSpec, file_id, new_key, open_store, pending

pytestmark = [pytest.mark.faults, pytest.mark.slow]

INTERVAL = 0.2
SECONDS = 6.0


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """The samplers wait 2 s, not 120, for a store that is not coming back to them."""
    monkeypatch.setenv("TUNESCOPE_LINGER", "2")


def _sync(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunescope", "sync", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _marks(path: Path, key: str) -> int:
    """Marks of trial ``key`` in the store file at ``path`` (opened read-only)."""
    with open_store(str(path), readonly=True) as st:
        info = st.trial_by_key(key)
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
    assert ev is not None
    return len(ev)


def _all_there(url: str, result: dict[str, Any], *, restarted: bool = False) -> list[float]:
    """Everything of a TRAINING run is in the store, once (see fault_helpers.TRAINING); its
    samples ``cpu.procs`` returned. ``restarted``: the sampler was killed and restarted once
    (one ``sampler_gap``); what the killed one held in memory is lost (docs/reliability.md,
    what is not guaranteed), so its samples are counted from the new one's first second on."""
    with open_store(url, create=False) as st:
        info = st.trial_by_key(str(result["key"]))
        assert info.state == "completed", (info.state, info.error)
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None
        assert len(ev) == result["marks"] == len({e.name for e in ev})
        steps = sorted(s.step for s in st.scalars(info.id, "loss") if s.step is not None)
        assert steps == list(range(int(result["marks"])))
        t = sample_times(st, info.id, "cpu.procs")
        assert len(t) == len(set(t)), "duplicate samples"
        assert info.end is not None and info.end - info.start >= SECONDS
        holes = restarts(st.events(info.id, 0, time.time() + 60, kinds=["sampler_gap"]).events)
    assert len(holes) == int(restarted), holes
    since = t[0] if not holes else holes[0].t + (holes[0].duration or 0)
    ready = [x for x in t if x >= since + 1.0]  # see test_faults_clock.LOADING_S
    expected = (ready[-1] - ready[0]) / INTERVAL + 1
    assert len(ready) >= 0.98 * expected, (len(ready), expected)
    assert gaps(ready) < 1.0, gaps(ready)
    return t


def _said_once(stderr: str, what: str) -> None:
    lines = [x for x in stderr.splitlines() if what in x]
    assert len(lines) == 1, stderr


def test_a_store_file_deleted_mid_trial(sqlite_url: str, tmp_path: Path) -> None:
    """``rm store.db*`` a third of the way in (a hard link keeps the file to count what it
    held): the writers stop writing into the unlinked file and spool; after the trial no
    store is at the path; put back, ``tunescope sync`` lands the rest once."""
    db = Path(sqlite_url)
    keep = tmp_path / "kept.db"
    open_store(sqlite_url).close()
    p = start_training(sqlite_url, SECONDS, INTERVAL)
    time.sleep(SECONDS / 3)
    os.link(db, keep)
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    result = finish_training(p)
    wait_samplers_gone(str(result["key"]))
    assert not db.exists(), "a new store appeared where the deleted one was"
    _said_once(str(result["stderr"]), "the store file was deleted")
    before = _marks(keep, str(result["key"]))
    assert 0 < before < int(result["marks"]), (before, result["marks"])
    files, size = pending(sqlite_url)
    assert files >= 1 and size > 0  # the rest waits in the spool
    os.replace(keep, db)  # the store is put back
    done = _sync(sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    _all_there(sqlite_url, result)
    assert pending(sqlite_url)[0] == 0


def test_a_store_file_replaced_mid_trial(sqlite_url: str, tmp_path: Path) -> None:
    """Another store moved over the file a third of the way in: the writers write into
    neither; the newcomer is left as it was (its one run, intact); put back, the store takes
    the spool once."""
    db = Path(sqlite_url)
    keep = tmp_path / "kept.db"
    other = tmp_path / "other.db"
    with open_store(str(other)) as st:
        st.ensure_run("someone-else", start=time.time())
    open_store(sqlite_url).close()
    p = start_training(sqlite_url, SECONDS, INTERVAL)
    time.sleep(SECONDS / 3)
    os.link(db, keep)
    os.replace(other, db)
    result = finish_training(p)
    wait_samplers_gone(str(result["key"]))
    _said_once(str(result["stderr"]), "the store file was replaced")
    with open_store(sqlite_url, readonly=True) as st:
        assert [r.name for r in st.list_runs()] == ["someone-else"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    before = _marks(keep, str(result["key"]))
    assert 0 < before < int(result["marks"]), (before, result["marks"])
    assert pending(sqlite_url)[0] >= 1
    os.replace(keep, db)
    done = _sync(sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    _all_there(sqlite_url, result)


def test_a_sampler_restarted_after_the_store_file_was_deleted_creates_no_store(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The store deleted, then its sampler killed: the sampler started in its place does not
    make a new store at the path (its trial's store was there before); it spools, and the
    gap is recorded; put back, everything lands once."""
    db = Path(sqlite_url)
    keep = tmp_path / "kept.db"
    open_store(sqlite_url).close()
    p = start_training(sqlite_url, SECONDS, INTERVAL)
    assert wait_for(lambda: bool(samplers_of(pid=p.pid)), 10)
    (first,) = samplers_of(pid=p.pid)
    time.sleep(SECONDS / 3)
    os.link(db, keep)
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    time.sleep(0.5)
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: bool(set(samplers_of(pid=p.pid)) - {first}), 10)
    result = finish_training(p)
    wait_samplers_gone(str(result["key"]))
    assert not db.exists(), "the restarted sampler made a new store"
    os.replace(keep, db)
    done = _sync(sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    _all_there(sqlite_url, result, restarted=True)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_sampler_that_comes_up_after_its_store_file_went_writes_no_other_store(
    sqlite_url: str, tmp_path: Path, procs: list[Proc], how: str
) -> None:
    """The store's file deleted or replaced between the trial's start and its sampler's
    coming up (a loaded machine starts it late): the sampler, told the trial's file
    (``$TUNESCOPE_STORE_FILE``), makes no new store at the path and writes nothing into a
    newcomer (though it holds the trial's spec, to create the trial where it is missing); it
    spools, and put back, ``tunescope sync`` lands its samples in the trial."""
    db = Path(sqlite_url)
    keep = tmp_path / "kept.db"
    spec = TrialSpec(key=new_key(), run="r", start=time.time(), interval=INTERVAL)
    with open_store(sqlite_url) as st:
        st.write(Batch(spec.key, spec=spec))
    told = file_id(sqlite_url)
    assert told is not None
    os.link(db, keep)
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    if how == "replaced":
        with open_store(sqlite_url) as st:
            st.ensure_run("someone-else", start=time.time())
    root = Proc([sys.executable, "-c", "import time; time.sleep(60)"])
    procs.append(root)
    env = {**clean_env(sqlite_url), ENV_STORE_FILE: told, ENV_SAMPLER_SPEC: spec.to_json()}
    args = ["--trial-key", spec.key, "--pid", str(root.p.pid), "--interval", str(INTERVAL)]
    s = Proc([sys.executable, "-m", "tunescope.collect", *args], env=env)
    procs.append(s)
    assert s.expect(timeout=60) == "ready"
    time.sleep(1.0)
    s.send("stop")
    assert s.p.wait(timeout=60) == 0
    if how == "deleted":
        assert not db.exists(), "the sampler made a new store where the trial's was"
    else:
        with open_store(sqlite_url, readonly=True) as st:
            assert [r.name for r in st.list_runs()] == ["someone-else"]
            assert st.list_trials(st.list_runs()[0].id) == []
    assert pending(sqlite_url)[0] >= 1  # its samples wait in its spool
    os.replace(keep, db)  # the store is put back
    done = _sync(sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    with open_store(sqlite_url, create=False) as st:
        info = st.trial_by_key(spec.key)
        t = sample_times(st, info.id, "cpu.procs")
    assert len(t) >= 1.0 / INTERVAL and len(t) == len(set(t)), t
