"""Faults of the store and the spool that nobody had named before issue 18, injected for real:
a PostgreSQL server that turns read-only mid-trial (a standby after a failover, promoted
later), a PostgreSQL tablespace and a SQLite file on a small tmpfs that fills up and is freed,
a spool folder on a read-only mount or on a full tmpfs while the store is away, and a spool
file with a damaged frame. Each test counts what was kept: samples against the seconds alive,
events and scalars one for one, duplicates (by name, step, time and batch id), the state.

Mounts need root (tmpfs, read-only bind mounts); the PostgreSQL server is a private cluster
(``pg_cluster.py``), never the shared one. Every mount is undone, every cluster destroyed.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_helpers import (
    Ballast,
    SqliteLock,
    finish_training,
    gaps,
    read_only,
    sample_times,
    start_training,
    tmpfs,
    wait_for,
    wait_samplers_gone,
)
from pg_cluster import PrivateCluster, private_cluster
from tunescope.collect._main import READY_WAIT_S
from tunescope.store import Batch, TrialSpec, new_key, open_store
from tunescope.store.produce._spool import SpoolFile, pending, spool_dir
from tunescope.store.produce._writer import Writer
from tunescope.store.sql._sql import SQLStore

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SECONDS = 6.0
INTERVAL = 0.2
T0 = 1_700_000_000.0


def later(seconds: float, fn: Any) -> threading.Thread:
    th = threading.Thread(target=lambda: (time.sleep(seconds), fn()), daemon=True)
    th.start()
    return th


# ---------------------------------------------------------------------- counting
def batch_ids(st: SQLStore, trial_id: int) -> list[str]:
    with st._tx() as cur:
        rows = st._q(cur, "SELECT id FROM batches WHERE trial_id = ?", (trial_id,)).fetchall()
    return [r[0] for r in rows]


def check_kept(
    url: str, result: dict[str, Any], seconds: float, idle: float = 0.0
) -> dict[str, float]:
    """Every mark and loss once, samples over the trial with no long gap, no duplicate,
    completed (once the trial's sampler has written what it holds); the figures. ``idle``:
    seconds the sampler is known not to sample (it waits up to ``READY_WAIT_S`` for its first
    batch to land before it goes on, when the store is away at the start)."""
    wait_samplers_gone(str(result["key"]))
    with open_store(url, create=False) as st:
        assert isinstance(st, SQLStore)
        info = st.trial_by_key(str(result["key"]))
        assert info.state == "completed", (info.state, info.error, result["stderr"])
        assert info.params == {"lr": 0.1} and info.name == "t"
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None
        names = [e.name for e in ev]
        assert len(names) == result["marks"] == len(set(names))  # one for one, none twice
        steps = [s.step for s in st.scalars(info.id, "loss")]
        assert len(steps) == result["marks"] == len(set(steps))
        t = sample_times(st, info.id, "cpu.procs")
        assert info.end is not None
        span = info.end - info.start
        assert span >= seconds
        # a lost batch leaves a hole of a second or more; a busy machine (2 cores, shared)
        # may delay a sample or two, which is no loss
        assert gaps(t) < 1.5, [round(x - info.start, 2) for x in t]
        assert len(t) >= 0.9 * (span - idle) / INTERVAL - 2, (
            len(t),
            span,
            [round(x - info.start, 2) for x in t],
        )
        assert len(t) == len(set(t))
        ids = batch_ids(st, info.id)
        assert len(ids) == len(set(ids))
        return {"samples": len(t), "expected": (span - idle) / INTERVAL, "gap": gaps(t)}


def _train_through_a_full_disk(url: str, where: Path) -> dict[str, object]:
    """A training into ``url`` while the file system at ``where`` is filled to the last byte
    from 1.5 s in, for 3 s, then freed; what it said."""
    ballast = Ballast(where)
    p = start_training(url, SECONDS, INTERVAL)
    time.sleep(1.5)
    assert ballast.fill() > 0
    try:
        time.sleep(3.0)
    finally:
        ballast.free()
    return finish_training(p)


# ---------------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster() as c:
        yield c


@pytest.fixture
def pg(cluster: PrivateCluster) -> Iterator[str]:
    cluster.reset()
    name = f"t{uuid.uuid4().hex[:10]}"
    url = cluster.fresh_database(name)
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            cluster.reset()
            cluster.sql(f"DROP DATABASE {name} WITH (FORCE)")


def test_postgres_turning_read_only_mid_trial_loses_nothing(
    cluster: PrivateCluster, pg: str
) -> None:
    """A failover to a read-only standby, promoted later: default_transaction_read_only on
    (and reloaded) for 3 s mid-trial. Writes fail with SQLSTATE 25006 meanwhile; every batch
    waits and lands once, none is set aside."""
    open_store(pg).close()
    p = start_training(pg, SECONDS, INTERVAL)
    time.sleep(1.5)
    cluster.configure(default_transaction_read_only="on")
    try:
        time.sleep(3.0)
        with (
            open_store(pg, create=False) as st,
            pytest.raises(Exception, match="read-only"),
        ):  # it really is read-only now
            st.ensure_run("probe")
    finally:
        cluster.configure(default_transaction_read_only="off")
    result = finish_training(p)
    figures = check_kept(pg, result, SECONDS)
    assert "read-only" in str(result["stderr"])  # the fault did hit the SDK's writes
    assert "rejected" not in str(result["stderr"])
    print("read-only, middle:", figures)


@pytest.mark.parametrize("phase", ["start", "end"])
def test_postgres_read_only_at_the_start_or_across_the_end_loses_nothing(
    cluster: PrivateCluster, pg: str, phase: str
) -> None:
    """Read-only before the trial starts (lifted 2 s in), or from 1 s before its end until 2 s
    after the training process left: the trial is created late, or its end is written by the
    sampler that outlives the training; nothing lost, nothing twice, the training not held."""
    open_store(pg).close()
    seconds = 3.0
    if phase == "start":
        cluster.configure(default_transaction_read_only="on")
        later(2.0, lambda: cluster.configure(default_transaction_read_only="off"))
        p = start_training(pg, seconds, INTERVAL)
        result = finish_training(p)
    else:
        p = start_training(pg, seconds, INTERVAL)
        time.sleep(seconds - 1.0)
        cluster.configure(default_transaction_read_only="on")
        try:
            result = finish_training(p)
            time.sleep(2.0)
        finally:
            cluster.configure(default_transaction_read_only="off")
    assert float(str(result["enter"])) < 2.5 and float(str(result["leave"])) < 2.5, result
    figures = check_kept(pg, result, seconds, READY_WAIT_S if phase == "start" else 0.0)
    print(f"read-only, {phase}:", figures, "enter", result["enter"], "leave", result["leave"])


def test_postgres_disk_full_mid_trial_loses_nothing(cluster: PrivateCluster, pg: str) -> None:
    """The store's tables sit in a tablespace on a small tmpfs, filled to the last byte for
    3 s mid-trial (writes fail: could not extend file, SQLSTATE 53100), then freed."""
    name = pg.rsplit("/", 1)[1]
    space = f"s{uuid.uuid4().hex[:8]}"
    with tmpfs("16m") as where:
        folder = where / "ts"
        folder.mkdir()
        shutil.chown(folder, "postgres", "postgres")
        cluster.sql(f"CREATE TABLESPACE {space} LOCATION '{folder}'")
        try:
            cluster.sql(f"ALTER DATABASE {name} SET default_tablespace = {space}")
            open_store(pg).close()  # the tables are created in the tablespace
            result = _train_through_a_full_disk(pg, where)
            figures = check_kept(pg, result, SECONDS)
            log = cluster.log.read_text(errors="replace")
            assert "No space left on device" in log  # the fault did hit the writes
            print("pg disk full:", figures)
        finally:
            cluster.reset()
            with contextlib.suppress(Exception):
                cluster.sql(f"DROP DATABASE {name} WITH (FORCE)")
            with contextlib.suppress(Exception):
                cluster.sql(f"DROP TABLESPACE {space}")


# ---------------------------------------------------------------------- SQLite
def test_sqlite_store_on_a_full_disk_loses_nothing() -> None:
    """The SQLite file on a small tmpfs filled to the last byte for 3 s mid-trial (SQLITE_FULL
    or an I/O error), then freed: every batch waits and lands once."""
    with tmpfs("24m") as where:
        url = str(where / "store.db")
        open_store(url).close()
        result = _train_through_a_full_disk(url, where)
        figures = check_kept(url, result, SECONDS)
        assert "cannot be written now" in str(result["stderr"])  # the fault did hit
        assert "rejected" not in str(result["stderr"])
        print("sqlite disk full:", figures)


# ---------------------------------------------------------------------- the spool
def _spec() -> TrialSpec:
    return TrialSpec(key=new_key(), run="spool", name="t", start=T0)


def _batch(sp: TrialSpec, i: int) -> Batch:
    return Batch(
        sp.key,
        samples=(("cpu.util", None, None, T0 + i, float(i)),),
        events=(("mark", T0 + i, f"m{i}", None, None, None, None),),
        scalars=(("loss", i, T0 + i, float(i)),),
    )


def _check_all(url: str, sp: TrialSpec, n: int) -> None:
    with open_store(url, create=False) as st:
        assert isinstance(st, SQLStore)
        tid = st.trial_by_key(sp.key).id
        (s,) = st.list_series(tid, "cpu.util")
        assert st.read_samples(s.id)[1].tolist() == [float(i) for i in range(n)]
        ev = st.events(tid, 0, T0 + 10**6, kinds=["mark"], limit=10**6).events
        assert ev is not None and [e.name for e in ev] == [f"m{i}" for i in range(n)]
        assert [x.step for x in st.scalars(tid, "loss")] == list(range(n))
        ids = batch_ids(st, tid)
        assert len(ids) == len(set(ids)) == n


def _writer_through_an_outage(
    url: str, root: Path, caplog: pytest.LogCaptureFixture, n: int = 40
) -> Writer:
    """A writer whose store is locked (away) while ``n`` batches come, 20 ms apart; the lock
    goes, and the writer is flushed. Returns it (closed)."""
    sp = _spec()
    open_store(url).close()
    with caplog.at_level("WARNING", logger="tunescope.store"), SqliteLock(url):
        w = Writer(
            url,
            spec=sp,
            spool_root=root,
            spill_after=0.2,
            store_factory=lambda u: open_store(u, timeout=0.1),
        )
        for i in range(n):
            w.put(_batch(sp, i))
            time.sleep(0.02)
        time.sleep(1.0)  # past spill_after and a spool retry or two
        assert w.written == 0
    assert w.flush(30), w
    assert w.close(5)
    _check_all(url, sp, n)
    return w


def test_an_unwritable_spool_keeps_batches_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store away and the spool folder on a read-only mount: the batches stay in memory,
    one warning says the spool cannot be written, and every batch lands once when the store
    is back."""
    root = tmp_path / "spool"
    root.mkdir()
    url = str(tmp_path / "store.db")
    with read_only(root):
        w = _writer_through_an_outage(url, root, caplog)
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1, said
    assert "Read-only file system" in said[0]
    assert (w.spooled, w.dropped, w.rejected) == (0, 0, 0)


def test_a_full_spool_keeps_batches_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store away and the spool on a tiny tmpfs that is full: the same as unwritable (a
    short write is not "spooled"), and no half frame stays on that disk."""
    url = str(tmp_path / "store.db")
    with tmpfs("64k") as root:
        Ballast(root).fill()
        w = _writer_through_an_outage(url, root, caplog)
        leftovers = [p for p in root.rglob("*.spool") if p.stat().st_size > 4096]
        assert not leftovers
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1, said
    assert "No space left" in said[0]
    assert (w.spooled, w.dropped, w.rejected) == (0, 0, 0)


def test_a_spool_that_fills_mid_outage_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The spool takes the first batches, then its disk fills: later batches stay in memory;
    both kinds land, once each, when the store is back."""
    url = str(tmp_path / "store.db")
    sp = _spec()
    open_store(url).close()
    with tmpfs("1m") as root, SqliteLock(url):
        ballast = Ballast(root)
        w = Writer(
            url,
            spec=sp,
            spool_root=root,
            spill_after=0.1,
            store_factory=lambda u: open_store(u, timeout=0.1),
        )
        for i in range(20):
            w.put(_batch(sp, i))
            time.sleep(0.02)
        assert wait_for(lambda: w.spooled >= 1, 10)
        with caplog.at_level("WARNING", logger="tunescope.store"):
            ballast.fill()  # (the spool file's last page may still take a frame or two)
            for i in range(20, 60):
                w.put(_batch(sp, i))
                time.sleep(0.02)
            time.sleep(0.5)
        assert w.spooled < 60 and w._queue  # the rest could not be spooled: kept in memory
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1, said
    assert w.flush(30), w
    assert w.close(5)
    assert (w.dropped, w.rejected) == (0, 0)
    _check_all(url, sp, 60)


def test_a_damaged_spool_frame_costs_that_frame_only(tmp_path: Path, spool: Path) -> None:
    """A writer leaves a spool file (the store away at close); bytes are flipped in a middle
    frame; `tunescope sync` writes every other frame, names the damaged count and exits 1."""
    url = str(tmp_path / "store.db")
    sp = _spec()
    open_store(url).close()
    with SqliteLock(url):
        w = Writer(url, spec=sp, store_factory=lambda u: open_store(u, timeout=0.1))
        for i in range(9):
            w.put(_batch(sp, i))
            time.sleep(0.01)
        assert w.close(0.3) is False
    assert pending(url)[0] == 1
    (path,) = spool_dir(url).glob("*.spool")
    f = SpoolFile.claim(path)
    assert f is not None
    frames = list(f.frames())
    f.close()
    lost = frames[len(frames) // 2]
    assert lost.batch is not None
    raw = bytearray(path.read_bytes())
    for k in range(lost.start + 12, lost.start + 20):
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "sync", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 damaged frame(s) could not be read" in out.stdout
    kept = {b.id for fr in frames if (b := fr.batch) is not None and fr is not lost}
    with open_store(url, create=False) as st:
        assert isinstance(st, SQLStore)
        tid = st.trial_by_key(sp.key).id
        ids = batch_ids(st, tid)
    assert set(ids) == kept and len(ids) == len(kept)
