"""ClickHouse URLs: the forms taken, and the password: never in the URL, from a file only its
owner may read or from $TUNESCOPE_CLICKHOUSE_PASSWORD, and never in a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunescope.errors import ConfigError
from tunescope.store import absolute_url
from tunescope.store.clickhouse import Embedded, Server, parse_url
from tunescope.store.clickhouse._http import HttpTransport


def test_server_urls() -> None:
    s = parse_url("clickhouse://writer@ch.example:9000/metrics?cluster=main")
    assert s == Server(
        url="clickhouse://writer@ch.example:9000/metrics?cluster=main",
        tls=False,
        host="ch.example",
        port=9000,
        user="writer",
        database="metrics",
        cluster="main",
    )
    tls = parse_url("clickhouses://ch.example/metrics")
    assert isinstance(tls, Server)
    assert (tls.tls, tls.port, tls.user, tls.cluster) == (True, 8443, "default", None)
    plain = parse_url("clickhouse://u@ch.example/db")
    assert isinstance(plain, Server) and plain.port == 8123


def test_embedded_urls(tmp_path: Path) -> None:
    e = parse_url(f"chdb://{tmp_path}/x/?database=runs")
    assert e == Embedded(
        url=f"chdb://{tmp_path}/x/?database=runs", path=f"{tmp_path}/x", database="runs"
    )
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = parse_url(f"chdb:{tmp_path}/link")  # the engine compares folders as spelled
    assert isinstance(linked, Embedded) and linked.path == f"{tmp_path}/real"
    assert parse_url("chdb:rel/dir") == Embedded(
        url="chdb:rel/dir", path=str(Path("rel/dir").resolve()), database="tunescope"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("clickhouse://u:hunter2@h:8123/db", "carries a password"),
        ("clickhouse://u@h:8123/db?password=hunter2", "carries a password"),
        ("clickhouse://u@h:8123/", "names no database"),
        ("clickhouse://u@:8123/db", "names no server"),
        ("clickhouse://u@h:99999/db", "bad ClickHouse URL"),
        ("clickhouse://u@h:0/db", "port 0"),
        ("clickhouse://u@h/db?cluster=a;DROP", "cluster 'a;DROP'"),
        ("clickhouse://u@h/my-db", "database 'my-db'"),
        ("clickhouse://u@h/db?shards=2", "unknown parameter 'shards'"),
        ("clickhouse://u@h/db?cluster=a&cluster=b", "given twice"),
        ("chdb:", "names no folder"),
        ("chdb:/x?cluster=c", "unknown parameter 'cluster'"),
        ("mysql://u@h/db", "not a ClickHouse URL"),
    ],
)
def test_bad_urls_say_what_is_wrong_without_the_password(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        parse_url(url)
    assert "hunter2" not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = parse_url("clickhouse://u@h/db")
    assert isinstance(s, Server)
    monkeypatch.delenv("TUNESCOPE_CLICKHOUSE_PASSWORD", raising=False)
    assert s.password() == ""
    monkeypatch.setenv("TUNESCOPE_CLICKHOUSE_PASSWORD", "from-env")
    assert s.password() == "from-env"


def test_password_file_beats_the_environment_and_must_be_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNESCOPE_CLICKHOUSE_PASSWORD", "from-env")
    f = tmp_path / "pw"
    f.write_text("from-file\nignored\n")
    f.chmod(0o600)
    s = parse_url(f"clickhouse://u@h/db?passfile={f}")
    assert isinstance(s, Server) and s.password() == "from-file"
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="may be read by others: chmod 600"):
        s.password()
    gone = parse_url(f"clickhouse://u@h/db?passfile={tmp_path / 'none'}")
    assert isinstance(gone, Server)
    with pytest.raises(ConfigError, match="cannot read the password file"):
        gone.password()


def test_the_transport_reads_the_password_at_once(tmp_path: Path) -> None:
    """A bad password file is said when the store is opened, not at its first write."""
    s = parse_url(f"clickhouse://u@h/db?passfile={tmp_path / 'none'}")
    assert isinstance(s, Server)
    with pytest.raises(ConfigError, match="cannot read the password file"):
        HttpTransport(s)


def test_an_embedded_folder_given_relative_is_made_absolute_for_child_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a trial's sampler and children are told (``absolute_url``): a relative ``chdb:``
    folder is made absolute, its query kept; it was once read as a SQLite file named
    ``chdb:PATH`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    assert absolute_url("chdb:ch") == f"chdb:{tmp_path}/ch"
    assert absolute_url("chdb:data/ch?database=x") == f"chdb:{tmp_path}/data/ch?database=x"
    assert absolute_url("chdb:/srv/ch") == "chdb:/srv/ch"
    assert absolute_url("chdb:///srv/ch") == "chdb:/srv/ch"
    # chdb://ch is the relative folder ch (the parser drops the //): absolute, not //ch
    assert absolute_url("chdb://ch?meta=m.db") == f"chdb:{tmp_path}/ch?meta=m.db"
    assert absolute_url("ts.db") == f"{tmp_path}/ts.db"
    server = "clickhouse://u@ch.example/db?meta=postgresql%3A%2F%2Fpg%2Fts"
    assert absolute_url(server) == server
    relative = parse_url("chdb://ch")
    monkeypatch.chdir("/")
    assert parse_url(f"chdb:{tmp_path}/ch").path == relative.path
