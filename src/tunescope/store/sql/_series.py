"""Series of a :class:`~tunescope.store.sql._sql.SQLStore` and the reads of their samples: the
pending rows, the chunks' summaries and bytes (read by the contract's derived queries),
extents and the newest values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tunescope._kept import Kept
from tunescope.errors import NotFound, Rejected
from tunescope.store._codec import F64
from tunescope.store._model import SeriesInfo
from tunescope.store._rollup import LEVELS
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._rows import SERIES_COLS as _SERIES_COLS
from tunescope.store.sql._rows import floats as _floats
from tunescope.store.sql._rows import series_from as _series_from
from tunescope.store.sql._rows import sql_int as _sql_int

__all__ = ["SeriesMixin"]


class SeriesMixin:
    """Series and sample reads for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    url: str
    max_series: int
    _series_cache: Kept[int, SeriesInfo]
    _series_ids: Kept[tuple[int, str, str, str], tuple[int, bool]]
    _tx: Any
    _q: Any
    _sql: Any
    _snapshot: Any
    _touch: Any
    _decode_chunks: Any
    _note_corrupt: Any

    # ------------------------------------------------------------------ series
    def _series_in(
        self,
        cur: Any,
        trial_id: int,
        host: str,
        metric: str,
        device: str | None,
        note: str | None,
    ) -> int:
        """The id of the series (trial, metric, host, device), created if new; ``note`` is
        kept from the first call that gives one."""
        ids = self._series_ids_in(cur, trial_id, host, [(metric, device, note)])
        return ids[(metric, device or "")]

    def _series_ids_in(
        self,
        cur: Any,
        trial_id: int,
        host: str,
        wanted: Sequence[tuple[str, str | None, str | None]],
    ) -> dict[tuple[str, str], int]:
        """The ids of the series (metric, device or "") of ``host`` named by ``wanted``
        (metric, device, note) rows of one trial, creating the new ones; a note is kept from
        the first row that gives one. A few statements whatever their number (a trial's first
        batch names every metric of every GPU). Only series found already committed are
        cached."""
        first: dict[tuple[str, str], str | None] = {}
        for metric, device, note in wanted:
            key = (metric, device or "")
            if first.get(key) is None:
                first[key] = note
        out: dict[tuple[str, str], int] = {}
        notes: dict[tuple[str, str], str | None] = {}
        for key, note in first.items():
            known = self._series_ids.get((trial_id, host, *key))
            if known is not None and (note is None or known[1]):
                out[key] = known[0]
            else:
                notes[key] = note
        if not notes:
            return out

        def stored() -> dict[tuple[str, str], tuple[int, bool]]:
            rows = self._q(
                cur,
                "SELECT metric, device, id, note FROM series WHERE trial_id = ? AND host = ?",
                (trial_id, host),
            ).fetchall()
            return {(r[0], r[1]): (int(r[2]), r[3] is not None) for r in rows}

        have = stored()
        for key, (sid, has_note) in have.items():
            if key in notes:
                self._series_ids.put((trial_id, host, *key), (sid, has_note))
        missing = [key for key in notes if key not in have]
        if missing:
            if self._q(cur, "SELECT 1 FROM trials WHERE id = ?", (trial_id,)).fetchone() is None:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
            (count,) = self._q(
                cur, "SELECT COUNT(*) FROM series WHERE trial_id = ?", (trial_id,)
            ).fetchone()
            if int(count) + len(missing) > self.max_series:
                raise Rejected(
                    f"trial {trial_id} would have {int(count) + len(missing)} series (metrics "
                    f"x devices x hosts), more than the {self.max_series} a trial may have"
                )
            cur.executemany(
                self._sql(
                    "INSERT INTO series (trial_id, metric, host, device, note) VALUES "
                    "(?, ?, ?, ?, ?) ON CONFLICT (trial_id, metric, host, device) DO NOTHING"
                ),
                [(trial_id, m, host, d, notes[(m, d)]) for m, d in missing],
            )
            have = stored()
        for key, note in notes.items():
            sid, has_note = have[key]
            if note is not None and not has_note:
                self._q(cur, "UPDATE series SET note = ? WHERE id = ?", (note, sid))
            out[key] = sid
        return out

    @retrying
    def series(
        self,
        trial_id: int,
        metric: str,
        device: str | None = None,
        note: str | None = None,
        host: str | None = None,
    ) -> SeriesInfo:
        tid = _sql_int(trial_id)
        with self._tx(write=True) as cur:
            if host is None:
                row = self._q(cur, "SELECT host FROM trials WHERE id = ?", (tid,)).fetchone()
                if row is None:
                    raise NotFound(f"no trial with id {trial_id} in {self.url}")
                host = str(row[0])
            sid = self._series_in(cur, tid, host, metric, device, note)
            self._touch(cur, [tid])  # a GPU's series makes it held
            row = self._q(cur, f"SELECT {_SERIES_COLS} FROM series WHERE id = ?", (sid,)).fetchone()
        return _series_from(row)

    @retrying
    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        stmt = f"SELECT {_SERIES_COLS} FROM series WHERE trial_id = ?"
        args: list[Any] = [_sql_int(trial_id)]
        if metric is not None:
            stmt += " AND metric = ?"
            args.append(metric)
        with self._tx() as cur:
            rows = self._q(cur, stmt + " ORDER BY metric, host, device", args).fetchall()
        return [_series_from(r) for r in rows]

    @retrying
    def _series_info(self, series_id: int) -> SeriesInfo:
        info = self._series_cache.get(series_id)
        if info is None:
            with self._tx() as cur:
                r = self._q(
                    cur, f"SELECT {_SERIES_COLS} FROM series WHERE id = ?", (_sql_int(series_id),)
                ).fetchone()
            if r is None:
                raise NotFound(f"no series with id {series_id} in {self.url}")
            info = _series_from(r)
            self._series_cache.put(series_id, info)
        return info

    # ------------------------------------------------------------------ reading samples
    def _pending_in(self, cur: Any, sid: int, start: float, end: float) -> tuple[F64, F64]:
        args: list[Any] = [sid]
        stmt = "SELECT t, value FROM pending WHERE series_id = ?"
        if math.isfinite(start):
            stmt += " AND t >= ?"
            args.append(start)
        if math.isfinite(end):
            stmt += " AND t <= ?"
            args.append(end)
        rows = self._q(cur, stmt + " ORDER BY t", args).fetchall()
        if not rows:
            return np.empty(0), np.empty(0)
        arr = np.asarray(rows, dtype=np.float64)
        return arr[:, 0].copy(), arr[:, 1].copy()

    @retrying
    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        with self._tx() as cur:
            return self._pending_in(cur, _sql_int(series_id), start, end)

    @retrying
    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        args: list[Any] = [_sql_int(series_id)]
        stmt = "SELECT id, t_first, t_last, n, vmin, vmax, vsum FROM chunks WHERE series_id = ?"
        if math.isfinite(end):
            stmt += " AND t_first <= ?"
            args.append(end)
        if math.isfinite(start):
            # chunks never overlap: none that reaches ``start`` begins before the last one that
            # begins before it, so the index scan starts there, not at the series' first chunk
            stmt += (
                " AND t_last >= ? AND t_first >= COALESCE((SELECT MAX(d.t_first) FROM chunks d "
                "WHERE d.series_id = ? AND d.t_first < ?), ?)"
            )
            args.extend([start, args[0], start, start])
        with self._tx() as cur:
            return [tuple(r) for r in self._q(cur, stmt + " ORDER BY t_first", args).fetchall()]

    @retrying
    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        if column not in ("data", "blocks"):
            raise ValueError(f"no chunk column {column!r}")
        out: dict[int, bytes] = {}
        with self._tx() as cur:
            for i in range(0, len(chunk_ids), 500):
                part = list(chunk_ids[i : i + 500])
                marks = ", ".join("?" * len(part))
                for cid, data in self._q(
                    cur, f"SELECT id, {column} FROM chunks WHERE id IN ({marks})", part
                ).fetchall():
                    out[int(cid)] = bytes(data)
        return out

    @retrying
    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        """As :meth:`Store.series_extent`; a series whose raw chunks were dropped in part
        answers from its hour rollups, which hold every packed sample."""
        with self._snapshot(), self._tx() as cur:
            r = self._q(
                cur, "SELECT raw_from FROM series WHERE id = ?", (_sql_int(series_id),)
            ).fetchone()
            c = self._q(
                cur,
                "SELECT MIN(t_first), MAX(t_last), SUM(n) FROM chunks WHERE series_id = ?"
                if r is None or r[0] is None
                else "SELECT MIN(t_first), MAX(t_last), SUM(n) FROM rollups "
                f"WHERE series_id = ? AND level = {LEVELS[0]}",
                (_sql_int(series_id),),
            ).fetchone()
            p = self._q(
                cur,
                "SELECT MIN(t), MAX(t), COUNT(*) FROM pending WHERE series_id = ?",
                (_sql_int(series_id),),
            ).fetchone()
        firsts = [x for x in (c[0], p[0]) if x is not None]
        if not firsts:
            return None
        lasts = [x for x in (c[1], p[1]) if x is not None]
        return float(min(firsts)), float(max(lasts)), int(c[2] or 0) + int(p[2] or 0)

    @retrying
    def latest(self, trial_id: int) -> list[tuple[SeriesInfo, float, float]]:
        """As :meth:`Store.latest`, in three statements for the whole trial (its series, the
        newest pending sample of each, the newest chunk's summary of each) and one for the
        bytes of the chunks that hold a series' newest sample (none is pending after it),
        decoded together; all on one snapshot (see :meth:`_snapshot`)."""
        with self._snapshot():
            return self._latest(_sql_int(trial_id))

    def _latest(self, tid: int) -> list[tuple[SeriesInfo, float, float]]:
        with self._tx() as cur:
            series = [
                _series_from(r)
                for r in self._q(
                    cur,
                    f"SELECT {_SERIES_COLS} FROM series WHERE trial_id = ? "
                    "ORDER BY metric, host, device",
                    (tid,),
                ).fetchall()
            ]
            pending = {
                int(sid): (float(t), float(v))
                for sid, t, v in self._q(
                    cur,
                    "SELECT p.series_id, p.t, p.value FROM pending p "
                    "JOIN series s ON s.id = p.series_id WHERE s.trial_id = ? AND p.t = "
                    "(SELECT MAX(q.t) FROM pending q WHERE q.series_id = p.series_id)",
                    (tid,),
                ).fetchall()
            }
            newest = {
                int(r[1]): (int(r[0]), float(r[2]), float(r[3]), int(r[4]), *_floats(r[5:8]))
                for r in self._q(
                    cur,
                    "SELECT c.id, c.series_id, c.t_first, c.t_last, c.n, c.vmin, c.vmax, c.vsum "
                    "FROM chunks c JOIN series s ON s.id = c.series_id WHERE s.trial_id = ? "
                    "AND c.t_first = "
                    "(SELECT MAX(d.t_first) FROM chunks d WHERE d.series_id = c.series_id)",
                    (tid,),
                ).fetchall()
            }
            # series whose newest chunks may be dropped: their newest minute rollup
            rolled = {
                int(sid): (float(t), float(v))
                for sid, t, v in self._q(
                    cur,
                    "SELECT s.id, r.t_last, r.vlast FROM series s JOIN rollups r "
                    f"ON r.series_id = s.id AND r.level = {LEVELS[-1]} AND r.t = "
                    "(SELECT MAX(q.t) FROM rollups q WHERE q.series_id = s.id "
                    f"AND q.level = {LEVELS[-1]}) "
                    "WHERE s.trial_id = ? AND s.raw_from IS NOT NULL",
                    (tid,),
                ).fetchall()
            }
        for sid, tv in rolled.items():
            if sid not in pending or tv[0] > pending[sid][0]:
                pending[sid] = tv
        # the newest chunks to decode: at once, each one's last sample at its count's end
        todo = [
            (sid, c) for sid, c in newest.items() if sid not in pending or c[2] > pending[sid][0]
        ]
        t, v, bad = self._decode_chunks([c for _, c in todo])
        if not bad:
            ends = np.cumsum([c[3] for _, c in todo], dtype=np.int64) - 1
            for (sid, _), e in zip(todo, ends.tolist(), strict=True):
                pending[sid] = (float(t[e]), float(v[e]))
        else:  # one at a time, leaving the damaged ones out
            for sid, c in todo:
                t, v, bad = self._decode_chunks([c])
                self._note_corrupt(sid, bad)
                if len(t):
                    pending[sid] = (float(t[-1]), float(v[-1]))
        return [(s, *pending[s.id]) for s in series if s.id in pending]

    @retrying
    def disk_bytes(self) -> dict[str, int]:
        """Bytes of encoded chunk data and pending rows, for benchmarks and `tunescope runs`."""
        with self._tx() as cur:
            blob = self._q(
                cur, "SELECT COALESCE(SUM(LENGTH(data)), 0), COUNT(*) FROM chunks"
            ).fetchone()
        return {"chunk_bytes": int(blob[0]), "chunks": int(blob[1])}
