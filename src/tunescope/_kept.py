"""Remember a bounded number of things: the one cache every long-lived part uses.

A team server runs for months and sees every trial, token, client and series of a team; a
cache keyed by any of those that never forgets is a slow leak. :class:`Kept` holds at most
``size`` entries and forgets the least recently used one first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Kept"]

K = TypeVar("K")
V = TypeVar("V")


class Kept(Generic[K, V]):
    """A map of at most ``size`` entries that forgets the least recently used first (a get
    or a put counts as a use). Thread-safe: each call is atomic."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a cache must keep at least one entry, not {size}")
        self.size = size
        self._map: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key``, None when there is none."""
        with self._lock:
            value = self._map.get(key)
            if value is not None:
                self._map.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key``, forgetting the least recently used entry if full."""
        with self._lock:
            self._map[key] = value
            self._map.move_to_end(key)
            while len(self._map) > self.size:
                self._map.popitem(last=False)

    def setdefault(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, keeping ``make()`` first when there is none (made
        under the lock: keep it cheap)."""
        with self._lock:
            value = self._map.get(key)
            if value is None:
                value = make()
                self._map[key] = value
                while len(self._map) > self.size:
                    self._map.popitem(last=False)
            self._map.move_to_end(key)
            return value

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, None when there was none."""
        with self._lock:
            return self._map.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._map.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._map)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._map
