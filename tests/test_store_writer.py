"""The writer and the spool: batches land in order and exactly once, whatever the store does;
the producer is never held."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fault_helpers import SqliteLock, wait_for
from http_helpers import Server, make_token
from tunescope.errors import Rejected, StoreUnavailable
from tunescope.store import Batch, Store, TrialEnd, TrialInfo, TrialSpec, new_key, open_store
from tunescope.store.produce._spool import SpoolFile, pending, replay, spool_dir
from tunescope.store.produce._writer import Writer

T0 = 1_700_000_000.0


def spec(run: str = "w") -> TrialSpec:
    return TrialSpec(key=new_key(), run=run, start=T0)


def batch(sp: TrialSpec, i: int) -> Batch:
    return Batch(
        sp.key,
        samples=(("cpu.util", None, None, T0 + i, float(i)),),
        events=(("mark", T0 + i, f"m{i}", None, None, None, None),),
    )


def stored(url: str, key: str) -> tuple[list[float], int]:
    with open_store(url, create=False) as st:
        tid = st.trial_by_key(key).id
        (s,) = st.list_series(tid, "cpu.util")
        return st.read_samples(s.id)[1].tolist(), st.count_events(tid)


def test_a_healthy_store_takes_every_batch_in_order(sqlite_url: str, tmp_path: Path) -> None:
    sp = spec()
    w = Writer(sqlite_url, spec=sp, spool_root=tmp_path / "spool")
    for i in range(50):
        w.put(batch(sp, i))
    assert w.flush(30)
    assert w.close(5)
    assert stored(sqlite_url, sp.key) == ([float(i) for i in range(50)], 50)
    assert w.trial_id is not None and w.spooled == 0
    assert pending(sqlite_url, tmp_path / "spool") == (0, 0)


def test_a_locked_store_spools_then_every_batch_lands_once(sqlite_url: str, tmp_path: Path) -> None:
    """Another process holds the SQLite file locked: the writer keeps batches, moves them to
    its spool after spill_after, and writes them, in order and once each, when the lock goes.
    put() is never held meanwhile."""
    root = tmp_path / "spool"
    open_store(sqlite_url).close()
    sp = spec()
    w = Writer(
        sqlite_url,
        spec=sp,
        spool_root=root,
        spill_after=0.3,
        store_factory=lambda u: open_store(u, timeout=0.2),
    )
    with SqliteLock(sqlite_url):
        longest = 0.0
        for i in range(40):
            t = time.perf_counter()
            w.put(batch(sp, i))
            longest = max(longest, time.perf_counter() - t)
            time.sleep(0.02)
        assert wait_for(lambda: w.spooled > 0, 10)
        assert w.spool_path is not None and w.spool_path.exists()
    assert w.flush(30)
    assert w.close(5)
    assert stored(sqlite_url, sp.key) == ([float(i) for i in range(40)], 40)
    assert longest < 0.1  # put never waits for the store (it would wait 0.2 s a try)
    assert pending(sqlite_url, root) == (0, 0)  # the spool file is gone once replayed


def test_close_while_the_store_is_away_leaves_a_spool_that_replays_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "spool"
    open_store(sqlite_url).close()
    sp = spec()
    with SqliteLock(sqlite_url):
        w = Writer(
            sqlite_url, spec=sp, spool_root=root, store_factory=lambda u: open_store(u, timeout=0.2)
        )
        for i in range(20):
            w.put(batch(sp, i))
        t = time.monotonic()
        assert w.close(0.5) is False
        assert time.monotonic() - t < 3.0  # bounded by the deadline, not by the lock
        files, size = pending(sqlite_url, root)
        assert files == 1 and size > 0
    with open_store(sqlite_url) as st:
        stats = replay(sqlite_url, st.write, root=root)
        again = replay(sqlite_url, st.write, root=root)
    assert (stats.written, stats.kept, stats.rejected, stats.files_done) == (20, 0, 0, 1)
    assert again.written == 0
    assert stored(sqlite_url, sp.key) == ([float(i) for i in range(20)], 20)


def test_a_crash_mid_replay_duplicates_nothing(sqlite_url: str, tmp_path: Path) -> None:
    """Half a spool file landed, then the replaying process died (its lock went): the next
    replay writes the whole file again and the store keeps each batch once."""
    root = tmp_path / "spool"
    sp = spec()
    f = SpoolFile.create(sqlite_url, root)
    batches = [batch(sp, i).with_spec(sp) for i in range(10)]
    f.append(batches)
    f.close()
    with open_store(sqlite_url) as st:
        for b in batches[:5]:
            st.write(b)
        stats = replay(sqlite_url, st.write, root=root)
    assert stats.written == 10 and stats.files_done == 1
    assert stored(sqlite_url, sp.key) == ([float(i) for i in range(10)], 10)


def test_a_file_its_writer_still_holds_is_not_replayed(sqlite_url: str, tmp_path: Path) -> None:
    root = tmp_path / "spool"
    sp = spec()
    f = SpoolFile.create(sqlite_url, root)
    f.append([batch(sp, 0).with_spec(sp)])
    with open_store(sqlite_url) as st:
        stats = replay(sqlite_url, st.write, root=root)
        assert (stats.written, stats.files_left) == (0, 1)
        f.close()
        assert replay(sqlite_url, st.write, root=root).written == 1


def test_a_cut_frame_ends_the_file_and_is_set_aside(sqlite_url: str, tmp_path: Path) -> None:
    root = tmp_path / "spool"
    sp = spec()
    f = SpoolFile.create(sqlite_url, root)
    f.append([batch(sp, i).with_spec(sp) for i in range(3)])
    path = f.path
    f.close()
    with path.open("ab") as raw:
        raw.write(b"\x40\x00\x00\x00garbage")  # a frame cut short by a crash
    with open_store(sqlite_url) as st:
        stats = replay(sqlite_url, st.write, root=root)
    assert stats.written == 3 and not path.exists()
    assert any(
        p.name.endswith("damaged") for p in (spool_dir(sqlite_url, root) / "rejected").iterdir()
    )


def test_a_rejected_batch_is_set_aside_and_the_rest_go_on(sqlite_url: str, tmp_path: Path) -> None:
    root = tmp_path / "spool"
    sp = spec()
    w = Writer(sqlite_url, spec=sp, spool_root=root)
    w.put(batch(sp, 0))
    bad = Batch(sp.key, events=(("mark", T0 + 1, "x", None, None, None, {"f": float("nan")}),))
    w.put(bad)
    w.put(batch(sp, 2))
    assert w.flush(30) and w.close(5)
    assert stored(sqlite_url, sp.key) == ([0.0, 2.0], 2)
    assert w.rejected == 1
    kept = list((spool_dir(sqlite_url, root) / "rejected").iterdir())
    assert len(kept) == 1 and bad.id.encode() in kept[0].read_bytes()


def test_a_write_stuck_past_the_deadline_does_not_hold_close(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The store call hangs (a server that stopped answering): close returns at its deadline
    and the batch it was sending is in the spool; when the call lands after all, the replay
    of the spooled copy is a duplicate and changes nothing."""
    root = tmp_path / "spool"
    sp = spec()
    gate = threading.Event()
    real = open_store(sqlite_url)

    class Hung:
        def write(self, b: Batch) -> int:
            gate.wait(30)
            return real.write(b)

        def close(self) -> None:
            real.close()

    w = Writer(sqlite_url, spec=sp, spool_root=root, store_factory=lambda u: Hung())  # type: ignore[arg-type,return-value]
    w.put(batch(sp, 0))
    assert wait_for(lambda: w._busy, 5)
    t = time.monotonic()
    assert w.close(0.3) is False
    assert time.monotonic() - t < 2.0
    gate.set()
    assert wait_for(lambda: not w._thread.is_alive(), 10)
    with open_store(sqlite_url) as st:
        stats = replay(sqlite_url, st.write, root=root)
    assert stats.written == 1
    assert stored(sqlite_url, sp.key) == ([0.0], 1)


@pytest.mark.parametrize("n", [1, 3])
def test_put_after_close_goes_to_the_spool(sqlite_url: str, tmp_path: Path, n: int) -> None:
    root = tmp_path / "spool"
    sp = spec()
    w = Writer(sqlite_url, spec=sp, spool_root=root)
    assert w.close(1)
    for i in range(n):
        w.put(batch(sp, i))
    with open_store(sqlite_url) as st:
        assert replay(sqlite_url, st.write, root=root).written == n
    assert stored(sqlite_url, sp.key)[1] == n


# ---------------------------------------------------------------------- issue 18, rules 2, 3, 8, 9
class Flaky:
    """The real store, with faults injected: ``errors`` raised by write in turn, and every
    write of a batch whose id is in ``wrong`` rejected (as a store rejects what is wrong)."""

    def __init__(self, real: Store, errors: list[BaseException] | None = None) -> None:
        self.real = real
        self.errors = list(errors or [])
        self.wrong: set[str] = set()
        self.calls = 0

    def write(self, b: Batch) -> int:
        self.calls += 1
        if b.id in self.wrong:
            raise Rejected(f"batch {b.id} is wrong")
        if self.errors:
            raise self.errors.pop(0)
        return self.real.write(b)

    def trial_by_key(self, key: str) -> TrialInfo:
        return self.real.trial_by_key(key)

    def close(self) -> None:
        pass


def _batch_ids(url: str, key: str) -> list[str]:
    from tunescope.store.sql._sql import SQLStore

    with open_store(url, create=False) as st:
        assert isinstance(st, SQLStore)
        tid = st.trial_by_key(key).id
        with st._tx() as cur:
            return [r[0] for r in st._q(cur, "SELECT id FROM batches WHERE trial_id = ?", (tid,))]


@pytest.mark.parametrize(
    "step", ["set-aside", "spool append", "spool read", "store write", "fsync"]
)
def test_no_step_kills_the_writer_thread(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Rule 3: an exception at each step of the writer's loop is logged once and the loop goes
    on; everything not proven wrong lands, once."""
    import tunescope.store.produce._writer as writer_mod

    real = open_store(sqlite_url)
    sp = spec()
    down = [StoreUnavailable("away")] * 3  # so that batches are spooled, then read back
    store = Flaky(real, down if step in ("spool append", "spool read", "fsync") else [])
    boom = {"n": 0}

    def once(fn: Any) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            if boom["n"] == 0:
                boom["n"] += 1
                raise RuntimeError(f"injected at {step}")
            return fn(*a, **k)

        return inner

    if step == "set-aside":
        monkeypatch.setattr(writer_mod, "set_aside", once(writer_mod.set_aside))
    elif step == "spool append":
        monkeypatch.setattr(SpoolFile, "append", once(SpoolFile.append))
    elif step == "spool read":
        monkeypatch.setattr(SpoolFile, "frames", once(SpoolFile.frames))
    elif step == "fsync":
        monkeypatch.setattr(SpoolFile, "sync", once(SpoolFile.sync))
    else:
        store.errors = [RuntimeError("injected at store write")]
    w = Writer(
        sqlite_url,
        spec=sp,
        spool_root=tmp_path / "spool",
        spill_after=0.0,
        store_factory=lambda u: store,  # type: ignore[arg-type,return-value]
    )
    batches = [batch(sp, i) for i in range(12)]
    store.wrong = {batches[5].id} if step == "set-aside" else set()
    for i, b in enumerate(batches):
        w.put(b)
        if i % 4 == 3:
            time.sleep(0.15)
    assert w.flush(30), (step, w, boom)
    assert w._thread.is_alive()
    assert w.close(5)
    assert boom["n"] == 1 or step == "store write"
    want = [float(i) for i in range(12) if batches[i].id not in store.wrong]
    samples, _events = stored(sqlite_url, sp.key)
    assert samples == want
    ids = _batch_ids(sqlite_url, sp.key)
    assert len(ids) == len(set(ids)) == len(want)
    assert w.rejected == len(store.wrong)
    real.close()


class FullDisk:
    """The unbuffered file of a disk that fills up: the first write takes 10 bytes, the next
    ones 0, and none raises (what write(2) does on a full disk)."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.took = 0

    def write(self, data: Any) -> int:
        n = 0 if self.took else self.f.write(bytes(data)[:10])
        self.took += n
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def test_a_short_append_is_cut_back_and_raises(sqlite_url: str, tmp_path: Path) -> None:
    sp = spec()
    f = SpoolFile.create(sqlite_url, tmp_path / "spool")
    f.append([batch(sp, 0)])
    size = f.path.stat().st_size
    real = f._f
    f._f = FullDisk(real)  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space left"):
        f.append([batch(sp, 1), batch(sp, 2)])
    f._f = real
    assert f.size == size == f.path.stat().st_size  # no half frame left behind
    (only,) = f.frames()
    assert only.batch is not None and only.batch.samples == batch(sp, 0).samples
    f.close()


def test_a_full_spool_keeps_batches_in_memory_and_says_so_once(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Rule 2: an append that writes short (a full disk does that to an unbuffered write,
    without raising) is not "spooled": the batches stay in memory, one warning says the
    spool cannot be written, and they land once the store is back."""
    real = open_store(sqlite_url)
    sp = spec()
    store = Flaky(real, [StoreUnavailable("away")] * 12)
    append = SpoolFile.append

    def full_append(self: SpoolFile, batches: list[Batch]) -> None:
        kept, self._f = self._f, FullDisk(self._f)  # type: ignore[assignment]
        try:
            append(self, batches)
        finally:
            self._f = kept

    monkeypatch.setattr(SpoolFile, "append", full_append)
    w = Writer(
        sqlite_url,
        spec=sp,
        spool_root=tmp_path / "spool",
        spill_after=0.0,
        store_factory=lambda u: store,  # type: ignore[arg-type,return-value]
    )
    with caplog.at_level("WARNING", logger="tunescope.store"):
        for i in range(10):
            w.put(batch(sp, i))
            time.sleep(0.1)
        assert wait_for(lambda: store.calls >= 4, 10)
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1, said
    assert "keeps its data in memory" in said[0]
    assert w.spooled == 0 and w.dropped == 0 and len(w._queue) > 0
    path = w.spool_path
    assert path is None or path.stat().st_size == len(path.read_bytes().split(b"\n")[0]) + 1
    monkeypatch.undo()
    assert w.flush(30) and w.close(5)
    assert stored(sqlite_url, sp.key)[0] == [float(i) for i in range(10)]
    ids = _batch_ids(sqlite_url, sp.key)
    assert len(ids) == len(set(ids)) == 10
    real.close()


def test_a_refused_token_stops_sending_and_keeps_everything_in_the_spool(
    http_server: Server, spool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 9 (writer side): a 401 stops the writer: no request after the refusal, every
    batch in the spool (none dropped, none rejected), a note for `tunescope runs`; once the
    token is right, `sync` writes them all and the note goes."""
    from tunescope.cli._sync import spool_note
    from tunescope.store.produce._spool import REFUSED_NOTE

    project = f"p{new_key()[:10]}"
    url = http_server.url(project)
    monkeypatch.setenv("TUNESCOPE_TOKEN", "ts_" + "w" * 43)
    sp = spec()
    w = Writer(url, spec=sp)
    for i in range(5):
        w.put(batch(sp, i))
    assert wait_for(lambda: w.refused is not None, 15)
    assert "refused the token" in str(w.refused)
    store = w._store
    assert store is not None
    sent = store.requests  # type: ignore[attr-defined]
    for i in range(5, 10):
        w.put(batch(sp, i))
        time.sleep(0.2)
    assert store.requests == sent  # type: ignore[attr-defined]  # no retry loop
    assert w.close(2) is False and w.left_in_spool
    assert (w.rejected, w.dropped, w.written) == (0, 0, 0)
    assert (spool_dir(url) / REFUSED_NOTE).exists()
    note = spool_note(url)
    assert note is not None and "refused the token" in note and "tunescope sync" in note
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(http_server.db_url, project))
    with open_store(url) as st:
        stats = replay(url, st.write)
        assert (stats.written, stats.rejected, stats.kept) == (10, 0, 0)
        tid = st.trial_by_key(sp.key).id
        (s,) = st.list_series(tid, "cpu.util")
        assert st.read_samples(s.id)[1].tolist() == [float(i) for i in range(10)]
    assert not (spool_dir(url) / REFUSED_NOTE).exists() and spool_note(url) is None


def test_a_server_restarted_on_another_database_gets_the_trial_again(tmp_path: Path) -> None:
    """Rule 8: the team server comes back on another database (the trial unknown to it): the
    writer sends the trial's spec again on NotFound, the trial is re-created there, and every
    batch lands (on one database or the other), once."""
    import shutil

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    open_store(str(a)).close()
    project = "restarted"
    token = make_token(str(a), project)
    shutil.copy(a, b)  # the same token, no trial
    server = Server(str(a), tmp_path / "a.log").start()
    sp = spec()
    env_token = os.environ.get("TUNESCOPE_TOKEN")
    os.environ["TUNESCOPE_TOKEN"] = token
    try:
        w = Writer(server.url(project), spec=sp, spool_root=tmp_path / "spool")
        for i in range(5):
            w.put(batch(sp, i))
        assert w.flush(30) and w.trial_id is not None
        server.kill()
        server = Server(str(b), tmp_path / "b.log", port=server.port).start()
        for i in range(5, 12):
            w.put(batch(sp, i))
        assert w.flush(30), w.last_error
        assert w.close(5) and w.rejected == 0
    finally:
        server.stop()
        if env_token is None:
            os.environ.pop("TUNESCOPE_TOKEN", None)
        else:
            os.environ["TUNESCOPE_TOKEN"] = env_token
    assert stored(str(a), sp.key)[0] == [float(i) for i in range(5)]
    assert stored(str(b), sp.key)[0] == [float(i) for i in range(5, 12)]
    ids_b = _batch_ids(str(b), sp.key)  # the trial re-created there: 7 batches, once each
    assert len(ids_b) == len(set(ids_b)) == 7


def test_a_trials_end_is_spooled_at_once_while_the_store_is_away(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Rule 4: with the store away, a batch carrying the trial's end goes to the spool at once
    (with everything queued before it), not after spill_after: a process killed right after
    its trial ended loses nothing of it."""
    root = tmp_path / "spool"
    open_store(sqlite_url).close()
    sp = spec()
    w = Writer(
        sqlite_url,
        spec=sp,
        spool_root=root,
        spill_after=3600.0,  # only the end's rule can spool within this test
        store_factory=lambda u: open_store(u, timeout=0.2),
    )
    try:
        with SqliteLock(sqlite_url):
            w.put(batch(sp, 0))
            assert wait_for(lambda: w.last_error is not None, 10)  # the store is known away
            w.put(batch(sp, 1))
            assert w.spooled == 0  # ordinary batches wait in memory
            w.put(Batch(sp.key, end=TrialEnd("completed", T0 + 2, exit_code=0)))
            assert w.spooled >= 2 and w.spool_path is not None
            spool = SpoolFile.claim(w.spool_path)
            assert spool is None  # still the writer's (locked), and on disk already:
            frames = w.spool_path.read_bytes()
            assert b"tunescope-spool" in frames and len(frames) > 100
        assert w.flush(30)
    finally:
        w.close(5)
    with open_store(sqlite_url, create=False) as st:
        info = st.trial_by_key(sp.key)
        assert info.state == "completed" and info.end == T0 + 2
    assert stored(sqlite_url, sp.key) == ([0.0, 1.0], 2)
