"""tunescope: second-by-second hardware use of every trial of an ML fine-tune.

The SDK (``tunescope.run``, ``Run.trial``, ``current_trial``) lives in
:mod:`tunescope.record`; stores in :mod:`tunescope.store`; ``tunescope.load`` reads a run's
samples into a pandas DataFrame (the rows of ``tunescope export``); the metric catalog in
:mod:`tunescope.metrics`. Importing tunescope imports no ML framework, driver or server.
"""

from typing import TYPE_CHECKING, Any

from tunescope.errors import (
    AccessDenied,
    CollectError,
    ConfigError,
    Conflict,
    CorruptData,
    NotFound,
    SchemaError,
    StoreError,
    StoreUnavailable,
    TunescopeError,
)

if TYPE_CHECKING:
    from tunescope.record import Run, Trial, current_trial, run
    from tunescope.store import load, open_store

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "CollectError",
    "ConfigError",
    "Conflict",
    "CorruptData",
    "NotFound",
    "Run",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "Trial",
    "TunescopeError",
    "__version__",
    "current_trial",
    "load",
    "open_store",
    "run",
]

_LAZY = {
    "run": "tunescope.record",
    "Run": "tunescope.record",
    "Trial": "tunescope.record",
    "current_trial": "tunescope.record",
    "open_store": "tunescope.store",
    "load": "tunescope.store",
}


def __getattr__(name: str) -> Any:
    """The SDK and the store load on first use, so that ``import tunescope`` (and the server,
    which never records) loads neither."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunescope' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
