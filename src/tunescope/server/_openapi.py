"""The OpenAPI document the app serves at ``/api/openapi.json``, without a server.

``python -m tunescope.server._openapi web/openapi.json`` (``make openapi``) writes it where the
web page's build turns it into TypeScript types (``openapi-typescript``: web/src/api-types.ts),
which web/src/api.ts uses, so that the page fails to type-check when it reads a shape the API
does not send. tests/test_web_openapi.py fails while the committed file differs from the app's.
The app is built over an empty SQLite store in a temporary folder; ``info.version`` is left
out of the written file (the types do not depend on it, and a release should not stale it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["document", "render"]


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
