"""Repeating a store call once when its connection was lost before it committed (see
``_sql.py``'s module doc). Shared by the SQL store and its token management."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tunescope.errors import StoreUnavailable

__all__ = ["Lost", "retrying"]

F = TypeVar("F", bound=Callable[..., Any])


class Lost(StoreUnavailable):
    """The connection was lost. ``before_commit``: nothing of the transaction was kept, so
    the call may be repeated on a new connection."""

    def __init__(self, message: str, before_commit: bool) -> None:
        super().__init__(message)
        self.before_commit = before_commit


def retrying(fn: F) -> F:
    """Repeat a store call once on a new connection when its connection was lost before the
    transaction committed."""

    @functools.wraps(fn)
    def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except Lost as exc:
            if not exc.before_commit:
                raise
        return fn(self, *args, **kwargs)

    return cast(F, inner)
