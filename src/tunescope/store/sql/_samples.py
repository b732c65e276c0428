"""Appending samples to a :class:`~tunescope.store.sql._sql.SQLStore`'s series and packing them
into chunks: pending rows until a chunk's worth has gathered, late samples merged into the
chunks they fall into, and :meth:`compact`.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tunescope.errors import NotFound, Rejected
from tunescope.store._checks import check_row
from tunescope.store._codec import F64, MAX_DELTA_MS, decode, encode, encode_blocks, to_stored
from tunescope.store._contract import CHUNK_SAMPLES
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._rows import ids_in
from tunescope.store.sql._rows import sql_int as _sql_int

__all__ = ["SamplesMixin"]


class SamplesMixin:
    """Appending and packing samples for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    url: str
    dialect: Any
    _lock: threading.RLock
    _written: set[int]
    _tx: Any
    _q: Any
    _sql: Any
    _pending_in: Any
    _roll_up: Any
    _touch_series: Any

    # ------------------------------------------------------------------ samples
    @retrying
    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        by_series: dict[int, list[tuple[float, float]]] = defaultdict(list)
        count = 0
        for sid, t, v in rows:
            problem = check_row(sid, t, v)
            if problem is not None:
                raise Rejected(problem)
            by_series[_sql_int(int(sid))].append((t, v))
            count += 1
        if not count:
            return 0
        with self._lock, self._tx(write=True) as cur:
            self._append(cur, by_series)
            self._touch_series(cur, sorted(by_series))
            self._written.update(by_series)
        return count

    def _append(self, cur: Any, by_series: dict[int, list[tuple[float, float]]]) -> None:
        """Append to several series in a few statements, whatever their number. The series
        rows are locked first, in id order (where the database allows other writers in at
        once), then each series' newest stored time is read inside the transaction, so
        several writers keep one series in order; samples older than it are merged in
        (:meth:`_merge`). New samples that leave a series under a chunk's worth are inserted
        as pending rows, of every series at once."""
        sids = sorted(by_series)
        if not sids:
            return
        locked: set[int] = set()
        newest: dict[int, float] = {}
        pending: dict[int, tuple[float, int]] = {}
        for i in range(0, len(sids), 500):
            part = sids[i : i + 500]
            marks = ", ".join("?" * len(part))
            locked.update(
                int(r[0])
                for r in self._q(
                    cur,
                    f"SELECT id FROM series WHERE id IN ({marks}) ORDER BY id"
                    f"{self.dialect.for_update}",
                    part,
                ).fetchall()
            )
            for sid, t_last in self._q(
                cur,
                "SELECT s.id, (SELECT c.t_last FROM chunks c WHERE c.series_id = s.id "
                f"ORDER BY c.t_first DESC LIMIT 1) FROM series s WHERE s.id IN ({marks})",
                part,
            ).fetchall():
                if t_last is not None:
                    newest[int(sid)] = float(t_last)
            for sid, t_max, n in self._q(
                cur,
                "SELECT series_id, MAX(t), COUNT(*) FROM pending "
                f"WHERE series_id IN ({marks}) GROUP BY series_id",
                part,
            ).fetchall():
                pending[int(sid)] = (float(t_max), int(n))
        missing = [sid for sid in sids if sid not in locked]
        if missing:
            raise NotFound(f"no series with id {missing[0]} in {self.url}")
        rows: list[tuple[int, float, float]] = []
        for sid in sids:
            arr = np.asarray(by_series[sid], dtype=np.float64)
            order = np.argsort(arr[:, 0], kind="stable")
            ts, vs = to_stored(arr[order, 0], arr[order, 1])
            p_last, pending_n = pending.get(sid, (-math.inf, 0))
            if ts[0] < max(newest.get(sid, -math.inf), p_last):
                self._merge(cur, sid, ts, vs)
            elif pending_n + len(ts) < CHUNK_SAMPLES:
                rows.extend(zip([sid] * len(ts), ts.tolist(), vs.tolist(), strict=True))
            else:
                if pending_n:
                    pt, pv = self._pending_in(cur, sid, -math.inf, math.inf)
                    ts = np.concatenate([pt, ts])
                    vs = np.concatenate([pv, vs])
                    self._q(cur, "DELETE FROM pending WHERE series_id = ?", (sid,))
                self._pack(cur, sid, ts, vs)
        if rows:
            cur.executemany(
                self._sql("INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)"), rows
            )

    def _pack(self, cur: Any, sid: int, ts: F64, vs: F64) -> None:
        """Write sorted samples as whole chunks, the rest as pending rows."""
        full = (len(ts) // CHUNK_SAMPLES) * CHUNK_SAMPLES
        self._write_chunks(cur, sid, ts[:full], vs[:full])
        self._insert_pending(cur, sid, ts[full:], vs[full:])

    def _insert_pending(self, cur: Any, sid: int, ts: F64, vs: F64) -> None:
        if len(ts):
            cur.executemany(
                self._sql("INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)"),
                [(sid, t, v) for t, v in zip(ts.tolist(), vs.tolist(), strict=True)],
            )

    def _merge(self, cur: Any, sid: int, ts: F64, vs: F64) -> None:
        """Merge samples older than the series' newest: every chunk that ends at or after the
        first of them, and the pending rows, are read, merged in time order (stored samples
        before new ones at equal times) and written again, so chunks never overlap."""
        rows = self._q(
            cur,
            "SELECT id, data FROM chunks WHERE series_id = ? AND t_last >= ? ORDER BY t_first",
            (sid, float(ts[0])),
        ).fetchall()
        parts_t: list[F64] = []
        parts_v: list[F64] = []
        for _cid, data in rows:
            t, v = decode(bytes(data))
            parts_t.append(t)
            parts_v.append(v)
        pt, pv = self._pending_in(cur, sid, -math.inf, math.inf)
        all_t = np.concatenate([*parts_t, pt, ts])
        all_v = np.concatenate([*parts_v, pv, vs])
        order = np.argsort(all_t, kind="stable")
        for i in range(0, len(rows), 500):
            part = [int(r[0]) for r in rows[i : i + 500]]
            self._q(cur, f"DELETE FROM chunks WHERE id IN ({', '.join('?' * len(part))})", part)
        self._q(cur, "DELETE FROM pending WHERE series_id = ?", (sid,))
        # every sample goes into chunks (none back to pending), so the rollups take exactly
        # the samples packed for the first time: the pending and the new ones
        self._write_chunks(cur, sid, all_t[order], all_v[order], roll=False)
        fresh_t = np.concatenate([pt, ts])
        fresh_v = np.concatenate([pv, vs])
        fresh = np.argsort(fresh_t, kind="stable")
        self._roll_up(cur, sid, fresh_t[fresh], fresh_v[fresh])

    def _write_chunks(self, cur: Any, sid: int, ts: F64, vs: F64, *, roll: bool = True) -> None:
        """Write sorted samples as chunks of at most CHUNK_SAMPLES, split at long gaps, and
        (``roll``: they are packed for the first time) add them to the series' rollups."""
        if not len(ts):
            return
        if roll:
            self._roll_up(cur, sid, ts, vs)
        gaps = np.flatnonzero(np.diff(np.round(ts * 1000.0)) > MAX_DELTA_MS) + 1
        cuts = sorted(set(range(0, len(ts), CHUNK_SAMPLES)) | set(gaps.tolist()))
        cuts.append(len(ts))
        rows = []
        for a, b in itertools.pairwise(cuts):
            t, v = ts[a:b], vs[a:b]
            rows.append(
                (
                    sid,
                    float(t[0]),
                    float(t[-1]),
                    b - a,
                    float(v.min()),
                    float(v.max()),
                    float(v.sum()),
                    encode(t, v),
                    encode_blocks(t, v),
                )
            )
        cur.executemany(
            self._sql(
                "INSERT INTO chunks (series_id, t_first, t_last, n, vmin, vmax, vsum, data, "
                "blocks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            rows,
        )

    @retrying
    def _with_pending(self, sids: Sequence[int]) -> list[int]:
        """Those of ``sids`` with pending samples (a long-lived writer, a server's store, may
        have written to many series, most of them packed since)."""
        found: set[int] = set()
        if sids:
            with self._tx() as cur:
                found = ids_in(
                    self._q,
                    cur,
                    "SELECT DISTINCT series_id FROM pending WHERE series_id IN ({marks})",
                    sids,
                )
        return sorted(found)

    def compact(self, series_id: int | None = None) -> None:
        self._compact(series_id)
        with self._lock:  # packed: close() need not (a server's store lives for months)
            if series_id is None:
                self._written.clear()
            else:
                self._written.discard(series_id)

    @retrying
    def _compact(self, series_id: int | None) -> None:
        with self._tx(write=True) as cur:
            if series_id is None:
                sids = [
                    int(r[0])
                    for r in self._q(cur, "SELECT DISTINCT series_id FROM pending").fetchall()
                ]
            else:
                sids = [_sql_int(series_id)]
            packed = []
            for sid in sorted(sids):
                # the series row is locked first, as appends lock it: a sample another writer
                # appends meanwhile is either read here or waits for the commit
                self._q(cur, f"SELECT id FROM series WHERE id = ?{self.dialect.for_update}", (sid,))
                ts, vs = self._pending_in(cur, sid, -math.inf, math.inf)
                if len(ts):
                    self._write_chunks(cur, sid, ts, vs)
                    self._q(cur, "DELETE FROM pending WHERE series_id = ?", (sid,))
                    packed.append(sid)
            # a long series is read in buckets of its chunks' summaries: packing moves them
            self._touch_series(cur, packed)
