"""A pool of stores, for a server answering many requests at once.

:class:`PooledStore` keeps up to ``size`` connections to one database and gives each call one
of them, so that requests run side by side instead of queueing on one connection's lock. It is
a :class:`~tunescope.store.Store`: every contract method (the derived ones too, so that one
window query runs on one connection) is passed to a member. Members heal like any store (a lost
connection is opened again on their next call), so the pool recovers by itself after the
database comes back.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from tunescope.errors import StoreError, StoreUnavailable
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

__all__ = ["PooledStore"]


class PooledStore(Store):
    """Up to ``size`` stores opened with ``factory`` (the first one now, so a bad URL fails
    here); each call borrows one. A call that finds every member busy waits for one at most
    ``wait`` seconds (None: as long as it takes), then raises StoreUnavailable. Thread-safe."""

    def __init__(
        self, factory: Callable[[], Store], size: int = 4, wait: float | None = None
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one store")
        self._factory = factory
        self._size = size
        self._wait = wait
        self._idle: queue.LifoQueue[Store] = queue.LifoQueue()
        self._all: list[Store] = []
        self._opened = 1
        self._lock = threading.Lock()
        self._closed = False
        first = factory()
        self.url = first.url
        self._all.append(first)
        self._idle.put(first)

    @contextlib.contextmanager
    def _one(self) -> Iterator[Store]:
        """Borrow an idle member, opening a new one while fewer than ``size`` exist."""
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.url} is closed")
            grow = self._idle.empty() and self._opened < self._size
            if grow:
                self._opened += 1
        if grow:
            try:
                st = self._factory()
            except BaseException:
                with self._lock:
                    self._opened -= 1
                raise
            with self._lock:
                self._all.append(st)
        else:
            try:
                st = self._idle.get(timeout=self._wait)
            except queue.Empty:
                raise StoreUnavailable(
                    f"all {self._size} connections to {self.url} stayed busy for {self._wait:g} s"
                ) from None
        try:
            yield st
        finally:
            self._idle.put(st)

    def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        with self._one() as st:
            return getattr(st, method)(*args, **kwargs)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            members = list(self._all)
        for st in members:
            with contextlib.suppress(StoreError):
                st.close()

    # ------------------------------------------------------------------ the contract
    def ensure_run(self, name: str, start: float | None = None, **kw: Any) -> RunInfo:
        return self._call("ensure_run", name, start, **kw)  # type: ignore[no-any-return]

    def get_run(self, run: int | str, *, project: str | None = None) -> RunInfo:
        return self._call("get_run", run, project=project)  # type: ignore[no-any-return]

    def list_runs(self, *, project: str | None = None) -> list[RunInfo]:
        return self._call("list_runs", project=project)  # type: ignore[no-any-return]

    def list_projects(self) -> list[str]:
        return self._call("list_projects")  # type: ignore[no-any-return]

    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        return self._call("owner", trial=trial, series=series)  # type: ignore[no-any-return]

    def create_trial(self, run_id: int, *args: Any, **kwargs: Any) -> TrialInfo:
        return self._call("create_trial", run_id, *args, **kwargs)  # type: ignore[no-any-return]

    def write(self, batch: Batch) -> int:
        return self._call("write", batch)  # type: ignore[no-any-return]

    def trial_by_key(self, key: str) -> TrialInfo:
        return self._call("trial_by_key", key)  # type: ignore[no-any-return]

    def get_trial(self, trial_id: int) -> TrialInfo:
        return self._call("get_trial", trial_id)  # type: ignore[no-any-return]

    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        return self._call("find_trial", run_id, name)  # type: ignore[no-any-return]

    def list_trials(self, run_id: int) -> list[TrialInfo]:
        return self._call("list_trials", run_id)  # type: ignore[no-any-return]

    def update_trial(self, trial_id: int, **kwargs: Any) -> bool:
        return self._call("update_trial", trial_id, **kwargs)  # type: ignore[no-any-return]

    def exit_code(self, trial_id: int) -> int | None:
        return self._call("exit_code", trial_id)  # type: ignore[no-any-return]

    def series(
        self,
        trial_id: int,
        metric: str,
        device: str | None = None,
        note: str | None = None,
        host: str | None = None,
    ) -> SeriesInfo:
        return self._call("series", trial_id, metric, device, note, host)  # type: ignore[no-any-return]

    def hosts(self, trial_id: int) -> dict[str, dict[str, Any]]:
        return self._call("hosts", trial_id)  # type: ignore[no-any-return]

    def list_series(self, trial_id: int, metric: str | None = None) -> list[SeriesInfo]:
        return self._call("list_series", trial_id, metric)  # type: ignore[no-any-return]

    def append_samples(self, rows: Iterable[tuple[int, float, float]]) -> int:
        return self._call("append_samples", list(rows))  # type: ignore[no-any-return]

    def compact(self, series_id: int | None = None) -> None:
        self._call("compact", series_id)

    def _chunk_summaries(
        self, series_id: int, start: float, end: float
    ) -> list[tuple[int, float, float, int, float, float, float]]:
        return self._call("_chunk_summaries", series_id, start, end)  # type: ignore[no-any-return]

    def _chunk_blobs(self, chunk_ids: Sequence[int], column: str = "data") -> dict[int, bytes]:
        return self._call("_chunk_blobs", chunk_ids, column)  # type: ignore[no-any-return]

    def _pending(self, series_id: int, start: float, end: float) -> tuple[F64, F64]:
        return self._call("_pending", series_id, start, end)  # type: ignore[no-any-return]

    def series_extent(self, series_id: int) -> tuple[float, float, int] | None:
        return self._call("series_extent", series_id)  # type: ignore[no-any-return]

    def add_events(self, events: Iterable[Event]) -> int:
        return self._call("add_events", list(events))  # type: ignore[no-any-return]

    def _count_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> int:
        return self._call("_count_events", trial_id, start, end, kinds)  # type: ignore[no-any-return]

    def _fetch_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None
    ) -> list[Event]:
        return self._call("_fetch_events", trial_id, start, end, kinds)  # type: ignore[no-any-return]

    def _bin_events(
        self, trial_id: int, start: float, end: float, kinds: Sequence[str] | None, bins: int
    ) -> list[tuple[str, int, int]]:
        return self._call("_bin_events", trial_id, start, end, kinds, bins)  # type: ignore[no-any-return]

    def add_scalars(self, scalars: Iterable[Scalar]) -> int:
        return self._call("add_scalars", list(scalars))  # type: ignore[no-any-return]

    def scalars(self, trial_id: int, name: str | None = None) -> list[Scalar]:
        return self._call("scalars", trial_id, name)  # type: ignore[no-any-return]

    def scalar_names(self, trial_id: int) -> list[str]:
        return self._call("scalar_names", trial_id)  # type: ignore[no-any-return]

    def _series_info(self, series_id: int) -> SeriesInfo:
        return self._call("_series_info", series_id)  # type: ignore[no-any-return]

    def latest(self, trial_id: int) -> list[tuple[SeriesInfo, float, float]]:
        return self._call("latest", trial_id)  # type: ignore[no-any-return]

    def corrupt_series(self) -> list[tuple[SeriesInfo, int]]:
        """What every member skipped (see :meth:`Store.corrupt_series`)."""
        with self._lock:
            members = list(self._all)
        merged: dict[int, tuple[SeriesInfo, int]] = {}
        for st in members:
            for info, n in st.corrupt_series():
                old = merged.get(info.id)
                merged[info.id] = (info, max(n, old[1] if old else 0))
        return [merged[k] for k in sorted(merged)]

    # token management and checks (SQL stores; the team server's)
    def check_token(self, secret: str) -> Any:
        return self._call("check_token", secret)

    def create_token(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("create_token", *args, **kwargs)

    def list_tokens(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("list_tokens", *args, **kwargs)

    def revoke_token(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("revoke_token", *args, **kwargs)

    # pages of events and scalars (SQL stores; the team server's, see _pages.py)
    def event_page(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("event_page", *args, **kwargs)

    def scalar_page(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("scalar_page", *args, **kwargs)

    # rollups and raw retention (SQL stores; see _retention.py)
    def drop_raw(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("drop_raw", *args, **kwargs)

    def trials_with_raw_before(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("trials_with_raw_before", *args, **kwargs)

    def keep_findings(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("keep_findings", *args, **kwargs)

    def kept_findings(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("kept_findings", *args, **kwargs)

    def raw_from(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("raw_from", *args, **kwargs)

    # usage kept per ended trial (SQL stores; see _kept_usage.py)
    def kept_usage(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("kept_usage", *args, **kwargs)

    def keep_usage(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("keep_usage", *args, **kwargs)

    # derived queries: one member for the whole query
    def read_samples(
        self, series_id: int, start: float = -np.inf, end: float = np.inf
    ) -> tuple[F64, F64]:
        return self._call("read_samples", series_id, start, end)  # type: ignore[no-any-return]

    def window(self, series_id: int, start: float, end: float, points: int) -> Window:
        return self._call("window", series_id, start, end, points)  # type: ignore[no-any-return]

    def events(
        self,
        trial_id: int,
        start: float,
        end: float,
        *,
        kinds: Sequence[str] | None = None,
        limit: int = 2000,
    ) -> EventsWindow:
        return self._call("events", trial_id, start, end, kinds=kinds, limit=limit)  # type: ignore[no-any-return]

    def count_events(
        self,
        trial_id: int,
        start: float = -np.inf,
        end: float = np.inf,
        *,
        kinds: Sequence[str] | None = None,
    ) -> int:
        return self._call("count_events", trial_id, start, end, kinds=kinds)  # type: ignore[no-any-return]
