"""The app factory and the server loop.

:func:`create_app` opens one store for the app and builds a FastAPI app over it: the query
routes under ``/api``, the OpenAPI document at ``/api/openapi.json`` (interactive docs at
``/api/docs``), and the web page at ``/``. Nothing is opened or bound when this module is
imported; :func:`serve` is the only thing that listens on a socket.
"""

from __future__ import annotations

import logging
import threading
import webbrowser
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from starlette.datastructures import MutableHeaders
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tunescope import __version__
from tunescope.analyze import FindingSettings, load_settings
from tunescope.errors import ConfigError
from tunescope.server._auth import Authenticator, Mode, Principal
from tunescope.server._compact import COMPACT_EVERY_S, FIRST_AFTER_S, Compactor
from tunescope.server._errors import install_error_handlers
from tunescope.server._limits import (
    MAX_CONNECTIONS,
    READ_TIMEOUT_S,
    BodyLimits,
    InFlight,
    protocol_class,
    raise_nofile,
)
from tunescope.server._live import Live
from tunescope.server._openapi import install as install_openapi
from tunescope.server._prometheus import CONTENT_TYPE, exposition
from tunescope.server._queries import FindingsCache
from tunescope.server._routes import api_router, public_router
from tunescope.server._security import allowed_names, page_host, secure
from tunescope.server._session import install_session
from tunescope.server._static import default_static_dir, mount_page
from tunescope.server._store_api import store_router
from tunescope.store import MAX_SERIES, PooledStore, SQLStore, Store, open_store

__all__ = ["POOL_SIZE", "REQUEST_TIMEOUT_S", "create_app", "release_store", "serve"]

log = logging.getLogger("tunescope.server")

_MAX_HEAD_BYTES = 16 * 1024
"""Largest request head (line and headers) the server reads: 431 / 400 beyond."""

POOL_SIZE = 8
"""Store connections the server keeps for requests running at once."""

REQUEST_TIMEOUT_S = 10.0
"""Longest one store call of a request may wait: for a lock (SQLite), for the database
server (PostgreSQL, whose transaction is then cut), for a free connection of the pool. Past
it the request answers 503 ``store_unavailable`` rather than hang."""


class NoStoreMiddleware:
    """Adds ``Cache-Control: no-store`` to every response under ``/api``: the page polls
    running trials and must never see a cached window."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api"):
            await self.app(scope, receive, send)
            return

        async def send_no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_no_store)


def release_store(store: Store) -> None:
    """Close the store. The server only reads, and a store that only read writes nothing
    on close (it packs only the samples it wrote itself). Safe to call twice."""
    store.close()


def create_app(
    store_url: str,
    *,
    static_dir: Path | None = None,
    allowed_hosts: Iterable[str] = (),
    auth: Mode = "local",
    timeout: float = REQUEST_TIMEOUT_S,
    settings: FindingSettings | None = None,
    otlp_endpoint: str | None = None,
    trusted_proxies: Iterable[str] = (),
    max_series: int = MAX_SERIES,
    read_timeout: float = READ_TIMEOUT_S,
    keep_raw: float | None = None,
    compact_every: float = COMPACT_EVERY_S,
    compact_first_after: float = FIRST_AFTER_S,
) -> FastAPI:
    """A FastAPI app serving the store at ``store_url``.

    ``static_dir`` is the built web page; by default the package's ``server/static`` folder
    when it holds an ``index.html``. Without a built page, ``/`` answers a note saying to run
    ``make web``. ``allowed_hosts`` are the Host names answered besides localhost, 127.0.0.1
    and [::1] (``*``: any; see ``_security.py``). The store is opened now (errors in the URL
    surface here, as ConfigError / StoreError; a store that does not exist is NotFound: the
    page never creates one) and released when the app shuts down. Requests share a pool of
    :data:`POOL_SIZE` connections, each of which heals by itself when the database comes back.
    ``auth``: ``local`` (every request may read every project: the loopback viewer) or
    ``tokens`` (the team server: every API request needs a token, from a bearer header or
    the page's session; see ``_auth.py`` and ``_session.py``). ``timeout``: seconds a store
    call of a request may wait (:data:`REQUEST_TIMEOUT_S`). ``settings``: the findings'
    thresholds, by default the project's (:func:`~tunescope.analyze.load_settings`: from the
    current directory's pyproject.toml / tunescope.toml and ``$TUNESCOPE_<SETTING>``), read
    now: a bad value raises ConfigError before the store is opened. ``otlp_endpoint``: an
    OpenTelemetry collector's base URL to push the running trials' metrics to (``_otel.py``,
    the ``otel`` extra), from now until the app shuts down; ``GET /metrics`` serves them to
    Prometheus either way (``_prometheus.py``). ``trusted_proxies``: the addresses (or
    networks) whose ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed (the client
    address the rate limit counts, see ``_auth.py``); none by default. ``max_series``: most
    series a trial may have (:data:`~tunescope.store.MAX_SERIES`; a batch past it is 422).
    ``read_timeout``: seconds a request body may stall (408). Every body is counted as it
    streams and bounded per route, and the batch and store routes share one budget of bytes
    in flight (``_limits.py``). ``keep_raw``: seconds of raw samples to keep; older ones are
    dropped once rolled up, and ended trials' usage figures kept, the first time
    ``compact_first_after`` seconds after start, then every ``compact_every`` (``_compact.py``,
    see docs/retention.md); None: all are kept, and ended trials' usage figures are kept by
    passes of their own, the first ``compact_first_after`` seconds after start.
    """
    if settings is None:
        settings = load_settings().settings
    if max_series < 1:
        raise ConfigError(f"max_series must be at least 1, not {max_series}")

    def connect() -> Store:
        st = open_store(store_url, create=False, timeout=timeout)
        if isinstance(st, SQLStore):
            st.max_series = max_series
        return st

    store = PooledStore(connect, size=POOL_SIZE, wait=timeout)

    findings = FindingsCache(store, settings=settings)  # one cache: the API and /metrics
    live = Live(store, findings)
    try:
        otel = None if otlp_endpoint is None else _start_otlp(live, otlp_endpoint)
    except BaseException:
        release_store(store)
        raise

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        compactor = Compactor(
            store,
            keep_raw,
            settings,
            compact_every if keep_raw is not None else None,
            compact_first_after,
        )
        app.state.compactor = compactor
        try:
            yield
        finally:
            compactor.stop()
            if otel is not None:
                otel.shutdown()
            release_store(store)

    app = FastAPI(
        title="tunescope",
        version=__version__,
        description="Second-by-second hardware use of every trial of a fine-tune run. "
        "Times are UNIX epoch seconds; values are in the metric's base unit; null means "
        'missing. Errors: {"error": {"status", "code", "message"}}.',
        openapi_url="/api/openapi.json",
        docs_url=None,  # /api/docs is served with the page (_static.py), without a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.live = live
    app.state.otel = otel
    install_error_handlers(app)
    app.add_middleware(NoStoreMiddleware)
    authenticator = Authenticator(store, auth)
    app.state.auth = authenticator
    app.include_router(public_router(store, auth), prefix="/api")
    app.include_router(install_session(authenticator), prefix="/api")
    app.include_router(
        api_router(store, findings), prefix="/api", dependencies=[Depends(authenticator)]
    )
    app.state.inflight = InFlight()
    app.include_router(
        store_router(store, app.state.inflight),
        prefix="/api",
        dependencies=[Depends(authenticator)],
    )

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus: the newest value of every metric of every running trial",
    )
    def prometheus(who: Principal = Depends(authenticator)) -> Response:
        return Response(exposition(live, who.project), media_type=CONTENT_TYPE)

    mount_page(app, static_dir if static_dir is not None else default_static_dir())
    install_openapi(app)
    _bound_bodies(app, read_timeout)
    secure(app, allowed_hosts)
    if trusted := list(trusted_proxies):
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=trusted)
    return app


def _bound_bodies(app: FastAPI, read_timeout: float) -> None:
    """Wrap ``app`` in :class:`~tunescope.server._limits.BodyLimits`, outside Starlette's
    ServerErrorMiddleware (a body it cut short must not be answered twice, nor logged as a
    bug) and inside the Host check (``secure``, which wraps it next)."""
    build = app.build_middleware_stack

    def build_bounded() -> ASGIApp:
        return BodyLimits(build(), read_timeout)

    app.build_middleware_stack = build_bounded  # type: ignore[method-assign]


def _start_otlp(live: Live, endpoint: str) -> Any:
    """The OTLP exporter of ``_otel.py``; ConfigError when the ``otel`` extra is missing."""
    try:
        from tunescope.server._otel import start_otlp
    except ImportError as exc:
        raise ConfigError(
            f"--otlp-endpoint needs the otel extra: pip install 'tunescope[otel]' ({exc})"
        ) from None
    return start_otlp(live, endpoint)


def serve(
    store_url: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    open_browser: bool = False,
    allowed_hosts: Iterable[str] = (),
    *,
    auth: Mode = "local",
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    otlp_endpoint: str | None = None,
    trusted_proxies: Iterable[str] = (),
    max_series: int = MAX_SERIES,
    read_timeout: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    keep_raw: float | None = None,
) -> None:
    """Serve the app with uvicorn until interrupted. Binds 127.0.0.1 unless told otherwise;
    with ``open_browser`` the page opens in the default browser once the server listens.
    Requests are answered for localhost, ``host`` (unless a wildcard such as 0.0.0.0) and
    ``allowed_hosts``. ``auth`` as for :func:`create_app`. With ``tls_cert`` and ``tls_key``
    (PEM files) it answers https. Behind a reverse proxy, ``X-Forwarded-Proto`` and
    ``X-Forwarded-For`` are believed only from ``trusted_proxies`` (as for
    :func:`create_app`; none by default). ``otlp_endpoint``, ``max_series``,
    ``read_timeout`` and ``keep_raw`` as for :func:`create_app`. At most
    ``max_connections`` connections and requests at once (503 beyond); a connection that
    has not sent a whole request head within ``read_timeout`` seconds (of opening, or of
    its last answer) is closed, and an idle one after 5 s; the open-files soft limit is
    raised to the hard limit first, so the cap, not the system, is what refuses."""
    import uvicorn

    if max_connections < 1 or read_timeout <= 0:
        raise ValueError("max_connections and read_timeout must be positive")
    soft, hard = raise_nofile()
    log.info("open files: soft limit %d (hard %d)", soft, hard)

    if (tls_cert is None) != (tls_key is None):
        raise ValueError("https needs both a certificate and its key")
    app = create_app(
        store_url,
        allowed_hosts=allowed_names(host, allowed_hosts),
        auth=auth,
        otlp_endpoint=otlp_endpoint,
        trusted_proxies=trusted_proxies,
        max_series=max_series,
        read_timeout=read_timeout,
        keep_raw=keep_raw,
    )
    scheme = "https" if tls_cert is not None else "http"
    if open_browser:
        url = f"{scheme}://{page_host(host)}:{port}/"
        timer = threading.Timer(1.0, webbrowser.open, args=(url,))
        timer.daemon = True
        timer.start()
    log.info("serving %s on %s://%s:%d/", store_url, scheme, host, port)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="info",
        proxy_headers=False,  # the app believes its trusted proxies only (create_app)
        ssl_certfile=None if tls_cert is None else str(tls_cert),
        ssl_keyfile=None if tls_key is None else str(tls_key),
        http=protocol_class(read_timeout),
        limit_concurrency=max_connections,
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=_MAX_HEAD_BYTES,
    )
