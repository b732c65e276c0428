"""`tunescope token`: made once and shown once, listed without secrets, revoked."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli, one_line_error
from tunescope.store import open_store
from tunescope.store.sql._sql import SQLStore


def test_create_list_revoke(tmp_path: Path) -> None:
    db = str(tmp_path / "team.db")
    open_store(db).close()
    made = cli("token", "create", "--store", db, "--project", "vision", "--scope", "write",
               "--name", "ci", "--expires", "30")  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("ts_") and "shown this once" in made.stderr
    with open_store(db) as st:
        assert isinstance(st, SQLStore)
        info = st.check_token(secret)
        assert info is not None and (info.project, info.scope, info.name) == (
            "vision",
            "write",
            "ci",
        )
        assert info.expires is not None
    listed = cli("token", "list", "--store", db)
    assert listed.returncode == 0 and "vision" in listed.stdout and "ci" in listed.stdout
    assert secret not in listed.stdout
    gone = cli("token", "revoke", "ci", "--project", "vision", "--store", db)
    assert gone.returncode == 0 and "revoked" in gone.stdout
    with open_store(db) as st:
        assert isinstance(st, SQLStore)
        assert st.check_token(secret) is None


def test_bad_token_requests_are_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "team.db")
    open_store(db).close()
    for args, needle in (
        (["create", "--project", "p", "--scope", "admin"], "--scope must be read or write"),
        (["create", "--project", "p", "--scope", "read", "--expires", "-1"], "--expires"),
        (["revoke", "nope", "--project", "p"], "no token 'nope'"),
        (["revoke", "999"], "no token 999"),
    ):
        one_line_error(cli("token", *args, "--store", db), needle)
    served = cli("token", "list", "--store", "http://127.0.0.1:9/p")
    assert served.returncode == 2 and "server's database" in served.stderr
    missing = cli("token", "list", "--store", str(tmp_path / "none.db"))
    assert missing.returncode == 2 and not (tmp_path / "none.db").exists()


def test_the_first_token_of_a_new_team_server_makes_its_store(
    sql_store_url: str, request: pytest.FixtureRequest
) -> None:
    """An empty database (a new file, an empty PostgreSQL schema): `token create` makes the
    store's tables, after which `tunescope serve` accepts it (serve itself never creates)."""
    # SQL stores only: the embedded ClickHouse opens its folder in one process at a time, and this
    # test opens the store from a second one (a ClickHouse server would run it)
    refused = cli("serve", "--store", sql_store_url, "--port", "1")
    assert refused.returncode == 2 and "store at" in refused.stderr
    made = cli(
        "token", "create", "--project", "vision", "--scope", "read", "--store", sql_store_url
    )
    assert made.returncode == 0, made.stderr
    with open_store(sql_store_url, create=False) as st:
        assert isinstance(st, SQLStore)
        info = st.check_token(made.stdout.strip().splitlines()[-1])
        assert info is not None and info.project == "vision"
