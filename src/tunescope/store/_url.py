"""Store URLs: which backend a URL names, and the URL as it may be shown.

An HTTP store is ``http://HOST:PORT/PROJECT`` or ``https://…`` (a tunescope server; the path
names the project, and the token comes from ``$TUNESCOPE_TOKEN``, never from the URL).

A password may be part of a PostgreSQL URL (``postgresql://user:secret@host/db`` or
``?password=secret``). It is used to connect and nowhere else: :func:`redact` is what every
message, log line, API answer and spool file shows. Better still, keep it out of the URL:
``PGPASSWORD`` or a 0600 password file (``~/.pgpass``, ``PGPASSFILE`` or ``?passfile=PATH``)
are read by the PostgreSQL driver itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tunescope._env import ENV_PROJECT, ENV_STORE, ENV_TOKEN
from tunescope.errors import ConfigError

__all__ = [
    "DEFAULT_STORE",
    "absolute_url",
    "chdb_folder",
    "check_url",
    "display",
    "http_target",
    "os_user",
    "parse",
    "project_of",
    "redact",
    "resolve_url",
    "same_store",
    "sqlite_url",
]

DEFAULT_STORE = "tunescope.db"

_PASSWORD_PARAMS = frozenset({"password", "sslpassword"})


def resolve_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store URL to use: ``url`` if given, else $TUNESCOPE_STORE, else ./tunescope.db."""
    if url is not None and str(url) != "":
        return str(url)
    return os.environ.get(ENV_STORE) or DEFAULT_STORE


def parse(target: str) -> tuple[str, str]:
    """(scheme, rest): ``sqlite`` and a literal file path, ``postgresql``, ``http`` or
    ``https`` and the URL, or an unknown scheme as given. A string without ``://`` is a file
    path, whatever it holds."""
    scheme, sep, rest = target.partition("://")
    if target.startswith("chdb:"):
        return "clickhouse", target
    if not sep:
        if target.startswith("sqlite:"):
            return "sqlite", target[len("sqlite:") :]
        return "sqlite", target
    if scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute/path.db
        return "sqlite", rest[1:] if rest.startswith("/") else rest
    if scheme in ("postgresql", "postgres"):
        return "postgresql", target
    if scheme.lower() in ("http", "https"):
        return scheme.lower(), target
    if scheme.lower() in ("clickhouse", "clickhouses"):
        return "clickhouse", target
    return scheme, target


def check_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store URL to use (:func:`resolve_url`), checked for form without opening anything.

    Raises ConfigError for a URL of an unknown kind, a SQLite URL that names no file, a
    PostgreSQL URL that names nothing (``postgresql://``), an HTTP URL that is not
    ``http(s)://HOST[:PORT]/PROJECT`` (:func:`http_target`) or a port that is not a number
    from 1 to 65535."""
    target = resolve_url(url)
    scheme, rest = parse(target)
    if scheme == "sqlite":
        if not rest:
            raise ConfigError(f"store URL {target!r} names no file")
    elif scheme == "postgresql":
        _check_postgres(target)
    elif scheme in ("http", "https"):
        http_target(target)
    elif scheme == "clickhouse":
        from tunescope.store.clickhouse._url import meta_url, parse_url

        check_url(meta_url(parse_url(target)))
    else:
        raise ConfigError(
            f"unknown store URL {redact(target)!r}: use a file path, sqlite:///PATH, "
            "postgresql://USER@HOST/DB, http(s)://HOST:PORT/PROJECT, "
            "clickhouse(s)://USER@HOST:PORT/DB?meta=URL or chdb:PATH"
        )
    return target


def http_target(url: str) -> tuple[bool, str, int, str]:
    """(TLS, host, port, project) of an HTTP store URL ``http(s)://HOST[:PORT]/PROJECT``
    (port 80 or 443 by default; the project is the path's one segment, as written).
    ConfigError, in one line, for anything else: no host, a bad port, no project or more
    than one segment, a query or fragment, or credentials in the URL (the token belongs in
    ``$TUNESCOPE_TOKEN``)."""
    shown = redact(url)
    form = "use http(s)://HOST:PORT/PROJECT"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad store URL {shown!r}: {exc}; {form}") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"store URL {shown!r} carries credentials: put the token in ${ENV_TOKEN}, "
            "never in the URL"
        )
    if not parts.hostname:
        raise ConfigError(f"store URL {shown!r} names no server: {form}")
    if port == 0:
        raise ConfigError(f"bad store URL {shown!r}: port 0 is not 1 to 65535")
    if parts.query or parts.fragment:
        raise ConfigError(f"store URL {shown!r} has a query or fragment: {form}")
    segments = parts.path.strip("/").split("/")
    if len(segments) != 1 or not segments[0].strip() or "//" in parts.path:
        raise ConfigError(f"store URL {shown!r} must name one project: {form}")
    tls = parts.scheme.lower() == "https"
    host = parts.hostname
    return tls, host, port if port is not None else (443 if tls else 80), segments[0]


def _check_postgres(url: str) -> None:
    shown = redact(url)
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigError(f"bad PostgreSQL URL {shown!r}: {exc}") from None
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts and not parts.path.strip("/") and not query:
        raise ConfigError(  # nothing in it to redact
            f"store URL {url!r} names no server or database: use postgresql://USER@HOST/DB"
        )
    ports = [v for k, v in query if k == "port"]
    for h in hosts.split(","):
        tail = h.rpartition("]")[2] if h.startswith("[") else h
        if ":" in tail:
            ports.append(tail.rpartition(":")[2])
    for p in (p for v in ports for p in v.split(",")):
        if not (p.isascii() and p.isdigit() and 1 <= int(p) <= 65535):
            raise ConfigError(f"bad PostgreSQL URL {shown!r}: port {p!r} is not 1 to 65535")


def absolute_url(url: str | os.PathLike[str] | None = None) -> str:
    """:func:`resolve_url` with a relative SQLite file or embedded ClickHouse folder
    (``chdb:PATH``) made absolute, for processes that may change directory (children of a
    trial, a sampler)."""
    target = resolve_url(url)
    if target.startswith("chdb:"):
        path, query = chdb_folder(target)
        folder = os.path.abspath(os.path.expanduser(path))
        return f"chdb:{folder}?{query}" if query else f"chdb:{folder}"
    if "://" in target or target.startswith("sqlite:"):
        return target
    return os.path.abspath(target)


def chdb_folder(url: str) -> tuple[str, str]:
    """An embedded ClickHouse URL's folder as spelled and its query (without the ``?``):
    ``chdb:PATH[?QUERY]``, where ``chdb:///abs/path`` names ``/abs/path``."""
    path, _, query = url[len("chdb:") :].partition("?")
    return (path[2:] if path.startswith("//") else path), query


def project_of(url: str) -> str:
    """The project a store URL records into: an HTTP store's is the first segment of its path
    (``http://host:port/PROJECT``); for a database, ``$TUNESCOPE_PROJECT`` or ``default``."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() in ("http", "https"):
        path = rest.split("/", 1)[1] if "/" in rest else ""
        name = path.split("/", 1)[0].split("?", 1)[0]
        if name:
            return name
    return os.environ.get(ENV_PROJECT) or "default"


def os_user() -> str:
    """The OS user running this process ('' when it has no name, as in some containers)."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return ""


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The URL a SQLite store shows for a file path: ``sqlite:///`` and the absolute path."""
    return f"sqlite:///{Path(os.fspath(path)).expanduser().resolve()}"


def file_id(url: str) -> str | None:
    """``DEVICE:INODE`` of the file a SQLite store URL names, None for another kind of store
    or while no file is there: what a process that starts a trial's sampler hands it, so that
    the sampler writes into that file or none (``$TUNESCOPE_STORE_FILE``, see
    ``tunescope/_protocol.py``)."""
    scheme, rest = parse(url)
    if scheme != "sqlite":
        return None
    try:
        st = os.stat(Path(rest).expanduser())
    except (OSError, ValueError):
        return None
    return f"{st.st_dev}:{st.st_ino}"


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs name one store: the same URL as shown, the same SQLite file, or
    the same ClickHouse database (the embedded engine's folder and database, a server's host,
    port and database), however the URLs spell them (parameters in another order, a default
    given or left out). A URL that does not parse names no store here: opening it says what
    is wrong."""
    if display(a) == display(b):
        return True
    fa, fb = file_id(a), file_id(b)
    if fa is not None and fa == fb:
        return True
    if parse(a)[0] != "clickhouse" or parse(b)[0] != "clickhouse":
        return False
    from tunescope.store.clickhouse._url import Embedded, parse_url

    try:
        ta, tb = parse_url(a), parse_url(b)
    except ConfigError:
        return False
    if isinstance(ta, Embedded) and isinstance(tb, Embedded):
        return (ta.path, ta.database) == (tb.path, tb.database)
    if isinstance(ta, Embedded) or isinstance(tb, Embedded):
        return False
    return (ta.host.lower(), ta.port, ta.database) == (tb.host.lower(), tb.port, tb.database)


def display(url: str) -> str:
    """``url`` as every message shows it: a SQLite path as :func:`sqlite_url`, anything else
    :func:`redact`-ed."""
    scheme, rest = parse(url)
    if scheme == "sqlite" and rest:
        return sqlite_url(rest)
    return redact(url)


def redact(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter, or in
    the URL of a ClickHouse store's metadata store, ``meta=``)."""
    if url.startswith("chdb:"):  # a folder, then parameters
        path, sep, query = url.partition("?")
        return path + sep + _redact_query(query) if sep else url
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"://[^@/]*@", "://***@", url)
    netloc = parts.netloc
    if "@" in netloc:
        cred, _, host = netloc.rpartition("@")
        user = cred.split(":", 1)[0]
        netloc = f"{user}@{host}"
    query = _redact_query(parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_query(query: str) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(k in _PASSWORD_PARAMS or k == "meta" for k, _ in pairs):
        return query
    # a ClickHouse store's metadata store (``meta``) is a URL too: shown redacted
    return urlencode(
        [(k, redact(v) if k == "meta" else v) for k, v in pairs if k not in _PASSWORD_PARAMS]
    )


def secret_of(url: str) -> str | None:
    """The password in ``url``, if any (to scrub it from driver messages)."""
    if "://" not in url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password:
        return parts.password
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k == "password" and v:
            return v
    return None
