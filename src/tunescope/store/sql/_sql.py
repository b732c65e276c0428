"""SQL written once for the SQLite and PostgreSQL backends.

Backends supply a DB-API connection and a :class:`Dialect`; the SQL of :class:`SQLStore` uses
``?`` placeholders and only constructs both databases accept.

Connections heal. Every call runs in one transaction (:meth:`SQLStore._tx`) on a connection
opened on demand. When the connection turns out lost before the transaction commits (the
server restarted, closed an idle session, or stopped answering), nothing of it was kept, so the
call is repeated once on a new connection; a connection lost while committing cannot tell
whether the commit happened, and the call raises :class:`~tunescope.errors.StoreUnavailable`
(batches are idempotent, so their writers simply send them again). While the server refuses
connections, new attempts wait for a growing back-off (0.1 s doubling to 1 s) and calls raise
StoreUnavailable at once in between.

This module is what the rest stands on: the connection, its transactions and their retry, read
snapshots and the schema. :class:`SQLStore` is composed of a mixin per concern, each in its
module beside this one: runs and trials (``_trials.py``), the write of a batch
(``_write.py``), series and the reads of their samples (``_series.py``), appending and packing
samples (``_samples.py``), events and scalars (``_events.py``); and beyond the contract, pages
(``_pages.py``), rollups and raw retention (``_retention.py``), kept usage
(``_kept_usage.py``) and access tokens (``_tokens.py``).
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from tunescope._kept import Kept
from tunescope.errors import NotFound, SchemaError, StoreError, StoreUnavailable
from tunescope.store._codec import F64
from tunescope.store._contract import Store
from tunescope.store._model import SeriesInfo, Window
from tunescope.store.sql._events import EventsMixin
from tunescope.store.sql._heal import Lost, retrying
from tunescope.store.sql._kept_usage import KeptUsageMixin
from tunescope.store.sql._pages import PagesMixin
from tunescope.store.sql._retention import RollupsMixin
from tunescope.store.sql._rows import STORE_NOW
from tunescope.store.sql._samples import SamplesMixin
from tunescope.store.sql._schema import REBUILDS, SCHEMA_VERSION, statements
from tunescope.store.sql._series import SeriesMixin
from tunescope.store.sql._tokens import TokensMixin
from tunescope.store.sql._trials import TrialsMixin
from tunescope.store.sql._write import WriteMixin

CACHE_SIZE = 50_000
"""Entries each id cache of a store keeps (series by id, series by name, trials by key)."""
MAX_SERIES = 4096
"""Most series (metrics x devices x hosts) one trial may have: a write that would make
more is refused with ValueError (422 on a server). ``tunescope serve --max-series`` sets
a server's (a store's :attr:`SQLStore.max_series`)."""
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 1.0

F = TypeVar("F", bound=Callable[..., Any])


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


class SQLStore(
    TokensMixin,
    PagesMixin,
    RollupsMixin,
    KeptUsageMixin,
    TrialsMixin,
    WriteMixin,
    SeriesMixin,
    SamplesMixin,
    EventsMixin,
    Store,
    abc.ABC,
):
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
