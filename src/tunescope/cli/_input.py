"""What people type, checked before anything is written.

The command class every command uses (an option given twice is a usage error, not the last
one silently winning), the options several commands share, checks Click's types do not
make (empty strings, ports, host names, ``--out`` paths) and run references. A check that
fails raises Click's ``BadParameter`` / ``UsageError`` or :class:`ConfigError`;
:func:`tunescope.cli.main` turns each into one line and exit code 2.

Typer uses Click, or from Typer 0.2x its own copy of it; :data:`USAGE_ERROR` and
:data:`CLICK_ERROR` are the classes of whichever this Typer raises.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from tunescope._env import ENV_STORE, ENV_TOKEN
from tunescope.errors import ConfigError

__all__ = [
    "CLICK_ERROR",
    "USAGE_ERROR",
    "Command",
    "StoreOpt",
    "allowed_hosts",
    "as_run",
    "duration",
    "duration_s",
    "host",
    "http_url",
    "not_empty",
    "not_the_store",
    "out_dest",
    "out_path",
    "port",
    "tls_files",
    "trusted_proxies",
]

_BASES = {c.__name__: c for c in typer.BadParameter.__mro__}
USAGE_ERROR: type[Exception] = _BASES["UsageError"]
"""Click's ``UsageError`` as this Typer raises it (bad options, arguments and values)."""
CLICK_ERROR: type[Exception] = _BASES["ClickException"]
"""Click's ``ClickException``, the root of what Click raises for bad input."""

_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)


class Command(TyperCommand):
    """A Typer command that refuses an option given twice (Click would keep the last one
    silently); repeatable options (``--param``, ``--price``, ``--allow-host``) may repeat."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            if not any(getattr(p, "is_eager", False) for p in order):  # --help wins
                seen: set[str] = set()
                for param in order:
                    if param.param_type_name != "option" or param.multiple:
                        continue
                    if param.name in seen:
                        names = "/".join((*param.opts, *param.secondary_opts))
                        raise USAGE_ERROR(f"{names} given twice", ctx)
                    seen.add(param.name)
        result: list[str] = super().parse_args(ctx, args)
        return result


def not_empty(value: str | None) -> str | None:
    """A callback: a name or address given as an empty or blank string is refused."""
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def port(value: int) -> int:
    """A callback: a TCP port to listen on, 1 to 65535."""
    if not 1 <= value <= 65535:
        raise typer.BadParameter(f"{value} is out of range: use 1 to 65535")
    return value


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def duration(value: str | None) -> str | None:
    """A callback: a positive span written as a number and a unit, ``90s``, ``15m``,
    ``12h``, ``30d`` or ``2w`` (:func:`duration_s` gives its seconds)."""
    if (value is not None and _DURATION.fullmatch(value.strip()) is None) or (
        value is not None and duration_s(value) <= 0
    ):
        raise typer.BadParameter(
            f"{value!r} is not a duration: use a positive number and a unit, s, m, h, d or w "
            "(e.g. 30d)"
        )
    return value


def duration_s(value: str) -> float:
    """The seconds of a duration :func:`duration` accepted (0.0 for anything else)."""
    m = _DURATION.fullmatch(value.strip())
    return 0.0 if m is None else float(m.group(1)) * _UNIT_S[m.group(2)]


def _host_ok(value: str) -> bool:
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        return _HOST_NAME.fullmatch(value) is not None
    return True


def host(value: str) -> str:
    """A callback: an address to bind, as an IP address or a host name (not resolved)."""
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    if not _host_ok(value):
        raise typer.BadParameter(f"{value!r} is not a host name or an IP address")
    return value


def allowed_hosts(values: list[str] | None) -> list[str] | None:
    """A callback: each ``--allow-host`` is a host name, an IP address or ``*``."""
    for v in values or []:
        if not v.strip():
            raise typer.BadParameter("must not be empty")
        if v != "*" and not _host_ok(v):
            raise typer.BadParameter(f"{v!r} is not a host name, an IP address or '*'")
    return values


def trusted_proxies(values: list[str] | None) -> list[str] | None:
    """A callback: each ``--trusted-proxy`` is an IP address or network (CIDR)."""
    for v in values or []:
        try:
            ipaddress.ip_network(v.strip(), strict=False)
        except ValueError:
            raise typer.BadParameter(f"{v!r} is not an IP address or network") from None
    return [v.strip() for v in values] if values else values


def http_url(value: str | None) -> str | None:
    """A callback: an ``http://`` or ``https://`` URL with a host (a collector's address)."""
    if value is None:
        return None
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(f"{value!r} is not an http:// or https:// URL with a host")
    return value.strip()


def tls_files(cert: str | None, key: str | None) -> tuple[Path, Path] | None:
    """``--tls-cert`` and ``--tls-key``: both or neither, each a readable file, together a
    PEM certificate and its unencrypted private key. None for neither."""
    import ssl

    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ConfigError(f"{given} needs {missing} too")
    paths = (Path(cert).expanduser(), Path(key).expanduser())
    for name, path in zip(("--tls-cert", "--tls-key"), paths, strict=True):
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"{name} {path} cannot be read: {exc.strerror or exc}") from None

    def no_password() -> str:
        raise ConfigError(f"--tls-key {paths[1]} is encrypted: give an unencrypted key")

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(*paths, password=no_password)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"--tls-cert {paths[0]} and --tls-key {paths[1]} are not a PEM certificate and "
            f"its key ({exc.reason or exc})"
        ) from None
    return paths


STDOUT = "-"
"""``--out -``: standard output, as everywhere on the command line (never a file named -)."""


def out_path(value: str | None) -> str | None:
    """A callback: ``--out`` names a file that can be written, in a folder that exists, or is
    ``-`` (stdout). Checked before the store is read, so bad input writes nothing."""
    if value is None or value == STDOUT:
        return value
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    path = Path(value).expanduser()
    if path.is_dir():
        raise typer.BadParameter(f"{value} is a directory")
    parent = path.parent
    if not parent.is_dir():
        raise typer.BadParameter(f"cannot write {value}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise typer.BadParameter(f"cannot write {value}: permission denied")
    return value


def not_the_store(out: str, store: str | None) -> Path:
    """``out`` as a path; ConfigError when it is the SQLite file of the store being read."""
    from tunescope.store import display, resolve_url

    path = Path(out).expanduser()
    shown = display(resolve_url(store))
    if shown.startswith("sqlite:///") and path.exists():
        db = Path(shown[len("sqlite:///") :])
        if db.exists() and os.path.samefile(path, db):
            raise ConfigError(f"--out {out} is the store itself: choose another file")
    return path


def out_dest(out: str | None, store: str | None) -> Path | None:
    """Where ``--out`` writes: a path (see :func:`not_the_store`), or None for stdout (no
    ``--out``, or ``--out -``)."""
    return None if out is None or out == STDOUT else not_the_store(out, store)


def as_run(text: str) -> int | str:
    """A RUN argument: an id when it is written in ASCII digits, else a name."""
    return int(text) if text.isascii() and text.isdigit() else text


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL: a SQLite file path (default ./tunescope.db, or "
        f"${ENV_STORE}), postgresql://..., clickhouse://USER@HOST:8123/DB?meta=... or "
        f"chdb:PATH, or http(s)://HOST:PORT/PROJECT (token in ${ENV_TOKEN})",
        show_default=False,
        callback=not_empty,
    ),
]
