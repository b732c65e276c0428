"""The writer and the spool: batches land in order and exactly once, whatever the store does;
the producer is never held."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fault_helpers import SqliteLock, wait_for
from tunescope.store import Batch, TrialSpec, new_key, open_store
from tunescope.store._spool import SpoolFile, pending, replay, spool_dir
from tunescope.store._writer import Writer

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
