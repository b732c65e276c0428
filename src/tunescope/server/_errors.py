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
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from tunescope.errors import NotFound, StoreError, StoreUnavailable

__all__ = ["ApiError", "error_response", "install_error_handlers", "invalid", "not_found"]

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
    body = {"error": {"status": status, "code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


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
    return error_response(status, code, message, headers)


async def _on_not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", str(exc))


async def _on_store_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_response(503, "store_unavailable", str(exc), {"Retry-After": "2"})


async def _on_store_error(request: Request, exc: Exception) -> Response:
    log.error("store error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(500, "store_error", str(exc))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, "internal", f"internal error: {type(exc).__name__}")


def install_error_handlers(app: FastAPI) -> None:
    """Make every error the app reports take the one shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(NotFound, _on_not_found)
    app.add_exception_handler(StoreUnavailable, _on_store_unavailable)
    app.add_exception_handler(StoreError, _on_store_error)
    app.add_exception_handler(Exception, _on_unexpected)
