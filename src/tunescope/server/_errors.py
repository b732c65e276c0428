"""One error shape for every failure the API reports.

Every error response, whether raised by a route, by FastAPI's parameter validation, by the
router (an unknown route, a wrong method) or by the store, has this body::

    {"error": {"status": 404, "code": "not_found", "message": "no run 'x'"}}

Codes: ``not_found`` (404: unknown run, trial, metric or route), ``invalid`` (422: bad
parameters), ``method_not_allowed`` (405), ``bad_host`` (400: a Host the server does not
answer, see ``_security.py``), ``store_unavailable`` (503: the store cannot be reached now, a
lost connection or a lock; the same request may succeed later, as ``Retry-After`` says),
``store_error`` (500: the store failed), ``internal`` (500: a bug), ``http_error`` (any other
status); on a team server ``unauthorized`` (401), ``forbidden`` (403) and
``too_many_attempts`` (429), see ``_auth.py``, and ``csrf`` (403, see ``_session.py``).

A team server's errors never name its database's URL, and tell a caller without a valid
token nothing about the database at all (:func:`store_message`): a 5xx then says only that
the store failed or cannot be reached now (the server's log has the store's words). The
local viewer (``tunescope ui``, which shows its store's URL anyway) is told the store's own
message.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from tunescope.errors import NotFound, StoreError, StoreUnavailable
from tunescope.server._schema import ErrorBody, ErrorOut

__all__ = [
    "ApiError",
    "error_response",
    "install_error_handlers",
    "invalid",
    "no_route",
    "not_found",
    "store_message",
]

log = logging.getLogger("tunescope.server")

_CODES = {404: "not_found", 405: "method_not_allowed", 422: "invalid", 500: "internal"}


class ApiError(Exception):
    """An error a route reports on purpose, with its HTTP status, code and message."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def not_found(message: str) -> ApiError:
    """A 404 ``not_found`` error."""
    return ApiError(404, "not_found", message)


def invalid(message: str) -> ApiError:
    """A 422 ``invalid`` error for a bad parameter."""
    return ApiError(422, "invalid", message)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON response of an error, in the one shape."""
    body = ErrorOut.make(error=ErrorBody.make(status=status, code=code, message=message))
    return JSONResponse(body, status_code=status, headers=headers)


_STORE_FAILED = {
    503: "the store cannot be reached now: try again shortly",
    500: "the store failed: the server's log says why",
}


def store_message(
    exc: Exception, status: int, url: str | None, *, local: bool, authenticated: bool
) -> str:
    """What a caller is told of store error ``exc``, answered with ``status``, by a server
    over the store at ``url``. The local viewer (``local``) is told the store's own words. A
    team server tells a caller without a valid token (``authenticated`` False) nothing about
    the database: a 5xx says only that the store failed or cannot be reached now (its log
    has the rest). An authenticated caller (a writer, a store client, the page) is told the
    store's words (a params value that is not JSON, a name taken) with the URL taken out."""
    if local:
        return str(exc)
    if status >= 500 and not authenticated:
        return _STORE_FAILED.get(status, _STORE_FAILED[500])
    message = str(exc)
    if url:
        message = message.replace(f" in {url}", "").replace(url, "the store")
    return message


def _local(request: Request) -> bool:
    """Whether the app is the local viewer, which tells callers the store's own words."""
    auth = getattr(request.app.state, "auth", None)
    return getattr(auth, "mode", "tokens") == "local"


def _authenticated(request: Request) -> bool:
    """Whether the request's token checked out (the token check ran and found a principal)."""
    return getattr(request.state, "principal", None) is not None


def _store_url(request: Request) -> str | None:
    store = getattr(request.app.state, "store", None)
    url = getattr(store, "url", None)
    return url if isinstance(url, str) else None


def _validation_message(errors: Any) -> str:
    """One line from FastAPI's validation errors: ``points: Input should be ...; ...``."""
    parts: list[str] = []
    for err in errors:
        loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path", "body")]
        name = ".".join(loc) or "request"
        parts.append(f"{name}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request"


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, "invalid", _validation_message(exc.errors()))


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = _CODES.get(status, "http_error")
    message = str(exc.detail)
    if status == 404 and exc.detail == "Not Found":
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"method {request.method} not allowed on {request.url.path}"
    headers = dict(exc.headers) if exc.headers else None
    if status == 405:
        allowed = _methods_of(request)
        if allowed:
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
    return error_response(status, code, message, headers)


def no_route(request: Request) -> ApiError:
    """The answer to a request no route takes: 405 (with ``Allow``) when its path is a route's
    that answers other methods, else 404. For a catch-all route (the page's), which the router
    prefers to a path's other methods."""
    allowed = _methods_of(request)
    if allowed:
        message = f"method {request.method} not allowed on {request.url.path}"
        return ApiError(405, "method_not_allowed", message, {"Allow": ", ".join(allowed)})
    return not_found(f"no route {request.method} {request.url.path}")


def _methods_of(request: Request) -> list[str]:
    """Every method the request's path answers (the router's 405 names only those of the
    first route of the path it met; the session's are three routes): from the app's
    document, empty for a path it does not list."""
    path = request.url.path
    for template, ops in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            return sorted(m.upper() for m in ops)
    return []


def _told(request: Request, exc: Exception, status: int) -> str:
    return store_message(
        exc,
        status,
        _store_url(request),
        local=_local(request),
        authenticated=_authenticated(request),
    )


async def _on_not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", _told(request, exc, 404))


async def _on_store_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    message = _told(request, exc, 503)
    return error_response(503, "store_unavailable", message, {"Retry-After": "2"})


async def _on_store_error(request: Request, exc: Exception) -> Response:
    log.error("store error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(500, "store_error", _told(request, exc, 500))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    kind = f": {type(exc).__name__}" if _local(request) else " (the server's log says why)"
    return error_response(500, "internal", f"internal error{kind}")


def install_error_handlers(app: FastAPI) -> None:
    """Make every error the app reports take the one shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(NotFound, _on_not_found)
    app.add_exception_handler(StoreUnavailable, _on_store_unavailable)
    app.add_exception_handler(StoreError, _on_store_error)
    app.add_exception_handler(Exception, _on_unexpected)
