"""The one set of checks of JSON values, for everything the store takes from outside: a
batch's JSON (:meth:`~tunescope.store.Batch.from_json`, the ingest and the spool) and the
arguments of a store call over HTTP (``remote/wire.py``'s call table, which a server checks a body
against before its store sees it).

A check takes a value and what it is (for the message) and returns the value as the store
takes it, or raises ValueError naming what is wrong. The rules, the same everywhere:

* a **number** is an int or a float, never a bool, and finite: NaN and ±inf mean nothing a
  store could keep (:func:`number`). Only the bounds of a span a read covers may be infinite
  (an open window: ``read_samples(start=-inf)``), never NaN (:func:`bound`);
* an **integer** is an int, never a bool, within what SQLite's INTEGER and PostgreSQL's
  BIGINT hold: -2**63 to 2**63 - 1 (:func:`integer`);
* **text** holds no NUL character (databases refuse it) and is at most
  :data:`MAX_TEXT_BYTES` bytes of UTF-8, a **name** :data:`MAX_NAME_BYTES`; no key or string
  inside a JSON object the store keeps (params, ``where``, event data) holds a NUL
  (:func:`check_json`);
* **times** are within :data:`MAX_ABS_TIME_S` of the epoch and **sample values** within
  float32's range (:data:`MAX_SAMPLE_VALUE`), where they are stored as such (a batch's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_ABS_TIME_S",
    "MAX_NAME_BYTES",
    "MAX_SAMPLE_VALUE",
    "MAX_TEXT_BYTES",
    "Check",
    "boolean",
    "bound",
    "check_json",
    "check_row",
    "check_sample",
    "count",
    "integer",
    "json_obj",
    "list_of",
    "name",
    "number",
    "obj",
    "optional",
    "text",
    "time",
    "value32",
]

J = TypeVar("J")
Check = Callable[[Any, str], Any]
"""A check: (value, what it is) -> the value as the store takes it; ValueError otherwise."""

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""The integers SQLite's INTEGER and PostgreSQL's BIGINT hold."""
MAX_ABS_TIME_S = 1e11
"""Times are epoch seconds within this of the epoch (years -1200 to 5100): beyond it they
could not be kept to the millisecond."""
MAX_SAMPLE_VALUE = 3.4028234663852886e38
"""The largest sample value magnitude: float32's largest finite number (samples are kept as
float32)."""
MAX_NAME_BYTES = 512
"""Longest name, in bytes of UTF-8."""
MAX_TEXT_BYTES = 64 * 1024
"""Longest other text (a series' note, an error message), in bytes of UTF-8."""


def integer(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not INT_MIN <= v <= INT_MAX:
        raise ValueError(f"{what} must be an integer")
    return v


def number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number")
    return float(v)


def bound(v: Any, what: str) -> float:
    """A bound of a span to read: a number, or -inf or inf (an open end); never NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise ValueError(f"{what} must be a number")
    return float(v)


def boolean(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{what} must be true or false")
    return v


def text(v: Any, what: str, *, empty: bool = True, limit: int = MAX_TEXT_BYTES) -> str:
    """A string of at most ``limit`` bytes of UTF-8 without NUL (not blank unless ``empty``)."""
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise ValueError(f"{what} must be a {'non-empty ' if not empty else ''}string")
    if "\x00" in v:
        raise ValueError(f"{what} must not hold a NUL character")
    if len(v) > limit // 4 and len(v.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{what} must be at most {limit} bytes of UTF-8")
    return v


def name(v: Any, what: str, *, empty: bool = True) -> str:
    return text(v, what, empty=empty, limit=MAX_NAME_BYTES)


def time(v: Any, what: str) -> float:
    f = number(v, what)
    if abs(f) > MAX_ABS_TIME_S:
        raise ValueError(f"{what} must be within {MAX_ABS_TIME_S:g} s of the epoch")
    return f


def value32(v: Any, what: str) -> float:
    f = number(v, what)
    if abs(f) > MAX_SAMPLE_VALUE:
        raise ValueError(f"{what} must be within float32's range (±{MAX_SAMPLE_VALUE:.7g})")
    return f


def check_sample(t: float, v: float) -> str | None:
    """What is wrong with a sample at ``t`` of value ``v`` (None: nothing): the ranges
    :meth:`Batch.from_json` checks, for stores that take samples by other ways."""
    if not (math.isfinite(t) and math.isfinite(v)):
        return f"sample at t={t} is not a finite number: {v}"
    if abs(t) > MAX_ABS_TIME_S:
        return f"sample time {t} is not within {MAX_ABS_TIME_S:g} s of the epoch"
    if abs(v) > MAX_SAMPLE_VALUE:
        return f"sample value {v} is beyond float32's range"
    return None


def check_row(series_id: int, t: float, v: float | None) -> str | None:
    """What is wrong with a sample ``(series_id, t, value)`` given to ``append_samples``
    (None: nothing): a store raises Rejected with it, before anything is sent or written."""
    problem = "no value" if v is None else check_sample(t, v)
    return None if problem is None else f"series {series_id}: {problem}"


def obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError(f"{what} must be an object")
    return v


def check_json(v: J, what: str) -> J:
    """``v`` (JSON values) unchanged; ValueError when a key or string in it holds a NUL
    character (walked without recursion: a body's nesting is bounded before it is parsed,
    a spool record's is not)."""
    stack: list[Any] = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if "\x00" in x:
                raise ValueError(f"{what} must not hold a NUL character")
        elif isinstance(x, dict):
            for k, item in x.items():
                if isinstance(k, str) and "\x00" in k:
                    raise ValueError(f"{what} must not hold a NUL character")
                stack.append(item)
        elif isinstance(x, list):
            stack.extend(x)
    return v


def json_obj(v: Any, what: str) -> dict[str, Any]:
    """An object the store keeps as JSON (params, ``where``, event data)."""
    return check_json(obj(v, what), what)


def optional(check: Check) -> Check:
    """``check``, or None."""
    return lambda v, what: None if v is None else check(v, what)


def list_of(check: Check) -> Check:
    """A list, each item passing ``check`` (named ``what[i]``)."""

    def inner(v: Any, what: str) -> list[Any]:
        if not isinstance(v, list):
            raise ValueError(f"{what} must be a list")
        return [check(x, f"{what}[{i}]") for i, x in enumerate(v)]

    return inner


def count(most: int) -> Check:
    """An integer from 1 to ``most`` (points, bins, a limit)."""

    def inner(v: Any, what: str) -> int:
        n = integer(v, what)
        if not 1 <= n <= most:
            raise ValueError(f"{what} must be from 1 to {most}")
        return n

    return inner
