"""ClickHouse for the tests: the embedded engine always (one folder per test process, as chdb
runs one engine per process; a fresh database per use), and a real server too when
TUNESCOPE_TEST_CLICKHOUSE names one (``clickhouse://USER@HOST:8123/DB``, its password in
TUNESCOPE_CLICKHOUSE_PASSWORD); the server's cases skip, saying why, without it."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tunescope.errors import StoreError
from tunescope.store.clickhouse import BulkStore, Server, open_bulk, parse_url
from tunescope.store.clickhouse._chdb import ChdbTransport
from tunescope.store.clickhouse._http import HttpTransport

CH_URL = os.environ.get("TUNESCOPE_TEST_CLICKHOUSE")
KINDS = ["embedded", "driver", "server"]
"""The ClickHouses a test may run on (``params=KINDS`` of a fixture): the embedded engine
through its transport; the server's transport (``clickhouse-connect``'s calls, parameters and
inserts) over the driver's own backend on that engine, so that all but the wire runs for real
without a server; a real server."""

_FOLDER: list[str] = []


def engine_folder() -> str:
    """This test process's embedded engine folder (made on first use, under the temp dir)."""
    if not _FOLDER:
        _FOLDER.append(tempfile.mkdtemp(prefix="tunescope-chdb-"))
        atexit.register(shutil.rmtree, _FOLDER[0], ignore_errors=True)
    return _FOLDER[0]


def engine_owns(path: str) -> bool:
    """Whether ``path`` is a file of this test process's embedded engine: the engine opens
    and closes them as its background merges run, after the test that inserted (see
    ``no_leaks``); a store does not hold them."""
    return bool(_FOLDER) and path.startswith(_FOLDER[0] + "/")


@pytest.fixture(scope="session")
def chdb_engine() -> Iterator[str]:
    """The embedded engine, started before the first test that uses it and kept running for
    the session: what it opens once (its pipes, its threads' files) is the session's, not a
    test's (see ``no_leaks``). Its folder. A module uses it with
    ``pytestmark = pytest.mark.usefixtures("chdb_engine")``."""
    keep = ChdbTransport(engine_folder(), "default")
    keep.query("SELECT 1")
    # the engine's first error reads the symbols of every library loaded (for its stack
    # trace) and keeps those files open: let that be now
    with contextlib.suppress(StoreError):
        keep.query("SELECT throwIf(1)")
    yield engine_folder()
    keep.close()


def fresh_url(kind: str) -> str:
    """The URL of a new, empty database on the ClickHouse of ``kind`` (skips the server's
    without TUNESCOPE_TEST_CLICKHOUSE)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    if kind == "embedded":
        return f"chdb:{engine_folder()}?database={name}"
    if not CH_URL:
        pytest.skip(
            "needs TUNESCOPE_TEST_CLICKHOUSE (a ClickHouse server's URL); "
            "the embedded engine runs this test without it"
        )
    parts = urlsplit(CH_URL)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def _driver_bulk() -> BulkStore:
    from clickhouse_connect.driver._chdbclient import ChdbClient

    name = f"t_{uuid.uuid4().hex[:12]}"
    server = parse_url(f"clickhouse://default@localhost/{name}")
    assert isinstance(server, Server)
    return BulkStore(HttpTransport(server, client=ChdbClient(path=engine_folder())))


@contextlib.contextmanager
def fresh_bulk(kind: str) -> Iterator[BulkStore]:
    """A BulkStore on a new database of the ClickHouse of ``kind``, dropped after."""
    bulk = _driver_bulk() if kind == "driver" else open_bulk(fresh_url(kind))
    try:
        yield bulk
    finally:
        with contextlib.suppress(Exception):
            bulk.transport.command(f"DROP DATABASE IF EXISTS {bulk.transport.database} SYNC")
        bulk.close()
