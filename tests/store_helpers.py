"""Small readers over the store, and a way to damage one, shared by the tests."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tunescope.store import Event, Store
from tunescope.store._codec import F64
from tunescope.store._model import Window


def events_of(store: Store, trial_id: int, kind: str) -> list[Event]:
    """Every event of one kind of a trial, in time order."""
    got = store.events(trial_id, 0.0, time.time() + 60, kinds=[kind], limit=100_000).events
    assert got is not None
    return got


def damage_chunk(
    url: str,
    series_id: int,
    index: int,
    column: str = "data",
    how: Callable[[bytes], bytes] = lambda b: b[: len(b) // 2] + bytes(len(b) - len(b) // 2),
) -> tuple[float, float]:
    """Really damage the bytes of one stored chunk: the ``index``-th chunk (in time) of a
    series, its ``data`` or ``blocks`` column rewritten by ``how`` (default: the second half
    zeroed) through a connection of the database's own driver, as a bad disk or a stray
    write would. Returns the chunk's (t_first, t_last)."""
    assert column in ("data", "blocks")
    if url.startswith("postgresql://"):
        import psycopg

        conn: Any = psycopg.connect(url)
        mark = "%s"
    else:
        conn = sqlite3.connect(url)
        mark = "?"
    try:
        cur = conn.cursor()
        cur.execute(
            f"SELECT id, t_first, t_last, {column} FROM chunks WHERE series_id = {mark} "
            "ORDER BY t_first",
            (series_id,),
        )
        cid, t_first, t_last, blob = cur.fetchall()[index]
        damaged = how(bytes(blob))
        assert damaged != bytes(blob)
        cur.execute(f"UPDATE chunks SET {column} = {mark} WHERE id = {mark}", (damaged, cid))
        conn.commit()
    finally:
        conn.close()
    return float(t_first), float(t_last)


def check_window_exact(w: Window, raw_t: F64, raw_v: F64, points: int) -> None:
    """Every bucket holds exactly the count, min, max and mean of the raw samples it covers,
    and together they hold every raw sample of the window."""
    inside = (raw_t >= w.start) & (raw_t <= w.end)
    wt, wv = raw_t[inside], raw_v[inside]
    if w.samples is not None:
        assert len(w.samples) == len(wt) <= points
        assert [s[1] for s in w.samples] == wv.tolist()
        return
    assert w.buckets is not None and len(w.buckets) <= points
    assert sum(b.n for b in w.buckets) == len(wt)
    prev_last = -np.inf
    for b in w.buckets:
        assert b.t_first > prev_last  # ordered and disjoint
        prev_last = b.t_last
        cover = (wt >= b.t_first) & (wt <= b.t_last)
        assert cover.sum() == b.n
        assert b.min == wv[cover].min()
        assert b.max == wv[cover].max()
        assert np.isclose(b.mean, wv[cover].mean(), rtol=1e-9, atol=1e-6)
    if len(wt):  # the window's min and max are the raw samples'
        assert min(b.min for b in w.buckets) == wv.min()
        assert max(b.max for b in w.buckets) == wv.max()


def on_clickhouse(request: Any) -> bool:
    """Whether the test runs on the ClickHouse backend (a ``store_url`` or ``any_store_url``
    parameter)."""
    callspec = getattr(request.node, "callspec", None)
    return callspec is not None and "clickhouse" in callspec.params.values()
