"""The DDL of the bulk tables, written once for one server (MergeTree) and for a cluster
(``?cluster=NAME``: ReplicatedMergeTree on every replica of every shard, and Distributed tables
over them). Queries name the same four tables either way: ``samples``, ``minutes``, ``events``
and ``scalars``, which on a cluster are the Distributed tables over ``*_local``.

``samples`` (series_id, t, value): t in integer milliseconds since the epoch (``Int64``: the
store's whole range of times, where ``DateTime64(3)`` ends in 2299; the ``time`` column shows
it as a date), value the store's float32. Ordered by (series_id, t), partitioned by day. Codecs
as measured on the 1 Hz mixes of ``make bench`` (bytes a sample of the column):

* series_id: ``Delta, ZSTD(1)``: 0.01 (one value for thousands of rows in this order);
  ``LowCardinality(UInt64)`` is refused by default as a type that gains nothing;
* t: ``Delta, ZSTD(1)``: 0.50 on times with a sampler's millisecond jitter, where
  ``DoubleDelta, ZSTD(1)`` takes 0.89 (the difference of two jitters is wider than one);
* value: ``Gorilla, ZSTD(1)``: best of Gorilla, FPC, Delta and ZSTD alone over the mix as a
  whole (1.41 against 1.43 to 1.45; noisy floats cost about 3 bytes whichever).

``minutes``: per series and minute, the count, min, max and sum of its samples, the times of
its first and last one and its last value, kept by a materialized view from every insert into
``samples`` in the same insert (so rollups never lag, and a deduplicated insert adds to
neither). Its columns are ``SimpleAggregateFunction``s of an AggregatingMergeTree: parts merge
by min, max and sum, so min and max stay exact whatever the order of inserts, and a read sums
rows of one minute not merged yet (``GROUP BY minute``). The last value (``vlast``, what
``latest`` answers, also once the raw samples are dropped) is an ``argMax(value, t)`` state,
merged with ``argMaxMerge``: the value of the newest sample whatever the order in which inserts
arrived and parts merged (``anyLast`` would keep the last *inserted*, wrong for a spool
replayed late). Merging a state with itself changes nothing, so :func:`migrate_last_value`
adds it to a database made before it by rolling every raw sample up again into that column
alone (the other columns' neutral values).

The view has no GROUP BY: it turns each sample into a row of one sample (its ``vlast`` a state
of that one sample, ``initializeAggregation``), and the table merges the rows of equal (series,
minute) as it writes the insert's part (``optimize_on_insert``, on by default; were it off, the
rows would merge later, and reads are exact either way). Samples come sorted by (series, time)
as writers send them, so that merge is one pass over sorted rows, where a GROUP BY hashed every
row and its output was sorted again: with one sample of each series an insert (100,000 series a
second), ingest went about 2.4 times as fast (docs/scale.md). A database made with the GROUP BY
view keeps it (``IF NOT EXISTS``): it stays exact, only slower.

Every table deduplicates inserts by ``insert_deduplication_token``: for MergeTree only with
``non_replicated_deduplication_window`` set (it is 0 by default), for ReplicatedMergeTree with
``replicated_deduplication_window``. Both keep the last :data:`DEDUP_WINDOW` insert blocks.

On a cluster, rows go to a shard by series (samples, minutes) or by trial (events, scalars):
a window or a trial's events are read from one shard. Inserts into a Distributed table are
made synchronous (``insert_distributed_sync``, see ``_bulk.py``), so a retried insert reaches
the same shards with the same token and is deduplicated there.
"""

from __future__ import annotations

__all__ = ["DEDUP_WINDOW", "TABLES", "migrate_last_value", "schema"]

DEDUP_WINDOW = 10_000
"""Insert blocks each table remembers the token (or the hash) of."""

TABLES = ("samples", "minutes", "events", "scalars")
"""The tables queries name (on a cluster, the Distributed ones)."""

_COLUMNS = {
    "samples": """
    series_id UInt64 CODEC(Delta, ZSTD(1)),
    t Int64 CODEC(Delta, ZSTD(1)),
    value Float32 CODEC(Gorilla, ZSTD(1)),
    time DateTime64(3, 'UTC') ALIAS fromUnixTimestamp64Milli(t)""",
    "minutes": """
    series_id UInt64 CODEC(Delta, ZSTD(1)),
    minute Int64 CODEC(Delta, ZSTD(1)),
    n SimpleAggregateFunction(sum, UInt64) CODEC(ZSTD(1)),
    vmin SimpleAggregateFunction(min, Float32) CODEC(Gorilla, ZSTD(1)),
    vmax SimpleAggregateFunction(max, Float32) CODEC(Gorilla, ZSTD(1)),
    vsum SimpleAggregateFunction(sum, Float64) CODEC(Gorilla, ZSTD(1)),
    t_first SimpleAggregateFunction(min, Int64) CODEC(Delta, ZSTD(1)),
    t_last SimpleAggregateFunction(max, Int64) CODEC(Delta, ZSTD(1)),
    vlast AggregateFunction(argMax, Float32, Int64) CODEC(ZSTD(1))""",
    "events": """
    trial_id UInt64,
    t Float64,
    seq UInt64,
    kind LowCardinality(String),
    name Nullable(String),
    step Nullable(Int64),
    duration Nullable(Float64),
    value Nullable(Float64),
    data Nullable(String) CODEC(ZSTD(1))""",
    "scalars": """
    trial_id UInt64,
    name LowCardinality(String),
    seq UInt64,
    step Nullable(Int64),
    t Float64,
    value Float64""",
}

_LAYOUT = {
    "samples": ("MergeTree", "intDiv(t, 86400000)", "(series_id, t)"),
    "minutes": ("AggregatingMergeTree", "intDiv(minute, 43200)", "(series_id, minute)"),
    "events": ("MergeTree", "intDiv(toInt64(t), 2592000)", "(trial_id, t, seq)"),
    "scalars": ("MergeTree", "intDiv(toInt64(t), 2592000)", "(trial_id, name, seq)"),
}
"""Engine, partition (samples by day, minutes by 30 days of minutes, events and scalars by 30
days) and order of each table."""

_SHARD_BY = {
    "samples": "series_id",
    "minutes": "series_id",
    "events": "trial_id",
    "scalars": "trial_id",
}

_ROLLUP = """SELECT series_id, toInt64(floor(t / 60000)) AS minute, toUInt64(1) AS n,
    value AS vmin, value AS vmax, toFloat64(value) AS vsum, t AS t_first, t AS t_last,
    initializeAggregation('argMaxState', value, t) AS vlast
FROM {db}.{source}"""
"""What the view adds to ``minutes`` for each block inserted into ``samples``: a row of one
sample for each sample, which the table's own merge of equal keys sums (no GROUP BY: see the
module's doc)."""


def schema(database: str, cluster: str | None = None) -> list[str]:
    """The statements that create the database and its tables where they are missing (each
    ``IF NOT EXISTS``: running them again changes nothing). ``cluster``: on every node of
    that cluster (``ON CLUSTER``), replicated, with Distributed tables under the names
    queries use."""
    on = f" ON CLUSTER {cluster}" if cluster else ""
    out = [f"CREATE DATABASE IF NOT EXISTS {database}{on}"]
    for table in TABLES:
        engine, partition, order = _LAYOUT[table]
        local = f"{table}_local" if cluster else table
        if cluster:
            path = f"'/clickhouse/tables/{{shard}}/{database}/{local}', '{{replica}}'"
            engine = f"Replicated{engine}({path})"
            window = f"replicated_deduplication_window = {DEDUP_WINDOW}"
        else:
            window = f"non_replicated_deduplication_window = {DEDUP_WINDOW}"
        out.append(
            f"CREATE TABLE IF NOT EXISTS {database}.{local}{on} ({_COLUMNS[table]}\n)"
            f"\nENGINE = {engine}\nPARTITION BY {partition}\nORDER BY {order}"
            f"\nSETTINGS {window}"
        )
    source, target = ("samples_local", "minutes_local") if cluster else ("samples", "minutes")
    out.append(
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.minutes_view{on}"
        f" TO {database}.{target} AS\n" + _ROLLUP.format(db=database, source=source)
    )
    if cluster:
        for table in TABLES:
            out.append(
                f"CREATE TABLE IF NOT EXISTS {database}.{table}{on}"
                f" AS {database}.{table}_local\n"
                f"ENGINE = Distributed({cluster}, {database}, {table}_local, {_SHARD_BY[table]})"
            )
    return out


_BACKFILL = """INSERT INTO {db}.{target}
    (series_id, minute, n, vmin, vmax, vsum, t_first, t_last, vlast)
SELECT series_id, toInt64(floor(t / 60000)) AS minute, toUInt64(0), toFloat32(inf),
    toFloat32(-inf), toFloat64(0), toInt64(9223372036854775807),
    toInt64(-9223372036854775808), argMaxState(value, t)
FROM {db}.{source}
GROUP BY series_id, minute{settings}"""
"""The last value of every minute that has raw samples, added as rows that change nothing
else: a count and sum of 0, a min of +inf, a max of -inf, first and last times outside any."""


def migrate_last_value(database: str, cluster: str | None = None) -> list[str]:
    """The statements that add the minute rollups' last value (``vlast``) to a database made
    before it: the column (on a cluster, to the local tables and to the Distributed one), the
    view's query rolling it up from then on, then every raw sample's minute rolled up into it
    alone. A sample inserted meanwhile is rolled up by the view, by the last statement or by
    both: an ``argMax`` state merged with itself is unchanged. Minutes whose raw samples were
    dropped before keep no last value (none is dropped before this migration: raw retention
    came with it)."""
    on = f" ON CLUSTER {cluster}" if cluster else ""
    column = "vlast AggregateFunction(argMax, Float32, Int64) CODEC(ZSTD(1))"
    tables = ["minutes_local", "minutes"] if cluster else ["minutes"]
    out = [f"ALTER TABLE {database}.{t}{on} ADD COLUMN IF NOT EXISTS {column}" for t in tables]
    source = "samples_local" if cluster else "samples"
    out.append(
        f"ALTER TABLE {database}.minutes_view{on} MODIFY QUERY "
        + _ROLLUP.format(db=database, source=source)
    )
    # through the Distributed tables on a cluster: both shard by series, so each shard's
    # raw samples roll up into its own minutes
    out.append(
        _BACKFILL.format(
            db=database,
            target="minutes",
            source="samples",
            settings="\nSETTINGS insert_distributed_sync = 1" if cluster else "",
        )
    )
    return out
