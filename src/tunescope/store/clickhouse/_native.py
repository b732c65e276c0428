"""ClickHouse's Native format for one block of columns: what every transport sends to insert
(the embedded engine and a server over HTTP parse the same format). Numbers go as their
little-endian arrays, so a batch of samples costs three ``tobytes`` calls.

A block: the number of columns and of rows (unsigned LEB128), then each column's name, type
and data. Data: fixed-width numbers as they are; a String as its UTF-8 length (LEB128) then
its bytes; ``Nullable(T)`` as one byte per row (1: NULL) then T's data with a zero value where
NULL; an ``argMax(Float32, Int64)`` state (:data:`ARGMAX`, the minute rollups' last value) as
ClickHouse serialises it: a byte 1 (has a value), the value, a byte 1 (has a key), the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tunescope.store.clickhouse._transport import Column

__all__ = ["ARGMAX", "argmax_states", "encode_block"]

_FIXED = {"UInt64": "<u8", "Int64": "<i8", "Float32": "<f4", "Float64": "<f8", "UInt8": "u1"}

ARGMAX = "AggregateFunction(argMax, Float32, Int64)"
"""The type of the minute rollups' last value: the value of the latest time."""

_ARGMAX_STATE = np.dtype([("has_value", "u1"), ("value", "<f4"), ("has_key", "u1"), ("key", "<i8")])


def argmax_states(values: Any, keys: Any) -> np.ndarray[Any, Any]:
    """The :data:`ARGMAX` states holding one (value, key) each: a column's values."""
    v = np.asarray(values, dtype=np.float32)
    out = np.ones(len(v), dtype=_ARGMAX_STATE)
    out["value"] = v
    out["key"] = np.asarray(keys, dtype=np.int64)
    return out


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _leb128(len(b)) + b


def _data(typ: str, values: Any) -> bytes:
    if typ in _FIXED:
        return np.ascontiguousarray(np.asarray(values, dtype=_FIXED[typ])).tobytes()
    if typ == ARGMAX:
        return np.ascontiguousarray(np.asarray(values, dtype=_ARGMAX_STATE)).tobytes()
    if typ == "String":
        return b"".join(_string(v) for v in values)
    if typ.startswith("Nullable(") and typ.endswith(")"):
        inner = typ[len("Nullable(") : -1]
        nulls = bytes(1 if v is None else 0 for v in values)
        zero: Any = "" if inner == "String" else 0
        return nulls + _data(inner, [zero if v is None else v for v in values])
    raise TypeError(f"no Native encoding for type {typ}")


def encode_block(columns: Sequence[Column]) -> bytes:
    """One Native block of ``columns`` (all equally long)."""
    rows = len(columns[0].values) if columns else 0
    if any(len(c.values) != rows for c in columns):
        raise ValueError("columns of one insert must be equally long")
    parts = [_leb128(len(columns)), _leb128(rows)]
    for c in columns:
        parts += [_string(c.name), _string(c.type), _data(c.type, c.values)]
    return b"".join(parts)
