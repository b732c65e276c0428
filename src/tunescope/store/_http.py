"""The HTTP store: the store contract spoken to a tunescope server, ``http(s)://HOST:PORT/PROJECT``.

Every contract method is one request to the server's store routes (``POST
/api/v1/store/METHOD``, docs/api.md), which run it on the server's own store, scoped to the
token's project; derived queries (windows, events, ``read_samples``) run there too, so each
costs one request. :meth:`HttpStore.write` posts the batch, gzip-compressed, to ``POST
/api/v1/ingest``: one request per batch, written there exactly once by its id.

* **Credentials.** The token comes from ``$TUNESCOPE_TOKEN`` (read when the store is opened),
  never from the URL or a command line, and is never shown: a refused or missing token is an
  :class:`~tunescope.errors.AccessDenied` whose one line names the variable. ``https`` checks
  the server's certificate against the system's CAs, or those in ``$TUNESCOPE_CA_BUNDLE``.
* **One connection.** Each store keeps one keep-alive connection, used under a lock (calls
  are serialised, as the contract promises), opened again when the server closed it. A call
  that cannot reach the server, times out (the store's ``timeout``, 15 s by default) or gets
  503 raises :class:`~tunescope.errors.StoreUnavailable`, so writers keep and spool their
  batches. A call that may be repeated safely (reads, ``write``, setting fields) is sent once
  more when a reused connection turns out closed before any answer; appends and
  ``create_trial`` are not: like a lost database connection while committing, they raise
  StoreUnavailable, as whether they landed is unknown.
* **Errors** come back as the class the server's store raised (``_wire.CODES``).
* **Packing.** Samples that batches carry are written by the server's store, which packs
  them like any writer (when 256 gather, and when it closes); :meth:`HttpStore.close` and
  ``compact()`` pack the series this store appended to with :meth:`append_samples`.
"""

from __future__ import annotations

import gzip
import http.client
import os
import select
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import numpy as np

from tunescope.errors import AccessDenied, ConfigError, StoreError, StoreUnavailable
from tunescope.store._batch import Batch
from tunescope.store._codec import F64
from tunescope.store._contract import Store
from tunescope.store._model import (
    Event,
    EventsWindow,
    RunInfo,
    Scalar,
    SeriesInfo,
    TrialInfo,
    Window,
)
from tunescope.store._url import http_target
from tunescope.store._wire import (
    PROJECT_HEADER,
    arrays_of,
    blobs_of,
    doc,
    dumps,
    error_of,
    event_of,
    events_window_of,
    loads,
    run_of,
    scalar_of,
    series_of,
    trial_of,
    window_of,
)

__all__ = ["CA_ENV", "TIMEOUT_S", "TOKEN_ENV", "HttpStore"]

TOKEN_ENV = "TUNESCOPE_TOKEN"
CA_ENV = "TUNESCOPE_CA_BUNDLE"
TIMEOUT_S = 15.0
"""Longest a call waits for the server before it raises StoreUnavailable."""

IDLE_REUSE_S = 2.0
"""A connection idle longer than this is opened again rather than reused (servers close idle
keep-alive connections: uvicorn after 5 s)."""

GZIP_ABOVE = 16 * 1024
"""Call bodies larger than this are sent gzip-compressed (batches always are)."""

T = TypeVar("T")


class HttpStore(Store):
    """A store on a tunescope server (see the module doc). Opening it sends nothing: the
    first call connects. ``timeout``: seconds a call may wait for the server."""

    def __init__(self, url: str, *, timeout: float | None = None) -> None:
        tls, host, port, project = http_target(url)
        self.url = url
        self.project = project
        self.timeout = TIMEOUT_S if timeout is None else float(timeout)
        token = os.environ.get(TOKEN_ENV, "").strip()
        if token and not (token.isascii() and token.isprintable()):
            raise ConfigError(f"${TOKEN_ENV} is not a token (tokens are printable ASCII)")
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
        self._appended: set[int] = set()
        """Series this store appended to: close() packs them."""
        self._read: set[int] = set()
        """Series this store read: corrupt_series() reports those."""
        self._chunk_series: dict[int, int] = {}
        """Chunk id -> series id, from the summaries this store read (the server checks a
        chunk's series before it sends its bytes)."""
        self.requests = 0
        """Requests answered so far (one per call, one per batch)."""
        self.connections = 0
        """Connections opened so far."""

    # ------------------------------------------------------------------ transport
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
                    f"${CA_ENV} may name a file of the CAs to trust"
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

    def _post(self, path: str, body: bytes, *, compressed: bool, retry: bool) -> Any:
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
        raise self._error(status, answer)

    def _error(self, status: int, answer: Any) -> Exception:
        err = answer.get("error") if isinstance(answer, dict) else None
        code = str(err.get("code", "")) if isinstance(err, dict) else ""
        message = _first_line(str(err.get("message", ""))) if isinstance(err, dict) else ""
        if code == "unauthorized" or (not code and status == 401):
            if not self._has_token:
                return AccessDenied(
                    f"{self.url} needs a token: set ${TOKEN_ENV} to a token of project "
                    f"{self.project!r} (tunescope token create)"
                )
            return AccessDenied(
                f"{self.url} refused the token in ${TOKEN_ENV}: {message or 'unauthorized'}"
            )
        if code == "forbidden" or (not code and status == 403):
            return AccessDenied(
                f"{self.url} refused the token in ${TOKEN_ENV}: {message or 'forbidden'}"
            )
        if code:
            return error_of(code, f"{self.url}: {message}" if message else f"{self.url}: {code}")
        what = f"{self.url} answered HTTP {status}"
        if status in (502, 503, 504):
            return StoreUnavailable(what)
        return StoreError(f"{what}; is it a tunescope server?")

    def _get(
        self,
        method: str,
        args: dict[str, Any],
        decode: Callable[[Any], T],
        *,
        retry: bool = True,
    ) -> T:
        """Call a contract method on the server and decode its result."""
        try:
            body = dumps(args)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{method}: arguments must be JSON values: {exc}") from None
        big = len(body) > GZIP_ABOVE
        answer = self._post(
            f"/api/v1/store/{method}",
            gzip.compress(body, compresslevel=6, mtime=0) if big else body,
            compressed=big,
            retry=retry,
        )
        try:
            return decode(answer["result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"{self.url} answered {method} with a malformed result: {exc}"
            ) from None

    def _project(self, project: str | None) -> str:
        return self.project if project is None else project

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            appended = sorted(self._appended)
            self._appended.clear()
        try:
            for sid in appended:  # only what this store appended (see the module doc)
                self.compact(sid)
        finally:
            with self._lock:
                self._closed = True
                self._drop()

    # ------------------------------------------------------------------ runs and trials
    def ensure_run(
        self,
        name: str,
        start: float | None = None,
        *,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> RunInfo:
        args = {
            "name": name,
            "start": start,
            "project": self._project(project),
            "os_user": os_user,
            "host": host,
        }
        return self._get("ensure_run", args, run_of)

    def get_run(self, run: int | str, *, project: str | None = None) -> RunInfo:
        return self._get("get_run", {"run": run, "project": self._project(project)}, run_of)

    def list_runs(self, *, project: str | None = None) -> list[RunInfo]:
        return self._get("list_runs", {"project": self._project(project)}, _list(run_of))

    def list_projects(self) -> list[str]:
        return self._get("list_projects", {}, _list(str))

    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        if (trial is None) == (series is None):
            raise ValueError("give a trial or a series")
        return self._get("owner", {"trial": trial, "series": series}, str)

    def create_trial(
        self,
        run_id: int,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        *,
        host: str = "",
        pids: Sequence[int] = (),
        start: float | None = None,
        interval: float = 1.0,
    ) -> TrialInfo:
        args = {
            "run_id": run_id,
            "name": name,
            "params": params,
            "host": host,
            "pids": list(pids),
            "start": start,
            "interval": interval,
        }
        return self._get("create_trial", args, trial_of, retry=False)

    def write(self, batch: Batch) -> int:
        try:
            raw = batch.to_json()
        except (TypeError, ValueError) as exc:
            raise StoreError(
                f"a batch may hold only finite numbers and JSON values: {exc}"
            ) from None
        body = gzip.compress(raw, compresslevel=6, mtime=0)
        answer = self._post("/api/v1/ingest", body, compressed=True, retry=True)
        trial = answer.get("trial")
        if isinstance(trial, bool) or not isinstance(trial, int):
            raise StoreError(f"{self.url} answered a batch without its trial's id")
        return trial

    def trial_by_key(self, key: str) -> TrialInfo:
        return self._get("trial_by_key", {"key": key}, trial_of)

    def get_trial(self, trial_id: int) -> TrialInfo:
        return self._get("get_trial", {"trial_id": trial_id}, trial_of)

    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        return self._get("find_trial", {"run_id": run_id, "name": name}, trial_of)

    def list_trials(self, run_id: int) -> list[TrialInfo]:
        return self._get("list_trials", {"run_id": run_id}, _list(trial_of))

    def update_trial(
        self,
        trial_id: int,
        *,
        state: str | None = None,
        end: float | None = None,
        error: str | None = None,
        pids: Sequence[int] | None = None,
        heartbeat: float | None = None,
        only_if_running: bool = False,
        exit_code: int | None = None,
        params: dict[str, Any] | None = None,
    ) -> bool:
        args = {
            "trial_id": trial_id,
            "state": state,
            "end": end,
            "error": error,
            "pids": None if pids is None else list(pids),
            "heartbeat": heartbeat,
            "only_if_running": only_if_running,
            "exit_code": exit_code,
            "params": params,
        }
        return self._get("update_trial", args, bool)

    def exit_code(self, trial_id: int) -> int | None:
        return self._get("exit_code", {"trial_id": trial_id}, _optional(int))

    # ------------------------------------------------------------------ series and samples
    def series(
        self, trial_id: int, metric: str, device: str | None = None, note: str | None = None
    ) -> SeriesInfo:
        args = {"trial_id": trial_id, "metric": metric, "device": device, "note": note}
        return self._get("series", args, series_of)

    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        args = {"trial_id": trial_id, "metric": metric}
        return self._get("list_series", args, _list(series_of))

    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        listed = [[sid, t, v] for sid, t, v in rows]
        if not listed:
            return 0
        n = self._get("append_samples", {"rows": listed}, int, retry=False)
        with self._lock:
            self._appended.update(int(r[0]) for r in listed)
        return n

    def compact(self, series_id: int | None = None) -> None:
        """Pack one series, or (None) every series this store appended to."""
        if series_id is None:
            with self._lock:
                todo = sorted(self._appended)
            for sid in todo:
                self.compact(sid)
            return
        self._get("compact", {"series_id": series_id}, _none)

    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        args = {"series_id": series_id, "start": start, "end": end}
        rows = self._get("_chunk_summaries", args, _list(tuple))
        with self._lock:
            self._read.add(series_id)
            self._chunk_series.update((int(r[0]), series_id) for r in rows)
        return rows

    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        with self._lock:
            series = sorted({self._chunk_series[c] for c in chunk_ids if c in self._chunk_series})
        args = {"chunk_ids": list(chunk_ids), "column": column, "series_ids": series}
        return self._get("_chunk_blobs", args, blobs_of)

    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        args = {"series_id": series_id, "start": start, "end": end}
        return self._get("_pending", args, arrays_of)

    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        return self._get("series_extent", {"series_id": series_id}, _optional(_extent))

    def _series_info(self, series_id: int) -> SeriesInfo:
        return self._get("_series_info", {"series_id": series_id}, series_of)

    # ------------------------------------------------------------------ events and scalars
    def add_events(self, events: Iterable[Event]) -> int:
        listed = [doc(e) for e in events]
        if not listed:
            return 0
        return self._get("add_events", {"events": listed}, int, retry=False)

    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int:
        args = {"trial_id": trial_id, "start": start, "end": end, "kinds": _kinds(kinds)}
        return self._get("_count_events", args, int)

    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]:
        args = {"trial_id": trial_id, "start": start, "end": end, "kinds": _kinds(kinds)}
        return self._get("_fetch_events", args, _list(event_of))

    def _bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int]]:
        args = {
            "trial_id": trial_id,
            "start": start,
            "end": end,
            "kinds": _kinds(kinds),
            "bins": bins,
        }
        return self._get("_bin_events", args, _list(tuple))

    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        listed = [doc(s) for s in scalars]
        if not listed:
            return 0
        return self._get("add_scalars", {"scalars": listed}, int, retry=False)

    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        args = {"trial_id": trial_id, "name": name}
        return self._get("scalars", args, _list(scalar_of))

    def scalar_names(self, trial_id: int) -> list[str]:
        return self._get("scalar_names", {"trial_id": trial_id}, _list(str))

    # ------------------------------------------------------------------ derived, on the server
    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        args = {"series_id": series_id, "start": float(start), "end": float(end)}
        out = self._get("read_samples", args, arrays_of)
        with self._lock:
            self._read.add(series_id)
        return out

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        args = {"series_id": series_id, "start": start, "end": end, "points": points}
        out = self._get("window", args, window_of)
        with self._lock:
            self._read.add(series_id)
        return out

    def events(
        self,
        trial_id: int,
        start: float,
        end: float,
        kinds: Sequence[str] | None = None,
        limit: int = 2000,
    ) -> EventsWindow:
        args = {
            "trial_id": trial_id,
            "start": start,
            "end": end,
            "kinds": _kinds(kinds),
            "limit": limit,
        }
        return self._get("events", args, events_window_of)

    def count_events(
        self,
        trial_id: int,
        kinds: Sequence[str] | None = None,
        start: float = -np.inf,
        end: float = np.inf,
    ) -> int:
        args = {"trial_id": trial_id, "kinds": _kinds(kinds), "start": start, "end": end}
        return self._get("count_events", args, int)

    def corrupt_series(self) -> list[tuple[SeriesInfo, int]]:
        """The series this store read whose chunks the server had to skip (the server's
        stores remember what any of their reads skipped; see :meth:`Store.corrupt_series`)."""
        with self._lock:
            read = set(self._read)
        if not read:
            return []
        found = self._get("corrupt_series", {}, _list(lambda d: (series_of(d[0]), int(d[1]))))
        return [(s, n) for s, n in found if s.id in read]


# ---------------------------------------------------------------------- helpers
def _ssl_context() -> ssl.SSLContext:
    """The system's trust store, or the CAs in $TUNESCOPE_CA_BUNDLE."""
    bundle = os.environ.get(CA_ENV) or None
    try:
        return ssl.create_default_context(cafile=bundle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"${CA_ENV} {bundle!r} is not a file of CA certificates: {exc}") from None


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


def _list(decode: Callable[[Any], T]) -> Callable[[Any], list[T]]:
    def inner(items: Any) -> list[T]:
        if not isinstance(items, list):
            raise TypeError("a list was expected")
        return [decode(x) for x in items]

    return inner


def _optional(decode: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda v: None if v is None else decode(v)


def _extent(v: Any) -> tuple[float, float, int]:
    first, last, n = v
    return float(first), float(last), int(n)


def _none(v: Any) -> None:
    return None


def _kinds(kinds: Sequence[str] | None) -> list[str] | None:
    return None if kinds is None else list(kinds)
