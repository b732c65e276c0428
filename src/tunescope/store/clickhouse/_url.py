"""ClickHouse URLs: a server's (``clickhouse://``, ``clickhouses://``) or the embedded
engine's (``chdb:``), checked for form without connecting, and the server's password.

* ``clickhouse://USER@HOST[:PORT]/DB`` over HTTP (port 8123 by default),
  ``clickhouses://USER@HOST[:PORT]/DB`` over TLS (port 8443), trusting ``$TUNESCOPE_CA_BUNDLE``
  when set, else the system's CAs. USER defaults to ``default``. Parameters: ``cluster=NAME``
  (replicated and distributed tables on that cluster, see ``_ddl.py``), ``passfile=PATH`` and,
  for a store, ``meta=URL``: the SQL store that keeps its metadata (a PostgreSQL URL,
  percent-encoded; see the package's doc), which a server's store cannot do without.
* ``chdb:PATH`` (or ``chdb:///ABSOLUTE/PATH``): the embedded engine on the folder PATH, in
  database ``tunescope`` or the one ``?database=NAME`` names; its metadata in ``?meta=URL``,
  else in the SQLite file ``meta.db`` inside PATH (``NAME.meta.db`` for a database named).

The password is never part of the URL: a URL that carries one is refused (its shown form,
:func:`~tunescope.store._url.redact`, would hide it, but a URL travels in places a password
must not). It comes from the file ``passfile`` names (readable by its owner only, as libpq
asks of ``~/.pgpass``), else ``$TUNESCOPE_CLICKHOUSE_PASSWORD``, else none.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tunescope._env import ENV_CA_BUNDLE, ENV_CLICKHOUSE_PASSWORD
from tunescope.errors import ConfigError
from tunescope.store._url import chdb_folder, redact

__all__ = ["EMBEDDED_DATABASE", "Embedded", "Server", "meta_url", "parse_url"]

EMBEDDED_DATABASE = "tunescope"
"""The embedded engine's database unless the URL names another."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
"""A database or cluster name as the DDL writes it unquoted."""
_FORM = "use clickhouse(s)://USER@HOST:PORT/DB or chdb:PATH"


@dataclass(frozen=True)
class Server:
    """A ClickHouse server reached over HTTP(S)."""

    url: str
    """The URL as every message shows it (it never holds a password)."""
    tls: bool
    host: str
    port: int
    user: str
    database: str
    cluster: str | None = None
    passfile: str | None = None
    meta: str | None = None
    """The metadata store's URL as given (it may hold that store's password)."""

    def password(self) -> str:
        """The user's password: the first line of ``passfile``, else
        ``$TUNESCOPE_CLICKHOUSE_PASSWORD``, else ''. ConfigError, in one line, for a password
        file that cannot be read or that others may read."""
        if self.passfile is None:
            return os.environ.get(ENV_CLICKHOUSE_PASSWORD, "")
        path = Path(self.passfile).expanduser()
        try:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(
                    f"password file {str(path)!r} of {self.url} may be read by others: chmod 600 it"
                )
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the password file of {self.url}: {exc.strerror or exc}"
            ) from None
        return lines[0] if lines else ""

    def ca_bundle(self) -> str | None:
        """The CA file to trust for TLS (``$TUNESCOPE_CA_BUNDLE``), None for the system's."""
        return os.environ.get(ENV_CA_BUNDLE) or None


@dataclass(frozen=True)
class Embedded:
    """The embedded engine (chdb) on a folder."""

    url: str
    path: str
    database: str = EMBEDDED_DATABASE
    cluster: None = None
    meta: str | None = None


def parse_url(url: str) -> Server | Embedded:
    """The target a ClickHouse URL names (see the module doc); ConfigError, in one line that
    shows the URL without any password, for anything else."""
    scheme, sep, _ = url.partition(":")
    scheme = scheme.lower()
    if not sep or scheme not in ("clickhouse", "clickhouses", "chdb"):
        raise ConfigError(f"not a ClickHouse URL: {redact(url)!r}: {_FORM}")
    if scheme == "chdb":
        return _embedded(url)
    return _server(url, tls=scheme == "clickhouses")


def _params(url: str, shown: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if k == "password":
            raise _carries_password(shown)
        if k not in allowed:
            known = ", ".join(allowed)
            raise ConfigError(f"ClickHouse URL {shown!r}: unknown parameter {k!r} ({known})")
        if k in out:
            raise ConfigError(f"ClickHouse URL {shown!r}: parameter {k!r} given twice")
        out[k] = v
    return out


def _carries_password(shown: str) -> ConfigError:
    return ConfigError(
        f"ClickHouse URL {shown!r} carries a password: put it in ${ENV_CLICKHOUSE_PASSWORD} "
        "or a file named by ?passfile=PATH, never in the URL"
    )


def _name(v: str, what: str, shown: str) -> str:
    if not _NAME.match(v):
        raise ConfigError(
            f"ClickHouse URL {shown!r}: {what} {v!r} must be letters, digits and _ "
            "(not starting with a digit)"
        )
    return v


def _server(url: str, *, tls: bool) -> Server:
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad ClickHouse URL {shown!r}: {exc}; {_FORM}") from None
    if parts.password is not None:
        raise _carries_password(shown)
    if not parts.hostname:
        raise ConfigError(f"ClickHouse URL {shown!r} names no server: {_FORM}")
    if port == 0:
        raise ConfigError(f"bad ClickHouse URL {shown!r}: port 0 is not 1 to 65535")
    if parts.fragment:
        raise ConfigError(f"ClickHouse URL {shown!r} has a fragment: {_FORM}")
    database = parts.path.strip("/")
    if not database:
        raise ConfigError(f"ClickHouse URL {shown!r} names no database: {_FORM}")
    params = _params(url, shown, ("cluster", "passfile", "meta"))
    cluster = params.get("cluster")
    if "passfile" in params and not params["passfile"]:
        raise ConfigError(f"ClickHouse URL {shown!r}: passfile names no file")
    return Server(
        url=shown,
        tls=tls,
        host=parts.hostname,
        port=port if port is not None else (8443 if tls else 8123),
        user=parts.username or "default",
        database=_name(database, "database", shown),
        cluster=None if cluster is None else _name(cluster, "cluster", shown),
        passfile=params.get("passfile"),
        meta=params.get("meta") or None,
    )


def _embedded(url: str) -> Embedded:
    path, _ = chdb_folder(url)
    if not path:
        raise ConfigError(f"ClickHouse URL {url!r} names no folder: use chdb:PATH")
    shown = redact(url)
    params = _params(url, shown, ("database", "meta"))
    database = _name(params.get("database", EMBEDDED_DATABASE), "database", shown)
    # the engine compares folders as spelled: one folder, one spelling
    return Embedded(
        url=shown,
        path=os.path.realpath(os.path.expanduser(path)),
        database=database,
        meta=params.get("meta") or None,
    )


def meta_url(target: Server | Embedded) -> str:
    """The URL of the SQL store that keeps the metadata of a store on ``target``: its
    ``meta`` parameter, else (embedded) a SQLite file in its folder. ConfigError, in one
    line, for a server's URL without one or a ``meta`` that names no SQL store."""
    if target.meta is None:
        if isinstance(target, Server):
            raise ConfigError(
                f"ClickHouse store URL {target.url!r} names no metadata store: add "
                "?meta=<a percent-encoded postgresql:// URL> (runs, trials, series and tokens "
                "stay in SQL, see docs/scale.md)"
            )
        name = "meta.db" if target.database == EMBEDDED_DATABASE else f"{target.database}.meta.db"
        return os.path.join(target.path, name)
    scheme = target.meta.partition(":")[0].lower()
    if scheme in ("clickhouse", "clickhouses", "chdb", "http", "https"):
        raise ConfigError(
            f"ClickHouse store URL {target.url!r}: meta must name a SQLite file or a "
            f"PostgreSQL database, not {redact(target.meta)!r}"
        )
    return target.meta
