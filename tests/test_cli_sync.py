"""`tunescope runs` says when data waits in the spool; `tunescope sync` writes it, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fault_helpers import SqliteLock
from tunescope.store import Batch, TrialSpec, Writer, new_key, open_store

T0 = 1_700_000_000.0


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunescope", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _spooled(url: str, spool: Path, n: int) -> TrialSpec:
    """A trial whose batches all went to the spool: the store was locked when it ended."""
    open_store(url).close()
    spec = TrialSpec(key=new_key(), run="offline", name="t", start=T0)
    with SqliteLock(url):
        w = Writer(
            url, spec=spec, spool_root=spool, store_factory=lambda u: open_store(u, timeout=0.1)
        )
        for i in range(n):
            w.put(Batch(spec.key, samples=(("cpu.util", None, None, T0 + i, float(i)),)))
        assert w.close(0.3) is False
    return spec


def test_runs_says_what_waits_and_sync_writes_it_once(sqlite_url: str, spool: Path) -> None:
    spec = _spooled(sqlite_url, spool, 30)
    env = dict(os.environ, TUNESCOPE_SPOOL=str(spool))
    before = cli("runs", "--store", sqlite_url, env=env)
    assert before.returncode == 0
    assert before.stdout.strip() == "no runs yet"  # nothing reached the store yet
    (note,) = before.stderr.strip().splitlines()
    assert "1 spool file(s)" in note and "run `tunescope sync`" in note
    done = cli("sync", "--store", sqlite_url, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote 30 batch(es) from 1 spool file(s)")
    with open_store(sqlite_url, create=False) as st:
        info = st.trial_by_key(spec.key)
        (s,) = st.list_series(info.id)
        assert st.read_samples(s.id)[1].tolist() == [float(i) for i in range(30)]
    after = cli("runs", "--store", sqlite_url, env=env)
    assert after.returncode == 0 and after.stderr == "" and "offline" in after.stdout
    again = cli("sync", "--store", sqlite_url, env=env)
    assert again.returncode == 0 and again.stdout.startswith("nothing to write")


def test_sync_with_the_store_still_away_keeps_everything_and_exits_1(
    sqlite_url: str, spool: Path
) -> None:
    _spooled(sqlite_url, spool, 5)
    env = dict(os.environ, TUNESCOPE_SPOOL=str(spool))
    with SqliteLock(sqlite_url):
        away = cli("sync", "--store", sqlite_url, "--timeout", "8", env=env)
    assert away.returncode == 1, away.stderr
    assert "spool file(s)" in away.stdout and "left" in away.stdout
    assert "locked" in away.stdout
    assert cli("sync", "--store", sqlite_url, env=env).returncode == 0
