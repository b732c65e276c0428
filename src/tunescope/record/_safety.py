"""Never harm training: log a problem once, and guard every public SDK call.

Everything the SDK does on behalf of the user is bookkeeping; a failure in it must not end a
training run. :class:`~tunescope._once.Once` (the one log-once helper) logs each kind of
problem a single time (at WARNING, on the ``tunescope.record`` logger) so a failing store does
not flood the training log, and :func:`guarded` wraps a public method so that an internal
error logs once and returns a default instead of raising.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tunescope._once import Once

__all__ = ["LOG", "Once", "guarded", "once", "skipped"]

LOG = logging.getLogger("tunescope.record")

F = TypeVar("F", bound=Callable[..., Any])


once = Once(LOG)
"""Process-wide instance, for problems that are not tied to one trial."""


def skipped(what: str, exc: Exception) -> None:
    """Say, once per ``what`` (an SDK function's qualified name), that it failed inside and
    was skipped: what :func:`guarded` does, for a function on the training loop's path that
    catches its own exceptions rather than pay for a wrapper's call."""
    once.warn(
        f"guarded:{what}",
        "tunescope: %s failed and was skipped (%s: %s); training continues",
        what,
        type(exc).__name__,
        exc,
    )


def guarded(default: Any = None) -> Callable[[F], F]:
    """Decorate a public SDK function: an internal exception logs once and returns
    ``default``. Use only where the function runs no user code."""

    def wrap(fn: F) -> F:
        what = fn.__qualname__

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # never into training
                skipped(what, exc)
                return default

        return cast(F, inner)

    return wrap
