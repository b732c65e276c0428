"""What the integrations share: their logger and a guard that keeps a bug of ours out of
training (a framework calls our hooks inside its loop)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["LOG", "safe"]

LOG = logging.getLogger("tunescope.integrations")

F = TypeVar("F", bound=Callable[..., Any])

_seen: set[str] = set()
_lock = threading.Lock()


def safe(fn: F) -> F:
    """Decorate a framework hook: an exception in it logs one warning (per hook, per process)
    and the hook returns None, which frameworks read as "nothing to change". Only for hooks
    that run no user code."""
    key = fn.__qualname__

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            with _lock:
                first = key not in _seen
                _seen.add(key)
            if first:
                LOG.warning(
                    "tunescope: %s failed (%s: %s); training goes on, this is not recorded",
                    key,
                    type(exc).__name__,
                    exc,
                    exc_info=True,
                )
            return None

    return cast(F, inner)
