"""The store: the contract every backend keeps, and :func:`open_store` to pick one by URL.

URLs: a file path or ``sqlite:///PATH`` (the default, ``./tunescope.db``),
``postgresql://…`` for a team database, and ``http(s)://HOST:PORT/PROJECT`` for a team
server (the token in ``$TUNESCOPE_TOKEN``). Precedence: the argument, then the
``TUNESCOPE_STORE`` environment variable, then the default.
"""

from __future__ import annotations

from tunescope.store._checks import MAX_NAME_BYTES, MAX_TEXT_BYTES, check_json
from tunescope.store._contract import CHUNK_SAMPLES, LOST_AFTER_S, Store
from tunescope.store._export import (
    EVENT_COLUMNS,
    SAMPLE_COLUMNS,
    ExportRows,
    export_rows,
    load,
    run_and_trials,
)
from tunescope.store._model import (
    EVENT_KINDS,
    TRIAL_STATES,
    Bucket,
    Event,
    EventBin,
    EventsWindow,
    RunInfo,
    Scalar,
    SeriesInfo,
    TrialInfo,
    Window,
)
from tunescope.store._open import open_store
from tunescope.store._url import (
    DEFAULT_STORE,
    absolute_url,
    chdb_folder,
    check_url,
    display,
    file_id,
    os_user,
    project_of,
    redact,
    resolve_url,
    same_store,
)
from tunescope.store.produce._batch import (
    MAX_BATCH_BYTES,
    Batch,
    EventRow,
    SampleRow,
    ScalarRow,
    TrialEnd,
    TrialSpec,
    made_key,
    new_key,
)
from tunescope.store.produce._spool import (
    ReplayStats,
    classify,
    pending,
    refused,
    replay,
    spool_dir,
    spool_root,
)
from tunescope.store.produce._writer import Writer
from tunescope.store.sql._pool import PooledStore
from tunescope.store.sql._retention import RetentionReport
from tunescope.store.sql._sql import MAX_SERIES, SQLStore
from tunescope.store.sql._tokens import digest as token_digest

__all__ = [
    "CHUNK_SAMPLES",
    "DEFAULT_STORE",
    "EVENT_COLUMNS",
    "EVENT_KINDS",
    "LOST_AFTER_S",
    "MAX_BATCH_BYTES",
    "MAX_NAME_BYTES",
    "MAX_SERIES",
    "MAX_TEXT_BYTES",
    "SAMPLE_COLUMNS",
    "TRIAL_STATES",
    "Batch",
    "Bucket",
    "Event",
    "EventBin",
    "EventRow",
    "EventsWindow",
    "ExportRows",
    "PooledStore",
    "ReplayStats",
    "RetentionReport",
    "RunInfo",
    "SQLStore",
    "SampleRow",
    "Scalar",
    "ScalarRow",
    "SeriesInfo",
    "Store",
    "TrialEnd",
    "TrialInfo",
    "TrialSpec",
    "Window",
    "Writer",
    "absolute_url",
    "chdb_folder",
    "check_json",
    "check_url",
    "classify",
    "display",
    "export_rows",
    "file_id",
    "load",
    "made_key",
    "new_key",
    "open_store",
    "os_user",
    "pending",
    "project_of",
    "redact",
    "refused",
    "replay",
    "resolve_url",
    "run_and_trials",
    "same_store",
    "spool_dir",
    "spool_root",
    "token_digest",
]
