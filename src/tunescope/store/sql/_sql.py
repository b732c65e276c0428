"""SQL written once for the SQLite and PostgreSQL backends.

Backends supply a DB-API connection and a :class:`Dialect`; the SQL below uses ``?``
placeholders and only constructs both databases accept.

Connections heal. Every call runs in one transaction (:meth:`SQLStore._tx`) on a connection
opened on demand. When the connection turns out lost before the transaction commits (the
server restarted, closed an idle session, or stopped answering), nothing of it was kept, so the
call is repeated once on a new connection; a connection lost while committing cannot tell
whether the commit happened, and the call raises :class:`~tunescope.errors.StoreUnavailable`
(batches are idempotent, so their writers simply send them again). While the server refuses
connections, new attempts wait for a growing back-off (0.1 s doubling to 1 s) and calls raise
StoreUnavailable at once in between.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import itertools
import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from tunescope._kept import Kept
from tunescope.errors import Conflict, NotFound, Rejected, SchemaError, StoreError, StoreUnavailable
from tunescope.store._checks import check_row, check_sample
from tunescope.store._codec import (
    F64,
    MAX_DELTA_MS,
    decode,
    encode,
    encode_blocks,
    stored_end,
    to_stored,
)
from tunescope.store._contract import CHUNK_SAMPLES, Store
from tunescope.store._model import Event, RunInfo, Scalar, SeriesInfo, TrialInfo, Window
from tunescope.store._rollup import LEVELS
from tunescope.store.produce._batch import Batch, EventRow, ScalarRow, TrialSpec, new_key
from tunescope.store.sql._heal import Lost, retrying
from tunescope.store.sql._kept_usage import KeptUsageMixin
from tunescope.store.sql._pages import EVENT_COLS, PagesMixin, event_from_row, scalar_from_row
from tunescope.store.sql._pages import json_or as _loads
from tunescope.store.sql._retention import RollupsMixin
from tunescope.store.sql._schema import REBUILDS, SCHEMA_VERSION, statements
from tunescope.store.sql._tokens import TokensMixin

_RUNS = "runs r JOIN projects p ON r.project_id = p.id"
_RUN_COLS = "r.id, r.name, r.t_start, p.name, r.os_user, r.host"
_SERIES_COLS = "id, trial_id, metric, device, note, host"
STORE_NOW = "{store_now}"
"""Stands in a statement for the store's own time now, epoch seconds (:attr:`Dialect.now`)."""
_TRIAL_COLS = (
    "id, run_id, name, params, state, host, pids, t_start, t_end, heartbeat, error, interval_s, "
    f"trial_key, COALESCE(t_seen, heartbeat), {STORE_NOW}"
)
"""A trial's columns, then when its last heartbeat landed and the time now, both on the
store's clock (see :meth:`Store.derive_state`)."""

CACHE_SIZE = 50_000
MAX_SERIES = 4096
"""Most series (metrics x devices x hosts) one trial may have: a write that would make
more is refused with ValueError (422 on a server). ``tunescope serve --max-series`` sets
a server's (a store's :attr:`SQLStore.max_series`)."""
"""Entries each id cache of a store keeps (series by id, series by name, trials by key)."""
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 1.0

F = TypeVar("F", bound=Callable[..., Any])


def batch_digest(batch: Batch) -> str:
    """The SHA-256 of what a batch says (its spec aside: a spec only creates the trial, and
    a resend may carry one the first sending did not), its numbers as :meth:`Batch.from_json`
    reads them (a time or value given as an int is the float the spool gives back), so a
    resend of the same batch (from memory, the spool or the wire) has the same digest. A
    value JSON cannot hold is taken by its repr (the write refuses it further on)."""

    def num(v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    def opt(v: Any) -> Any:
        return None if v is None else num(v)

    end = batch.end
    doc = [
        batch.id,
        batch.trial,
        batch.host,
        [[m, d, n, num(t), num(v)] for m, d, n, t, v in batch.samples],
        [[k, num(t), n, st, opt(du), opt(v), data] for k, t, n, st, du, v, data in batch.events],
        [[n, st, num(t), num(v)] for n, st, t, v in batch.scalars],
        opt(batch.heartbeat),
        None if batch.pids is None else list(batch.pids),
        batch.params,
        None
        if end is None
        else [end.state, num(end.t), end.error, end.exit_code, end.only_if_running],
        batch.where,
    ]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Dialect:
    name: str
    placeholder: str
    id_type: str
    blob_type: str
    real_type: str
    greatest: str
    least: str
    floor_int: str
    """SQL for the integer floor of ``{x}`` (non-negative or clipped by the caller)."""
    for_update: str
    """Suffix of a SELECT that locks the rows it reads until the transaction ends ('' where
    a write transaction already excludes every other writer)."""
    now: str
    """SQL for the store's own time now, epoch seconds (the database server's clock, or the
    clock of the host that holds a SQLite file)."""

    def ddl(self, stmt: str) -> str:
        return stmt.format(id=self.id_type, blob=self.blob_type, real=self.real_type)


class SQLStore(TokensMixin, PagesMixin, RollupsMixin, KeptUsageMixin, Store, abc.ABC):
    """A store over a DB-API connection. Subclasses open connections (:meth:`_connect`),
    translate driver errors (:meth:`_translate`), recognise a lost connection
    (:meth:`_is_lost`), begin transactions and list tables."""

    dialect: Dialect
    max_series: int = MAX_SERIES
    """Most series one trial may have (:data:`MAX_SERIES`)."""

    def __init__(self, url: str, *, create: bool = True, project: str = "default") -> None:
        self.url = url
        self.project = project
        """The project that run names, run lists and new runs refer to unless a call names
        another."""
        self._lock = threading.RLock()
        self._held: Any = None
        """The cursor of the read snapshot the thread holding the lock is in (see
        :meth:`_snapshot`), else None."""
        self._conn: Any = None
        self._closed = False
        self._retry_at = 0.0
        self._backoff = 0.0
        self._written: set[int] = set()
        """Series this store appended to and has not packed since: close() packs them."""
        self._series_cache: Kept[int, SeriesInfo] = Kept(CACHE_SIZE)
        self._series_ids: Kept[tuple[int, str, str, str], tuple[int, bool]] = Kept(CACHE_SIZE)
        """(trial, host, metric, device) -> (series id, whether it has a note)."""
        self._trial_keys: Kept[str, int] = Kept(CACHE_SIZE)
        self._open_schema(create)

    # ------------------------------------------------------------------ plumbing
    @abc.abstractmethod
    def _connect(self) -> Any:
        """A new connection. Raises StoreUnavailable when the database cannot be reached now,
        another StoreError when it never will be (bad credentials, no such database)."""

    @abc.abstractmethod
    def _translate(self, exc: Exception) -> StoreError | None:
        """The StoreError for a driver exception, or None if it is not the driver's."""

    def _is_lost(self, exc: Exception, conn: Any) -> bool:
        """Whether ``exc`` means the connection is gone (the call may go to a new one)."""
        return False

    @abc.abstractmethod
    def _begin(self, conn: Any, write: bool) -> Any:
        """A cursor in a new transaction (``write``: one that will write)."""

    @abc.abstractmethod
    def _table_names(self, cur: Any) -> set[str]: ...

    def _guard(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """Bounds the time one transaction may wait for the server (see the backends)."""
        return contextlib.nullcontext()

    def _sql(self, stmt: str) -> str:
        if STORE_NOW in stmt:
            stmt = stmt.replace(STORE_NOW, self.dialect.now)
        return stmt if self.dialect.placeholder == "?" else stmt.replace("?", "%s")

    def _connection(self) -> Any:
        if self._conn is None:
            now = time.monotonic()
            if now < self._retry_at:
                raise StoreUnavailable(
                    f"{self.url} is unreachable; next attempt in {self._retry_at - now:.1f} s"
                )
            try:
                self._conn = self._connect()
            except StoreUnavailable:
                self._backoff = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, 2 * self._backoff))
                self._retry_at = time.monotonic() + self._backoff
                raise
            self._backoff = 0.0
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def _tx(self, write: bool = False) -> Iterator[Any]:
        """One transaction; driver errors become StoreErrors and roll everything back. A lost
        connection raises :class:`Lost` (retried once by :func:`retrying`). Inside
        :meth:`_snapshot`, the snapshot's own transaction (reads only)."""
        with self._lock:
            if self._held is not None:
                if write:
                    raise AssertionError("a write inside a read snapshot")
                yield self._held
                return
            if self._closed:
                raise StoreError(f"store {self.url} is closed")
            conn = self._connection()
            committing = False
            try:
                with self._guard(conn):
                    cur = self._begin(conn, write)
                    try:
                        yield cur
                        committing = True
                        conn.commit()
                    finally:
                        with contextlib.suppress(Exception):
                            cur.close()
            except Exception as exc:
                if isinstance(exc, Lost):
                    raise
                lost = self._is_lost(exc, conn)
                if not lost:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                if lost:
                    self._drop_connection()
                    raise Lost(
                        f"lost the connection to {self.url}: {_first_line(exc)}",
                        before_commit=not committing,
                    ) from None
                mapped = self._translate(exc)
                if mapped is not None:
                    raise mapped from exc
                raise

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Reads that must agree with one another, as one read transaction on one snapshot
        of the database: a series' chunks and its pending rows, between which a concurrent
        pack (a writer closing, a server packing an ended trial) moves samples, so that
        reading them apart could miss them (or, in the other order, count them twice). Every
        :meth:`_tx` of this thread inside is that transaction. SQLite: a read transaction in
        WAL mode sees one snapshot from its first read on; PostgreSQL: the transaction is
        REPEATABLE READ, READ ONLY (which never fails on a conflict)."""
        with self._lock:
            if self._held is not None:
                yield
                return
            with self._tx() as cur:
                self._hold_snapshot(cur)
                self._held = cur
                try:
                    yield
                finally:
                    self._held = None

    def _hold_snapshot(self, cur: Any) -> None:
        """Make the transaction just begun on ``cur`` one snapshot (see :meth:`_snapshot`);
        a backend whose read transactions are not one by default says so here."""

    @retrying
    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        """As :meth:`Store.read_samples`, its chunks and pending rows read on one snapshot."""
        with self._snapshot():
            return super().read_samples(series_id, start, end)

    @retrying
    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        """As :meth:`Store.window`, its rollups, chunks and pending rows read on one
        snapshot."""
        with self._snapshot():
            return super().window(series_id, start, end, points)

    def _q(self, cur: Any, stmt: str, args: Sequence[Any] = ()) -> Any:
        cur.execute(self._sql(stmt), tuple(args))
        return cur

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                for sid in self._with_pending(sorted(self._written)):  # what this writer left
                    self.compact(sid)
            finally:
                self._closed = True
                self._drop_connection()

    # ------------------------------------------------------------------ schema
    def _open_schema(self, create: bool) -> None:
        """Check the database is ours and current; create or migrate it under a write lock
        (so that processes opening a new store at once create it once)."""
        version = self._version(create)
        if version == SCHEMA_VERSION:
            return
        rebuild = any(v in REBUILDS for v in range(version + 1, SCHEMA_VERSION + 1))
        with self._lock, self._foreign_keys_off(rebuild), self._tx(write=True) as cur:
            self._migration_lock(cur)
            version = self._version_in(cur, create)
            for v in range(version, SCHEMA_VERSION):
                for stmt in statements(v + 1, self.dialect.name):
                    cur.execute(self.dialect.ddl(stmt))
            if rebuild:
                self._check_foreign_keys(cur)
            if version == 0:
                self._q(
                    cur,
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif version != SCHEMA_VERSION:
                self._q(
                    cur,
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    (str(SCHEMA_VERSION),),
                )

    @retrying
    def _version(self, create: bool) -> int:
        with self._tx() as cur:
            return self._version_in(cur, create)

    def _version_in(self, cur: Any, create: bool) -> int:
        tables = self._table_names(cur)
        if "meta" not in tables:
            if tables:
                raise SchemaError(
                    f"{self.url} is not a tunescope database (it has tables: "
                    f"{', '.join(sorted(tables)[:8])})"
                )
            if not create:
                raise NotFound(f"no tunescope store at {self.url}")
            return 0
        row = self._q(cur, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"{self.url} has schema version {version}, newer than this tunescope "
                f"understands ({SCHEMA_VERSION}); upgrade tunescope to open it"
            )
        return version

    def _foreign_keys_off(self, off: bool) -> contextlib.AbstractContextManager[None]:
        """Foreign keys off around a migration that rebuilds a referenced table (SQLite;
        PostgreSQL changes constraints in place)."""
        return contextlib.nullcontext()

    def _check_foreign_keys(self, cur: Any) -> None:
        """After a rebuild: every reference still points at a row (SchemaError otherwise)."""

    def _migration_lock(self, cur: Any) -> None:
        """Exclude other processes creating or migrating the schema (a write transaction
        does that in SQLite; PostgreSQL takes an advisory lock)."""

    @retrying
    def schema_version(self) -> int:
        with self._tx() as cur:
            row = self._q(cur, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ projects and runs
    def _project_id(self, cur: Any, project: str | None, create: bool) -> int:
        name = self.project if project is None else project
        if not name or not name.strip():
            raise StoreError("a project needs a non-empty name")
        row = self._q(cur, "SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
        if row is None and create:
            self._q(
                cur,
                "INSERT INTO projects (name, t_created) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, time.time()),
            )
            row = self._q(cur, "SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no project {name!r} in {self.url}")
        return int(row[0])

    def _run_from(self, cur: Any, row: Sequence[Any]) -> RunInfo:
        run_id, name, start, project, os_user, host = row
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
        return RunInfo(
            int(run_id), str(name), float(start), end, state, len(infos), str(project),
            os_user, host,
        )  # fmt: skip

    def _run_row(
        self,
        cur: Any,
        name: str,
        start: float | None,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> Sequence[Any]:
        if not name or not name.strip():
            raise StoreError("a run needs a non-empty name")
        pid = self._project_id(cur, project, create=True)
        where = f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE r.project_id = ? AND r.name = ?"
        row = self._q(cur, where, (pid, name)).fetchone()
        if row is None:
            self._q(
                cur,
                "INSERT INTO runs (project_id, name, t_start, os_user, host) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, name) DO NOTHING",
                (pid, name, time.time() if start is None else start, os_user, host),
            )
            row = self._q(cur, where, (pid, name)).fetchone()
        return cast(Sequence[Any], row)

    @retrying
    def ensure_run(
        self,
        name: str,
        start: float | None = None,
        *,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> RunInfo:
        with self._tx(write=True) as cur:
            return self._run_from(cur, self._run_row(cur, name, start, project, os_user, host))

    @retrying
    def get_run(self, run: int | str, *, project: str | None = None) -> RunInfo:
        with self._tx() as cur:
            if isinstance(run, int):
                row = self._q(
                    cur, f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE r.id = ?", (_sql_int(run),)
                ).fetchone()
            else:
                name = self.project if project is None else project
                row = self._q(
                    cur,
                    f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE p.name = ? AND r.name = ?",
                    (name, run),
                ).fetchone()
            if row is None:
                raise NotFound(f"no run {run!r} in {self.url}")
            return self._run_from(cur, row)

    @retrying
    def list_runs(self, *, project: str | None = None) -> list[RunInfo]:
        name = self.project if project is None else project
        with self._tx() as cur:
            rows = self._q(
                cur,
                f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE p.name = ? "
                "ORDER BY r.t_start DESC, r.id DESC",
                (name,),
            ).fetchall()
            return [self._run_from(cur, r) for r in rows]

    @retrying
    def list_projects(self) -> list[str]:
        with self._tx() as cur:
            rows = self._q(cur, "SELECT name FROM projects ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]

    @retrying
    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        """The project a trial or a series belongs to (NotFound for an unknown id)."""
        if (trial is None) == (series is None):
            raise ValueError("give a trial or a series")
        with self._tx() as cur:
            if trial is not None:
                row = self._q(
                    cur,
                    "SELECT p.name FROM trials t JOIN runs r ON t.run_id = r.id "
                    "JOIN projects p ON r.project_id = p.id WHERE t.id = ?",
                    (_sql_int(trial),),
                ).fetchone()
            else:
                row = self._q(
                    cur,
                    "SELECT p.name FROM series s JOIN trials t ON s.trial_id = t.id "
                    "JOIN runs r ON t.run_id = r.id JOIN projects p ON r.project_id = p.id "
                    "WHERE s.id = ?",
                    (_sql_int(series or 0),),
                ).fetchone()
        if row is None:
            what = "trial" if trial is not None else "series"
            raise NotFound(f"no {what} with id {trial if trial is not None else series}")
        return str(row[0])

    # ------------------------------------------------------------------ trials
    def _trial_from(self, row: Sequence[Any]) -> TrialInfo:
        (tid, run_id, name, params, state, host, pids, start, end, hb, error, interval, key) = row[
            :13
        ]
        seen, now = row[13], row[14]
        p = _loads(params, None)
        ids = _loads(pids, [])
        return TrialInfo(
            int(tid),
            int(run_id),
            str(name),
            p if isinstance(p, dict) else {"(unreadable)": str(params)[:200]},
            self.derive_state(
                str(state),
                None if seen is None else float(seen),
                float(start),
                float(interval),
                float(now),
            ),
            str(host),
            tuple(x for x in ids if isinstance(x, int)) if isinstance(ids, list) else (),
            float(start),
            None if end is None else float(end),
            None if hb is None else float(hb),
            error,
            float(interval),
            str(key or ""),
        )

    def _insert_trial(
        self,
        cur: Any,
        run_id: int,
        name: str | None,
        params: dict[str, Any],
        *,
        host: str,
        pids: Sequence[int],
        start: float,
        interval: float,
        key: str,
        rename: bool,
    ) -> Sequence[Any]:
        """Insert a trial; ``name`` None takes ``trial-<k>``; a taken name raises Conflict,
        or with ``rename`` becomes ``name-2``, ``name-3``… The run row is locked first so
        that concurrent creators pick different names."""
        try:
            params_json = json.dumps(params, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"trial params must be JSON values: {exc}") from None
        if (
            self._q(
                cur, f"SELECT id FROM runs WHERE id = ?{self.dialect.for_update}", (run_id,)
            ).fetchone()
            is None
        ):
            raise NotFound(f"no run with id {run_id} in {self.url}")
        existing = {
            r[0] for r in self._q(cur, "SELECT name FROM trials WHERE run_id = ?", (run_id,))
        }
        if name is None:
            k = len(existing)
            while f"trial-{k}" in existing:
                k += 1
            name = f"trial-{k}"
        elif name in existing:
            if not rename:
                raise Conflict(f"run {run_id} already has a trial named {name!r}")
            base = name
            name = next(n for n in (f"{base}-{i}" for i in itertools.count(2)) if n not in existing)
        return cast(
            Sequence[Any],
            self._q(
                cur,
                "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
                "heartbeat, interval_s, trial_key) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?) "
                f"RETURNING {_TRIAL_COLS}",
                (
                    run_id,
                    name,
                    params_json,
                    host,
                    json.dumps(list(pids)),
                    start,
                    start,
                    interval,
                    key,
                ),
            ).fetchone(),
        )

    @retrying
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
        t0 = time.time() if start is None else start
        with self._tx(write=True) as cur:
            row = self._insert_trial(
                cur,
                _sql_int(run_id),
                name,
                params or {},
                host=host,
                pids=pids,
                start=t0,
                interval=interval,
                key=new_key(),
                rename=False,
            )
            return self._trial_from(row)

    @retrying
    def get_trial(self, trial_id: int) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE id = ?", (_sql_int(trial_id),)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return self._trial_from(row)

    @retrying
    def trial_by_key(self, key: str) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE trial_key = ?", (key,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with key {key!r} in {self.url}")
        return self._trial_from(row)

    @retrying
    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur,
                f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? AND name = ?",
                (_sql_int(run_id), name),
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial {name!r} in run {run_id}")
        return self._trial_from(row)

    @retrying
    def list_trials(self, run_id: int) -> list[TrialInfo]:
        with self._tx() as cur:
            rows = self._q(
                cur,
                f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? ORDER BY id",
                (_sql_int(run_id),),
            ).fetchall()
        return [self._trial_from(r) for r in rows]

    @retrying
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
                raise Rejected(f"trial params must be JSON values: {exc}") from None
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
        if heartbeat is not None:  # a time named by the caller: lost is judged by it
            sets.append("t_seen = NULL")
        if pids is not None:
            sets.append("pids = ?")
            args.append(json.dumps(sorted(set(pids))))
        if not sets:
            return False
        where = "id = ?" + (" AND state = 'running'" if only_if_running else "")
        with self._tx(write=True) as cur:
            n = self._q(
                cur,
                f"UPDATE trials SET {', '.join(sets)} WHERE {where}",
                (*args, _sql_int(trial_id)),
            ).rowcount
            if n == 0 and not only_if_running:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
            if n:
                self._touch(cur, [_sql_int(trial_id)])
        return bool(n)

    @retrying
    def exit_code(self, trial_id: int) -> int | None:
        with self._tx() as cur:
            row = self._q(
                cur, "SELECT exit_code FROM trials WHERE id = ?", (_sql_int(trial_id),)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return None if row[0] is None else int(row[0])

    # ------------------------------------------------------------------ batches
    @retrying
    def write(self, batch: Batch) -> int:
        digest = batch_digest(batch)  # before the lock: a big batch takes a while
        with self._lock, self._tx(write=True) as cur:
            tid = self._trial_for(cur, batch.trial, batch.spec)
            (project_id,) = self._q(
                cur,
                "SELECT r.project_id FROM trials t JOIN runs r ON r.id = t.run_id WHERE t.id = ?",
                (tid,),
            ).fetchone()
            if (
                self._q(
                    cur,
                    "INSERT INTO batches (project_id, id, trial_id, digest, t) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, id) DO NOTHING",
                    (project_id, batch.id, tid, digest, time.time()),
                ).rowcount
                == 0
            ):  # written before (by this connection or another): a resend, or a conflict
                was_tid, was = self._q(
                    cur,
                    "SELECT trial_id, digest FROM batches WHERE project_id = ? AND id = ?",
                    (project_id, batch.id),
                ).fetchone()
                if was is not None and was != digest:
                    raise Conflict(f"batch {batch.id!r} was written before with other content")
                return int(was_tid)
            for metric, _device, _note, t, v in batch.samples:
                problem = check_sample(t, v)
                if problem is not None:
                    raise Rejected(f"{metric}: {problem}")
            ids = self._series_ids_in(
                cur, tid, batch.host, [(m, d, n) for m, d, n, _t, _v in batch.samples]
            )
            by_series: dict[int, list[tuple[float, float]]] = defaultdict(list)
            for metric, device, _note, t, v in batch.samples:
                by_series[ids[(metric, device or "")]].append((t, v))
            self._append(cur, by_series)
            self._touch(cur, [tid])  # a batch after the end too: its kept usage is stale
            try:
                self._insert_events(cur, tid, batch.events)
            except (TypeError, ValueError) as exc:
                raise Rejected(f"event data must be JSON values: {exc}") from None
            self._insert_scalars(cur, tid, batch.scalars)
            self._apply_trial_changes(cur, tid, batch)
            if batch.where is not None:
                self._merge_where(cur, tid, batch.host, batch.where)
            self._written.update(by_series)
            return tid

    def _trial_for(self, cur: Any, key: str, spec: TrialSpec | None) -> int:
        """The trial of ``key``, created from ``spec`` if new. Only trials found already
        committed are cached: a trial created here is gone if the transaction rolls back."""
        tid = self._trial_keys.get(key)
        if tid is not None:
            return tid
        row = self._q(cur, "SELECT id FROM trials WHERE trial_key = ?", (key,)).fetchone()
        if row is not None:
            self._trial_keys.put(key, int(row[0]))
        else:
            if spec is None or spec.key != key:
                raise NotFound(f"no trial with key {key!r} in {self.url}")
            run_id = int(
                self._run_row(cur, spec.run, spec.start, spec.project, spec.os_user, spec.host)[0]
            )
            # the run row is locked by _insert_trial: look again once we hold it
            self._q(cur, f"SELECT id FROM runs WHERE id = ?{self.dialect.for_update}", (run_id,))
            row = self._q(cur, "SELECT id FROM trials WHERE trial_key = ?", (key,)).fetchone()
            if row is None:
                row = self._insert_trial(
                    cur,
                    run_id,
                    spec.name,
                    spec.params,
                    host=spec.host,
                    pids=spec.pids,
                    start=spec.start,
                    interval=spec.interval,
                    key=key,
                    rename=True,
                )
        return int(row[0])

    def _apply_trial_changes(self, cur: Any, tid: int, batch: Batch) -> None:
        if batch.params is not None:
            try:
                params = json.dumps(batch.params, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise Rejected(f"trial params must be JSON values: {exc}") from None
            self._q(cur, "UPDATE trials SET params = ? WHERE id = ?", (params, tid))
        if batch.pids:
            row = self._q(cur, "SELECT pids FROM trials WHERE id = ?", (tid,)).fetchone()
            merged = sorted(set(_loads(row[0], [])) | set(batch.pids))
            self._q(
                cur,
                "UPDATE trials SET pids = ? WHERE id = ? AND state = 'running'",
                (json.dumps(merged), tid),
            )
        if batch.heartbeat is not None or batch.spec is not None:
            self._stamp_seen(cur, tid, batch.heartbeat)
        if batch.heartbeat is not None:
            g = self.dialect.greatest
            self._q(
                cur,
                f"UPDATE trials SET heartbeat = {g}(COALESCE(heartbeat, 0), ?) "
                "WHERE id = ? AND state = 'running'",
                (batch.heartbeat, tid),
            )
        end = batch.end
        if end is not None:
            self._q(
                cur,
                "UPDATE trials SET state = ?, t_end = ?, error = ?, exit_code = ? WHERE id = ?"
                + (" AND state = 'running'" if end.only_if_running else ""),
                (end.state, stored_end(end.t), end.error, end.exit_code, tid),
            )

    def _stamp_seen(self, cur: Any, tid: int, heartbeat: float | None) -> None:
        """The store's clock notes that a running trial's writer is alive: at every batch
        with a heartbeat (whatever its writer's clock says: a node whose clock is ahead must
        not silence the others), and at a batch without one while no heartbeat has reached
        the trial yet (a batch just created it). A spooled batch replayed late counts too:
        its trial reads ``running`` for LOST_AFTER_S after it, at most."""
        if heartbeat is None:
            self._q(
                cur,
                f"UPDATE trials SET t_seen = {STORE_NOW} WHERE id = ? AND state = 'running' "
                "AND t_seen IS NULL AND COALESCE(heartbeat, t_start) = t_start",
                (tid,),
            )
            return
        self._q(
            cur,
            f"UPDATE trials SET t_seen = {STORE_NOW} WHERE id = ? AND state = 'running'",
            (tid,),
        )

    # ------------------------------------------------------------------ where trials ran
    def _merge_where(self, cur: Any, tid: int, host: str, where: dict[str, Any]) -> None:
        """Merge ``where`` into what the trial's writers on ``host`` said before (its keys
        replace theirs)."""
        row = self._q(
            cur,
            "SELECT info FROM trial_hosts WHERE trial_id = ? AND host = ?"
            + self.dialect.for_update,
            (tid, host),
        ).fetchone()
        old = {} if row is None else _loads(row[0], {})
        merged = {**(old if isinstance(old, dict) else {}), **where}
        try:
            info = json.dumps(merged, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"where a trial runs must be JSON values: {exc}") from None
        self._q(
            cur,
            "INSERT INTO trial_hosts (trial_id, host, info) VALUES (?, ?, ?) "
            "ON CONFLICT (trial_id, host) DO UPDATE SET info = excluded.info",
            (tid, host, info),
        )

    @retrying
    def hosts(self, trial_id: int) -> dict[str, dict[str, Any]]:
        tid = _sql_int(trial_id)
        with self._tx() as cur:
            row = self._q(cur, "SELECT host FROM trials WHERE id = ?", (tid,)).fetchone()
            if row is None:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
            out: dict[str, dict[str, Any]] = {str(row[0]): {}} if row[0] else {}
            for (host,) in self._q(
                cur, "SELECT DISTINCT host FROM series WHERE trial_id = ?", (tid,)
            ).fetchall():
                out.setdefault(str(host), {})
            for host, info in self._q(
                cur, "SELECT host, info FROM trial_hosts WHERE trial_id = ?", (tid,)
            ).fetchall():
                got = _loads(info, {})
                out[str(host)] = got if isinstance(got, dict) else {}
        return {h: out[h] for h in sorted(out)}

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
                for i in range(0, len(sids), 500):
                    part = list(sids[i : i + 500])
                    marks = ", ".join("?" * len(part))
                    found.update(
                        int(r[0])
                        for r in self._q(
                            cur,
                            f"SELECT DISTINCT series_id FROM pending WHERE series_id IN ({marks})",
                            part,
                        ).fetchall()
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


def _series_from(r: Sequence[Any]) -> SeriesInfo:
    """A series from its row (:data:`_SERIES_COLS`); device '' is None."""
    return SeriesInfo(int(r[0]), int(r[1]), str(r[2]), r[3] or None, r[4], str(r[5]))


def _floats(row: Sequence[Any]) -> tuple[float, float, float]:
    a, b, c = row
    return float(a), float(b), float(c)


def _sql_int(value: int) -> int:
    """An id as the databases store it: a number outside 64 bits names nothing (NotFound),
    rather than a driver's overflow error."""
    v = int(value)
    return v if -(2**63) <= v < 2**63 else -1


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
