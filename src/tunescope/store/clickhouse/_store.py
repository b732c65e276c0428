"""A store on ClickHouse (issue 23): the store contract kept by a SQL store for the metadata
(the SQLite file or PostgreSQL database the URL's ``meta`` names) and :class:`BulkStore` for
what grows with time (samples and their minute rollups, events, scalars); see the package's doc
for why the split.

:class:`ClickHouseBulk` is a mixin put before the SQL store's class: every metadata method is
the SQL store's own, and the bulk methods go to ClickHouse. A write crosses both databases in
three steps, so that a crash anywhere loses nothing and duplicates nothing:

1. SQL transaction: the trial and series are found or created and the batch id recorded as
   *pending* with its digest (its digest prefixed by :data:`PENDING`). A batch recorded done
   with the same content is a resend: its trial is returned; other content is a Conflict.
2. ClickHouse: the samples, events and scalars inserted, each insert with the token
   ``PROJECT:BATCH_ID:TABLE``, so that sending them again adds nothing (within the tables'
   :data:`~tunescope.store.clickhouse.DEDUP_WINDOW` inserts).
3. SQL transaction: the batch marked done (its digest alone), the trial's changes applied
   (heartbeat, end, pids, where) and its data generation raised, which kept usage reads.

A writer that dies after 2 sends the batch again (its spool keeps it until a write returns):
step 1 finds it pending with the same digest, step 2 adds no row, step 3 completes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tunescope.errors import Conflict, NotFound, Rejected
from tunescope.store._checks import check_row
from tunescope.store._codec import F64
from tunescope.store._contract import Store, _Summary
from tunescope.store._model import Event, Scalar, SeriesInfo, Window
from tunescope.store._rollup import check_minute_rows
from tunescope.store.clickhouse import _url
from tunescope.store.clickhouse._bulk import DAY, BulkStore
from tunescope.store.produce._batch import Batch
from tunescope.store.sql._events import spread_bins
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._pages import EventKey, ScalarKey
from tunescope.store.sql._retention import RetentionReport
from tunescope.store.sql._rows import ids_in, sql_int
from tunescope.store.sql._sqlite import SQLiteStore
from tunescope.store.sql._write import batch_digest

__all__ = ["PENDING", "ClickHouseBulk", "ClickHouseSQLiteStore", "open_clickhouse"]

PENDING = "pending:"
"""Prefix of the digest a batch id is recorded with while its bulk is being inserted."""


class ClickHouseBulk:
    """The bulk methods of a store on ClickHouse, before a SQL store's class in the MRO."""

    bulk: BulkStore
    # provided by SQLStore
    url: str
    _lock: Any
    _tx: Any
    _q: Any
    _claim_batch: Any
    _batch_series: Any
    _finish_batch: Any
    _touch_series: Any
    _series_info: Any
    _sql: Any
    _rollup_state: Any
    list_series: Any
    owner: Any

    def __init__(self, *args: Any, bulk: BulkStore, shown: str, **kwargs: Any) -> None:
        self.bulk = bulk
        super().__init__(*args, **kwargs)
        self.url = shown
        """The ClickHouse URL as every message shows it (its metadata store's redacted)."""

    def close(self) -> None:
        try:
            super().close()  # type: ignore[misc]
        finally:
            self.bulk.close()

    # ------------------------------------------------------------------ batches
    @retrying
    def write(self, batch: Batch) -> int:
        digest = batch_digest(batch)
        _check_json(batch)
        with self._lock:
            with self._tx(write=True) as cur:  # 1: trial, series, the batch id pending
                tid, was = self._claim_batch(cur, batch, PENDING + digest)
                if was is not None and was != PENDING + digest:
                    if was and was != digest:
                        raise Conflict(f"batch {batch.id!r} was written before with other content")
                    return int(tid)
                by_series = self._batch_series(cur, tid, batch)
            token = f"{self.owner(trial=tid)}:{batch.id}"
            sids = [sid for sid, rows in by_series.items() for _ in rows]
            tv = np.asarray([r for rows in by_series.values() for r in rows], np.float64)
            if len(sids):  # 2: the bulk, each insert deduplicated by its token
                self.bulk.insert_samples(
                    np.asarray(sids, np.int64), tv[:, 0], tv[:, 1], token=f"{token}:samples"
                )
            events = [Event(tid, *row) for row in batch.events]
            self.bulk.insert_events(events, token=f"{token}:events")
            self.bulk.insert_scalars(_finite(tid, batch.scalars), token=f"{token}:scalars")
            with self._tx(write=True) as cur:  # 3: done, the trial's changes
                self._q(
                    cur,
                    "UPDATE batches SET digest = ? WHERE trial_id = ? AND id = ?",
                    (digest, tid, batch.id),
                )
                self._finish_batch(cur, tid, batch)
            return int(tid)

    # ------------------------------------------------------------------ samples
    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        sids: list[int] = []
        tv: list[tuple[float, float]] = []
        for sid, t, v in rows:
            problem = check_row(sid, t, v)
            if problem is not None:
                raise Rejected(problem)
            sids.append(sql_int(int(sid)))
            tv.append((t, v))
        if not sids:
            return 0
        known = sorted(set(sids))
        self._check_series(known)
        arr = np.asarray(tv, dtype=np.float64)
        n = self.bulk.insert_samples(np.asarray(sids, np.int64), arr[:, 0], arr[:, 1])
        self._touched(known)
        return n

    @retrying
    def _check_series(self, sids: Sequence[int]) -> None:
        with self._tx() as cur:
            found = ids_in(self._q, cur, "SELECT id FROM series WHERE id IN ({marks})", sids)
        missing = [s for s in sids if s not in found]
        if missing:
            raise NotFound(f"no series with id {missing[0]} in {self.url}")

    @retrying
    def _touched(self, sids: Sequence[int]) -> None:
        """Raise the data generation of the series' trials, once their samples are in."""
        with self._lock, self._tx(write=True) as cur:
            self._touch_series(cur, sids)

    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        return self.bulk.read_samples(series_id, start, end)

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        if points < 1:
            raise ValueError("points must be at least 1")
        if not end > start:
            raise ValueError("a window needs end > start")
        info = self._series_info(series_id)
        raw_from = self._rollup_state(series_id)[1]
        buckets, samples = self.bulk.window(series_id, start, end, points, raw_from=raw_from)
        return Window(info, start, end, buckets=buckets, samples=samples)

    def latest(self, trial_id: int) -> list[tuple[SeriesInfo, float, float]]:
        series = self.list_series(trial_id)
        newest = self.bulk.latest([s.id for s in series])
        return [(s, *newest[s.id]) for s in series if s.id in newest]

    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        return self.bulk.series_extent(series_id)

    def compact(self, series_id: int | None = None) -> None:
        """Nothing to pack: ClickHouse merges its parts itself."""

    def _with_pending(self, sids: Sequence[int]) -> list[int]:
        return []

    def corrupt_series(self) -> list[tuple[SeriesInfo, int]]:
        """None: ClickHouse checks its parts' checksums itself."""
        return []

    # The contract's chunk primitives, for a client that reads a server's store through
    # them (an HTTP store): no chunks, every sample as a pending one.
    def _chunk_summaries(self, series_id: int, start: float, end: float) -> list[_Summary]:
        return []

    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        return {}

    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        return self.bulk.read_samples(series_id, start, end)

    # ------------------------------------------------------------------ raw retention
    def drop_raw(self, before: float, *, dry_run: bool = False) -> RetentionReport:
        """Drop the daily partitions of raw samples that ended by ``before`` rounded down to
        the day's start (UTC): the samples of the day ``before`` falls in stay, so a store on
        ClickHouse keeps up to a day more raw than asked, never less; the minute rollups stay
        whole. ``dry_run``: change nothing, say what would go.

        The series that lose samples are noted first (their ``raw_from``, in the SQL store, on
        the cutoff; their trials' data generation raised), then the partitions dropped: a
        reader in between reads the minute rows where raw samples still are, never raw
        samples that are gone. A sample that reached those days meanwhile (a spool replayed
        late) goes with them, its series noted after (its minute rows hold it)."""
        cutoff = float(math.floor(before / DAY) * DAY)
        days, counts = self.bulk.raw_days_before(cutoff)
        report = RetentionReport(
            cutoff,
            len(days),
            sum(counts.values()),
            self.bulk.partition_bytes(days),
            len(counts),
            0,  # the minute rollups are kept by the view, in every insert: none to catch up
            dry_run,
            unit="days of raw samples",
        )
        if dry_run or not days:
            return report
        self._note_raw_from(sorted(counts), cutoff)
        self.bulk.drop_days(days)
        late = self.bulk.series_with_minutes(int(days[0]) * DAY, cutoff)
        self._note_raw_from([sid for sid in late if sid not in counts], cutoff)
        return report

    @retrying
    def _note_raw_from(self, sids: Sequence[int], cutoff: float) -> None:
        """Note ``cutoff`` as the time before which these series have no raw sample (where
        it is later than what was noted), raising their trials' data generation."""
        if not sids:
            return
        with self._lock, self._tx(write=True) as cur:
            behind = sorted(
                ids_in(
                    self._q,
                    cur,
                    "SELECT id FROM series WHERE id IN ({marks}) "
                    f"AND (raw_from IS NULL OR raw_from < {cutoff!r})",
                    sids,
                )
            )
            cur.executemany(
                self._sql("UPDATE series SET raw_from = ? WHERE id = ?"),
                [(cutoff, sid) for sid in behind],
            )
            self._touch_series(cur, behind)  # what was raw is read from the rollups now

    def minute_rows(self, series_id: int, lo: float, hi: float, limit: int | None = None) -> F64:
        """The series' minute rows with lo <= t < hi, merged, by time, the first ``limit``
        (see the SQL stores' :meth:`~tunescope.store.sql._retention.RollupsMixin.minute_rows`)."""
        return self.bulk.minute_rows(series_id, lo, hi, limit)

    def put_minute_rows(
        self, series_id: int, lo: float, hi: float, rows: F64, raw_from: float
    ) -> None:
        """Add ``rows`` as the series' minute rows of [lo, hi), a span before ``raw_from``,
        which becomes the series' ``raw_from`` (where it is later than the one noted): the
        rows of a series whose raw samples before it were dropped, as ``tunescope migrate``
        copies them. One insert, deduplicated by a token made of the series and the span:
        sent again with the same rows (a copy run again), adds nothing. ValueError for rows
        that are not such minute rows (see
        :func:`~tunescope.store._rollup.check_minute_rows`), NotFound for an unknown series;
        either way nothing is written."""
        rows = np.asarray(rows, dtype=np.float64)
        check_minute_rows(rows, lo, hi, raw_from)
        sid = int(series_id)
        self._series_info(sid)  # NotFound for an unknown series, before anything is sent
        self.bulk.insert_minutes(sid, rows, token=f"minutes:{sid}:{int(lo)}:{int(hi)}")
        self._note_raw_from([sid], raw_from)

    def trials_with_raw_before(self, before: float) -> list[int]:
        """Trials whose raw samples :meth:`drop_raw` would drop, in part or all."""
        _, counts = self.bulk.raw_days_before(float(math.floor(before / DAY) * DAY))
        return self._trials_of(sorted(counts))

    @retrying
    def _trials_of(self, sids: Sequence[int]) -> list[int]:
        with self._tx() as cur:
            sql = "SELECT DISTINCT trial_id FROM series WHERE id IN ({marks})"
            return sorted(ids_in(self._q, cur, sql, sids))

    # ------------------------------------------------------------------ events, scalars
    def add_events(self, events: Iterable[Event]) -> int:
        return self.bulk.insert_events(list(events))

    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int:
        return self.bulk.count_events(sql_int(trial_id), start, end, kinds=kinds)

    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]:
        return self.bulk.fetch_events(sql_int(trial_id), start, end, kinds=kinds)

    def _bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int]]:
        return spread_bins(self.bulk.bin_events(sql_int(trial_id), start, end, kinds, bins), bins)

    def event_page(
        self,
        trial_id: int,
        start: float,
        end: float,
        kinds: Sequence[str] | None,
        after: EventKey | None,
        limit: int,
    ) -> tuple[list[Event], EventKey | None]:
        return self.bulk.event_page(sql_int(trial_id), start, end, kinds, after, limit)

    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        # as the SQL store: a scalar without a finite value is left out
        kept = [s for s in scalars if s.value is not None and math.isfinite(s.value)]
        return self.bulk.insert_scalars(kept)

    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        return self.bulk.scalars(sql_int(trial_id), name)

    def scalar_names(self, trial_id: int) -> list[str]:
        return self.bulk.scalar_names(sql_int(trial_id))

    def scalar_page(
        self, trial_id: int, name: str | None, after: ScalarKey | None, limit: int
    ) -> tuple[list[Scalar], ScalarKey | None]:
        return self.bulk.scalar_page(sql_int(trial_id), name, after, limit)


def _finite(tid: int, rows: Iterable[tuple[str, int | None, float, float | None]]) -> list[Scalar]:
    return [
        Scalar(tid, name, step, t, float(value))
        for name, step, t, value in rows
        if value is not None and math.isfinite(value)
    ]


def _check_json(batch: Batch) -> None:
    """Rejected, before anything is written, for what the SQL store refuses in its one
    transaction: event data or trial params that are not JSON values."""
    try:
        for *_, data in batch.events:
            if data is not None:
                json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Rejected(f"event data must be JSON values: {exc}") from None
    if batch.params is not None:
        try:
            json.dumps(batch.params, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"trial params must be JSON values: {exc}") from None


class ClickHouseSQLiteStore(ClickHouseBulk, SQLiteStore):
    """A store on ClickHouse whose metadata is in a SQLite file."""


_POSTGRES: list[type[Store]] = []


def _postgres_class() -> type[Store]:
    if not _POSTGRES:
        from tunescope.store.sql._postgres import PostgresStore

        class ClickHousePostgresStore(ClickHouseBulk, PostgresStore):
            """A store on ClickHouse whose metadata is in PostgreSQL."""

        _POSTGRES.append(ClickHousePostgresStore)
    return _POSTGRES[0]


def open_clickhouse(
    url: str,
    *,
    readonly: bool = False,
    create: bool = True,
    timeout: float | None = None,
    project: str = "default",
) -> Store:
    """The store a ClickHouse URL names (see ``_url.py``): its bulk tables created where
    missing unless ``create`` is False or ``readonly``, its metadata store opened as
    :func:`~tunescope.store.open_store` opens one."""
    from tunescope.store._url import parse
    from tunescope.store.clickhouse import connect

    target = _url.parse_url(url)
    meta = _url.meta_url(target)
    scheme, rest = parse(meta)
    transport = connect(url)
    try:
        bulk = BulkStore(transport, create=create and not readonly)
        if scheme == "sqlite":
            return ClickHouseSQLiteStore(
                rest,
                bulk=bulk,
                shown=target.url,
                readonly=readonly,
                create=create,
                timeout=timeout,
                project=project,
            )
        cls: Any = _postgres_class()
        return cls(  # type: ignore[no-any-return]
            meta,
            bulk=bulk,
            shown=target.url,
            create=create and not readonly,
            timeout=timeout,
            project=project,
        )
    except BaseException:
        transport.close()
        raise
