"""The server: a FastAPI app over one store, serving the query API and the web page.

:func:`create_app` builds the app (used in-process by the tests and by any ASGI server);
:func:`serve` runs it with uvicorn. The routes are listed in docs/api.md. The page's routes
only read the store, so the server can run while samplers record into the same database; the
store routes (``_store_api.py``) let HTTP stores read and record through it.
"""

from tunescope.server._app import create_app, release_store, serve
from tunescope.server._errors import ApiError
from tunescope.server._security import page_host

__all__ = ["ApiError", "create_app", "page_host", "release_store", "serve"]
