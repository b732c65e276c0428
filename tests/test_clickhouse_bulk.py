"""The bulk tables on ClickHouse's real engine (and a real server when one is named): a retried
insert adds nothing, samples read back as the SQL store gives them (millisecond times, float32
values), bad values are refused as the SQL store refuses them, before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clickhouse_helpers import KINDS, chdb_engine, fresh_bulk
from tunescope.errors import Rejected
from tunescope.store import Event, Scalar, open_store
from tunescope.store.clickhouse import BulkStore

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

T0 = 1_700_000_000.0


@pytest.fixture(params=KINDS)
def bulk(request: pytest.FixtureRequest) -> Iterator[BulkStore]:
    with fresh_bulk(request.param) as b:
        yield b


def _rows(bulk: BulkStore, table: str) -> int:
    return int(bulk.transport.query(f"SELECT count() FROM {bulk.transport.database}.{table}")[0][0])


def _minutes(bulk: BulkStore) -> tuple[int, float]:
    n, s = bulk.transport.query(f"SELECT sum(n), sum(vsum) FROM {bulk.transport.database}.minutes")[
        0
    ]
    return int(n), float(s)


def test_a_retried_insert_adds_no_row(bulk: BulkStore) -> None:
    n = 3000  # across a day's edge: two partitions, so two blocks of one insert
    ts = np.floor(T0 / 86400) * 86400 + 86400 - 1000 + np.arange(n) * 0.75
    vs = np.arange(n) % 101
    sid = np.r_[np.full(n // 2, 11), np.full(n - n // 2, 12)]
    assert bulk.insert_samples(sid, ts, vs, token="p/batch-1") == n
    once = (_rows(bulk, "samples"), _minutes(bulk))
    assert once == (n, (n, float(vs.sum())))
    bulk.insert_samples(sid, ts, vs, token="p/batch-1")  # the writer could not tell: again
    assert (_rows(bulk, "samples"), _minutes(bulk)) == once
    bulk.insert_samples(sid, ts + n, vs, token="p/batch-2")  # another batch lands
    assert _rows(bulk, "samples") == 2 * n
    ev = [Event(5, "evaluation", T0, name="eval", duration=2.0, data={"loss": 0.5})]
    sc = [Scalar(5, "loss", 1, T0, 0.25)]
    for _ in range(2):
        bulk.insert_events(ev, token="p/batch-3")
        bulk.insert_scalars(sc, token="p/batch-3")
    assert (_rows(bulk, "events"), _rows(bulk, "scalars")) == (1, 1)


def test_an_insert_adds_one_exact_rollup_row_a_series_and_minute(bulk: BulkStore) -> None:
    """The view turns each sample into a row and the rollup table merges them as it writes the
    insert: one row a (series, minute) of the insert, exact, whatever the order samples come
    in (here shuffled)."""
    rng = np.random.default_rng(4)
    n = 2 * 170
    sid = np.repeat([21, 22], n // 2)
    ts = T0 + np.tile(np.arange(n // 2) + 0.25, 2)  # ~3 minutes of each series
    vs = rng.normal(50, 20, n).round(3)
    order = rng.permutation(n)
    bulk.insert_samples(sid[order], ts[order], vs[order], token="p/rollup")
    rows = bulk.transport.query(
        "SELECT series_id, minute, n, vmin, vmax, vsum, t_first, t_last "
        f"FROM {bulk.transport.database}.minutes ORDER BY series_id, minute"
    )  # no GROUP BY: the rows as stored
    t_ms = np.round(ts * 1000).astype(np.int64)
    v32 = vs.astype(np.float32)
    want = []
    for s in (21, 22):
        for m in np.unique(t_ms[sid == s] // 60_000):
            sel = (sid == s) & (t_ms // 60_000 == m)
            want.append(
                (
                    s,
                    int(m),
                    int(sel.sum()),
                    float(v32[sel].min()),
                    float(v32[sel].max()),
                    float(v32[sel].astype(np.float64).sum()),
                    int(t_ms[sel].min()),
                    int(t_ms[sel].max()),
                )
            )
    assert len(want) == 8  # 4 minutes touched by each series
    got = [
        (
            int(r[0]),
            int(r[1]),
            int(r[2]),
            float(r[3]),
            float(r[4]),
            float(r[5]),
            int(r[6]),
            int(r[7]),
        )
        for r in rows
    ]
    assert [g[:5] + g[6:] for g in got] == [w[:5] + w[6:] for w in want]
    assert [g[5] for g in got] == pytest.approx([w[5] for w in want], rel=1e-12)


def test_samples_read_back_as_the_sql_store_keeps_them(bulk: BulkStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    ts = T0 + np.cumsum(rng.choice([0.0004, 0.9996, 1.0, 7.3], 500))
    vs = rng.normal(0, 1e6, 500)
    bulk.insert_samples(np.full(500, 3), ts, vs)
    with open_store(tmp_path / "s.db") as sql:
        sid = sql.series(sql.create_trial(sql.ensure_run("r").id).id, "gpu.power").id
        sql.append_samples((sid, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
        want_t, _ = sql.read_samples(sid)
        for a, b in [(T0 + 10.0004, T0 + 300.5), (-np.inf, T0 + 1), (ts[-5], np.inf)]:
            got = bulk.read_samples(3, a, b)
            want = sql.read_samples(sid, a, b)
            assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    t, v = bulk.read_samples(3)
    assert t.tolist() == want_t.tolist()
    assert v.tolist() == [float(np.float32(x)) for x in vs]


@pytest.mark.parametrize(
    ("t", "v"),
    [
        (T0, float("nan")),
        (T0, float("inf")),
        (float("nan"), 1.0),
        (float("-inf"), 1.0),
        (2e11, 1.0),  # beyond the times a store keeps
        (T0, 1e39),  # beyond float32
    ],
)
def test_a_value_the_sql_store_refuses_is_refused_alike(
    bulk: BulkStore, tmp_path: Path, t: float, v: float
) -> None:
    rows = [(9, T0 - 1, 1.0), (9, t, v)]
    with open_store(tmp_path / "s.db") as sql, pytest.raises(Rejected) as want:
        sql.append_samples(rows)
    with pytest.raises(Rejected) as got:
        bulk.append_samples(rows)
    assert str(got.value) == str(want.value)
    assert _rows(bulk, "samples") == 0  # nothing of it was sent


def test_ids_that_name_no_series_are_refused(bulk: BulkStore) -> None:
    with pytest.raises(Rejected, match="series id 0 is not a positive integer"):
        bulk.insert_samples([1, 0], [T0, T0], [1.0, 2.0])
    with pytest.raises(Rejected, match="equally long"):
        bulk.insert_samples([1, 2], [T0], [1.0])
    assert _rows(bulk, "samples") == 0


def test_latest_and_extent(bulk: BulkStore) -> None:
    assert bulk.latest([1, 2]) == {} and bulk.series_extent(1) is None
    ts = T0 + np.arange(5000) * 1.0
    bulk.insert_samples(np.full(5000, 1), ts, np.arange(5000) % 7)
    bulk.insert_samples([2, 2], [T0 + 5.5, T0 + 3.25], [4.0, 8.0])  # older after newer
    bulk.insert_samples([1], [T0 + 10_000.5], [42.5])  # a late one, hours on
    assert bulk.latest([1, 2, 3]) == {1: (T0 + 10_000.5, 42.5), 2: (T0 + 5.5, 4.0)}
    assert bulk.series_extent(1) == (T0, T0 + 10_000.5, 5001)
    assert bulk.series_extent(2) == (T0 + 3.25, T0 + 5.5, 2)


def test_events_and_scalars(bulk: BulkStore) -> None:
    evs = [Event(1, "optimizer_step", T0 + i, step=i, duration=0.5) for i in range(10)] + [
        Event(1, "evaluation", T0 + 3.2, name="val", duration=4.0, value=0.5, data={"a": [1]}),
        Event(2, "mark", T0, name="other trial"),
    ]
    assert bulk.insert_events(evs, seq=0) == 12
    got = bulk.fetch_events(1, T0 + 5, T0 + 6)
    assert [(e.kind, e.t) for e in got] == [
        ("evaluation", T0 + 3.2),  # reaches into the span from before it
        ("optimizer_step", T0 + 5),
        ("optimizer_step", T0 + 6),
    ]
    assert got[0] == evs[10]
    assert bulk.count_events(1) == 11
    assert bulk.count_events(1, kinds=["evaluation", "mark"]) == 1
    assert bulk.fetch_events(1, T0 + 20, np.inf) == []
    with pytest.raises(Rejected, match="JSON"):
        bulk.insert_events([Event(1, "mark", T0, data={"x": float("nan")})])
    scs = [Scalar(1, "loss", 2, T0 + 2, 0.5), Scalar(1, "loss", 1, T0 + 1, 0.75)]
    scs += [Scalar(1, "acc", None, T0, 0.1)]
    bulk.insert_scalars(scs)
    assert bulk.scalars(1) == [scs[2], scs[1], scs[0]]
    assert bulk.scalars(1, "loss") == [scs[1], scs[0]]
    assert bulk.scalar_names(1) == ["acc", "loss"] and bulk.scalar_names(2) == []
