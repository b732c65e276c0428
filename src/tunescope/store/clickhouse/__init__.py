"""The bulk of a store on ClickHouse (issue 23): samples, their minute rollups, events and
scalars, in ClickHouse's own engine embedded in this process (``chdb``) or on a server or a
cluster (``clickhouse-connect``, over HTTP). Needs the ``clickhouse`` extra; importing
``tunescope.store`` never imports this package.

What goes where
---------------
A store on ClickHouse has two databases, as W&B keeps MySQL beside ClickHouse:

* **SQL** (PostgreSQL for a team, SQLite embedded and in tests) keeps the metadata: projects,
  runs, trials, series, tokens, batch ids and kept usage. These are few rows that change, and
  the contract needs transactions on them: a trial's state moves ``running`` → ended once,
  conditionally (``only_if_running``); a trial or run is created once by its key or name when
  two writers race; a token revoked is refused by the next request; a batch id is written
  once, and the same id with other content is a Conflict; ids are integers a sequence gives.
  ClickHouse has none of these (no transactions, no unique keys; a ReplacingMergeTree with
  versions converges only at merge time, so every read would need ``FINAL`` and every
  conditional update a race).
* **ClickHouse** keeps what grows with time and never changes once written: samples
  ``(series_id, t, value)`` with their minute rollups, events and scalars, keyed by the
  integer ids SQL gave their series and trials.

Layout
------
``_url.py`` (the URLs and the server's password), ``_transport.py`` (the one interface:
query, insert with settings, command), ``_chdb.py`` and ``_http.py`` (its two
implementations), ``_native.py`` (the Native format the embedded engine is given),
``_errors.py`` (ClickHouse's errors as ours), ``_ddl.py`` (the tables, on one server or a
cluster), ``_bulk.py`` (:class:`BulkStore`: inserts deduplicated by token, and the reads) and
``_store.py`` (the store a ``clickhouse(s)://…?meta=URL`` or ``chdb:PATH`` URL opens: the SQL
store of its metadata with the bulk methods going to a BulkStore, a write in three steps).
The SQL and DDL are written once; only the transport differs.
"""

from __future__ import annotations

from tunescope.store.clickhouse._bulk import MINUTE, BulkStore
from tunescope.store.clickhouse._ddl import DEDUP_WINDOW, TABLES, migrate_last_value, schema
from tunescope.store.clickhouse._errors import translate
from tunescope.store.clickhouse._transport import Column, Transport
from tunescope.store.clickhouse._url import Embedded, Server, parse_url

__all__ = [
    "DEDUP_WINDOW",
    "MINUTE",
    "TABLES",
    "BulkStore",
    "Column",
    "Embedded",
    "Server",
    "Transport",
    "connect",
    "migrate_last_value",
    "open_bulk",
    "parse_url",
    "schema",
    "translate",
]


def connect(url: str) -> Transport:
    """The transport to the ClickHouse a URL names (see ``_url.py``): ``chdb:PATH`` the
    embedded engine, ``clickhouse(s)://`` a server. ConfigError for a URL of another form."""
    target = parse_url(url)
    if isinstance(target, Embedded):
        from tunescope.store.clickhouse._chdb import ChdbTransport

        return ChdbTransport(target.path, target.database, url=target.url)
    from tunescope.store.clickhouse._http import HttpTransport

    return HttpTransport(target)


def open_bulk(url: str, *, create: bool = True) -> BulkStore:
    """A :class:`BulkStore` on the ClickHouse ``url`` names, its tables created if missing."""
    transport = connect(url)
    try:
        return BulkStore(transport, create=create)
    except BaseException:
        transport.close()
        raise
