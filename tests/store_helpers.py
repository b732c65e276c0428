"""Small readers over the store, and a way to damage one, shared by the tests."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from tunescope.store import Event, Store


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
