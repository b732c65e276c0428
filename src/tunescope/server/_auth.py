"""Who asks: the principal of a request.

Two modes. ``local`` (`tunescope ui`, a viewer on loopback): every request may read every
project. ``tokens`` (`tunescope serve`, a team server): every API request carries a token, in
an ``Authorization: Bearer`` header (clients, the SDK) or the page's session cookie (see
``_session.py``); the token's project is all the request may see, and only a ``write`` token
may record into it.

Failures answer in the one error shape: 401 ``unauthorized`` (no token, an unknown, revoked or
expired one; with ``WWW-Authenticate: Bearer``), 403 ``forbidden`` (a read token that writes),
429 ``too_many_attempts`` (after :data:`MAX_FAILURES` failed attempts with one token from one
client within :data:`FAILURE_WINDOW_S`, until fewer are left within it; with ``Retry-After``).
Tokens are compared in constant time by the store (``store/sql/_tokens.py``).

The rate limit never blocks a valid token. Failures are counted per (client address, first
:data:`DIGEST_PREFIX` hex digits of the token's digest): a blocked pair is answered 429 without
asking the store (a spool retrying a revoked token costs the database nothing), while another
token from the same address, a valid one included, is checked as usual. A token is 256 random
bits, so the limit sheds load; it is not what stops guessing. The client address is the
socket's peer; ``X-Forwarded-For`` is believed only from the proxies the app is told to trust
(``tunescope serve --trusted-proxy``, none by default; see ``_app.py``).

Servers on one store (replicas behind a proxy, see docs/scale.md) share the count: each failed
attempt, which has asked the store already, is counted in it
(``SQLStore.count_token_failure``), and the server that sees the pair's count within the
window reach :data:`MAX_FAILURES` blocks the pair itself until the count would fall below it.
Another server learns it at the pair's next failure there, so N servers let at most
``MAX_FAILURES + N - 1`` failures of a pair reach the store within a window. A failure the
store cannot count (an error) is answered 401 all the same and not counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request

from tunescope._kept import Kept
from tunescope._once import Once
from tunescope.errors import StoreError
from tunescope.server._errors import ApiError
from tunescope.store import token_digest as digest

__all__ = [
    "DIGEST_PREFIX",
    "FAILURE_WINDOW_S",
    "LOCAL",
    "MAX_FAILURES",
    "TOKEN_CACHE_S",
    "Authenticator",
    "Mode",
    "Principal",
    "client_address",
    "failure_key",
    "principal_of",
    "require_write",
]

Mode = Literal["local", "tokens"]

log = logging.getLogger("tunescope.server")
_once = Once(log)

MAX_FAILURES = 10
DIGEST_PREFIX = 12
"""Hex digits of a token's digest that, with the client address, key its failures: enough
that two tokens never share a key in practice, too few to say anything about the token."""
TOKEN_CACHE_S = 5.0
"""How long a server remembers that a token checked out (a revocation takes effect within
this time)."""
FAILURE_WINDOW_S = 60.0
_CLIENTS_KEPT = 10_000
"""Clients (by address) and tokens remembered: the least recently seen are forgotten."""


@dataclass(frozen=True)
class Principal:
    """What a request may do: ``project`` (None: every project, the local viewer), ``scope``
    (``read`` or ``write``) and the token that says so (None when local)."""

    project: str | None
    scope: str
    token: int | None = None

    def sees(self, project: str) -> bool:
        return self.project is None or self.project == project


LOCAL = Principal(None, "write", None)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def require_write(p: Principal) -> None:
    """403 unless the principal may record."""
    if p.scope != "write":
        raise ApiError(403, "forbidden", "this token may read only: recording needs a write token")


class _Failures:
    """The (client, token) pairs this server blocks, each until when (monotonic): those whose
    failed attempts, as the store counted them for every server, reached the limit.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: Kept[str, float] = Kept(_CLIENTS_KEPT)

    def blocked_for(self, client: str, now: float) -> float:
        with self._lock:
            until = self._until.get(client)
            if until is None:
                return 0.0
            if until <= now:
                self._until.pop(client)
                return 0.0
            return until - now

    def note(self, client: str, times: list[float], now: float, wall: float) -> None:
        """The pair's failed attempts within the window are at ``times`` (epoch s, oldest
        first, as the store counted them): block it until fewer than :data:`MAX_FAILURES`
        would be left, if that is later than ``wall`` (this server's epoch time, when
        ``now`` on the monotonic clock)."""
        if len(times) < MAX_FAILURES:
            return
        left = times[len(times) - MAX_FAILURES] + FAILURE_WINDOW_S - wall
        if left > 0:
            with self._lock:
                self._until.put(client, now + left)


class Authenticator:
    """The principal of each request (see the module doc); ``store`` checks tokens."""

    def __init__(self, store: Any, mode: Mode) -> None:
        self.store = store
        self.mode = mode
        self._failures = _Failures()
        self._recent: Kept[str, tuple[float, Any]] = Kept(_CLIENTS_KEPT)
        self.session_token: Callable[[Request], str | None] | None = None
        """Where a request without a bearer header keeps its token: the page's session
        cookie (set by ``_session.py``), None when there is no such place."""

    def __call__(self, request: Request) -> Principal:
        p = self.principal(request)
        request.state.principal = p
        return p

    def principal(self, request: Request) -> Principal:
        if self.mode == "local":
            return LOCAL
        secret = _bearer(request)
        if secret is None and self.session_token is not None:
            secret = self.session_token(request)
        return self.check(request, secret)

    def _checked(self, secret: str, now: float) -> Any:
        """The store's check of ``secret``, remembered for :data:`TOKEN_CACHE_S` seconds (by
        digest; a failed check is never remembered): a client sending a batch a second costs
        one token query every few seconds, and a revoked token is refused within that time."""
        key = digest(secret)
        hit = self._recent.get(key)
        if hit is not None and now - hit[0] < TOKEN_CACHE_S and hit[1].usable():
            return hit[1]
        info = self.store.check_token(secret)
        if info is None:
            self._recent.pop(key)
        else:
            self._recent.put(key, (now, info))
        return info

    def check(self, request: Request, secret: str | None) -> Principal:
        """The principal of token ``secret`` (None: none given), sent by ``request``'s client:
        401 for no token; 429 while this token is blocked from this client; 401 for a token
        that is not usable now (which counts as a failed attempt of the pair). The page's
        login checks its token here too."""
        if secret is None:
            raise unauthorized("this server needs a token: Authorization: Bearer <token>")
        now = time.monotonic()
        key = failure_key(request, secret)
        wait = self._failures.blocked_for(key, now)
        if wait > 0:
            raise ApiError(
                429,
                "too_many_attempts",
                "too many failed attempts: try again later",
                {"Retry-After": str(max(1, round(wait)))},
            )
        info = self._checked(secret, now)
        if info is None:
            self._count_failure(key, now)
            raise unauthorized("the token is unknown, revoked or expired")
        return Principal(info.project, info.scope, info.id)

    def _count_failure(self, key: str, now: float) -> None:
        """Count a failed attempt of pair ``key`` in the store, for every server on it, and
        block the pair here when the count reached the limit."""
        try:
            times = self.store.count_token_failure(key, FAILURE_WINDOW_S)
        except StoreError as exc:
            _once("count-failure", "a failed token attempt was not counted: %s", exc)
            return
        self._failures.note(key, times, now, time.time())


def client_address(request: Request) -> str:
    """The address of ``request``'s client: the socket's peer, or what a trusted proxy's
    ``X-Forwarded-For`` says (the app's proxy middleware has already put it in place)."""
    return request.client.host if request.client else "?"


def failure_key(request: Request, secret: str) -> str:
    """What failed attempts with ``secret`` from ``request``'s client are counted under."""
    return f"{client_address(request)} {digest(secret)[:DIGEST_PREFIX]}"


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    kind, _, secret = value.partition(" ")
    if kind.lower() == "bearer" and secret.strip():
        return secret.strip()
    return None


def principal_of(request: Request) -> Principal:
    """The principal the app's dependency found for this request (LOCAL when none ran)."""
    p = getattr(request.state, "principal", None)
    return p if isinstance(p, Principal) else LOCAL
