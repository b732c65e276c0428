"""Pages of a trial's events and scalars, for a server that must answer in bounded time.

A page is at most ``limit`` rows after a position (keyset paging: the last row's sort key and
id, never an offset), so each page costs the same however deep it is, and rows written while a
client pages (a running trial's) never shift the pages it has yet to read. Events are in time
order (``t``, then id); scalars by name, step (a missing step first), time, id.

Not part of the store contract (an HTTP store pages through the server's API): the server's
SQL stores, and its pool, have these methods.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tunescope.store._model import Event, Scalar
from tunescope.store.sql._heal import retrying

__all__ = [
    "EVENT_COLS",
    "EventKey",
    "PagesMixin",
    "ScalarKey",
    "event_from_row",
    "json_or",
    "scalar_from_row",
]

EventKey = tuple[float, int]
"""Where an events page ended: (t, id) of its last event."""
ScalarKey = tuple[str, int, float, int]
"""Where a scalars page ended: (name, step or :data:`_NO_STEP`, t, id) of its last scalar."""

EVENT_COLS = "trial_id, kind, name, step, t, duration, value, data"
_SCALAR_COLS = "trial_id, name, step, t, value"
_NO_STEP = -(2**63)
"""A missing step sorts first."""


def json_or(raw: Any, default: Any) -> Any:
    """A JSON column's value; ``default`` when damaged (a damaged row degrades, never
    fails a read)."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return default


def event_from_row(r: Sequence[Any]) -> Event:
    """An event from a row of :data:`EVENT_COLS`."""
    return Event(
        int(r[0]),
        r[1],
        float(r[4]),
        r[2],
        None if r[3] is None else int(r[3]),
        None if r[5] is None else float(r[5]),
        None if r[6] is None else float(r[6]),
        None if r[7] is None else json_or(r[7], None),
    )


def scalar_from_row(r: Sequence[Any]) -> Scalar:
    """A scalar from a row of (trial_id, name, step, t, value)."""
    return Scalar(int(r[0]), r[1], None if r[2] is None else int(r[2]), float(r[3]), float(r[4]))


class PagesMixin:
    """Keyset pages for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    _tx: Any
    _q: Any
    _event_where: Any

    @retrying
    def event_page(
        self,
        trial_id: int,
        start: float,
        end: float,
        kinds: Sequence[str] | None,
        after: EventKey | None,
        limit: int,
    ) -> tuple[list[Event], EventKey | None]:
        """Up to ``limit`` events overlapping [start, end] (as :meth:`Store.events` selects
        them) that come after ``after`` (None: from the first), and the key to pass as
        ``after`` for the next page (None when this page holds the last one)."""
        with self._tx() as cur:
            where, args = self._event_where(cur, trial_id, start, end, kinds)
            if after is not None:
                where += " AND (t > ? OR (t = ? AND id > ?))"
                args = [*args, after[0], after[0], after[1]]
            rows = self._q(
                cur,
                f"SELECT id, {EVENT_COLS} FROM events WHERE {where} ORDER BY t, id LIMIT ?",
                [*args, limit + 1],
            ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        key = (float(rows[-1][5]), int(rows[-1][0])) if more else None
        return [event_from_row(r[1:]) for r in rows], key

    @retrying
    def scalar_page(
        self, trial_id: int, name: str | None, after: ScalarKey | None, limit: int
    ) -> tuple[list[Scalar], ScalarKey | None]:
        """Up to ``limit`` scalars of the trial (of one name, or all) after ``after`` (None:
        from the first), and the key of the next page (None after the last)."""
        step = f"COALESCE(step, {_NO_STEP})"
        where = "trial_id = ?"
        args: list[Any] = [trial_id]
        if name is not None:
            where += " AND name = ?"
            args.append(name)
        if after is not None:
            where += f" AND (name, {step}, t, id) > (?, ?, ?, ?)"
            args.extend(after)
        with self._tx() as cur:
            rows = self._q(
                cur,
                f"SELECT id, {_SCALAR_COLS}, {step} FROM scalars WHERE {where} "
                f"ORDER BY name, {step}, t, id LIMIT ?",
                [*args, limit + 1],
            ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        last = rows[-1] if rows else None
        key = (str(last[2]), int(last[6]), float(last[4]), int(last[0])) if more and last else None
        return [scalar_from_row(r[1:6]) for r in rows], key
