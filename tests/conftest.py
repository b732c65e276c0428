"""Shared fixtures: a real SQLite file, and a real PostgreSQL schema when
TUNESCOPE_TEST_POSTGRES names a server (``.ci/run`` sets it)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from collect_helpers import Proc
from tunescope.store import Store, open_store

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


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
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
