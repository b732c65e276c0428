"""The SQLite backend: one file, zero setup. WAL mode, so the sampler process and the
training process write while the page reads."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from tunescope.errors import SchemaError, StoreError
from tunescope.store._sql import Dialect, SQLStore

SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    id_type="INTEGER PRIMARY KEY AUTOINCREMENT",
    blob_type="BLOB",
    real_type="REAL",
    greatest="MAX",
    floor_int="CAST({x} AS INTEGER)",
)


class SQLiteStore(SQLStore):
    dialect = SQLITE

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path).expanduser().resolve()
        url = f"sqlite:///{self.path}"
        parent = self.path.parent
        if not parent.is_dir():
            raise StoreError(f"cannot open store {url}: directory {parent} does not exist")
        if self.path.exists():
            if not self.path.is_file():
                raise StoreError(f"cannot open store {url}: it is not a file")
            if not readonly and not os.access(self.path, os.W_OK):
                raise StoreError(f"cannot open store {url}: file is not writable")
        elif not os.access(parent, os.W_OK):
            raise StoreError(f"cannot open store {url}: directory {parent} is not writable")
        try:
            conn = sqlite3.connect(
                f"file:{self.path}{'?mode=ro' if readonly else ''}",
                uri=True,
                timeout=30.0,
                check_same_thread=False,
                isolation_level="DEFERRED",
            )
            conn.execute("PRAGMA busy_timeout = 30000")
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise self._translate_static(exc, url) from exc
        super().__init__(url, conn)

    @staticmethod
    def _translate_static(exc: Exception, url: str) -> StoreError:
        msg = str(exc)
        if isinstance(exc, sqlite3.DatabaseError) and (
            "not a database" in msg or "malformed" in msg or "corrupt" in msg
        ):
            return SchemaError(f"{url} is not a tunescope database or is corrupt ({msg})")
        if isinstance(exc, sqlite3.IntegrityError):
            return StoreError(f"{url}: constraint failed ({msg})")
        if "readonly" in msg or "read-only" in msg:
            return StoreError(f"{url} is read-only ({msg})")
        return StoreError(f"{url}: {msg}")

    def _translate(self, exc: Exception) -> StoreError | None:
        if isinstance(exc, sqlite3.Error):
            return self._translate_static(exc, self.url)
        return None

    def _table_names(self) -> set[str]:
        rows: list[Any] = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        return {r[0] for r in rows}

    def disk_bytes(self) -> dict[str, int]:
        out = super().disk_bytes()
        with self._lock:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out["file_bytes"] = self.path.stat().st_size
        return out
