"""One keep-alive connection to a tunescope server: the transport of HTTP stores.

A :class:`Client` sends JSON bodies by POST and returns the answers' JSON, under a lock (one
request at a time on one connection, as the store contract serialises calls). It opens the
connection on the first request and again when the server closed it (an idle keep-alive
connection is not reused after :data:`IDLE_REUSE_S`, and one the server closed reads as
ready). Failures become store errors in one line, the token never in them:

* cannot connect, a timeout (``timeout``), a connection lost, any 5xx or 429 whose code
  names no more precise class: :class:`~tunescope.errors.StoreUnavailable`. A request that
  may be repeated (``retry``) is sent once more when a reused connection turns out closed
  before any answer; one that may not (appends, ``create_trial``) raises, as whether it
  landed is unknown;
* 401, 403, a certificate that does not verify: :class:`~tunescope.errors.AccessDenied`
  naming ``$TUNESCOPE_TOKEN`` or ``$TUNESCOPE_CA_BUNDLE``;
* 400, 409, 413 or 422 to a batch (``/api/v1/ingest``): the ingest's own validation proves
  the batch wrong (409: its id was written before with other content):
  :class:`~tunescope.errors.Rejected` (writers set it aside);
* any other error answer: the class its code names (``wire.CODES``).
"""

from __future__ import annotations

import gzip
import http.client
import os
import select
import ssl
import threading
import time
from typing import Any
from urllib.parse import quote

from tunescope._env import ENV_CA_BUNDLE, ENV_TOKEN
from tunescope.errors import AccessDenied, ConfigError, Rejected, StoreError, StoreUnavailable
from tunescope.store._url import http_target
from tunescope.store.remote.wire import PROJECT_HEADER, error_of, loads

__all__ = ["IDLE_REUSE_S", "INGEST_PATH", "TIMEOUT_S", "Client"]

TIMEOUT_S = 15.0
"""Longest a request waits for the server before it raises StoreUnavailable."""

INGEST_PATH = "/api/v1/ingest"
"""Where batches go: a 400/409/413/422 answer there is the ingest's proof that the batch is
wrong."""

IDLE_REUSE_S = 2.0
"""A connection idle longer than this is opened again rather than reused (servers close idle
keep-alive connections: uvicorn after 5 s)."""


class Client:
    """The connection of one HTTP store ``url`` (``http(s)://HOST:PORT/PROJECT``), with the
    token of ``$TUNESCOPE_TOKEN`` read now. Opening it sends nothing. Thread-safe."""

    def __init__(self, url: str, timeout: float | None = None) -> None:
        tls, host, port, project = http_target(url)
        self.url = url
        self.project = project
        self.timeout = TIMEOUT_S if timeout is None else float(timeout)
        token = os.environ.get(ENV_TOKEN, "").strip()
        if token and not (token.isascii() and token.isprintable()):
            raise ConfigError(f"${ENV_TOKEN} is not a token (tokens are printable ASCII)")
        self._headers = {
            "Content-Type": "application/json",
            "Accept-Encoding": "gzip",
            PROJECT_HEADER: quote(project, safe=""),
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._has_token = bool(token)
        self._host, self._port = host, port
        self._ssl = _ssl_context() if tls else None
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._used_at = 0.0
        self._closed = False
        self.requests = 0
        """Requests answered so far."""
        self.connections = 0
        """Connections opened so far."""

    def _connection(self) -> http.client.HTTPConnection:
        conn = self._conn
        if conn is not None and (
            time.monotonic() - self._used_at > IDLE_REUSE_S or _closed_by_peer(conn)
        ):
            self._drop()
            conn = None
        if conn is None:
            if self._ssl is not None:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            try:
                conn.connect()
            except BaseException:
                conn.close()
                raise
            self.connections += 1
            self._conn = conn
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _exchange(self, path: str, body: bytes, headers: dict[str, str], retry: bool) -> Any:
        """One request and its answer (status, Content-Encoding, body). Lock held."""
        for attempt in (0, 1):
            kept = self._conn
            try:
                conn = self._connection()
            except ssl.SSLCertVerificationError as exc:
                raise AccessDenied(
                    f"cannot verify the certificate of {self.url}: {exc.verify_message}; "
                    f"${ENV_CA_BUNDLE} may name a file of the CAs to trust"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                raise StoreUnavailable(f"cannot reach {self.url}: {_why(exc)}") from None
            reused = conn is kept
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except TimeoutError:
                self._drop()
                raise StoreUnavailable(
                    f"{self.url} did not answer within {self.timeout:g} s"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                if attempt == 0 and retry and reused:
                    continue  # a kept-alive connection the server had closed: once more
                raise StoreUnavailable(f"lost the connection to {self.url}: {_why(exc)}") from None
            self.requests += 1
            self._used_at = time.monotonic()
            if resp.will_close:
                self._drop()
            return resp.status, resp.getheader("Content-Encoding"), data
        raise AssertionError("unreachable")

    def post(self, path: str, body: bytes, *, compressed: bool, retry: bool) -> dict[str, Any]:
        """POST ``body`` (JSON, gzip-compressed when ``compressed``) and return the answer's
        JSON; the error an answer stands for is raised."""
        headers = dict(self._headers)
        if compressed:
            headers["Content-Encoding"] = "gzip"
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.url} is closed")
            status, encoding, data = self._exchange(path, body, headers, retry)
        try:
            if encoding == "gzip":
                data = gzip.decompress(data)
            answer = loads(data) if data else None
        except (OSError, EOFError, ValueError):
            answer = None
        if 200 <= status < 300:
            if not isinstance(answer, dict):
                raise StoreError(f"{self.url} answered {path} with something not JSON")
            return answer
        raise self._error(status, answer, path)

    def _error(self, status: int, answer: Any, path: str = "") -> Exception:
        err = answer.get("error") if isinstance(answer, dict) else None
        code = str(err.get("code", "")) if isinstance(err, dict) else ""
        message = _first_line(str(err.get("message", ""))) if isinstance(err, dict) else ""
        if code == "unauthorized" or (not code and status == 401):
            if not self._has_token:
                return AccessDenied(
                    f"{self.url} needs a token: set ${ENV_TOKEN} to a token of project "
                    f"{self.project!r} (tunescope token create)"
                )
            return AccessDenied(
                f"{self.url} refused the token in ${ENV_TOKEN}: {message or 'unauthorized'}"
            )
        if code == "forbidden" or (not code and status == 403):
            return AccessDenied(
                f"{self.url} refused the token in ${ENV_TOKEN}: {message or 'forbidden'}"
            )
        what = f"{self.url} answered HTTP {status}" + (f" ({code})" if code else "")
        if path == INGEST_PATH and status in (400, 409, 413, 422):
            return Rejected(f"{what}: {message}" if message else what)
        exc = error_of(code, f"{self.url}: {message or code}") if code else None
        if (status == 429 or status >= 500) and (exc is None or type(exc) is StoreError):
            return StoreUnavailable(f"{what}: {message}" if message else what)
        if exc is not None:
            return exc
        return StoreError(f"{what}; is it a tunescope server?")

    def close(self) -> None:
        """Close the connection; later requests raise StoreError. Safe to call twice."""
        with self._lock:
            self._closed = True
            self._drop()


def _ssl_context() -> ssl.SSLContext:
    """The system's trust store, or the CAs in $TUNESCOPE_CA_BUNDLE."""
    bundle = os.environ.get(ENV_CA_BUNDLE) or None
    try:
        return ssl.create_default_context(cafile=bundle)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"${ENV_CA_BUNDLE} {bundle!r} is not a file of CA certificates: {exc}"
        ) from None


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether the server closed an idle keep-alive connection (it reads as ready: at EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = _first_line(str(exc))
    return text or type(exc).__name__


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
