"""A pool of stores, for a server answering many requests at once.

:class:`PooledStore` keeps up to ``size`` connections to one database and gives each call one
of them, so that requests run side by side instead of queueing on one connection's lock. It is
a :class:`~tunescope.store.Store`: every contract method (the derived ones too, so that one
window query runs on one connection), and the SQL stores' own (tokens, pages, retention), is
passed to a member, with the signature and types of the method it passes (:func:`_pooled`).
Members heal like any store (a lost connection is opened again on their next call), so the
pool recovers by itself after the database comes back.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from tunescope.errors import StoreError, StoreUnavailable
from tunescope.store._contract import Store
from tunescope.store._model import SeriesInfo
from tunescope.store.sql._sql import SQLStore

__all__ = ["PooledStore"]

P = ParamSpec("P")
R = TypeVar("R")


def _pooled(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[PooledStore, P], R]:
    """``method`` (of the contract, or of SQL stores) called on a member the pool lends for
    the call; an argument that can be read only once (a generator of rows) is read whole
    first, so that no member waits on its producer."""
    name = method.__name__

    @functools.wraps(method, updated=())
    def pooled(self: PooledStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        given = [list(a) if isinstance(a, Iterator) else a for a in args]
        named = {k: list(a) if isinstance(a, Iterator) else a for k, a in kwargs.items()}
        with self._one() as st:
            return cast(R, getattr(st, name)(*given, **named))

    return pooled


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
    ensure_run = _pooled(Store.ensure_run)
    get_run = _pooled(Store.get_run)
    list_runs = _pooled(Store.list_runs)
    list_projects = _pooled(Store.list_projects)
    owner = _pooled(Store.owner)
    create_trial = _pooled(Store.create_trial)
    write = _pooled(Store.write)
    trial_by_key = _pooled(Store.trial_by_key)
    get_trial = _pooled(Store.get_trial)
    find_trial = _pooled(Store.find_trial)
    list_trials = _pooled(Store.list_trials)
    update_trial = _pooled(Store.update_trial)
    exit_code = _pooled(Store.exit_code)
    series = _pooled(Store.series)
    list_series = _pooled(Store.list_series)
    hosts = _pooled(Store.hosts)
    append_samples = _pooled(Store.append_samples)
    compact = _pooled(Store.compact)
    _chunk_summaries = _pooled(Store._chunk_summaries)
    _chunk_blobs = _pooled(Store._chunk_blobs)
    _pending = _pooled(Store._pending)
    series_extent = _pooled(Store.series_extent)
    add_events = _pooled(Store.add_events)
    _count_events = _pooled(Store._count_events)
    _fetch_events = _pooled(Store._fetch_events)
    _bin_events = _pooled(Store._bin_events)
    add_scalars = _pooled(Store.add_scalars)
    scalars = _pooled(Store.scalars)
    scalar_names = _pooled(Store.scalar_names)
    _series_info = _pooled(Store._series_info)
    # derived queries: one member for the whole query
    read_samples = _pooled(Store.read_samples)
    latest = _pooled(Store.latest)
    window = _pooled(Store.window)
    count_events = _pooled(Store.count_events)
    all_events = _pooled(Store.all_events)
    events = _pooled(Store.events)

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

    # ------------------------------------------------------------------ SQL stores' own
    # token management and checks (the team server's)
    check_token = _pooled(SQLStore.check_token)
    create_token = _pooled(SQLStore.create_token)
    list_tokens = _pooled(SQLStore.list_tokens)
    revoke_token = _pooled(SQLStore.revoke_token)
    count_token_failure = _pooled(SQLStore.count_token_failure)
    token_digests = _pooled(SQLStore.token_digests)
    keep_token = _pooled(SQLStore.keep_token)
    # pages of events and scalars (see _pages.py)
    event_page = _pooled(SQLStore.event_page)
    scalar_page = _pooled(SQLStore.scalar_page)
    # rollups and raw retention (see _retention.py)
    drop_raw = _pooled(SQLStore.drop_raw)
    trials_with_raw_before = _pooled(SQLStore.trials_with_raw_before)
    keep_findings = _pooled(SQLStore.keep_findings)
    kept_findings = _pooled(SQLStore.kept_findings)
    raw_from = _pooled(SQLStore.raw_from)
    minute_rows = _pooled(SQLStore.minute_rows)
    put_minute_rows = _pooled(SQLStore.put_minute_rows)
    # usage kept per ended trial (see _kept_usage.py)
    kept_usage = _pooled(SQLStore.kept_usage)
    keep_usage = _pooled(SQLStore.keep_usage)
    unkept_usage = _pooled(SQLStore.unkept_usage)
