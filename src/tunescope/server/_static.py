"""The web page: files of the built page at ``/``, with the page's own routing behind them.

A path that names a file inside the static folder gets that file. Any other path outside
``/api`` that looks like a page route (``/runs/3``, no file extension) gets ``index.html``, so
the page's router can take over; a missing asset (``/assets/x.js``) is a 404. Nothing outside
the static folder is ever served: paths are resolved (symlinks and ``..`` included) and must
stay inside it. When the page has not been built, every page route answers a short note.

``/api/docs`` is the built folder's ``api-docs/index.html``: Swagger UI from the folder's own
files (no CDN, no inline script, so it works under the Content-Security-Policy); before the
build, a short note pointing to ``/api/openapi.json``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from starlette.responses import FileResponse, HTMLResponse, Response

from tunescope.server._errors import no_route, not_found

__all__ = ["DOCS_NOT_BUILT_HTML", "NOT_BUILT_HTML", "default_static_dir", "mount_page"]

NOT_BUILT_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tunescope</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 4em auto">
<h1>tunescope</h1>
<p>The web page has not been built. Run <code>make web</code> in the repository, then reload.</p>
<p>The JSON API is up: see <a href="/api/docs">/api/docs</a>.</p>
</body></html>
"""


DOCS_NOT_BUILT_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tunescope API</title></head>
<body>
<h1>tunescope API</h1>
<p>The interactive API docs come with the web page, which has not been built. Run
<code>make web</code> in the repository, then reload.</p>
<p>The OpenAPI document is at <a href="/api/openapi.json">/api/openapi.json</a>; docs/api.md
describes every route.</p>
</body></html>
"""


def default_static_dir() -> Path | None:
    """The package's built page (``tunescope/server/static``), None if it is not built."""
    folder = Path(__file__).resolve().parent / "static"
    return folder if (folder / "index.html").is_file() else None


def _inside(root: Path, path: str) -> Path | None:
    """The file ``path`` names inside ``root``, None if it is elsewhere or not a file."""
    try:
        candidate = (root / path.lstrip("/")).resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def mount_page(app: FastAPI, static_dir: Path | None) -> None:
    """Serve the page from ``static_dir`` (or the not-built note) at every non-API path."""
    root: Path | None = None
    if static_dir is not None:
        resolved = Path(static_dir).expanduser().resolve()
        if (resolved / "index.html").is_file():
            root = resolved

    @app.get("/api/docs", include_in_schema=False)
    def api_docs() -> Response:
        docs = None if root is None else root / "api-docs" / "index.html"
        if docs is None or not docs.is_file():
            return HTMLResponse(DOCS_NOT_BUILT_HTML)
        return FileResponse(docs)

    @app.get("/{path:path}", include_in_schema=False)
    def page(path: str, request: Request) -> Response:
        if path == "api" or path.startswith("api/"):
            raise no_route(request)  # 405 for a path of the API that takes other methods
        if root is None:
            return HTMLResponse(NOT_BUILT_HTML)
        if path:
            found = _inside(root, path)
            if found is not None:
                return FileResponse(found)
            last = path.rstrip("/").rsplit("/", 1)[-1]
            if "." in last or ".." in path.split("/"):
                raise not_found(f"no file /{path}")
        return FileResponse(root / "index.html", headers={"Cache-Control": "no-cache"})
