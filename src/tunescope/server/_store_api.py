"""The store over HTTP: the routes an HTTP store (``store/_http.py``) talks to.

``POST /api/v1/store/{method}`` runs one method of the store contract on the server's store:
the body is an object of its arguments by name, the answer ``{"result": …}``
(``store/_wire.py`` says how records, arrays and bytes travel). Only the methods of
:data:`METHODS` are served, each marked read or write (a write needs a write token).
``POST /api/v1/ingest`` writes one batch (:meth:`Batch.to_json`, usually gzip-compressed)
with the store's exactly-once :meth:`~tunescope.store.Store.write` and answers
``{"trial": id}``.

Everything is scoped to the principal's project (``_auth.py``): the client names its project
in the ``Tunescope-Project`` header and a token of another project is refused (403);
run-level calls get that project forced (naming another is 403), and every run, trial,
series or chunk id an argument names is checked to belong to it (an id of another project
is 404, as if it did not exist). Owners never change, so they are cached. A batch's trial
is found by its key: a key of another project's trial is 404, and a new trial is made in the
principal's project whatever the batch's spec says. The local viewer (``auth="local"``) may
name any project.

Bodies must be ``application/json`` (a page of another site cannot send that without a CORS
preflight, which this server never grants), at most :data:`MAX_BODY_BYTES` once
decompressed; a body that is not what it should be is 422 ``invalid`` and never reaches the
store. Store errors come back in the one error shape with the code of their class.
"""

from __future__ import annotations

import gzip
import logging
import math
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import APIRouter, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tunescope.errors import NotFound, StoreError
from tunescope.server._auth import Principal, principal_of, require_write
from tunescope.server._errors import ApiError, invalid, not_found
from tunescope.store import Batch, Event, Scalar, Store
from tunescope.store._wire import PROJECT_HEADER, blobs_doc, doc, dumps, loads, status_of

__all__ = ["MAX_BODY_BYTES", "METHODS", "store_router"]

log = logging.getLogger("tunescope.server")

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body, once decompressed (a batch of the flusher's 50,000 events and
50,000 scalars is about 8 MB)."""

_GZIP_ABOVE = 1024
"""Answers larger than this are gzip-compressed for a client that accepts it."""

_OWNERS_KEPT = 100_000
"""Owners (of runs, trials, series, trial keys) remembered, each kind."""


# ---------------------------------------------------------------------- arguments
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


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{what} must be a string")
    return v


def _bool(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{what} must be true or false")
    return v


def _obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError(f"{what} must be an object")
    return v


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
        "kind": _str,
        "t": _num,
        "name": _opt(_str),
        "step": _opt(_int),
        "duration": _opt(_num),
        "value": _opt(_num),
        "data": _opt(_obj),
    }
    return Event(**_fields(v, what, checks))


def _scalar(v: Any, what: str) -> Scalar:
    checks = {"trial_id": _int, "name": _str, "step": _opt(_int), "t": _num, "value": _num}
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
_S = (_str, _REQUIRED)
_N = (_num, _REQUIRED)
_ON = (_opt(_num), None)
_OS = (_opt(_str), None)
_KINDS = (_opt(_list_of(_str)), None)
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
            "error": _OS,
            "pids": (_opt(_list_of(_int)), None),
            "heartbeat": _ON,
            "only_if_running": (_bool, False),
            "exit_code": (_opt(_int), None),
            "params": (_opt(_obj), None),
        },
    ),
    "exit_code": Method(False, {"trial_id": _R}),
    "series": Method(True, {"trial_id": _R, "metric": _S, "device": _OS, "note": _OS}),
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
        False, {"trial_id": _R, "start": _N, "end": _N, "kinds": _KINDS, "bins": _R}
    ),
    "add_scalars": Method(True, {"scalars": (_list_of(_scalar), _REQUIRED)}),
    "scalars": Method(False, {"trial_id": _R, "name": _OS}),
    "scalar_names": Method(False, {"trial_id": _R}),
    "read_samples": Method(False, {"series_id": _R, "start": _FROM, "end": _TO}, _arrays),
    "window": Method(False, {"series_id": _R, "start": _N, "end": _N, "points": _R}),
    "events": Method(
        False, {"trial_id": _R, "start": _N, "end": _N, "kinds": _KINDS, "limit": (_int, 2000)}
    ),
    "count_events": Method(False, {"trial_id": _R, "kinds": _KINDS, "start": _FROM, "end": _TO}),
    "corrupt_series": Method(False, {}),
}
"""The contract methods served, by name (``store/_contract.py`` documents each)."""


# ---------------------------------------------------------------------- owners and scope
class _Owners:
    """The project of runs, trials, series and trial keys, remembered (they never move).
    Thread-safe."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._kept: dict[str, OrderedDict[Any, str]] = {
            k: OrderedDict() for k in ("run", "trial", "series", "key")
        }

    def _get(self, kind: str, ident: Any, find: Callable[[], str]) -> str:
        kept = self._kept[kind]
        with self._lock:
            if ident in kept:
                kept.move_to_end(ident)
                return kept[ident]
        project = find()  # NotFound for an unknown id: not remembered
        with self._lock:
            kept[ident] = project
            if len(kept) > _OWNERS_KEPT:
                kept.popitem(last=False)
        return project

    def run(self, run_id: int) -> str:
        return self._get("run", run_id, lambda: self.store.get_run(run_id).project)

    def trial(self, trial_id: int) -> str:
        return self._get("trial", trial_id, lambda: self.store.owner(trial=trial_id))

    def series(self, series_id: int) -> str:
        return self._get("series", series_id, lambda: self.store.owner(series=series_id))

    def key(self, key: str) -> str | None:
        """The project of the trial named by ``key``; None when there is none yet."""
        try:
            return self._get("key", key, lambda: self.trial(self.store.trial_by_key(key).id))
        except NotFound:
            return None


@dataclass(frozen=True)
class _Scope:
    """What one request may touch: ``project`` (the one its calls refer to) and, when
    ``only`` is set, nothing outside it."""

    owners: _Owners
    project: str | None
    only: bool

    def check(self, kind: str, ident: int) -> None:
        """NotFound unless the run, trial or series ``ident`` is in the scope's project."""
        if not self.only:
            return
        owner = getattr(self.owners, kind)(ident)
        if owner != self.project:
            raise NotFound(f"no {kind} with id {ident}")

    def project_arg(self, given: str | None) -> str | None:
        if self.only and given is not None and given != self.project:
            raise ApiError(
                403, "forbidden", f"this token is for project {self.project!r}, not {given!r}"
            )
        return self.project if given is None else given


def _scope_of(request: Request, principal: Principal, owners: _Owners) -> _Scope:
    """The request's scope: the client's project (its header), which a token must match."""
    raw = request.headers.get(PROJECT_HEADER)
    named = unquote(raw) if raw else None
    if principal.project is None:
        return _Scope(owners, named, only=False)
    if named is not None and named != principal.project:
        raise ApiError(
            403, "forbidden", f"this token is for project {principal.project!r}, not {named!r}"
        )
    return _Scope(owners, principal.project, only=True)


def _scoped(store: Store, scope: _Scope, name: str, args: dict[str, Any]) -> Any:
    """Run ``name`` with ``args`` within ``scope`` (see the module doc)."""
    if "project" in args:
        args["project"] = scope.project_arg(args["project"])
    for arg, kind in (("run_id", "run"), ("trial_id", "trial"), ("series_id", "series")):
        if args.get(arg) is not None:
            try:
                scope.check(kind, args[arg])
            except NotFound:
                if name == "update_trial" and args["only_if_running"]:
                    return False  # as for an unknown trial
                raise
    if name == "get_run" and isinstance(args["run"], int):
        scope.check("run", args["run"])
    elif name == "compact" and args["series_id"] is None and scope.only:
        raise ApiError(403, "forbidden", "compact every series of one project at a time")
    elif name == "append_samples":
        for sid in sorted({r[0] for r in args["rows"]}):
            scope.check("series", sid)
    elif name in ("add_events", "add_scalars"):
        for tid in sorted({x.trial_id for x in args[name[4:]]}):
            scope.check("trial", tid)
    elif name == "_chunk_blobs":
        series_ids = args.pop("series_ids")
        if scope.only:
            allowed: set[int] = set()
            for sid in series_ids:
                scope.check("series", sid)
                allowed.update(r[0] for r in store._chunk_summaries(sid, -math.inf, math.inf))
            unknown = sorted(set(args["chunk_ids"]) - allowed)
            if unknown:
                raise NotFound(f"no chunk with id {unknown[0]}")
    result = getattr(store, name)(**args)
    if not scope.only:
        return result
    if name == "owner" and result != scope.project:
        which = "trial" if args["trial"] is not None else "series"
        raise NotFound(f"no {which} with id {args[which]}")
    if name == "trial_by_key":
        scope.check("trial", result.id)
    elif name == "list_projects":
        return [p for p in result if p == scope.project]
    elif name == "corrupt_series":
        mine = []
        for info, n in result:
            try:
                scope.check("series", info.id)
            except NotFound:
                continue
            mine.append((info, n))
        return mine
    return result


def _store_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Store errors as API errors with the code of their class; a bad argument as 422."""

    def inner(*args: Any) -> Any:
        try:
            return fn(*args)
        except StoreError as exc:
            status, code = status_of(exc)
            headers = None
            if status == 503:
                log.warning("store unavailable: %s", exc)
                headers = {"Retry-After": "2"}
            elif status >= 500:
                log.error("store error: %s", exc)
            raise ApiError(status, code, str(exc), headers) from None
        except (TypeError, ValueError) as exc:
            raise invalid(str(exc)) from None

    return inner


@_store_errors
def _call(store: Store, scope: _Scope, name: str, raw: bytes) -> Any:
    method = METHODS[name]
    try:
        args = method.args(loads(raw))
    except ValueError as exc:  # nothing of a bad body reaches the store
        raise invalid(f"{name}: {exc}") from None
    return method.result(_scoped(store, scope, name, args))


@_store_errors
def _ingest(store: Store, scope: _Scope, raw: bytes) -> int:
    try:
        batch = Batch.from_json(raw)
    except ValueError as exc:
        raise invalid(str(exc)) from None
    if scope.only:
        owner = scope.owners.key(batch.trial)
        if owner is not None and owner != scope.project:
            raise NotFound(f"no trial with key {batch.trial!r}")
    if batch.spec is not None and scope.project is not None:
        batch = batch.with_spec(replace(batch.spec, project=scope.project))
    return store.write(batch)


# ---------------------------------------------------------------------- bodies
async def _body(request: Request) -> bytes:
    """The request's JSON body, decompressed; 415, 413 or 422 when it is not acceptable."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, "unsupported_media_type", "the body must be application/json")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise ApiError(415, "unsupported_media_type", "Content-Encoding must be gzip or none")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > MAX_BODY_BYTES:
            raise _too_large()
    if encoding == "identity":
        return bytes(raw)
    inflate = zlib.decompressobj(wbits=31)  # gzip
    try:
        out = inflate.decompress(bytes(raw), MAX_BODY_BYTES)
        if inflate.unconsumed_tail:
            raise _too_large()
        out += inflate.flush()
        if not inflate.eof:
            raise zlib.error("the gzip stream is cut short")
    except zlib.error as exc:
        raise invalid(f"the body is not gzip: {exc}") from None
    return out


def _too_large() -> ApiError:
    return ApiError(413, "too_large", f"the body exceeds {MAX_BODY_BYTES} bytes")


def _answer(request: Request, content: Any) -> Response:
    body = dumps(content)
    headers = {}
    if len(body) > _GZIP_ABOVE and "gzip" in request.headers.get("accept-encoding", ""):
        body = gzip.compress(body, compresslevel=1, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/json", headers=headers)


# ---------------------------------------------------------------------- routes
def store_router(store: Store) -> APIRouter:
    """The store routes over one store (the caller mounts them under ``/api``, behind the
    authenticator)."""
    router = APIRouter()
    owners = _Owners(store)

    @router.post(
        "/v1/store/{method}",
        summary="Call a store contract method (the HTTP store's requests)",
        responses={404: {"description": "an unknown method, or an id of another project"}},
    )
    async def store_call(
        method: Annotated[str, Path(description="a method of the store contract")],
        request: Request,
    ) -> Response:
        spec = METHODS.get(method)
        if spec is None:
            raise not_found(f"no store method {method!r}")
        principal = principal_of(request)
        if spec.write:
            require_write(principal)
        scope = _scope_of(request, principal, owners)
        raw = await _body(request)
        result = await run_in_threadpool(_call, store, scope, method, raw)
        return _answer(request, {"result": result})

    @router.post(
        "/v1/ingest",
        summary="Write one batch, exactly once (samplers and flushers)",
        responses={422: {"description": "a body that is not a batch"}},
    )
    async def ingest(request: Request) -> Response:
        principal = principal_of(request)
        require_write(principal)
        scope = _scope_of(request, principal, owners)
        raw = await _body(request)
        trial = await run_in_threadpool(_ingest, store, scope, raw)
        return _answer(request, {"trial": trial})

    return router
