"""The one interface to ClickHouse, whichever carries it: the embedded engine (``_chdb.py``) or
a server over HTTP (``_http.py``). SQL and DDL are written once, above it (``_ddl.py``,
``_bulk.py``); a transport only carries them.

Three calls: :meth:`Transport.query` (rows back, parameters bound by the server:
``{name:Type}`` placeholders, never values spliced into SQL), :meth:`Transport.insert`
(columns of one table, with settings such as ``insert_deduplication_token``) and
:meth:`Transport.command` (DDL and the like). Every error they raise is a
:class:`~tunescope.errors.StoreError` (see ``_errors.py``).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Column", "Params", "Transport", "sql_literal"]

Params = Mapping[str, Any]
"""Values of a query's ``{name:Type}`` placeholders: int, float, str, or a list of them."""


@dataclass(frozen=True)
class Column:
    """One column of an insert: its name, its ClickHouse type as the transport sends it
    (``UInt64``, ``Int64``, ``Float32``, ``Float64``, ``String`` or ``Nullable`` of one of
    them, or the rollups' :data:`~tunescope.store.clickhouse._native.ARGMAX` state; the server
    converts to the table's type, ``LowCardinality(String)`` say) and its values (a numpy
    array for a number column, a sequence with None for a Nullable one, the array of
    :func:`~tunescope.store.clickhouse._native.argmax_states` for a state)."""

    name: str
    type: str
    values: npt.NDArray[Any] | Sequence[Any]


class Transport(abc.ABC):
    """A connection to one ClickHouse database. Thread-safe: calls may come from many threads
    (a transport serialises what its driver cannot do at once)."""

    url: str
    """Where it goes, as every message shows it (never a password)."""
    database: str
    cluster: str | None = None
    """The cluster its tables live on (``?cluster=NAME``), None for one server."""

    @abc.abstractmethod
    def query(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        """The rows of a SELECT; ``params`` bind its ``{name:Type}`` placeholders."""

    @abc.abstractmethod
    def insert(
        self, table: str, columns: Sequence[Column], settings: Mapping[str, Any] | None = None
    ) -> None:
        """Insert equally long ``columns`` into ``table`` of this database as one insert, with
        the given settings (``insert_deduplication_token``: an insert sent again with the same
        token adds nothing)."""

    @abc.abstractmethod
    def command(self, sql: str) -> None:
        """Run a statement that returns nothing (DDL, OPTIMIZE)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection. Safe to call twice."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sql_literal(v: Any) -> str:
    """``v`` as a ClickHouse literal (a setting's value in ``SETTINGS``): a quoted string with
    its quotes and backslashes escaped, or a finite number (numpy's too)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v} is not a finite number")
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ",".join(sql_literal(x) for x in v) + "]"
    raise TypeError(f"no ClickHouse literal for {type(v).__name__}")
