"""Data-wait timing: wrap a data iterable so each batch records how long training waited.

For batch ``i`` of one pass over the iterable a ``data_wait`` event is recorded with
``t`` = the time the batch was requested (the trial's clock, ``_clock``), ``duration`` =
seconds spent inside ``next()``, ``step`` = ``i`` (0-based within the pass) and ``value`` =
the step time, seconds from this request to the next one (wait plus the compute that
followed). The event is appended at the
next request, at exhaustion, or when the pass ends early (``break``, an exception, the
iterator being closed), then with the time up to that moment. Cost per batch: one
``_clock.now()`` (the trial's clock), two ``perf_counter()`` and one deque append.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from tunescope import _clock
from tunescope.record._state import EventRow

__all__ = ["Watched"]

T = TypeVar("T")


class Watched(Generic[T]):
    """An iterable that yields what the wrapped one yields and times each ``next()``.

    ``len()`` and attribute access pass through to the wrapped iterable (``loader.dataset``,
    ``loader.sampler``…). Each ``iter()`` is a new pass with batch indexes from 0.
    """

    def __init__(
        self, iterable: Iterable[T], events: deque[EventRow], name: str | None = None
    ) -> None:
        self._iterable = iterable
        self._events = events
        self._name = name

    def __iter__(self) -> Iterator[T]:
        return _timed(iter(self._iterable), self._events, self._name)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr in ("_iterable", "_events", "_name"):
            raise AttributeError(attr)
        return getattr(self._iterable, attr)


def _timed(it: Iterator[T], events: deque[EventRow], name: str | None) -> Iterator[T]:
    perf = time.perf_counter
    wall = _clock.now
    append = events.append
    i = 0
    # the batch handed out last and not yet recorded: (t, wait, index, perf at request)
    prev: tuple[float, float, int, float] | None = None
    try:
        while True:
            t = wall()
            p0 = perf()
            try:
                item = next(it)
            except StopIteration:
                if prev is not None:
                    append(("data_wait", prev[0], name, prev[2], prev[1], p0 - prev[3], None))
                    prev = None
                return
            p1 = perf()
            if prev is not None:
                append(("data_wait", prev[0], name, prev[2], prev[1], p0 - prev[3], None))
            prev = (t, p1 - p0, i, p0)
            i += 1
            yield item
    finally:
        if prev is not None:
            append(("data_wait", prev[0], name, prev[2], prev[1], perf() - prev[3], None))
