"""Rollups and raw retention for the SQL stores: a store bounded for years.

Every series' samples are added to its minute and hour rollups (:mod:`tunescope.store._rollup`)
in the transaction that packs them into chunks, so the rollups always hold every packed sample.
A series whose chunks were written before the rollups existed (schema version 9) is marked
``rolled = 0`` until :meth:`RollupsMixin.roll_up_series` reads its chunks and rolls them up.

:meth:`RollupsMixin.drop_raw` then drops the raw chunks that ended before a cutoff, series by
series, each in its own short transaction (a writer is held up for one series at most), only
for series whose rollups are complete, and notes the cutoff as the series' ``raw_from``: what
is older is read from the rollups (windows, a series' extent, its latest value).

Not part of the store contract (an HTTP store compacts through the server, which runs
``tunescope serve --keep-raw``): the SQL stores and their pool have these methods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.errors import NotFound
from tunescope.store._codec import F64
from tunescope.store._rollup import LEVELS, check_minute_rows, merge_rows, rollup_rows
from tunescope.store.sql._heal import retrying

__all__ = ["RetentionReport", "RollupsMixin"]


@dataclass(frozen=True)
class RetentionReport:
    """What :meth:`RollupsMixin.drop_raw` dropped (or, dry, would drop): raw chunks, the
    samples in them and their encoded bytes (samples and block summaries), in how many series;
    and how many series it rolled up first (or would). A store on ClickHouse drops daily
    partitions instead of chunks: ``chunks`` counts them, ``unit`` says so."""

    cutoff: float
    chunks: int
    samples: int
    bytes: int
    series: int
    rolled_up: int
    dry_run: bool
    unit: str = "raw chunks"


class RollupsMixin:
    """Rollups for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    _tx: Any
    _q: Any
    _sql: Any
    dialect: Any
    _decode_chunks: Any
    _note_corrupt: Any
    _touch_series: Any
    url: Any

    def _roll_up(self, cur: Any, sid: int, ts: F64, vs: F64) -> None:
        """Add samples (sorted by time, packed for the first time) to the series' rollups."""
        if not len(ts):
            return
        lo, hi = self.dialect.least, self.dialect.greatest
        rows = [(sid, level, *row) for level in LEVELS for row in rollup_rows(ts, vs, level)]
        cur.executemany(
            self._sql(
                "INSERT INTO rollups (series_id, level, t, n, vmin, vmax, vsum, t_first, "
                "t_last, vlast) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (series_id, level, t) DO UPDATE SET n = rollups.n + excluded.n, "
                f"vmin = {lo}(rollups.vmin, excluded.vmin), "
                f"vmax = {hi}(rollups.vmax, excluded.vmax), "
                "vsum = rollups.vsum + excluded.vsum, "
                f"t_first = {lo}(rollups.t_first, excluded.t_first), "
                f"t_last = {hi}(rollups.t_last, excluded.t_last), "
                "vlast = CASE WHEN excluded.t_last >= rollups.t_last THEN excluded.vlast "
                "ELSE rollups.vlast END"
            ),
            rows,
        )

    @retrying
    def _rollup_state(self, series_id: int) -> tuple[bool, float | None]:
        with self._tx() as cur:
            r = self._q(
                cur, "SELECT rolled, raw_from FROM series WHERE id = ?", (int(series_id),)
            ).fetchone()
        if r is None:
            return False, None
        return bool(r[0]), None if r[1] is None else float(r[1])

    @retrying
    def _rollups(self, series_id: int, level: int, lo: float, hi: float) -> F64:
        with self._tx() as cur:
            rows = self._q(
                cur,
                "SELECT t_first, t_last, n, vmin, vmax, vsum FROM rollups "
                "WHERE series_id = ? AND level = ? AND t >= ? AND t < ? ORDER BY t",
                (int(series_id), int(level), math.floor(lo), math.ceil(hi)),
            ).fetchall()
        return np.asarray(rows, dtype=np.float64).reshape(-1, 6)

    @retrying
    def roll_up_series(self, series_id: int) -> bool:
        """Roll up every chunk of a series whose chunks predate the rollups (one transaction,
        the series row locked as appends lock it); False when it was rolled up already. A
        chunk that cannot be decoded stays out of the rollups (and is listed by
        ``corrupt_series``)."""
        sid = int(series_id)
        with self._tx(write=True) as cur:
            r = self._q(
                cur, f"SELECT rolled FROM series WHERE id = ?{self.dialect.for_update}", (sid,)
            ).fetchone()
            if r is None or r[0]:
                return False
            summaries = [
                tuple(x)
                for x in self._q(
                    cur,
                    "SELECT id, t_first, t_last, n, vmin, vmax, vsum FROM chunks "
                    "WHERE series_id = ? ORDER BY t_first",
                    (sid,),
                ).fetchall()
            ]
            self._q(cur, "DELETE FROM rollups WHERE series_id = ?", (sid,))
            for i in range(0, len(summaries), 2048):
                t, v, bad = self._decode_chunks_in(cur, summaries[i : i + 2048])
                self._note_corrupt(sid, bad)
                self._roll_up(cur, sid, t, v)
            self._q(cur, "UPDATE series SET rolled = 1 WHERE id = ?", (sid,))
            self._touch_series(cur, [sid])  # windows read the rollups from now on
        return True

    def _decode_chunks_in(self, cur: Any, rows: list[Any]) -> tuple[F64, F64, list[Any]]:
        """:meth:`Store._decode_chunks` reading the blobs inside transaction ``cur``."""
        blobs: dict[int, bytes] = {}
        for i in range(0, len(rows), 500):
            part = [int(r[0]) for r in rows[i : i + 500]]
            marks = ", ".join("?" * len(part))
            for cid, data in self._q(
                cur, f"SELECT id, data FROM chunks WHERE id IN ({marks})", part
            ).fetchall():
                blobs[int(cid)] = bytes(data)
        out: tuple[F64, F64, list[Any]] = self._decode_chunks(rows, blobs)
        return out

    @retrying
    def _unrolled(self) -> list[int]:
        with self._tx() as cur:
            return [
                int(r[0])
                for r in self._q(cur, "SELECT id FROM series WHERE rolled = 0 ORDER BY id")
            ]

    def drop_raw(self, before: float, *, dry_run: bool = False) -> RetentionReport:
        """Drop the raw chunks of every series that ended before ``before`` (rounded down to
        the minute), once the series' rollups hold them: series whose chunks predate the
        rollups are rolled up first. ``dry_run``: change nothing, say what would go."""
        cutoff = float(math.floor(before / 60.0) * 60)
        unrolled = self._unrolled()
        if not dry_run:
            for sid in unrolled:
                self.roll_up_series(sid)
        chunks = samples = size = 0
        series = self._series_with_raw_before(cutoff)
        for sid in series:
            c, n, b = self._drop_raw_of(sid, cutoff, dry_run)
            chunks += c
            samples += n
            size += b
        return RetentionReport(cutoff, chunks, samples, size, len(series), len(unrolled), dry_run)

    @retrying
    def _series_with_raw_before(self, cutoff: float) -> list[int]:
        with self._tx() as cur:
            return [
                int(r[0])
                for r in self._q(
                    cur,
                    "SELECT DISTINCT series_id FROM chunks WHERE t_last < ? ORDER BY series_id",
                    (cutoff,),
                ).fetchall()
            ]

    @retrying
    def _drop_raw_of(self, sid: int, cutoff: float, dry_run: bool) -> tuple[int, int, int]:
        """Drop (or count) one series' chunks that ended before ``cutoff``, in one
        transaction, if its rollups hold them."""
        with self._tx(write=not dry_run) as cur:
            r = self._q(
                cur,
                f"SELECT rolled FROM series WHERE id = ?{self.dialect.for_update}",
                (sid,),
            ).fetchone()
            if r is None or not (r[0] or dry_run):
                return 0, 0, 0
            c, n, b = self._q(
                cur,
                "SELECT COUNT(*), COALESCE(SUM(n), 0), "
                "COALESCE(SUM(LENGTH(data) + LENGTH(blocks)), 0) "
                "FROM chunks WHERE series_id = ? AND t_last < ?",
                (sid, cutoff),
            ).fetchone()
            if dry_run or not c:
                return int(c), int(n), int(b)
            self._raise_raw_from(cur, sid, cutoff)
            self._q(cur, "DELETE FROM chunks WHERE series_id = ? AND t_last < ?", (sid, cutoff))
            self._touch_series(cur, [sid])  # what was raw is read from the rollups now
        return int(c), int(n), int(b)

    @retrying
    def trials_with_raw_before(self, before: float) -> list[int]:
        """Trials with raw chunks that ended before ``before`` (rounded down to the minute, as
        :meth:`drop_raw` rounds it): those whose raw samples it would drop, in part or all."""
        cutoff = float(math.floor(before / 60.0) * 60)
        with self._tx() as cur:
            return [
                int(r[0])
                for r in self._q(
                    cur,
                    "SELECT DISTINCT s.trial_id FROM series s WHERE EXISTS "
                    "(SELECT 1 FROM chunks c WHERE c.series_id = s.id AND c.t_last < ?) "
                    "ORDER BY s.trial_id",
                    (cutoff,),
                ).fetchall()
            ]

    @retrying
    def raw_from(self, series_id: int) -> float | None:
        """The time before which the series' raw chunks were dropped; None if none were."""
        return self._rollup_state(series_id)[1]

    @retrying
    def minute_rows(self, series_id: int, lo: float, hi: float, limit: int | None = None) -> F64:
        """The series' minute rollup rows with lo <= t < hi, by time, the first ``limit``
        of them (None: all): a (k, 8) array of (t, n, min, max, sum, first time, last time,
        last value). What ``tunescope migrate`` copies of a series whose raw samples were
        dropped."""
        with self._tx() as cur:
            return self._rows_in(cur, int(series_id), LEVELS[-1], lo, hi, limit)

    def _rows_in(
        self, cur: Any, sid: int, level: int, lo: float, hi: float, limit: int | None = None
    ) -> F64:
        """The series' rollup rows of ``level`` with lo <= t < hi, by time, the first
        ``limit`` (None: all), inside transaction ``cur``: a (k, 8) array of
        :data:`~tunescope.store._rollup.RollupRow` fields."""
        rows = self._q(
            cur,
            "SELECT t, n, vmin, vmax, vsum, t_first, t_last, vlast FROM rollups "
            "WHERE series_id = ? AND level = ? AND t >= ? AND t < ? ORDER BY t"
            + ("" if limit is None else f" LIMIT {int(limit)}"),
            (sid, level, math.floor(lo), math.ceil(hi)),
        ).fetchall()
        return np.asarray(rows, dtype=np.float64).reshape(-1, 8)

    def _raise_raw_from(self, cur: Any, sid: int, cutoff: float) -> None:
        """Note ``cutoff`` as the series' ``raw_from`` where it is later than the one noted,
        inside transaction ``cur``."""
        g = self.dialect.greatest
        self._q(
            cur,
            f"UPDATE series SET raw_from = {g}(COALESCE(raw_from, ?), ?) WHERE id = ?",
            (cutoff, cutoff, sid),
        )

    @retrying
    def put_minute_rows(
        self, series_id: int, lo: float, hi: float, rows: F64, raw_from: float
    ) -> None:
        """Make ``rows`` (as :meth:`minute_rows` returns them) the series' minute rollups in
        [lo, hi), a span before ``raw_from``, which becomes the series' ``raw_from`` (where it
        is later than the one noted): the rows of a series whose raw samples before it were
        dropped, as ``tunescope migrate`` copies them. The hour rows of the span are summed
        again from their minutes, in the same transaction, the series locked as appends lock
        it. Sent again, changes nothing. ValueError for rows that are not such minute rows
        (see :func:`~tunescope.store._rollup.check_minute_rows`), NotFound for an unknown
        series; either way nothing is written."""
        sid = int(series_id)
        rows = np.asarray(rows, dtype=np.float64)
        check_minute_rows(rows, lo, hi, raw_from)
        minute, hour = LEVELS[-1], LEVELS[0]
        h0, h1 = math.floor(lo / hour) * hour, math.ceil(hi / hour) * hour
        with self._tx(write=True) as cur:
            if (
                self._q(
                    cur, f"SELECT id FROM series WHERE id = ?{self.dialect.for_update}", (sid,)
                ).fetchone()
                is None
            ):
                raise NotFound(f"no series with id {sid} in {self.url}")
            self._q(
                cur,
                "DELETE FROM rollups WHERE series_id = ? AND level = ? AND t >= ? AND t < ?",
                (sid, minute, int(lo), int(hi)),
            )
            insert = self._sql(
                "INSERT INTO rollups (series_id, level, t, n, vmin, vmax, vsum, t_first, "
                "t_last, vlast) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            )
            cur.executemany(
                insert, [(sid, minute, int(r[0]), int(r[1]), *r[2:].tolist()) for r in rows]
            )
            # the hours the span touches, from every minute row they hold (those of raw
            # samples after raw_from too)
            minutes = self._rows_in(cur, sid, minute, h0, h1)
            self._q(
                cur,
                "DELETE FROM rollups WHERE series_id = ? AND level = ? AND t >= ? AND t < ?",
                (sid, hour, h0, h1),
            )
            cur.executemany(insert, [(sid, hour, *r) for r in merge_rows(minutes, hour)])
            self._raise_raw_from(cur, sid, raw_from)
            self._touch_series(cur, [sid])

    @retrying
    def keep_findings(self, trial_id: int, data: str, t: float) -> bool:
        """Keep a trial's findings (JSON, computed at ``t``) to answer after its raw samples
        are dropped, unless some are kept already: the first kept stay (returns whether these
        were kept). Two servers compacting one store at once may both compute a trial's
        findings; the first to keep them kept them before any of its raw samples went, while
        the other may have read what was left after."""
        with self._tx(write=True) as cur:
            kept: int = self._q(
                cur,
                "INSERT INTO kept_findings (trial_id, t, data) VALUES (?, ?, ?) "
                "ON CONFLICT (trial_id) DO NOTHING",
                (int(trial_id), t, data),
            ).rowcount
        return kept == 1

    @retrying
    def kept_findings(self, trial_id: int) -> str | None:
        """The findings kept for a trial (:meth:`keep_findings`), None if none were."""
        with self._tx() as cur:
            r = self._q(
                cur, "SELECT data FROM kept_findings WHERE trial_id = ?", (int(trial_id),)
            ).fetchone()
        return None if r is None else str(r[0])
