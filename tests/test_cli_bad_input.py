"""Bad input to the CLI (README, "Commands"): exactly one line on stderr starting
``tunescope: error: ``, exit code 2, nothing on stdout, and nothing written: the working
directory (which holds the stores given) stays byte for byte as it was, no store is created,
no run or trial is added, no output file appears. Click's own usage errors included.

Each case runs the real ``tunescope`` as a subprocess in ``tmp_path``, which holds a good
store (``{db}``, run ``r`` with trial ``t``), a corrupt one (``{corrupt}``), one from a newer
tunescope (``{newer}``), an empty folder (``{dir}``) and names a store that does not exist
(``{none}``)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import cli, one_line_error
from conftest import PG_URL
from tunescope.store import open_store
from tunescope.store.sql._schema import SCHEMA_VERSION

# (id, args, a telling part of the one error line); the id's first word is the category
CASES: list[tuple[str, list[str], str]] = [
    # Click's own usage errors, on one line
    ("usage-unknown-command", ["nope"], "no such command 'nope'"),
    ("usage-unknown-global-option", ["--bogus"], "no such option: --bogus"),
    ("usage-no-command", [], "missing command"),
    ("usage-unknown-option", ["runs", "--bogus"], "no such option: --bogus"),
    (
        "usage-unknown-option-before-cmd",
        ["run", "--bogus", "--", "true"],
        "no such option: --bogus",
    ),
    ("usage-missing-argument-trials", ["trials"], "missing argument 'RUN'"),
    ("usage-missing-argument-export", ["export", "--store", "{db}"], "missing argument 'RUN'"),
    ("usage-missing-argument-report", ["report"], "missing argument 'RUN'"),
    ("usage-extra-argument", ["metrics", "extra"], "unexpected extra argument"),
    ("usage-option-without-value", ["runs", "--store"], "'--store' requires an argument"),
    (
        "usage-duplicate-store",
        ["runs", "--store", "{db}", "--store", "{db}"],
        "--store given twice",
    ),
    (
        "usage-duplicate-format",
        ["export", "r", "--format", "csv", "--format", "json", "--store", "{db}"],
        "--format given twice",
    ),
    (
        "usage-duplicate-interval",
        ["run", "--interval", "1", "--interval", "2", "--", "true"],
        "--interval given twice",
    ),
    ("usage-duplicate-flag", ["demo", "--serve", "--no-serve"], "given twice"),
    # wrong types
    ("type-interval", ["run", "--interval", "abc", "--", "true"], "invalid value for '--interval'"),
    ("type-port-ui", ["ui", "--port", "x", "--store", "{db}"], "invalid value for '--port'"),
    ("type-port-demo", ["demo", "--port", "1.5"], "invalid value for '--port'"),
    ("type-seconds", ["demo", "--seconds", "abc"], "invalid value for '--seconds'"),
    ("type-timeout", ["sync", "--timeout", "abc"], "invalid value for '--timeout'"),
    # numbers out of range
    (
        "range-port-high",
        ["ui", "--port", "70000", "--store", "{db}"],
        "'--port': 70000 is out of range",
    ),
    ("range-port-zero", ["ui", "--port", "0", "--store", "{db}"], "'--port': 0 is out of range"),
    (
        "range-port-negative",
        ["ui", "--port", "-1", "--store", "{db}"],
        "'--port': -1 is out of range",
    ),
    (
        "range-port-huge",
        ["ui", "--port", "9" * 25, "--store", "{db}"],
        "is out of range: use 1 to 65535",
    ),
    ("range-port-demo", ["demo", "--port", "65536", "--store", "d.db"], "65536 is out of range"),
    ("range-seconds-negative", ["demo", "--seconds", "-1", "--store", "d.db"], "--seconds -1 "),
    ("range-seconds-zero", ["demo", "--seconds", "0", "--store", "d.db"], "--seconds 0 "),
    ("range-seconds-nan", ["demo", "--seconds", "nan", "--store", "d.db"], "--seconds nan "),
    ("range-seconds-inf", ["demo", "--seconds", "inf", "--store", "d.db"], "--seconds inf "),
    ("range-interval-nan", ["run", "--interval", "nan", "--", "true"], "--interval nan is out"),
    ("range-interval-inf", ["run", "--interval", "inf", "--", "true"], "--interval inf is out"),
    ("range-interval-zero", ["run", "--interval", "0", "--", "true"], "is out of range"),
    ("range-interval-negative", ["run", "--interval", "-1", "--", "true"], "is out of range"),
    ("range-interval-huge", ["run", "--interval", "1e400", "--", "true"], "is out of range"),
    ("range-interval-high", ["run", "--interval", "3601", "--", "true"], "is out of range"),
    ("range-timeout-zero", ["sync", "--timeout", "0"], "--timeout 0"),
    ("range-timeout-negative", ["sync", "--timeout", "-5"], "--timeout -5"),
    ("range-timeout-nan", ["sync", "--timeout", "nan"], "--timeout nan"),
    ("range-timeout-inf", ["sync", "--timeout", "inf"], "--timeout inf"),
    # compact: durations, and a store that holds no data of its own
    ("usage-compact-no-keep", ["compact", "--store", "{db}"], "missing option '--keep-raw'"),
    *(
        (f"range-compact-{i}", ["compact", "--keep-raw", d, "--store", "{db}"], "not a duration")
        for i, d in enumerate(("30", "30x", "d", "-5d", "0d", "0.0h", "1e3d", "", " 5 d"))
    ),
    (
        "range-compact-dry",
        ["compact", "--keep-raw", "nan", "--dry-run", "--store", "{db}"],
        "'nan' is not a duration",
    ),
    (
        "store-compact-server",
        ["compact", "--keep-raw", "30d", "--store", "http://127.0.0.1:9/p"],
        "not the URL of a tunescope server",
    ),
    ("store-compact-none", ["compact", "--keep-raw", "30d", "--store", "{none}"], "none.db"),
    # ids and names
    ("id-huge-trials", ["trials", "9" * 23, "--store", "{db}"], f"no run {'9' * 23} "),
    ("id-huge-export", ["export", "1" + "0" * 30, "--store", "{db}"], "no run 1000000000"),
    ("id-huge-report", ["report", "1" + "0" * 30, "--store", "{db}"], "no run 1000000000"),
    ("id-negative", ["trials", "-1", "--store", "{db}"], "-1"),
    ("id-superscript-digit", ["trials", "\u00b2", "--store", "{db}"], "no run '\u00b2'"),
    ("id-empty", ["trials", "", "--store", "{db}"], "no run ''"),
    ("id-newline", ["trials", "a\nb", "--store", "{db}"], "no run 'a\\nb'"),
    ("id-huge-name", ["trials", "x" * 10_000, "--store", "{db}"], "no run 'xxxxxxxx"),
    (
        "id-no-trial-export",
        ["export", "r", "--trial", "nope", "--store", "{db}"],
        "no trial 'nope'",
    ),
    (
        "id-no-trial-report",
        ["report", "r", "--trial", "nope", "--store", "{db}"],
        "no trial 'nope'",
    ),
    ("id-empty-run-name", ["run", "--run", "", "--", "true"], "'--run': must not be empty"),
    ("id-blank-run-name", ["run", "--run", "  ", "--", "true"], "'--run': must not be empty"),
    ("id-empty-trial-name", ["run", "--trial", "", "--", "true"], "'--trial': must not be empty"),
    (
        "id-trial-taken",
        ["run", "--store", "{db}", "--run", "r", "--trial", "t", "--", "true"],
        "already has a trial named 't'",
    ),
    # unknown enum values
    ("enum-export-format", ["export", "r", "--format", "xml", "--store", "{db}"], "--format 'xml'"),
    ("enum-export-what", ["export", "r", "--what", "x", "--store", "{db}"], "--what 'x'"),
    ("enum-export-metric", ["export", "r", "--metric", "nope", "--store", "{db}"], "'nope'"),
    ("enum-report-format", ["report", "r", "--format", "xml", "--store", "{db}"], "--format 'xml'"),
    ("enum-report-md-no-out", ["report", "r", "--format", "md", "--store", "{db}"], "needs --out"),
    ("enum-report-md-stdout", ["report", "r", "--format", "md", "--out", "-"], "needs --out"),
    ("enum-report-fail-on", ["report", "r", "--fail-on", "medium"], "--fail-on 'medium'"),
    ("enum-usage-by", ["usage", "--by", "team", "--store", "{db}"], "unknown grouping 'team'"),
    ("enum-usage-by-twice", ["usage", "--by", "day", "--by", "day"], "given twice: day, day"),
    ("enum-usage-format", ["usage", "--format", "xml", "--store", "{db}"], "--format 'xml'"),
    ("value-usage-since", ["usage", "--since", "yesterday", "--store", "{db}"], "--since"),
    ("value-usage-since-unit", ["usage", "--since", "30y", "--store", "{db}"], "bad --since"),
    ("value-usage-until", ["usage", "--until", "2026-13-01", "--store", "{db}"], "--until"),
    (
        "value-usage-until-before-since",
        ["usage", "--since", "2026-02-01", "--until", "2026-01-01", "--store", "{db}"],
        "is not after --since",
    ),
    (
        "value-usage-price-negative",
        ["usage", "--price", "h100-80gb=-1", "--store", "{db}"],
        "must be a number >= 0",
    ),
    ("value-usage-price-malformed", ["usage", "--price", "h100", "--store", "{db}"], "--price"),
    (
        "value-usage-price-unknown",
        ["usage", "--price", "tpu-v5=1", "--store", "{db}"],
        "names no GPU model",
    ),
    ("missing-store-usage", ["usage", "--store", "{none}"], "no store at"),
    ("enum-runs-format", ["runs", "--format", "yaml", "--store", "{db}"], "--format 'yaml'"),
    ("enum-trials-format", ["trials", "r", "--format", "xml", "--store", "{db}"], "'xml'"),
    # --param
    ("param-no-equals", ["run", "--param", "lr", "--", "true"], "malformed --param 'lr'"),
    ("param-empty-key", ["run", "--param", "=3", "--", "true"], "malformed --param '=3'"),
    ("param-blank-key", ["run", "--param", " =3", "--", "true"], "malformed --param ' =3'"),
    (
        "param-duplicate-key",
        ["run", "--param", "a=1", "--param", "a=2", "--", "true"],
        "--param 'a' given twice",
    ),
    ("param-nan", ["run", "--param", "lr=NaN", "--", "true"], "not a finite number"),
    ("param-infinity", ["run", "--param", "lr=Infinity", "--", "true"], "not a finite number"),
    ("param-minus-infinity", ["run", "--param", "lr=-Infinity", "--", "true"], "not a finite"),
    ("param-nan-in-list", ["run", "--param", "lr=[1, NaN]", "--", "true"], "not a finite number"),
    ("param-overflow", ["run", "--param", "lr=1e999", "--", "true"], "not a finite number"),
    ("param-deep", ["run", "--param", "x=" + "[" * 40 + "]" * 40, "--", "true"], "levels deep"),
    ("param-deeper", ["run", "--param", "x=" + "[" * 100_000, "--", "true"], "levels deep"),
    # store URLs
    ("url-unknown-scheme", ["runs", "--store", "mysql://db"], "unknown store URL 'mysql://db'"),
    ("url-unknown-scheme-run", ["run", "--store", "mysql://db", "--", "true"], "unknown store URL"),
    ("url-unknown-scheme-sync", ["sync", "--store", "mysql://db"], "unknown store URL"),
    ("url-unknown-scheme-demo", ["demo", "--store", "mysql://db"], "unknown store URL"),
    ("url-empty", ["runs", "--store", ""], "'--store': must not be empty"),
    ("url-empty-run", ["run", "--store", "", "--", "true"], "'--store': must not be empty"),
    ("url-empty-demo", ["demo", "--store", ""], "'--store': must not be empty"),
    ("url-sqlite-no-file", ["runs", "--store", "sqlite://"], "names no file"),
    ("url-directory", ["runs", "--store", "{dir}"], "is not a file"),
    ("url-directory-run", ["run", "--store", "{dir}", "--", "true"], "is not a file"),
    ("url-directory-demo", ["demo", "--store", "{dir}", "--no-serve"], "is not a file"),
    ("url-missing-folder", ["runs", "--store", "missing/x.db"], "no store at"),
    ("url-missing-folder-run", ["run", "--store", "missing/x.db", "--", "true"], "does not exist"),
    ("url-proc", ["runs", "--store", "/proc/nope/x.db"], "no store at /proc/nope/x.db"),
    ("url-proc-run", ["run", "--store", "/proc/nope/x.db", "--", "true"], "does not exist"),
    ("url-corrupt", ["runs", "--store", "{corrupt}"], "not a tunescope database or is corrupt"),
    ("url-corrupt-run", ["run", "--store", "{corrupt}", "--", "true"], "is corrupt"),
    ("url-corrupt-report", ["report", "r", "--store", "{corrupt}"], "is corrupt"),
    ("url-corrupt-demo", ["demo", "--store", "{corrupt}", "--no-serve"], "is corrupt"),
    ("url-newer", ["runs", "--store", "{newer}"], "newer than this tunescope understands"),
    ("url-newer-run", ["run", "--store", "{newer}", "--", "true"], "newer than this tunescope"),
    ("url-pg-empty", ["runs", "--store", "postgresql://"], "names no server or database"),
    ("url-pg-empty-run", ["run", "--store", "postgresql://", "--", "true"], "names no server"),
    ("url-pg-bad-port", ["runs", "--store", "postgresql://h:notaport/db"], "port 'notaport'"),
    (
        "url-pg-bad-port-run",
        ["run", "--store", "postgresql://h:notaport/db", "--", "true"],
        "port 'notaport'",
    ),
    ("url-pg-port-range", ["runs", "--store", "postgresql://h:70000/db"], "port '70000'"),
    # read commands on a store that does not exist create none
    ("missing-store-runs", ["runs", "--store", "{none}"], "no store at"),
    ("missing-store-default", ["runs"], "no store at"),
    ("missing-store-trials", ["trials", "r", "--store", "{none}"], "no store at"),
    ("missing-store-export", ["export", "r", "--store", "{none}", "--out", "x.csv"], "no store at"),
    ("missing-store-report", ["report", "r", "--store", "{none}"], "no store at"),
    ("missing-store-ui", ["ui", "--store", "{none}", "--port", "1"], "no store at"),
    ("missing-store-serve", ["serve", "--store", "{none}", "--port", "1"], "no store at"),
    # --out
    ("out-missing-folder", ["export", "r", "--out", "nodir/x.csv", "--store", "{db}"], "nodir"),
    ("out-directory", ["export", "r", "--out", "{dir}", "--store", "{db}"], "is a directory"),
    ("out-empty", ["export", "r", "--out", "", "--store", "{db}"], "'--out': must not be empty"),
    ("out-onto-store", ["export", "r", "--out", "{db}", "--store", "{db}"], "is the store"),
    ("out-missing-folder-report", ["report", "r", "--out", "nodir/r.txt"], "does not exist"),
    (
        "out-directory-md",
        ["report", "r", "--format", "md", "--out", "{dir}", "--store", "{db}"],
        "is a directory",
    ),
    (
        "out-directory-html",
        ["report", "r", "--format", "html", "--out", "{dir}", "--store", "{db}"],
        "is a directory",
    ),
    # --price
    ("price-no-equals", ["report", "r", "--price", "gpu", "--store", "{db}"], "malformed --price"),
    ("price-empty-key", ["report", "r", "--price", "=2", "--store", "{db}"], "malformed --price"),
    ("price-not-a-number", ["report", "r", "--price", "h100-80gb=abc"], "malformed --price"),
    ("price-nan", ["report", "r", "--price", "h100-80gb=nan", "--store", "{db}"], "malformed"),
    ("price-negative", ["report", "r", "--price", "h100-80gb=-1", "--store", "{db}"], ">= 0"),
    ("price-inf", ["report", "r", "--price", "h100-80gb=inf", "--store", "{db}"], ">= 0"),
    ("price-unknown-gpu", ["report", "r", "--price", "nope=2", "--store", "{db}"], "unknown GPU"),
    # --workload: malformed, or a run that is no load run
    (
        "workload-no-equals",
        ["report", "r", "--workload", "context", "--store", "{db}"],
        "KEY=VALUE",
    ),
    (
        "workload-unknown-key",
        ["report", "r", "--workload", "context=9,output=1,rate=1,gpus=2", "--store", "{db}"],
        "unknown --workload key 'gpus'",
    ),
    (
        "workload-no-load",
        ["report", "r", "--workload", "context=4096,output=256", "--store", "{db}"],
        "one of concurrency= or rate=",
    ),
    (
        "workload-bad-time",
        ["report", "r", "--workload", "context=9,output=1,rate=1,ttft=soon", "--store", "{db}"],
        "--workload ttft: 'soon'",
    ),
    (
        "workload-bad-memory",
        ["report", "r", "--workload", "context=9,output=1,rate=1,memory=80XB", "--store", "{db}"],
        "--workload memory",
    ),
    (
        "workload-not-a-load-run",
        ["report", "r", "--workload", "context=9,output=1,rate=1,ttft=1s", "--store", "{db}"],
        "has no load levels",
    ),
    (
        "price-duplicate",
        ["report", "r", "--price", "h100-80gb=1", "--price", "h100-80gb=2", "--store", "{db}"],
        "--price 'h100-80gb' given twice",
    ),
    # run's command
    ("run-no-command", ["run"], "no command given"),
    ("run-empty-command", ["run", "--"], "no command given"),
    ("run-command-not-found", ["run", "--", "no-such-command-xyz"], "command not found"),
    ("run-command-is-a-folder", ["run", "--", "{dir}"], "command not found"),
    # ui
    ("ui-empty-host", ["ui", "--host", "", "--store", "{db}"], "'--host': must not be empty"),
    ("ui-bad-host", ["ui", "--host", "bad host", "--store", "{db}"], "'--host': 'bad host'"),
    ("ui-empty-allow-host", ["ui", "--allow-host", "", "--store", "{db}"], "'--allow-host'"),
    ("ui-bad-allow-host", ["ui", "--allow-host", "a/b", "--store", "{db}"], "'--allow-host'"),
    # serve
    ("serve-bad-host", ["serve", "--host", "bad host", "--store", "{db}"], "'--host': 'bad host'"),
    ("serve-bad-port", ["serve", "--port", "0", "--store", "{db}"], "'--port': 0 is out of range"),
    ("serve-bad-allow-host", ["serve", "--allow-host", "a/b", "--store", "{db}"], "--allow-host"),
    ("serve-cert-no-key", ["serve", "--tls-cert", "{db}", "--store", "{db}"], "needs --tls-key"),
    ("serve-key-no-cert", ["serve", "--tls-key", "{db}", "--store", "{db}"], "needs --tls-cert"),
    (
        "serve-cert-missing",
        ["serve", "--tls-cert", "{none}", "--tls-key", "{db}", "--store", "{db}"],
        "cannot be read: No such file",
    ),
    (
        "serve-key-folder",
        ["serve", "--tls-cert", "{db}", "--tls-key", "{dir}", "--store", "{db}"],
        "--tls-key",
    ),
    (
        "serve-not-pem",
        ["serve", "--tls-cert", "{db}", "--tls-key", "{db}", "--store", "{db}"],
        "not a PEM certificate and its key",
    ),
    ("serve-empty-cert", ["serve", "--tls-cert", "", "--store", "{db}"], "must not be empty"),
    ("serve-corrupt-store", ["serve", "--store", "{corrupt}", "--port", "1"], "corrupt.db"),
    (
        "ui-otlp-not-http",
        ["ui", "--otlp-endpoint", "grpc://collector:4317", "--store", "{db}"],
        "not an http:// or https:// URL with a host",
    ),
    (
        "serve-otlp-no-host",
        ["serve", "--otlp-endpoint", "http://", "--store", "{db}"],
        "not an http:// or https:// URL with a host",
    ),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The bytes of the stores each case starts with."""
    root = tmp_path_factory.mktemp("stores")
    good = root / "good.db"
    with open_store(good) as st:
        tid = st.create_trial(st.ensure_run("r", start=1e9).id, "t", start=1e9).id
        sid = st.series(tid, "cpu.util").id
        st.append_samples((sid, 1e9 + k, float(k)) for k in range(10))
    newer = root / "newer.db"
    shutil.copyfile(good, newer)
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    assert sorted(p.name for p in root.iterdir()) == ["good.db", "newer.db"]
    return {
        "s.db": good.read_bytes(),
        "newer.db": newer.read_bytes(),
        "corrupt.db": b"\x00garbage" * 512,
    }


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder under ``root``."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


# the store comes from the arguments only, never from the environment the tests run in
NO_STORE = ("TUNESCOPE_STORE",)


@pytest.mark.parametrize(("args", "needle"), [pytest.param(a, n, id=i) for i, a, n in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, stores: dict[str, bytes], args: list[str], needle: str
) -> None:
    for name, data in stores.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "adir").mkdir()
    places = {
        "{db}": str(tmp_path / "s.db"),
        "{corrupt}": str(tmp_path / "corrupt.db"),
        "{newer}": str(tmp_path / "newer.db"),
        "{dir}": str(tmp_path / "adir"),
        "{none}": str(tmp_path / "none.db"),
    }
    before = _tree(tmp_path)
    p = cli(*(places.get(a, a) for a in args), cwd=tmp_path, drop=NO_STORE)
    one_line_error(p, needle)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["trials", "r"],
        ["export", "r"],
        ["export", "r", "--format", "json"],
        ["report", "r"],
        ["usage"],
        ["usage", "--by", "day", "--by", "gpu_model", "--format", "csv"],
    ],
    ids=lambda a: "-".join(a),
)
def test_read_commands_leave_a_good_store_byte_for_byte(
    tmp_path: Path, stores: dict[str, bytes], args: list[str]
) -> None:
    """The other side of the cases above: what succeeds reads, and writes nothing either
    (no -wal or -shm file left beside the database)."""
    (tmp_path / "s.db").write_bytes(stores["s.db"])
    before = _tree(tmp_path)
    p = cli(*args, "--store", str(tmp_path / "s.db"), cwd=tmp_path, drop=NO_STORE)
    assert p.returncode == 0, p.stderr
    assert p.stdout and p.stderr == ""
    assert _tree(tmp_path) == before


def test_a_bad_store_url_in_the_environment_is_one_line_too(tmp_path: Path) -> None:
    p = cli("runs", cwd=tmp_path, env={"TUNESCOPE_STORE": "mysql://db"})
    one_line_error(p, "unknown store URL 'mysql://db'")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["runs", "--help"],
        ["run", "--help"],
        ["report", "-h"],
        ["demo", "--help"],
    ],
)
def test_help_still_succeeds(args: list[str]) -> None:
    p = cli(*args)
    assert p.returncode == 0, p.stderr
    usage = " ".join(["Usage: tunescope", *(a for a in args if not a.startswith("-"))])
    assert p.stdout.lstrip().startswith(f"{usage} "), p.stdout[:300]
    assert p.stderr == ""


def test_an_interrupt_is_exit_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tunescope.cli._app as cli_app
    from tunescope.cli import main

    class Interrupting:
        def __iter__(self) -> Iterator[object]:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_app, "CATALOG", Interrupting())
    assert main(["metrics"]) == 130
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["trials", "r"],
        ["export", "r"],
        ["report", "r"],
        ["usage"],
        ["ui", "--port", "1"],
        ["serve", "--port", "1"],
    ],
    ids=lambda a: a[0],
)
def test_read_commands_create_no_store_on_any_backend(
    sql_store_url: str, tmp_path: Path, args: list[str], request: pytest.FixtureRequest
) -> None:
    """A file that does not exist, or an empty PostgreSQL schema: refused, and left so."""
    # SQL stores only: the embedded ClickHouse opens its folder in one process at a time, and this
    # test opens the store from a second one (a ClickHouse server would run it)
    work = tmp_path / "work"
    work.mkdir()
    p = cli(*args, "--store", sql_store_url, cwd=work, drop=NO_STORE)
    one_line_error(p, "store at")
    assert list(work.iterdir()) == []
    if sql_store_url.startswith("postgresql://"):
        import psycopg

        assert PG_URL is not None
        schema = sql_store_url.rsplit("%3D", 1)[1]
        with psycopg.connect(PG_URL) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchone()
        assert tables == (0,)
    else:
        assert not os.path.exists(sql_store_url)
