"""A small HTTP/1.1 client on an asyncio protocol, for the load generator.

Why not httpx or aiohttp: the load generator's own cost is part of what it measures (its CPU
per 100 requests/s and its TTFT error, ``make bench``), and a token's arrival must be stamped
when its bytes arrive, not after layers of buffering. This client does what the sweep needs
and no more: one keep-alive connection per worker, ``Content-Length``, chunked and
read-until-close bodies, plain HTTP or TLS. It speaks only to the origin it was made for.

Cost: a response is parsed where its bytes arrive, in the protocol's ``data_received``
(:class:`_Wire`): the body's pieces go, chunked encoding removed, to the caller's sink
(:meth:`Response.stream`) with the ``time.perf_counter()`` of their arrival. The task that
made the request wakes twice, for the head and at the body's end, not once per segment (a
stream reader would wake it for every token and copy each through its buffer). Deadlines
are one timer per request (:class:`Expiry`), not one per read.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Connection", "Expiry", "Origin", "Response", "Sink", "TransportError", "get"]

MAX_HEADER_BYTES = 64 * 1024
"""The longest response head taken."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The longest non-streamed body read whole (a /metrics page, a model list)."""
MAX_CHUNK_LINE = 4096
"""The longest chunk-size line (or trailer section) of a chunked body taken."""

Sink = Callable[[bytes, float], None]
"""Takes a piece of a response's body and the ``time.perf_counter()`` of its arrival."""

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_clock = time.perf_counter


class TransportError(Exception):
    """The server could not be reached, or broke the connection or the protocol."""


class _Stale(TransportError):
    """A kept connection closed before any byte of the answer: the request may be sent again."""


class Expiry:
    """``with Expiry(seconds):`` in a task: past ``seconds`` the task is cancelled where it
    waits, and the block raises ``asyncio.TimeoutError`` (one timer, however many reads)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False

    def __enter__(self) -> Expiry:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.handle = asyncio.get_running_loop().call_later(self.seconds, self._fire)
        return self

    def _fire(self) -> None:
        self.expired = True
        self.task.cancel()

    def __exit__(self, et: object, ev: object, tb: object) -> None:
        self.handle.cancel()
        if self.expired and et is asyncio.CancelledError:
            uncancel = getattr(self.task, "uncancel", None)
            if uncancel is not None:
                uncancel()
            raise asyncio.TimeoutError from None


@dataclass(frozen=True)
class Origin:
    """Where requests go: scheme, host and port of a base URL, and its path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        """ValueError names what is wrong with ``url``."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        if not parts.hostname:
            raise ValueError(f"{url!r} has no host")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: give the server's base URL, without ? or #")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"{url!r} has a bad port") from None
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        port = "" if self.port == default else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.prefix}"

    def path(self, p: str) -> str:
        """``p`` under the base URL's path (``/v1`` already in the base is not repeated)."""
        if self.prefix.endswith("/v1") and p.startswith("/v1/"):
            return self.prefix + p[3:]
        return self.prefix + p


class _Wire(asyncio.Protocol):
    """One TCP (or TLS) connection: parses each response as its bytes arrive.

    Phases: ``idle`` (no request out), ``head`` (the status line and headers), ``body``,
    ``closed``. A body is framed by chunked encoding (``left``: bytes of the current chunk
    still to come, its closing CRLF included; then its trailers), by ``Content-Length``
    (``left``) or by the connection's end. Its pieces go to the sink, or wait in ``early``
    with their arrival times until the caller gives one.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.served = 0
        self.transport: asyncio.Transport | None = None
        self.phase = "idle"
        self.keep = True
        self.buf = b""
        self.got = 0
        self.mode = ""
        self.left = 0
        self.trailers = False
        self.sink: Sink | None = None
        self.early: list[tuple[bytes, float]] = []
        self.head: asyncio.Future[tuple[int, dict[str, str]]] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()

    # -------------------------------------------------------------- the caller's side
    def begin(self) -> None:
        """A request is about to be written: expect its response."""
        self.phase = "head"
        self.served += 1
        self.buf = b""
        self.got = 0
        self.sink = None
        self.early = []
        self.head = self.loop.create_future()
        self.done = self.loop.create_future()

    def attach(self, sink: Sink) -> None:
        """Give the body's pieces to ``sink`` from now on, those already come first."""
        early, self.early = self.early, []
        self.sink = sink
        try:
            for piece, t in early:
                sink(piece, t)
        except Exception as exc:  # the sink's own error ends the exchange, in the caller
            self._fail(exc)

    def close(self) -> None:
        """Drop the connection; nobody waits on this wire any more."""
        self.phase = "closed"
        self.keep = False
        self.sink = None
        for fut in (self.head, self.done):
            if not fut.done():
                fut.cancel()
        if self.transport is not None:
            self.transport.close()

    # -------------------------------------------------------------- asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = _clock()
        phase = self.phase
        try:
            if phase == "body":
                if self.mode == "chunked":
                    self._chunked(data, t)
                else:
                    self._body(data, t)
            elif phase == "head":
                self._head(data, t)
            elif phase == "idle":
                self.keep = False  # bytes nobody asked for: not a connection to reuse
        except Exception as exc:  # the sink's (or a parser's) error ends the exchange
            self._fail(exc)

    def eof_received(self) -> None:
        return None  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        phase, self.phase = self.phase, "closed"
        self.keep = False
        why = f": {exc}" if exc is not None else ""
        if phase == "head":
            if self.got == 0 and self.served > 1:
                self._fail(_Stale("the kept connection was closed"))
            elif self.got == 0:
                self._fail(TransportError(f"the server closed the connection unanswered{why}"))
            else:
                self._fail(TransportError(f"connection broken in the response's head{why}"))
        elif phase == "body":
            if self.mode == "close":
                self._finish()
            else:
                self._fail(TransportError(f"connection closed mid-body{why}"))

    # -------------------------------------------------------------- parsing
    def _fail(self, exc: Exception) -> None:
        self.phase = "closed"
        self.keep = False
        self.sink = None
        for fut in (self.head, self.done):
            if not fut.done():
                fut.set_exception(exc)
                break  # the one the caller waits on now (or next)
        if self.transport is not None:
            self.transport.close()

    def _finish(self) -> None:
        if self.phase != "closed":
            self.phase = "idle"
        if not self.done.done():
            self.done.set_result(None)

    def _emit(self, piece: bytes, t: float) -> None:
        """Hand ``piece`` on (what the sink raises ends the exchange: data_received)."""
        sink = self.sink
        if sink is None:
            self.early.append((piece, t))
        else:
            sink(piece, t)

    def _head(self, data: bytes, t: float) -> None:
        self.got += len(data)
        start = max(0, len(self.buf) - 3)
        buf = self.buf = self.buf + data
        m = _HEAD_END.search(buf, start)
        if m is None:
            if len(buf) > MAX_HEADER_BYTES:
                self._fail(TransportError("response head too long"))
            return
        if m.end() > MAX_HEADER_BYTES:
            self._fail(TransportError("response head too long"))
            return
        lines = buf[: m.start()].decode("latin-1").split("\n")
        rest, self.buf = buf[m.end() :], b""
        parts = lines[0].rstrip("\r").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            self._fail(TransportError(f"not an HTTP response: {buf[:60]!r}"))
            return
        hdrs: dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        self.phase = "body"
        self.left = 0
        self.trailers = False
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            self.mode = "chunked"
        elif "content-length" in hdrs:
            self.mode = "length"
            try:
                self.left = int(hdrs["content-length"])
            except ValueError:
                self.left = -1
            if self.left < 0:
                self.head.set_result((int(parts[1]), hdrs))
                self._fail(TransportError("malformed Content-Length"))
                return
        else:
            self.mode = "close"
            self.keep = False
        if hdrs.get("connection", "").lower() == "close":
            self.keep = False
        self.head.set_result((int(parts[1]), hdrs))
        if self.mode == "length" and self.left == 0:
            self._finish()
        if rest:
            if self.phase == "body":
                self._body(rest, t)
            else:
                self.keep = False  # bytes past the response: not ours to guess

    def _body(self, data: bytes, t: float) -> None:
        if self.mode == "chunked":
            self._chunked(data, t)
        elif self.mode == "length":
            left = self.left
            if len(data) > left:
                data = data[:left]
                self.keep = False  # bytes past the response: not ours to guess
            self.left = left - len(data)
            self._emit(data, t)
            if self.left == 0:
                self._finish()
        else:
            self._emit(data, t)

    def _chunked(self, data: bytes, t: float) -> None:
        if self.buf:
            data, self.buf = self.buf + data, b""
        p, n = 0, len(data)
        while p < n:
            left = self.left
            if left > 2:  # the chunk's data
                end = min(n, p + left - 2)
                self.left = left - (end - p)
                self._emit(data[p:end], t)
                p = end
            elif left > 0:  # its closing CRLF
                k = min(left, n - p)
                self.left, p = left - k, p + k
            elif self.trailers:
                tail = data[p:]
                if tail.startswith(b"\r\n"):
                    end = 2
                else:
                    end = tail.find(b"\r\n\r\n") + 4
                    if end < 4:
                        if len(tail) > MAX_CHUNK_LINE:
                            self._fail(TransportError("malformed chunked body"))
                        else:
                            self.buf = tail
                        return
                if len(tail) > end:
                    self.keep = False  # bytes past the response: not ours to guess
                self._finish()
                return
            else:  # a chunk's size line
                i = data.find(b"\r\n", p)
                if i < 0:
                    if n - p > MAX_CHUNK_LINE:
                        self._fail(TransportError("malformed chunked body"))
                    else:
                        self.buf = data[p:]
                    return
                try:
                    size = int(data[p:i], 16)
                except ValueError:  # with extensions (or not a size)
                    try:
                        size = int(data[p:i].split(b";", 1)[0].strip() or b"x", 16)
                    except ValueError:
                        size = -1
                if size < 0:
                    self._fail(TransportError("malformed chunked body"))
                    return
                p = i + 2
                if size == 0:
                    self.trailers = True
                elif p + size + 2 <= n:  # the whole chunk is here (a token's, usually)
                    if (sink := self.sink) is not None:
                        sink(data[p : p + size], t)
                    else:
                        self.early.append((data[p : p + size], t))
                    p += size + 2
                else:
                    self.left = size + 2


@dataclass
class Response:
    """A response whose body is still to be read: :meth:`stream` or :meth:`read`."""

    status: int
    headers: dict[str, str]
    _conn: Connection

    async def stream(self, sink: Sink) -> None:
        """Give the body's pieces (chunked encoding removed) to ``sink`` as they arrive,
        each with the ``time.perf_counter()`` of its arrival; return at the body's end.
        ``sink`` runs in the connection's protocol: it must be quick, and an exception it
        raises ends the exchange and is raised here."""
        c = self._conn
        wire = c._wire
        assert wire is not None
        wire.attach(sink)
        try:
            await wire.done
        except BaseException:
            c.close()
            raise
        c.busy = False
        c.keep = wire.keep

    async def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        out = bytearray()

        def take(piece: bytes, t: float) -> None:
            out.extend(piece)
            if len(out) > limit:
                raise TransportError(f"body longer than {limit} bytes")

        await self.stream(take)
        return bytes(out)


class Connection:
    """One keep-alive connection to ``origin``, opened on first use and again after the
    server closed it. One request at a time."""

    def __init__(self, origin: Origin, ssl_context: ssl.SSLContext | None = None):
        self.origin = origin
        self.ssl = ssl_context
        self._wire: _Wire | None = None
        self.keep = False
        self.busy = False
        self._host = f"Host: {origin.host}:{origin.port}\r\n"

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        self._wire = None
        self.keep = False
        self.busy = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Send the request and read the response's head (the caller bounds the time:
        :class:`Expiry`)."""
        if self.busy or not self.keep or self._wire is None or self._wire.phase != "idle":
            self.close()
        fresh = self._wire is None
        if fresh:
            await self._open()
        wire = self._wire
        assert wire is not None and wire.transport is not None
        head = f"{method} {path} HTTP/1.1\r\n{self._host}Accept: */*\r\nConnection: keep-alive\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        wire.begin()
        wire.transport.write((head + "\r\n").encode() + (body or b""))
        self.busy = True
        try:
            status, hdrs = await wire.head
        except _Stale:
            self.close()
            return await self.request(method, path, body, headers)
        except BaseException:
            self.close()
            raise
        self.keep = True
        return Response(status, hdrs, self)

    async def _open(self) -> None:
        ctx = self.ssl
        if self.origin.scheme == "https" and ctx is None:
            ctx = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        wire = _Wire(loop)
        try:
            await loop.create_connection(
                lambda: wire,
                self.origin.host,
                self.origin.port,
                ssl=ctx if self.origin.scheme == "https" else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self.origin.base}: {exc}") from None
        self._wire = wire


async def get(conn: Connection, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``path`` on the connection's origin: (status, body). TransportError or
    asyncio.TimeoutError when it could not be had within ``timeout`` seconds."""
    with Expiry(timeout):
        resp = await conn.request("GET", path, None)
        return resp.status, await resp.read()
