"""Shared fixtures: a real SQLite file, and a real PostgreSQL schema when
TUNESCOPE_TEST_POSTGRES names a server (``.ci/run`` sets it); for the contract suite, also
an HTTP store on a real tunescope server."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import pytest
from _pytest.logging import caplog_records_key

from clickhouse_helpers import chdb_engine, engine_owns  # noqa: F401  (chdb_engine: the session's)
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


LEAK_GRACE_S = 5.0
"""How long a test's processes may take to end after it (a sampler writing its last batch)."""


def _ours(marker: bytes, fixtures: set[int]) -> dict[int, str]:
    """Processes this test may have started, pid -> command line: the descendants of this
    process, and any process whose environment carries ``marker`` (this test's spool folder,
    which its subprocesses inherit), so that a sampler reparented to init when its training
    exited is found too. What a process of ``fixtures`` (those that ran before the test: a
    module's Ray cluster, a session's server) starts is that fixture's, not the test's.
    Zombies hold nothing and are left out."""
    me = psutil.Process()
    found: dict[int, psutil.Process] = {}
    todo = [me]
    while todo:
        with contextlib.suppress(psutil.Error):
            for child in todo.pop().children():
                if child.pid not in fixtures and child.pid not in found:
                    found[child.pid] = child
                    todo.append(child)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in found and int(entry) != me.pid:
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found[int(entry)] = psutil.Process(int(entry))
            except (OSError, psutil.Error):
                continue
    out: dict[int, str] = {}
    for pid, p in found.items():
        try:
            if pid not in fixtures and p.status() != psutil.STATUS_ZOMBIE:
                out[pid] = " ".join(p.cmdline())[:300]
        except psutil.Error:
            continue
    return out


def _fds() -> dict[int, str]:
    """This process's open file descriptors, fd -> what it points at (a socket with its
    addresses, when it has any)."""
    out: dict[int, str] = {}
    for entry in os.listdir("/proc/self/fd"):
        try:
            out[int(entry)] = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:
            continue  # the descriptor listdir itself used, closed meanwhile
    if any(t.startswith("socket:") for t in out.values()):
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process().net_connections(kind="all"):
                if c.fd in out and (c.laddr or c.raddr):
                    out[c.fd] += f" {c.laddr} -> {c.raddr} {c.status}"
    return out


def _kept_fd(target: str) -> bool:
    """Descriptors a library legitimately keeps for the life of the process, opened lazily by
    the first test that needs them: the system's random source, the kernel's inotify and
    epoll instances of event loops that live on, shared-memory of libraries (torch), libuuid's
    clock file, matplotlib's cached fonts, the counters each thread of the embedded
    ClickHouse's pools reads for as long as it lives (``/proc/PID/task/TID/stat``) and the
    files of that engine's folder its background merges open after a test inserted."""
    return (
        target in ("/dev/urandom", "/dev/random", "/dev/null", "/var/lib/libuuid/clock.txt")
        or target.startswith(("anon_inode:[eventpoll]", "anon_inode:inotify", "/dev/shm/"))
        or "/matplotlib/mpl-data/fonts/" in target  # its font cache keeps them open
        or re.fullmatch(rf"/proc/{os.getpid()}/task/\d+/(stat|schedstat|io)", target) is not None
        or engine_owns(target)
    )


def _listeners(fixtures: set[int]) -> set[int]:
    """The ports of the sockets of wider-scoped fixtures' processes (a module's Ray cluster,
    and what it started since), listening or serving: a library's connection to one of them,
    opened lazily by the first test that needs it, is that fixture's (it closes with it)."""
    out: set[int] = set()
    with contextlib.suppress(psutil.Error):
        for c in psutil.net_connections(kind="inet"):
            if not c.laddr or c.pid is None:  # listening, or serving one of our connections
                continue
            with contextlib.suppress(psutil.Error):
                tree = {c.pid, *(p.pid for p in psutil.Process(c.pid).parents())}
                if tree & fixtures:
                    out.add(c.laddr.port)
    return out


@pytest.fixture(scope="module", autouse=True)
def thaw() -> Iterator[None]:
    """After a module, what :func:`no_leaks` froze is collectable again: the module's fixtures
    (a Ray cluster, a server) may have left cycles among it. The next test's collection
    looks at the whole heap once."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def no_leaks(spool: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that leaves a process or a file descriptor behind for the next one.

    Processes: those it started (:func:`_ours`) still alive :data:`LEAK_GRACE_S` after it
    ended; they are killed, and named by command line. A test whose trial's sampler outlives
    the training waits for it (``fault_helpers.settled``). Descriptors: those of this process
    open after the test that were not before it, named by what they point at. What session
    and module fixtures started before the test is not the test's."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "clickhouse" in callspec.params.values():
        request.getfixturevalue("chdb_engine")  # the session's, started before this test
    marker = f"TUNESCOPE_SPOOL={spool}".encode()
    before_procs = set(_ours(marker, set()))
    before_fds = _fds()
    yield
    # pytest keeps the test's log records until its report is made: a record's arguments (an
    # exception, whose frames hold a store) are not the test's leak. Its text is kept.
    for records in request.node.stash.get(caplog_records_key, {}).values():
        for r in records:
            r.msg, r.args, r.exc_info = r.getMessage(), None, None
    gc.collect()  # what only a reference cycle holds (an exception's frames) closes now
    # What is left lives on (modules, caches, wider fixtures): frozen, the next collection
    # looks only at what the next test makes. A full one over the whole heap took 0.17 s a
    # test in make check's tests (2/3 of their time), more with the ML libraries loaded.
    gc.freeze()
    end = time.monotonic() + LEAK_GRACE_S
    fixtures = before_procs | FIXTURE_PIDS
    while True:
        left = _ours(marker, fixtures)
        if not left or time.monotonic() > end:
            break
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()

    def still_open() -> dict[str, str]:
        return {
            fd: target
            for fd, target in _fds().items()
            if before_fds.get(fd) != target and not _kept_fd(target)
        }

    # what a library's own thread closes a moment after the test's last call returned (the
    # embedded engine ends a query's pipeline after its result came back) is not a leak:
    # those left are looked at again for up to LEAK_GRACE_S, as processes are
    opened = still_open()
    end = time.monotonic() + LEAK_GRACE_S
    while opened and time.monotonic() < end:
        time.sleep(0.1)
        opened = still_open()
    if any(t.endswith(" ESTABLISHED") for t in opened.values()):
        servers = _listeners(fixtures)
        opened = {
            fd: t
            for fd, t in opened.items()
            if not any(t.endswith(f", port={port}) ESTABLISHED") for port in servers)
        }
    problems = [f"process {pid} still running: {cmd}" for pid, cmd in sorted(left.items())]
    problems += [f"file descriptor {fd} left open: {t}" for fd, t in sorted(opened.items())]
    if problems:
        pytest.fail("the test leaked into the next one:\n  " + "\n  ".join(problems))


SQL_BACKENDS = ["sqlite"] + (["postgresql"] if PG_URL else [])
"""The SQL store backends: a SQLite file, and a PostgreSQL schema when TUNESCOPE_TEST_POSTGRES
names a server. Tests of what only a SQL store has, or that open the store from a second
process, take theirs (:func:`sql_store_url`, :func:`any_sql_store_url`, :func:`sql_store`)."""

BACKENDS = [*SQL_BACKENDS, "clickhouse"]
"""The store backends every contract test runs on: the SQL ones, and ClickHouse's embedded
engine (``chdb``, the ``clickhouse`` extra ``make`` installs) with its metadata in a SQLite
file. That engine opens its folder in one process at a time (the test process holds it): a
test that opens the store from a second one (a CLI command, a server, a training) takes a
SQL backend's fixture, as does one about a SQL store's own storage (chunks, pending rows,
raw retention, old schema versions), each saying why beside it."""


def _clickhouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store on a fresh database of the session's embedded engine (one engine folder per
    process, see clickhouse_helpers), its metadata in a SQLite file of the test's own; the
    database is dropped after."""
    from clickhouse_helpers import engine_folder

    request.getfixturevalue("chdb_engine")
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield f"chdb:{engine_folder()}?database={name}&meta={quote(str(tmp_path / 'meta.db'))}"
    from tunescope.store.clickhouse._chdb import ChdbTransport

    t = ChdbTransport(engine_folder(), "default")
    try:
        t.command(f"DROP DATABASE IF EXISTS {name} SYNC")
    finally:
        t.close()


def _store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    elif request.param == "clickhouse":
        yield from _clickhouse_url(request, tmp_path)
    else:
        yield from _pg_schema_url()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store, once per backend."""
    yield from _store_url(request, tmp_path)


@pytest.fixture(params=SQL_BACKENDS)
def sql_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store, once per SQL backend (see :data:`BACKENDS`)."""
    yield from _store_url(request, tmp_path)


FIXTURE_PIDS: set[int] = set()
"""Processes of session fixtures started lazily (from inside a test's setup, by
``getfixturevalue``): theirs, not the test's (see :func:`no_leaks`)."""


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
        assert server.proc is not None
        FIXTURE_PIDS.add(server.proc.pid)
        yield server


def _any_store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    if request.param != "http":
        yield from _store_url(request, tmp_path)
        return
    server: Server = request.getfixturevalue("http_server")
    project = f"p{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(server.db_url, project))
    yield server.url(project)


@pytest.fixture(params=[*BACKENDS, "http"])
def any_store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The URL of an empty store, once per backend and once as an HTTP store: a project of
    its own on the session's server (:func:`http_server`), with a write token of it in
    $TUNESCOPE_TOKEN."""
    yield from _any_store_url(request, tmp_path, monkeypatch)


@pytest.fixture(params=[*SQL_BACKENDS, "http"])
def any_sql_store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """:func:`any_store_url` over the SQL backends only (see :data:`BACKENDS`)."""
    yield from _any_store_url(request, tmp_path, monkeypatch)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sql_store(sql_store_url: str) -> Iterator[Store]:
    """:func:`store` over the SQL backends only (see :data:`BACKENDS`)."""
    s = open_store(sql_store_url)
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
