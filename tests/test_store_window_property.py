"""Property: on random data, every bucket's count, min, max and mean equal those of exactly the
raw samples it covers, whatever the window, chunking and point count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store_helpers import check_window_exact
from tunescope.store import CHUNK_SAMPLES, open_store

T0 = 1_700_000_000.0


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, CHUNK_SAMPLES * 6),
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, CHUNK_SAMPLES * 2),
    points=st.integers(1, 400),
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
)
def test_buckets_equal_raw_aggregates(
    tmp_path_factory: object, n: int, seed: int, batch: int, points: int, lo: float, hi: float
) -> None:
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.1, 1.0, 1.0, 1.0, 7.3, 600.0], size=n)
    ts = T0 + np.cumsum(gaps)
    vs = rng.normal(50, 30, size=n) * (rng.random(n) < 0.9) + rng.normal(0, 1e4) * (
        rng.random(n) < 0.01
    )
    path = Path(str(tmp_path_factory.mktemp("p"))) / "s.db"  # type: ignore[attr-defined]
    store = open_store(path)
    try:
        tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
        sid = store.series(tid, "cpu.util").id
        for i in range(0, n, batch):
            store.append_samples(
                (sid, float(t), float(v))
                for t, v in zip(ts[i : i + batch], vs[i : i + batch], strict=True)
            )
        raw_t, raw_v = store.read_samples(sid)
        a, b = sorted((lo, hi))
        start = T0 + a * (ts[-1] - T0 + 1)
        end = T0 + b * (ts[-1] - T0 + 1) + 0.5
        w = store.window(sid, start, end, points)
        check_window_exact(w, raw_t, raw_v, points)
    finally:
        store.close()


@pytest.mark.parametrize("points", [5, 100, 2000])  # whole chunks, blocks, decoded samples
def test_each_resolution_gives_exact_buckets(sqlite_url: str, points: int) -> None:
    n = CHUNK_SAMPLES * 40
    rng = np.random.default_rng(points)
    ts = T0 + np.arange(n, dtype=np.float64)
    vs = rng.uniform(0, 100, n)
    store = open_store(sqlite_url)
    try:
        tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
        sid = store.series(tid, "cpu.util").id
        store.append_samples((sid, float(t), float(v)) for t, v in zip(ts, vs, strict=True))
        raw_t, raw_v = store.read_samples(sid)
        start, end = T0 + 100.5, T0 + n - 77.25
        w = store.window(sid, start, end, points)
        assert w.buckets is not None and len(w.buckets) <= points
        inside = (raw_t >= start) & (raw_t <= end)
        assert sum(b.n for b in w.buckets) == inside.sum()
        for b in w.buckets:
            cover = (raw_t >= b.t_first) & (raw_t <= b.t_last)
            assert (b.n, b.min, b.max) == (cover.sum(), raw_v[cover].min(), raw_v[cover].max())
    finally:
        store.close()
