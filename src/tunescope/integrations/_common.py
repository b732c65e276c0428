"""What the integrations share: their logger and a guard that keeps a bug of ours out of
training (a framework calls our hooks inside its loop)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tunescope._once import Once

__all__ = ["LOG", "safe"]

LOG = logging.getLogger("tunescope.integrations")

F = TypeVar("F", bound=Callable[..., Any])

_once = Once(LOG)


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
            _once(
                key,
                "tunescope: %s failed (%s: %s); training goes on, this is not recorded",
                key,
                type(exc).__name__,
                exc,
                exc_info=True,
            )
            return None

    return cast(F, inner)
