"""The public face: what each package exports is deliberate, and exists."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "tunescope": {
        "run",
        "Run",
        "Trial",
        "current_trial",
        "load",
        "open_store",
        "TunescopeError",
        "ConfigError",
        "StoreError",
        "StoreUnavailable",
        "SchemaError",
        "CorruptData",
        "NotFound",
        "Conflict",
        "AccessDenied",
        "CollectError",
        "__version__",
    },
    "tunescope.store": {
        "chdb_folder",
        "made_key",
        "open_store",
        "resolve_url",
        "Store",
        "Window",
        "Bucket",
        "Event",
        "EventBin",
        "EventsWindow",
        "RunInfo",
        "TrialInfo",
        "SeriesInfo",
        "Scalar",
        "CHUNK_SAMPLES",
        "LOST_AFTER_S",
        "DEFAULT_STORE",
        "EVENT_KINDS",
        "EVENT_COLUMNS",
        "SAMPLE_COLUMNS",
        "ExportRows",
        "export_rows",
        "run_and_trials",
        "TRIAL_STATES",
        "Batch",
        "TrialSpec",
        "TrialEnd",
        "EventRow",
        "SampleRow",
        "ScalarRow",
        "new_key",
        "MAX_BATCH_BYTES",
        "MAX_NAME_BYTES",
        "MAX_TEXT_BYTES",
        "MAX_SERIES",
        "check_json",
        "Writer",
        "PooledStore",
        "SQLStore",
        "load",
        "ReplayStats",
        "RetentionReport",
        "replay",
        "refused",
        "pending",
        "classify",
        "spool_dir",
        "spool_root",
        "display",
        "file_id",
        "same_store",
        "redact",
        "absolute_url",
        "token_digest",
        "os_user",
        "project_of",
        "check_url",
    },
    "tunescope.metrics": {"CATALOG", "GIB", "Metric", "Scope", "Source", "headline", "metric"},
    "tunescope.record": {
        "run",
        "Run",
        "Trial",
        "current_trial",
        "start_sampler",
        "sampler_env",
        "SamplerHandle",
        "Supervised",
        "MAX_RESTARTS",
        "Background",
        "ENTER_WAIT_S",
        "EXIT_WAIT_S",
        "WAKE_MARGIN_S",
        "ENV_INTERVAL",
        "ENV_MODE",
        "ENV_QUIET",
        "MODES",
        "check_mode",
        "disabled",
        "ENV_RUN",
        "ENV_RUN_ID",
        "ENV_STORE",
        "ENV_TRIAL_ID",
        "ENV_TRIAL_KEY",
        "process_rank",
        "trial_env",
        "ENV_JOB_ID",
        "Job",
        "find_job",
        "job_key",
        "jsonable",
        "error_text",
        "own_group",
        "held_since",
    },
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_members(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == PUBLIC[module]
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is exported but missing"


def test_top_level_run_is_the_sdk() -> None:
    import tunescope
    import tunescope.record

    assert tunescope.run is tunescope.record.run
