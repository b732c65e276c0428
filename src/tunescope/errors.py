"""The one exception root of tunescope.

Hierarchy::

    TunescopeError            anything tunescope raises on purpose
    ├── ConfigError           bad input from the user: a malformed --param, an unknown store URL
    ├── StoreError            the store cannot do what was asked
    │   ├── StoreUnavailable  the store cannot take the call now (a lost connection, a lock
    │   │                     held elsewhere, a stopped, read-only or full server); the same
    │   │                     call may succeed later
    │   ├── SchemaError       the database is corrupt, not ours, or from a newer tunescope
    │   │   └── CorruptData   stored samples that cannot be decoded (one chunk, one series)
    │   ├── NotFound          an id or name that does not exist
    │   ├── Conflict          a name that already exists where names are unique
    │   ├── Rejected          the store proves what it was given wrong (a value it cannot
    │   │                     hold, a batch the server's validation refused): never retried
    │   └── AccessDenied      a server refuses this client (no token, a wrong or read-only one)
    │                         or the client cannot trust the server (its certificate)
    └── CollectError          a probe cannot start at all (never raised into training code)

Driver errors (sqlite3, psycopg, NVML) are translated into these at the boundary, so callers
never catch a driver's exception. Writers set a batch aside only on :class:`Rejected`, stop
sending on :class:`AccessDenied`, and wait and retry on every other error (``classify`` in
``store/produce/_spool.py``). The CLI turns them into one-line messages and exit codes;
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
    "Rejected",
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
    """The store cannot take the call now: a lost or refused connection, a lock another
    process holds past the busy timeout, a server that does not answer or answers 5xx/429, a
    database that is read-only (a standby after a failover), full, out of memory or shutting
    down. Nothing of the call was kept; the same call may succeed later, so writers keep what
    they hold and retry."""


class SchemaError(StoreError):
    """The database is corrupt, not a tunescope database, or from a newer tunescope."""


class CorruptData(SchemaError):
    """Stored samples that cannot be decoded. Reads skip the damaged chunk and flag the series
    rather than fail."""


class NotFound(StoreError):
    """An id or name that does not exist."""


class Conflict(StoreError):
    """A name that already exists where names must be unique."""


class Rejected(StoreError):
    """The store proves what it was given wrong: a contract violation it raises on purpose (a
    sample that is not a finite number, event data or params that are not JSON values, a value
    the database cannot hold) or an HTTP store's 400/413/422 answer to a batch. Retrying never
    cures it: writers set such a batch aside in the spool's ``rejected/`` folder. Nothing of
    the call was kept."""


class AccessDenied(StoreError):
    """An HTTP store's server refuses this client: no token, an unknown, revoked or expired
    one, a read token that records, or a token of another project; or the client cannot
    verify the server's certificate. Nothing of the call was kept; the same call succeeds
    once the credentials are right, so writers stop sending and keep what they hold in the
    spool, for ``tunescope sync`` once the token is fixed (see ``classify``)."""


class CollectError(TunescopeError):
    """A probe cannot start at all."""
