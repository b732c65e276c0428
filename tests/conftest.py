"""Shared fixtures: a real SQLite file, and a real PostgreSQL schema when
TUNESCOPE_TEST_POSTGRES names a server (``.ci/run`` sets it); for the contract suite, also
an HTTP store on a real tunescope server."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collect_helpers import Proc
from http_helpers import Server, make_token
from tunescope.store import PooledStore, Store, open_store

PG_URL = os.environ.get("TUNESCOPE_TEST_POSTGRES")


def _pg_schema_url() -> Iterator[str]:
    import psycopg

    assert PG_URL is not None
    schema = f"ts_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


pg_schema = contextlib.contextmanager(_pg_schema_url)
"""``with pg_schema() as url``: the URL of a fresh PostgreSQL schema, dropped after."""


@pytest.fixture(autouse=True)
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test has a spool folder of its own (its subprocesses inherit it), so that no
    test replays, or counts, what another one left."""
    folder = tmp_path / "spool"
    monkeypatch.setenv("TUNESCOPE_SPOOL", str(folder))
    return folder


BACKENDS = ["sqlite"] + (["postgresql"] if PG_URL else [])


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store, once per backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    else:
        yield from _pg_schema_url()


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One tunescope server for the session (uvicorn on a loopback port, tokens required),
    over a fresh PostgreSQL schema when TUNESCOPE_TEST_POSTGRES is set, else over a SQLite
    file. Tests keep apart by project: each gets a project of its own."""
    folder = tmp_path_factory.mktemp("http-server")
    with contextlib.ExitStack() as stack:
        db_url = stack.enter_context(pg_schema()) if PG_URL else str(folder / "server.db")
        server = Server(db_url, folder / "server.log").start()
        stack.callback(server.stop)
        yield server


@pytest.fixture(params=[*BACKENDS, "http"])
def any_store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The URL of an empty store, once per backend and once as an HTTP store: a project of
    its own on the session's server (:func:`http_server`), with a write token of it in
    $TUNESCOPE_TOKEN."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    elif request.param == "postgresql":
        yield from _pg_schema_url()
    else:
        server: Server = request.getfixturevalue("http_server")
        project = f"p{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(server.db_url, project))
        yield server.url(project)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=["direct", "pooled"])
def every_store(any_store_url: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """An empty store of each backend (:func:`any_store_url`), as one store and as the
    server's pool of them: one suite for all."""
    s: Store = (
        open_store(any_store_url)
        if request.param == "direct"
        else PooledStore(lambda: open_store(any_store_url), size=3)
    )
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


@pytest.fixture
def store_file(sqlite_url: str) -> str:
    """The URL of an empty SQLite store that exists (the page opens stores, never creates)."""
    open_store(sqlite_url).close()
    return sqlite_url


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Child processes a test started, killed when it ends."""
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Store]:
    """An open store on a fresh SQLite file, closed after the test."""
    s = open_store(sqlite_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def optuna() -> Any:
    """Optuna at warning verbosity, imported by the tests that use it (not at collection)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna
