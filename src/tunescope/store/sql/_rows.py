"""What the parts of :class:`~tunescope.store.sql._sql.SQLStore` share: the columns of the
rows they read, and records made of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tunescope.store._model import SeriesInfo

__all__ = [
    "RUNS",
    "RUN_COLS",
    "SERIES_COLS",
    "STORE_NOW",
    "TRIAL_COLS",
    "floats",
    "ids_in",
    "series_from",
    "sql_int",
]

RUNS = "runs r JOIN projects p ON r.project_id = p.id"
RUN_COLS = "r.id, r.name, r.t_start, p.name, r.os_user, r.host"
SERIES_COLS = "id, trial_id, metric, device, note, host"
STORE_NOW = "{store_now}"
"""Stands in a statement for the store's own time now, epoch seconds
(:attr:`~tunescope.store.sql._sql.Dialect.now`)."""
TRIAL_COLS = (
    "id, run_id, name, params, state, host, pids, t_start, t_end, heartbeat, error, interval_s, "
    f"trial_key, COALESCE(t_seen, heartbeat), {STORE_NOW}"
)
"""A trial's columns, then when its last heartbeat landed and the time now, both on the
store's clock (see :meth:`Store.derive_state`)."""


def series_from(r: Sequence[Any]) -> SeriesInfo:
    """A series from its row (:data:`SERIES_COLS`); device '' is None."""
    return SeriesInfo(int(r[0]), int(r[1]), str(r[2]), r[3] or None, r[4], str(r[5]))


def floats(row: Sequence[Any]) -> tuple[float, float, float]:
    a, b, c = row
    return float(a), float(b), float(c)


def sql_int(value: int) -> int:
    """An id as the databases store it: a number outside 64 bits names nothing (NotFound),
    rather than a driver's overflow error."""
    v = int(value)
    return v if -(2**63) <= v < 2**63 else -1


def ids_in(q: Any, cur: Any, sql: str, ids: Sequence[int]) -> set[int]:
    """The first column, as ints, of ``sql`` run on ``cur`` through ``q`` (a store's ``_q``)
    for ``ids`` in pages of 500, its ``{marks}`` the page's placeholders (``IN ({marks})``)."""
    found: set[int] = set()
    for i in range(0, len(ids), 500):
        part = [int(x) for x in ids[i : i + 500]]
        marks = ", ".join("?" * len(part))
        found.update(int(r[0]) for r in q(cur, sql.format(marks=marks), part).fetchall())
    return found
