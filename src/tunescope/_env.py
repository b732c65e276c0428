"""Every environment variable tunescope reads or sets, named once.

Code reads a variable through its constant here, never a ``"TUNESCOPE_…"`` literal of its
own; :data:`VARIABLES` maps each name to its meaning, which docs/environment.md lists (a test
checks both). Precedence everywhere: an argument, then the variable, then the default.

Besides these, each finding setting may be set as :data:`SETTING_PREFIX` and its name
upper-cased (``TUNESCOPE_INPUT_WAIT_HIGH_PCT``: docs/findings.md#settings). The test suite's
and benchmarks' own variables (the tests' PostgreSQL server, say) are not tunescope's: the
package never reads them, and docs/environment.md lists them apart.

This is a leaf: it imports nothing, and every module may import it (the other leaves too).
"""

from __future__ import annotations

__all__ = [
    "ENV_CA_BUNDLE",
    "ENV_CLICKHOUSE_PASSWORD",
    "ENV_CLOCK",
    "ENV_COMPLETE",
    "ENV_GPU_REPLAY",
    "ENV_INTERVAL",
    "ENV_JOB_ID",
    "ENV_KEEP_RAW",
    "ENV_LINGER",
    "ENV_MAX_SERIES",
    "ENV_MODE",
    "ENV_PROJECT",
    "ENV_QUIET",
    "ENV_RUN",
    "ENV_RUN_ID",
    "ENV_SAMPLER_SPEC",
    "ENV_SPOOL",
    "ENV_STORE",
    "ENV_STORE_FILE",
    "ENV_TOKEN",
    "ENV_TRIAL_ID",
    "ENV_TRIAL_KEY",
    "ENV_UI_URL",
    "SETTING_PREFIX",
    "VARIABLES",
]

VARIABLES: dict[str, str] = {}
"""Every variable's name -> its meaning, in one line."""


def _var(name: str, meaning: str) -> str:
    VARIABLES[name] = meaning
    return name


# where data goes, and with what credentials
ENV_STORE = _var(
    "TUNESCOPE_STORE",
    "The store URL when no `--store`/`store=` is given: a SQLite file (default "
    "`./tunescope.db`), `postgresql://…` or a team server's `http(s)://HOST:PORT/PROJECT`. "
    "A trial sets it for the processes it starts.",
)
ENV_PROJECT = _var(
    "TUNESCOPE_PROJECT",
    "The project a SQLite or PostgreSQL store records into and reads (default `default`); "
    "a team server's URL names its own.",
)
ENV_TOKEN = _var(
    "TUNESCOPE_TOKEN",
    "The access token sent to a team server (an `http(s)://` store); never on a command line.",
)
ENV_CA_BUNDLE = _var(
    "TUNESCOPE_CA_BUNDLE",
    "A file of CA certificates to trust for an `https://` or `clickhouses://` store, instead "
    "of the system's.",
)
ENV_CLICKHOUSE_PASSWORD = _var(
    "TUNESCOPE_CLICKHOUSE_PASSWORD",
    "The password of a ClickHouse server's user (`clickhouse://USER@HOST:8123/DB`) when its "
    "URL names no `passfile`; never in the URL.",
)
ENV_SPOOL = _var(
    "TUNESCOPE_SPOOL",
    "The spool folder, where batches wait while their store is away (default "
    "`$XDG_STATE_HOME/tunescope/spool`, else `~/.local/state/tunescope/spool`).",
)

# whether and how the SDK records
ENV_MODE = _var(
    "TUNESCOPE_MODE",
    "`disabled` makes every SDK call and integration a no-op and `tunescope run -- CMD` "
    "just run CMD; `enabled` (or unset) records.",
)
ENV_QUIET = _var(
    "TUNESCOPE_QUIET",
    "`1` (or `true`, `yes`, `on`) silences the line a run prints on stderr when it starts "
    "recording.",
)
ENV_JOB_ID = _var(
    "TUNESCOPE_JOB_ID",
    "A multi-node job's id when `tunescope run` has no `--job-id`: every node run with it "
    "records into one trial.",
)

# set by a trial (the SDK, tunescope run) for the processes it starts, which join it
ENV_RUN = _var("TUNESCOPE_RUN", "Set by a trial for its processes: the run's name.")
ENV_TRIAL_KEY = _var(
    "TUNESCOPE_TRIAL_KEY",
    "Set by a trial for its processes: the trial's key; a process started with it joins "
    "that trial.",
)
ENV_RUN_ID = _var(
    "TUNESCOPE_RUN_ID", "Set by a trial for its processes: the run's id in the store, when known."
)
ENV_TRIAL_ID = _var(
    "TUNESCOPE_TRIAL_ID",
    "Set by a trial for its processes: the trial's id in the store, when known.",
)
ENV_INTERVAL = _var(
    "TUNESCOPE_INTERVAL",
    "Set by a trial for its processes: its sampling interval in seconds.",
)
ENV_CLOCK = _var(
    "TUNESCOPE_CLOCK",
    "Set by a trial for its processes: the trial's clock (its wall-minus-monotonic offset "
    "and the boot's id), so that every process of one boot stamps times on one axis.",
)

# the sampler
ENV_SAMPLER_SPEC = _var(
    "TUNESCOPE_SAMPLER_SPEC",
    "Set by a launcher for its sampler: the trial's spec (JSON), to create the trial if the "
    "store has not seen it yet; the command a sampler starts does not inherit it.",
)
ENV_STORE_FILE = _var(
    "TUNESCOPE_STORE_FILE",
    "Set by a launcher for its sampler: DEVICE:INODE of the SQLite store file the trial began "
    "in; the sampler writes into that file or none (never a new store where it was deleted, "
    "nor another put in its place): it spools instead.",
)
ENV_LINGER = _var(
    "TUNESCOPE_LINGER",
    "Seconds a sampler waits, after its trial ended, for the store to take what it holds "
    "before it spools the rest (default 120).",
)
ENV_GPU_REPLAY = _var(
    "TUNESCOPE_GPU_REPLAY",
    "Replay recorded NVML readings instead of the real GPUs: a recording's path or a "
    "builtin fixture's name (`FILE#NAME`: as trial NAME sees them).",
)

# the server and the integrations
ENV_MAX_SERIES = _var(
    "TUNESCOPE_MAX_SERIES",
    "`tunescope serve --max-series`: the most series one trial may have (default 4096).",
)
ENV_KEEP_RAW = _var(
    "TUNESCOPE_KEEP_RAW",
    "`tunescope serve --keep-raw`: run the daily compaction, dropping raw samples older "
    "than this duration once rolled up.",
)
ENV_UI_URL = _var(
    "TUNESCOPE_UI_URL",
    "The page's base URL the tracker integrations (MLflow, W&B, TensorBoard) link to, when "
    "the caller gives none (default: a team server's address, else `http://127.0.0.1:8765`).",
)
ENV_COMPLETE = _var(
    "_TUNESCOPE_COMPLETE",
    "Set by the shell's completion script when it asks `tunescope` for the words that may "
    "follow; not for people.",
)

SETTING_PREFIX = "TUNESCOPE_"
"""``SETTING_PREFIX`` + a finding setting's name upper-cased sets it from the environment."""
