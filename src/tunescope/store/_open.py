"""Open a store by URL (see :func:`open_store`)."""

from __future__ import annotations

import os

from tunescope._env import ENV_PROJECT
from tunescope.errors import ConfigError
from tunescope.store._contract import Store
from tunescope.store._url import check_url, parse, redact

__all__ = ["open_store"]


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    readonly: bool = False,
    create: bool = True,
    timeout: float | None = None,
    project: str | None = None,
) -> Store:
    """Open the store named by ``url`` (see :func:`resolve_url`).

    ``create=False`` (read commands) refuses to create a store where none is: a missing
    SQLite file or an empty PostgreSQL schema raise NotFound. ``readonly`` opens a SQLite file
    read-only (and never creates one). ``timeout``: seconds a call may wait for a lock (SQLite)
    or the server (PostgreSQL) before it raises StoreUnavailable. ``project``: what run names
    refer to (else ``$TUNESCOPE_PROJECT``, else ``default``).

    ``clickhouse(s)://USER@HOST:PORT/DB?meta=URL`` and ``chdb:PATH`` open a store on
    ClickHouse (``store/clickhouse/_store.py``): samples, events and scalars in ClickHouse, the
    rest in the SQL store ``meta`` names.

    ``http(s)://HOST:PORT/PROJECT`` opens an :class:`~tunescope.store.remote._http.HttpStore` on a
    tunescope server with the token in ``$TUNESCOPE_TOKEN``: its project is the URL's
    (``project`` is not used), the server's store is never created by a client, and nothing
    is sent until the first call (``readonly`` and ``create`` change nothing).

    Raises ConfigError for a URL of an unknown kind or bad form (:func:`check_url`),
    StoreUnavailable when the database cannot be reached now, SchemaError when it is corrupt,
    foreign or from a newer tunescope, StoreError when it cannot be opened at all.
    """
    target = check_url(url)
    scheme, rest = parse(target)
    project = project or os.environ.get(ENV_PROJECT) or "default"
    if scheme in ("http", "https"):
        from tunescope.store.remote._http import HttpStore

        return HttpStore(target, timeout=timeout)
    if scheme == "clickhouse":
        try:
            from tunescope.store.clickhouse._store import open_clickhouse
        except ImportError as exc:
            raise ConfigError(
                f"store URL {redact(target)!r} needs ClickHouse: "
                f"pip install 'tunescope[clickhouse]' ({exc})"
            ) from None
        return open_clickhouse(
            target, readonly=readonly, create=create, timeout=timeout, project=project
        )
    if scheme == "sqlite":
        from tunescope.store.sql._sqlite import SQLiteStore

        return SQLiteStore(rest, readonly=readonly, create=create, timeout=timeout, project=project)
    try:
        from tunescope.store.sql._postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(
            f"store URL {redact(target)!r} needs the PostgreSQL driver: "
            f"pip install 'tunescope[postgres]' ({exc})"
        ) from None
    return PostgresStore(target, create=create and not readonly, timeout=timeout, project=project)
