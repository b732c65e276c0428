"""Access tokens of a team server: each for one project, to read or to write.

A token is shown once, when it is made (``ts_`` and 43 URL-safe characters: 256 random
bits); the database keeps only its SHA-256 digest, so a copy of the database gives no token.
A check looks the digest up and compares it in constant time (``hmac.compare_digest``); a
revoked or expired token is refused like an unknown one. ``read`` views its project;
``write`` also records into it.

Failed attempts are counted here too (:meth:`TokensMixin.count_token_failure`, table
``token_failures``), so that every server on the store (``tunescope serve`` run as replicas
behind a proxy) rate-limits the same count: see ``server/_auth.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any

from tunescope.errors import ConfigError, Conflict, NotFound, StoreError
from tunescope.store.sql._heal import retrying

__all__ = ["SCOPES", "TokenInfo", "TokensMixin", "digest"]

SCOPES = ("read", "write")
_PREFIX = "ts_"
_USED_EVERY_S = 60.0
"""A token's last use is written at most this often (not on every request)."""


def digest(secret: str) -> str:
    """The SHA-256 hex digest a token is stored as."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    """A token as stored (never its secret). Times are epoch seconds; None: never/none."""

    id: int
    project: str
    name: str
    scope: str
    created: float
    expires: float | None
    revoked: float | None
    used: float | None

    def usable(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.revoked is None and (self.expires is None or now < self.expires)


_COLS = "k.id, p.name, k.name, k.scope, k.t_created, k.t_expires, k.t_revoked, k.t_used"
_FROM = "tokens k JOIN projects p ON k.project_id = p.id"


def _info(row: Any) -> TokenInfo:
    i, project, name, scope, created, expires, revoked, used = row
    return TokenInfo(int(i), str(project), str(name), str(scope), float(created),
                     expires, revoked, used)  # fmt: skip


class TokensMixin:
    """Token management for :class:`~tunescope.store.sql._sql.SQLStore` (admin: `tunescope
    token`; the server's checks). Not part of the store contract: an HTTP store has none."""

    # provided by SQLStore
    _tx: Any
    _q: Any
    _project_id: Any

    @retrying
    def create_token(
        self, project: str, scope: str, name: str | None = None, expires: float | None = None
    ) -> tuple[TokenInfo, str]:
        """A new token of ``project`` (created if new) with ``scope``, named ``name`` (default
        ``token-<k>``), valid until ``expires`` (epoch s; None: until revoked). Returns it and
        its secret, which is not kept anywhere: show it once. Conflict for a taken name."""
        if scope not in SCOPES:
            raise ConfigError(f"scope must be read or write, not {scope!r}")
        secret = _PREFIX + secrets.token_urlsafe(32)
        with self._tx(write=True) as cur:
            pid = self._project_id(cur, project, create=True)
            if name is None:
                k = self._q(
                    cur, "SELECT COUNT(*) FROM tokens WHERE project_id = ?", (pid,)
                ).fetchone()[0]
                name = f"token-{int(k) + 1}"
            if self._q(
                cur, "SELECT 1 FROM tokens WHERE project_id = ? AND name = ?", (pid, name)
            ).fetchone():
                raise Conflict(f"project {project!r} already has a token named {name!r}")
            row = self._q(
                cur,
                "INSERT INTO tokens (project_id, name, scope, digest, t_created, t_expires) "
                "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (pid, name, scope, digest(secret), time.time(), expires),
            ).fetchone()
            info = _info(
                self._q(cur, f"SELECT {_COLS} FROM {_FROM} WHERE k.id = ?", (row[0],)).fetchone()
            )
        return info, secret

    @retrying
    def list_tokens(self, project: str | None = None) -> list[TokenInfo]:
        """Tokens (of one project, or all), oldest first; never their secrets."""
        stmt = f"SELECT {_COLS} FROM {_FROM}"
        args: tuple[Any, ...] = ()
        if project is not None:
            stmt += " WHERE p.name = ?"
            args = (project,)
        with self._tx() as cur:
            return [_info(r) for r in self._q(cur, stmt + " ORDER BY k.id", args).fetchall()]

    @retrying
    def token_digests(self) -> list[tuple[TokenInfo, str]]:
        """Every token, oldest first, with the digest it is stored as (a store holds no
        secret): what a copy of the store (``tunescope migrate``) takes so that the clients
        of its tokens keep working against the copy."""
        with self._tx() as cur:
            rows = self._q(cur, f"SELECT {_COLS}, k.digest FROM {_FROM} ORDER BY k.id").fetchall()
        return [(_info(r[:-1]), str(r[-1])) for r in rows]

    @retrying
    def keep_token(self, info: TokenInfo, token_digest: str) -> bool:
        """Store a token another store made (:meth:`token_digests`): its digest, project
        (created if new), name, scope and times. False, changing nothing, when that digest is
        here already (a copy run again); Conflict when the project has another token of the
        name."""
        if info.scope not in SCOPES:
            raise ConfigError(f"scope must be read or write, not {info.scope!r}")
        with self._tx(write=True) as cur:
            if self._q(cur, "SELECT 1 FROM tokens WHERE digest = ?", (token_digest,)).fetchone():
                return False
            pid = self._project_id(cur, info.project, create=True)
            if self._q(
                cur, "SELECT 1 FROM tokens WHERE project_id = ? AND name = ?", (pid, info.name)
            ).fetchone():
                raise Conflict(f"project {info.project!r} already has a token named {info.name!r}")
            self._q(
                cur,
                "INSERT INTO tokens (project_id, name, scope, digest, t_created, t_expires, "
                "t_revoked, t_used) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (pid, info.name, info.scope, token_digest, info.created, info.expires,
                 info.revoked, info.used),
            )  # fmt: skip
        return True

    @retrying
    def revoke_token(self, token: int | str, project: str | None = None) -> TokenInfo:
        """Revoke a token by id, or by name within ``project``; NotFound otherwise. Revoking a
        revoked token changes nothing."""
        args: tuple[Any, ...]
        with self._tx(write=True) as cur:
            if isinstance(token, int):
                where, args = "k.id = ?", (token,)
            elif project is None:
                raise ConfigError("revoke a token by name within a project (--project)")
            else:
                where, args = "p.name = ? AND k.name = ?", (project, token)
            found = self._q(cur, f"SELECT {_COLS} FROM {_FROM} WHERE {where}", args).fetchone()
            if found is None:
                raise NotFound(f"no token {token!r}")
            info = _info(found)
            if info.revoked is None:
                self._q(cur, "UPDATE tokens SET t_revoked = ? WHERE id = ?", (time.time(), info.id))
                found = self._q(
                    cur, f"SELECT {_COLS} FROM {_FROM} WHERE k.id = ?", (info.id,)
                ).fetchone()
        return _info(found)

    @retrying
    def check_token(self, secret: str) -> TokenInfo | None:
        """The token ``secret`` names, if it is one and usable now; else None."""
        if not isinstance(secret, str) or not secret.startswith(_PREFIX) or len(secret) > 200:
            return None
        want = digest(secret)
        try:
            with self._tx() as cur:
                row = self._q(
                    cur, f"SELECT {_COLS}, k.digest FROM {_FROM} WHERE k.digest = ?", (want,)
                ).fetchone()
        except NotFound:
            return None
        if row is None or not hmac.compare_digest(str(row[-1]), want):
            return None
        info = _info(row[:-1])
        if not info.usable():
            return None
        now = time.time()
        if info.used is None or now - info.used > _USED_EVERY_S:
            try:
                with self._tx(write=True) as cur:
                    self._q(cur, "UPDATE tokens SET t_used = ? WHERE id = ?", (now, info.id))
                info = replace(info, used=now)
            except StoreError:
                pass  # a busy store: the last use is noted next time
        return info

    @retrying
    def count_token_failure(self, key: str, window: float) -> list[float]:
        """Count one failed token attempt now under ``key`` (a client and a token: the
        server's ``failure_key``), for every server on this store, and forget the attempts
        older than ``window`` seconds (every key's: the table holds one window of them).
        Returns the times (epoch s, oldest first) of ``key``'s attempts within the window,
        this one included. Times are the callers' clocks: servers on one store keep theirs
        in step (NTP)."""
        now = time.time()
        with self._tx(write=True) as cur:
            self._q(cur, "DELETE FROM token_failures WHERE t <= ?", (now - window,))
            self._q(cur, "INSERT INTO token_failures (key, t) VALUES (?, ?)", (str(key), now))
            rows = self._q(
                cur,
                "SELECT t FROM token_failures WHERE key = ? AND t > ? ORDER BY t",
                (str(key), now - window),
            ).fetchall()
        return [float(r[0]) for r in rows]
