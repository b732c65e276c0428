"""`tunescope runs` says when data waits in the spool; `tunescope sync` writes it, once."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from fault_helpers import SqliteLock
from tunescope.store import Batch, TrialSpec, Writer, new_key, open_store

T0 = 1_700_000_000.0


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
    env = {"TUNESCOPE_SPOOL": str(spool)}
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
    env = {"TUNESCOPE_SPOOL": str(spool)}
    with SqliteLock(sqlite_url):
        away = cli("sync", "--store", sqlite_url, "--timeout", "8", env=env)
    assert away.returncode == 1, away.stderr
    assert "spool file(s)" in away.stdout and "left" in away.stdout
    assert "locked" in away.stdout
    assert cli("sync", "--store", sqlite_url, env=env).returncode == 0


@pytest.mark.parametrize("where", ["payload", "length", "cut"])
def test_a_damaged_frame_costs_that_frame_and_sync_says_so(
    sqlite_url: str, spool: Path, where: str
) -> None:
    """Bytes flipped in a middle frame (or its length, or the frame cut off mid-file): `sync`
    writes every other frame, keeps the damaged bytes in rejected/, names the count and
    exits 1."""
    from tunescope.store.produce._spool import SpoolFile, spool_dir

    open_store(sqlite_url).close()
    spec = TrialSpec(key=new_key(), run="damaged", name="t", start=T0)
    f = SpoolFile.create(sqlite_url, spool)
    starts = []
    for i in range(10):
        starts.append(f.size)
        b = Batch(spec.key, samples=(("cpu.util", None, None, T0 + i, float(i)),), spec=spec)
        f.append([b])
    path = f.path
    f.close()
    raw = bytearray(path.read_bytes())
    mid = starts[5]
    if where == "payload":
        raw[mid + 20 : mid + 24] = bytes(x ^ 0xFF for x in raw[mid + 20 : mid + 24])
    elif where == "length":
        raw[mid : mid + 4] = (10**6).to_bytes(4, "little")
    else:
        del raw[mid + 12 : starts[6]]
    path.write_bytes(bytes(raw))
    env = {"TUNESCOPE_SPOOL": str(spool)}
    done = cli("sync", "--store", sqlite_url, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "1 damaged frame(s) could not be read" in done.stdout
    assert done.stdout.startswith("wrote 9 batch(es) from 1 spool file(s)")
    with open_store(sqlite_url, create=False) as st:
        (s,) = st.list_series(st.trial_by_key(spec.key).id)
        assert st.read_samples(s.id)[1].tolist() == [float(i) for i in range(10) if i != 5]
    kept = list((spool_dir(sqlite_url, spool) / "rejected").iterdir())
    assert len(kept) == 1 and kept[0].name.endswith("damaged") and kept[0].stat().st_size > 0
    again = cli("sync", "--store", sqlite_url, env=env)
    assert again.returncode == 0 and again.stdout.startswith("nothing to write")


def test_runs_says_the_token_was_refused(sqlite_url: str, spool: Path) -> None:
    """A writer whose token the server refused left a note in the spool folder: `runs`
    says so, and what to do."""
    from tunescope.store.produce._spool import note_refused, spool_dir

    _spooled(sqlite_url, spool, 2)
    note_refused(spool_dir(sqlite_url, spool), "http://x/p refused the token: unauthorized")
    env = {"TUNESCOPE_SPOOL": str(spool)}
    runs = cli("runs", "--store", sqlite_url, env=env)
    (note,) = runs.stderr.strip().splitlines()
    assert "the store refused the token" in note and "$TUNESCOPE_TOKEN" in note
    assert "tunescope sync" in note
    assert cli("sync", "--store", sqlite_url, env=env).returncode == 0
    assert cli("runs", "--store", sqlite_url, env=env).stderr == ""  # the note went
