"""Usage kept per ended trial (schema 10, ``kept_usage``): a query answers an ended trial from
what its store kept, and what it answers is what computing it afresh gives, for any window
(cut days and cut trials included); every write of what a trial's usage is read from makes it
computed again (a late batch after the end too); a running trial, a damaged one and a
read-only store keep nothing."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

import usage_truth as ut
from store_helpers import damage_chunk, on_clickhouse
from tunescope.analyze import FindingSettings, Usage, usage_of
from tunescope.analyze._gpu_catalog import GPU_CATALOG
from tunescope.analyze._usage import held_span
from tunescope.analyze._usage_kept import usage_digest
from tunescope.errors import ConfigError
from tunescope.store import (
    Batch,
    Event,
    PooledStore,
    Scalar,
    Store,
    TrialEnd,
    TrialSpec,
    new_key,
    open_store,
)
from tunescope.store.sql._sqlite import SQLiteStore

NOW = ut.DAY0 + 100 * 86400.0
DIGEST = usage_digest(FindingSettings(), GPU_CATALOG)
GROUPS = [["day"], ["project", "user"], ["run"], ["gpu_model", "week"], ["host"], []]


def _usage(store: Any, since: float, until: float, by: list[str], **kw: Any) -> Usage:
    return usage_of(store, since, until, by, now=NOW, projects=ut.PROJECTS, **kw)


def _long_trial(store: Store, project: str, start: float, days: float, seed: int) -> int:
    """A trial of several days (2 GPUs and a CPU every 10 minutes, idle stretches and a gap
    of the sampler), written as batches and ended."""
    rng = np.random.default_rng(seed)
    key = new_key()
    spec = TrialSpec(
        key=key,
        run=f"synthetic-long-{seed}",
        start=start,
        interval=600.0,
        host="long-node",
        project=project,
        os_user="ana",
    )
    n = int(days * 144)
    ts = start + 600.0 * np.arange(1, n + 1)
    keep = np.ones(n, dtype=bool)
    keep[n // 3 : n // 3 + 7] = False  # the sampler was down for over an hour
    samples: list[tuple[str, str | None, str | None, float, float]] = []
    for g in ("0", "1"):
        util = rng.choice([0.0, 0.0, 3.0, 40.0, 85.0, 100.0], size=n)
        util[n // 2 : n // 2 + 6] = 0.0  # an hour idle
        mem = rng.uniform(4, 70, n).round() * ut.GIB
        for i in np.flatnonzero(keep):
            t = float(ts[i])
            samples += [
                ("gpu.util", g, None, t, float(util[i])),
                ("gpu.mem", g, None, t, float(mem[i])),
                ("gpu.mem.total", g, None, t, 81920 * ut.MIB),
            ]
    for i in np.flatnonzero(keep):
        t = float(ts[i])
        samples.append(("cpu.util", None, None, t, float(rng.integers(0, 101))))
        samples.append(("cpu.capacity", None, None, t, 8.0))
    batch = Batch(
        key,
        spec=spec,
        samples=tuple(samples),
        host="long-node",
        where={"gpus": [{"index": 0, "name": "GPU-L"}, {"index": 1, "name": "GPU-L"}]},
        end=TrialEnd("completed", start + 600.0 * n),
    )
    for part in batch.split():
        store.write(part)
    return store.trial_by_key(key).id


@pytest.fixture(scope="module")
def kept_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The known store (40 trials of 3 projects over 90 days) and three trials of several
    days, its usage computed once over everything (so every ended trial's is kept)."""
    path = str(tmp_path_factory.mktemp("kept") / "kept.db")
    with open_store(path) as s:
        ut.write(s, ut.plan())
        _long_trial(s, "vision", ut.DAY0 + 10.3 * 86400, 3.4, 1)
        _long_trial(s, "nlp", ut.DAY0 + 40.9 * 86400, 2.2, 2)
        _long_trial(s, "speech", ut.DAY0 + 41.5 * 86400, 5.0, 3)
        s.compact()
        _usage(s, ut.DAY0 - 86400, ut.DAY0 + 100 * 86400, ["day"])
    yield path


def _moments() -> list[float]:
    """Where windows are worth cutting: trials' starts and ends, midnights, around them."""
    out = []
    for p in ut.plan():
        out += [p.start, p.start + 60.0 * p.minutes, p.start + 1.0, p.start + 60.0 * p.minutes - 1]
    out += [ut.DAY0 + d * 86400.0 for d in range(0, 95)]
    out += [ut.DAY0 + 10.3 * 86400, ut.DAY0 + 13.7 * 86400, ut.DAY0 + 46.5 * 86400]
    return out


MOMENTS = _moments()
SPAN = (ut.DAY0 - 86400.0, ut.DAY0 + 95 * 86400.0)
when = st.one_of(st.sampled_from(MOMENTS), st.floats(*SPAN))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=when, b=when, by=st.sampled_from(GROUPS))
def test_kept_figures_are_the_computed_ones_for_any_window(
    kept_db: str, a: float, b: float, by: list[str]
) -> None:
    """Any window (days cut by it, trials cut by it): the answer with the kept usage is the
    answer computed afresh, figure for figure and trial for trial; only the trials the
    window cuts are computed, the others are read back."""
    since, until = min(a, b), max(a, b)
    if until <= since:
        until = since + 1.0
    with closing(open_store(kept_db, create=False)) as s:
        kept = ut.Counting(s)
        got = _usage(kept, since, until, by)
        fresh = ut.Counting(s, fresh=True)
        want = _usage(fresh, since, until, by)
    assert got.rows == want.rows
    assert got.trials == want.trials
    cut = []
    for u in want.trials:
        h0, h1 = held_span(u.trial, NOW)
        if not (since <= h0 and h1 <= until):
            cut.append(u.trial.id)
    assert sorted(kept.computed) == sorted(cut)
    assert sorted(fresh.computed) == sorted(u.trial.id for u in want.trials)


def test_the_kept_answer_is_the_known_truth(kept_db: str) -> None:
    """Read back, every figure of the known store is still the counted truth."""
    plan = ut.plan()
    with closing(open_store(kept_db, create=False)) as s:
        kept = ut.Counting(s)
        for project in ut.PROJECTS:
            u = usage_of(
                kept, ut.DAY0, ut.DAY0 + 90 * 86400.0, ["user"], now=NOW, projects=[project]
            )
            rows = {r.keys["user"]: r.to_dict() for r in u.rows}
            want = ut.truth(
                [p for p in plan if p.project == project], ["user"], ut.DAY0, ut.DAY0 + 90 * 86400.0
            )
            assert len(want) == 2
            for (user,), truth in want.items():
                if user == "ana":
                    continue  # the long trials (ana's) join her row
                for f, w in truth.items():
                    got = rows[user][f]
                    assert got == (w if w is None or isinstance(w, str) else pytest.approx(w)), f
    assert kept.computed == []  # every trial was read back


def _ended(
    store: Store,
    samples: list[tuple[str, str | None, float, float]],
    t0: float,
    end: float | None,
    heartbeat: float | None = None,
) -> tuple[int, str]:
    key = new_key()
    spec = TrialSpec(key=key, run="r", start=t0, interval=1.0, host="h")
    store.write(
        Batch(
            key,
            spec=spec,
            samples=tuple((m, d, None, t, v) for m, d, t, v in samples),
            host="h",
            where={"gpus": [{"index": 0, "name": "GPU-X"}]},
            heartbeat=heartbeat,
            end=None if end is None else TrialEnd("completed", end),
        )
    )
    return store.trial_by_key(key).id, key


def _one(store: Any, since: float, until: float, **kw: Any) -> dict[str, Any]:
    (row,) = usage_of(store, since, until, [], now=since + 10**6, **kw).rows
    return row.to_dict()


def test_a_late_batch_after_the_end_is_counted(store_url: str) -> None:
    """A trial ended, its usage kept; a batch its sampler had spooled lands afterwards: the
    next query counts it (the kept figures are not answered again), and keeps the new ones."""
    t0 = 5_000_000.0
    util = [("gpu.util", "0", t0 + i, 100.0) for i in range(1, 101)]  # then 100 s unknown
    with closing(open_store(store_url)) as s:
        tid, key = _ended(s, util, t0, t0 + 200)
        before = _one(s, t0, t0 + 300)
        assert (before["gpu_held_s"], before["gpu_busy_s"]) == (200.0, pytest.approx(100.0))
        gen, text = s.kept_usage([tid], DIGEST)[tid]  # type: ignore[attr-defined]
        assert text is not None
        late = tuple(("gpu.util", "0", None, t0 + i, 50.0) for i in range(101, 201))
        s.write(Batch(key, samples=late, host="h"))
        assert s.kept_usage([tid], DIGEST)[tid] == (gen + 1, None)  # type: ignore[attr-defined]
        after = _one(ut.Counting(s), t0, t0 + 300)
        assert after["gpu_busy_s"] == pytest.approx(150.0)
        assert after == _one(ut.Counting(s, fresh=True), t0, t0 + 300)
        again = ut.Counting(s)
        assert _one(again, t0, t0 + 300) == after and again.computed == []  # kept anew


def test_a_running_trial_is_never_kept(store_url: str) -> None:
    t0 = 6_000_000.0
    util = [("gpu.util", "0", t0 + i, 80.0) for i in range(1, 61)]
    with closing(open_store(store_url)) as s:
        tid, key = _ended(s, util, t0, None, heartbeat=t0 + 60)
        assert s.get_trial(tid).state == "running"
        q = ut.Counting(s)
        row = _one(q, t0, t0 + 1000)
        assert row["gpu_held_s"] == 60.0 and q.computed == [tid]
        assert s.kept_usage([tid], DIGEST)[tid][1] is None  # type: ignore[attr-defined]
        s.write(Batch(key, host="h", end=TrialEnd("completed", t0 + 60)))
        _one(s, t0, t0 + 1000)
        assert s.kept_usage([tid], DIGEST)[tid][1] is not None  # type: ignore[attr-defined]


def _gen(s: Store, tid: int) -> int:
    gen: int = s.kept_usage([tid], DIGEST)[tid][0]  # type: ignore[attr-defined]
    return gen


def test_every_write_of_what_usage_reads_raises_the_generation(
    store_url: str, request: pytest.FixtureRequest
) -> None:
    """Each write path that changes what a trial's usage is read from raises its data
    generation in the same transaction; events, scalars and kept findings do not."""
    t0 = 7_000_000.0
    util = [("gpu.util", "0", t0 + i, 80.0) for i in range(1, 61)]
    with closing(open_store(store_url)) as s:
        tid, key = _ended(s, util, t0, t0 + 60)
        other, _ = _ended(s, util, t0, t0 + 60)
        s.compact()
        (series,) = s.list_series(tid, "gpu.util")

        def raises(what: str, act: Any, alone: bool = True) -> None:
            g, o = _gen(s, tid), _gen(s, other)
            act()
            assert _gen(s, tid) > g, what
            assert not alone or _gen(s, other) == o, what  # another trial's is left alone

        def leaves(what: str, act: Any) -> None:
            g = _gen(s, tid)
            act()
            assert _gen(s, tid) == g, what

        late = (("gpu.util", "0", None, t0 + 61, 1.0),)
        raises("batch", lambda: s.write(Batch(key, host="h", samples=late)))
        mark = (("mark", t0 + 5, "x", None, None, None, None),)
        raises("batch of events only", lambda: s.write(Batch(key, host="h", events=mark)))
        raises("append", lambda: s.append_samples([(series.id, t0 + 62, 2.0)]))
        if on_clickhouse(request):  # nothing is ever pending there: compact() changes nothing
            leaves("nothing to pack on ClickHouse", lambda: s.compact())
        else:
            raises("pack pending", lambda: s.compact())
        leaves("nothing to pack", lambda: s.compact())
        raises("merge", lambda: s.append_samples([(series.id, t0 + 0.5, 3.0)]))
        raises("new series", lambda: s.series(tid, "gpu.mem", "0"))
        raises("trial row", lambda: s.update_trial(tid, end=t0 + 70))
        leaves("events", lambda: s.add_events([Event(tid, "mark", t0 + 3, "y")]))
        leaves("scalars", lambda: s.add_scalars([Scalar(tid, "loss", 1, t0 + 3, 0.5)]))
        leaves("kept findings", lambda: s.keep_findings(tid, "[]", t0))  # type: ignore[attr-defined]
        leaves("another trial's update", lambda: s.update_trial(other, end=t0 + 60))
        if on_clickhouse(request):
            return  # rolled up in ClickHouse's own insert; raw retention not built there

        def unrolled() -> None:
            with s._tx(write=True) as cur:  # type: ignore[attr-defined]
                s._q(cur, "UPDATE series SET rolled = 0 WHERE id = ?", (series.id,))  # type: ignore[attr-defined]

        unrolled()
        raises("roll up", lambda: s.roll_up_series(series.id))  # type: ignore[attr-defined]
        raises("drop raw", lambda: s.drop_raw(t0 + 10**6), alone=False)  # type: ignore[attr-defined]


def test_usage_kept_at_an_older_generation_is_never_answered(store_url: str) -> None:
    """A batch that lands while a query computes: what the query keeps names the generation
    it read first, and is refused, or (kept before the batch committed) never answered."""
    t0 = 8_000_000.0
    with closing(open_store(store_url)) as s:
        tid, key = _ended(s, [("gpu.util", "0", t0 + 1, 10.0)], t0, t0 + 10)
        gen = _gen(s, tid)
        assert s.keep_usage([(tid, gen, "[1]")], DIGEST) == 1  # type: ignore[attr-defined]
        assert s.kept_usage([tid], DIGEST)[tid] == (gen, "[1]")  # type: ignore[attr-defined]
        assert s.kept_usage([tid], "another digest")[tid] == (gen, None)  # type: ignore[attr-defined]
        s.write(Batch(key, host="h", samples=(("gpu.util", "0", None, t0 + 2, 20.0),)))
        assert s.kept_usage([tid], DIGEST)[tid] == (gen + 1, None)  # type: ignore[attr-defined]
        assert s.keep_usage([(tid, gen, "[2]")], DIGEST) == 0  # type: ignore[attr-defined]
        assert s.kept_usage([tid], DIGEST)[tid] == (gen + 1, None)  # type: ignore[attr-defined]
        assert s.keep_usage([(tid, gen + 1, "[3]")], DIGEST) == 1  # type: ignore[attr-defined]
        assert s.kept_usage([tid, 10**9], DIGEST) == {tid: (gen + 1, "[3]")}  # type: ignore[attr-defined]


def test_other_idle_settings_are_computed_for_themselves(tmp_path: Path) -> None:
    """The kept figures are those of the settings they were computed with: a query with
    other idle thresholds computes (and keeps) its own."""
    t0 = 9_000_000.0
    util = [("gpu.util", "0", t0 + i, 0.0 if i <= 120 else 90.0) for i in range(1, 601)]
    with closing(open_store(str(tmp_path / "s.db"))) as s:
        _ended(s, util, t0, t0 + 600)
        assert _one(s, t0, t0 + 600)["gpu_idle_s"] == 0.0  # 120 s: under 300 s
        short = FindingSettings(idle_stretch_min_s=60)
        q = ut.Counting(s)
        got = _one(q, t0, t0 + 600, settings=short)
        assert got["gpu_idle_s"] == pytest.approx(120.0) and len(q.computed) == 1
        assert got == _one(ut.Counting(s, fresh=True), t0, t0 + 600, settings=short)


def test_a_trial_whose_reads_met_damage_is_not_kept(tmp_path: Path) -> None:
    """Each query over a damaged trial reads it again, so each says what it had to skip."""
    t0 = 10_000_000.0
    url = str(tmp_path / "s.db")
    util = [("gpu.util", "0", t0 + i, 50.0) for i in range(1, 1201)]
    with closing(open_store(url)) as s:
        tid, _ = _ended(s, util, t0, t0 + 1200)
        s.compact()
        (series,) = s.list_series(tid, "gpu.util")
    damage_chunk(url, series.id, 0)
    with closing(open_store(url)) as s:
        _one(s, t0, t0 + 2000)
        assert [i.id for i, _ in s.corrupt_series()] == [series.id]
        assert s.kept_usage([tid], DIGEST)[tid][1] is None  # type: ignore[attr-defined]


def test_a_read_only_store_answers_without_keeping(tmp_path: Path) -> None:
    t0 = 11_000_000.0
    path = tmp_path / "s.db"
    with closing(open_store(str(path))) as s:
        tid, _ = _ended(s, [("gpu.util", "0", t0 + i, 50.0) for i in range(1, 61)], t0, t0 + 60)
    with closing(SQLiteStore(path, readonly=True)) as ro:
        assert _one(ro, t0, t0 + 100)["gpu_busy_s"] == pytest.approx(30.0)
        assert ro.kept_usage([tid], DIGEST)[tid][1] is None


def test_a_servers_pool_keeps_and_answers(tmp_path: Path) -> None:
    """GET /api/usage computes on the server's pool: the pool passes the kept usage through."""
    t0 = 12_000_000.0
    path = str(tmp_path / "s.db")
    with closing(PooledStore(lambda: open_store(path), size=2)) as pool:
        tid, _ = _ended(pool, [("gpu.util", "0", t0 + i, 50.0) for i in range(1, 61)], t0, t0 + 60)
        first = _one(pool, t0, t0 + 100)
        assert pool.kept_usage([tid], DIGEST)[tid][1] is not None
        q = ut.Counting(pool)
        assert _one(q, t0, t0 + 100) == first and q.computed == []


def test_the_page_reads_the_same_wasted_trials_from_kept_usage(kept_db: str) -> None:
    """The most wasteful trials and their longest idle stretches (the page's list) come out
    the same read back as computed."""
    with closing(open_store(kept_db, create=False)) as s:
        got = _usage(ut.Counting(s), ut.DAY0, ut.DAY0 + 95 * 86400.0, ["day"])
        want = _usage(ut.Counting(s, fresh=True), ut.DAY0, ut.DAY0 + 95 * 86400.0, ["day"])
    assert [dataclasses.astuple(t.gpus[0]) for t in got.most_wasted(10) if t.gpus] == [
        dataclasses.astuple(t.gpus[0]) for t in want.most_wasted(10) if t.gpus
    ]
    assert [t.longest_stretch() for t in got.most_wasted(10)] == [
        t.longest_stretch() for t in want.most_wasted(10)
    ]
    assert any(t.longest_stretch() is not None for t in got.most_wasted(10))


def test_a_query_refused_for_a_price_keeps_nothing(tmp_path: Path) -> None:
    t0 = 13_000_000.0
    with closing(open_store(str(tmp_path / "s.db"))) as s:
        tid, _ = _ended(s, [("gpu.util", "0", t0 + i, 50.0) for i in range(1, 61)], t0, t0 + 60)
        with pytest.raises(ConfigError, match="names no GPU model"):
            _one(s, t0, t0 + 100, prices={"no-such-gpu": 1.0})
        assert s.kept_usage([tid], DIGEST)[tid] == (_gen(s, tid), None)  # type: ignore[attr-defined]
