"""Usage kept per ended trial, for the SQL stores: what ``tunescope usage`` computed once.

A trial's usage figures (``tunescope.analyze``'s per-day slices and its GPUs' facts) are
costly to compute (every busy and memory series of every GPU is read) and, once the trial has
ended, they change only when what they are computed from is written. So the analysis keeps
them here (:meth:`KeptUsageMixin.keep_usage`, table ``kept_usage``: JSON the store does not
read) and asks for them back (:meth:`KeptUsageMixin.kept_usage`); compaction computes those
of the ended trials that have none ahead of any query (:meth:`KeptUsageMixin.unkept_usage`).

Never stale, by a generation: every trial has a ``data_gen`` counter that each transaction
writing what a trial's usage is read from raises, in that same transaction (:meth:`_touch`):
a batch of the trial (:meth:`~tunescope.store.sql._sql.SQLStore.write`: a late one from a spool
too), samples appended to its series, a series created, the trial's row updated, its pending
samples packed into chunks, its series rolled up or its raw chunks dropped (the packing and the
rollups change how a long series is read in buckets). Events and scalars are not read by the
usage, and raise nothing. A kept row names the generation it was computed at and is answered
only while the trial is still at it; the caller reads the generation *before* anything it
computes from (:meth:`kept_usage` returns it with a miss) and hands it back to
:meth:`keep_usage`, which keeps nothing when the trial has moved on meanwhile. A write racing
the computation therefore costs a recomputation, never a wrong figure: the row is kept only if
the generation it names is the trial's, and answered only while it still is.

One row per trial (the figures of the newest settings asked, named by their ``digest``), so
the table never grows beyond the trials. Not part of the store contract: the analysis reads a
store's own figures, and a team server computes usage on its own store (``GET /api/usage``),
so an HTTP store neither reads nor writes kept usage (a client could not be trusted to keep
figures for the team's trials); the SQL stores and their pool have these methods.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from tunescope.store.sql._heal import retrying
from tunescope.store.sql._rows import ids_in

__all__ = ["KeptUsageMixin"]


class KeptUsageMixin:
    """Kept usage for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    _tx: Any
    _q: Any
    _sql: Any

    def _touch(self, cur: Any, trial_ids: Iterable[int]) -> None:
        """Raise the data generation of these trials (in id order, so that writers touching
        several lock them in one order)."""
        for tid in sorted(set(trial_ids)):
            self._q(cur, "UPDATE trials SET data_gen = data_gen + 1 WHERE id = ?", (int(tid),))

    def _touch_series(self, cur: Any, series_ids: Sequence[int]) -> None:
        """Raise the data generation of the trials these series belong to."""
        sql = "SELECT DISTINCT trial_id FROM series WHERE id IN ({marks})"
        self._touch(cur, ids_in(self._q, cur, sql, series_ids))

    @retrying
    def kept_usage(
        self, trial_ids: Sequence[int], digest: str
    ) -> dict[int, tuple[int, str | None]]:
        """For each of these trials that exists: its data generation now, and the usage kept
        for it at that generation under ``digest`` (None when there is none: compute it, then
        hand the generation to :meth:`keep_usage`)."""
        out: dict[int, tuple[int, str | None]] = {}
        ids = sorted({int(t) for t in trial_ids})
        with self._tx() as cur:
            for i in range(0, len(ids), 500):
                part = ids[i : i + 500]
                marks = ", ".join("?" * len(part))
                for tid, gen, data in self._q(
                    cur,
                    "SELECT t.id, t.data_gen, k.data FROM trials t LEFT JOIN kept_usage k "
                    "ON k.trial_id = t.id AND k.data_gen = t.data_gen AND k.digest = ? "
                    f"WHERE t.id IN ({marks})",
                    [digest, *part],
                ).fetchall():
                    out[int(tid)] = (int(gen), None if data is None else str(data))
        return out

    @retrying
    def unkept_usage(
        self, digest: str, *, after: int = 0, limit: int = 100
    ) -> list[tuple[int, int]]:
        """Ended trials (recorded as not ``running``) with no usage kept under ``digest`` at
        their data generation now: at most ``limit`` of them, with ids above ``after``, in id
        order, each as (trial id, its data generation now: hand it to :meth:`keep_usage`).
        What compaction computes ahead of the first query."""
        with self._tx() as cur:
            return [
                (int(tid), int(gen))
                for tid, gen in self._q(
                    cur,
                    "SELECT t.id, t.data_gen FROM trials t LEFT JOIN kept_usage k "
                    "ON k.trial_id = t.id AND k.data_gen = t.data_gen AND k.digest = ? "
                    "WHERE t.state <> 'running' AND t.id > ? AND k.trial_id IS NULL "
                    "ORDER BY t.id LIMIT ?",
                    (digest, int(after), int(limit)),
                ).fetchall()
            ]

    @retrying
    def keep_usage(self, rows: Sequence[tuple[int, int, str]], digest: str) -> int:
        """Keep usage computed under ``digest``: (trial id, the data generation read before
        computing it, the figures as JSON) rows, in one transaction; a row whose trial is no
        longer at that generation is not kept. Replaces what was kept for a trial before.
        Returns how many rows were kept."""
        kept = 0
        if not rows:
            return 0
        now = time.time()
        with self._tx(write=True) as cur:
            for tid, gen, data in rows:
                kept += self._q(
                    cur,
                    "INSERT INTO kept_usage (trial_id, digest, data_gen, t, data) "
                    "SELECT id, ?, data_gen, ?, ? FROM trials WHERE id = ? AND data_gen = ? "
                    "ON CONFLICT (trial_id) DO UPDATE SET digest = excluded.digest, "
                    "data_gen = excluded.data_gen, t = excluded.t, data = excluded.data "
                    "WHERE kept_usage.data_gen <= excluded.data_gen",
                    (digest, now, data, int(tid), int(gen)),
                ).rowcount
        return kept
