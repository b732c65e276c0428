"""The bulk of a store on ClickHouse: samples, their minute rollups, events and scalars,
written and read in SQL written once for every transport (see the package's doc for what
stays in SQL beside it).

Writes are inserts, each deduplicated by its token: the same insert sent again with the same
``token`` (a batch's id within its project) adds no row, to samples, rollups, events or
scalars; what is sent is checked first as the SQL store checks it (finite numbers within the
store's ranges), so a bad value is Rejected before anything is sent.

Reads keep the SQL store's semantics (``store/_contract.py``): times come back as the stored
milliseconds over 1000, values as float32; a window [start, end] of N points is cut into N
equal spans, sample t going to span ``min(floor((t - start) / width), N - 1)``; each bucket holds
the exact count, min, max and sum of the samples between its first and last time; spans of a
minute or more read the minute rollups for the whole minutes inside the window (each placed by
the midpoint of its first and last sample, as the SQL store places its rollup rows) and raw
samples at the two edges; a window of no more than N samples gives the samples themselves.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.errors import Rejected
from tunescope.store._checks import MAX_ABS_TIME_S, MAX_SAMPLE_VALUE, check_row
from tunescope.store._model import Bucket, Event, Scalar
from tunescope.store._rollup import LEVELS
from tunescope.store.clickhouse._ddl import migrate_last_value, schema
from tunescope.store.clickhouse._native import ARGMAX, argmax_states
from tunescope.store.clickhouse._transport import Column, Params, Transport

__all__ = ["DAY", "MINUTE", "BulkStore", "Samples"]

F64 = npt.NDArray[np.float64]
Samples = tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]
"""(series ids, times in s, values), equally long."""

MINUTE = LEVELS[-1]
"""Seconds a rollup row spans; windows whose spans are at least this long read rollups."""

DAY = 86400
"""Seconds a partition of raw samples spans (``intDiv(t, 86400000)``): what retention drops."""

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _ms_bounds(start: float, end: float) -> tuple[int, int]:
    """A range of stored milliseconds that holds every time in [start, end] (a margin wide;
    the exact test is on t / 1000, as read)."""
    lo = _I64_MIN if start == -math.inf else max(_I64_MIN, math.floor(start * 1000.0) - 1)
    hi = _I64_MAX if end == math.inf else min(_I64_MAX, math.ceil(end * 1000.0) + 1)
    return lo, hi


def _event(r: Sequence[Any]) -> Event:
    """An event from a row (trial_id, kind, t, name, step, duration, value, data, ...)."""
    return Event(
        int(r[0]),
        str(r[1]),
        float(r[2]),
        r[3],
        None if r[4] is None else int(r[4]),
        r[5],
        r[6],
        None if r[7] is None else json.loads(r[7]),
    )


def _scalar(r: Sequence[Any]) -> Scalar:
    """A scalar from a row (trial_id, name, step, t, value, ...)."""
    return Scalar(
        int(r[0]), str(r[1]), None if r[2] is None else int(r[2]), float(r[3]), float(r[4])
    )


class BulkStore:
    """Samples, rollups, events and scalars in one ClickHouse database, through ``transport``
    (whose tables are created where missing unless ``create`` is False). Thread-safe as its
    transport is."""

    def __init__(self, transport: Transport, *, create: bool = True) -> None:
        self.transport = transport
        self.url = transport.url
        db = transport.database
        self._t = {name: f"{db}.{name}" for name in ("samples", "minutes", "events", "scalars")}
        self._insert_settings: dict[str, Any] = {}
        if transport.cluster:
            # the Distributed table forwards each shard's rows before the insert returns, with
            # the token: a retry reaches the same shards and is deduplicated there
            self._insert_settings["insert_distributed_sync"] = 1
        if create:
            self._migrate()  # first: the view's statement checks its columns even if it exists
            for stmt in schema(db, transport.cluster):
                transport.command(stmt)

    def _migrate(self) -> None:
        """Add the minute rollups' last value to a database made before it (see
        :func:`~tunescope.store.clickhouse.migrate_last_value`)."""
        rows = self.transport.query(
            "SELECT count(), countIf(name = 'vlast') FROM system.columns "
            "WHERE database = {db:String} AND table = {table:String}",
            {"db": self.transport.database, "table": self._local("minutes")},
        )
        if int(rows[0][0]) and not int(rows[0][1]):
            for stmt in migrate_last_value(self.transport.database, self.transport.cluster):
                self.transport.command(stmt)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> BulkStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def _settings(self, token: str | None) -> dict[str, Any]:
        out = dict(self._insert_settings)
        if token is not None:
            out["insert_deduplication_token"] = token
        return out

    def insert_samples(
        self,
        series_ids: npt.ArrayLike,
        ts: npt.ArrayLike,
        values: npt.ArrayLike,
        *,
        token: str | None = None,
    ) -> int:
        """Insert samples (series id, time in s, value) as one insert; returns how many were
        sent. Rejected, with nothing sent, when one is not a finite number within the store's
        ranges or names no series id (a positive integer)."""
        sid = np.asarray(series_ids)
        t = np.asarray(ts, dtype=np.float64)
        v = np.asarray(values, dtype=np.float64)
        if not (sid.shape == t.shape == v.shape and sid.ndim == 1):
            raise Rejected("samples need equally long series ids, times and values")
        if not len(t):
            return 0
        if not np.issubdtype(sid.dtype, np.integer):
            raise Rejected("series ids must be integers")
        if not np.all(sid > 0):
            raise Rejected(f"series id {int(sid[np.argmin(sid > 0)])} is not a positive integer")
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(t) & np.isfinite(v) & (np.abs(t) <= MAX_ABS_TIME_S)
            ok &= np.abs(v) <= MAX_SAMPLE_VALUE
        if not ok.all():
            i = int(np.argmin(ok))
            raise Rejected(check_row(int(sid[i]), float(t[i]), float(v[i])) or "a bad sample")
        self.transport.insert(
            "samples",
            [
                Column("series_id", "UInt64", sid.astype(np.uint64)),
                Column("t", "Int64", np.round(t * 1000.0).astype(np.int64)),
                Column("value", "Float32", v.astype(np.float32)),
            ],
            self._settings(token),
        )
        return len(t)

    def append_samples(
        self, rows: Iterable[tuple[int, float, float]], *, token: str | None = None
    ) -> int:
        """:meth:`insert_samples` of ``(series_id, t, value)`` rows, as
        :meth:`~tunescope.store.Store.append_samples` takes them."""
        listed = list(rows)
        if not listed:
            return 0
        try:
            arr = np.asarray(listed, dtype=object)
            sid = np.asarray([int(r[0]) for r in listed], dtype=np.int64)
            t = np.asarray(arr[:, 1], dtype=np.float64)
            v = np.asarray(arr[:, 2], dtype=np.float64)
        except (TypeError, ValueError, IndexError, OverflowError) as exc:
            raise Rejected(f"samples must be (series id, time, value) numbers: {exc}") from None
        return self.insert_samples(sid, t, v, token=token)

    def insert_events(
        self, events: Sequence[Event], *, token: str | None = None, seq: int | None = None
    ) -> int:
        """Insert events as one insert; returns the count. Events at one time read back in the
        order of ``seq`` (default: the time of the insert in ns), then of the sequence."""
        if not events:
            return 0
        base = time.time_ns() if seq is None else seq
        try:
            data = [None if e.data is None else json.dumps(e.data, allow_nan=False) for e in events]
        except (TypeError, ValueError) as exc:
            raise Rejected(f"event data must be JSON values: {exc}") from None
        for e in events:
            for x in (e.t, e.duration, e.value):
                if x is not None and not math.isfinite(x):
                    raise Rejected(f"event {e.kind} at t={e.t}: {x} is not a finite number")
        self.transport.insert(
            "events",
            [
                Column("trial_id", "UInt64", np.asarray([e.trial_id for e in events], np.uint64)),
                Column("t", "Float64", np.asarray([e.t for e in events], np.float64)),
                Column("seq", "UInt64", np.arange(base, base + len(events), dtype=np.uint64)),
                Column("kind", "String", [e.kind for e in events]),
                Column("name", "Nullable(String)", [e.name for e in events]),
                Column("step", "Nullable(Int64)", [e.step for e in events]),
                Column("duration", "Nullable(Float64)", [e.duration for e in events]),
                Column("value", "Nullable(Float64)", [e.value for e in events]),
                Column("data", "Nullable(String)", data),
            ],
            self._settings(token),
        )
        return len(events)

    def insert_scalars(
        self, scalars: Sequence[Scalar], *, token: str | None = None, seq: int | None = None
    ) -> int:
        """Insert scalars as one insert; returns the count (``seq`` as for events)."""
        if not scalars:
            return 0
        for s in scalars:
            if not (math.isfinite(s.t) and math.isfinite(s.value)):
                raise Rejected(f"scalar {s.name} at t={s.t}: {s.value} is not a finite number")
        base = time.time_ns() if seq is None else seq
        self.transport.insert(
            "scalars",
            [
                Column("trial_id", "UInt64", np.asarray([s.trial_id for s in scalars], np.uint64)),
                Column("name", "String", [s.name for s in scalars]),
                Column("seq", "UInt64", np.arange(base, base + len(scalars), dtype=np.uint64)),
                Column("step", "Nullable(Int64)", [s.step for s in scalars]),
                Column("t", "Float64", np.asarray([s.t for s in scalars], np.float64)),
                Column("value", "Float64", np.asarray([s.value for s in scalars], np.float64)),
            ],
            self._settings(token),
        )
        return len(scalars)

    # ------------------------------------------------------------------ samples
    def _columns(self, sql: str, params: Params) -> list[npt.NDArray[Any]]:
        get = getattr(self.transport, "columns", None)
        if get is not None:
            cols: list[npt.NDArray[Any]] = get(sql, params)
            return cols
        rows = self.transport.query(sql, params)
        return [np.asarray(c) for c in zip(*rows, strict=True)] if rows else []

    def read_samples(
        self, series_id: int, start: float = -math.inf, end: float = math.inf
    ) -> tuple[F64, F64]:
        """Every sample of the series with start <= t <= end, sorted by time."""
        start, end = float(start), float(end)
        lo, hi = _ms_bounds(start, end)
        cols = self._columns(
            f"SELECT t, value FROM {self._t['samples']} WHERE series_id = {{sid:UInt64}} "
            "AND t >= {lo:Int64} AND t <= {hi:Int64} ORDER BY t",
            {"sid": int(series_id), "lo": lo, "hi": hi},
        )
        if not cols or not len(cols[0]):
            return np.empty(0), np.empty(0)
        t = cols[0].astype(np.int64) / 1000.0
        v = cols[1].astype(np.float32).astype(np.float64)
        keep = (t >= start) & (t <= end)
        return t[keep], v[keep]

    def window(
        self,
        series_id: int,
        start: float,
        end: float,
        points: int,
        *,
        raw_from: float | None = None,
    ) -> tuple[list[Bucket] | None, list[tuple[float, float]] | None]:
        """(buckets, None), or (None, samples) when the window holds no more than ``points``
        samples: :meth:`~tunescope.store.Store.window`'s two answers (see the module doc).

        ``raw_from``: the time before which the series' raw samples were dropped (the SQL
        store's ``raw_from``, see :meth:`raw_days_before`). Before it the minute rows stand in
        for them, as on the SQL stores: a minute row goes in whole when the midpoint of its
        samples lies inside [start, end], else not at all, and the window returns buckets even
        when it holds fewer samples than ``points``."""
        start, end, points = float(start), float(end), int(points)
        if points < 1:
            raise ValueError("points must be at least 1")
        if not (math.isfinite(start) and math.isfinite(end)) or not end > start:
            raise ValueError("a window needs finite start < end")
        width = (end - start) / points
        params: dict[str, Any] = {
            "sid": int(series_id),
            "start": start,
            "end": end,
            "width": width,
            "last": points - 1,
        }
        minute_rows = (
            "SELECT (min(t_first) / 1000 + max(t_last) / 1000) / 2 AS mid, "
            "min(t_first) AS t0, max(t_last) AS t1, sum(n) AS n, min(vmin) AS lo, "
            f"max(vmax) AS hi, sum(vsum) AS s FROM {self._t['minutes']} "
            "WHERE series_id = {sid:UInt64} AND "
        )
        pieces = []
        dropped = raw_from is not None and raw_from > start
        first_raw = start  # where raw samples are read from
        if dropped:
            assert raw_from is not None
            cut = math.ceil(raw_from / MINUTE)  # the first minute whose raw samples are kept
            params.update(o0=math.floor(start / MINUTE), o1=min(cut, math.floor(end / MINUTE) + 1))
            pieces.append(
                minute_rows + "minute >= {o0:Int64} AND minute < {o1:Int64} GROUP BY minute "
                "HAVING mid >= {start:Float64} AND mid <= {end:Float64}"
            )
            first_raw = max(start, cut * MINUTE)
        if first_raw <= end:
            a = math.ceil(first_raw / MINUTE) * MINUTE
            b = math.floor(end / MINUTE) * MINUTE
            lo, hi = _ms_bounds(first_raw, end)
            params.update(first=first_raw, lo=lo, hi=hi)
            raw = (
                "SELECT t / 1000 AS mid, t AS t0, t AS t1, toUInt64(1) AS n, value AS lo, "
                f"value AS hi, toFloat64(value) AS s FROM {self._t['samples']} "
                "WHERE series_id = {sid:UInt64} AND "
            )
            if width >= MINUTE and a < b:
                params.update(a=a * 1000, b=b * 1000, m0=a // MINUTE, m1=b // MINUTE)
                pieces.append(
                    minute_rows + "minute >= {m0:Int64} AND minute < {m1:Int64} GROUP BY minute"
                )
                pieces.append(
                    raw + "((t >= {lo:Int64} AND t < {a:Int64} AND t / 1000 >= {first:Float64}) "
                    "OR (t >= {b:Int64} AND t <= {hi:Int64} AND t / 1000 <= {end:Float64}))"
                )
            else:
                pieces.append(
                    raw + "t >= {lo:Int64} AND t <= {hi:Int64} "
                    "AND t / 1000 >= {first:Float64} AND t / 1000 <= {end:Float64}"
                )
        bucket = "least(toInt64(floor((mid - {start:Float64}) / {width:Float64})), {last:Int64})"
        rows = self.transport.query(
            f"SELECT {bucket} AS b, min(t0), max(t1), sum(n), min(lo), max(hi), sum(s) "
            f"FROM ({' UNION ALL '.join(pieces)}) GROUP BY b ORDER BY b",
            params,
        )
        if not dropped and sum(int(r[3]) for r in rows) <= points:
            ts, vs = self.read_samples(series_id, start, end)
            return None, list(zip(ts.tolist(), vs.tolist(), strict=True))
        return [
            Bucket(t0 / 1000.0, t1 / 1000.0, int(n), float(vmin), float(vmax), float(s) / int(n))
            for _, t0, t1, n, vmin, vmax, s in rows
        ], None

    def latest(self, series_ids: Sequence[int]) -> dict[int, tuple[float, float]]:
        """The newest sample ``(t, value)`` of each series that has one, from its newest minute
        row (its last time and last value): whether or not its raw samples were dropped. Its
        cost grows with the series' minutes, never with their samples."""
        if not series_ids:
            return {}
        newest = self.transport.query(
            f"SELECT series_id, max(minute) FROM {self._t['minutes']} "
            "WHERE series_id IN {ids:Array(UInt64)} GROUP BY series_id",
            {"ids": [int(s) for s in series_ids]},
        )
        if not newest:
            return {}
        params: dict[str, Any] = {}
        terms = []
        for i, (sid, minute) in enumerate(newest):
            params[f"s{i}"], params[f"m{i}"] = int(sid), int(minute)
            terms.append(f"(series_id = {{s{i}:UInt64}} AND minute = {{m{i}:Int64}})")
        # the minute's rows not merged yet merge here: the newest time, its value
        rows = self.transport.query(
            f"SELECT series_id, max(t_last), argMaxMerge(vlast) FROM {self._t['minutes']} "
            f"WHERE {' OR '.join(terms)} GROUP BY series_id",
            params,
        )
        return {int(s): (int(t) / 1000.0, float(v)) for s, t, v in rows}

    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        """(first t, last t, sample count) of a series, from its rollups; None when it has no
        sample."""
        rows = self.transport.query(
            f"SELECT min(t_first), max(t_last), sum(n) FROM {self._t['minutes']} "
            "WHERE series_id = {sid:UInt64}",
            {"sid": int(series_id)},
        )
        if not rows or not rows[0][2]:
            return None
        first, last, n = rows[0]
        return int(first) / 1000.0, int(last) / 1000.0, int(n)

    # ------------------------------------------------------------------ events and scalars
    def _event_where(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> tuple[str, dict[str, Any]]:
        where = "trial_id = {trial:UInt64}"
        params: dict[str, Any] = {"trial": int(trial_id)}
        if end != math.inf:
            where += " AND t <= {end:Float64}"
            params["end"] = float(end)
        if start != -math.inf:
            where += " AND t + coalesce(duration, 0) >= {start:Float64}"
            params["start"] = float(start)
        if kinds:
            where += " AND kind IN {kinds:Array(String)}"
            params["kinds"] = list(kinds)
        return where, params

    def count_events(
        self,
        trial_id: int,
        start: float = -math.inf,
        end: float = math.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> int:
        """How many events (of the given kinds) overlap [start, end]."""
        where, params = self._event_where(trial_id, start, end, kinds)
        rows = self.transport.query(
            f"SELECT count() FROM {self._t['events']} WHERE {where}", params
        )
        return int(rows[0][0])

    def fetch_events(
        self,
        trial_id: int,
        start: float = -math.inf,
        end: float = math.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> list[Event]:
        """Every event (of the given kinds) whose interval overlaps [start, end], by time."""
        where, params = self._event_where(trial_id, start, end, kinds)
        rows = self.transport.query(
            "SELECT trial_id, kind, t, name, step, duration, value, data "
            f"FROM {self._t['events']} WHERE {where} ORDER BY t, seq",
            params,
        )
        return [_event(r) for r in rows]

    def bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int, int]]:
        """(kind, first bin, last bin, count) of the events overlapping [start, end], grouped
        by the bins of ``bins`` equal spans their start and end fall in (unclipped: the
        caller spreads each group over the bins it covers, as the SQL store does)."""
        where, params = self._event_where(trial_id, start, end, kinds)
        params.update(b_start=float(start), b_width=(float(end) - float(start)) / bins)
        b0 = "toInt64(floor((t - {b_start:Float64}) / {b_width:Float64}))"
        b1 = "toInt64(floor((t + coalesce(duration, 0) - {b_start:Float64}) / {b_width:Float64}))"
        rows = self.transport.query(
            f"SELECT kind, {b0} AS b0, {b1} AS b1, count() FROM {self._t['events']} "
            f"WHERE {where} GROUP BY kind, b0, b1",
            params,
        )
        return [(str(k), int(a), int(b), int(n)) for k, a, b, n in rows]

    def event_page(
        self,
        trial_id: int,
        start: float,
        end: float,
        kinds: Sequence[str] | None,
        after: tuple[float, int] | None,
        limit: int,
    ) -> tuple[list[Event], tuple[float, int] | None]:
        """Up to ``limit`` events as :meth:`fetch_events` selects them after the key
        ``after`` ((t, seq) of the last one read; None: from the first), and the next key
        (None after the last)."""
        where, params = self._event_where(trial_id, start, end, kinds)
        if after is not None:
            where += " AND (t, seq) > ({a_t:Float64}, {a_seq:UInt64})"
            params.update(a_t=float(after[0]), a_seq=int(after[1]))
        rows = self.transport.query(
            "SELECT trial_id, kind, t, name, step, duration, value, data, seq "
            f"FROM {self._t['events']} WHERE {where} ORDER BY t, seq LIMIT {{lim:UInt64}}",
            {**params, "lim": int(limit) + 1},
        )
        more = len(rows) > limit
        rows = rows[:limit]
        key = (float(rows[-1][2]), int(rows[-1][8])) if more else None
        return [_event(r) for r in rows], key

    def scalar_page(
        self, trial_id: int, name: str | None, after: tuple[str, int, float, int] | None, limit: int
    ) -> tuple[list[Scalar], tuple[str, int, float, int] | None]:
        """Up to ``limit`` scalars in :meth:`scalars`' order after the key ``after`` ((name,
        step or the smallest Int64, t, seq) of the last one read), and the next key."""
        step = f"coalesce(step, {_I64_MIN})"
        where = "trial_id = {trial:UInt64}"
        params: dict[str, Any] = {"trial": int(trial_id), "lim": int(limit) + 1}
        if name is not None:
            where += " AND name = {name:String}"
            params["name"] = name
        if after is not None:
            where += (
                f" AND (name, {step}, t, seq) > "
                "({a_name:String}, {a_step:Int64}, {a_t:Float64}, {a_seq:UInt64})"
            )
            params.update(a_name=after[0], a_step=int(after[1]), a_t=float(after[2]))
            params["a_seq"] = int(after[3])
        rows = self.transport.query(
            f"SELECT trial_id, name, step, t, value, {step}, seq FROM {self._t['scalars']} "
            f"WHERE {where} ORDER BY name, {step}, t, seq LIMIT {{lim:UInt64}}",
            params,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        key = None
        if more and rows:
            last = rows[-1]
            key = (str(last[1]), int(last[5]), float(last[3]), int(last[6]))
        return [_scalar(r) for r in rows], key

    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        """The trial's scalars (of one name or all) ordered by name, step (none first), time."""
        where = "trial_id = {trial:UInt64}"
        params: dict[str, Any] = {"trial": int(trial_id)}
        if name is not None:
            where += " AND name = {name:String}"
            params["name"] = name
        rows = self.transport.query(
            f"SELECT trial_id, name, step, t, value FROM {self._t['scalars']} WHERE {where} "
            "ORDER BY name, step NULLS FIRST, t, seq",
            params,
        )
        return [_scalar(r) for r in rows]

    def scalar_names(self, trial_id: int) -> list[str]:
        """Names of the trial's scalars, sorted."""
        rows = self.transport.query(
            f"SELECT DISTINCT name FROM {self._t['scalars']} WHERE trial_id = {{trial:UInt64}} "
            "ORDER BY name",
            {"trial": int(trial_id)},
        )
        return [str(r[0]) for r in rows]

    # ------------------------------------------------------------------ raw retention
    def raw_days_before(self, cutoff: float) -> tuple[list[str], dict[int, int]]:
        """The daily partitions of raw samples wholly before ``cutoff`` (a time in s on a
        day's start, UTC), by id (the day's number since the epoch), and how many of their
        samples each series has. Samples of the epoch's first day (and before) are never
        counted: their partition reaches back before 1970."""
        rows = self.transport.query(
            "SELECT series_id, count(), groupUniqArray(toString(intDiv(t, {day:Int64}))) "
            f"FROM {self._t['samples']} WHERE t >= {{day:Int64}} AND t < {{cut:Int64}} "
            "GROUP BY series_id",
            {"day": DAY * 1000, "cut": int(cutoff) * 1000},
        )
        days: set[str] = set()
        for r in rows:
            days.update(str(d) for d in r[2])
        return sorted(days, key=int), {int(r[0]): int(r[1]) for r in rows}

    def partition_bytes(self, days: Sequence[str]) -> int:
        """Bytes on disk of these daily partitions of raw samples (on a cluster, on the
        node asked)."""
        if not days:
            return 0
        rows = self.transport.query(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} "
            "AND table = {table:String} AND active AND partition_id IN {days:Array(String)}",
            {"db": self.transport.database, "table": self._local("samples"), "days": list(days)},
        )
        return int(rows[0][0] or 0) if rows else 0

    def drop_days(self, days: Sequence[str]) -> None:
        """Drop these daily partitions of raw samples (on a cluster, on every replica of
        every shard); their minute rollups stay."""
        on = f" ON CLUSTER {self.transport.cluster}" if self.transport.cluster else ""
        table = f"{self.transport.database}.{self._local('samples')}"
        for day in days:
            self.transport.command(f"ALTER TABLE {table}{on} DROP PARTITION ID '{int(day)}'")

    def series_with_minutes(self, first: float, end: float) -> list[int]:
        """The series with minute rollups between ``first`` and ``end`` (times in s)."""
        rows = self.transport.query(
            f"SELECT DISTINCT series_id FROM {self._t['minutes']} "
            "WHERE minute >= {m0:Int64} AND minute < {m1:Int64}",
            {"m0": math.floor(first / MINUTE), "m1": math.ceil(end / MINUTE)},
        )
        return sorted(int(r[0]) for r in rows)

    def minute_rows(self, series_id: int, lo: float, hi: float, limit: int | None = None) -> F64:
        """The series' minute rows with lo <= t < hi (finite times in s), merged, by time,
        the first ``limit`` of them (None: all): a (k, 8) array of (t, n, min, max, sum,
        first time, last time, last value), as the SQL stores'
        :meth:`~tunescope.store.sql._retention.RollupsMixin.minute_rows`. A minute with no
        sample (a last value added alone, see
        :func:`~tunescope.store.clickhouse.migrate_last_value`) is none."""
        rows = self.transport.query(
            "SELECT minute, sum(n), min(vmin), max(vmax), sum(vsum), min(t_first), max(t_last), "
            f"argMaxMerge(vlast) FROM {self._t['minutes']} WHERE series_id = {{sid:UInt64}} "
            "AND minute >= {m0:Int64} AND minute < {m1:Int64} GROUP BY minute "
            "HAVING sum(n) > 0 ORDER BY minute" + ("" if limit is None else f" LIMIT {int(limit)}"),
            {"sid": int(series_id), "m0": math.floor(lo / MINUTE), "m1": math.ceil(hi / MINUTE)},
        )
        out = np.asarray(rows, dtype=np.float64).reshape(-1, 8)
        out[:, 0] *= MINUTE
        out[:, 5:7] /= 1000.0
        return out

    def insert_minutes(self, series_id: int, rows: F64, *, token: str | None = None) -> int:
        """Insert minute rows (as :meth:`minute_rows` returns them) of one series as one
        insert, deduplicated by ``token``; returns how many were sent. The table merges them
        with any rows of the same minutes."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 8)
        if not len(rows):
            return 0
        t_last = np.round(rows[:, 6] * 1000.0).astype(np.int64)
        self.transport.insert(
            "minutes",
            [
                Column("series_id", "UInt64", np.full(len(rows), int(series_id), np.uint64)),
                Column("minute", "Int64", (rows[:, 0] // MINUTE).astype(np.int64)),
                Column("n", "UInt64", rows[:, 1].astype(np.uint64)),
                Column("vmin", "Float32", rows[:, 2].astype(np.float32)),
                Column("vmax", "Float32", rows[:, 3].astype(np.float32)),
                Column("vsum", "Float64", rows[:, 4]),
                Column("t_first", "Int64", np.round(rows[:, 5] * 1000.0).astype(np.int64)),
                Column("t_last", "Int64", t_last),
                Column("vlast", ARGMAX, argmax_states(rows[:, 7], t_last)),
            ],
            self._settings(token),
        )
        return len(rows)

    def _local(self, table: str) -> str:
        """The table that holds the rows (on a cluster, each node's ``*_local``)."""
        return f"{table}_local" if self.transport.cluster else table

    # ------------------------------------------------------------------ upkeep
    def optimize(self) -> None:
        """Merge every table's parts into one per partition (as the server does in time): what
        a measure of bytes on disk waits for."""
        for table in self._t.values():
            self.transport.command(f"OPTIMIZE TABLE {table} FINAL")

    def disk_bytes(self) -> dict[str, tuple[int, int]]:
        """(bytes on disk, rows) of each table's active parts, by table."""
        rows = self.transport.query(
            "SELECT table, sum(bytes_on_disk), sum(rows) FROM system.parts "
            "WHERE database = {db:String} AND active GROUP BY table",
            {"db": self.transport.database},
        )
        return {str(t): (int(b), int(n)) for t, b, n in rows}
