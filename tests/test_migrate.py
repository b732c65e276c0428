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
from tunescope.cli import main
from tunescope.store import Batch, SQLStore, TrialEnd, TrialSpec, new_key, open_store
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


def test_counts_that_differ_list_the_trials_and_exit_1(
    source: tuple[str, dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raw samples `compact --keep-raw` dropped are not in the source to copy (their rollups
    are not carried): the source counts them, the target cannot."""
    src = tmp_path / "dropped.db"
    src.write_bytes(Path(source[0]).read_bytes())
    assert main(["compact", "--keep-raw", "30d", "--store", str(src)]) == 0
    capsys.readouterr()
    code, out, _ = _migrate(str(src), str(tmp_path / "dst.db"), capsys)
    assert code == 1
    *_, note, last = out.strip().splitlines()
    assert last.startswith("6 trial(s) differ: ") and "vision:synthetic-" in last, last
    assert "raw samples dropped by `tunescope compact --keep-raw`" in note
    assert out.count(" counts differ\n") == 6


def _one_line(err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunescope: error: "), err
    assert needle in lines[0], err


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
