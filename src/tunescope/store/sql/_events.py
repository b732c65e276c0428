"""Events and scalars of a :class:`~tunescope.store.sql._sql.SQLStore`: inserted, counted,
binned and read in a window.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tunescope.errors import Rejected
from tunescope.store._model import Event, Scalar
from tunescope.store.produce._batch import EventRow, ScalarRow
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._pages import EVENT_COLS, event_from_row, scalar_from_row
from tunescope.store.sql._rows import sql_int as _sql_int

__all__ = ["EventsMixin", "spread_bins"]


def spread_bins(rows: Iterable[Sequence[Any]], bins: int) -> list[tuple[str, int, int]]:
    """(kind, bin, count) of every bin with events, from rows (kind, first bin, last bin,
    count) of events grouped by the bins their start and end fall in: each group counts in
    every bin it covers (clipped to the window's ``bins``)."""
    out: list[tuple[str, int, int]] = []
    by_kind: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for kind, lo, hi, n in rows:
        by_kind[kind].append((int(lo), int(hi), int(n)))
    for kind in sorted(by_kind):
        arr = np.asarray(by_kind[kind], dtype=np.int64)
        lo = np.clip(arr[:, 0], 0, bins - 1)
        hi = np.clip(arr[:, 1], 0, bins - 1)
        diff = np.zeros(bins + 1, dtype=np.int64)
        np.add.at(diff, lo, arr[:, 2])
        np.add.at(diff, hi + 1, -arr[:, 2])
        counts = np.cumsum(diff[:-1])
        out.extend((kind, int(i), int(counts[i])) for i in np.flatnonzero(counts))
    return out


class EventsMixin:
    """Events and scalars for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    dialect: Any
    _tx: Any
    _q: Any
    _sql: Any

    # ------------------------------------------------------------------ events
    def _insert_events(self, cur: Any, trial_id: int | None, rows: Iterable[EventRow]) -> int:
        """Insert (kind, t, name, step, duration, value, data) rows of ``trial_id``."""
        out = []
        spans: dict[str, float] = {}
        for kind, t, name, step, duration, value, data in rows:
            blob = None if data is None else json.dumps(data, allow_nan=False)
            out.append((trial_id, kind, name, step, t, duration, value, blob))
            if duration is not None:
                spans[kind] = max(spans.get(kind, 0.0), float(duration))
        if not out:
            return 0
        cur.executemany(
            self._sql(
                "INSERT INTO events (trial_id, kind, name, step, t, duration, value, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            out,
        )
        g = self.dialect.greatest
        for kind, dur in spans.items():
            self._q(
                cur,
                "INSERT INTO event_spans (trial_id, kind, max_duration) "
                "VALUES (?, ?, ?) ON CONFLICT (trial_id, kind) DO UPDATE SET "
                f"max_duration = {g}(event_spans.max_duration, excluded.max_duration)",
                (trial_id, kind, dur),
            )
        return len(out)

    @retrying
    def add_events(self, events: Iterable[Event]) -> int:
        by_trial: dict[int, list[EventRow]] = defaultdict(list)
        for e in events:
            by_trial[e.trial_id].append((e.kind, e.t, e.name, e.step, e.duration, e.value, e.data))
        if not by_trial:
            return 0
        try:
            with self._tx(write=True) as cur:
                return sum(self._insert_events(cur, tid, rows) for tid, rows in by_trial.items())
        except (TypeError, ValueError) as exc:
            raise Rejected(f"event data must be JSON values: {exc}") from None

    def _event_where(
        self, cur: Any, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> tuple[str, list[Any]]:
        row = self._q(
            cur, "SELECT MAX(max_duration) FROM event_spans WHERE trial_id = ?", (trial_id,)
        ).fetchone()
        reach = float(row[0] or 0.0)
        where = "trial_id = ? AND t <= ? AND t >= ? AND t + COALESCE(duration, 0) >= ?"
        args: list[Any] = [trial_id, end, start - reach, start]
        if kinds:
            where += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args.extend(kinds)
        return where, args

    @retrying
    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int:
        with self._tx() as cur:
            where, args = self._event_where(cur, _sql_int(trial_id), start, end, kinds)
            return int(
                self._q(cur, f"SELECT COUNT(*) FROM events WHERE {where}", args).fetchone()[0]
            )

    @retrying
    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]:
        with self._tx() as cur:
            where, args = self._event_where(cur, _sql_int(trial_id), start, end, kinds)
            rows = self._q(
                cur, f"SELECT {EVENT_COLS} FROM events WHERE {where} ORDER BY t, id", args
            ).fetchall()
        return [event_from_row(r) for r in rows]

    @retrying
    def _bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int]]:
        """Counted in the database: events are grouped by (kind, first bin, last bin), so a
        day of optimizer steps comes back as at most a few thousand rows, then each group is
        spread over the bins it covers."""
        width = (end - start) / bins
        fl = self.dialect.floor_int
        b0 = fl.format(x="(t - ?) / ?")
        b1 = fl.format(x="(t + COALESCE(duration, 0) - ?) / ?")
        with self._tx() as cur:
            where, args = self._event_where(cur, _sql_int(trial_id), start, end, kinds)
            rows = self._q(
                cur,
                f"SELECT kind, {b0} AS b0, {b1} AS b1, COUNT(*) FROM events WHERE {where} "
                "GROUP BY kind, b0, b1",
                [start, width, start, width, *args],
            ).fetchall()
        return spread_bins(rows, bins)

    # ------------------------------------------------------------------ scalars
    def _insert_scalars(self, cur: Any, trial_id: int, rows: Iterable[ScalarRow]) -> int:
        out = [
            (trial_id, name, step, t, float(value))
            for name, step, t, value in rows
            if value is not None and math.isfinite(value)
        ]
        if out:
            cur.executemany(
                self._sql(
                    "INSERT INTO scalars (trial_id, name, step, t, value) VALUES (?, ?, ?, ?, ?)"
                ),
                out,
            )
        return len(out)

    @retrying
    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        by_trial: dict[int, list[ScalarRow]] = defaultdict(list)
        for s in scalars:
            by_trial[s.trial_id].append((s.name, s.step, s.t, s.value))
        if not by_trial:
            return 0
        with self._tx(write=True) as cur:
            return sum(self._insert_scalars(cur, tid, rows) for tid, rows in by_trial.items())

    @retrying
    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        stmt = "SELECT trial_id, name, step, t, value FROM scalars WHERE trial_id = ?"
        args: list[Any] = [_sql_int(trial_id)]
        if name is not None:
            stmt += " AND name = ?"
            args.append(name)
        with self._tx() as cur:
            rows = self._q(cur, stmt + " ORDER BY name, step, t, id", args).fetchall()
        return [scalar_from_row(r) for r in rows]

    @retrying
    def scalar_names(self, trial_id: int) -> list[str]:
        with self._tx() as cur:
            rows = self._q(
                cur,
                "SELECT DISTINCT name FROM scalars WHERE trial_id = ? ORDER BY name",
                (_sql_int(trial_id),),
            ).fetchall()
        return [r[0] for r in rows]
