"""The HTTP store: the store contract spoken to a tunescope server, ``http(s)://HOST:PORT/PROJECT``.

Every contract method is one request to the server's store routes (``POST
/api/v1/store/METHOD``, docs/api.md), which run it on the server's own store, scoped to the
token's project; derived queries (windows, events, ``read_samples``) run there too, so each
costs one request. :meth:`HttpStore.write` posts the batch, gzip-compressed, to ``POST
/api/v1/ingest``: one request per batch, written there exactly once by its id; a batch
larger than a server takes (:data:`~tunescope.store._batch.MAX_BATCH_BYTES`) goes in parts.

* **Credentials.** The token comes from ``$TUNESCOPE_TOKEN`` (read when the store is opened),
  never from the URL or a command line, and is never shown: a refused or missing token is an
  :class:`~tunescope.errors.AccessDenied` whose one line names the variable. ``https`` checks
  the server's certificate against the system's CAs, or those in ``$TUNESCOPE_CA_BUNDLE``.
* **One connection** (``_client.py``) per store, used under a lock (calls are serialised,
  as the contract promises), opened again when the server closed it. A call that cannot
  reach the server, times out (the store's ``timeout``, 15 s by default) or gets 503 raises
  :class:`~tunescope.errors.StoreUnavailable`, so writers keep and spool their batches. A
  call that may be repeated safely (reads, ``write``, setting fields) is sent once more when
  a reused connection turns out closed before any answer; appends and ``create_trial`` are
  not: like a lost database connection while committing, they raise StoreUnavailable, as
  whether they landed is unknown.
* **Errors** come back as the class the server's store raised (``wire.CODES``).
* **Packing.** Samples that batches carry are written by the server's store, which packs
  them like any writer (when 256 gather) and packs a trial's series when its end lands;
  :meth:`HttpStore.close` and ``compact()`` pack the series this store appended to with
  :meth:`append_samples`.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from tunescope.errors import Rejected, StoreError
from tunescope.store._batch import MAX_BATCH_BYTES, Batch
from tunescope.store._client import INGEST_PATH, Client
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
from tunescope.store.wire import (
    arrays_of,
    blobs_of,
    doc,
    dumps,
    event_of,
    events_window_of,
    run_of,
    scalar_of,
    series_of,
    trial_of,
    window_of,
)

__all__ = ["HttpStore"]

GZIP_ABOVE = 16 * 1024
"""Call bodies larger than this are sent gzip-compressed (batches always are)."""

T = TypeVar("T")


class HttpStore(Store):
    """A store on a tunescope server (see the module doc). Opening it sends nothing: the
    first call connects. ``timeout``: seconds a call may wait for the server."""

    def __init__(self, url: str, *, timeout: float | None = None) -> None:
        self._client = Client(url, timeout)
        self.url = url
        self.project = self._client.project
        self._lock = threading.Lock()
        self._appended: set[int] = set()
        """Series this store appended to: close() packs them."""
        self._read: set[int] = set()
        """Series this store read: corrupt_series() reports those."""
        self._chunk_series: dict[int, int] = {}
        """Chunk id -> series id, from the summaries this store read (the server checks a
        chunk's series before it sends its bytes)."""

    @property
    def requests(self) -> int:
        """Requests answered so far (one per call, one per batch)."""
        return self._client.requests

    @property
    def connections(self) -> int:
        """Connections opened so far."""
        return self._client.connections

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
        answer = self._client.post(
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
            appended = sorted(self._appended)
            self._appended.clear()
        try:
            for sid in appended:  # only what this store appended (see the module doc)
                self.compact(sid)
        finally:
            self._client.close()

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
        """Post the batch; one larger than the server takes (:data:`MAX_BATCH_BYTES`) is
        split first (:meth:`Batch.split`) and its parts posted in order, each exactly once
        by its own id (a part that landed before a failure is skipped when the whole is sent
        again)."""
        try:
            parts = batch.split(MAX_BATCH_BYTES)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"a batch may hold only finite numbers and JSON values: {exc}") from None
        trial: int | None = None
        for part in parts:
            raw = part.to_json()
            body = gzip.compress(raw, compresslevel=6, mtime=0)
            answer = self._client.post(INGEST_PATH, body, compressed=True, retry=True)
            got = answer.get("trial")
            if isinstance(got, bool) or not isinstance(got, int):
                raise StoreError(f"{self.url} answered a batch without its trial's id")
            trial = got
        assert trial is not None
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
        self,
        trial_id: int,
        metric: str,
        device: str | None = None,
        note: str | None = None,
        host: str | None = None,
    ) -> SeriesInfo:
        args = {"trial_id": trial_id, "metric": metric, "device": device, "note": note}
        return self._get("series", {**args, "host": host}, series_of)

    def hosts(self, trial_id: int) -> dict[str, dict[str, Any]]:
        return self._get("hosts", {"trial_id": trial_id}, _hosts)

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
        *,
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
        start: float = -np.inf,
        end: float = np.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> int:
        args = {"trial_id": trial_id, "start": start, "end": end, "kinds": _kinds(kinds)}
        return self._get("count_events", args, int)

    def latest(self, trial_id: int) -> list[tuple[SeriesInfo, float, float]]:
        return self._get("latest", {"trial_id": trial_id}, _list(_newest))

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


def _newest(v: Any) -> tuple[SeriesInfo, float, float]:
    info, t, value = v
    return series_of(info), float(t), float(value)


def _none(v: Any) -> None:
    return None


def _kinds(kinds: Sequence[str] | None) -> list[str] | None:
    return None if kinds is None else list(kinds)


def _hosts(v: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(v, dict) or not all(isinstance(i, dict) for i in v.values()):
        raise StoreError("the server answered hosts that are not an object of objects")
    return {str(h): i for h, i in v.items()}
