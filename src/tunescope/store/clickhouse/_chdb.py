"""The embedded transport: ClickHouse's own engine in this process (``chdb``), on a folder.

chdb runs one engine per process, on one folder: while a transport is open on a folder, one on
another folder is refused with a one-line ConfigError (several transports on the same folder
are fine, in different databases too; once all are closed another folder may be opened).
A folder whose engine runs in another process (ClickHouse locks its ``status`` file) is
refused with a one-line StoreUnavailable that names that process and says to use a server.
Each transport has its own chdb connection, used by one call at a time (a chdb connection
takes no query while an insert streams into it), so writers in threads that each open a
transport insert side by side.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.errors import ConfigError, StoreUnavailable
from tunescope.store.clickhouse._errors import translate
from tunescope.store.clickhouse._native import encode_block
from tunescope.store.clickhouse._transport import Column, Params, Transport, sql_literal

__all__ = ["ChdbTransport", "held_by"]

_ENGINE_LOCK = threading.Lock()
_ENGINE: dict[str, int] = {}
"""The folder the process's engine runs on -> how many transports are open on it."""


def held_by(path: str) -> int | None:
    """The pid of the process whose embedded engine runs on folder ``path`` (0 when one does
    but its pid cannot be read), None when none does."""
    status = os.path.join(path, "status")
    try:
        fd = os.open(status, os.O_RDONLY)
    except OSError:
        return None  # never opened, or not readable: chdb will say
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # locked: held
        except OSError:
            return None
        else:
            return None  # free (the lock goes with the descriptor, closed below)
        m = re.search(rb"^PID: (\d+)$", os.pread(fd, 4096, 0), re.MULTILINE)
        return int(m.group(1)) if m else 0
    finally:
        os.close(fd)


def _param(v: Any) -> str:
    """A parameter's value as the engine reads it (the escaped text of a ``{name:Type}``)."""
    if isinstance(v, str):
        return (
            v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
        )
    return sql_literal(v)


class ChdbTransport(Transport):
    """The embedded engine on folder ``path``, database ``database`` (created if new)."""

    def __init__(self, path: str, database: str, *, url: str | None = None) -> None:
        from chdb import session  # the extra's: imported only when used

        self.url = url or f"chdb:{path}"
        self.database = database
        self.path = path
        self._lock = threading.Lock()
        with _ENGINE_LOCK:
            other = next((p for p in _ENGINE if p != path), None)
            if other is not None:
                raise ConfigError(
                    f"cannot open {self.url}: this process's embedded ClickHouse runs on {other} "
                    "(one folder per process; use another database in it)"
                )
            if path not in _ENGINE:
                self._check_not_held()  # before chdb, which says it on stderr, then vaguely
            try:
                self._session: Any = session.Session(path)  # type: ignore[no-untyped-call]
            except Exception as exc:
                self._check_not_held()
                raise translate(exc, self.url) from None
            _ENGINE[path] = _ENGINE.get(path, 0) + 1
        self.command(f"CREATE DATABASE IF NOT EXISTS {database}")

    def _check_not_held(self) -> None:
        """StoreUnavailable, in one line, when another process's engine runs on the folder:
        ClickHouse locks the folder's ``status`` file (``flock``) while it runs and writes its
        pid there. Not when this process holds it (chdb opened outside this class)."""
        pid = held_by(self.path)
        if pid is not None and pid != os.getpid():
            who = f"pid {pid}" if pid else "pid unknown"
            raise StoreUnavailable(
                f"cannot open {self.url}: its folder is held by another process ({who}); the "
                "embedded engine opens a folder in one process at a time: for several "
                "processes use a ClickHouse server (clickhouse://USER@HOST:8123/DB?meta=URL)"
            )

    def _conn(self) -> Any:
        if self._session is None:
            raise StoreUnavailable(f"{self.url}: the transport is closed")
        return self._session._conn  # chdb's connection: the one with send_insert

    def _arrow(self, sql: str, params: Params | None) -> Any:
        args = {k: _param(v) for k, v in (params or {}).items()}
        with self._lock:
            try:
                return self._conn().query(sql, "ArrowTable", params=args)
            except Exception as exc:
                raise translate(exc, self.url) from None

    def query(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        table = self._arrow(sql, params)
        return list(zip(*(c.to_pylist() for c in table.columns), strict=True))

    def columns(self, sql: str, params: Params | None = None) -> list[npt.NDArray[Any]]:
        """The columns of a SELECT of numbers with no NULL, as numpy arrays."""
        table = self._arrow(sql, params)
        return [np.asarray(c.to_numpy()) for c in table.columns]

    def insert(
        self, table: str, columns: Sequence[Column], settings: Mapping[str, Any] | None = None
    ) -> None:
        data = encode_block(columns)
        names = ", ".join(c.name for c in columns)
        stmt = f"INSERT INTO {self.database}.{table} ({names})"
        if settings:
            stmt += " SETTINGS " + ", ".join(f"{k} = {sql_literal(v)}" for k, v in settings.items())
        with self._lock:
            try:
                with self._conn().send_insert(stmt, "Native") as ins:
                    ins.append(data)
                    ins.finish()
            except Exception as exc:
                raise translate(exc, self.url, inserting=True) from None

    def command(self, sql: str) -> None:
        with self._lock:
            try:
                self._conn().query(sql, "CSV")
            except Exception as exc:
                raise translate(exc, self.url) from None

    def close(self) -> None:
        with self._lock:
            if self._session is None:
                return
            session, self._session = self._session, None
        with _ENGINE_LOCK:
            try:
                session.close()
            finally:
                left = _ENGINE.get(self.path, 1) - 1
                if left:
                    _ENGINE[self.path] = left
                else:
                    _ENGINE.pop(self.path, None)
