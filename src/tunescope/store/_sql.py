"""SQL written once for the SQLite and PostgreSQL backends.

Backends supply a DB-API connection and a :class:`Dialect`; the SQL below uses ``?``
placeholders and only constructs both databases accept.
"""

from __future__ import annotations

import abc
import itertools
import json
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.errors import Conflict, NotFound, SchemaError, StoreError
from tunescope.store._codec import F64, MAX_DELTA_MS, encode, encode_blocks, to_stored
from tunescope.store._contract import CHUNK_SAMPLES, Store
from tunescope.store._model import Event, RunInfo, Scalar, SeriesInfo, TrialInfo
from tunescope.store._schema import MIGRATIONS, SCHEMA_VERSION

_TRIAL_COLS = (
    "id, run_id, name, params, state, host, pids, t_start, t_end, heartbeat, error, interval_s"
)


@dataclass(frozen=True)
class Dialect:
    name: str
    placeholder: str
    id_type: str
    blob_type: str
    real_type: str
    greatest: str
    floor_int: str
    """SQL for the integer floor of ``{x}`` (non-negative or clipped by the caller)."""

    def ddl(self, stmt: str) -> str:
        return stmt.format(id=self.id_type, blob=self.blob_type, real=self.real_type)


class SQLStore(Store, abc.ABC):
    """A store over a DB-API connection. Subclasses open the connection, translate driver
    errors in :meth:`_translate`, and say whether a table exists."""

    dialect: Dialect

    def __init__(self, url: str, conn: Any) -> None:
        self.url = url
        self._conn = conn
        self._lock = threading.RLock()
        self._closed = False
        # per-series write state of this writer: (last stored t, pending count)
        self._tail: dict[int, tuple[float, int]] = {}
        self._series_cache: dict[int, SeriesInfo] = {}
        self._migrate()

    # ------------------------------------------------------------------ plumbing
    @abc.abstractmethod
    def _translate(self, exc: Exception) -> StoreError | None:
        """The StoreError for a driver exception, or None if it is not the driver's."""

    @abc.abstractmethod
    def _table_names(self) -> set[str]: ...

    def _sql(self, stmt: str) -> str:
        return stmt if self.dialect.placeholder == "?" else stmt.replace("?", "%s")

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One transaction; driver errors become StoreErrors and roll everything back."""
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.url} is closed")
            cur = self._conn.cursor()
            try:
                yield cur
                self._conn.commit()
            except Exception as exc:
                try:
                    self._conn.rollback()
                except Exception:
                    pass
                mapped = self._translate(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
            finally:
                cur.close()

    def _q(self, cur: Any, stmt: str, args: Sequence[Any] = ()) -> Any:
        cur.execute(self._sql(stmt), tuple(args))
        return cur

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                for sid in list(self._tail):  # only what this writer left pending
                    self.compact(sid)
            finally:
                self._closed = True
                try:
                    self._conn.close()
                except Exception:
                    pass

    # ------------------------------------------------------------------ schema
    def _migrate(self) -> None:
        with self._tx() as cur:
            tables = self._table_names()
            if "meta" not in tables:
                if tables & {"runs", "trials", "series"} or (tables and "runs" not in tables):
                    raise SchemaError(
                        f"{self.url} is not a tunescope database (it has tables: "
                        f"{', '.join(sorted(tables))})"
                    )
                version = 0
            else:
                row = self._q(cur, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise SchemaError(
                    f"{self.url} has schema version {version}, newer than this tunescope "
                    f"understands ({SCHEMA_VERSION}); upgrade tunescope to open it"
                )
            for v in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[v]:
                    cur.execute(self.dialect.ddl(stmt))
            if version != SCHEMA_VERSION:
                if version == 0:
                    self._q(
                        cur,
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                else:
                    self._q(
                        cur,
                        "UPDATE meta SET value = ? WHERE key = 'schema_version'",
                        (str(SCHEMA_VERSION),),
                    )

    def schema_version(self) -> int:
        with self._tx() as cur:
            row = self._q(cur, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ runs
    def _run_from(self, cur: Any, row: Sequence[Any]) -> RunInfo:
        run_id, name, start = row
        trials = self._q(
            cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ?", (run_id,)
        ).fetchall()
        infos = [self._trial_from(r) for r in trials]
        states = {t.state for t in infos}
        if not infos:
            state = "empty"
        elif "running" in states:
            state = "running"
        elif "failed" in states or "lost" in states:
            state = "failed" if "failed" in states else "lost"
        else:
            state = "completed"
        ends = [t.end for t in infos]
        end = None if (not infos or None in ends) else max(e for e in ends if e is not None)
        return RunInfo(int(run_id), str(name), float(start), end, state, len(infos))

    def ensure_run(self, name: str, start: float | None = None) -> RunInfo:
        if not name or not name.strip():
            raise StoreError("a run needs a non-empty name")
        import time as _time

        with self._tx() as cur:
            row = self._q(
                cur, "SELECT id, name, t_start FROM runs WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                self._q(
                    cur,
                    "INSERT INTO runs (name, t_start) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                    (name, _time.time() if start is None else start),
                )
                row = self._q(
                    cur, "SELECT id, name, t_start FROM runs WHERE name = ?", (name,)
                ).fetchone()
            return self._run_from(cur, row)

    def get_run(self, run: int | str) -> RunInfo:
        with self._tx() as cur:
            if isinstance(run, int):
                row = self._q(
                    cur, "SELECT id, name, t_start FROM runs WHERE id = ?", (run,)
                ).fetchone()
            else:
                row = self._q(
                    cur, "SELECT id, name, t_start FROM runs WHERE name = ?", (run,)
                ).fetchone()
            if row is None:
                raise NotFound(f"no run {run!r} in {self.url}")
            return self._run_from(cur, row)

    def list_runs(self) -> list[RunInfo]:
        with self._tx() as cur:
            rows = self._q(
                cur, "SELECT id, name, t_start FROM runs ORDER BY t_start DESC, id DESC"
            ).fetchall()
            return [self._run_from(cur, r) for r in rows]

    # ------------------------------------------------------------------ trials
    def _trial_from(self, row: Sequence[Any]) -> TrialInfo:
        (tid, run_id, name, params, state, host, pids, start, end, hb, error, interval) = row
        return TrialInfo(
            int(tid),
            int(run_id),
            str(name),
            json.loads(params),
            self.derive_state(str(state), hb, float(start), float(interval)),
            str(host),
            tuple(json.loads(pids)),
            float(start),
            None if end is None else float(end),
            None if hb is None else float(hb),
            error,
            float(interval),
        )

    def create_trial(
        self,
        run_id: int,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        *,
        host: str = "",
        pids: Sequence[int] = (),
        start: float | None = None,
        interval: float = 1.0,
    ) -> TrialInfo:
        import time as _time

        try:
            params_json = json.dumps(params or {}, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"trial params must be JSON values: {exc}") from None
        t0 = _time.time() if start is None else start
        with self._tx() as cur:
            if self._q(cur, "SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise NotFound(f"no run with id {run_id} in {self.url}")
            if name is None:
                k = self._q(
                    cur, "SELECT COUNT(*) FROM trials WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                existing = {
                    r[0]
                    for r in self._q(
                        cur, "SELECT name FROM trials WHERE run_id = ?", (run_id,)
                    ).fetchall()
                }
                while f"trial-{k}" in existing:
                    k += 1
                name = f"trial-{k}"
            elif (
                self._q(
                    cur, "SELECT 1 FROM trials WHERE run_id = ? AND name = ?", (run_id, name)
                ).fetchone()
                is not None
            ):
                raise Conflict(f"run {run_id} already has a trial named {name!r}")
            row = self._q(
                cur,
                "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
                "heartbeat, interval_s) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?) "
                f"RETURNING {_TRIAL_COLS}",
                (run_id, name, params_json, host, json.dumps(list(pids)), t0, t0, interval),
            ).fetchone()
            return self._trial_from(row)

    def get_trial(self, trial_id: int) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE id = ?", (trial_id,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return self._trial_from(row)

    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur,
                f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? AND name = ?",
                (run_id, name),
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial {name!r} in run {run_id}")
        return self._trial_from(row)

    def list_trials(self, run_id: int) -> list[TrialInfo]:
        with self._tx() as cur:
            rows = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? ORDER BY id", (run_id,)
            ).fetchall()
        return [self._trial_from(r) for r in rows]

    def update_trial(
        self,
        trial_id: int,
        *,
        state: str | None = None,
        end: float | None = None,
        error: str | None = None,
        pids: Sequence[int] | None = None,
        heartbeat: float | None = None,
        only_if_running: bool = False,
        exit_code: int | None = None,
        params: dict[str, Any] | None = None,
    ) -> bool:
        sets: list[str] = []
        args: list[Any] = []
        if params is not None:
            try:
                args.append(json.dumps(params, sort_keys=True, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise StoreError(f"trial params must be JSON values: {exc}") from None
            sets.append("params = ?")
        for col, val in (
            ("state", state),
            ("t_end", end),
            ("error", error),
            ("heartbeat", heartbeat),
            ("exit_code", exit_code),
        ):
            if val is not None:
                sets.append(f"{col} = ?")
                args.append(val)
        if pids is not None:
            sets.append("pids = ?")
            args.append(json.dumps(sorted(set(pids))))
        if not sets:
            return False
        where = "id = ?" + (" AND state = 'running'" if only_if_running else "")
        with self._tx() as cur:
            n = self._q(
                cur, f"UPDATE trials SET {', '.join(sets)} WHERE {where}", (*args, trial_id)
            ).rowcount
            if n == 0 and not only_if_running:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return bool(n)

    def exit_code(self, trial_id: int) -> int | None:
        with self._tx() as cur:
            row = self._q(cur, "SELECT exit_code FROM trials WHERE id = ?", (trial_id,)).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return None if row[0] is None else int(row[0])

    # ------------------------------------------------------------------ series
    def series(
        self, trial_id: int, metric: str, device: str | None = None, note: str | None = None
    ) -> SeriesInfo:
        dev = device or ""
        with self._tx() as cur:
            row = self._q(
                cur,
                "SELECT id, note FROM series WHERE trial_id = ? AND metric = ? AND device = ?",
                (trial_id, metric, dev),
            ).fetchone()
            if row is None:
                if (
                    self._q(cur, "SELECT 1 FROM trials WHERE id = ?", (trial_id,)).fetchone()
                    is None
                ):
                    raise NotFound(f"no trial with id {trial_id} in {self.url}")
                self._q(
                    cur,
                    "INSERT INTO series (trial_id, metric, device, note) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (trial_id, metric, device) DO NOTHING",
                    (trial_id, metric, dev, note),
                )
                row = self._q(
                    cur,
                    "SELECT id, note FROM series WHERE trial_id = ? AND metric = ? AND device = ?",
                    (trial_id, metric, dev),
                ).fetchone()
            elif note is not None and row[1] is None:
                self._q(cur, "UPDATE series SET note = ? WHERE id = ?", (note, row[0]))
                row = (row[0], note)
        return SeriesInfo(int(row[0]), trial_id, metric, device or None, row[1])

    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        stmt = "SELECT id, trial_id, metric, device, note FROM series WHERE trial_id = ?"
        args: list[Any] = [trial_id]
        if metric is not None:
            stmt += " AND metric = ?"
            args.append(metric)
        with self._tx() as cur:
            rows = self._q(cur, stmt + " ORDER BY metric, device", args).fetchall()
        return [SeriesInfo(int(r[0]), int(r[1]), r[2], r[3] or None, r[4]) for r in rows]

    def _series_info(self, series_id: int) -> SeriesInfo:
        info = self._series_cache.get(series_id)
        if info is None:
            with self._tx() as cur:
                r = self._q(
                    cur,
                    "SELECT id, trial_id, metric, device, note FROM series WHERE id = ?",
                    (series_id,),
                ).fetchone()
            if r is None:
                raise NotFound(f"no series with id {series_id} in {self.url}")
            info = SeriesInfo(int(r[0]), int(r[1]), r[2], r[3] or None, r[4])
            self._series_cache[series_id] = info
        return info

    # ------------------------------------------------------------------ samples
    def _load_tail(self, cur: Any, series_id: int) -> tuple[float, int]:
        tail = self._tail.get(series_id)
        if tail is None:
            if self._q(cur, "SELECT 1 FROM series WHERE id = ?", (series_id,)).fetchone() is None:
                raise NotFound(f"no series with id {series_id} in {self.url}")
            last_chunk = self._q(
                cur, "SELECT MAX(t_last) FROM chunks WHERE series_id = ?", (series_id,)
            ).fetchone()[0]
            prow = self._q(
                cur, "SELECT MAX(t), COUNT(*) FROM pending WHERE series_id = ?", (series_id,)
            ).fetchone()
            last = max(x for x in (last_chunk, prow[0], -math.inf) if x is not None)
            tail = (float(last), int(prow[1]))
        return tail

    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        by_series: dict[int, list[tuple[float, float]]] = defaultdict(list)
        count = 0
        for sid, t, v in rows:
            if v is None or not math.isfinite(v) or not math.isfinite(t):
                raise StoreError(f"sample of series {sid} at t={t} is not a finite number: {v}")
            by_series[int(sid)].append((t, v))
            count += 1
        if not count:
            return 0
        with self._tx() as cur:
            new_tails: dict[int, tuple[float, int]] = {}
            for sid, samples in by_series.items():
                new_tails[sid] = self._append_one(cur, sid, samples)
        self._tail.update(new_tails)
        return count

    def _append_one(
        self, cur: Any, sid: int, samples: list[tuple[float, float]]
    ) -> tuple[float, int]:
        last, pending_n = self._load_tail(cur, sid)
        arr = np.asarray(samples, dtype=np.float64)
        order = np.argsort(arr[:, 0], kind="stable")
        ts, vs = to_stored(arr[order, 0], arr[order, 1])
        if ts[0] < last:
            raise StoreError(
                f"series {sid}: sample at t={ts[0]:.3f} is older than the last stored "
                f"sample (t={last:.3f}); samples are append-only"
            )
        if pending_n + len(ts) < CHUNK_SAMPLES:
            cur.executemany(
                self._sql("INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)"),
                [(sid, t, v) for t, v in zip(ts.tolist(), vs.tolist(), strict=True)],
            )
            return float(ts[-1]), pending_n + len(ts)
        if pending_n:
            pt, pv = self._pending_in(cur, sid, -math.inf, math.inf)
            ts = np.concatenate([pt, ts])
            vs = np.concatenate([pv, vs])
            self._q(cur, "DELETE FROM pending WHERE series_id = ?", (sid,))
        full = (len(ts) // CHUNK_SAMPLES) * CHUNK_SAMPLES
        self._write_chunks(cur, sid, ts[:full], vs[:full])
        rest = list(zip(ts[full:].tolist(), vs[full:].tolist(), strict=True))
        if rest:
            cur.executemany(
                self._sql("INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)"),
                [(sid, t, v) for t, v in rest],
            )
        return float(ts[-1]), len(rest)

    def _write_chunks(self, cur: Any, sid: int, ts: F64, vs: F64) -> None:
        """Write sorted samples as chunks of at most CHUNK_SAMPLES, split at long gaps."""
        if not len(ts):
            return
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

    def compact(self, series_id: int | None = None) -> None:
        with self._tx() as cur:
            if series_id is None:
                sids = [
                    int(r[0])
                    for r in self._q(cur, "SELECT DISTINCT series_id FROM pending").fetchall()
                ]
            else:
                sids = [series_id]
            for sid in sids:
                ts, vs = self._pending_in(cur, sid, -math.inf, math.inf)
                if len(ts):
                    self._write_chunks(cur, sid, ts, vs)
                    self._q(cur, "DELETE FROM pending WHERE series_id = ?", (sid,))
                if sid in self._tail:
                    self._tail[sid] = (self._tail[sid][0], 0)

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

    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        with self._tx() as cur:
            return self._pending_in(cur, series_id, start, end)

    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        args: list[Any] = [series_id]
        stmt = "SELECT id, t_first, t_last, n, vmin, vmax, vsum FROM chunks WHERE series_id = ?"
        if math.isfinite(end):
            stmt += " AND t_first <= ?"
            args.append(end)
        if math.isfinite(start):
            stmt += " AND t_last >= ?"
            args.append(start)
        with self._tx() as cur:
            return [tuple(r) for r in self._q(cur, stmt + " ORDER BY t_first", args).fetchall()]

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

    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        with self._tx() as cur:
            c = self._q(
                cur,
                "SELECT MIN(t_first), MAX(t_last), SUM(n) FROM chunks WHERE series_id = ?",
                (series_id,),
            ).fetchone()
            p = self._q(
                cur,
                "SELECT MIN(t), MAX(t), COUNT(*) FROM pending WHERE series_id = ?",
                (series_id,),
            ).fetchone()
        firsts = [x for x in (c[0], p[0]) if x is not None]
        if not firsts:
            return None
        lasts = [x for x in (c[1], p[1]) if x is not None]
        return float(min(firsts)), float(max(lasts)), int(c[2] or 0) + int(p[2] or 0)

    def disk_bytes(self) -> dict[str, int]:
        """Bytes of encoded chunk data and pending rows, for benchmarks and `tunescope runs`."""
        with self._tx() as cur:
            blob = self._q(
                cur, "SELECT COALESCE(SUM(LENGTH(data)), 0), COUNT(*) FROM chunks"
            ).fetchone()
        return {"chunk_bytes": int(blob[0]), "chunks": int(blob[1])}

    # ------------------------------------------------------------------ events
    def add_events(self, events: Iterable[Event]) -> int:
        rows = []
        spans: dict[tuple[int, str], float] = {}
        for e in events:
            data = None if e.data is None else json.dumps(e.data, allow_nan=False)
            rows.append((e.trial_id, e.kind, e.name, e.step, e.t, e.duration, e.value, data))
            if e.duration is not None:
                key = (e.trial_id, e.kind)
                spans[key] = max(spans.get(key, 0.0), float(e.duration))
        if not rows:
            return 0
        g = self.dialect.greatest
        with self._tx() as cur:
            cur.executemany(
                self._sql(
                    "INSERT INTO events (trial_id, kind, name, step, t, duration, value, data) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                rows,
            )
            for (tid, kind), dur in spans.items():
                self._q(
                    cur,
                    "INSERT INTO event_spans (trial_id, kind, max_duration) "
                    "VALUES (?, ?, ?) ON CONFLICT (trial_id, kind) DO UPDATE SET "
                    f"max_duration = {g}(event_spans.max_duration, excluded.max_duration)",
                    (tid, kind, dur),
                )
        return len(rows)

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

    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int:
        with self._tx() as cur:
            where, args = self._event_where(cur, trial_id, start, end, kinds)
            return int(
                self._q(cur, f"SELECT COUNT(*) FROM events WHERE {where}", args).fetchone()[0]
            )

    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]:
        with self._tx() as cur:
            where, args = self._event_where(cur, trial_id, start, end, kinds)
            rows = self._q(
                cur,
                "SELECT trial_id, kind, name, step, t, duration, value, data "
                f"FROM events WHERE {where} ORDER BY t, id",
                args,
            ).fetchall()
        return [
            Event(
                int(r[0]),
                r[1],
                float(r[4]),
                r[2],
                None if r[3] is None else int(r[3]),
                None if r[5] is None else float(r[5]),
                None if r[6] is None else float(r[6]),
                None if r[7] is None else json.loads(r[7]),
            )
            for r in rows
        ]

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
            where, args = self._event_where(cur, trial_id, start, end, kinds)
            rows = self._q(
                cur,
                f"SELECT kind, {b0} AS b0, {b1} AS b1, COUNT(*) FROM events WHERE {where} "
                "GROUP BY kind, b0, b1",
                [start, width, start, width, *args],
            ).fetchall()
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

    # ------------------------------------------------------------------ scalars
    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        rows = [
            (s.trial_id, s.name, s.step, s.t, float(s.value))
            for s in scalars
            if s.value is not None and math.isfinite(s.value)
        ]
        if not rows:
            return 0
        with self._tx() as cur:
            cur.executemany(
                self._sql(
                    "INSERT INTO scalars (trial_id, name, step, t, value) VALUES (?, ?, ?, ?, ?)"
                ),
                rows,
            )
        return len(rows)

    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        stmt = "SELECT trial_id, name, step, t, value FROM scalars WHERE trial_id = ?"
        args: list[Any] = [trial_id]
        if name is not None:
            stmt += " AND name = ?"
            args.append(name)
        with self._tx() as cur:
            rows = self._q(cur, stmt + " ORDER BY name, step, t, id", args).fetchall()
        return [
            Scalar(int(r[0]), r[1], None if r[2] is None else int(r[2]), float(r[3]), float(r[4]))
            for r in rows
        ]

    def scalar_names(self, trial_id: int) -> list[str]:
        with self._tx() as cur:
            rows = self._q(
                cur,
                "SELECT DISTINCT name FROM scalars WHERE trial_id = ? ORDER BY name",
                (trial_id,),
            ).fetchall()
        return [r[0] for r in rows]
