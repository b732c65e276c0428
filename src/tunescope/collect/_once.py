"""Logging that says each kind of failure once, never once per sample."""

from __future__ import annotations

import logging

__all__ = ["LOGGER_NAME", "OnceLog"]

LOGGER_NAME = "tunescope.collect"


class OnceLog:
    """Logs a message the first time its ``kind`` is seen and ignores the kind afterwards.

    Each sampler (and each probe it owns) shares one instance, so a failure that repeats on
    every sample costs one line on stderr in total.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self._seen: set[str] = set()

    def __call__(self, kind: str, msg: str, *args: object, level: int = logging.WARNING) -> bool:
        """Log ``msg % args`` unless ``kind`` was logged before; True if it was logged now."""
        if kind in self._seen:
            return False
        self._seen.add(kind)
        self.logger.log(level, msg, *args)
        return True

    def seen(self, kind: str) -> bool:
        """Whether ``kind`` has been logged."""
        return kind in self._seen
