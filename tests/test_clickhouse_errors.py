"""ClickHouse's errors, as ``classify`` (the one policy every writer follows) must see them:
what waiting may cure waits, only an insert's data proven wrong is set aside, and a refused
user waits as PostgreSQL's does. Real errors where they are cheap to provoke (the embedded
engine read-only, timed out, a syntax error, an unknown table; a server that refuses the
connection or answers as a proxy in trouble does), else the driver's own exception classes
built with the server's error number, as a server would send it."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from typing import ClassVar

import chdb
import numpy as np
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from clickhouse_helpers import chdb_engine, fresh_bulk
from tunescope.errors import Rejected, SchemaError, StoreError, StoreUnavailable
from tunescope.store.clickhouse import BulkStore, Column, connect, translate
from tunescope.store.clickhouse._chdb import ChdbTransport
from tunescope.store.produce._spool import classify

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

T0 = 1_700_000_000.0
WHERE = "clickhouse://u@ch:8123/db"


def _server_error(code: int, name: str) -> DatabaseError:
    """The exception clickhouse-connect raises for a server's error ``code``."""
    return DatabaseError(
        f"Received ClickHouse exception, code: {code}, server response: "
        f"Code: {code}. DB::Exception: it went wrong. ({name})",
        code=code,
        name=name,
    )


def _chdb_error(code: int, name: str) -> Exception:
    """The exception the embedded engine raises for its error ``code``."""
    return chdb.ChdbError(f"Code: {code}. DB::Exception: it went wrong. ({name})")


WAITS = [
    (159, "TIMEOUT_EXCEEDED"),
    (164, "READONLY"),
    (202, "TOO_MANY_SIMULTANEOUS_QUERIES"),
    (209, "SOCKET_TIMEOUT"),
    (210, "NETWORK_ERROR"),
    (241, "MEMORY_LIMIT_EXCEEDED"),
    (242, "TABLE_IS_READ_ONLY"),
    (243, "NOT_ENOUGH_SPACE"),
    (252, "TOO_MANY_PARTS"),
    (319, "UNKNOWN_STATUS_OF_INSERT"),
    (999, "KEEPER_EXCEPTION"),
]


@pytest.mark.parametrize(("code", "name"), WAITS)
@pytest.mark.parametrize("driver", [_server_error, _chdb_error])
def test_what_waiting_cures_waits(driver: object, code: int, name: str) -> None:
    for inserting in (False, True):
        mapped = translate(driver(code, name), WHERE, inserting=inserting)  # type: ignore[operator]
        assert isinstance(mapped, StoreUnavailable) and classify(mapped) == "retry", mapped
        assert str(mapped).startswith(WHERE + ": ") and name in str(mapped)


@pytest.mark.parametrize(
    "exc",
    [
        OperationalError("Error HTTPConnectionPool: Connection refused executing HTTP request"),
        OperationalError("Network Error: timed out"),
        DatabaseError("HTTP driver received HTTP status 502, server response: Bad Gateway"),
        DatabaseError("HTTP driver received HTTP status 503"),
        DatabaseError("HTTP driver received HTTP status 429, server response: slow down"),
        ConnectionResetError("reset by peer"),
    ],
)
def test_transport_errors_wait(exc: Exception) -> None:
    mapped = translate(exc, WHERE, inserting=True)
    assert isinstance(mapped, StoreUnavailable) and classify(mapped) == "retry"


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (27, "CANNOT_PARSE_INPUT_ASSERTION_FAILED"),
        (117, "INCORRECT_DATA"),
        (70, "CANNOT_CONVERT_TYPE"),
    ],
)
def test_an_inserts_data_proven_wrong_is_rejected_and_nothing_else(code: int, name: str) -> None:
    mapped = translate(_server_error(code, name), WHERE, inserting=True)
    assert isinstance(mapped, Rejected) and classify(mapped) == "rejected"
    # the same number on a query is not the batch's fault
    assert classify(translate(_server_error(code, name), WHERE)) == "retry"


@pytest.mark.parametrize(
    ("code", "name", "cls"),
    [
        (62, "SYNTAX_ERROR", StoreError),  # our SQL, not the batch: it waits for a fix
        (53, "TYPE_MISMATCH", StoreError),  # a table not as we made it
        (516, "AUTHENTICATION_FAILED", StoreError),  # as PostgreSQL's refused password
        (192, "UNKNOWN_USER", StoreError),
        (497, "ACCESS_DENIED", StoreError),
        (60, "UNKNOWN_TABLE", SchemaError),
        (81, "UNKNOWN_DATABASE", SchemaError),
    ],
)
def test_other_errors_wait_as_store_errors(code: int, name: str, cls: type) -> None:
    mapped = translate(_server_error(code, name), WHERE, inserting=True)
    assert type(mapped) is cls and classify(mapped) == "retry"


def test_a_secret_never_shows() -> None:
    mapped = translate(
        OperationalError("auth with hunter2 failed\nline two"), WHERE, secret="hunter2"
    )
    assert "hunter2" not in str(mapped) and "\n" not in str(mapped)


# ------------------------------------------------------------------ for real, embedded
@pytest.fixture
def bulk() -> Iterator[BulkStore]:
    with fresh_bulk("embedded") as b:
        yield b


def test_embedded_read_only_waits(bulk: BulkStore) -> None:
    ro = ChdbTransport(bulk.transport.path, bulk.transport.database)  # type: ignore[attr-defined]
    try:
        ro.command("SET readonly = 1")
        with pytest.raises(StoreUnavailable, match="READONLY") as caught:
            ro.insert("samples", [Column("series_id", "UInt64", np.array([1]))])
        assert classify(caught.value) == "retry"
    finally:
        ro.close()


def test_embedded_timeout_waits(bulk: BulkStore) -> None:
    with pytest.raises(StoreUnavailable, match="TIMEOUT_EXCEEDED") as caught:
        bulk.transport.query(
            "SELECT count() FROM numbers(100000000000) SETTINGS max_execution_time = 0.05"
        )
    assert classify(caught.value) == "retry"


def test_embedded_errors_of_ours_wait(bulk: BulkStore) -> None:
    with pytest.raises(StoreError, match="SYNTAX_ERROR") as syntax:
        bulk.transport.query("SELEC 1")
    with pytest.raises(SchemaError, match="UNKNOWN_TABLE") as table:
        bulk.transport.insert("nothere", [Column("x", "UInt64", np.array([1]))])
    assert [classify(syntax.value), classify(table.value)] == ["retry", "retry"]
    assert not isinstance(syntax.value, (StoreUnavailable, Rejected))


def test_embedded_insert_of_data_that_cannot_be_held_is_rejected(bulk: BulkStore) -> None:
    """Our checks keep such data from being sent; were one to slip by, the engine's refusal
    sets that batch aside (and only that one)."""
    with pytest.raises(Rejected, match="CANNOT_PARSE_TEXT") as caught:
        bulk.transport.insert(
            "samples",
            [
                Column("series_id", "String", ["7", "seven"]),
                Column("t", "Int64", np.array([1, 2])),
                Column("value", "Float32", np.array([1.0, 2.0], dtype=np.float32)),
            ],
        )
    assert classify(caught.value) == "rejected"
    assert bulk.read_samples(7)[0].size == 0  # nothing of it was kept


# ------------------------------------------------------------------ for real, over HTTP
def test_a_server_that_refuses_connections_waits() -> None:
    t = connect("clickhouse://u@127.0.0.1:9/db")  # discard: nothing listens
    try:
        with pytest.raises(
            StoreUnavailable, match=re.escape("clickhouse://u@127.0.0.1:9/db: ")
        ) as caught:
            BulkStore(t)
        assert classify(caught.value) == "retry"
    finally:
        t.close()


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 503
    headers_out: ClassVar[dict[str, str]] = {}
    body = b"Service Unavailable"

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(self.status)
        for k, v in self.headers_out.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "headers", "body", "cls"),
    [
        (503, {}, b"Service Unavailable", StoreUnavailable),  # a proxy in trouble
        (502, {}, b"Bad Gateway", StoreUnavailable),
        (
            500,
            {"X-ClickHouse-Exception-Code": "202"},
            b"Code: 202. DB::Exception: Too many simultaneous queries. "
            b"(TOO_MANY_SIMULTANEOUS_QUERIES)",
            StoreUnavailable,
        ),
        (
            500,
            {"X-ClickHouse-Exception-Code": "164"},
            b"Code: 164. DB::Exception: Cannot execute query in readonly mode. (READONLY)",
            StoreUnavailable,
        ),
        (
            401,
            {"X-ClickHouse-Exception-Code": "516"},
            b"Code: 516. DB::Exception: u: Authentication failed. (AUTHENTICATION_FAILED)",
            StoreError,
        ),
    ],
)
def test_what_a_server_answers_over_http(
    status: int, headers: dict[str, str], body: bytes, cls: type
) -> None:
    handler = type("H", (_Answer,), {"status": status, "headers_out": headers, "body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    t = connect(f"clickhouse://u@127.0.0.1:{server.server_address[1]}/db")
    try:
        with pytest.raises(StoreError) as caught:
            t.query("SELECT 1")
        assert type(caught.value) is cls, caught.value
        assert classify(caught.value) == "retry"
    finally:
        t.close()
        server.shutdown()
        server.server_close()
        thread.join()
