"""Schema versions, forward migration, and refusing what we cannot open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tunescope.errors import ConfigError, SchemaError, StoreError
from tunescope.store import open_store, resolve_url
from tunescope.store._schema import MIGRATIONS, SCHEMA_VERSION
from tunescope.store._sqlite import SQLITE


def _make_v1(path: Path) -> None:
    conn = sqlite3.connect(path)
    for stmt in MIGRATIONS[0]:
        conn.execute(SQLITE.ddl(stmt))
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO runs (name, t_start) VALUES ('old', 1.0)")
    conn.execute(
        "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
        "interval_s) VALUES (1, 't', '{}', 'completed', 'h', '[]', 1.0, 1.0)"
    )
    conn.commit()
    conn.close()


def test_new_store_has_current_version(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as s:
        assert s.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]


def test_old_version_migrates_forward_keeping_data(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _make_v1(path)
    with open_store(path) as s:
        assert s.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
        run = s.get_run("old")
        trial = s.list_trials(run.id)[0]
        assert trial.state == "completed"
        assert s.exit_code(trial.id) is None  # the column v2 added
        s.update_trial(trial.id, exit_code=3)
        assert s.exit_code(trial.id) == 3


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
