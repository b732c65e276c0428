"""The one exception root of tunescope.

Hierarchy::

    TunescopeError            anything tunescope raises on purpose
    ├── ConfigError           bad input from the user: a malformed --param, an unknown store URL
    ├── StoreError            the store cannot do what was asked
    │   ├── StoreUnavailable  the store cannot be reached now (a lost connection, a lock held
    │   │                     elsewhere, a stopped server); the same call may succeed later
    │   ├── SchemaError       the database is corrupt, not ours, or from a newer tunescope
    │   │   └── CorruptData   stored samples that cannot be decoded (one chunk, one series)
    │   ├── NotFound          an id or name that does not exist
    │   ├── Conflict          a name that already exists where names are unique
    │   └── AccessDenied      a server refuses this client (no token, a wrong or read-only one)
    │                         or the client cannot trust the server (its certificate)
    └── CollectError          a probe cannot start at all (never raised into training code)

Driver errors (sqlite3, psycopg, NVML) are translated into these at the boundary, so callers
never catch a driver's exception. The CLI turns them into one-line messages and exit codes;
nothing below the CLI prints.
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "CollectError",
    "ConfigError",
    "Conflict",
    "CorruptData",
    "NotFound",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "TunescopeError",
]


class TunescopeError(Exception):
    """Root of every error tunescope raises on purpose."""


class ConfigError(TunescopeError):
    """Bad input from the user, named in the message."""


class StoreError(TunescopeError):
    """The store cannot do what was asked."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now: a lost or refused connection, a lock another process
    holds past the busy timeout, a server that does not answer. Nothing of the call was kept;
    the same call may succeed later, so writers keep what they hold and retry."""


class SchemaError(StoreError):
    """The database is corrupt, not a tunescope database, or from a newer tunescope."""


class CorruptData(SchemaError):
    """Stored samples that cannot be decoded. Reads skip the damaged chunk and flag the series
    rather than fail."""


class NotFound(StoreError):
    """An id or name that does not exist."""


class Conflict(StoreError):
    """A name that already exists where names must be unique."""


class AccessDenied(StoreError):
    """An HTTP store's server refuses this client: no token, an unknown, revoked or expired
    one, a read token that records, or a token of another project; or the client cannot
    verify the server's certificate. Nothing of the call was kept; the same call succeeds
    once the credentials are right, so writers keep what they hold (see ``keeps``)."""


class CollectError(TunescopeError):
    """A probe cannot start at all."""
