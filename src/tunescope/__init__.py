"""tunescope: second-by-second hardware use of every trial of an ML fine-tune."""

from tunescope.errors import (
    CollectError,
    ConfigError,
    Conflict,
    NotFound,
    SchemaError,
    StoreError,
    TunescopeError,
)

__version__ = "0.1.0"

__all__ = [
    "CollectError",
    "ConfigError",
    "Conflict",
    "NotFound",
    "SchemaError",
    "StoreError",
    "TunescopeError",
    "__version__",
]
