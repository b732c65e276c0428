"""The server transport: a ClickHouse server over HTTP(S), through ``clickhouse-connect``.

The client is made on the first call (making it asks the server its version), so a server
that is away fails that call with StoreUnavailable rather than the constructor. No session id
is sent: a ClickHouse session takes one query at a time, and the client's pool lets threads
query side by side. A call waits at most :data:`CONNECT_TIMEOUT_S` to connect and
:data:`TIMEOUT_S` for the answer, then raises StoreUnavailable: a stopped or partitioned server
never holds a writer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.errors import StoreUnavailable
from tunescope.store.clickhouse._errors import translate
from tunescope.store.clickhouse._native import encode_block
from tunescope.store.clickhouse._transport import Column, Params, Transport
from tunescope.store.clickhouse._url import Server

__all__ = ["CONNECT_TIMEOUT_S", "TIMEOUT_S", "HttpTransport"]

# every error of the driver reaches our caller, translated: its own "unexpected exception" lines
# go to the application's handlers if it has any, never to stderr by default
logging.getLogger("clickhouse_connect").addHandler(logging.NullHandler())

CONNECT_TIMEOUT_S = 5.0
TIMEOUT_S = 30.0


class HttpTransport(Transport):
    """A ClickHouse server (see ``_url.py`` for its URL and password)."""

    def __init__(self, server: Server, *, client: Any = None) -> None:
        """``client``: a clickhouse-connect client already made, used instead of one to
        ``server`` (the tests give one on the driver's own embedded backend, so that the
        calls this transport makes run for real without a server)."""
        self.url = server.url
        self.database = server.database
        self.cluster = server.cluster
        self._server = server
        self._secret = server.password() or None  # read now: a bad password file says so now
        self._client: Any = client
        self._closed = False
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self.url}: the transport is closed")
            if self._client is None:
                import clickhouse_connect  # the extra's: imported only when used

                s = self._server
                try:
                    self._client = clickhouse_connect.get_client(
                        host=s.host,
                        port=s.port,
                        username=s.user,
                        password=self._secret or "",
                        secure=s.tls,
                        ca_cert=s.ca_bundle(),
                        connect_timeout=CONNECT_TIMEOUT_S,
                        send_receive_timeout=TIMEOUT_S,
                        autogenerate_session_id=False,
                        query_retries=0,
                    )
                except Exception as exc:
                    raise translate(exc, self.url, secret=self._secret) from None
            return self._client

    def query(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        client = self._get()
        try:
            return [tuple(r) for r in client.query(sql, parameters=dict(params or {})).result_rows]
        except Exception as exc:
            raise translate(exc, self.url, secret=self._secret) from None

    def columns(self, sql: str, params: Params | None = None) -> list[npt.NDArray[Any]]:
        """The columns of a SELECT of numbers with no NULL, as numpy arrays."""
        client = self._get()
        try:
            result = client.query(sql, parameters=dict(params or {}))
            return [np.asarray(c) for c in result.result_columns] or [
                np.empty(0) for _ in result.column_names
            ]
        except Exception as exc:
            raise translate(exc, self.url, secret=self._secret) from None

    def insert(
        self, table: str, columns: Sequence[Column], settings: Mapping[str, Any] | None = None
    ) -> None:
        # one Native block, as the embedded engine is given: the same bytes on both transports
        # (and the rollups' argMax state, a type the driver's own encoder does not write)
        client = self._get()
        try:
            client.raw_insert(
                f"{self.database}.{table}",
                [c.name for c in columns],
                encode_block(columns),
                settings=dict(settings or {}),
                fmt="Native",
            )
        except Exception as exc:
            raise translate(exc, self.url, inserting=True, secret=self._secret) from None

    def command(self, sql: str) -> None:
        client = self._get()
        try:
            client.command(sql)
        except Exception as exc:
            raise translate(exc, self.url, secret=self._secret) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a pool that is already gone
                pass
