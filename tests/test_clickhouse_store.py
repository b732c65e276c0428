"""A store on ClickHouse as a whole (the contract suite runs on it through the ``store_url``
fixture): its URLs, and a write across its two databases that a crash between them neither
loses nor doubles."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from cli_helpers import cli, one_line_error
from clickhouse_helpers import chdb_engine, engine_folder, fresh_url
from conftest import PG_URL, pg_schema
from tunescope.errors import ConfigError, Conflict, StoreUnavailable
from tunescope.store import Store, open_store
from tunescope.store._url import check_url, redact
from tunescope.store.clickhouse._chdb import ChdbTransport
from tunescope.store.clickhouse._store import PENDING
from tunescope.store.produce._batch import Batch, TrialEnd, TrialSpec, new_key
from tunescope.store.produce._spool import classify

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

T0 = 1_700_000_000.0


def _drop(database: str) -> None:
    t = ChdbTransport(engine_folder(), "default")
    try:
        t.command(f"DROP DATABASE IF EXISTS {database} SYNC")
    finally:
        t.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store on a fresh database of the embedded engine, its metadata in a SQLite file or
    (when TUNESCOPE_TEST_POSTGRES names a server) a fresh PostgreSQL schema."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            meta = str(tmp_path / "meta.db")
        elif PG_URL:
            meta = stack.enter_context(pg_schema())
        else:
            pytest.skip("metadata on PostgreSQL needs TUNESCOPE_TEST_POSTGRES (a server's URL)")
        url = fresh_url("embedded")
        stack.callback(_drop, url.rpartition("database=")[2])
        s = open_store(url + "&meta=" + quote(meta, safe=""))
        stack.callback(s.close)
        yield s


def _counts(store: Store, tid: int, sid: int) -> tuple[int, int, int]:
    return (
        len(store.read_samples(sid)[0]),
        store.count_events(tid),
        len(store.scalars(tid)),
    )


def _batch(key: str, batch_id: str, spec: TrialSpec | None = None) -> Batch:
    return Batch(
        key,
        id=batch_id,
        spec=spec,
        samples=tuple(("gpu.util", "0", None, T0 + i, float(i)) for i in range(50)),
        events=(("checkpoint", T0 + 3, "ck", 7, 2.0, None, {"path": "a"}),),
        scalars=(("loss", 7, T0 + 3, 0.25),),
        heartbeat=T0 + 50,
        end=TrialEnd("completed", T0 + 51),
    )


def test_a_resend_after_a_crash_between_the_bulk_and_its_record_adds_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    spec = TrialSpec(key=key, run="r", start=T0)
    batch = _batch(key, "b-1", spec)
    finish = store._finish_batch  # type: ignore[attr-defined]

    def crash(*args: object) -> None:
        raise RuntimeError("the writer's process died here")

    monkeypatch.setattr(store, "_finish_batch", crash)
    with pytest.raises(RuntimeError):
        store.write(batch)  # the bulk is in ClickHouse, the batch still pending in SQL
    tid = store.trial_by_key(key).id
    sid = store.list_series(tid)[0].id
    assert _counts(store, tid, sid) == (50, 1, 1)
    assert store.get_trial(tid).state != "completed"  # its end was not applied
    monkeypatch.setattr(store, "_finish_batch", finish)
    assert store.write(batch) == tid  # the writer sends it again
    assert _counts(store, tid, sid) == (50, 1, 1)
    assert store.get_trial(tid).state == "completed"
    assert store.write(batch) == tid  # done: a resend is answered from SQL
    assert _counts(store, tid, sid) == (50, 1, 1)
    with pytest.raises(Conflict):
        store.write(Batch(key, id="b-1"))  # the same id, other content


def test_a_pending_batch_sent_with_other_content_is_a_conflict(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = new_key()
    spec = TrialSpec(key=key, run="r", start=T0)

    def crash(*args: object) -> None:
        raise RuntimeError("died")

    monkeypatch.setattr(store, "_finish_batch", crash)
    with pytest.raises(RuntimeError):
        store.write(_batch(key, "b-2", spec))
    monkeypatch.undo()
    with store._tx() as cur:  # type: ignore[attr-defined]
        (digest,) = store._q(cur, "SELECT digest FROM batches").fetchone()  # type: ignore[attr-defined]
    assert digest.startswith(PENDING)
    with pytest.raises(Conflict):
        store.write(Batch(key, id="b-2", samples=(("gpu.util", "0", None, T0, 9.0),)))
    tid = store.trial_by_key(key).id
    assert len(store.read_samples(store.list_series(tid)[0].id)[0]) == 50


def test_urls_name_their_metadata_store_and_hide_its_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"names no metadata store: add \?meta="):
        check_url("clickhouse://u@ch.example:8123/db")
    meta = quote("postgresql://u:s3cret@pg.example/db", safe="")
    url = f"clickhouse://u@ch.example:8123/db?meta={meta}"
    assert check_url(url) == url
    for shown in (redact(url), redact(f"chdb:{tmp_path}?meta={meta}")):
        assert "s3cret" not in shown and "pg.example" in shown
    with pytest.raises(ConfigError, match="meta must name"):
        check_url(f"chdb:{tmp_path}?meta=" + quote("chdb:/x", safe=""))
    # embedded: the metadata in a SQLite file in the engine's folder unless meta says
    name = f"t_{new_key()[:8]}".replace("-", "_")
    try:
        with open_store(f"chdb:{engine_folder()}?database={name}") as s:
            s.ensure_run("r")
        assert (Path(engine_folder()) / f"{name}.meta.db").is_file()
    finally:
        _drop(name)
        (Path(engine_folder()) / f"{name}.meta.db").unlink(missing_ok=True)


def test_a_read_only_clickhouse_makes_writers_wait_and_loses_nothing(store: Store) -> None:
    """As PostgreSQL in "held by design": a ClickHouse that refuses writes (a user or server
    set read-only, a replica that lost Keeper) is a wait, and the batch sent again once it
    takes writes lands once."""
    key = new_key()
    batch = _batch(key, "b-ro", TrialSpec(key=key, run="r", start=T0))
    bulk = store.bulk  # type: ignore[attr-defined]
    bulk._insert_settings["readonly"] = 1  # every insert runs read-only: ClickHouse's 164
    with pytest.raises(StoreUnavailable, match=r"READONLY|readonly") as err:
        store.write(batch)
    assert classify(err.value) == "retry"
    del bulk._insert_settings["readonly"]
    tid = store.write(batch)
    assert _counts(store, tid, store.list_series(tid)[0].id) == (50, 1, 1)
    assert store.get_trial(tid).state == "completed"


@pytest.mark.parametrize("command", [["trials", "r"], ["report", "r"], ["export", "r"]])
def test_read_commands_on_an_unreachable_clickhouse_fail_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    """As on PostgreSQL: a read command whose ClickHouse cannot be reached says so in one
    line, exits 2, and shows no password. The metadata (a SQLite file, written through the
    embedded engine) holds a trial with samples, so the command must ask ClickHouse for them."""
    meta = tmp_path / "meta.db"
    url = fresh_url("embedded")
    try:
        with open_store(url + "&meta=" + quote(str(meta), safe="")) as s:
            key = new_key()
            s.write(_batch(key, "b1", TrialSpec(key=key, run="r", start=T0)))
    finally:
        _drop(url.rpartition("database=")[2])
    away = "clickhouse://u@127.0.0.1:9/db?meta=" + quote(str(meta), safe="")  # discard port
    p = cli(*command, "--store", away, env={"TUNESCOPE_CLICKHOUSE_PASSWORD": "s3cret-pw"})
    line = one_line_error(p, "clickhouse://u@127.0.0.1:9/")
    assert line.startswith("tunescope: error: clickhouse://u@127.0.0.1:9/")
    assert "s3cret-pw" not in p.stderr and "Traceback" not in p.stderr


_HOLDER = """
import sys
from tunescope.store import open_store
st = open_store(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()  # until the test closes it
st.close()
"""


def test_a_folder_another_process_holds_is_one_line_that_names_it(tmp_path: Path) -> None:
    """chdb runs one engine per folder: while a second process holds ``chdb:PATH``, a
    command on it fails at once with one line that names the holder and says to use a
    server, exit 2 (chdb alone prints its lock error and an empty BAD_ARGUMENTS); once the
    holder is gone, the command runs."""
    folder = tmp_path / "engine"  # not this test process's engine folder
    url = f"chdb:{folder}?meta=" + quote(str(tmp_path / "meta.db"), safe="")
    path = {"PYTHONPATH": os.pathsep.join(sys.path)}
    env = {**os.environ, **path}
    env.pop("TUNESCOPE_STORE", None)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        p = cli("runs", "--store", url, env=path, drop=("TUNESCOPE_STORE",))
        # one line, nothing from chdb
        line = one_line_error(p, f"held by another process (pid {holder.pid})")
        assert line.startswith(f"tunescope: error: cannot open chdb:{folder}")
        assert "use a ClickHouse server" in line
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=120)
        assert holder.stdout is not None
        holder.stdout.close()
    assert holder.returncode == 0
    p = cli("runs", "--store", url, env=path, drop=("TUNESCOPE_STORE",))
    assert p.returncode == 0, p.stderr
