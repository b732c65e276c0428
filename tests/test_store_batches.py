"""Store.write(batch) on every backend: exactly once, trials by key, and several writers."""

from __future__ import annotations

import json
import math
import socket
import threading

import numpy as np
import pytest

from store_helpers import on_clickhouse
from tunescope.errors import NotFound
from tunescope.store import (
    CHUNK_SAMPLES,
    Batch,
    Store,
    TrialEnd,
    TrialSpec,
    new_key,
    open_store,
)
from tunescope.store.produce._batch import EventRow

T0 = 1_700_000_000.0


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


def spec(run: str = "r", name: str | None = None, key: str | None = None) -> TrialSpec:
    return TrialSpec(
        key=key or new_key(),
        run=run,
        name=name,
        params={"lr": 0.1},
        host="h",
        pids=(10,),
        start=T0,
        interval=0.5,
    )


def test_a_batch_creates_its_trial_and_run_from_the_spec(store: Store) -> None:
    sp = spec("fresh", "first")
    tid = store.write(Batch(sp.key, spec=sp, samples=(("cpu.util", None, None, T0 + 1, 50.0),)))
    info = store.trial_by_key(sp.key)
    assert info.id == tid and info.name == "first" and info.key == sp.key
    assert info.params == {"lr": 0.1} and info.interval == 0.5 and info.pids == (10,)
    assert store.get_run("fresh").trials == 1
    # the same key again, even with another spec, is the same trial
    other = TrialSpec(key=sp.key, run="fresh", name="second", start=T0)
    assert store.write(Batch(sp.key, spec=other)) == tid
    assert [t.name for t in store.list_trials(info.run_id)] == ["first"]


def test_a_batch_without_spec_for_an_unknown_key_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.write(Batch(new_key(), samples=(("cpu.util", None, None, T0, 1.0),)))
    assert store.list_runs() == []


def test_a_batch_is_written_exactly_once(store: Store) -> None:
    sp = spec()
    events: tuple[EventRow, ...] = (("optimizer_step", T0 + 1, "SGD", 1, None, None, None),)
    b = Batch(
        sp.key,
        spec=sp,
        samples=tuple(("cpu.mem", None, None, T0 + i, float(i)) for i in range(10)),
        events=events,
        scalars=(("loss", 1, T0 + 1, 0.5),),
    )
    tid = store.write(b)
    assert store.write(b) == tid  # a retry after a lost connection, a replay from the spool
    sid = store.list_series(tid, "cpu.mem")[0].id
    assert len(store.read_samples(sid)[0]) == 10
    assert store.count_events(tid) == 1
    assert len(store.scalars(tid)) == 1
    # a batch with the same content under a new id is new data
    store.write(Batch(sp.key, events=events))
    assert store.count_events(tid) == 2


def test_taken_names_get_a_suffix_and_default_names_count(store: Store) -> None:
    a, b, c = spec("n", "x"), spec("n", "x"), spec("n", None)
    ids = [store.write(Batch(s.key, spec=s)) for s in (a, b, c)]
    names = [store.get_trial(i).name for i in ids]
    assert names == ["x", "x-2", "trial-2"]


def test_trial_changes_heartbeat_pids_params_and_end(store: Store) -> None:
    sp = spec()
    tid = store.write(Batch(sp.key, spec=sp, heartbeat=T0 + 100, pids=(11, 12)))
    store.write(Batch(sp.key, heartbeat=T0 + 50, pids=(13,)))  # a late replay: never back
    info = store.get_trial(tid)
    assert info.heartbeat == T0 + 100 and info.pids == (10, 11, 12, 13)
    store.write(Batch(sp.key, params={"lr": 0.2, "bs": 4}))
    assert store.get_trial(tid).params == {"lr": 0.2, "bs": 4}
    store.write(Batch(sp.key, end=TrialEnd("completed", T0 + 200, exit_code=0)))
    # a sampler that saw the training die defers to the owner's end
    store.write(Batch(sp.key, end=TrialEnd("failed", T0 + 300, "gone", only_if_running=True)))
    store.write(Batch(sp.key, heartbeat=T0 + 400, pids=(99,)))
    info = store.get_trial(tid)
    assert (info.state, info.end, info.error) == ("completed", T0 + 200, None)
    assert store.exit_code(tid) == 0
    assert info.heartbeat == T0 + 100 and 99 not in info.pids


def test_an_end_taken_with_the_last_sample_is_not_before_it_once_stored(store: Store) -> None:
    """Sample times are kept to the millisecond (rounded to the nearest), event times as
    given; the end is kept to the millisecond rounded up, so neither a final sample nor an
    event taken at the end's instant lies after it (CI saw both: a sample rounded up past an
    end kept exactly, then an event past an end rounded to the nearest)."""
    for frac in (1.4209406, 1.5562124, 1.25, 1.0):
        sp = spec()
        t_end = T0 + frac
        tid = store.write(
            Batch(
                sp.key,
                spec=sp,
                samples=(("cpu.procs", None, None, t_end, 1.0),),
                events=(("mark", t_end, "last", None, None, None, None),),
                end=TrialEnd("failed", t_end, "gone", only_if_running=True),
            )
        )
        info = store.get_trial(tid)
        t, _ = store.read_samples(store.list_series(tid, "cpu.procs")[0].id)
        (ev,) = store.all_events(tid, kinds=["mark"])
        assert info.end is not None
        assert t[-1] <= info.end and ev.t <= info.end, (frac, t[-1], ev.t, info.end)
        assert t_end <= info.end < t_end + 1e-3


def test_series_notes_are_kept_from_the_first_sample_that_gives_one(store: Store) -> None:
    sp = spec()
    tid = store.write(Batch(sp.key, spec=sp, samples=(("gpu.mem", "0", None, T0, 1.0),)))
    store.write(Batch(sp.key, samples=(("gpu.mem", "0", "device-wide", T0 + 1, 2.0),)))
    store.write(Batch(sp.key, samples=(("gpu.mem", "0", "other", T0 + 2, 3.0),)))
    (s,) = store.list_series(tid, "gpu.mem")
    assert s.note == "device-wide"
    assert store.read_samples(s.id)[1].tolist() == [1.0, 2.0, 3.0]


def test_a_first_batch_naming_many_series_makes_each_once(store: Store) -> None:
    """A trial's first batch names every metric of every GPU (the server creates them in a
    few statements): each series once, the device kept apart from "no device", and within
    one batch too the first note given wins."""
    sp = spec()
    metrics = [f"m{i}" for i in range(40)]
    rows = [(m, d, None, T0, float(i)) for i, m in enumerate(metrics) for d in (None, "0", "1")]
    rows += [
        ("gpu.mem", "0", None, T0, 1.0),
        ("gpu.mem", "0", "first", T0 + 1, 2.0),
        ("gpu.mem", "0", "second", T0 + 2, 3.0),
    ]
    tid = store.write(Batch(sp.key, spec=sp, samples=tuple(rows)))
    series = store.list_series(tid)
    assert len(series) == 40 * 3 + 1
    assert {(s.metric, s.device) for s in series} == {
        (m, d) for m in metrics for d in (None, "0", "1")
    } | {("gpu.mem", "0")}
    (gm,) = store.list_series(tid, "gpu.mem")
    assert gm.note == "first" and store.read_samples(gm.id)[1].tolist() == [1.0, 2.0, 3.0]
    again = tuple((m, d, None, T0 + 5, v) for m, d, _n, _t, v in rows if m != "gpu.mem")
    store.write(Batch(sp.key, samples=again))
    assert len(store.list_series(tid)) == 40 * 3 + 1
    m7 = next(s for s in series if s.metric == "m7" and s.device == "1")
    assert store.read_samples(m7.id)[1].tolist() == [7.0, 7.0]


def test_a_failed_batch_keeps_nothing_and_can_be_sent_again(store: Store) -> None:
    sp = spec()
    bad = Batch(
        sp.key,
        spec=sp,
        samples=(("cpu.util", None, None, T0, 1.0), ("cpu.util", None, None, T0 + 1, math.inf)),
    )
    with pytest.raises(Exception, match="finite"):
        store.write(bad)
    with pytest.raises(NotFound):
        store.trial_by_key(sp.key)  # not even the trial
    good = Batch(sp.key, id=bad.id, spec=sp, samples=(("cpu.util", None, None, T0, 1.0),))
    tid = store.write(good)
    assert store.list_series(tid)[0].metric == "cpu.util"


def test_threads_sharing_one_store_keep_a_series_in_order(store: Store) -> None:
    """Four threads append to one series through one store: every sample lands, in order
    (the lock covers reading the series' end and writing after it)."""
    sp = spec()
    tid = store.write(Batch(sp.key, spec=sp))
    sid = store.series(tid, "cpu.util").id
    per, threads = 300, 4
    barrier = threading.Barrier(threads)
    clock = iter(range(per * threads))
    clock_lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            for _ in range(per):
                with clock_lock:
                    k = next(clock)
                store.append_samples([(sid, T0 + k * 0.01, float(k))])
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors
    t, v = store.read_samples(sid)
    assert len(t) == per * threads
    assert bool(np.all(np.diff(t) > 0)) and sorted(v.tolist()) == v.tolist()


def test_two_writers_of_one_trial_each_keep_every_sample(any_store_url: str) -> None:
    """The sampler and the flusher write one trial from two connections at once (their own
    series, shared trial rows): nothing is lost, and the trial is created once."""
    sp = spec("two")
    n = 200
    errors: list[BaseException] = []

    def writer(metric: str) -> None:
        st = open_store(any_store_url)
        try:
            for i in range(n):
                st.write(
                    Batch(
                        sp.key,
                        spec=sp,
                        samples=((metric, None, None, T0 + i, float(i)),),
                        heartbeat=T0 + i,
                    )
                )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            st.close()

    pool = [threading.Thread(target=writer, args=(m,)) for m in ("cpu.util", "train.throughput")]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors
    with open_store(any_store_url) as st:
        (trial,) = st.list_trials(st.get_run("two").id)
        for m in ("cpu.util", "train.throughput"):
            (s,) = st.list_series(trial.id, m)
            assert st.read_samples(s.id)[1].tolist() == [float(i) for i in range(n)]
        assert trial.heartbeat == T0 + n - 1


def test_one_batch_appends_merges_and_packs_many_series_at_once(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """Each series of a batch takes its own path in the one transaction: a short append stays
    pending, an append that fills a chunk is packed, and samples older than a series' newest
    (packed) ones are merged in."""
    sp = spec()
    n = CHUNK_SAMPLES + 10
    first = tuple(("cpu.mem", None, None, T0 + 10 + i, 1.0) for i in range(n))
    tid = store.write(Batch(sp.key, spec=sp, samples=first))
    late = (("cpu.mem", None, None, T0 + i, 2.0) for i in range(3))  # before the stored ones
    full = (("gpu.mem", "0", None, T0 + i, float(i)) for i in range(n))
    short = (("gpu.mem", "1", None, T0 + i, 3.0) for i in range(4))
    store.write(Batch(sp.key, samples=(*late, *full, *short)))
    got = {(s.metric, s.device): s.id for s in store.list_series(tid)}
    t, v = store.read_samples(got[("cpu.mem", None)])
    assert t.tolist() == [T0, T0 + 1, T0 + 2, *(T0 + 10 + i for i in range(n))]
    assert v.tolist() == [2.0] * 3 + [1.0] * n
    mem, full_id = got[("cpu.mem", None)], got[("gpu.mem", "0")]
    assert store.series_extent(mem) == (T0, T0 + 10 + n - 1, n + 3)
    assert store.series_extent(full_id) == (T0, T0 + n - 1, n)
    if not on_clickhouse(request):  # chunks are the SQL store's (ClickHouse merges parts)
        # filled: one chunk, the rest pending; merged: every sample it rewrote is packed (a
        # chunk, and the 13 after it), so the rollups take the samples packed anew once
        full_chunks = store._chunk_summaries(full_id, -math.inf, math.inf)
        assert [r[3] for r in full_chunks] == [CHUNK_SAMPLES]
        mem_chunks = store._chunk_summaries(mem, -math.inf, math.inf)
        assert [r[3] for r in mem_chunks] == [CHUNK_SAMPLES, 13]
    assert store.read_samples(got[("gpu.mem", "0")])[1].tolist() == [float(i) for i in range(n)]
    assert store.read_samples(got[("gpu.mem", "1")])[1].tolist() == [3.0] * 4


def test_compacting_while_another_writer_appends_loses_nothing(any_store_url: str) -> None:
    """A store packs a series (a writer closing, a server packing an ended trial's series)
    while another one appends to it: every sample is kept, once."""
    sp = spec()
    with open_store(any_store_url) as st:
        tid = st.write(Batch(sp.key, spec=sp))
        sid = st.series(tid, "cpu.util").id
    n = 400
    done = threading.Event()
    errors: list[BaseException] = []

    def append() -> None:
        st = open_store(any_store_url)
        try:
            for i in range(n):
                st.append_samples([(sid, T0 + i, float(i))])
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()
            st.close()

    def pack() -> None:
        st = open_store(any_store_url)
        try:
            while not done.is_set():
                st.compact(sid)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            st.close()

    pool = [threading.Thread(target=append), threading.Thread(target=pack)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors
    with open_store(any_store_url) as st:
        t, v = st.read_samples(sid)
    assert t.tolist() == [T0 + i for i in range(n)] and v.tolist() == [float(i) for i in range(n)]


def test_two_hosts_batches_for_one_trial_give_two_series_per_metric(store: Store) -> None:
    sp = spec()
    gpu = {"index": 0, "uuid": "GPU-a", "name": "synthetic"}
    tid = store.write(
        Batch(
            sp.key,
            spec=sp,
            host="node-a",
            where={"hostname": "node-a", "gpus": [gpu]},
            samples=(("gpu.util", "0", None, T0 + 1, 10.0), ("cpu.util", None, None, T0 + 1, 1.0)),
        )
    )
    for i in range(2):
        store.write(
            Batch(
                sp.key,
                host="node-b",
                where={"hostname": "node-b"} if i == 0 else None,
                samples=(("gpu.util", "0", None, T0 + 1 + i, 20.0 + i),),
            )
        )
    util = store.list_series(tid, "gpu.util")
    assert [(s.host, s.device) for s in util] == [("node-a", "0"), ("node-b", "0")]
    assert [store.read_samples(s.id)[1].tolist() for s in util] == [[10.0], [20.0, 21.0]]
    assert [(s.metric, s.host) for s in store.list_series(tid)] == [
        ("cpu.util", "node-a"),
        ("gpu.util", "node-a"),
        ("gpu.util", "node-b"),
    ]
    # series() names a host's series, the trial's own by default
    assert store.series(tid, "gpu.util", "0", host="node-b").id == util[1].id
    mine = store.series(tid, "gpu.util", "0")
    assert mine.host == "h" and mine.id not in {s.id for s in util}
    assert store.hosts(tid) == {
        "h": {},
        "node-a": {"hostname": "node-a", "gpus": [gpu]},
        "node-b": {"hostname": "node-b"},
    }
    # a later where for a host merges into what it said, its keys replacing theirs
    store.write(Batch(sp.key, host="node-a", where={"gpus": [], "slurm": {"job_id": "7"}}))
    assert store.hosts(tid)["node-a"] == {
        "hostname": "node-a",
        "gpus": [],
        "slurm": {"job_id": "7"},
    }
    with pytest.raises(NotFound):
        store.hosts(tid + 1000)


def test_a_batch_keeps_its_host_and_where_in_json_and_old_records_still_load() -> None:
    sp = spec()
    b = Batch(sp.key, spec=sp, host="node-b", where={"gpus": [{"index": 1}], "container": None})
    back = Batch.from_json(b.to_json())
    assert back == b
    assert Batch(sp.key).host == socket.gethostname()  # the writer's host unless given
    # a record spooled before batches had a host: its spec's host, else this machine's
    old = json.loads(b.to_json())
    del old["host"], old["where"]
    assert Batch.from_json(json.dumps(old)).host == "h"
    del old["spec"]
    assert Batch.from_json(json.dumps(old)).host == socket.gethostname()
    for bad, field in (({"host": 3}, "host"), ({"where": [1]}, "where")):
        with pytest.raises(ValueError, match=f"^{field} must be"):
            Batch.from_json(json.dumps({**old, **bad}))


def test_a_read_while_packs_move_samples_sees_each_once(store_url: str) -> None:
    """A series read while another connection writes and packs it (a writer closing, a server
    packing an ended trial: samples move from pending rows into chunks) sees every sample
    committed before the read began, each once, in order: chunks and pending rows are read on
    one snapshot (CI saw a read between the two miss a sample the pack had just moved)."""
    sp = spec()
    with open_store(store_url) as w, open_store(store_url) as r:
        tid = w.write(Batch(sp.key, spec=sp, samples=(("cpu.procs", None, None, T0, 0.0),)))
        (sid,) = [s.id for s in w.list_series(tid, "cpu.procs")]
        committed = [1]
        done = threading.Event()
        failed: list[BaseException] = []

        def write() -> None:
            try:
                for k in range(1, 300):
                    w.write(Batch(sp.key, samples=(("cpu.procs", None, None, T0 + k, 0.0),)))
                    committed[0] = k + 1
                    if k % 5 == 0:
                        w.compact(sid)
            except BaseException as exc:  # pragma: no cover - reported below
                failed.append(exc)
            finally:
                done.set()

        th = threading.Thread(target=write)
        th.start()
        reads = 0
        try:
            while not done.is_set() or reads == 0:
                before = committed[0]
                t, _ = r.read_samples(sid)
                reads += 1
                assert len(t) >= before, (len(t), before)
                assert bool(np.all(np.diff(t) > 0)), "a sample twice or out of order"
        finally:
            th.join(60)
        assert not failed, failed
        t, _ = r.read_samples(sid)
        assert len(t) == 300 and reads > 1
