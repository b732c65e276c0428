"""Serving endpoints as trials: the load generator (``tunescope load``), engine metrics in
one vocabulary (``serve.*``) and importers of other load testers' results.

See docs/serving.md. Imports only the standard library, ``metrics`` and ``store``.
"""

from tunescope.serving._engines import (
    ENGINES,
    SERVE_KEYS,
    Exposition,
    Gauge,
    HistMean,
    Ratio,
    Scrape,
    detect,
    parse_exposition,
    parse_slots,
)
from tunescope.serving._http import Connection, Origin
from tunescope.serving._import import TOOLS, ImportedLevel, import_levels, read_levels
from tunescope.serving._load import (
    MAX_IN_FLIGHT,
    EngineInfo,
    LevelResult,
    LoadConfig,
    LoadError,
    RequestResult,
    probe,
    run_sweep,
    send,
    trial_name,
)
from tunescope.serving._spec import (
    Prompt,
    TokenSpec,
    parse_levels,
    read_prompts,
)

__all__ = [
    "ENGINES",
    "MAX_IN_FLIGHT",
    "SERVE_KEYS",
    "TOOLS",
    "Connection",
    "EngineInfo",
    "Exposition",
    "Gauge",
    "HistMean",
    "ImportedLevel",
    "LevelResult",
    "LoadConfig",
    "LoadError",
    "Origin",
    "Prompt",
    "Ratio",
    "RequestResult",
    "Scrape",
    "TokenSpec",
    "detect",
    "import_levels",
    "parse_exposition",
    "parse_levels",
    "parse_slots",
    "probe",
    "read_levels",
    "read_prompts",
    "run_sweep",
    "send",
    "trial_name",
]
