"""Schema versions, forward migration, and refusing what we cannot open."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from tunescope.errors import ConfigError, SchemaError, StoreError
from tunescope.store import (
    Batch,
    Event,
    Scalar,
    TrialEnd,
    TrialSpec,
    check_url,
    open_store,
    resolve_url,
)
from tunescope.store.sql import _sql
from tunescope.store.sql._schema import SCHEMA_VERSION

DATA = Path(__file__).parent / "data"
V1_DB = DATA / "v1.db"
V1_SHA256 = "9f2390f3645a7618b4d5342ea371ba7b50c7dd3c8625a3733e11da8a26642b4f"
"""tests/data/v1.db is frozen: see tests/data/make_v1_db.py, and never regenerate it."""


def _v1_content() -> ModuleType:
    """tests/data/make_v1_db.py, whose TRIALS, SERIES, samples(), EVENTS and SCALARS describe
    what the frozen file holds (imported, not run)."""
    spec = importlib.util.spec_from_file_location("make_v1_db", DATA / "make_v1_db.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_new_store_has_current_version(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as s:
        assert s.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]


def test_frozen_v1_database_migrates_forward_keeping_every_piece_of_data(tmp_path: Path) -> None:
    assert hashlib.sha256(V1_DB.read_bytes()).hexdigest() == V1_SHA256
    path = tmp_path / "v1.db"
    shutil.copyfile(V1_DB, path)
    with closing(sqlite3.connect(path)) as conn:  # it really is a version 1 file
        assert conn.execute("SELECT value FROM meta").fetchall() == [("1",)]
        assert "exit_code" not in {r[1] for r in conn.execute("PRAGMA table_info(trials)")}
        counts = "SELECT (SELECT COUNT(*) FROM chunks), (SELECT COUNT(*) FROM pending)"
        assert conn.execute(counts).fetchone() == (10, 68 + 100)  # chunks and pending rows
    v1 = _v1_content()
    with open_store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
        run = s.get_run(v1.RUN)
        end = max(w["end"] for w in v1.TRIALS)
        assert (run.start, run.end, run.state, run.trials) == (v1.T0, end, "failed", 2)
        trials = s.list_trials(run.id)
        assert [{k: getattr(t, k) for k in v1.TRIALS[0]} for t in trials] == [
            w | {"pids": tuple(w["pids"])} for w in v1.TRIALS
        ]
        ids = {t.name: t.id for t in trials}
        assert all(s.exit_code(i) is None for i in ids.values())  # the column v2 added
        for trial, metric, device, note, n, _ in v1.SERIES:
            (info,) = [x for x in s.list_series(ids[trial], metric) if x.device == device]
            assert info.note == note
            assert info.host == "node1"  # version 5 gives old series their trial's host
            want_t, want_v = v1.samples(trial, metric, device, n)
            got_t, got_v = s.read_samples(info.id)
            assert np.array_equal(got_t, want_t) and np.array_equal(got_v, want_v)
            assert s.series_extent(info.id) == (want_t[0], want_t[-1], n)
            w = s.window(info.id, want_t[0], want_t[-1], 7)
            assert w.buckets is not None and w.corrupt_chunks == 0
            assert (
                sum(b.n for b in w.buckets) == n and max(b.max for b in w.buckets) == want_v.max()
            )
        for name, tid in ids.items():
            want = sorted(
                [
                    Event(
                        tid,
                        e["kind"],
                        e["t"],
                        e["name"],
                        e["step"],
                        e["duration"],
                        e["value"],
                        e["data"],
                    )
                    for e in v1.EVENTS
                    if e["trial"] == name
                ],
                key=lambda e: e.t,
            )
            assert s.events(tid, -math.inf, math.inf, limit=10_000).events == want
            assert s.scalars(tid) == sorted(
                [Scalar(tid, sn, step, t, v) for tr, sn, step, t, v in v1.SCALARS if tr == name],
                key=lambda x: (x.name, -1 if x.step is None else x.step, x.t),
            )
        assert s.corrupt_series() == []
        # an evaluation begun before a window still shows in it: the spans of events written
        # before version 2 are filled in by the migration
        inside = s.events(ids["trial-0"], v1.T0 + 310, v1.T0 + 315, kinds=["evaluation"]).events
        assert inside is not None and [e.t for e in inside] == [v1.T0 + 300]
        # old trials get a key, and writers name them by it
        keys = {t.key for t in trials}
        assert keys == {f"id-{i}" for i in ids.values()}
        # the migrated file takes new writes where the old writer left off
        s.update_trial(ids["oom"], exit_code=137)
        assert s.exit_code(ids["oom"]) == 137
        (mem,) = s.list_series(ids["oom"], "gpu.mem")
        last = s.read_samples(mem.id)[0][-1]
        s.append_samples([(mem.id, last + 1.0, 1.0)])
        s.compact()
        assert len(s.read_samples(mem.id)[0]) == 581
    # only the copy was opened: the frozen file and its folder are as committed
    assert hashlib.sha256(V1_DB.read_bytes()).hexdigest() == V1_SHA256
    assert sorted(p.name for p in DATA.iterdir() if p.name.startswith("v1")) == ["v1.db"]


def test_a_version_4_database_gives_every_series_its_trials_host(
    sql_store_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A database made by version 4 (the shipped migrations, applied by the store told that
    4 is current), with series written as version 4 wrote them, opens as the current version: each
    series of its trial's host, its samples kept, and new hosts' series beside it."""
    # SQL stores only: a version 4 database holds its samples in SQL chunks (never ClickHouse)
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 4)
    with closing(open_store(sql_store_url)) as old:
        assert isinstance(old, _sql.SQLStore) and old.schema_version() == 4
        with old._tx(write=True) as cur:  # as version 4 wrote runs and trials (no column
            # of a later version)
            run = SimpleNamespace(
                id=old._q(
                    cur,
                    "INSERT INTO runs (project_id, name, t_start) VALUES "
                    "((SELECT id FROM projects WHERE name = 'default'), 'r', 100.0) RETURNING id",
                ).fetchone()[0]
            )
            ids = []
            for name in ("a", "b"):
                ids.append(
                    old._q(
                        cur,
                        "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
                        "interval_s, trial_key) VALUES (?, ?, '{}', 'running', ?, '[]', 100.0, "
                        "1.0, ?) RETURNING id",
                        (run.id, name, f"node-{name}", f"key-{name}"),
                    ).fetchone()[0]
                )
        a, b = (SimpleNamespace(id=i) for i in ids)
        with old._tx(write=True) as cur:
            for tid, metric, device in (
                (a.id, "gpu.util", "0"),
                (a.id, "gpu.util", "1"),
                (b.id, "gpu.util", "0"),
                (b.id, "cpu.util", ""),
            ):
                old._q(
                    cur,
                    "INSERT INTO series (trial_id, metric, device, note) VALUES (?, ?, ?, NULL)",
                    (tid, metric, device),
                )
            rows = old._q(cur, "SELECT id FROM series ORDER BY id").fetchall()
            for (sid,) in rows:
                for i in range(3):
                    old._q(
                        cur,
                        "INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)",
                        (sid, 101.0 + i, float(sid * 10 + i)),
                    )
    monkeypatch.undo()
    with open_store(sql_store_url) as s:
        assert s.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
        got = [(x.metric, x.host, x.device) for x in s.list_series(a.id)]
        assert got == [("gpu.util", "node-a", "0"), ("gpu.util", "node-a", "1")]
        got = [(x.metric, x.host, x.device) for x in s.list_series(b.id)]
        assert got == [("cpu.util", "node-b", None), ("gpu.util", "node-b", "0")]
        for x in s.list_series(a.id) + s.list_series(b.id):
            assert s.read_samples(x.id)[1].tolist() == [x.id * 10.0 + i for i in range(3)]
        assert s.hosts(a.id) == {"node-a": {}}
        # the trial's own host writes on where version 4 left off; another host beside it
        old_id = s.series(a.id, "gpu.util", "0").id
        a_key = s.get_trial(a.id).key
        s.write(Batch(a_key, host="node-a", samples=(("gpu.util", "0", None, 104.0, 1.0),)))
        s.write(
            Batch(
                a_key,
                host="node-z",
                samples=(("gpu.util", "0", None, 104.0, 2.0),),
                where={"gpus": []},
            )
        )
        util0 = [x for x in s.list_series(a.id, "gpu.util") if x.device == "0"]
        assert [(x.host, x.id == old_id) for x in util0] == [("node-a", True), ("node-z", False)]
        assert s.read_samples(old_id)[1].tolist()[-1] == 1.0
        assert s.hosts(a.id) == {"node-a": {}, "node-z": {"gpus": []}}


def test_newer_version_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaError, match="schema version 99, newer than this tunescope"):
        open_store(path)
    assert path.read_bytes() == before


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(SchemaError, match="not a tunescope database or is corrupt"):
        open_store(path)
    assert path.read_bytes() == b"this is not sqlite at all" * 100


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError, match="not a tunescope database"):
        open_store(path)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "nope" / "x.db")
    assert not (tmp_path / "nope").exists()


def test_unwritable_path_under_proc(tmp_path: Path) -> None:
    # /proc refuses new files even for root: a real unwritable directory on every machine
    with pytest.raises(StoreError):
        open_store("/proc/tunescope-test.db")
    assert not Path("/proc/tunescope-test.db").exists()


def test_unknown_url_scheme() -> None:
    with pytest.raises(ConfigError, match="unknown store URL 'mysql://x'"):
        open_store("mysql://x")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@db.example/x",
        "postgres://u:p@h:5432/x",
        "postgresql://h1:5432,h2:5433/x",
        "postgresql://[::1]:5432/x",
        "postgresql:///x?host=/var/run/postgresql",
        "postgresql://h/x?port=5432,5433",
        "sqlite:///rel.db",
        "plain/path.db",
    ],
)
def test_check_url_accepts_the_forms_a_store_may_take(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://", "store URL 'postgresql://' names no server or database"),
        ("postgresql:///", "names no server or database"),
        ("postgresql://u:secret@h:notaport/x", "'postgresql://u@h:notaport/x': port 'notaport'"),
        ("postgresql://h:0/x", "port '0' is not 1 to 65535"),
        ("postgresql://h:65536/x", "port '65536'"),
        ("postgresql://h1:5432,h2:x/x", "port 'x'"),
        ("postgresql://[::1]:99999/x", "port '99999'"),
        ("postgresql://h/x?port=5432,no", "port 'no'"),
        ("postgresql://h:\u0663/x", "port '\u0663'"),
        ("sqlite://", "names no file"),
        ("mysql://x", "unknown store URL 'mysql://x'"),
    ],
)
def test_check_url_refuses_a_bad_form_without_connecting(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_url(url)
    with pytest.raises(ConfigError, match=re.escape(message)):
        open_store(url, create=False)


def test_url_forms_and_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNESCOPE_STORE", raising=False)
    assert resolve_url() == "tunescope.db"
    monkeypatch.setenv("TUNESCOPE_STORE", "env.db")
    assert resolve_url() == "env.db"
    assert resolve_url("arg.db") == "arg.db"
    with open_store("sqlite:///rel.db") as s:
        assert s.url == f"sqlite:///{tmp_path / 'rel.db'}"
    with open_store(f"sqlite:///{tmp_path / 'abs.db'}") as s:
        assert (tmp_path / "abs.db").exists() and s.url.endswith("abs.db")


def test_a_window_of_one_event_kind_reads_that_kind_by_index(tmp_path: Path) -> None:
    """Version 6: a window of sampler gaps (or evaluations) among a day of optimizer steps
    is read through events_by_kind, not by scanning every event of the window."""
    with open_store(tmp_path / "a.db") as s:
        run = s.ensure_run("r", 100.0)
        t = s.create_trial(run.id, "a", start=100.0)
        s.add_events(Event(t.id, "optimizer_step", 100.0 + i, step=i) for i in range(500))
        s.add_events([Event(t.id, "sampler_gap", 300.0, "restarted", None, 5.0)])
        assert isinstance(s, _sql.SQLStore)
        assert [e.t for e in s.events(t.id, 100.0, 600.0, kinds=["sampler_gap"]).events or []] == [
            300.0
        ]
        with s._tx() as cur:
            where, args = s._event_where(cur, t.id, 100.0, 600.0, ["sampler_gap"])
            plan = s._q(cur, f"EXPLAIN QUERY PLAN SELECT * FROM events WHERE {where}", args)
            assert "events_by_kind" in " ".join(str(r) for r in plan.fetchall())


def test_a_version_9_database_keeps_its_ended_trials_usage_once_migrated(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 10 adds each trial's data generation and the usage kept per ended trial: a
    trial written by version 9 opens at generation 0 with nothing kept, its usage is computed
    as before and kept, and a write afterwards (a late batch) raises its generation, so the
    kept figures are not answered again."""
    from tunescope.analyze import GPU_CATALOG, FindingSettings, usage_of
    from tunescope.analyze._usage_kept import usage_digest

    t0 = 1_000_000.0
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 9)
    monkeypatch.setattr(_sql.SQLStore, "_touch", lambda *a: None)  # version 9 had no generation
    key = "key-v9"
    with closing(open_store(store_url)) as old:
        assert isinstance(old, _sql.SQLStore) and old.schema_version() == 9
        util = tuple(("gpu.util", "0", None, t0 + i, 40.0) for i in range(1, 101))
        spec = TrialSpec(key=key, run="r", start=t0, interval=1.0, host="h")
        old.write(
            Batch(key, spec=spec, samples=util, host="h", end=TrialEnd("completed", t0 + 100))
        )
        old.compact()
        with old._tx() as cur:
            assert "kept_usage" not in old._table_names(cur)
    monkeypatch.undo()
    digest = usage_digest(FindingSettings(), GPU_CATALOG)
    with closing(open_store(store_url)) as s:
        assert isinstance(s, _sql.SQLStore) and s.schema_version() == SCHEMA_VERSION
        tid = s.trial_by_key(key).id
        assert s.kept_usage([tid], digest) == {tid: (0, None)}
        (row,) = usage_of(s, t0, t0 + 200, [], now=t0 + 1000).rows
        assert (row.gpu_held_s, row.gpu_busy_s) == (100.0, pytest.approx(40.0))
        gen, text = s.kept_usage([tid], digest)[tid]
        assert gen == 0 and text is not None
        s.write(Batch(key, samples=(("gpu.util", "0", None, t0 + 100.5, 40.0),), host="h"))
        assert s.kept_usage([tid], digest) == {tid: (1, None)}


def test_a_version_10_database_takes_64_bit_steps_and_exit_codes_once_migrated(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 11 makes the integers a batch brings 64 bits on every backend: a step past
    2**31 (a token count used as step, a global sample index) refused the whole batch on
    PostgreSQL, whose INTEGER is 32 bits, samples and all; once migrated it is kept as given,
    with what the database held before."""
    t0 = 1_000_000.0
    big = 2**40
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 10)
    with closing(open_store(store_url)) as old:
        assert isinstance(old, _sql.SQLStore) and old.schema_version() == 10
        spec = TrialSpec(key="k10", run="r", start=t0, interval=1.0, host="h")
        old.write(
            Batch("k10", spec=spec, events=(("mark", t0 + 1, "before", 7, None, None, None),))
        )
    monkeypatch.undo()
    with closing(open_store(store_url)) as s:
        assert isinstance(s, _sql.SQLStore) and s.schema_version() == SCHEMA_VERSION
        tid = s.trial_by_key("k10").id
        s.write(
            Batch(
                "k10",
                samples=(("cpu.util", None, None, t0 + 2, 50.0),),
                events=(("mark", t0 + 2, "after", big, None, None, None),),
                scalars=(("loss", big, t0 + 2, 0.5),),
                end=TrialEnd("completed", t0 + 3, exit_code=-(2**63)),
                host="h",
            )
        )
        assert [(e.name, e.step) for e in s.all_events(tid)] == [("before", 7), ("after", big)]
        assert [x.step for x in s.scalars(tid, "loss")] == [big]
        assert s.exit_code(tid) == -(2**63)
        assert len(s.list_series(tid, "cpu.util")) == 1
