"""The HTTP store: the store contract spoken to a tunescope server, ``http(s)://HOST:PORT/PROJECT``.

Every contract method is one request to the server's store routes (``POST
/api/v1/store/METHOD``, docs/api.md), which run it on the server's own store, scoped to the
token's project; derived queries (windows, events, ``read_samples``) run there too, so each
costs one request. :meth:`HttpStore.write` posts the batch, gzip-compressed, to ``POST
/api/v1/ingest``: one request per batch, written there exactly once by its id; a batch
larger than a server takes (:data:`~tunescope.store.produce._batch.MAX_BATCH_BYTES`) goes in parts.

* **Credentials.** The token comes from ``$TUNESCOPE_TOKEN`` (read when the store is opened),
  never from the URL or a command line, and is never shown: a refused or missing token is an
  :class:`~tunescope.errors.AccessDenied` whose one line names the variable. ``https`` checks
  the server's certificate against the system's CAs, or those in ``$TUNESCOPE_CA_BUNDLE``.
* **One connection** (``_client.py``) per store, used under a lock (calls are serialised,
  as the contract promises), opened again when the server closed it. A call that cannot
  reach the server, times out (the store's ``timeout``, 15 s by default) or gets 503 raises
  :class:`~tunescope.errors.StoreUnavailable`, so writers keep and spool their batches. A
  call that may be repeated safely (reads, ``write``, setting fields: ``Call.repeat``) is
  sent once more when a reused connection turns out closed before any answer; appends and
  ``create_trial`` are not: like a lost database connection while committing, they raise
  StoreUnavailable, as whether they landed is unknown.
* **Errors** come back as the class the server's store raised (``wire.CODES``).
* **Made from the contract.** Most methods are the contract's own, made by :func:`_remote`
  from its signature (the arguments by name, defaults included) and the call's row of
  ``wire.CALLS`` (how its answer is decoded, whether it may be sent again); the others do
  more around the same request (note what was appended or read, name the series of chunks).
  A sample that is not finite is refused here (Rejected) and such a scalar skipped, as a SQL
  store does, and neither is sent: the server refuses both.
* **Packing.** Samples that batches carry are written by the server's store, which packs
  them like any writer (when 256 gather) and packs a trial's series when its end lands;
  :meth:`HttpStore.close` and ``compact()`` pack the series this store appended to with
  :meth:`append_samples`.
"""

from __future__ import annotations

import functools
import gzip
import inspect
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import numpy as np

from tunescope.errors import Rejected, StoreError
from tunescope.store._checks import check_row
from tunescope.store._codec import F64
from tunescope.store._contract import Store
from tunescope.store._model import Event, Scalar, SeriesInfo, Window
from tunescope.store.produce._batch import MAX_BATCH_BYTES, Batch
from tunescope.store.remote._client import INGEST_PATH, Client
from tunescope.store.remote.wire import CALLS, doc, dumps

__all__ = ["HttpStore"]

GZIP_ABOVE = 16 * 1024
"""Call bodies larger than this are sent gzip-compressed (batches always are)."""

P = ParamSpec("P")
R = TypeVar("R")


def _remote(method: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[HttpStore, P], R]:
    """The contract method ``method`` as one request to the server (``wire.CALLS`` says how):
    its arguments by name as the contract's signature binds them, defaults included, a
    ``project`` of None as the store's own, other iterables than text and objects (pids,
    kinds) as lists. A method the server does not serve is a TypeError on import."""
    name = method.__name__
    if name not in CALLS:
        raise TypeError(f"the server serves no call {name!r} (wire.CALLS)")
    signature = inspect.signature(method)

    @functools.wraps(method, updated=())
    def remote(self: HttpStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        named = {k: _listed(v) for k, v in list(bound.arguments.items())[1:]}
        if "project" in named and named["project"] is None:
            named["project"] = self.project
        return cast(R, self._get(name, named))

    return remote


def _listed(v: Any) -> Any:
    if isinstance(v, (str, bytes, dict)) or not isinstance(v, Iterable):
        return v
    return list(v)


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

    def _get(self, method: str, args: dict[str, Any]) -> Any:
        """Call a contract method on the server (``wire.CALLS[method]``: whether it may be
        sent again, how its result is decoded) and decode its result."""
        call = CALLS[method]
        try:
            body = dumps(args)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{method}: arguments must be JSON values: {exc}") from None
        big = len(body) > GZIP_ABOVE
        answer = self._client.post(
            f"/api/v1/store/{method}",
            gzip.compress(body, compresslevel=6, mtime=0) if big else body,
            compressed=big,
            retry=call.repeat,
        )
        try:
            return call.decode(answer["result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"{self.url} answered {method} with a malformed result: {exc}"
            ) from None

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

    # ------------------------------------------------------------------ one request each
    # (their arguments by name, as the contract's signature binds them: see _remote)
    ensure_run = _remote(Store.ensure_run)
    get_run = _remote(Store.get_run)
    list_runs = _remote(Store.list_runs)
    list_projects = _remote(Store.list_projects)
    create_trial = _remote(Store.create_trial)
    trial_by_key = _remote(Store.trial_by_key)
    get_trial = _remote(Store.get_trial)
    find_trial = _remote(Store.find_trial)
    list_trials = _remote(Store.list_trials)
    update_trial = _remote(Store.update_trial)
    exit_code = _remote(Store.exit_code)
    series = _remote(Store.series)
    hosts = _remote(Store.hosts)
    list_series = _remote(Store.list_series)
    _pending = _remote(Store._pending)
    series_extent = _remote(Store.series_extent)
    _series_info = _remote(Store._series_info)
    _count_events = _remote(Store._count_events)
    _fetch_events = _remote(Store._fetch_events)
    _bin_events = _remote(Store._bin_events)
    scalars = _remote(Store.scalars)
    scalar_names = _remote(Store.scalar_names)
    events = _remote(Store.events)
    count_events = _remote(Store.count_events)
    latest = _remote(Store.latest)

    # ------------------------------------------------------------------ and those that do more
    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        if (trial is None) == (series is None):
            raise ValueError("give a trial or a series")
        out: str = self._get("owner", {"trial": trial, "series": series})
        return out

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

    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        listed = []
        for sid, t, v in rows:  # refused here as a SQL store refuses them (not sent)
            problem = check_row(sid, t, v)
            if problem is not None:
                raise Rejected(problem)
            listed.append([sid, t, v])
        if not listed:
            return 0
        n: int = self._get("append_samples", {"rows": listed})
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
        self._get("compact", {"series_id": series_id})

    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        args = {"series_id": series_id, "start": start, "end": end}
        rows: list[tuple[int, float, float, int, float, float, float]] = self._get(
            "_chunk_summaries", args
        )
        with self._lock:
            self._read.add(series_id)
            self._chunk_series.update((int(r[0]), series_id) for r in rows)
        return rows

    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        with self._lock:
            series = sorted({self._chunk_series[c] for c in chunk_ids if c in self._chunk_series})
        args = {"chunk_ids": list(chunk_ids), "column": column, "series_ids": series}
        blobs: dict[int, bytes] = self._get("_chunk_blobs", args)
        return blobs

    def add_events(self, events: Iterable[Event]) -> int:
        listed = [doc(e) for e in events]
        if not listed:
            return 0
        n: int = self._get("add_events", {"events": listed})
        return n

    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        # a value that is not finite is skipped, as a SQL store skips it (the server refuses it)
        listed = [doc(s) for s in scalars if s.value is not None and math.isfinite(s.value)]
        if not listed:
            return 0
        n: int = self._get("add_scalars", {"scalars": listed})
        return n

    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        args = {"series_id": series_id, "start": float(start), "end": float(end)}
        out: tuple[F64, F64] = self._get("read_samples", args)
        with self._lock:
            self._read.add(series_id)
        return out

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        args = {"series_id": series_id, "start": start, "end": end, "points": points}
        out: Window = self._get("window", args)
        with self._lock:
            self._read.add(series_id)
        return out

    def corrupt_series(self) -> list[tuple[SeriesInfo, int]]:
        """The series this store read whose chunks the server had to skip (the server's
        stores remember what any of their reads skipped; see :meth:`Store.corrupt_series`)."""
        with self._lock:
            read = set(self._read)
        if not read:
            return []
        found: list[tuple[SeriesInfo, int]] = self._get("corrupt_series", {})
        return [(s, n) for s, n in found if s.id in read]
