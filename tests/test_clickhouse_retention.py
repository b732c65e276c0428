"""Raw retention on a store on ClickHouse (issue 23): ``drop_raw`` drops whole daily partitions
of raw samples before the cutoff's day, the minute rollups stay and answer windows, extents and
latest values as before; a sample that reaches those days while they are dropped is not read
as raw where it is gone; a database made before the rollups kept a last value migrates. The
windows, extent and latest of the SQL stores' retention tests run on it too
(``tests/test_store_rollups.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clickhouse_helpers import chdb_engine, fresh_bulk, fresh_url
from store_helpers import check_window_exact
from tunescope.store import Store, open_store
from tunescope.store.clickhouse import BulkStore, schema
from tunescope.store.clickhouse._chdb import ChdbTransport

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

DAY = 86400.0
D0 = 1_699_920_000.0  # a day's start (UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    url = fresh_url("embedded")
    s = open_store(url + "&meta=" + quote(str(tmp_path / "meta.db"), safe=""))
    try:
        yield s
    finally:
        bulk: BulkStore = s.bulk  # type: ignore[attr-defined]
        bulk.transport.command(f"DROP DATABASE IF EXISTS {bulk.transport.database} SYNC")
        s.close()


def _series(store: Store, name: str = "gpu.util") -> tuple[int, int]:
    tid = store.create_trial(store.ensure_run("r", start=D0).id, start=D0).id
    return tid, store.series(tid, name, "0").id


def _partitions(store: Store) -> list[int]:
    bulk: BulkStore = store.bulk  # type: ignore[attr-defined]
    rows = bulk.transport.query(
        "SELECT DISTINCT partition_id FROM system.parts WHERE database = {db:String} "
        "AND table = 'samples' AND active",
        {"db": bulk.transport.database},
    )
    return sorted(int(r[0]) for r in rows)


def test_whole_days_go_and_the_cutoffs_day_stays(store: Store) -> None:
    """Three days and a half of samples every 10 s, the cutoff in the third day: the two
    days before it go whole (said first by the dry run, which changes nothing), the third
    stays raw whole, and the minute rollups of all four stay."""
    tid, sid = _series(store)
    ts = D0 + 3.0 + np.arange(0, 3.5 * DAY, 10.0)
    vs = np.round(np.sin(ts / 999.0) * 100.0, 1)
    store.append_samples((sid, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
    days = [int(D0 // DAY) + k for k in range(4)]
    assert _partitions(store) == days
    extent, latest = store.series_extent(sid), store.latest(tid)
    before = D0 + 2 * DAY + 5 * 3600.0
    dry = store.drop_raw(before, dry_run=True)  # type: ignore[attr-defined]
    assert _partitions(store) == days and store.raw_from(sid) is None  # type: ignore[attr-defined]
    report = store.drop_raw(before)  # type: ignore[attr-defined]
    gone = int((ts < D0 + 2 * DAY).sum())
    assert (dry.chunks, dry.samples, dry.series) == (2, gone, 1)
    assert (report.cutoff, report.chunks, report.samples, report.series) == (
        D0 + 2 * DAY,
        2,
        gone,
        1,
    )
    assert report.bytes == dry.bytes > 0 and report.unit == "days of raw samples"
    assert _partitions(store) == days[2:]
    left, _ = store.read_samples(sid)
    assert left.tolist() == ts[ts >= D0 + 2 * DAY].tolist()  # the cutoff's day whole
    assert store.raw_from(sid) == D0 + 2 * DAY  # type: ignore[attr-defined]
    assert store.series_extent(sid) == extent and store.latest(tid) == latest
    assert store.drop_raw(before).chunks == 0  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    cut=st.integers(0, 3),
    points=st.integers(1, 400),
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
)
def test_windows_after_the_raw_goes_are_the_raws_to_the_minute(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cut: int, points: int, lo: float, hi: float
) -> None:
    """Irregular samples over three days, the days before day ``cut`` dropped: every window
    whose edges are on minutes holds exactly the raw samples' count, min, max and mean in
    each bucket, as before they went; one over dropped days is buckets, never samples."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.5, 1.0, 1.0, 7.3, 130.0, 4000.0], size=4000)
    ts = np.round((D0 + np.cumsum(gaps)) * 1000.0) / 1000.0
    ts = ts[ts < D0 + 3 * DAY]
    vs = rng.normal(50, 30, size=len(ts)).astype(np.float32).astype(np.float64)
    meta = tmp_path_factory.mktemp("m") / "meta.db"
    with open_store(fresh_url("embedded") + "&meta=" + quote(str(meta), safe="")) as s:
        try:
            _, sid = _series(s)
            s.append_samples((sid, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
            s.drop_raw(D0 + cut * DAY)  # type: ignore[attr-defined]
            span = ts[-1] - D0 + 1.0
            a, b = sorted((lo, hi))
            m0 = np.floor((D0 + a * span) / 60.0) * 60.0
            m1 = np.ceil((D0 + b * span) / 60.0) * 60.0 - 0.001
            if m1 <= m0:
                m1 = m0 + 59.999
            w = s.window(sid, m0, m1, points)
            check_window_exact(w, ts, vs, points)
            if cut and m0 < D0 + cut * DAY:
                assert w.buckets is not None  # the raw samples are gone: never returned
        finally:
            bulk: Any = s.bulk  # type: ignore[attr-defined]
            bulk.transport.command(f"DROP DATABASE {bulk.transport.database} SYNC")


def test_a_sample_that_reaches_the_dropped_days_meanwhile_is_read_from_rollups(
    store: Store,
) -> None:
    """A writer adds an old sample of another series after the days to drop were listed and
    before they go (a spool replayed late): it goes with them, and its series is noted as
    having no raw there, so its windows read its minute rows; it still counts everywhere."""
    _, sid = _series(store)
    _, late = _series(store, "gpu.mem")
    store.append_samples((sid, D0 + 10.0 * k, 1.0) for k in range(100))
    bulk: BulkStore = store.bulk  # type: ignore[attr-defined]
    listed = bulk.raw_days_before

    def then_a_late_write(cutoff: float) -> Any:
        out = listed(cutoff)
        store.append_samples([(late, D0 + 500.0, 7.5)])
        return out

    bulk.raw_days_before = then_a_late_write  # type: ignore[method-assign]
    report = store.drop_raw(D0 + DAY)  # type: ignore[attr-defined]
    assert (report.samples, report.series) == (100, 1)  # what it saw
    assert store.read_samples(late)[0].size == 0  # the late sample went with its day
    assert store.raw_from(late) == D0 + DAY  # type: ignore[attr-defined]
    w = store.window(late, D0, D0 + 3600.0, 10)
    assert w.buckets is not None and [(b.n, b.max) for b in w.buckets] == [(1, 7.5)]
    assert store.series_extent(late) == (D0 + 500.0, D0 + 500.0, 1)
    assert [x[1:] for x in store.latest(store._series_info(late).trial_id)] == [(D0 + 500.0, 7.5)]


def test_a_database_made_before_the_last_value_migrates() -> None:
    """Minute rows without a last value (a database made before it, written out of order):
    opening it adds the column, the view's query and every minute's last value from the
    raw samples, so latest is right, and after the raw goes too."""
    with fresh_bulk("embedded") as bulk:
        db, t = bulk.transport.database, bulk.transport
        t.command(f"DROP DATABASE {db} SYNC")
        for stmt in schema(db):  # as it was made before: no vlast
            t.command(
                stmt.replace(
                    ",\n    vlast AggregateFunction(argMax, Float32, Int64) CODEC(ZSTD(1))", ""
                ).replace(",\n    initializeAggregation('argMaxState', value, t) AS vlast", "")
            )
        old = BulkStore(ChdbTransport(bulk.transport.path, db), create=False)  # type: ignore[attr-defined]
        try:
            old.insert_samples([1, 1, 2], [D0 + 30.0, D0 + 10.0, D0 + 5.0], [3.0, 9.0, 4.0])
            old.insert_samples([1], [D0 + 20.0], [5.0])  # older than the minute's newest
        finally:
            old.close()
        new = BulkStore(ChdbTransport(bulk.transport.path, db))
        try:
            assert new.latest([1, 2]) == {1: (D0 + 30.0, 3.0), 2: (D0 + 5.0, 4.0)}
            new.insert_samples([1], [D0 + 40.0], [6.0])  # the view rolls it up from now on
            assert new.latest([1]) == {1: (D0 + 40.0, 6.0)}
            (row,) = new.transport.query(f"SELECT sum(n), min(vmin), max(vmax) FROM {db}.minutes")
            assert row == (5, 3.0, 9.0)  # the rows the migration added change nothing else
            BulkStore(new.transport, create=True)  # again: nothing to add
            assert new.latest([1, 2]) == {1: (D0 + 40.0, 6.0), 2: (D0 + 5.0, 4.0)}
        finally:
            new.close()
