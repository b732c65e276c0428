"""The store contract methods the server serves to HTTP stores (``_store_api.py``): for
each, whether it writes, its arguments with the check of each (a body that fails one never
reaches the store: 422 ``invalid``) and how its result becomes JSON (``store/wire.py``).

Arguments named ``project``, ``run_id``, ``trial_id`` and ``series_id`` (and the ids inside
``rows``, ``events``, ``scalars``, ``chunk_ids``) are scoped by the route to the token's
project; ``_chunk_blobs`` takes the ``series_ids`` its chunks belong to, which the route
checks and drops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tunescope.store import MAX_NAME_BYTES, MAX_TEXT_BYTES, Event, Scalar, check_json
from tunescope.store.wire import blobs_doc, doc

__all__ = ["METHODS", "Method"]

Check = Callable[[Any, str], Any]
_REQUIRED = object()


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise ValueError(f"{what} must be an integer")
    return v


def _num(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what} must be a number")
    return float(v)


def _str(v: Any, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{what} must be a string")
    if "\x00" in v:
        raise ValueError(f"{what} must not hold a NUL character")
    if len(v) > limit // 4 and len(v.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{what} must be at most {limit} bytes of UTF-8")
    return v


def _name(v: Any, what: str) -> str:
    return _str(v, what, MAX_NAME_BYTES)


def _count(most: int) -> Check:
    """An integer from 1 to ``most`` (points, bins, a page's size)."""

    def inner(v: Any, what: str) -> int:
        n = _int(v, what)
        if not 1 <= n <= most:
            raise ValueError(f"{what} must be from 1 to {most}")
        return n

    return inner


def _bool(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{what} must be true or false")
    return v


def _obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError(f"{what} must be an object")
    return check_json(v, what)


def _list_of(check: Check) -> Check:
    def inner(v: Any, what: str) -> list[Any]:
        if not isinstance(v, list):
            raise ValueError(f"{what} must be a list")
        return [check(x, f"{what}[{i}]") for i, x in enumerate(v)]

    return inner


def _opt(check: Check) -> Check:
    return lambda v, what: None if v is None else check(v, what)


def _run_ref(v: Any, what: str) -> int | str:
    return _str(v, what) if isinstance(v, str) else _int(v, what)


def _sample(v: Any, what: str) -> tuple[int, float, float]:
    if not isinstance(v, list) or len(v) != 3:
        raise ValueError(f"{what} must be [series_id, t, value]")
    return _int(v[0], f"{what}.series_id"), _num(v[1], f"{what}.t"), _num(v[2], f"{what}.value")


def _fields(v: Any, what: str, checks: dict[str, Check]) -> dict[str, Any]:
    o = _obj(v, what)
    if set(o) != set(checks):
        raise ValueError(f"{what} must have the fields {', '.join(checks)}")
    return {k: check(o[k], f"{what}.{k}") for k, check in checks.items()}


def _event(v: Any, what: str) -> Event:
    checks = {
        "trial_id": _int,
        "kind": _name,
        "t": _num,
        "name": _opt(_str),
        "step": _opt(_int),
        "duration": _opt(_num),
        "value": _opt(_num),
        "data": _opt(_obj),
    }
    return Event(**_fields(v, what, checks))


def _scalar(v: Any, what: str) -> Scalar:
    checks = {"trial_id": _int, "name": _name, "step": _opt(_int), "t": _num, "value": _num}
    return Scalar(**_fields(v, what, checks))


@dataclass(frozen=True)
class Method:
    """A contract method the server serves: whether it writes, its arguments (name -> check
    and default), and how its result becomes JSON."""

    write: bool
    params: dict[str, tuple[Check, Any]]
    result: Callable[[Any], Any] = doc

    def args(self, body: Any) -> dict[str, Any]:
        o = _obj(body, "the arguments")
        unknown = set(o) - set(self.params)
        if unknown:
            raise ValueError(f"unknown argument {sorted(unknown)[0]!r}")
        out = {}
        for name, (check, default) in self.params.items():
            if name in o:
                out[name] = check(o[name], name)
            elif default is _REQUIRED:
                raise ValueError(f"missing argument {name!r}")
            else:
                out[name] = default
        return out


def _arrays(r: Any) -> Any:
    t, v = r
    return [t.tolist(), v.tolist()]


_R = (_int, _REQUIRED)
_S = (_name, _REQUIRED)
_N = (_num, _REQUIRED)
_ON = (_opt(_num), None)
_OS = (_opt(_name), None)
_OT = (_opt(_str), None)
_KINDS = (_opt(_list_of(_name)), None)
MOST = 10_000
"""Most points or bins one call may ask for (as the page's routes): what they cost is what
they ask for. (An ``events`` limit costs only the events there are.)"""
_FROM = (_num, -math.inf)
_TO = (_num, math.inf)

METHODS: dict[str, Method] = {
    "ensure_run": Method(
        True, {"name": _S, "start": _ON, "project": _OS, "os_user": _OS, "host": _OS}
    ),
    "get_run": Method(False, {"run": (_run_ref, _REQUIRED), "project": _OS}),
    "list_runs": Method(False, {"project": _OS}),
    "list_projects": Method(False, {}),
    "owner": Method(False, {"trial": (_opt(_int), None), "series": (_opt(_int), None)}),
    "create_trial": Method(
        True,
        {
            "run_id": _R,
            "name": _OS,
            "params": (_opt(_obj), None),
            "host": (_str, ""),
            "pids": (_list_of(_int), []),
            "start": _ON,
            "interval": (_num, 1.0),
        },
    ),
    "trial_by_key": Method(False, {"key": _S}),
    "get_trial": Method(False, {"trial_id": _R}),
    "find_trial": Method(False, {"run_id": _R, "name": _S}),
    "list_trials": Method(False, {"run_id": _R}),
    "update_trial": Method(
        True,
        {
            "trial_id": _R,
            "state": _OS,
            "end": _ON,
            "error": _OT,
            "pids": (_opt(_list_of(_int)), None),
            "heartbeat": _ON,
            "only_if_running": (_bool, False),
            "exit_code": (_opt(_int), None),
            "params": (_opt(_obj), None),
        },
    ),
    "exit_code": Method(False, {"trial_id": _R}),
    "series": Method(True, {"trial_id": _R, "metric": _S, "device": _OS, "note": _OT, "host": _OS}),
    "hosts": Method(False, {"trial_id": _R}),
    "list_series": Method(False, {"trial_id": _R, "metric": _OS}),
    "append_samples": Method(True, {"rows": (_list_of(_sample), _REQUIRED)}),
    "compact": Method(True, {"series_id": (_opt(_int), None)}),
    "_chunk_summaries": Method(False, {"series_id": _R, "start": _N, "end": _N}),
    "_chunk_blobs": Method(
        False,
        {
            "chunk_ids": (_list_of(_int), _REQUIRED),
            "column": (_str, "data"),
            "series_ids": (_list_of(_int), []),
        },
        blobs_doc,
    ),
    "_pending": Method(False, {"series_id": _R, "start": _N, "end": _N}, _arrays),
    "series_extent": Method(False, {"series_id": _R}),
    "_series_info": Method(False, {"series_id": _R}),
    "add_events": Method(True, {"events": (_list_of(_event), _REQUIRED)}),
    "_count_events": Method(False, {"trial_id": _R, "start": _N, "end": _N, "kinds": _KINDS}),
    "_fetch_events": Method(False, {"trial_id": _R, "start": _N, "end": _N, "kinds": _KINDS}),
    "_bin_events": Method(
        False,
        {
            "trial_id": _R,
            "start": _N,
            "end": _N,
            "kinds": _KINDS,
            "bins": (_count(MOST), _REQUIRED),
        },
    ),
    "add_scalars": Method(True, {"scalars": (_list_of(_scalar), _REQUIRED)}),
    "scalars": Method(False, {"trial_id": _R, "name": _OS}),
    "scalar_names": Method(False, {"trial_id": _R}),
    "read_samples": Method(False, {"series_id": _R, "start": _FROM, "end": _TO}, _arrays),
    "window": Method(
        False,
        {"series_id": _R, "start": _N, "end": _N, "points": (_count(MOST), _REQUIRED)},
    ),
    "events": Method(
        False,
        {
            "trial_id": _R,
            "start": _N,
            "end": _N,
            "kinds": _KINDS,
            "limit": (_count(2**31 - 1), 2000),
        },
    ),
    "count_events": Method(False, {"trial_id": _R, "start": _FROM, "end": _TO, "kinds": _KINDS}),
    "latest": Method(False, {"trial_id": _R}),
    "corrupt_series": Method(False, {}),
}
"""The contract methods served, by name (``store/_contract.py`` documents each)."""
