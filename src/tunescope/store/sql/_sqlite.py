"""The SQLite backend: one file, zero setup. WAL mode, so the sampler process and the
training process write while the page reads.

Paths are literal: ``?``, ``#``, ``%``, spaces and any unicode are part of the file name (the
name is percent-encoded into SQLite's URI form). A file that is not a tunescope database is
recognised before anything is written to it, and left as it was. Write transactions begin
``IMMEDIATE``, taking the write lock up front, so a transaction never fails half-way on a lock;
a lock another process holds past the busy timeout raises StoreUnavailable (writers keep what
they hold and retry). Processes opening one new file at once create its schema once.

The store is where it was: a store keeps to the file it opened (its device and inode). Each
write transaction, and each new connection, checks that the path still names that file; once
it does not (the file was deleted, or another put in its place), the store writes no more,
into the unlinked file nor into the new one: it empties its write-ahead log into the file it
had (so no stale log is left beside a newcomer), closes it, and raises StoreUnavailable from
then on, naming what happened. Writers keep what they hold and spool it; nothing is written
into a file this store did not open (a replacement may be a backup put back by hand, or
another store), and a reconnection never creates a file (``mode=rw``). ``tunescope sync``
writes the spool once a store is back at the path.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tunescope.errors import NotFound, Rejected, SchemaError, StoreError, StoreUnavailable
from tunescope.store._url import sqlite_url
from tunescope.store.sql._sql import Dialect, SQLStore

SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    id_type="INTEGER PRIMARY KEY AUTOINCREMENT",
    blob_type="BLOB",
    real_type="REAL",
    greatest="MAX",
    least="MIN",
    floor_int="CAST({x} AS INTEGER)",
    for_update="",
    now="((julianday('now') - 2440587.5) * 86400.0)",
)

BUSY_TIMEOUT_S = 5.0
"""How long a call waits for a lock another process holds before StoreUnavailable."""

_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
_WAIT_CODES = (7, 8, 10, 13, 14, 15)
"""SQLITE_NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL: waiting may cure them."""
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_PROOF_CODES = (18, 20)  # SQLITE_TOOBIG, SQLITE_MISMATCH: the value itself is wrong


class SQLiteStore(SQLStore):
    dialect = SQLITE

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        create: bool = True,
        timeout: float | None = None,
        project: str = "default",
    ) -> None:
        self.path = Path(os.fspath(path)).expanduser().resolve()
        self.readonly = readonly
        self.busy_timeout = BUSY_TIMEOUT_S if timeout is None else float(timeout)
        self._create = create and not readonly
        self._file: tuple[int, int] | None = None
        """(device, inode) of the file this store opened (see the module doc)."""
        self._moved: str | None = None
        """Why this store writes no more: its file was deleted or replaced."""
        url = sqlite_url(self.path)
        parent = self.path.parent
        if self.path.exists():
            if not self.path.is_file():
                raise StoreError(f"cannot open store {url}: it is not a file")
            if not readonly and not os.access(self.path, os.W_OK):
                raise StoreError(f"cannot open store {url}: file is not writable")
        elif readonly or not create:
            raise NotFound(f"no store at {self.path}")
        elif not parent.is_dir():
            raise StoreError(f"cannot open store {url}: directory {parent} does not exist")
        elif not os.access(parent, os.W_OK):
            raise StoreError(f"cannot open store {url}: directory {parent} is not writable")
        super().__init__(url, create=create and not readonly, project=project)
        if not readonly:
            self._use_wal()

    def _file_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _connect(self) -> Any:
        if self._moved is not None:
            raise StoreUnavailable(self._moved)
        mode = "ro" if self.readonly else "rwc" if self._create and self._file is None else "rw"
        uri = f"file:{quote(str(self.path))}?mode={mode}"
        try:
            conn = sqlite3.connect(
                uri,
                uri=True,
                timeout=self.busy_timeout,
                check_same_thread=False,
                isolation_level=None,  # transactions are begun explicitly (see _begin)
            )
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise self._translate_static(exc, self.url) from None
        if self._file is None:
            self._file = self._file_id()
        elif self._file_id() != self._file:
            self._leave(conn, ours=False)
            assert self._moved is not None
            raise StoreUnavailable(self._moved)
        return conn

    def _still_there(self, conn: Any) -> None:
        """Raise StoreUnavailable (once having left the file) when the path no longer names
        the file this store opened (see the module doc). Called holding the write lock."""
        if self._file is None or self._file_id() == self._file:
            return
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        self._leave(conn)
        self._drop_connection()
        assert self._moved is not None
        raise StoreUnavailable(self._moved)

    def _leave(self, conn: Any, *, ours: bool = True) -> None:
        """The path names another file now, or none: empty the write-ahead log into the file
        this store had (``ours``: ``conn`` is on it), close ``conn``, and write no more."""
        now = self._file_id()
        what = "deleted" if now is None else "replaced by another file"
        self._moved = (
            f"{self.url}: the store file was {what} while this process had it open; nothing "
            "more is written here (the file it was is left alone): put the store back at this "
            "path and `tunescope sync` writes what waits in the spool"
        )
        if ours:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _use_wal(self) -> None:
        """WAL mode (persistent in the file), set once the file is known to be ours."""
        for attempt in range(20):
            try:
                with self._lock:
                    conn = self._connection()
                    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                    if str(mode).lower() != "wal":
                        conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if _busy(exc) and attempt < 19:
                    time.sleep(0.05)
                    continue
                raise self._translate_static(exc, self.url) from None

    @contextlib.contextmanager
    def _foreign_keys_off(self, off: bool) -> Iterator[None]:
        if not off:
            yield
            return
        with self._lock:
            conn = self._connection()
            conn.execute("PRAGMA foreign_keys = OFF")  # outside a transaction, as it must be
            try:
                yield
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA foreign_keys = ON")

    def _check_foreign_keys(self, cur: Any) -> None:
        bad = cur.execute("PRAGMA foreign_key_check").fetchall()
        if bad:
            raise SchemaError(f"{self.url}: a migration left {len(bad)} dangling references")

    def _begin(self, conn: Any, write: bool) -> Any:
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        if write:
            self._still_there(conn)  # once the write lock is ours: the last moment to look
        return cur

    @staticmethod
    def _translate_static(exc: Exception, url: str) -> StoreError:
        """The StoreError of a sqlite3 exception, by its primary result code (the message
        where the driver gives none): what waiting may cure (busy, locked, out of memory,
        read-only, I/O error, full, cannot open, protocol) is StoreUnavailable; a value SQLite
        cannot hold (too big, a mismatched type) is Rejected; a file that is not a database
        or is corrupt is SchemaError; the rest StoreError."""
        msg = str(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if (primary is None and _busy(exc)) or primary in _BUSY_CODES:
            return StoreUnavailable(f"{url} is locked by another process ({msg})")
        if primary in _CORRUPT_CODES or (
            primary is None
            and isinstance(exc, sqlite3.DatabaseError)
            and ("not a database" in msg or "malformed" in msg or "corrupt" in msg)
        ):
            return SchemaError(f"{url} is not a tunescope database or is corrupt ({msg})")
        if primary in _WAIT_CODES or (
            primary is None
            and (
                "readonly" in msg
                or "read-only" in msg
                or "disk I/O" in msg
                or "unable to open" in msg
                or "full" in msg
            )
        ):
            return StoreUnavailable(f"{url} cannot be written now ({msg})")
        if primary in _PROOF_CODES or isinstance(exc, sqlite3.DataError):
            return Rejected(f"{url}: a value SQLite cannot hold ({msg})")
        if isinstance(exc, sqlite3.IntegrityError):
            return StoreError(f"{url}: constraint failed ({msg})")
        return StoreError(f"{url}: {msg}")

    def _translate(self, exc: Exception) -> StoreError | None:
        if isinstance(exc, sqlite3.Error):
            return self._translate_static(exc, self.url)
        return None

    def _table_names(self, cur: Any) -> set[str]:
        rows: list[Any] = cur.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        return {r[0] for r in rows}

    def disk_bytes(self) -> dict[str, int]:
        out = super().disk_bytes()
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out["file_bytes"] = self.path.stat().st_size
        return out


def _busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _BUSY_CODES:
        return True
    return "locked" in str(exc) or "busy" in str(exc)
