"""Rollups (issue 20, a store bounded for years): windows read minute and hour rollups and stay
exact on count, min, max and mean; dropping raw chunks (``drop_raw``) keeps every window over
whole minutes, a series' extent and its latest value as they were; stores whose chunks predate
the rollups migrate and are rolled up before anything is dropped."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store_helpers import check_window_exact
from tunescope.store import CHUNK_SAMPLES, Store, open_store
from tunescope.store._codec import F64
from tunescope.store._model import Window
from tunescope.store._rollup import merge_rows, rollup_rows
from tunescope.store.sql import _sql
from tunescope.store.sql._schema import SCHEMA_VERSION

T0 = 1_700_000_017.0  # not on a minute


def _fill(store: Store, sid: int, ts: F64, vs: F64, batch: int, swap: bool) -> None:
    """Append in batches; ``swap``: every other pair of batches in reverse order, so later
    samples land first and the older ones are merged in."""
    parts = [slice(i, i + batch) for i in range(0, len(ts), batch)]
    if swap:
        for i in range(0, len(parts) - 1, 2):
            parts[i], parts[i + 1] = parts[i + 1], parts[i]
    for p in parts:
        store.append_samples((sid, float(t), float(v)) for t, v in zip(ts[p], vs[p], strict=True))


def _data(n: int, seed: int) -> tuple[F64, F64]:
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.5, 1.0, 1.0, 1.0, 1.0, 7.3, 130.0, 4000.0], size=n)
    ts = np.round((T0 + np.cumsum(gaps)) * 1000.0) / 1000.0
    vs = rng.normal(50, 30, size=n).astype(np.float32).astype(np.float64)
    spikes = rng.random(n) < 0.01
    vs[spikes] = rng.normal(0, 1e4, size=int(spikes.sum())).astype(np.float32)
    return ts, vs


def _counting(store: Store) -> list[int]:
    """The levels of the rollup reads the store makes from now on."""
    levels: list[int] = []
    inner: Callable[..., Any] = store._rollups

    def spy(series_id: int, level: int, lo: float, hi: float) -> F64:
        levels.append(level)
        out: F64 = inner(series_id, level, lo, hi)
        return out

    store._rollups = spy  # type: ignore[method-assign]
    return levels


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, CHUNK_SAMPLES * 6),
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, CHUNK_SAMPLES * 2),
    swap=st.booleans(),
    points=st.integers(1, 300),
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
    cut=st.floats(0.0, 1.1),
)
def test_windows_over_rollups_equal_raw_before_and_after_the_raw_goes(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    seed: int,
    batch: int,
    swap: bool,
    points: int,
    lo: float,
    hi: float,
    cut: float,
) -> None:
    ts, vs = _data(n, seed)
    path = Path(tmp_path_factory.mktemp("r")) / "s.db"
    with closing(open_store(path)) as store:
        assert isinstance(store, _sql.SQLStore)
        tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
        sid = store.series(tid, "cpu.util").id
        _fill(store, sid, ts, vs, batch, swap)
        raw_t, raw_v = store.read_samples(sid)
        assert raw_t.tolist() == ts.tolist()  # ts has no two equal times
        span = ts[-1] - T0 + 1.0
        a, b = sorted((lo, hi))
        start, end = T0 + a * span, T0 + b * span + 0.5
        levels = _counting(store)
        w = store.window(sid, start, end, points)
        check_window_exact(w, raw_t, raw_v, points)
        # rollups are read where a bucket is a minute or more and a whole minute fits inside
        whole = math.ceil(start / 60) * 60 < math.floor(end / 60) * 60
        assert bool(levels) == ((end - start) / points >= 60 and whole)

        # the raw chunks before the cutoff go; a window over whole minutes is unchanged
        before = T0 + cut * span
        chunks_before = store._chunk_summaries(sid, -np.inf, np.inf)
        dry = store.drop_raw(before, dry_run=True)
        report = store.drop_raw(before)
        gone = [c for c in chunks_before if c[2] < report.cutoff]
        assert (dry.chunks, dry.samples) == (report.chunks, report.samples)
        assert (report.chunks, report.samples) == (len(gone), sum(c[3] for c in gone))
        left_t, _ = store.read_samples(sid)
        assert set(raw_t[raw_t >= report.cutoff].tolist()) <= set(left_t.tolist())
        assert store.series_extent(sid) == (raw_t[0], raw_t[-1], len(raw_t))
        m0 = np.floor(start / 60.0) * 60.0
        m1 = np.ceil(end / 60.0) * 60.0 - 0.001  # the last millisecond of a minute
        if m1 <= m0:
            m1 = m0 + 59.999
        w = store.window(sid, m0, m1, points)
        if report.chunks and m0 < report.cutoff:
            assert w.buckets is not None  # the raw samples are gone: never returned
        check_window_exact(w, raw_t, raw_v, points)


def _store_with(url: str, ts: F64, vs: F64) -> tuple[Store, int]:
    store = open_store(url)
    tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
    sid = store.series(tid, "gpu.util", "0").id
    _fill(store, sid, ts, vs, 700, swap=True)
    store.append_samples([(sid, float(ts[-1]) + 1.0, 42.0)])  # one sample left pending
    return store, sid


def _totals(w: Window) -> tuple[int, float, float, float]:
    """A window's count, min, max and sum."""
    assert w.buckets is not None
    return (
        sum(b.n for b in w.buckets),
        min(b.min for b in w.buckets),
        max(b.max for b in w.buckets),
        round(sum(b.mean * b.n for b in w.buckets), 3),
    )


def _windows(store: Store, sid: int, lo: float, hi: float, exact: bool = True) -> list[Any]:
    """Windows of spans a minute or longer (``exact``: each bucket, else their totals), and
    of 3000 points (their totals: buckets shorter than a minute come from minute rows where
    the raw samples are gone)."""
    out: list[Any] = []
    for points in (1, 7, 100):
        w = store.window(sid, lo, hi, points)
        assert w.buckets is not None
        out.append(
            [(b.t_first, b.t_last, b.n, b.min, b.max, round(b.mean, 6)) for b in w.buckets]
            if exact
            else _totals(w)
        )
    out.append(_totals(store.window(sid, lo, hi, 3000)))
    return out


def test_dropping_raw_keeps_windows_extent_and_latest(
    store_url: str, request: pytest.FixtureRequest
) -> None:
    """Six hours at 1 Hz with a spike, then the raw of the first four dropped: every window
    over whole minutes (count, min, max, mean of each bucket), the series' extent and its
    latest value are as before, on SQLite, PostgreSQL and ClickHouse (whose raw samples go by
    whole days: three and a half of these hours are the day before the cutoff's)."""
    n = 6 * 3600
    t0 = _day_start(T0) + 3 * 86400 - 3.5 * 3600 + 17.0  # the cutoff, t0 + 4 h, on a new day
    ts = t0 + np.arange(n, dtype=np.float64)
    vs = (50 + 40 * np.sin(np.arange(n) / 500.0)).astype(np.float32).astype(np.float64)
    vs[1234] = 1e6  # one second's spike in the dropped part
    store, sid = _store_with(store_url, ts, vs)
    try:
        lo, hi = np.floor(t0 / 60) * 60, np.ceil((t0 + n) / 60) * 60 + 59.999
        windows = _windows(store, sid, lo, hi)
        extent = store.series_extent(sid)
        trial = store._series_info(sid).trial_id
        latest = store.latest(trial)
        report = store.drop_raw(t0 + 4 * 3600)  # type: ignore[attr-defined]
        assert report.chunks > 0 and report.samples >= 3 * 3600
        assert store.raw_from(sid) == report.cutoff  # type: ignore[attr-defined]
        kept_t, _ = store.read_samples(sid)
        assert set(ts[ts >= report.cutoff].tolist()) <= set(kept_t.tolist())  # kept: the new
        assert report.samples == n + 1 - kept_t.size  # what went is what was said
        assert _windows(store, sid, lo, hi) == windows
        assert store.window(sid, lo, hi, 1).buckets[0].max == 1e6  # type: ignore[index]
        assert store.series_extent(sid) == extent
        assert store.latest(trial) == latest
        assert store.drop_raw(t0 + 4 * 3600).chunks == 0  # type: ignore[attr-defined]
    finally:
        store.close()


def _day_start(t: float) -> float:
    return float(np.floor(t / 86400) * 86400)


def test_latest_of_a_series_whose_raw_is_all_gone(
    store_url: str, request: pytest.FixtureRequest
) -> None:
    ts = T0 + np.arange(3000, dtype=np.float64)
    vs = np.arange(3000, dtype=np.float64)
    store, sid = _store_with(store_url, ts, vs)
    try:
        store.compact()
        trial = store._series_info(sid).trial_id
        before = store.latest(trial)
        assert before[0][1:] == (T0 + 3000.0, 42.0)
        assert store.drop_raw(T0 + 2 * 86400).samples == 3001  # type: ignore[attr-defined]
        assert store.read_samples(sid)[0].size == 0
        assert store.latest(trial) == before
        assert store.series_extent(sid) == (T0, T0 + 3000.0, 3001)
    finally:
        store.close()


def test_a_store_written_before_rollups_migrates_and_rolls_up_before_dropping(
    sql_store_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Chunks written by version 8 (no rollups): the store migrates, its windows read chunks
    until ``drop_raw`` rolls the series up, and nothing is dropped before."""
    # SQL stores only: a version 8 database holds its samples in SQL chunks (never ClickHouse)
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 8)
    monkeypatch.setattr(_sql.SQLStore, "_roll_up", lambda *a: None)
    monkeypatch.setattr(_sql.SQLStore, "_touch", lambda *a: None)  # no data generations yet
    n = 3 * 3600
    ts = T0 + np.arange(n, dtype=np.float64)
    vs = np.random.default_rng(3).uniform(0, 100, n).astype(np.float32).astype(np.float64)
    old, sid = _store_with(sql_store_url, ts, vs)
    assert isinstance(old, _sql.SQLStore) and old.schema_version() == 8
    old.close()
    monkeypatch.undo()
    with closing(open_store(sql_store_url)) as store:
        assert isinstance(store, _sql.SQLStore)
        assert store.schema_version() == SCHEMA_VERSION
        assert store._rollup_state(sid) == (False, None)
        lo, hi = np.floor(T0 / 60) * 60, np.ceil((T0 + n) / 60) * 60 + 59.999
        levels = _counting(store)
        windows = _windows(store, sid, lo, hi, exact=False)
        assert levels == []  # not rolled up: chunks answer
        dry = store.drop_raw(T0 + 3600, dry_run=True)
        assert dry.rolled_up == 1 and dry.chunks > 0
        assert store._rollup_state(sid) == (False, None)  # a dry run changes nothing
        report = store.drop_raw(T0 + 3600)
        assert (report.rolled_up, report.chunks) == (1, dry.chunks)
        assert _windows(store, sid, lo, hi, exact=False) == windows
        assert levels  # rolled up: the rollups answer


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1))
def test_hours_merged_from_minutes_equal_hours_rolled_from_samples(n: int, seed: int) -> None:
    """``merge_rows``: an hour's row made of its minutes' rows is the row made of its samples
    (how ``put_minute_rows`` sums the hours of copied minutes)."""
    ts, vs = _data(n, seed)
    minutes = np.asarray(rollup_rows(ts, vs, 60), dtype=np.float64)
    merged, rolled = np.asarray(merge_rows(minutes, 3600)), np.asarray(rollup_rows(ts, vs, 3600))
    assert merged.shape == rolled.shape
    assert np.array_equal(merged[:, [0, 1, 2, 3, 5, 6, 7]], rolled[:, [0, 1, 2, 3, 5, 6, 7]])
    assert np.allclose(merged[:, 4], rolled[:, 4], rtol=1e-12)  # sums, added in another order
