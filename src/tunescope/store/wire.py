"""The store contract on the wire: what an HTTP store (``_http.py``) and the server's store
routes (``server/_store_api.py``) exchange, written once for both sides.

* **Bodies** are JSON (``application/json``); a batch sent to ``/api/v1/ingest`` is gzip-
  compressed (``Content-Encoding: gzip``), and answers are when the client accepts gzip.
  Floats are written as Python writes them (``repr``), so every float round-trips exactly;
  the calls' bodies and answers may hold ``NaN``, ``Infinity`` and ``-Infinity`` (an open
  window: ``read_samples(start=-inf)``), as Python's json reads and writes them. Batches
  hold finite numbers only (:meth:`Batch.to_json`).
* **Records** (:class:`RunInfo`, :class:`TrialInfo`, :class:`Window`…) are objects of their
  fields, rebuilt exactly (tuples as tuples); numpy arrays are lists of floats; chunk bytes are
  base64 strings.
* **Errors** come in the API's one shape, ``{"error": {"status", "code", "message"}}``; the
  code names the :class:`~tunescope.errors.StoreError` subclass (:data:`CODES`), which the
  client raises again.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np

from tunescope.errors import (
    AccessDenied,
    Conflict,
    CorruptData,
    NotFound,
    Rejected,
    SchemaError,
    StoreError,
    StoreUnavailable,
)
from tunescope.store._codec import F64
from tunescope.store._model import (
    Bucket,
    Event,
    EventBin,
    EventsWindow,
    RunInfo,
    Scalar,
    SeriesInfo,
    TrialInfo,
    Window,
)

__all__ = [
    "CODES",
    "PROJECT_HEADER",
    "arrays_of",
    "blobs_doc",
    "blobs_of",
    "doc",
    "dumps",
    "error_of",
    "events_window_of",
    "loads",
    "run_of",
    "series_of",
    "status_of",
    "trial_of",
    "window_of",
]

PROJECT_HEADER = "Tunescope-Project"
"""The project the client's URL names (percent-encoded UTF-8); a token of another project is
refused (403)."""

CODES: dict[str, type[Exception]] = {
    "not_found": NotFound,
    "conflict": Conflict,
    "corrupt_data": CorruptData,
    "schema_error": SchemaError,
    "store_unavailable": StoreUnavailable,
    "store_error": StoreError,
    "unauthorized": AccessDenied,
    "forbidden": AccessDenied,
    "too_many_attempts": StoreUnavailable,
    "rejected": Rejected,
    "invalid": ValueError,
}
"""Error code -> the exception an HTTP store raises for it (``invalid``: a bad argument, as
the contract's own ValueError; any other code: StoreError)."""

_STATUS: list[tuple[type[StoreError], int, str]] = [
    (StoreUnavailable, 503, "store_unavailable"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (Rejected, 422, "rejected"),
    (CorruptData, 500, "corrupt_data"),
    (SchemaError, 500, "schema_error"),
    (AccessDenied, 403, "forbidden"),
    (StoreError, 500, "store_error"),
]


def status_of(exc: StoreError) -> tuple[int, str]:
    """(HTTP status, code) of a store error: the most specific class it is an instance of."""
    return next((s, c) for cls, s, c in _STATUS if isinstance(exc, cls))


def error_of(code: str, message: str) -> Exception:
    """The exception an answer's error code stands for (StoreError when unknown)."""
    return CODES.get(code, StoreError)(message)


def dumps(value: Any) -> bytes:
    """Compact JSON; non-finite floats as ``NaN``/``Infinity``. TypeError for a value JSON
    cannot hold."""
    return json.dumps(value, separators=(",", ":")).encode()


def loads(raw: bytes | str) -> Any:
    """JSON as :func:`dumps` writes it. ValueError when it is not JSON."""
    return json.loads(raw)


# ---------------------------------------------------------------------- records
def doc(record: Any) -> Any:
    """A record (a dataclass, or a list or tuple of them) as JSON values."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    if isinstance(record, (list, tuple)):
        return [doc(r) for r in record]
    return record


def run_of(d: dict[str, Any]) -> RunInfo:
    return RunInfo(**d)


def trial_of(d: dict[str, Any]) -> TrialInfo:
    return TrialInfo(**{**d, "pids": tuple(d["pids"])})


def series_of(d: dict[str, Any]) -> SeriesInfo:
    return SeriesInfo(**d)


def event_of(d: dict[str, Any]) -> Event:
    return Event(**d)


def scalar_of(d: dict[str, Any]) -> Scalar:
    return Scalar(**d)


def window_of(d: dict[str, Any]) -> Window:
    samples = d["samples"]
    buckets = d["buckets"]
    return Window(
        series_of(d["series"]),
        d["start"],
        d["end"],
        samples=None if samples is None else [(t, v) for t, v in samples],
        buckets=None if buckets is None else [Bucket(**b) for b in buckets],
        corrupt_chunks=d["corrupt_chunks"],
    )


def events_window_of(d: dict[str, Any]) -> EventsWindow:
    events = d["events"]
    bins = d["bins"]
    return EventsWindow(
        d["start"],
        d["end"],
        d["total"],
        events=None if events is None else [event_of(e) for e in events],
        bins=None if bins is None else [EventBin(**b) for b in bins],
    )


def arrays_of(d: list[list[float]]) -> tuple[F64, F64]:
    """Two float64 arrays (times and values) from their lists."""
    t, v = d
    return np.asarray(t, dtype=np.float64), np.asarray(v, dtype=np.float64)


def blobs_doc(blobs: dict[int, bytes]) -> dict[str, str]:
    return {str(k): base64.b64encode(v).decode("ascii") for k, v in blobs.items()}


def blobs_of(d: dict[str, str]) -> dict[int, bytes]:
    return {int(k): base64.b64decode(v) for k, v in d.items()}
