"""Security headers on every response, and the Host check against DNS rebinding.

Every response the app sends, whatever produced it (the page, a static file, the API, an
error, even a 500 for a bug), carries :data:`SECURITY_HEADERS`: the page's
Content-Security-Policy plus ``frame-ancestors 'none'`` (no site may frame it),
``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``.

The server answers only requests addressed to a name it knows. A page of another site can
make its own name resolve to 127.0.0.1 (DNS rebinding) and then read the API as if it were
same-origin; its requests still carry that other name in their ``Host`` header, so a request
whose Host is not an allowed name gets a 400 ``bad_host`` in the one error shape. Allowed:
``localhost``, ``127.0.0.1`` and ``[::1]`` at any port, plus the names the app is created
with (:func:`allowed_names`: the address :func:`tunescope.server.serve` binds, unless it is a
wildcard, and ``tunescope ui --allow-host``). ``*`` allows any Host, for use behind a reverse
proxy that checks Host itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunescope.server._errors import error_response

__all__ = [
    "ANY_HOST",
    "CSP",
    "DEFAULT_HOSTS",
    "SECURITY_HEADERS",
    "SecurityMiddleware",
    "allowed_names",
    "host_name",
    "page_host",
    "secure",
]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The page's policy (the ``<meta>`` of web/src/index.html) plus ``frame-ancestors``, which a
``<meta>`` cannot carry."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

DEFAULT_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
ANY_HOST = "*"
_WILDCARDS = frozenset({"", "0.0.0.0", "[::]"})


def host_name(value: str) -> str:
    """The name in a Host header or a bind address, lower-case, without the port; an IPv6
    address in brackets: ``LocalHost:8765`` -> ``localhost``, ``::1`` and ``[::1]:80`` ->
    ``[::1]``."""
    v = value.strip().lower()
    if v.startswith("["):
        end = v.find("]")
        return v[: end + 1] if end > 0 else v  # unclosed: matches no allowed name
    if v.count(":") > 1:  # a bare IPv6 address (a bind address; a Host header has brackets)
        return f"[{v}]"
    return v.partition(":")[0]


def allowed_names(bound: str, extra: Iterable[str] = ()) -> list[str]:
    """The names to allow besides the defaults for a server bound to ``bound``: ``extra``,
    and ``bound`` itself unless it is a wildcard (``0.0.0.0``, ``::``), which names no
    host."""
    names = list(extra)
    if host_name(bound) not in _WILDCARDS:
        names.append(bound)
    return names


def page_host(bound: str) -> str:
    """The host to write in the page's URL for a server bound to ``bound``: ``localhost`` for
    a wildcard (which names no host, and which the Host check refuses), else the address as
    a URL writes it (``[fe80::1]`` for ``fe80::1``)."""
    name = host_name(bound)
    return "localhost" if name in _WILDCARDS else name


class SecurityMiddleware:
    """Refuses a request whose Host is not allowed; adds :data:`SECURITY_HEADERS` to every
    response."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        names = {host_name(h) for h in allowed_hosts}
        self.any_host = ANY_HOST in names
        self.allowed = DEFAULT_HOSTS | names

    def _refusal(self, scope: Scope) -> str | None:
        """Why the request's Host is refused, None when it is allowed."""
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
        if len(hosts) != 1:
            return "a request needs exactly one Host header"
        if self.any_host or host_name(hosts[0]) in self.allowed:
            return None
        return (
            f"host {hosts[0][:100]!r} is not allowed: open the page at localhost, or start "
            "the server with --allow-host NAME"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            # no-store: this layer is outside the one that marks /api responses
            response = error_response(400, "bad_host", refusal, {"Cache-Control": "no-store"})
            await response(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)


def secure(app: FastAPI, allowed_hosts: Iterable[str] = ()) -> None:
    """Wrap ``app`` in :class:`SecurityMiddleware`, outside every other layer.

    Not ``app.add_middleware``: Starlette puts its ServerErrorMiddleware outside all added
    middleware, and it answers an unhandled exception (our ``internal`` 500) itself, so that
    response would miss the headers; and a refused Host should reach nothing of the app.
    """
    hosts = tuple(allowed_hosts)
    build = app.build_middleware_stack

    def build_secured() -> ASGIApp:
        return SecurityMiddleware(build(), hosts)

    app.build_middleware_stack = build_secured  # type: ignore[method-assign]
