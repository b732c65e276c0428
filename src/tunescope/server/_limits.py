"""The server's bounds on what a caller sends, applied before anything is read whole.

* **Bodies** (:class:`BodyLimits`, the app's outermost layer but the Host check): every
  request's body is counted while it streams, against the limit of its route
  (:func:`body_limit`): a login's :data:`LOGIN_BODY_BYTES`, a batch's or a store call's
  :data:`~tunescope.store.MAX_BATCH_BYTES`, any other route's :data:`OTHER_BODY_BYTES`. A
  ``Content-Length`` beyond it is 413 ``too_large`` at once, before a byte is read; a
  chunked body is 413 as soon as it passes it. Either way the connection is closed after the
  answer (``Connection: close``), so the rest is never read. A body that stalls for
  :data:`READ_TIMEOUT_S` is 408 ``timeout``.
* **NUL** anywhere in the path or the query string is 422 ``invalid`` (a database refuses
  NUL in text: never a 500).
* **JSON nesting** (:func:`check_depth`): a body nested deeper than :data:`MAX_JSON_DEPTH` is
  422 before it is parsed (a parser recursing 100,000 levels would fail as a 500).
* **Bytes in flight** (:class:`InFlight`): the batch and store routes hold, while a request
  runs, a share of one budget (:data:`INFLIGHT_BYTES`) for its body and what it
  decompresses to; past the budget the request is 429 ``busy`` with ``Retry-After`` (an HTTP
  store keeps the batch and sends it again).
* **Connections** (:func:`protocol_class`, uvicorn's h11 protocol): a connection that has not
  sent a whole request head within :data:`READ_TIMEOUT_S` (when opened, or after its last
  answer) is closed; ``tunescope serve`` caps connections (uvicorn's ``limit_concurrency``,
  503 beyond) and raises the open-files soft limit to the hard one (:func:`raise_nofile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunescope.server._errors import ApiError, error_response
from tunescope.store import MAX_BATCH_BYTES

__all__ = [
    "INFLIGHT_BYTES",
    "LOGIN_BODY_BYTES",
    "MAX_CONNECTIONS",
    "MAX_JSON_DEPTH",
    "OTHER_BODY_BYTES",
    "READ_TIMEOUT_S",
    "BodyLimits",
    "InFlight",
    "body_limit",
    "check_depth",
    "protocol_class",
    "raise_nofile",
    "read_body",
]

LOGIN_BODY_BYTES = 4096
"""Largest body of ``POST /api/session`` (a token in JSON)."""
OTHER_BODY_BYTES = 64 * 1024
"""Largest body of a route that is neither a login, a batch nor a store call (none reads
one)."""
INFLIGHT_BYTES = 2 * MAX_BATCH_BYTES
"""Bytes of batch and store-call bodies (as sent, and once decompressed) the server holds at
once; a request that would pass it is 429 ``busy``."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a JSON body may have."""
READ_TIMEOUT_S = 10.0
"""Longest wait for a request's head (after a connection opens or answers) and for each part
of its body."""
MAX_CONNECTIONS = 1024
"""Connections (and requests running) ``tunescope serve`` takes at once; 503 beyond."""
RETRY_AFTER_S = 1
"""The ``Retry-After`` of a 429 ``busy``."""


def body_limit(path: str) -> int:
    """The largest body a request to ``path`` may send."""
    if path == "/api/session":
        return LOGIN_BODY_BYTES
    if path == "/api/v1/ingest" or path.startswith("/api/v1/store/"):
        return MAX_BATCH_BYTES
    return OTHER_BODY_BYTES


def too_large(limit: int) -> ApiError:
    """413 ``too_large``; the connection closes after it (its body is not read)."""
    return ApiError(413, "too_large", f"the body exceeds {limit} bytes", {"Connection": "close"})


_SCAN_STEP = 1024 * 1024
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def check_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """422 ``invalid`` when the JSON text ``raw`` nests arrays and objects deeper than
    ``limit``: a scan of its brackets outside strings, before any parsing (text that is not
    JSON passes; the parser refuses it)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return
    bare = np.frombuffer(_STRINGS.sub(b"", raw), dtype=np.uint8)
    depth = 0
    for i in range(0, bare.size, _SCAN_STEP):  # a slice at a time: a few MiB, not 8 per byte
        levels = np.cumsum(_OPEN[bare[i : i + _SCAN_STEP]], dtype=np.int32)
        if depth + int(levels.max()) > limit:
            raise ApiError(422, "invalid", f"the JSON body nests deeper than {limit} levels")
        depth += int(levels[-1])


class InFlight:
    """A budget of bytes that requests hold while they run (one event loop: no lock)."""

    def __init__(self, budget: int = INFLIGHT_BYTES) -> None:
        self.budget = budget
        self.held = 0

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[Hold]:
        """A share of the budget for one request, given back when it ends."""
        share = Hold(self)
        try:
            yield share
        finally:
            self.held -= share.bytes
            share.bytes = 0


class Hold:
    """One request's share of an :class:`InFlight` budget."""

    def __init__(self, owner: InFlight) -> None:
        self.owner = owner
        self.bytes = 0

    def take(self, n: int) -> None:
        """Add ``n`` bytes to the share; 429 ``busy`` when the budget has not got them."""
        if n <= 0:
            return
        if self.owner.held + n > self.owner.budget:
            raise ApiError(
                429,
                "busy",
                "the server holds as many large bodies as it may: send again later",
                {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
            )
        self.owner.held += n
        self.bytes += n


async def read_body(request: Request, hold: Hold | None = None) -> bytes:
    """The whole body of ``request``, within its route's limit (:func:`body_limit`; the
    :class:`BodyLimits` layer refuses more before this sees it); with ``hold``, the bytes
    are taken from its budget as they come (a declared ``Content-Length`` at once), 429
    ``busy`` past it. A body cut off by a refusal or a lost client is 413 / 400 here, so
    the route stops quietly."""
    limit = body_limit(request.url.path)
    declared = _content_length(request.scope)
    taken = 0
    if hold is not None and declared is not None:
        hold.take(declared)
        taken = declared
    raw = bytearray()
    try:
        async for part in request.stream():
            raw += part
            if len(raw) > limit:
                raise too_large(limit)
            if hold is not None and len(raw) > taken:
                hold.take(len(raw) - taken)
                taken = len(raw)
    except ClientDisconnect:
        raise ApiError(400, "disconnected", "the body did not arrive whole") from None
    return bytes(raw)


class BodyLimits:
    """Counts each request's body as it streams (see the module doc); refuses NUL in the
    path or query."""

    def __init__(self, app: ASGIApp, timeout: float = READ_TIMEOUT_S) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if (
            b"\x00" in scope.get("raw_path", b"")
            or "\x00" in scope["path"]
            or (b"%00" in scope.get("query_string", b"") or b"%00" in scope.get("raw_path", b""))
        ):
            await _refuse(ApiError(422, "invalid", "the URL holds a NUL character"), scope, send)
            return
        limit = body_limit(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(too_large(limit), scope, send)
            return
        state = {"seen": 0, "done": False, "started": False, "refused": False}

        async def counted() -> Message:
            if state["done"] or state["refused"]:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout)
            except asyncio.TimeoutError:
                return await refuse(
                    ApiError(
                        408,
                        "timeout",
                        f"no part of the body came for {self.timeout:g} s",
                        {"Connection": "close"},
                    )
                )
            if message["type"] == "http.request":
                state["seen"] += len(message.get("body", b""))
                if state["seen"] > limit:
                    return await refuse(too_large(limit))
                if not message.get("more_body", False):
                    state["done"] = True
            return message

        async def refuse(err: ApiError) -> Message:
            state["refused"] = True
            if not state["started"]:
                state["started"] = True
                await _refuse(err, scope, send)
            return {"type": "http.disconnect"}

        async def guarded(message: Message) -> None:
            if state["refused"]:
                return  # answered already: what the app says now goes nowhere
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not state["refused"]:
                raise  # the app's failure once it read a refused body is of no interest


async def _refuse(err: ApiError, scope: Scope, send: Send) -> None:
    """Answer ``err`` (this layer is outside the one that marks /api answers no-store)."""
    headers = {**(err.headers or {}), "Cache-Control": "no-store"}
    response = error_response(err.status, err.code, err.message, headers)

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, nothing, send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def protocol_class(timeout: float = READ_TIMEOUT_S) -> Any:
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request head
    within ``timeout`` seconds of opening or of its last answer (uvicorn itself waits for a
    head forever: a client sending a byte a minute would hold its connection)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(timeout, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a whole request head came
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

    return Protocol


def raise_nofile() -> tuple[int, int]:
    """Raise this process's open-files soft limit to its hard limit; (soft, hard) after. A
    system without ``resource`` (Windows) or a refusal leaves it as it is."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)
