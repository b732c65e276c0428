"""The OpenAPI document the app serves at ``/api/openapi.json``, without a server.

``python -m tunescope.server._openapi web/openapi.json`` (``make openapi``) writes it where the
web page's build turns it into TypeScript types (``openapi-typescript``: web/src/api-types.ts),
which web/src/api.ts uses, so that the page fails to type-check when it reads a shape the API
does not send. tests/test_web_openapi.py fails while the committed file differs from the app's.
The app is built over an empty SQLite store in a temporary folder; ``info.version`` is left
out of the written file (the types do not depend on it, and a release should not stale it).

:func:`install` makes the app's document list every error status a route can answer
(:data:`ERRORS`, in the one error shape), derived from what the route is: every route may
answer 400 (a Host the server does not answer); a route behind the token check (every path
but /api/health, the login included) 401, 429 and 503 (the check asks the store); a route
that may change something 403 (a read token, a cookie without its CSRF header, another
project); a route with a body 413, 415 and 422; a route with parameters 422; the store
routes 404 and 409. It also describes the bodies of the store routes (a batch; a contract
method's arguments), so that a client generated from the document, or a fuzzer
(tests/test_api_schemathesis.py), sends their shapes. A method a path does not take is 405
(with ``Allow``), which no route lists.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ERRORS", "document", "install", "render"]

ERRORS: dict[int, str] = {
    400: "a Host this server does not answer (bad_host)",
    401: "no token, or one that is unknown, revoked or expired (unauthorized)",
    403: "a read token that writes, a cookie without its CSRF header, or another project "
    "(forbidden, csrf)",
    404: "an unknown route, method, id or trial key, or one of another project (not_found)",
    409: "a batch id already written with other content, or a name already taken (conflict)",
    413: "a body larger than the server takes (too_large)",
    415: "a body that is not application/json, or an encoding other than gzip",
    422: "bad parameters or a bad body (invalid)",
    429: "too many failed attempts with this token from this client, or too many bytes in "
    "flight (too_many_attempts; with Retry-After)",
    503: "the store cannot be reached now (store_unavailable; with Retry-After)",
}
"""The error statuses the document lists, each with what it means (``_errors.py``)."""

_OPEN = frozenset({"/api/health"})
"""The paths that need no token (``_routes.public_router``); every other one checks one."""

_BATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "one batch, as Batch.to_json writes it (store/produce/_batch.py)",
    "required": ["id", "trial"],
    "properties": {
        "id": {"type": "string"},
        "trial": {"type": "string", "description": "the trial's key"},
        "host": {"type": "string"},
        "spec": {"type": "object", "description": "creates the trial when the store lacks it"},
        "samples": {
            "type": "array",
            "items": {"type": "array", "description": "[metric, device, note, t, value]"},
        },
        "events": {"type": "array", "items": {"type": "array"}},
        "scalars": {"type": "array", "items": {"type": "array"}},
        "heartbeat": {"type": "number"},
        "pids": {"type": "array", "items": {"type": "integer"}},
        "params": {"type": "object"},
        "where": {"type": "object"},
        "end": {"type": "object"},
    },
    "additionalProperties": False,
}

_ARGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "the method's arguments by name (store/_contract.py; store/remote/wire.py)",
}


def document() -> dict[str, Any]:
    """The app's OpenAPI document, as served (``info.version`` included)."""
    from tunescope.analyze import FindingSettings
    from tunescope.server._app import create_app, release_store
    from tunescope.store import open_store

    with tempfile.TemporaryDirectory(prefix="tunescope-openapi-") as tmp:
        url = str(Path(tmp) / "empty.db")
        open_store(url).close()
        app = create_app(url, settings=FindingSettings())
        try:
            return app.openapi()
        finally:
            release_store(app.state.store)


def install(app: FastAPI) -> None:
    """Make ``app`` serve its document with the error answers of each route and the store
    routes' bodies (see the module doc)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        doc = plain()  # FastAPI builds it once and keeps it in app.openapi_schema
        if fresh:
            _complete(app, doc)
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(app: FastAPI, doc: dict[str, Any]) -> None:
    from tunescope.store.remote.wire import CALLS

    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            method = method.upper()
            codes = {400}
            if path not in _OPEN:
                codes |= {401, 429, 503}
            if method != "GET":
                codes |= {403}
            if method == "POST":
                codes |= {413, 415, 422}
            if op.get("parameters"):
                codes |= {422}
            if path == "/api/v1/ingest":
                codes |= {404, 409}
                op["requestBody"] = _body(_BATCH_SCHEMA)
            elif path == "/api/v1/store/{method}":
                codes |= {404, 409}
                op["requestBody"] = _body(_ARGS_SCHEMA)
                for p in op.get("parameters", []):
                    if p["name"] == "method":
                        p["schema"] = {"type": "string", "enum": sorted(CALLS)}
            responses = op["responses"]
            for code in sorted(codes | {int(c) for c in responses if c >= "400"}):
                given = responses.setdefault(str(code), {"description": ERRORS[code]})
                if "content" not in given or "HTTPValidationError" in json.dumps(given):
                    given["content"] = error  # every error has the one shape
            op["responses"] = dict(sorted(responses.items()))
    # FastAPI's own shape of a 422, which this app never answers (_errors.py's is ErrorOut)
    schemas = doc.get("components", {}).get("schemas", {})
    if "HTTPValidationError" not in json.dumps(doc["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def render() -> str:
    """The document as written to web/openapi.json: without ``info.version``, keys in the
    app's order, two-space indents, a final newline."""
    doc = document()
    doc["info"] = {k: v for k, v in doc["info"].items() if k != "version"}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the document to ``argv[0]`` (atomically), or print it without an argument."""
    if len(argv) > 1:
        print("usage: python -m tunescope.server._openapi [PATH]", file=sys.stderr)
        return 2
    text = render()
    if not argv:
        sys.stdout.write(text)
        return 0
    path = Path(argv[0])
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
