"""Windows in ClickHouse's SQL against a reference in Python: the SQL store's own way of
merging items into buckets (``_Parts``, store/_contract.py) over the raw samples, or over
minute rows made from them where a span is a minute or longer. Min and max must be equal, not
close; every bucket must also hold exactly the samples between its first and last time (the
SQL store's promise, ``check_window_exact``), on random data (hypothesis)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clickhouse_helpers import KINDS, chdb_engine, fresh_bulk
from store_helpers import check_window_exact
from tunescope.store._contract import _Parts
from tunescope.store._model import Bucket, SeriesInfo, Window
from tunescope.store.clickhouse import MINUTE, BulkStore

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

T0 = 1_700_000_000.0
_IDS = itertools.count(1)


@pytest.fixture(scope="module", params=KINDS)
def bulk(request: pytest.FixtureRequest, chdb_engine: str) -> Iterator[BulkStore]:
    with fresh_bulk(request.param) as b:
        yield b


def reference(
    t: np.ndarray, v: np.ndarray, start: float, end: float, points: int
) -> tuple[list[Bucket] | None, list[tuple[float, float]] | None]:
    """The window the SQL store's bucketing makes of the stored samples ``t``, ``v``."""
    width = (end - start) / points
    inside = (t >= start) & (t <= end)
    a = math.ceil(start / MINUTE) * MINUTE
    b = math.floor(end / MINUTE) * MINUTE
    parts = _Parts()
    if width >= MINUTE and a < b:
        ms = np.round(t * 1000).astype(np.int64)
        whole = (ms >= a * 1000) & (ms < b * 1000)
        minute = np.floor(ms[whole] / 60000).astype(np.int64)
        for m in np.unique(minute):
            vs, ts = v[whole][minute == m], t[whole][minute == m]
            parts.items(
                *(
                    np.array([x])
                    for x in (ts.min(), ts.max(), len(vs), vs.min(), vs.max(), vs.sum())
                )
            )
        edge = inside & ~whole
        parts.samples(t[edge], v[edge])
    else:
        parts.samples(t[inside], v[inside])
    if parts.count() <= points:
        return None, list(zip(t[inside].tolist(), v[inside].tolist(), strict=True))
    return parts.buckets(start, width, points), None


def check(bulk: BulkStore, sid: int, start: float, end: float, points: int) -> None:
    raw_t, raw_v = bulk.read_samples(sid)
    buckets, samples = bulk.window(sid, start, end, points)
    want_b, want_s = reference(raw_t, raw_v, start, end, points)
    assert samples == want_s
    if want_b is None:
        assert buckets is None
    else:
        assert buckets is not None
        assert [(b.t_first, b.t_last, b.n, b.min, b.max) for b in buckets] == [
            (b.t_first, b.t_last, b.n, b.min, b.max) for b in want_b
        ]
        assert np.allclose([b.mean for b in buckets], [b.mean for b in want_b], rtol=1e-9)
    info = SeriesInfo(sid, 1, "gpu.util", None, None, "h")
    check_window_exact(Window(info, start, end, samples, buckets), raw_t, raw_v, points)


def write(bulk: BulkStore, ts: np.ndarray, vs: np.ndarray, batch: int) -> int:
    sid = next(_IDS)
    for i in range(0, len(ts), batch):  # several inserts: rollup rows of one minute unmerged
        bulk.insert_samples(
            np.full(len(ts[i : i + batch]), sid), ts[i : i + batch], vs[i : i + batch]
        )
    return sid


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 3000),
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(256, 2000),
    points=st.integers(1, 400),
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
)
def test_windows_equal_the_reference(
    bulk: BulkStore, n: int, seed: int, batch: int, points: int, lo: float, hi: float
) -> None:
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.1, 0.9996, 1.0, 1.0, 7.3, 600.0], size=n)
    ts = T0 + np.cumsum(gaps)
    vs = rng.normal(50, 30, size=n) * (rng.random(n) < 0.9) + rng.normal(0, 1e4) * (
        rng.random(n) < 0.01
    )
    sid = write(bulk, ts, vs, batch)
    a, b = sorted((lo, hi))
    start = T0 + a * (ts[-1] - T0 + 1)
    end = T0 + b * (ts[-1] - T0 + 1) + 0.5
    check(bulk, sid, start, end, points)


@pytest.mark.parametrize(
    ("start", "end", "points"),
    [
        (T0 + 100.5, T0 + 86_400 - 77.25, 1000),  # a day: minutes inside, raw at the edges
        (T0, T0 + 86_400, 1000),  # aligned on minutes: no raw piece but its end
        (T0 + 7, T0 + 59_000, 7),  # few, wide buckets: minutes straddle their bounds
        (T0 + 10.25, T0 + 3_000, 100),  # spans under a minute: raw
        (T0 + 500, T0 + 600, 1000),  # fewer samples than points: the samples themselves
    ],
)
def test_a_day_of_gpu_like_samples(bulk: BulkStore, start: float, end: float, points: int) -> None:
    n = 86_400
    rng = np.random.default_rng(1)
    ts = T0 + np.arange(n) + np.abs(rng.normal(0.002, 0.003, n))
    vs = np.clip(np.round(rng.normal(97, 2, n)), 0, 100)
    vs[(np.arange(n) // 600) % 10 == 9] = 0
    vs[rng.integers(0, n, 20)] = 100  # spikes a mean would hide
    sid = write(bulk, ts, vs, 20_000)
    check(bulk, sid, start, end, points)


def test_the_edges_of_a_window(bulk: BulkStore) -> None:
    """Samples exactly at start and end are in; a sample at end goes to the last bucket."""
    ts = T0 + np.arange(0, 600, 1.0)
    sid = write(bulk, ts, np.arange(600.0), 1000)
    buckets, samples = bulk.window(sid, T0 + 10, T0 + 130, 3)
    assert samples is None and buckets is not None
    assert [(b.t_first - T0, b.t_last - T0, b.n) for b in buckets] == [
        (10, 49, 40),
        (50, 89, 40),
        (90, 130, 41),
    ]
    with pytest.raises(ValueError, match="start < end"):
        bulk.window(sid, T0 + 10, T0 + 10, 3)
    with pytest.raises(ValueError, match="points"):
        bulk.window(sid, T0, T0 + 10, 0)
