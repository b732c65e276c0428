"""One suite, every backend: SQLite always, PostgreSQL when TUNESCOPE_TEST_POSTGRES is set, and
the HTTP store on a real server."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from store_helpers import on_clickhouse
from tunescope.errors import Conflict, NotFound, StoreError
from tunescope.store import CHUNK_SAMPLES, Event, Scalar, Store, open_store

T0 = 1_700_000_000.0


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


def _trial(store: Store, run: str = "r") -> int:
    r = store.ensure_run(run, start=T0)
    return store.create_trial(r.id, params={"lr": 0.01}, start=T0).id


def test_runs_are_unique_by_name_and_listed_newest_first(store: Store) -> None:
    a = store.ensure_run("alpha", start=T0)
    b = store.ensure_run("beta", start=T0 + 10)
    assert store.ensure_run("alpha").id == a.id
    assert [r.name for r in store.list_runs()] == ["beta", "alpha"]
    assert store.get_run("beta").id == b.id
    assert store.get_run(a.id).name == "alpha"
    with pytest.raises(NotFound):
        store.get_run("gamma")


def test_trials_default_names_params_and_conflicts(store: Store) -> None:
    r = store.ensure_run("r", start=T0)
    t0 = store.create_trial(r.id, params={"lr": 0.1, "bs": 8}, host="h", pids=[1, 2])
    t1 = store.create_trial(r.id)
    assert (t0.name, t1.name) == ("trial-0", "trial-1")
    assert t0.params == {"lr": 0.1, "bs": 8} and t0.pids == (1, 2) and t0.state == "running"
    with pytest.raises(Conflict):
        store.create_trial(r.id, name="trial-0")
    with pytest.raises(NotFound):
        store.create_trial(9999)
    with pytest.raises(StoreError):
        store.create_trial(r.id, params={"f": object()})
    assert [t.name for t in store.list_trials(r.id)] == ["trial-0", "trial-1"]
    assert store.find_trial(r.id, "trial-1").id == t1.id


def test_trial_states_and_lost(store: Store) -> None:
    r = store.ensure_run("r", start=T0)
    t = store.create_trial(r.id, start=time.time())
    assert store.update_trial(t.id, state="completed", end=time.time(), exit_code=0)
    got = store.get_trial(t.id)
    assert got.state == "completed" and got.end is not None
    assert store.exit_code(t.id) == 0
    assert store.get_run("r").state == "completed"
    assert not store.update_trial(t.id, state="failed", only_if_running=True)
    assert store.get_trial(t.id).state == "completed"
    old = store.create_trial(r.id, start=time.time() - 3600)
    assert store.get_trial(old.id).state == "lost"
    store.update_trial(old.id, heartbeat=time.time())
    assert store.get_trial(old.id).state == "running"
    assert store.get_run("r").state == "running"
    with pytest.raises(NotFound):
        store.update_trial(12345, state="failed")


def test_trial_params_can_be_replaced(store: Store) -> None:
    r = store.ensure_run("p", start=T0)
    t = store.create_trial(r.id, "a", {"lr": 0.1})
    assert store.update_trial(t.id, params={"lr": 0.2, "rank": 8})
    assert store.get_trial(t.id).params == {"lr": 0.2, "rank": 8}
    with pytest.raises(StoreError, match="JSON"):
        store.update_trial(t.id, params={"lr": math.nan})
    assert store.get_trial(t.id).params == {"lr": 0.2, "rank": 8}


def test_samples_round_trip_as_float32_with_ms_times(store: Store) -> None:
    tid = _trial(store)
    s = store.series(tid, "cpu.util")
    ts = T0 + np.arange(1000) * 1.0 + 0.0004
    vs = np.linspace(0, 100, 1000) + 1 / 3
    store.append_samples((s.id, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
    got_t, got_v = store.read_samples(s.id)
    assert len(got_t) == 1000
    assert np.array_equal(got_v, vs.astype(np.float32).astype(np.float64))
    assert np.allclose(got_t, np.round(ts, 3), atol=1e-6)
    store.compact()
    assert np.array_equal(store.read_samples(s.id)[1], got_v)
    assert store.series_extent(s.id) == (pytest.approx(got_t[0]), pytest.approx(got_t[-1]), 1000)


def test_older_samples_merge_in_order_and_values_must_be_finite(
    store: Store, request: pytest.FixtureRequest
) -> None:
    tid = _trial(store)
    s = store.series(tid, "cpu.mem")
    store.append_samples([(s.id, T0 + 10, 1.0)])
    store.append_samples([(s.id, T0 + 5, 0.5)])  # older: merged in, not refused
    assert store.read_samples(s.id)[0].tolist() == [T0 + 5, T0 + 10]
    store.append_samples([(s.id, T0 + 5, 2.0), (s.id, T0 + 7, 3.0)])  # another late batch
    t, v = store.read_samples(s.id)
    assert t.tolist() == [T0 + 5, T0 + 5, T0 + 7, T0 + 10]
    if on_clickhouse(request):
        # ClickHouse orders by (series, t) only: samples at one time come in any order
        assert sorted(v[:2].tolist()) == [0.5, 2.0] and v[2:].tolist() == [3.0, 1.0]
    else:  # the SQL store keeps the stored one before the late one at one time
        assert v.tolist() == [0.5, 2.0, 3.0, 1.0]
    store.update_trial(tid, state="completed")
    store.append_samples([(s.id, T0 + 11, 1.0)])
    with pytest.raises(StoreError, match="finite"):
        store.append_samples([(s.id, T0 + 20, math.nan)])
    # nothing of a failed batch is kept
    with pytest.raises(StoreError):
        store.append_samples([(s.id, T0 + 30, 1.0), (s.id, T0 + 31, math.inf)])
    assert len(store.read_samples(s.id)[0]) == 5


def test_late_samples_rewrite_the_chunks_they_fall_into(store: Store) -> None:
    """A late batch that falls among packed chunks (a replay from the spool after a restarted
    sampler wrote newer samples) is merged: every sample once, in order, chunks never
    overlapping, and windows exact."""
    tid = _trial(store)
    s = store.series(tid, "cpu.util")
    n = CHUNK_SAMPLES * 3
    new = [(s.id, T0 + 1000 + i, float(i % 7)) for i in range(n)]
    store.append_samples(new)
    late = [(s.id, T0 + 1000 + i + 0.5, 100.0) for i in range(CHUNK_SAMPLES, 2 * CHUNK_SAMPLES)]
    late += [(s.id, T0 + i, -1.0) for i in range(10)]  # before everything
    store.append_samples(late)
    t, _v = store.read_samples(s.id)
    assert len(t) == n + CHUNK_SAMPLES + 10
    assert bool(np.all(np.diff(t) > 0))
    summ = store._chunk_summaries(s.id, -math.inf, math.inf)
    for a, b in itertools.pairwise(summ):
        assert a[2] < b[1]  # t_last of one before t_first of the next
    w = store.window(s.id, T0, T0 + 1000 + n, 10)
    assert w.buckets is not None
    assert sum(b.n for b in w.buckets) == len(t)
    assert max(b.max for b in w.buckets) == 100.0 and min(b.min for b in w.buckets) == -1.0


def test_series_identity_devices_and_notes(store: Store) -> None:
    tid = _trial(store)
    a = store.series(tid, "gpu.mem", "0")
    b = store.series(tid, "gpu.mem", "1", note="device-wide")
    assert store.series(tid, "gpu.mem", "0").id == a.id
    assert b.note == "device-wide" and a.device == "0"
    c = store.series(tid, "cpu.util")
    assert c.device is None
    assert [(x.metric, x.device) for x in store.list_series(tid)] == [
        ("cpu.util", None),
        ("gpu.mem", "0"),
        ("gpu.mem", "1"),
    ]
    assert len(store.list_series(tid, "gpu.mem")) == 2
    with pytest.raises(NotFound):
        store.series(999, "cpu.util")


def test_window_buckets_keep_spikes_across_chunks_and_pending(store: Store) -> None:
    tid = _trial(store)
    s = store.series(tid, "gpu.util", "0")
    n = CHUNK_SAMPLES * 20 + 17  # whole chunks plus a pending tail
    ts = T0 + np.arange(n, dtype=np.float64)
    vs = np.full(n, 10.0)
    vs[1234] = 99.0  # a one-second spike
    vs[n - 3] = -5.0  # a dip in the pending tail
    store.append_samples((s.id, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
    w = store.window(s.id, T0, T0 + n, 100)
    assert w.buckets is not None and w.samples is None
    assert len(w.buckets) <= 100
    assert sum(b.n for b in w.buckets) == n
    assert max(b.max for b in w.buckets) == 99.0
    assert min(b.min for b in w.buckets) == -5.0
    spike = next(b for b in w.buckets if b.max == 99.0)
    assert spike.t_first <= T0 + 1234 <= spike.t_last
    few = store.window(s.id, T0 + 100, T0 + 150, 100)
    assert few.samples is not None and len(few.samples) == 51


def test_events_window_intervals_and_binning(store: Store) -> None:
    tid = _trial(store)
    evs = [Event(tid, "optimizer_step", T0 + i * 0.01, name="SGD", step=i + 1) for i in range(5000)]
    evs.append(Event(tid, "evaluation", T0 + 50.5, name="eval", duration=19.0))
    evs.append(Event(tid, "checkpoint", T0 + 75, name="adapter", data={"path": "/x", "bytes": 10}))
    assert store.add_events(evs) == 5002
    # an evaluation that began before the window still shows
    w = store.events(tid, T0 + 60, T0 + 80, limit=100)
    assert w.events is not None
    assert {e.kind for e in w.events} == {"evaluation", "checkpoint"}
    ck = next(e for e in w.events if e.kind == "checkpoint")
    assert ck.data == {"path": "/x", "bytes": 10}
    dense = store.events(tid, T0, T0 + 100, limit=100)
    assert dense.total == 5002 and dense.events is None and dense.bins is not None
    steps = sum(b.count for b in dense.bins if b.kind == "optimizer_step")
    assert steps == 5000
    ev_bins = [b for b in dense.bins if b.kind == "evaluation"]
    # the 19 s interval over 1 s bins is counted in each of the 20 bins it touches
    assert [round(b.t0 - T0) for b in ev_bins] == list(range(50, 70))
    only = store.events(tid, T0, T0 + 1, kinds=["optimizer_step"], limit=1000)
    assert only.events is not None and [e.step for e in only.events][:3] == [1, 2, 3]


def test_window_points_read_alike_raw_or_bucketed(store: Store) -> None:
    """A window's points (t, mean, min, max, count) are the raw samples one for one, or the
    buckets' own figures: a reader never needs to ask which it got."""
    tid = _trial(store)
    s = store.series(tid, "gpu.util", "0")
    n = CHUNK_SAMPLES * 4
    vs = [float(i % 13) for i in range(n)]
    store.append_samples((s.id, T0 + i, v) for i, v in enumerate(vs))
    raw = store.window(s.id, T0 + 10, T0 + 14, 100)
    assert raw.raw and raw.t == [T0 + 10, T0 + 11, T0 + 12, T0 + 13, T0 + 14]
    assert raw.mean == raw.min == raw.max == vs[10:15] and raw.count == [1] * 5
    assert raw.peak == max(vs[10:15])
    w = store.window(s.id, T0, T0 + n, 10)
    assert not w.raw and w.buckets is not None
    assert w.t == [(b.t_first + b.t_last) / 2 for b in w.buckets]
    assert (w.mean, w.min, w.max) == tuple(
        [getattr(b, k) for b in w.buckets] for k in ("mean", "min", "max")
    )
    assert sum(w.count) == n and w.peak == 12.0
    empty = store.window(s.id, T0 - 100, T0 - 50, 10)
    assert empty.t == empty.count == [] and empty.peak is None


def test_event_reads_share_one_spelling(store: Store) -> None:
    """count_events, events and all_events take (trial, start, end) in that order (all time
    by default but for events) and the kinds by name; all_events never bins, however many
    match."""
    tid = _trial(store)
    evs = [Event(tid, "optimizer_step", T0 + i, step=i) for i in range(300)]
    evs += [Event(tid, "evaluation", T0 + 100.5, duration=2.0)]
    store.add_events(evs)
    assert store.count_events(tid) == 301
    assert store.count_events(tid, T0 + 100, T0 + 101) == 3
    assert store.count_events(tid, T0 + 100, T0 + 101, kinds=["evaluation"]) == 1
    assert store.count_events(tid, kinds=["optimizer_step"]) == 300
    assert store.events(tid, T0, T0 + 300).total == 301
    steps = store.events(tid, T0 + 100, T0 + 101, kinds=["optimizer_step"], limit=10)
    assert steps.events is not None and [e.step for e in steps.events] == [100, 101]
    assert store.events(tid, T0, T0 + 300, kinds=["optimizer_step"], limit=10).events is None
    every = store.all_events(tid, kinds=["optimizer_step"])
    assert [e.step for e in every] == list(range(300))
    assert [e.kind for e in store.all_events(tid, T0 + 101, T0 + 102)] == [
        "evaluation",
        "optimizer_step",
        "optimizer_step",
    ]


def test_scalars(store: Store) -> None:
    tid = _trial(store)
    store.add_scalars([Scalar(tid, "loss", i, T0 + i, 1.0 / (i + 1)) for i in range(10)])
    store.add_scalars(
        [Scalar(tid, "eval/acc", 5, T0 + 5, 0.8), Scalar(tid, "bad", 1, T0, math.nan)]
    )
    assert store.scalar_names(tid) == ["eval/acc", "loss"]
    loss = store.scalars(tid, "loss")
    assert [s.step for s in loss] == list(range(10)) and loss[1].value == 0.5


def test_two_connections_see_each_others_writes(any_store_url: str) -> None:
    a = open_store(any_store_url)
    b = open_store(any_store_url)
    try:
        tid = _trial(a)
        s = a.series(tid, "cpu.util")
        a.append_samples([(s.id, T0 + 1, 5.0)])
        assert b.read_samples(s.id)[1].tolist() == [5.0]
        assert b.get_trial(tid).params == {"lr": 0.01}
    finally:
        a.close()
        b.close()


def test_closing_a_reader_leaves_a_writers_pending_samples_alone(
    any_sql_store_url: str, request: pytest.FixtureRequest
) -> None:
    # SQL stores only: a writer packs its pending rows into chunks when it closes
    writer = open_store(any_sql_store_url)
    reader = open_store(any_sql_store_url)
    try:
        tid = _trial(writer)
        sid = writer.series(tid, "cpu.util").id
        writer.append_samples([(sid, T0 + i, float(i)) for i in range(10)])
        assert len(reader.read_samples(sid)[0]) == 10
        reader.close()
        assert writer._chunk_summaries(sid, -math.inf, math.inf) == []
        writer.close()  # the writer packs its own samples
        with open_store(any_sql_store_url) as again:
            assert len(again._chunk_summaries(sid, -math.inf, math.inf)) == 1
            assert again.read_samples(sid)[1].tolist() == [float(i) for i in range(10)]
    finally:
        reader.close()
        writer.close()


def test_latest_is_the_newest_sample_of_every_series_of_the_trial(store: Store) -> None:
    """Newest samples from pending rows, from packed chunks, from both; a series without a
    sample is left out, another trial's series too; a late sample does not move it."""
    tid = _trial(store)
    other = store.create_trial(store.ensure_run("r").id, start=T0).id
    pend = store.series(tid, "cpu.util").id
    packed = store.series(tid, "gpu.mem", "0").id
    both = store.series(tid, "gpu.mem", "1").id
    store.series(tid, "gpu.power", "0")  # no sample
    short = store.series(tid, "gpu.util", "0").id  # its newest chunk holds 3 samples
    elsewhere = store.series(other, "cpu.util").id
    store.append_samples([(pend, T0 + i, 1.0 + i / 3) for i in range(10)])
    store.append_samples([(packed, T0 + i, 2e6 + i) for i in range(2 * CHUNK_SAMPLES)])
    store.append_samples([(both, T0 + i, 3e6 - i) for i in range(CHUNK_SAMPLES + 7)])
    store.append_samples([(short, T0 + i, 100.0 - i) for i in range(CHUNK_SAMPLES + 3)])
    store.append_samples([(elsewhere, T0, 5.0)])
    store.compact(packed)
    store.compact(short)
    store.append_samples([(pend, T0 + 2.5, 99.0)])  # late: merged in, not the newest
    got = store.latest(tid)
    assert [(s.id, s.metric, s.device) for s, _, _ in got] == [
        (pend, "cpu.util", None),
        (packed, "gpu.mem", "0"),
        (both, "gpu.mem", "1"),
        (short, "gpu.util", "0"),
    ]
    for s, t, v in got:
        ts, vs = store.read_samples(s.id)
        assert (t, v) == (ts[-1], vs[-1])
    assert got[0][2] == float(np.float32(1.0 + 9 / 3))
    assert got[1][1:] == (pytest.approx(T0 + 2 * CHUNK_SAMPLES - 1), 2e6 + 2 * CHUNK_SAMPLES - 1)
    assert got[2][2] == 3e6 - (CHUNK_SAMPLES + 6)
    assert got[3][2] == 100.0 - (CHUNK_SAMPLES + 2)
    # the contract's plain version, on the primitives, answers the same
    assert Store.latest(store, tid) == got
    assert store.latest(other)[0][1:] == (T0, 5.0)
