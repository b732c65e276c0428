"""The store over HTTP: the routes an HTTP store (``store/remote/_http.py``) talks to.

``POST /api/v1/store/{method}`` runs one method of the store contract on the server's store:
the body is an object of its arguments by name, the answer ``{"result": …}``
(``store/remote/wire.py`` says how records, arrays and bytes travel). Only the methods of
``wire.CALLS`` are served, each marked read or write (a write needs a write token), its
arguments checked there against the contract's signature before the store sees them.
Arguments named ``project``, ``run_id``, ``trial_id`` and ``series_id`` (and the ids inside
``rows``, ``events``, ``scalars``, ``chunk_ids``) are scoped here to the token's project;
``_chunk_blobs`` takes the ``series_ids`` its chunks belong to, which the route checks and
drops.
``POST /api/v1/ingest`` writes one batch (:meth:`Batch.to_json`, usually gzip-compressed)
with the store's exactly-once :meth:`~tunescope.store.Store.write` and answers
``{"trial": id}``; once a batch that ends its trial is answered, the trial's series are
packed (:func:`_pack`).

Everything is scoped to the principal's project (``_auth.py``): the client names its project
in the ``Tunescope-Project`` header and a token of another project is refused (403);
run-level calls get that project forced (naming another is 403), and every run, trial,
series or chunk id an argument names is checked to belong to it (an id of another project
is 404, as if it did not exist). Owners never change, so they are cached. A batch's trial
is found by its key: a key of another project's trial is 404, and a new trial is made in the
principal's project whatever the batch's spec says. The local viewer (``auth="local"``) may
name any project.

Bodies must be ``application/json`` (a page of another site cannot send that without a CORS
preflight, which this server never grants), at most :data:`MAX_BODY_BYTES` as sent and once
decompressed (413), nested at most ``_limits.MAX_JSON_DEPTH`` deep, and held, while the
request runs, in the server's budget of bytes in flight (429 ``busy`` with ``Retry-After``
past it: see ``_limits.py``); a body that is not what it should be is 422 ``invalid`` and
never reaches the store. Store errors come back in the one error shape with the code of their class.
"""

from __future__ import annotations

import gzip
import logging
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import APIRouter, BackgroundTasks, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from tunescope._kept import Kept
from tunescope.errors import NotFound, StoreError
from tunescope.server._auth import Principal, principal_of, require_write
from tunescope.server._errors import ApiError, invalid, not_found, store_message
from tunescope.server._limits import Hold, InFlight, check_depth, read_body
from tunescope.store import MAX_BATCH_BYTES, Batch, Store
from tunescope.store.remote.wire import CALLS, PROJECT_HEADER, dumps, loads, status_of

__all__ = ["MAX_BODY_BYTES", "store_router"]

log = logging.getLogger("tunescope.server")

MAX_BODY_BYTES = MAX_BATCH_BYTES
"""Largest request body, as sent and once decompressed (a batch of the flusher's 50,000
events and 50,000 scalars is about 8 MB; an HTTP store splits a larger one)."""
_INFLATE_STEP = 1024 * 1024
"""Bytes inflated at a time (each taken from the budget of bytes in flight)."""

_GZIP_ABOVE = 1024
"""Answers larger than this are gzip-compressed for a client that accepts it."""

_OWNERS_KEPT = 100_000
"""Owners (of runs, trials, series, trial keys) remembered, each kind."""


# ---------------------------------------------------------------------- owners and scope
class _Owners:
    """The project of runs, trials, series and trial keys, remembered (they never move).
    Thread-safe."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[str, Kept[Any, str]] = {
            k: Kept(_OWNERS_KEPT) for k in ("run", "trial", "series", "key")
        }

    def _get(self, kind: str, ident: Any, find: Callable[[], str]) -> str:
        kept = self._kept[kind]
        project = kept.get(ident)
        if project is None:
            project = find()  # NotFound for an unknown id: not remembered
            kept.put(ident, project)
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
        """NotFound unless the run, trial or series ``ident`` is in the scope's project: the
        same answer, word for word, for an id of another project and one that does not
        exist."""
        if not self.only:
            return
        try:
            owner = getattr(self.owners, kind)(ident)
        except NotFound:
            owner = None
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
        raise ApiError(
            403, "forbidden", "compact needs a series_id: a token packs its project only"
        )
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
    try:
        result = getattr(store, name)(**args)
    except NotFound:
        if name == "trial_by_key" and scope.only:
            raise NotFound(f"no trial with key {args['key']!r}") from None
        raise
    if not scope.only:
        return result
    if name == "owner" and result != scope.project:
        which = "trial" if args["trial"] is not None else "series"
        raise NotFound(f"no {which} with id {args[which]}")
    if name == "trial_by_key" and scope.owners.key(args["key"]) != scope.project:
        raise NotFound(f"no trial with key {args['key']!r}")
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

    def inner(store: Store, scope: _Scope, *args: Any) -> Any:
        try:
            return fn(store, scope, *args)
        except StoreError as exc:
            status, code = status_of(exc)
            headers = None
            if status == 503:
                log.warning("store unavailable: %s", exc)
                headers = {"Retry-After": "2"}
            elif status >= 500:
                log.error("store error: %s", exc)
            message = store_message(
                exc, status, store.url, local=not scope.only, authenticated=True
            )
            raise ApiError(status, code, message, headers) from None
        except (TypeError, ValueError) as exc:
            raise invalid(str(exc)) from None

    return inner


@_store_errors
def _call(store: Store, scope: _Scope, name: str, raw: bytes) -> Any:
    method = CALLS[name]
    try:
        args = method.args(loads(raw))
    except ValueError as exc:  # nothing of a bad body reaches the store
        raise invalid(f"{name}: {exc}") from None
    return method.result(_scoped(store, scope, name, args))


@_store_errors
def _ingest(store: Store, scope: _Scope, raw: bytes) -> tuple[int, bool]:
    """Write the batch in ``raw``: (its trial's id, whether the batch ends the trial)."""
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
    return store.write(batch), batch.end is not None


def _pack(store: Store, trial_id: int) -> None:
    """Pack the samples an ended trial's series hold pending. A writer packs its own when it
    closes; the stores of a server live long and may be killed, so a trial's are packed
    when its end lands (samples that come after it stay pending, which reads include)."""
    try:
        for s in store.list_series(trial_id):
            store.compact(s.id)
    except StoreError as exc:
        log.warning("could not pack the series of trial %d: %s", trial_id, exc)


# ---------------------------------------------------------------------- bodies
async def _body(request: Request, hold: Hold) -> bytes:
    """The request's JSON body, decompressed; 415, 413, 422 or 429 when it is not acceptable.
    Read by the one body reader (``_limits.read_body``), its bytes and what they inflate to
    held in ``hold`` (the server's budget of bytes in flight), its nesting checked before it
    is parsed."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, "unsupported_media_type", "the body must be application/json")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise ApiError(415, "unsupported_media_type", "Content-Encoding must be gzip or none")
    raw = await read_body(request, hold)
    if encoding == "identity":
        check_depth(raw)
        return raw
    inflate = zlib.decompressobj(wbits=31)  # gzip
    out = bytearray()
    try:
        data = raw
        while True:
            part = inflate.decompress(data, _INFLATE_STEP)
            out += part
            if len(out) > MAX_BODY_BYTES:
                raise _too_large()
            hold.take(len(part))
            data = inflate.unconsumed_tail
            if inflate.eof or (not data and len(part) < _INFLATE_STEP):
                break
        out += inflate.flush()
        if not inflate.eof:
            raise zlib.error("the gzip stream is cut short")
    except zlib.error as exc:
        raise invalid(f"the body is not gzip: {exc}") from None
    if len(out) > MAX_BODY_BYTES:
        raise _too_large()
    check_depth(bytes(out))
    return bytes(out)


def _too_large() -> ApiError:
    return ApiError(413, "too_large", f"the body exceeds {MAX_BODY_BYTES} bytes once inflated")


def _answer(request: Request, content: Any) -> Response:
    body = dumps(content)
    headers = {}
    if len(body) > _GZIP_ABOVE and "gzip" in request.headers.get("accept-encoding", ""):
        body = gzip.compress(body, compresslevel=1, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/json", headers=headers)


# ---------------------------------------------------------------------- routes
def store_router(store: Store, inflight: InFlight | None = None) -> APIRouter:
    """The store routes over one store (the caller mounts them under ``/api``, behind the
    authenticator). ``inflight``: the server's budget of body bytes in flight (by default
    one of these routes' own)."""
    router = APIRouter()
    budget = inflight if inflight is not None else InFlight()
    owners = _Owners(store)

    @router.post(
        "/v1/store/{method}",
        summary="Call a store contract method (the HTTP store's requests)",
        responses={
            404: {"description": "an unknown method, or an id of another project"},
            413: {"description": "a body larger than the server takes"},
            422: {"description": "arguments that are not the method's"},
            429: {"description": "the server holds as many bodies as it may: retry later"},
        },
    )
    async def store_call(
        method: Annotated[str, Path(description="a method of the store contract")],
        request: Request,
    ) -> Response:
        spec = CALLS.get(method)
        if spec is None:
            raise not_found(f"no store method {method!r}")
        principal = principal_of(request)
        if spec.write:
            require_write(principal)
        scope = _scope_of(request, principal, owners)
        async with budget.hold() as hold:
            raw = await _body(request, hold)
            result = await run_in_threadpool(_call, store, scope, method, raw)
        return _answer(request, {"result": result})

    @router.post(
        "/v1/ingest",
        summary="Write one batch, exactly once (samplers and flushers)",
        responses={
            413: {"description": "a batch larger than the server takes: split it"},
            422: {"description": "a body that is not a batch, or one past a trial's bounds"},
            429: {"description": "the server holds as many bodies as it may: retry later"},
        },
    )
    async def ingest(request: Request, after: BackgroundTasks) -> Response:
        principal = principal_of(request)
        require_write(principal)
        scope = _scope_of(request, principal, owners)
        async with budget.hold() as hold:
            raw = await _body(request, hold)
            trial, ended = await run_in_threadpool(_ingest, store, scope, raw)
        if ended:
            after.add_task(_pack, store, trial)  # once answered
        return _answer(request, {"trial": trial})

    return router
