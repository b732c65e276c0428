"""`tunescope migrate`: a whole store copied between backends (SQLite, PostgreSQL, ClickHouse
through the embedded engine) and back, every sample, event and scalar compared exactly; a copy
killed part way and run again, with nothing doubled; bad input refused in one line, nothing
written."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import usage_truth
from clickhouse_helpers import chdb_engine, engine_folder, fresh_url
from conftest import PG_URL, pg_schema
from tunescope.analyze import compact_raw, findings_for_trial
from tunescope.cli import main
from tunescope.errors import NotFound
from tunescope.store import (
    Batch,
    SQLStore,
    TrialEnd,
    TrialSpec,
    new_key,
    open_store,
    same_store,
)
from tunescope.store.clickhouse._chdb import ChdbTransport

pytestmark = pytest.mark.usefixtures(chdb_engine.__name__)

T0 = 1_780_000_000.0


def _rich_batches(key: str, spec: TrialSpec, rng: np.random.Generator) -> list[Batch]:
    """One trial on two hosts: float values of no round kind, two samples at one same time,
    every kind of event with its data, scalars with and without a step, where per host."""
    out = []
    for host in ("node-0", "node-1"):
        ts = (T0 + np.round(np.cumsum(rng.uniform(0.4, 0.6, 1500)), 3)).tolist()
        vs = rng.uniform(0, 100, 1500).astype(np.float32).tolist()
        samples = [("gpu.util", "0", "nvml", t, v) for t, v in zip(ts, vs, strict=True)]
        samples += [("cpu.mem", None, None, ts[10], 1.5e9), ("cpu.mem", None, None, ts[10], 2.5e9)]
        events: list[Any] = []
        scalars: list[Any] = []
        if host == "node-0":
            steps = range(900)
            events = [("optimizer_step", T0 + i / 4, None, i, 0.2, None, None) for i in steps]
            events += [
                ("checkpoint", T0 + 100.0, "ckpt-1", 400, 3.5, None, {"path": "/c/1", "mb": 12.5}),
                ("request", T0 + 50.0, "ok", 3, 1.25, 0.125, {"ttft": 0.125, "tokens": 7}),
                ("mark", T0 + 20.0, "start", None, None, None, None),
                ("sampler_gap", T0 + 60.0, "restart", None, 4.0, None, None),
            ]
            scalars = [("loss", None, T0 + 5.0, 0.75), ("loss", 3, T0 + 9.0, 0.5)]
        where = {"hostname": host, "gpus": [{"index": 0}]}
        out.append(
            Batch(key, spec=spec, host=host, samples=tuple(samples), events=tuple(events),
                  scalars=tuple(scalars), where=where)
        )  # fmt: skip
    return out


def _fill(url: str) -> str:
    """A store of what recording leaves: the usage generator's trials (3 projects, ended
    completed, failed and pruned, with where and scalars), and what it lacks: a trial on two
    hosts (:func:`_rich_batches`) with pids, an error and exit code and a series without
    samples, a trial lost (running, its heartbeat long gone), a run without trials, and an
    access token. Returns the token's secret."""
    with open_store(url) as st:
        usage_truth.write(st, usage_truth.plan()[:4])
        key = new_key()
        spec = TrialSpec(
            key=key, run="rich", name="t-a", params={"lr": 3e-4, "tags": ["x", "y"]},
            host="node-0", pids=(101, 102), start=T0, interval=0.5, os_user="ana",
        )  # fmt: skip
        for batch in _rich_batches(key, spec, np.random.default_rng(7)):
            st.write(batch)
        tid = st.trial_by_key(key).id
        st.series(tid, "gpu.mem", "1", "never sampled", "node-1")
        end = TrialEnd("failed", T0 + 800.5, "CUDA out of memory", 137)
        st.write(Batch(key, host="node-0", end=end))
        lost = new_key()
        spec = TrialSpec(key=lost, run="rich", name="t-lost", host="node-0", start=T0 + 1000)
        sample = ("cpu.util", None, None, T0 + 1001.0, 12.5)
        st.write(Batch(lost, spec=spec, host="node-0", samples=(sample,)))
        st.update_trial(st.trial_by_key(lost).id, heartbeat=T0 + 1001.0)
        st.ensure_run("empty-run", T0 - 50.0, os_user="bo", host="login-1")
        assert isinstance(st, SQLStore)
        _, secret = st.create_token("vision", "write", name="ci")
        st.compact()
    return secret


def _dump(url: str) -> dict[str, Any]:
    """Everything a copy keeps, by names and keys (never the ids a store hands out)."""
    out: dict[str, Any] = {}
    with open_store(url, create=False) as st:
        for project in st.list_projects():
            for run in st.list_runs(project=project):
                trials = {}
                for t in st.list_trials(run.id):
                    series = {}
                    for s in st.list_series(t.id):
                        ts, vs = st.read_samples(s.id)
                        order = np.lexsort((vs, ts))
                        series[(s.metric, s.device, s.host)] = (
                            s.note, list(zip(ts[order].tolist(), vs[order].tolist(), strict=True)),
                        )  # fmt: skip
                    events = sorted(
                        (e.t, e.kind, e.name or "", e.step or -1, e.duration or -1.0,
                         e.value or -1.0, repr(sorted((e.data or {}).items())))
                        for e in st.all_events(t.id)
                    )  # fmt: skip
                    scalars = sorted((s.name, s.step or -1, s.t, s.value) for s in st.scalars(t.id))
                    trials[t.key] = (
                        t.name, t.params, t.state, t.host, sorted(t.pids), t.start, t.end,
                        t.heartbeat, t.error, t.interval, st.exit_code(t.id), st.hosts(t.id),
                        series, events, scalars,
                    )  # fmt: skip
                out[f"{project}/{run.name}"] = (run.start, run.os_user, run.host, trials)
        if isinstance(st, SQLStore):
            tokens = st.token_digests()
            out["tokens"] = [(i.project, i.name, i.scope, i.created, d) for i, d in tokens]
    return out


def _migrate(
    src: str, dst: str, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[int, str, str]:
    code = main(["migrate", "--from", src, "--to", dst, *more])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], str]:
    """The filled SQLite store, its dump and its token's secret (read only by the tests)."""
    url = str(tmp_path_factory.mktemp("src") / "src.db")
    secret = _fill(url)
    return url, _dump(url), secret


@pytest.fixture
def chdb_url() -> Iterator[str]:
    url = fresh_url("embedded")
    yield url
    t = ChdbTransport(engine_folder(), "default")
    try:
        t.command(f"DROP DATABASE IF EXISTS {url.rpartition('database=')[2]} SYNC")
    finally:
        t.close()


def test_sqlite_to_clickhouse_and_back_keeps_everything(
    source: tuple[str, dict[str, Any], str], chdb_url: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    src, want, secret = source
    assert sum(len(r[3]) for k, r in want.items() if k != "tokens") == 6
    assert "default/empty-run" in want and len(want["tokens"]) == 1
    code, out, err = _migrate(src, chdb_url, capsys, "--batch-size", "700")
    assert code == 0, (out, err)
    assert "every count agrees" in out and "counts differ" not in out
    assert "usage figures kept per ended trial are not copied" in out
    last: dict[str, int] = {}
    for line in out.splitlines():  # "  run/trial: 1,400 of 3,910 item(s)", a line a batch
        if line.startswith("  ") and line.endswith(" item(s)"):
            label, _, done = line.strip().rpartition(": ")
            n = int(done.split(" of ")[0].replace(",", ""))
            assert 0 < n - last.get(label, 0) <= 700, line  # never more than --batch-size
            last[label] = n
    assert last["rich/t-a"] == 3004 + 904 + 2
    assert _dump(chdb_url) == want
    assert "1 access token(s) copied by digest (1 new)" in out
    with open_store(chdb_url) as st:  # the token's clients keep working against the copy
        assert isinstance(st, SQLStore)
        token = st.check_token(secret)
        assert token is not None and (token.project, token.scope) == ("vision", "write")
    back = str(tmp_path / "back.db")
    code, out, err = _migrate(chdb_url, back, capsys)
    assert code == 0, (out, err)
    assert _dump(back) == want
    lost = next(t for t in want["default/rich"][3].values() if t[0] == "t-lost")
    assert lost[2] == "lost"  # judged from the heartbeat copied, as in the source


@pytest.mark.postgres
def test_sqlite_to_postgresql_and_back_keeps_everything(
    source: tuple[str, dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if PG_URL is None:
        pytest.skip("needs TUNESCOPE_TEST_POSTGRES (a PostgreSQL server's URL)")
    src, want, _ = source
    with pg_schema() as pg:
        code, out, err = _migrate(src, pg, capsys, "--batch-size", "1000")
        assert code == 0, (out, err)
        assert _dump(pg) == want
        back = str(tmp_path / "back.db")
        code, out, err = _migrate(pg, back, capsys)
        assert code == 0, (out, err)
    assert _dump(back) == want
    # a store whose raw samples were dropped: its minute rows, and hours summed from them
    compacted = _compacted(src, tmp_path / "compacted.db")
    with pg_schema() as pg:
        code, out, err = _migrate(compacted, pg, capsys, "--batch-size", "50")
        assert code == 0 and "every count agrees" in out, (out, err)
        assert _answers(pg) == _answers(compacted)


def test_a_copy_killed_part_way_finishes_without_duplicates(
    source: tuple[str, dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, want, _ = source
    dst = str(tmp_path / "dst.db")
    cmd = [sys.executable, "-m", "tunescope", "migrate", "--from", src, "--to", dst,
           "--batch-size", "40"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = 0
        for line in proc.stdout:
            seen += "item(s)" in line and line.startswith("  ")
            if seen == 110:  # past the first trial (98 batches), hundreds to go: kill -9
                proc.send_signal(signal.SIGKILL)
                break
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.communicate()
    partial = _dump(dst)
    assert partial != want and partial  # some of it was there, not all
    code, out, err = _migrate(src, dst, capsys, "--batch-size", "40")
    assert code == 0, (out, err)
    assert "already copied" in out  # the trials done before the kill are not read again
    assert _dump(dst) == want  # every sample, event and scalar once: nothing doubled
    code, out, _ = _migrate(src, dst, capsys)
    assert code == 0 and out.count("already copied") == 6


TL = 1_780_012_800.0  # on an hour
"""Where the long trial of :func:`_compacted` starts: after every other trial of the source."""


def _compacted(src: str, path: Path) -> str:
    """A copy of the source with a long trial added (a sample each 5 s for 3 h, so chunks of
    about 43 min) and raw samples dropped before TL + 100 min, as ``compact --keep-raw``
    drops them, findings kept first: every series of the other trials loses all its raw
    samples, the long one those of its first two chunks, keeping raw samples before its
    ``raw_from`` (in the chunk that reaches past it) and an hour of rows on both sides."""
    path.write_bytes(Path(src).read_bytes())
    url = str(path)
    with open_store(url) as st:
        key = new_key()
        spec = TrialSpec(key=key, run="long", name="t-long", host="node-0", start=TL)
        ts = TL + np.arange(0.0, 3 * 3600, 5.0)
        vs = np.round(50 + 40 * np.sin(ts / 600.0), 2).astype(np.float32).tolist()
        rows = [("gpu.util", "0", None, t, v) for t, v in zip(ts.tolist(), vs, strict=True)]
        for i in range(0, len(rows), 300):
            st.write(Batch(key, spec=spec, host="node-0", samples=tuple(rows[i : i + 300])))
        st.write(Batch(key, host="node-0", end=TrialEnd("completed", TL + 3 * 3600)))
        st.compact()
        done = compact_raw(st, 0.0, now=TL + 100 * 60)
        assert done.raw.samples > 0
    return url


def _answers(url: str) -> dict[str, Any]:
    """What a store answers of each trial, raw samples dropped or not: each series' extent,
    raw_from, a 40-point window over it and its raw samples; the trial's latest values and
    findings. By names and keys."""
    out: dict[str, Any] = {}
    with open_store(url, create=False) as st:
        raw_from = st.raw_from  # type: ignore[attr-defined]
        for project in st.list_projects():
            for run in st.list_runs(project=project):
                for t in st.list_trials(run.id):
                    series = {}
                    for s in st.list_series(t.id):
                        extent = st.series_extent(s.id)
                        window = None
                        if extent is not None:
                            w = st.window(s.id, extent[0], extent[1] + 1.0, 40)
                            window = list(zip(w.t, w.count, w.min, w.max, w.mean, strict=True))
                        since = raw_from(s.id)
                        ts, _ = st.read_samples(s.id, -np.inf if since is None else since)
                        series[(s.metric, s.device, s.host)] = (extent, since, window, len(ts))
                    latest = sorted((s.metric, s.host, t_, v) for s, t_, v in st.latest(t.id))
                    found = sorted(
                        (f.rule, f.severity, f.message) for f in findings_for_trial(st, t)
                    )
                    out[f"{project}/{run.name}/{t.key}"] = (series, latest, found)
    return out


def test_a_compacted_store_copies_its_rollups_and_answers_the_same(
    source: tuple[str, dict[str, Any], str], chdb_url: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Where raw samples were dropped, the minute rows stand for them: copied SQLite ->
    ClickHouse -> SQLite, every count agrees and each store answers windows, extents, latest
    values and findings as the source does (ClickHouse's float32 min and max within their
    precision)."""
    src = _compacted(source[0], tmp_path / "compacted.db")
    want = _answers(src)
    long_key = next(k for k in want if k.startswith("default/long/"))
    series, latest, _ = want[long_key]
    extent, since, window, raw = series[("gpu.util", "0", "node-0")]
    assert since == TL + 100 * 60 and raw == 80 * 12  # 80 min of raw samples, one each 5 s
    assert extent is not None and extent[2] == 2160 and window is not None and latest
    dropped_all = [k for k, v in want.items() if all(x[1] for x in v[0].values() if x[0])]
    assert len(dropped_all) >= 5  # the other trials lost every raw sample
    assert sum(bool(f) for _, _, f in want.values()) >= 4  # findings kept before the drop

    code, out, err = _migrate(src, chdb_url, capsys, "--batch-size", "50")
    assert code == 0, (out, err)
    assert "every count agrees" in out
    assert "minute row(s) of 1 series copied" in out  # the long trial's one series
    on_chdb = _answers(chdb_url)
    assert on_chdb.keys() == want.keys()
    for k, (series, latest, found) in want.items():
        there = on_chdb[k]
        assert there[2] == found and there[1] == latest, k
        for name, (extent, since, window, raw) in series.items():
            got = there[0][name]
            assert got[:2] == (extent, since) and got[3] == raw, (k, name)
            assert (got[2] is None) == (window is None)
            if window is not None:
                assert np.allclose(got[2], window, rtol=1e-6), (k, name)

    back = str(tmp_path / "back.db")
    code, out, err = _migrate(chdb_url, back, capsys)
    assert code == 0, (out, err)
    assert _answers(back) == want
    code, out, _ = _migrate(chdb_url, back, capsys)  # again: nothing to do
    assert code == 0 and out.count("already copied") == len(want)


@pytest.mark.parametrize("kind", ["sqlite", "chdb"])
def test_minute_rows_put_again_change_nothing_and_bad_ones_write_nothing(
    kind: str, tmp_path: Path
) -> None:
    """``put_minute_rows``: the same rows sent twice count once; rows off the minute, out of
    their span or after raw_from, and an unknown series, are refused with nothing written."""
    url = str(tmp_path / "s.db") if kind == "sqlite" else fresh_url("embedded")
    with open_store(url) as st:
        key = new_key()
        spec = TrialSpec(key=key, run="r", name="t", host="h", start=TL)
        sample = ("cpu.util", None, None, TL + 7200.5, 3.0)
        st.write(Batch(key, spec=spec, host="h", samples=(sample,)))
        sid = st.list_series(st.trial_by_key(key).id)[0].id
        rows = np.array(
            [[TL + 60 * i, 2, i, i + 1, 2 * i + 1, TL + 60 * i + 1, TL + 60 * i + 2, i + 1]
             for i in range(90)], dtype=np.float64,
        )  # fmt: skip
        put = st.put_minute_rows  # type: ignore[attr-defined]
        for _ in range(2):
            put(sid, TL, TL + 5400, rows, TL + 7200)
            assert st.series_extent(sid) == (TL + 1, TL + 7200.5, 181)
        assert st.raw_from(sid) == TL + 7200  # type: ignore[attr-defined]
        assert np.array_equal(st.minute_rows(sid, TL, TL + 5400), rows)  # type: ignore[attr-defined]
        w = st.window(sid, TL, TL + 7201, 2)  # an hour a bucket: hour rows (SQL), minutes
        assert [b.n for b in w.buckets or []] == [120, 61]
        bad = [
            (sid, TL + 30, TL + 5400, rows, TL + 7200),  # lo off the minute
            (sid, TL, TL + 5400, rows, TL + 3600),  # raw_from before hi
            (sid, TL + 60, TL + 5400, rows, TL + 7200),  # a row before lo
            (sid, TL, TL + 5400, rows[::-1], TL + 7200),  # not sorted
            (sid, TL, TL + 5400, rows[:, :7], TL + 7200),  # a column short
        ]
        for args in bad:
            with pytest.raises(ValueError):
                put(*args)
        with pytest.raises(NotFound):
            put(sid + 1000, TL, TL + 5400, rows, TL + 7200)
        assert st.series_extent(sid) == (TL + 1, TL + 7200.5, 181)
        assert st.raw_from(sid) == TL + 7200  # type: ignore[attr-defined]


def _one_line(err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunescope: error: "), err
    assert needle in lines[0], err


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("chdb:/tmp/x?database=a&meta=m.db", "chdb:/tmp/x?meta=m.db&database=a", True),
        ("chdb:/tmp/x", "chdb:///tmp/x?database=tunescope", True),  # the default, spelt out
        ("chdb:/tmp/y/../x", "chdb:/tmp/x", True),
        ("chdb:/tmp/x?database=a", "chdb:/tmp/x?database=b", False),
        ("chdb:/tmp/x", "chdb:/tmp/y", False),
        ("clickhouse://h:8123/db", "clickhouse://H/db?cluster=c", True),
        ("clickhouse://h/db", "clickhouses://h/db", False),  # 8123 and 8443
        ("clickhouse://h/db", "clickhouse://h/other", False),
        ("clickhouse://h/db", "chdb:/tmp/db", False),
        ("chdb:/tmp/x?bogus=1", "chdb:/tmp/x", False),  # opening it says what is wrong
    ],
)
def test_one_clickhouse_store_is_known_however_it_is_spelt(a: str, b: str, same: bool) -> None:
    assert same_store(a, b) is same
    assert same_store(b, a) is same


def test_bad_input_is_one_line_and_writes_nothing(
    source: tuple[str, dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    src, _, _ = source
    monkeypatch.chdir(Path(src).parent)
    code, _, err = _migrate(src, f"sqlite:///{src}", capsys)
    assert code == 2
    _one_line(err, "name the same store")
    code, _, err = _migrate("src.db", src, capsys)  # one file, relative and absolute
    assert code == 2
    _one_line(err, "name the same store")
    dst = tmp_path / "dst.db"
    code, _, err = _migrate(str(tmp_path / "missing.db"), str(dst), capsys)
    assert code == 2
    _one_line(err, "cannot read the source")
    code, _, err = _migrate("postgresql://nobody@127.0.0.1:1/none", str(dst), capsys)
    assert code == 2
    _one_line(err, "cannot read the source")
    assert not dst.exists()
    code, out, _ = _migrate(src, str(dst), capsys, "--dry-run")
    assert code == 0 and "dry run: would copy 6 trial(s)" in out and not dst.exists()
    # a target holding another run of a source run's name: refused before writing
    other = tmp_path / "other.db"
    with open_store(str(other)) as st:
        key = new_key()
        st.write(Batch(key, spec=TrialSpec(key=key, run="rich", start=T0), host="h",
                       samples=(("cpu.util", None, None, T0 + 1, 5.0),)))  # fmt: skip
    before = _dump(str(other))
    code, _, err = _migrate(src, str(other), capsys)
    assert code == 2
    _one_line(err, "already holds run 'rich'")
    assert _dump(str(other)) == before
    code, _, err = _migrate(src, str(other), capsys, "--dry-run")
    assert code == 2
    _one_line(err, "already holds run 'rich'")
    # another token of a source token's project and name: refused, nothing written
    tokened = tmp_path / "tokened.db"
    with open_store(str(tokened)) as st:
        assert isinstance(st, SQLStore)
        st.create_token("vision", "read", name="ci")
    before = _dump(str(tokened))
    code, _, err = _migrate(src, str(tokened), capsys)
    assert code == 2
    _one_line(err, "already holds another token named 'ci' in project 'vision'")
    assert _dump(str(tokened)) == before
    code, _, err = _migrate(src, str(dst), capsys, "--batch-size", "0")
    assert code == 2 and not dst.exists()
    # a tunescope server is not a database: its store is (and only a database keeps rollups)
    code, _, err = _migrate(src, "http://127.0.0.1:1/vision", capsys)
    assert code == 2
    _one_line(err, "--to http://127.0.0.1:1/vision is a tunescope server")
    assert os.path.exists(src)


def test_a_source_changed_since_an_earlier_copy_is_refused(
    source: tuple[str, dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trial the source grew after a copy of it cannot be resent as the same batches:
    refused in one line (never a second copy of its samples)."""
    src = tmp_path / "src.db"
    src.write_bytes(Path(source[0]).read_bytes())
    dst = str(tmp_path / "dst.db")
    assert _migrate(str(src), dst, capsys)[0] == 0
    with open_store(str(src)) as st:
        key = next(t.key for t in st.list_trials(st.get_run("rich").id) if t.name == "t-a")
        st.write(Batch(key, host="node-0", samples=(("gpu.util", "0", "nvml", T0 + 0.001, 1.0),)))
    before = _dump(dst)
    code, _, err = _migrate(str(src), dst, capsys)
    assert code == 2
    _one_line(err, "rich/t-a: the target holds batch")
    assert "the source changed since" in err
    assert _dump(dst) == before


def test_an_unreachable_target_is_one_line(
    source: tuple[str, dict[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _migrate(source[0], "postgresql://nobody@127.0.0.1:1/none", capsys)
    assert code == 2
    _one_line(err, "cannot open the target postgresql://nobody@127.0.0.1:1/none")
