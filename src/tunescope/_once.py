"""Say each kind of problem once: the one log-once helper every part imports.

A failure that repeats on every sample, flush or hook call (a store that is down, a driver
call a GPU does not support) must cost one line in the training log, not one per second.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["Once"]


class Once:
    """Logs a message the first time its ``key`` is seen and ignores the key afterwards.
    Thread-safe. ``once(key, msg, *args)`` logs at WARNING (``level=`` for another);
    ``once.warn`` is the same call."""

    def __init__(self, logger: logging.Logger | str = "tunescope") -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(
        self,
        key: str,
        msg: str,
        *args: object,
        level: int = logging.WARNING,
        exc_info: bool = False,
    ) -> bool:
        """Log ``msg % args`` unless ``key`` was logged before; True if it was logged now."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    warn = __call__

    def seen(self, key: str) -> bool:
        """Whether ``key`` has been logged."""
        with self._lock:
            return key in self._seen

    def forget(self, key: str) -> None:
        """Log ``key`` again next time (a problem that went away and may come back)."""
        with self._lock:
            self._seen.discard(key)
