"""The store contract on the wire: what an HTTP store (``_http.py``) and the server's store
routes (``server/_store_api.py``) exchange, written once for both sides.

* **Bodies** are JSON (``application/json``); a batch sent to ``/api/v1/ingest`` is gzip-
  compressed (``Content-Encoding: gzip``), and answers are when the client accepts gzip.
  Floats are written as Python writes them (``repr``), so every float round-trips exactly;
  ``Infinity`` and ``-Infinity``, as Python's json reads and writes them, are a call's
  argument only as the bounds of a read (an open window: ``read_samples(start=-inf)``),
  ``NaN`` never; answers may hold all three. Batches hold finite numbers only
  (:meth:`Batch.to_json`).
* **Records** (:class:`RunInfo`, :class:`TrialInfo`, :class:`Window`…) are objects of their
  fields, rebuilt exactly (tuples as tuples); numpy arrays are lists of floats; chunk bytes are
  base64 strings.
* **Errors** come in the API's one shape, ``{"error": {"status", "code", "message"}}``; the
  code names the :class:`~tunescope.errors.StoreError` subclass (:data:`CODES`), which the
  client raises again.
* **Calls** (:data:`CALLS`): the contract methods served, each with the checks of its
  arguments (the store's one set, ``store/_checks.py``), whether it writes, and how its result
  travels both ways. Their arguments' names and defaults are read from the contract
  (:class:`~tunescope.store.Store`), never written twice.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
from tunescope.store._checks import (
    Check,
    boolean,
    bound,
    count,
    integer,
    json_obj,
    list_of,
    name,
    number,
    optional,
    text,
)
from tunescope.store._codec import F64
from tunescope.store._contract import Store
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
    "CALLS",
    "CODES",
    "MOST",
    "PROJECT_HEADER",
    "REQUIRED",
    "Call",
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

T = TypeVar("T")

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


def arrays_doc(arrays: tuple[F64, F64]) -> list[list[float]]:
    t, v = arrays
    return [t.tolist(), v.tolist()]


# ---------------------------------------------------------------------- decoding results
def _list(decode: Callable[[Any], T]) -> Callable[[Any], list[T]]:
    def inner(items: Any) -> list[T]:
        if not isinstance(items, list):
            raise TypeError("a list was expected")
        return [decode(x) for x in items]

    return inner


def _optional(decode: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda v: None if v is None else decode(v)


def _extent(v: Any) -> tuple[float, float, int]:
    first, last, n = v
    return float(first), float(last), int(n)


def _newest(v: Any) -> tuple[SeriesInfo, float, float]:
    info, t, value = v
    return series_of(info), float(t), float(value)


def _skipped(v: Any) -> tuple[SeriesInfo, int]:
    info, n = v
    return series_of(info), int(n)


def _none(v: Any) -> None:
    return None


def _hosts(v: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(v, dict) or not all(isinstance(i, dict) for i in v.values()):
        raise StoreError("the server answered hosts that are not an object of objects")
    return {str(h): i for h, i in v.items()}


# ---------------------------------------------------------------------- calls
REQUIRED: Any = inspect.Parameter.empty
"""The default of an argument a call must be given."""


@dataclass(frozen=True)
class Call:
    """A contract method served over HTTP (``POST /api/v1/store/NAME``): the check of each of
    its arguments (a body that fails one never reaches the store: 422 ``invalid``), how its
    answer becomes a record again in the client (``decode``), whether it writes (a write
    token only), how its result becomes JSON on the server (``result``), and whether the
    client may send it again when a reused connection turns out closed before any answer
    (``repeat``: not appends and ``create_trial``, whose landing is then unknown).

    The names and defaults of its arguments are the contract method's (:class:`Store`), read
    from its signature into :attr:`params`: a check of an argument the method does not take,
    or none for one it takes, is a TypeError when this module is imported. ``extra``: the
    defaults of arguments the route takes beyond the method's (``_chunk_blobs``'
    ``series_ids``, which the route checks and drops)."""

    name: str
    checks: Mapping[str, Check]
    decode: Callable[[Any], Any]
    write: bool = False
    repeat: bool = True
    result: Callable[[Any], Any] = doc
    extra: Mapping[str, Any] = field(default_factory=dict)
    params: dict[str, tuple[Check, Any]] = field(init=False, repr=False)
    """Argument name -> (its check, its default or :data:`REQUIRED`), in the contract's
    order, the extra ones last."""

    def __post_init__(self) -> None:
        taken = list(inspect.signature(getattr(Store, self.name)).parameters.values())[1:]
        unchecked = [p.name for p in taken if p.name not in self.checks]
        unknown = set(self.checks) - {p.name for p in taken} - set(self.extra)
        if unchecked or unknown:
            raise TypeError(
                f"{self.name}: arguments without a check {unchecked}, "
                f"checks of arguments Store.{self.name} does not take {sorted(unknown)}"
            )
        params = {p.name: (self.checks[p.name], p.default) for p in taken}
        params.update({k: (self.checks[k], v) for k, v in self.extra.items()})
        object.__setattr__(self, "params", params)

    def args(self, body: Any) -> dict[str, Any]:
        """The arguments in ``body`` (an object of them by name), checked, with the defaults
        of those it leaves out; ValueError naming the first that is wrong, unknown or
        missing."""
        o = json_obj(body, "the arguments")
        unknown = set(o) - set(self.params)
        if unknown:
            raise ValueError(f"unknown argument {sorted(unknown)[0]!r}")
        out = {}
        for arg, (check, default) in self.params.items():
            if arg in o:
                out[arg] = check(o[arg], arg)
            elif default is REQUIRED:
                raise ValueError(f"missing argument {arg!r}")
            else:
                out[arg] = default
        return out


def _run_ref(v: Any, what: str) -> int | str:
    return text(v, what) if isinstance(v, str) else integer(v, what)


def _sample(v: Any, what: str) -> tuple[int, float, float]:
    if not isinstance(v, list) or len(v) != 3:
        raise ValueError(f"{what} must be [series_id, t, value]")
    return (
        integer(v[0], f"{what}.series_id"),
        number(v[1], f"{what}.t"),
        number(v[2], f"{what}.value"),
    )


def _fields(v: Any, what: str, checks: dict[str, Check]) -> dict[str, Any]:
    o = json_obj(v, what)
    if set(o) != set(checks):
        raise ValueError(f"{what} must have the fields {', '.join(checks)}")
    return {k: check(o[k], f"{what}.{k}") for k, check in checks.items()}


_OPT_NAME = optional(name)
_OPT_TEXT = optional(text)
_OPT_NUM = optional(number)
_OPT_INT = optional(integer)
_OPT_OBJ = optional(json_obj)
_KINDS = optional(list_of(name))


def _event(v: Any, what: str) -> Event:
    checks: dict[str, Check] = {
        "trial_id": integer,
        "kind": name,
        "t": number,
        "name": _OPT_TEXT,
        "step": _OPT_INT,
        "duration": _OPT_NUM,
        "value": _OPT_NUM,
        "data": _OPT_OBJ,
    }
    return Event(**_fields(v, what, checks))


def _scalar(v: Any, what: str) -> Scalar:
    checks: dict[str, Check] = {
        "trial_id": integer,
        "name": name,
        "step": _OPT_INT,
        "t": number,
        "value": number,
    }
    return Scalar(**_fields(v, what, checks))


MOST = 10_000
"""Most points or bins one call may ask for (as the page's routes): what they cost is what
they ask for. (An ``events`` limit costs only the events there are.)"""

_TRIAL = {"trial_id": integer}
_SERIES = {"series_id": integer}
_SPAN = {"start": bound, "end": bound}
_EVENTS = {**_TRIAL, **_SPAN, "kinds": _KINDS}

CALLS: dict[str, Call] = {
    c.name: c
    for c in (
        Call(
            "ensure_run",
            {
                "name": name,
                "start": _OPT_NUM,
                "project": _OPT_NAME,
                "os_user": _OPT_NAME,
                "host": _OPT_NAME,
            },
            run_of,
            write=True,
        ),
        Call("get_run", {"run": _run_ref, "project": _OPT_NAME}, run_of),
        Call("list_runs", {"project": _OPT_NAME}, _list(run_of)),
        Call("list_projects", {}, _list(str)),
        Call("owner", {"trial": _OPT_INT, "series": _OPT_INT}, str),
        Call(
            "create_trial",
            {
                "run_id": integer,
                "name": _OPT_NAME,
                "params": _OPT_OBJ,
                "host": text,
                "pids": list_of(integer),
                "start": _OPT_NUM,
                "interval": number,
            },
            trial_of,
            write=True,
            repeat=False,
        ),
        Call("trial_by_key", {"key": name}, trial_of),
        Call("get_trial", _TRIAL, trial_of),
        Call("find_trial", {"run_id": integer, "name": name}, trial_of),
        Call("list_trials", {"run_id": integer}, _list(trial_of)),
        Call(
            "update_trial",
            {
                **_TRIAL,
                "state": _OPT_NAME,
                "end": _OPT_NUM,
                "error": _OPT_TEXT,
                "pids": optional(list_of(integer)),
                "heartbeat": _OPT_NUM,
                "only_if_running": boolean,
                "exit_code": _OPT_INT,
                "params": _OPT_OBJ,
            },
            bool,
            write=True,
        ),
        Call("exit_code", _TRIAL, _optional(int)),
        Call(
            "series",
            {
                **_TRIAL,
                "metric": name,
                "device": _OPT_NAME,
                "note": _OPT_TEXT,
                "host": _OPT_NAME,
            },
            series_of,
            write=True,
        ),
        Call("hosts", _TRIAL, _hosts),
        Call("list_series", {**_TRIAL, "metric": _OPT_NAME}, _list(series_of)),
        Call("append_samples", {"rows": list_of(_sample)}, int, write=True, repeat=False),
        Call("compact", {"series_id": _OPT_INT}, _none, write=True),
        Call("_chunk_summaries", {**_SERIES, **_SPAN}, _list(tuple)),
        Call(
            "_chunk_blobs",
            {"chunk_ids": list_of(integer), "column": text, "series_ids": list_of(integer)},
            blobs_of,
            result=blobs_doc,
            extra={"series_ids": []},
        ),
        Call("_pending", {**_SERIES, **_SPAN}, arrays_of, result=arrays_doc),
        Call("series_extent", _SERIES, _optional(_extent)),
        Call("_series_info", _SERIES, series_of),
        Call("add_events", {"events": list_of(_event)}, int, write=True, repeat=False),
        Call("_count_events", _EVENTS, int),
        Call("_fetch_events", _EVENTS, _list(event_of)),
        Call("_bin_events", {**_EVENTS, "bins": count(MOST)}, _list(tuple)),
        Call("add_scalars", {"scalars": list_of(_scalar)}, int, write=True, repeat=False),
        Call("scalars", {**_TRIAL, "name": _OPT_NAME}, _list(scalar_of)),
        Call("scalar_names", _TRIAL, _list(str)),
        # derived queries: one request each, run on the server
        Call("read_samples", {**_SERIES, **_SPAN}, arrays_of, result=arrays_doc),
        Call("window", {**_SERIES, **_SPAN, "points": count(MOST)}, window_of),
        Call("events", {**_EVENTS, "limit": count(2**31 - 1)}, events_window_of),
        Call("count_events", _EVENTS, int),
        Call("latest", _TRIAL, _list(_newest)),
        Call("corrupt_series", {}, _list(_skipped)),
    )
}
"""The contract methods served, by name (``store/_contract.py`` documents each). The server's
store routes (``server/_store_api.py``) serve these and no other; an HTTP store
(``_http.py``) sends these and no other."""
