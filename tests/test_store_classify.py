"""Rule 1 of issue 18: a batch is set aside only on proof that it is wrong. One function,
``classify``, decides for every writer; the drivers' errors are translated to our classes at
the boundary (``store/sql/_postgres.py``, ``store/sql/_sqlite.py``,
``store/remote/_client.py``). A test per class: real driver exceptions (provoked for real
where it is cheap, else built with their SQLSTATE or result code), and what the Writer and
replay do with each verdict."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import PG_URL, pg_schema
from fault_helpers import SqliteLock
from tunescope.errors import (
    AccessDenied,
    Conflict,
    CorruptData,
    NotFound,
    Rejected,
    SchemaError,
    StoreError,
    StoreUnavailable,
)
from tunescope.store import Batch, TrialEnd, TrialSpec, new_key, open_store
from tunescope.store.produce._spool import classify, replay, spool_dir
from tunescope.store.produce._writer import Writer
from tunescope.store.remote._client import INGEST_PATH, Client
from tunescope.store.sql._postgres import PostgresStore
from tunescope.store.sql._sqlite import SQLiteStore

T0 = 1_700_000_000.0


def spec() -> TrialSpec:
    return TrialSpec(key=new_key(), run="classify", start=T0)


def batch(sp: TrialSpec, i: int, **kw: Any) -> Batch:
    return Batch(sp.key, samples=(("cpu.util", None, None, T0 + i, float(i)),), **kw)


# ------------------------------------------------------------------ the one function
def test_only_proof_sets_a_batch_aside() -> None:
    assert classify(Rejected("sample is not a finite number")) == "rejected"
    assert classify(Conflict("batch id written before with other content")) == "rejected"
    assert classify(AccessDenied("refused the token")) == "refused"
    waits = [
        StoreUnavailable("down"),
        NotFound("trial not yet"),
        SchemaError("newer version"),
        CorruptData("bad chunk"),  # the store's damage, not the batch's
        StoreError("constraint failed"),
        RuntimeError("a bug of ours"),
        OSError("disk"),
    ]
    assert [classify(e) for e in waits] == ["retry"] * len(waits)


# ------------------------------------------------------------------ PostgreSQL
WAIT_STATES = [
    "08000", "08003", "08006",  # connection exception
    "53100", "53200", "53300",  # disk full, out of memory, too many connections
    "57P01", "57P02", "57P03", "57014",  # admin/crash shutdown, cannot connect now, canceled
    "58000", "58030",  # system error, I/O error
    "25006",  # read-only transaction: a standby after a failover
    "40001", "40P01",  # serialization failure, deadlock
    "55P03",  # lock not available
]  # fmt: skip


def _pg() -> PostgresStore:
    """A PostgresStore object for its translation only (nothing is connected)."""
    st = PostgresStore.__new__(PostgresStore)
    st.url = "postgresql://db/x"
    st._secret = None
    return st


@pytest.mark.parametrize("state", WAIT_STATES)
def test_postgres_states_that_waiting_cures_are_unavailable(state: str) -> None:
    exc = psycopg.errors.lookup(state)(f"server says {state}")
    assert exc.sqlstate == state
    mapped = _pg()._translate(exc)
    assert isinstance(mapped, StoreUnavailable), (state, mapped)
    assert classify(mapped) == "retry"


@pytest.mark.parametrize("state", ["22003", "22021", "22P05", "54000"])
def test_postgres_states_that_prove_the_value_wrong_are_rejected(state: str) -> None:
    mapped = _pg()._translate(psycopg.errors.lookup(state)("bad value"))
    assert isinstance(mapped, Rejected) and classify(mapped) == "rejected"


def test_postgres_other_errors_wait() -> None:
    for exc in (
        psycopg.errors.lookup("23505")("duplicate key"),  # not raised on purpose: a race
        psycopg.errors.lookup("XX000")("internal error"),
        psycopg.OperationalError("the connection is lost"),
    ):
        mapped = _pg()._translate(exc)
        assert isinstance(mapped, StoreError) and classify(mapped) == "retry", exc
    assert isinstance(_pg()._translate(psycopg.errors.UndefinedTable("x")), SchemaError)


@pytest.fixture
def pg_url() -> Iterator[str]:
    if not PG_URL:
        pytest.skip("TUNESCOPE_TEST_POSTGRES is not set")
    with pg_schema() as url:
        open_store(url).close()
        yield url


def _with(url: str, **settings: str) -> str:
    extra = "".join(f"%20-c{k}%3D{v}" for k, v in settings.items())
    return url + extra


def test_postgres_read_only_for_real_waits(pg_url: str) -> None:
    sp = spec()
    with open_store(_with(pg_url, default_transaction_read_only="on")) as st:
        with pytest.raises(StoreUnavailable, match="read-only") as caught:
            st.write(batch(sp, 0, spec=sp))
        assert classify(caught.value) == "retry"
    with open_store(pg_url) as st, pytest.raises(NotFound):  # nothing of it was kept
        st.trial_by_key(sp.key)


def test_postgres_lock_and_statement_timeouts_for_real_wait(pg_url: str) -> None:
    sp = spec()
    with open_store(pg_url) as st:
        st.write(batch(sp, 0, spec=sp))
    holder = psycopg.connect(pg_url)
    try:
        holder.execute("LOCK TABLE batches IN ACCESS EXCLUSIVE MODE")
        for settings, state in (
            ({"lock_timeout": "200"}, "55P03"),
            ({"statement_timeout": "200"}, "57014"),
        ):
            with (
                open_store(_with(pg_url, **settings)) as st,
                pytest.raises(StoreUnavailable) as caught,
            ):
                st.write(batch(sp, 1))
            cause = caught.value.__cause__
            assert isinstance(cause, psycopg.Error) and cause.sqlstate == state
            assert classify(caught.value) == "retry"
    finally:
        holder.rollback()
        holder.close()
    with open_store(pg_url) as st:
        st.write(batch(sp, 1))  # once the lock is gone it lands


def test_postgres_nul_and_out_of_range_for_real_are_rejected(pg_url: str) -> None:
    sp = spec()
    with open_store(pg_url) as st:
        st.write(batch(sp, 0, spec=sp))
        nul = Batch(sp.key, events=(("mark", T0, "a\x00b", None, None, None, None),))
        with pytest.raises(Rejected):
            st.write(nul)
        huge = Batch(sp.key, end=TrialEnd("failed", T0 + 1, exit_code=2**70))
        with pytest.raises(Rejected):
            st.write(huge)


# ------------------------------------------------------------------ SQLite
def _sqlite_error(cls: type[sqlite3.Error], msg: str, code: int) -> sqlite3.Error:
    exc = cls(msg)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("code", "msg"),
    [
        (5, "database is locked"),
        (6, "database table is locked"),
        (7, "out of memory"),
        (8, "attempt to write a readonly database"),
        (8 | (3 << 8), "attempt to write a readonly database"),  # READONLY_ROLLBACK
        (10, "disk I/O error"),
        (10 | (4 << 8), "disk I/O error"),  # IOERR_WRITE
        (13, "database or disk is full"),
        (14, "unable to open database file"),
        (15, "locking protocol"),
    ],
)
def test_sqlite_codes_that_waiting_cures_are_unavailable(code: int, msg: str) -> None:
    mapped = SQLiteStore._translate_static(
        _sqlite_error(sqlite3.OperationalError, msg, code), "store.db"
    )
    assert isinstance(mapped, StoreUnavailable) and classify(mapped) == "retry"


def test_sqlite_readonly_full_busy_and_toobig_for_real(tmp_path: Path) -> None:
    """Real sqlite3 exceptions, through the store's translation."""
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v BLOB)")
    conn.commit()
    conn.close()

    def raised(c: sqlite3.Connection, stmt: str, *args: Any) -> StoreError:
        with pytest.raises(sqlite3.Error) as caught:
            c.execute(stmt, args)
            c.commit()
        return SQLiteStore._translate_static(caught.value, str(path))

    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    mapped = raised(ro, "INSERT INTO t VALUES (1)")
    assert isinstance(mapped, StoreUnavailable) and "readonly" in str(mapped)
    ro.close()

    full = sqlite3.connect(path)
    count = full.execute("PRAGMA page_count").fetchone()[0]
    full.execute(f"PRAGMA max_page_count = {count}")
    mapped = raised(full, "INSERT INTO t VALUES (?)", b"x" * 100_000)
    assert isinstance(mapped, StoreUnavailable) and "full" in str(mapped)
    full.rollback()
    full.close()

    big = sqlite3.connect(path)
    big.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000)
    mapped = raised(big, "INSERT INTO t VALUES (?)", b"x" * 5000)
    assert isinstance(mapped, Rejected) and classify(mapped) == "rejected"
    big.close()

    with SqliteLock(path):
        busy = sqlite3.connect(path, timeout=0.05)
        mapped = raised(busy, "INSERT INTO t VALUES (1)")
        busy.close()
    assert isinstance(mapped, StoreUnavailable) and "locked" in str(mapped)


def test_sqlite_corrupt_file_is_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(b"this is not a database" * 200)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        sqlite3.connect(path).execute("SELECT * FROM sqlite_master").fetchall()
    mapped = SQLiteStore._translate_static(caught.value, str(path))
    assert isinstance(mapped, SchemaError) and classify(mapped) == "retry"


def test_a_sqlite_contract_violation_is_rejected(sqlite_url: str) -> None:
    sp = spec()
    with open_store(sqlite_url) as st:
        st.write(batch(sp, 0, spec=sp))
        bad = Batch(sp.key, events=(("mark", T0, "x", None, None, None, {"f": float("nan")}),))
        with pytest.raises(Rejected, match="JSON values"):
            st.write(bad)


# ------------------------------------------------------------------ HTTP
def _client() -> Client:
    return Client("http://127.0.0.1:9/p")  # opening sends nothing


def _answer(code: str = "", message: str = "") -> dict[str, Any] | None:
    return {"error": {"code": code, "message": message}} if code else None


@pytest.mark.parametrize("status", [400, 409, 413, 422])
def test_http_ingest_validation_proves_a_batch_wrong(status: int) -> None:
    c = _client()
    for answer in (_answer("invalid", "events[0].t must be a finite number"), None):
        exc = c._error(status, answer, INGEST_PATH)
        assert isinstance(exc, Rejected) and classify(exc) == "rejected", (status, answer)
    other = c._error(422, _answer("invalid", "bins"), "/api/v1/store/list_runs")
    assert isinstance(other, ValueError)  # a bad argument elsewhere stays the contract's


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (500, ""),
        (500, "store_error"),
        (500, "internal"),
        (502, ""),
        (503, "store_unavailable"),
        (504, ""),
        (429, ""),
        (429, "too_many_attempts"),
        (429, "too_busy"),
    ],
)
def test_http_5xx_and_429_wait(status: int, code: str) -> None:
    exc = _client()._error(status, _answer(code, "try later"), INGEST_PATH)
    assert isinstance(exc, StoreUnavailable) and classify(exc) == "retry", exc


def test_http_401_403_are_refused_and_other_codes_keep_their_class() -> None:
    c = _client()
    for status, code in ((401, "unauthorized"), (403, "forbidden"), (401, ""), (403, "")):
        exc = c._error(status, _answer(code), INGEST_PATH)
        assert isinstance(exc, AccessDenied) and classify(exc) == "refused"
    assert isinstance(c._error(404, _answer("not_found", "no trial"), INGEST_PATH), NotFound)
    assert isinstance(c._error(500, _answer("schema_error", "newer"), INGEST_PATH), SchemaError)
    rejected = c._error(422, _answer("rejected", "event data"), "/api/v1/store/add_events")
    assert isinstance(rejected, Rejected)


def test_http_timeout_for_real_waits() -> None:
    """A server that accepts and never answers: StoreUnavailable after the timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        sp = spec()
        with open_store(f"http://127.0.0.1:{port}/p", timeout=0.5) as st:
            t = time.monotonic()
            with pytest.raises(StoreUnavailable, match="did not answer") as caught:
                st.write(batch(sp, 0, spec=sp))
            assert time.monotonic() - t < 5
        assert classify(caught.value) == "retry"
    finally:
        stop.set()
        th.join(5)
        for s in held:
            s.close()
        srv.close()


# ------------------------------------------------------------------ what writers do with it
class Scripted:
    """A store whose write raises the given errors in turn, then writes to ``real``; a batch
    whose id is in ``wrong`` is rejected every time, as a store rejects what is wrong."""

    def __init__(
        self, real: Any, errors: list[BaseException], wrong: frozenset[str] = frozenset()
    ) -> None:
        self.real, self.errors, self.wrong, self.calls = real, errors, wrong, 0

    def write(self, b: Batch) -> int:
        self.calls += 1
        if b.id in self.wrong:
            raise Rejected(f"batch {b.id} is wrong")
        if self.errors:
            raise self.errors.pop(0)
        return int(self.real.write(b))

    def trial_by_key(self, key: str) -> Any:
        return self.real.trial_by_key(key)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "exc",
    [
        StoreUnavailable("read-only"),
        StoreError("HTTP 500"),
        SchemaError("x"),
        CorruptData("x"),
        RuntimeError("bug"),
        NotFound("trial not yet"),
    ],
)
def test_the_writer_retries_what_is_not_proven_wrong(
    sqlite_url: str, tmp_path: Path, exc: BaseException
) -> None:
    real = open_store(sqlite_url)
    sp = spec()
    store = Scripted(real, [exc, exc])
    w = Writer(sqlite_url, spec=sp, spool_root=tmp_path / "spool", store_factory=lambda u: store)  # type: ignore[arg-type,return-value]
    for i in range(5):
        w.put(batch(sp, i))
    assert w.flush(30) and w.close(5)
    assert w.rejected == 0 and w.written == 5
    tid = real.trial_by_key(sp.key).id
    (s,) = real.list_series(tid, "cpu.util")
    assert real.read_samples(s.id)[1].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    real.close()


def test_replay_sets_aside_only_rejected_and_keeps_the_rest(
    sqlite_url: str, tmp_path: Path
) -> None:
    from tunescope.store.produce._spool import SpoolFile

    root = tmp_path / "spool"
    sp = spec()
    f = SpoolFile.create(sqlite_url, root)
    batches = [batch(sp, i, spec=sp) for i in range(4)]
    f.append(batches)
    f.close()
    real = open_store(sqlite_url)
    store = Scripted(real, [StoreError("HTTP 500"), StoreUnavailable("read-only")])
    store.wrong = frozenset({batches[1].id})
    first = replay(sqlite_url, store.write, root=root)  # 500: waits; 1: rejected; 2: away
    assert (first.written, first.rejected, first.kept, first.files_done) == (0, 1, 2, 0)
    again = replay(sqlite_url, store.write, root=root)
    assert (again.written, again.rejected, again.kept, again.files_done) == (3, 1, 0, 1)
    tid = real.trial_by_key(sp.key).id
    (s,) = real.list_series(tid, "cpu.util")
    assert real.read_samples(s.id)[1].tolist() == [0.0, 2.0, 3.0]
    kept = list((spool_dir(sqlite_url, root) / "rejected").iterdir())
    assert kept and all(batches[1].id.encode() in k.read_bytes() for k in kept)
    real.close()
