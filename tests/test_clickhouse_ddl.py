"""The bulk tables' DDL, written once: on one server it runs (on the embedded engine) and
running it again changes nothing; on a cluster (``?cluster=NAME``) it is replicated tables on
every node with Distributed tables over them, which cannot run without a cluster: its text is
checked, and ClickHouse's own parser reads every statement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clickhouse_helpers import chdb_engine, fresh_bulk
from tunescope.store.clickhouse import DEDUP_WINDOW, TABLES, migrate_last_value, schema

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)


def test_schema_runs_twice_and_keeps_its_codecs() -> None:
    with fresh_bulk("embedded") as bulk:
        db = bulk.transport.database
        for stmt in schema(db):  # again: every statement is IF NOT EXISTS
            bulk.transport.command(stmt)
        rows = bulk.transport.query(
            "SELECT table, name, compression_codec FROM system.columns "
            "WHERE database = {db:String} AND table = 'samples' ORDER BY position",
            {"db": db},
        )
        assert [(r[1], r[2]) for r in rows] == [
            ("series_id", "CODEC(Delta(8), ZSTD(1))"),
            ("t", "CODEC(Delta(8), ZSTD(1))"),
            ("value", "CODEC(Gorilla(4), ZSTD(1))"),
            ("time", ""),  # an alias: no bytes of its own
        ]
        tables = bulk.transport.query(
            "SELECT name, engine, partition_key, sorting_key, create_table_query "
            "FROM system.tables WHERE database = {db:String} ORDER BY name",
            {"db": db},
        )
        by_name = {r[0]: r for r in tables}
        assert set(by_name) == {*TABLES, "minutes_view"}
        assert by_name["samples"][1:4] == ("MergeTree", "intDiv(t, 86400000)", "series_id, t")
        assert by_name["minutes"][1] == "AggregatingMergeTree"
        assert by_name["minutes_view"][1] == "MaterializedView"
        for table in TABLES:
            assert f"non_replicated_deduplication_window = {DEDUP_WINDOW}" in by_name[table][4]


def test_cluster_schema_is_replicated_and_distributed() -> None:
    stmts = schema("metrics", "main")
    assert all(" ON CLUSTER main" in s for s in stmts)
    assert stmts[0] == "CREATE DATABASE IF NOT EXISTS metrics ON CLUSTER main"
    for table, engine, key in [
        ("samples", "ReplicatedMergeTree", "series_id"),
        ("minutes", "ReplicatedAggregatingMergeTree", "series_id"),
        ("events", "ReplicatedMergeTree", "trial_id"),
        ("scalars", "ReplicatedMergeTree", "trial_id"),
    ]:
        (local,) = [s for s in stmts if f"metrics.{table}_local ON CLUSTER" in s]
        assert (
            f"ENGINE = {engine}('/clickhouse/tables/{{shard}}/metrics/{table}_local', "
            "'{replica}')" in local
        )
        assert f"replicated_deduplication_window = {DEDUP_WINDOW}" in local
        assert "non_replicated" not in local
        (dist,) = [s for s in stmts if f"metrics.{table} ON CLUSTER" in s]
        assert dist.endswith(f"ENGINE = Distributed(main, metrics, {table}_local, {key})")
    (view,) = [s for s in stmts if "MATERIALIZED VIEW" in s]
    assert "TO metrics.minutes_local" in view and "FROM metrics.samples_local" in view
    # the local tables exist before what is built over them
    order = [re.search(r"metrics\.(\w+)", s).group(1) for s in stmts[1:]]  # type: ignore[union-attr]
    assert order.index("minutes_view") > order.index("samples_local")
    assert order.index("samples") > order.index("samples_local")


@pytest.mark.parametrize("cluster", [None, "main"])
def test_clickhouse_parses_every_statement(cluster: str | None) -> None:
    with fresh_bulk("embedded") as bulk:
        for stmt in schema("metrics", cluster):
            (row,) = bulk.transport.query("SELECT formatQuery({q:String})", {"q": stmt})
            assert row[0].startswith("CREATE")


def test_one_server_and_a_cluster_differ_only_in_placement() -> None:
    """The same columns, codecs, partitions, orders and view on both."""
    local = schema("metrics")
    strip = [
        re.sub(r"Replicated(\w+)\('[^)]*\)", r"\1", s)
        .replace(" ON CLUSTER main", "")
        .replace("_local", "")
        .replace("replicated_deduplication_window", "non_replicated_deduplication_window")
        for s in schema("metrics", "main")
        if "Distributed(" not in s
    ]
    assert strip == local


@pytest.mark.parametrize("cluster", [None, "main"])
def test_the_last_values_migration_parses_and_reaches_every_node(cluster: str | None) -> None:
    """What adds the minute rollups' last value to a database made before it: on a cluster,
    to the local tables and the Distributed one on every node (it runs on one server in
    ``tests/test_clickhouse_retention.py``)."""
    stmts = migrate_last_value("metrics", cluster)
    with fresh_bulk("embedded") as bulk:
        for stmt in stmts:
            (row,) = bulk.transport.query("SELECT formatQuery({q:String})", {"q": stmt})
            assert row[0].startswith(("ALTER", "INSERT"))
    if cluster:
        assert all(" ON CLUSTER main" in s for s in stmts[:-1])
        assert {s.split()[2] for s in stmts[:2]} == {"metrics.minutes_local", "metrics.minutes"}
        assert "FROM metrics.samples_local" in stmts[2]
        assert "insert_distributed_sync = 1" in stmts[-1]


def test_docs_give_the_cluster_ddl_the_store_writes() -> None:
    """docs/scale.md shows the statements for a cluster; they must be the ones made here."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "scale.md").read_text()
    shown = doc.split("```sql\n", 1)[1].split("\n```", 1)[0]
    assert shown == "\n\n".join(s + ";" for s in schema("tunescope", "fleet"))
