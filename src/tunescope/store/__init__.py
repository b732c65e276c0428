"""The store: the contract every backend keeps, and :func:`open_store` to pick one by URL.

URLs: a file path or ``sqlite:///PATH`` (the default, ``./tunescope.db``), and
``postgresql://…`` for a team database. Precedence: the argument, then the
``TUNESCOPE_STORE`` environment variable, then the default.
"""

from __future__ import annotations

import os
from pathlib import Path

from tunescope.errors import ConfigError
from tunescope.store._contract import CHUNK_SAMPLES, LOST_AFTER_S, Store
from tunescope.store._model import (
    EVENT_KINDS,
    TRIAL_STATES,
    Bucket,
    Event,
    EventBin,
    EventsWindow,
    RunInfo,
    Scalar,
    SeriesInfo,
    TrialInfo,
    Window,
)

__all__ = [
    "CHUNK_SAMPLES",
    "DEFAULT_STORE",
    "EVENT_KINDS",
    "LOST_AFTER_S",
    "TRIAL_STATES",
    "Bucket",
    "Event",
    "EventBin",
    "EventsWindow",
    "RunInfo",
    "Scalar",
    "SeriesInfo",
    "Store",
    "TrialInfo",
    "Window",
    "open_store",
    "resolve_url",
]

DEFAULT_STORE = "tunescope.db"


def resolve_url(url: str | os.PathLike[str] | None = None) -> str:
    """The store URL to use: ``url`` if given, else $TUNESCOPE_STORE, else ./tunescope.db."""
    if url is not None and str(url) != "":
        return str(url)
    return os.environ.get("TUNESCOPE_STORE") or DEFAULT_STORE


def open_store(url: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> Store:
    """Open the store named by ``url`` (see :func:`resolve_url`).

    Raises ConfigError for a URL of an unknown kind, StoreError when the store cannot be
    opened, SchemaError when the database is corrupt or from a newer tunescope.
    """
    target = resolve_url(url)
    scheme, sep, rest = target.partition("://")
    if not sep:
        if target.startswith("sqlite:"):
            rest = target[len("sqlite:") :]
            scheme = "sqlite"
        else:
            scheme, rest = "sqlite", target
    elif scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute/path.db
        rest = rest[1:] if rest.startswith("/") else rest
    if scheme == "sqlite":
        from tunescope.store._sqlite import SQLiteStore

        if not rest:
            raise ConfigError(f"store URL {target!r} names no file")
        return SQLiteStore(Path(rest), readonly=readonly)
    if scheme in ("postgresql", "postgres"):
        try:
            from tunescope.store._postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"store URL {target!r} needs the PostgreSQL driver: "
                f"pip install 'tunescope[postgres]' ({exc})"
            ) from None
        return PostgresStore(target)
    raise ConfigError(
        f"unknown store URL {target!r}: use a file path, sqlite:///PATH or "
        "postgresql://USER@HOST/DB"
    )
