"""The page's session on a team server: its token in a cookie, and CSRF protection.

Clients send their token in an ``Authorization: Bearer`` header. The page cannot keep a token
where its scripts (or a script injected into it) could read it, so it logs in once:
``POST /api/session`` with ``{"token": "..."}`` checks the token (a failure counts against the
client like a bad bearer token, see ``_auth.py``) and sets two cookies, both
``SameSite=Strict; Path=/`` and ``Secure`` when the request came over https (directly, or
through a proxy that says so in ``X-Forwarded-Proto``):

* :data:`SESSION_COOKIE`: the token, ``HttpOnly`` (scripts cannot read it). No ``Max-Age``: it
  ends with the browser session, and a revoked or expired token ends it at once.
* :data:`CSRF_COOKIE`: ``nonce.mac``, where ``mac`` is an HMAC-SHA256 of the nonce keyed by
  the token. Scripts of the page read it and send it back in :data:`CSRF_HEADER` with every
  request that is not ``GET``/``HEAD``/``OPTIONS``.

A request authenticated by the session cookie whose method may change something must carry
that header, equal to the CSRF cookie and signed for the session's token, or it is refused
with 403 ``csrf`` (a signed double-submit cookie: another site can neither read the cookie nor
make a matching one without the token, even one that can plant cookies). A request with a
bearer header needs no CSRF header: a browser never adds that header by itself. The login
refuses a JSON-less body (a cross-site form cannot send JSON) and an ``Origin`` of another
host.

``GET /api/session`` says who is asking; ``DELETE /api/session`` logs out (clears both
cookies; a write by cookie like any other, so it needs the CSRF header). On a local viewer
(``tunescope ui``) there is no login: ``GET`` answers ``mode: local`` and the others 404.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from tunescope.server._auth import Authenticator, Principal, principal_of
from tunescope.server._errors import ApiError, invalid, not_found
from tunescope.server._limits import check_depth, read_body
from tunescope.server._schema import ErrorOut, Json, LoginIn, LogoutOut, SessionOut
from tunescope.server._security import host_name

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "csrf_value",
    "install_session",
    "session_json",
]

SESSION_COOKIE = "tunescope_session"
CSRF_COOKIE = "tunescope_csrf"
CSRF_HEADER = "X-CSRF-Token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _mac(token: str, nonce: str) -> str:
    return hmac.new(token.encode(), b"tunescope-csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


def csrf_value(token: str) -> str:
    """A new CSRF cookie value for a session holding ``token``."""
    nonce = secrets.token_urlsafe(16)
    return f"{nonce}.{_mac(token, nonce)}"


def _csrf_ok(token: str, cookie: str | None, header: str | None) -> bool:
    if not cookie or not header or not hmac.compare_digest(cookie, header):
        return False
    nonce, _, mac = cookie.partition(".")
    return bool(nonce) and hmac.compare_digest(mac, _mac(token, nonce))


def _csrf_refused() -> ApiError:
    return ApiError(
        403,
        "csrf",
        f"a write by the page's session needs its {CSRF_HEADER} header (reload the page)",
    )


def session_token(request: Request) -> str | None:
    """The token of the request's session cookie (None without one); 403 ``csrf`` when the
    request may change something and lacks its matching CSRF header."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    if request.method not in _SAFE_METHODS and not _csrf_ok(
        token, request.cookies.get(CSRF_COOKIE), request.headers.get(CSRF_HEADER)
    ):
        raise _csrf_refused()
    return token


def session_json(mode: str, who: Principal) -> Json:
    """Who is asking: the server's mode, the project the request may see (null: every
    project) and its scope."""
    return SessionOut.make(mode=mode, project=who.project, scope=who.scope)


def _same_origin(request: Request) -> bool:
    """False when the request says it comes from a page of another host (its Origin)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return host_name(urlsplit(origin).netloc) == host_name(request.headers.get("host", ""))


async def _login_token(request: Request) -> str:
    """The token of a login request's JSON body, or 422."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise invalid('send the token as JSON: {"token": "..."} (Content-Type: application/json)')
    raw = await read_body(request)  # counted as it streams: at most _limits.LOGIN_BODY_BYTES
    check_depth(raw)
    try:
        body = json.loads(raw)
    except ValueError:
        raise invalid('the body is not JSON: send {"token": "..."}') from None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token.strip():
        raise invalid('token: a non-empty string is required: send {"token": "..."}')
    return token.strip()


def _set_cookies(response: Response, request: Request, token: str) -> None:
    secure = request.url.scheme == "https"
    common: dict[str, Any] = {"path": "/", "samesite": "strict", "secure": secure}
    response.set_cookie(SESSION_COOKIE, token, httponly=True, **common)
    response.set_cookie(CSRF_COOKIE, csrf_value(token), httponly=False, **common)


def _clear_cookies(response: Response, request: Request) -> None:
    secure = request.url.scheme == "https"
    for name, http_only in ((SESSION_COOKIE, True), (CSRF_COOKIE, False)):
        response.delete_cookie(name, path="/", samesite="strict", secure=secure, httponly=http_only)


def install_session(auth: Authenticator) -> APIRouter:
    """Let ``auth`` take a request's token from its session cookie, and return the
    ``/session`` routes (the caller mounts them under ``/api``, outside the authenticated
    routes: logging in needs no token yet)."""
    auth.session_token = session_token
    router = APIRouter()
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorOut, "description": "no token, or one not usable now"},
        403: {"model": ErrorOut, "description": "a write by cookie without its CSRF header"},
        429: {"model": ErrorOut, "description": "too many failed attempts"},
    }
    login_errors = {
        **errors,
        413: {"model": ErrorOut, "description": "a body larger than a token needs"},
    }
    authenticated = [Depends(auth)]  # such a route reads the principal with principal_of

    def no_login() -> ApiError:
        return not_found("this server has no login: it is a local viewer (tunescope ui)")

    @router.get(
        "/session",
        response_model=SessionOut,
        responses=errors,
        dependencies=authenticated,
        summary="Who is asking",
    )
    def whoami(request: Request) -> Response:
        return JSONResponse(session_json(auth.mode, principal_of(request)))

    @router.post(
        "/session",
        response_model=SessionOut,
        responses=login_errors,
        summary="Log the page in with a token (sets the session and CSRF cookies)",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": LoginIn.model_json_schema()}},
            }
        },
    )
    async def login(request: Request) -> Response:
        if auth.mode == "local":
            raise no_login()
        if not _same_origin(request):
            raise ApiError(403, "csrf", "a login from a page of another site is refused")
        token = await _login_token(request)
        who = await run_in_threadpool(auth.check, request, token)  # the store's check blocks
        response = JSONResponse(session_json(auth.mode, who))
        _set_cookies(response, request, token)
        return response

    @router.delete(
        "/session",
        response_model=LogoutOut,
        responses=errors,
        dependencies=authenticated,
        summary="Log out (clears the session cookies; needs the CSRF header)",
    )
    def logout(request: Request) -> Response:
        if auth.mode == "local":
            raise no_login()
        response = JSONResponse(LogoutOut.make(ok=True))
        _clear_cookies(response, request)
        return response

    return router
