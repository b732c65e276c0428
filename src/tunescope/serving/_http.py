"""A small HTTP/1.1 client on asyncio streams, for the load generator.

Why not httpx or aiohttp: the load generator's own cost is part of what it measures (its CPU
per 100 requests/s and its TTFT error, ``make bench``), and a token's arrival must be stamped
when its bytes arrive, not after layers of buffering. This client does what the sweep needs
and no more: one keep-alive connection per worker, ``Content-Length``, chunked and
read-until-close bodies, plain HTTP or TLS. Deadlines are one timer per request
(:class:`Expiry`), not one per read: a per-read ``asyncio.wait_for`` would cost a task for
every token. It speaks only to the origin it was made for.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Connection", "Expiry", "Origin", "Response", "TransportError", "get"]

MAX_HEADER_BYTES = 64 * 1024
"""The longest response head taken."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The longest non-streamed body read whole (a /metrics page, a model list)."""


class TransportError(Exception):
    """The server could not be reached, or broke the connection or the protocol."""


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


@dataclass
class Response:
    """A response whose body is still to be read: :meth:`chunks` or :meth:`read`."""

    status: int
    headers: dict[str, str]
    _conn: Connection

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (chunked encoding removed)."""
        c = self._conn
        te = self.headers.get("transfer-encoding", "").lower()
        if "chunked" in te:
            # parsed from whole reads: one await per arriving segment, not two per chunk
            buf = bytearray()
            while True:
                while (i := buf.find(b"\r\n")) < 0:
                    buf += await c._more()
                try:
                    size = int(bytes(buf[:i]).split(b";", 1)[0].strip() or b"x", 16)
                except ValueError:
                    c.close()
                    raise TransportError("malformed chunked body") from None
                if size == 0:
                    del buf[: i + 2]
                    while not buf.startswith(b"\r\n") and b"\r\n\r\n" not in buf:
                        buf += await c._more()  # trailers, then the empty line
                    end = 2 if buf.startswith(b"\r\n") else buf.index(b"\r\n\r\n") + 4
                    if len(buf) > end:  # bytes past the response: not ours to guess
                        c.keep = False
                    break
                need = i + 2 + size + 2
                while len(buf) < need:
                    buf += await c._more()
                yield bytes(buf[i + 2 : i + 2 + size])
                del buf[:need]
        elif "content-length" in self.headers:
            try:
                left = int(self.headers["content-length"])
            except ValueError:
                raise TransportError("malformed Content-Length") from None
            while left > 0:
                data = await c._read(min(left, 65536))
                if not data:
                    raise TransportError("connection closed mid-body")
                left -= len(data)
                yield data
        else:
            c.keep = False
            while True:
                data = await c._read(65536)
                if not data:
                    break
                yield data
        if self.headers.get("connection", "").lower() == "close":
            c.keep = False
        c.busy = False

    async def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        out = bytearray()
        async for data in self.chunks():
            out += data
            if len(out) > limit:
                self._conn.close()
                raise TransportError(f"body longer than {limit} bytes")
        return bytes(out)


class Connection:
    """One keep-alive connection to ``origin``, opened on first use and again after the
    server closed it. One request at a time."""

    def __init__(self, origin: Origin, ssl_context: ssl.SSLContext | None = None):
        self.origin = origin
        self.ssl = ssl_context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.keep = False
        self.busy = False

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
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
        if self.busy or not self.keep:
            self.close()
        fresh = self.writer is None
        if fresh:
            await self._open()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.origin.host}:{self.origin.port}"]
        head += ["Accept: */*", "Connection: keep-alive"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
        try:
            assert self.writer is not None
            self.writer.write(raw)
            self.busy = True
            status_line = await self._readline()
            if not status_line and not fresh:  # a kept connection the server had closed
                self.close()
                return await self.request(method, path, body, headers)
        except (ConnectionError, OSError) as exc:
            self.close()
            if not fresh:
                return await self.request(method, path, body, headers)
            raise TransportError(f"connection failed: {exc}") from None
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            self.close()
            raise TransportError(f"not an HTTP response: {status_line[:60]!r}")
        hdrs: dict[str, str] = {}
        size = 0
        while True:
            line = await self._readline()
            size += len(line)
            if size > MAX_HEADER_BYTES:
                self.close()
                raise TransportError("response head too long")
            if not line.strip():
                break
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        self.keep = True
        return Response(int(parts[1]), hdrs, self)

    async def _open(self) -> None:
        ctx = self.ssl
        if self.origin.scheme == "https" and ctx is None:
            ctx = ssl.create_default_context()
        try:
            self.reader, self.writer = await asyncio.open_connection(
                self.origin.host,
                self.origin.port,
                ssl=ctx if self.origin.scheme == "https" else None,
                limit=MAX_HEADER_BYTES,
            )
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self.origin.base}: {exc}") from None

    async def _readline(self) -> bytes:
        assert self.reader is not None
        try:
            return await self.reader.readline()
        except asyncio.CancelledError:
            self.close()
            raise
        except (ValueError, asyncio.LimitOverrunError):
            self.close()
            raise TransportError("line too long") from None
        except (ConnectionError, OSError) as exc:
            self.close()
            raise TransportError(f"connection broken: {exc}") from None

    async def _read(self, n: int) -> bytes:
        assert self.reader is not None
        try:
            return await self.reader.read(n)
        except asyncio.CancelledError:
            self.close()
            raise
        except (ConnectionError, OSError) as exc:
            self.close()
            raise TransportError(f"connection broken: {exc}") from None

    async def _more(self) -> bytes:
        data = await self._read(65536)
        if not data:
            self.close()
            raise TransportError("connection closed mid-body")
        return data


async def get(conn: Connection, path: str, timeout: float) -> tuple[int, bytes]:
    """GET ``path`` on the connection's origin: (status, body). TransportError or
    asyncio.TimeoutError when it could not be had within ``timeout`` seconds."""
    with Expiry(timeout):
        resp = await conn.request("GET", path, None)
        return resp.status, await resp.read()
