"""The schema, written once for every SQL backend, and its forward migrations.

``{id}``, ``{blob}`` and ``{real}`` are filled in by the dialect. Version N of the schema is
the result of applying MIGRATIONS[0:N] in order; a database records its version in ``meta``.
A migration is one tuple of statements for every dialect, or a dict of them by dialect name
where the databases differ (SQLite cannot drop a constraint: it rebuilds the table, with
foreign keys off while it does, see :data:`REBUILDS`).
"""

from __future__ import annotations

from collections.abc import Mapping

SCHEMA_VERSION = 12

Migration = tuple[str, ...] | Mapping[str, tuple[str, ...]]

REBUILDS = frozenset({4, 5})
"""Versions whose SQLite migration rebuilds a table that others reference."""


def statements(version: int, dialect: str) -> tuple[str, ...]:
    """The statements of migration ``version`` (1-based) for ``dialect``."""
    m = MIGRATIONS[version - 1]
    return m if isinstance(m, tuple) else m[dialect]


MIGRATIONS: tuple[Migration, ...] = (
    # 1: the first schema
    (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE runs (id {id}, name TEXT NOT NULL UNIQUE, t_start {real} NOT NULL)",
        """CREATE TABLE trials (
            id {id}, run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL,
            params TEXT NOT NULL, state TEXT NOT NULL, host TEXT NOT NULL, pids TEXT NOT NULL,
            t_start {real} NOT NULL, t_end {real}, heartbeat {real}, error TEXT,
            interval_s {real} NOT NULL, UNIQUE (run_id, name))""",
        """CREATE TABLE series (
            id {id}, trial_id INTEGER NOT NULL REFERENCES trials(id), metric TEXT NOT NULL,
            device TEXT NOT NULL, note TEXT, UNIQUE (trial_id, metric, device))""",
        """CREATE TABLE chunks (
            id {id}, series_id INTEGER NOT NULL REFERENCES series(id),
            t_first {real} NOT NULL, t_last {real} NOT NULL, n INTEGER NOT NULL,
            vmin {real} NOT NULL, vmax {real} NOT NULL, vsum {real} NOT NULL,
            data {blob} NOT NULL, blocks {blob} NOT NULL)""",
        "CREATE INDEX chunks_by_time ON chunks (series_id, t_first)",
        """CREATE TABLE pending (
            series_id INTEGER NOT NULL REFERENCES series(id), t {real} NOT NULL,
            value {real} NOT NULL)""",
        "CREATE INDEX pending_by_time ON pending (series_id, t)",
        """CREATE TABLE events (
            id {id}, trial_id INTEGER NOT NULL REFERENCES trials(id), kind TEXT NOT NULL,
            name TEXT, step INTEGER, t {real} NOT NULL, duration {real}, value {real},
            data TEXT)""",
        "CREATE INDEX events_by_time ON events (trial_id, t)",
        """CREATE TABLE scalars (
            id {id}, trial_id INTEGER NOT NULL REFERENCES trials(id), name TEXT NOT NULL,
            step INTEGER, t {real} NOT NULL, value {real} NOT NULL)""",
        "CREATE INDEX scalars_by_name ON scalars (trial_id, name, step)",
    ),
    # 2: the longest event interval per trial and kind, so window queries can bound their
    #    index scan; the exit code of a command run by `tunescope run`
    (
        "ALTER TABLE trials ADD COLUMN exit_code INTEGER",
        """CREATE TABLE event_spans (
            trial_id INTEGER NOT NULL REFERENCES trials(id), kind TEXT NOT NULL,
            max_duration {real} NOT NULL, PRIMARY KEY (trial_id, kind))""",
    ),
    # 3: trials named by a key their writer makes, so a trial starts recording before the
    #    store is reachable (older trials get 'id-<id>'); the ids of the batches written, so a
    #    batch sent twice (a retry, a replay from the spool) is written once; the event spans
    #    of events written before version 2
    (
        "ALTER TABLE trials ADD COLUMN trial_key TEXT",
        "UPDATE trials SET trial_key = 'id-' || CAST(id AS TEXT)",
        "CREATE UNIQUE INDEX trials_by_key ON trials (trial_key)",
        """CREATE TABLE batches (
            id TEXT PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id),
            t {real} NOT NULL)""",
        # version 2 made event_spans for events written from then on: fill it for older ones
        "DELETE FROM event_spans",
        """INSERT INTO event_spans (trial_id, kind, max_duration)
            SELECT trial_id, kind, MAX(duration) FROM events WHERE duration IS NOT NULL
            GROUP BY trial_id, kind""",
    ),
    # 4: projects (every run belongs to one; run names are unique within it; 'default' for
    #    what came before), the OS user and host that made a run, and access tokens (stored
    #    as SHA-256 digests, each for one project, read or write)
    {
        "sqlite": (
            _PROJECTS := """CREATE TABLE projects (
                id {id}, name TEXT NOT NULL UNIQUE, t_created {real} NOT NULL)""",
            _DEFAULT := "INSERT INTO projects (name, t_created) VALUES ('default', 0)",
            """CREATE TABLE runs_v4 (
                id {id}, project_id INTEGER NOT NULL REFERENCES projects(id),
                name TEXT NOT NULL, t_start {real} NOT NULL, os_user TEXT, host TEXT,
                UNIQUE (project_id, name))""",
            """INSERT INTO runs_v4 (id, project_id, name, t_start)
                SELECT id, (SELECT id FROM projects WHERE name = 'default'), name, t_start
                FROM runs""",
            "DROP TABLE runs",
            "ALTER TABLE runs_v4 RENAME TO runs",
            _TOKENS := """CREATE TABLE tokens (
                id {id}, project_id INTEGER NOT NULL REFERENCES projects(id),
                name TEXT NOT NULL, scope TEXT NOT NULL, digest TEXT NOT NULL UNIQUE,
                t_created {real} NOT NULL, t_expires {real}, t_revoked {real}, t_used {real},
                UNIQUE (project_id, name))""",
        ),
        "postgresql": (
            _PROJECTS,
            _DEFAULT,
            "ALTER TABLE runs ADD COLUMN project_id BIGINT REFERENCES projects(id)",
            "UPDATE runs SET project_id = (SELECT id FROM projects WHERE name = 'default')",
            "ALTER TABLE runs ALTER COLUMN project_id SET NOT NULL",
            "ALTER TABLE runs ADD COLUMN os_user TEXT",
            "ALTER TABLE runs ADD COLUMN host TEXT",
            "ALTER TABLE runs DROP CONSTRAINT runs_name_key",
            "ALTER TABLE runs ADD CONSTRAINT runs_project_name UNIQUE (project_id, name)",
            _TOKENS,
        ),
    },
    # 5: a series belongs to the host that measured it, so every node of a multi-node trial
    #    has its own (existing series get their trial's host); where a trial ran, per host
    #    (what its writers there sent: GPUs, scheduler and container ids, as JSON)
    {
        "sqlite": (
            """CREATE TABLE series_v5 (
                id {id}, trial_id INTEGER NOT NULL REFERENCES trials(id), metric TEXT NOT NULL,
                host TEXT NOT NULL, device TEXT NOT NULL, note TEXT,
                UNIQUE (trial_id, metric, host, device))""",
            """INSERT INTO series_v5 (id, trial_id, metric, host, device, note)
                SELECT s.id, s.trial_id, s.metric, t.host, s.device, s.note
                FROM series s JOIN trials t ON t.id = s.trial_id""",
            "DROP TABLE series",
            "ALTER TABLE series_v5 RENAME TO series",
            _HOSTS := """CREATE TABLE trial_hosts (
                trial_id INTEGER NOT NULL REFERENCES trials(id), host TEXT NOT NULL,
                info TEXT NOT NULL, UNIQUE (trial_id, host))""",
        ),
        "postgresql": (
            "ALTER TABLE series ADD COLUMN host TEXT",
            "UPDATE series SET host = (SELECT t.host FROM trials t WHERE t.id = series.trial_id)",
            "ALTER TABLE series ALTER COLUMN host SET NOT NULL",
            "ALTER TABLE series DROP CONSTRAINT series_trial_id_metric_device_key",
            "ALTER TABLE series ADD CONSTRAINT series_trial_metric_host_device "
            "UNIQUE (trial_id, metric, host, device)",
            _HOSTS,
        ),
    },
    # 6: events by kind, so a window of one kind (a chart's sampler gaps, its evaluations)
    #    reads only that kind's rows, not every optimizer step of the window around them
    ("CREATE INDEX events_by_kind ON events (trial_id, kind, t)",),
    # 7: batch ids scoped by project (two projects may use the same id; before, the second
    #    was dropped as written), each with the SHA-256 of its content, so an id sent again
    #    with other content is refused as a conflict, not dropped (older batches: NULL, any
    #    content of theirs is taken as a resend)
    (
        """CREATE TABLE batches_v7 (
            project_id BIGINT NOT NULL REFERENCES projects(id), id TEXT NOT NULL,
            trial_id BIGINT NOT NULL REFERENCES trials(id), digest TEXT,
            t {real} NOT NULL, PRIMARY KEY (project_id, id))""",
        """INSERT INTO batches_v7 (project_id, id, trial_id, digest, t)
            SELECT r.project_id, b.id, b.trial_id, NULL, b.t
            FROM batches b JOIN trials t ON t.id = b.trial_id JOIN runs r ON r.id = t.run_id""",
        "DROP TABLE batches",
        "ALTER TABLE batches_v7 RENAME TO batches",
    ),
    # 8 (issue 18, rule 5: lost on the store's clock): the store's own time when a trial's
    #    last heartbeat landed, so that `lost` never compares a writer's clock with a
    #    reader's (NULL: judge by the heartbeat, as a direct update_trial names it)
    ("ALTER TABLE trials ADD COLUMN t_seen {real}",),
    # 9 (issue 20, a store bounded for years): every series' samples rolled up per minute and
    #    per hour (level 60, 3600: count, min, max, sum, the first and last sample's time and
    #    the last value) as they are packed into chunks, so windows over months read a few
    #    thousand rows and raw chunks can be dropped; ``rolled`` 0 for a series whose chunks
    #    predate the rollups (``compact --keep-raw`` rolls them up first), ``raw_from`` the
    #    time before which its raw chunks were dropped (NULL: none were); the findings of a
    #    trial as computed before its raw samples were dropped (JSON), kept to be answered
    #    after
    {
        # SQLite: one B-tree by its key, not a rowid table beside an index of it
        dialect: (
            """CREATE TABLE rollups (
            series_id BIGINT NOT NULL REFERENCES series(id), level INTEGER NOT NULL,
            t BIGINT NOT NULL, n BIGINT NOT NULL, vmin {real} NOT NULL, vmax {real} NOT NULL,
            vsum {real} NOT NULL, t_first {real} NOT NULL, t_last {real} NOT NULL,
            vlast {real} NOT NULL, PRIMARY KEY (series_id, level, t))"""
            + (" WITHOUT ROWID" if dialect == "sqlite" else ""),
            "ALTER TABLE series ADD COLUMN rolled INTEGER NOT NULL DEFAULT 1",
            "UPDATE series SET rolled = 0 WHERE id IN (SELECT DISTINCT series_id FROM chunks)",
            "ALTER TABLE series ADD COLUMN raw_from {real}",
            """CREATE TABLE kept_findings (
            trial_id BIGINT PRIMARY KEY REFERENCES trials(id), t {real} NOT NULL,
            data TEXT NOT NULL)""",
        )
        for dialect in ("sqlite", "postgresql")
    },
    # 10 (issue 20, usage over a year in seconds): each trial's data generation, raised by
    #    every write of what its usage is read from, and the usage of ended trials as computed
    #    once (JSON, under a digest of what the figures depend on), answered while the trial
    #    is at the generation it was computed at (see store/sql/_kept_usage.py)
    (
        "ALTER TABLE trials ADD COLUMN data_gen BIGINT NOT NULL DEFAULT 0",
        """CREATE TABLE kept_usage (
            trial_id BIGINT PRIMARY KEY REFERENCES trials(id), digest TEXT NOT NULL,
            data_gen BIGINT NOT NULL, t {real} NOT NULL, data TEXT NOT NULL)""",
    ),
    # 11: the integers a batch brings (an event's or scalar's step, the exit code) hold what
    #    the checks take, -2**63..2**63-1, on PostgreSQL too, whose INTEGER is 32 bits: a step
    #    past 2**31 refused the whole batch there, its samples with it (SQLite's INTEGER is
    #    64 bits already)
    {
        "sqlite": (),
        "postgresql": (
            "ALTER TABLE events ALTER COLUMN step TYPE BIGINT",
            "ALTER TABLE scalars ALTER COLUMN step TYPE BIGINT",
            "ALTER TABLE trials ALTER COLUMN exit_code TYPE BIGINT",
        ),
    },
    # 12 (issue 23, servers as replicas on one store): failed token attempts, one row each
    #    (the client and token they are counted under, see server/_auth.py, and when), so
    #    that every `tunescope serve` on the store counts the same attempts and the rate
    #    limit holds for the fleet, not per server; rows older than the limit's window are
    #    deleted as new ones come (see store/sql/_tokens.py)
    (
        "CREATE TABLE token_failures (key TEXT NOT NULL, t {real} NOT NULL)",
        "CREATE INDEX token_failures_by_key ON token_failures (key, t)",
        "CREATE INDEX token_failures_by_time ON token_failures (t)",
    ),
)

assert len(MIGRATIONS) == SCHEMA_VERSION
