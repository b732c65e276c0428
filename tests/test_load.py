"""``tunescope.load``: a run's samples as a pandas DataFrame, the same rows as
``tunescope export`` writes (the real command, run as a subprocess)."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

import tunescope
from cli_helpers import cli
from tunescope.errors import ConfigError, NotFound
from tunescope.store import CHUNK_SAMPLES, SAMPLE_COLUMNS, Event, open_store

T0 = 1.7e9


def _store(path: Path) -> str:
    """Run "r" with two trials: trial-level and per-GPU series (packed chunks and pending
    samples, values that do not round-trip through float32 in text), and events."""
    with open_store(path) as st:
        run = st.ensure_run("r", start=T0)
        for i, name in enumerate(("a", "b")):
            tid = st.create_trial(run.id, name, start=T0 + i, host=f"node-{name}").id
            cpu = st.series(tid, "cpu.util").id
            gpus = [st.series(tid, "gpu.mem", str(d)).id for d in (0, 1)]
            if name == "b":  # a second node's GPU 0 (a multi-node trial)
                gpus.append(st.series(tid, "gpu.mem", "0", host="node-z").id)
            n = CHUNK_SAMPLES + 40
            st.append_samples(
                (sid, T0 + i + 0.25 * k, (k + 1) / 3.0 * (j + 1))
                for k in range(n)
                for j, sid in enumerate([cpu, *gpus])
            )
            st.add_events([Event(tid, "optimizer_step", T0 + i + 1.5, "SGD", 1, None)])
    return str(path)


def _export(url: str, *args: str) -> list[dict[str, str]]:
    p = cli("export", "r", "--store", url, *args)
    assert p.returncode == 0, p.stderr
    return list(csv.DictReader(io.StringIO(p.stdout)))


def _same(frame: object, rows: list[dict[str, str]]) -> None:
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list(SAMPLE_COLUMNS) == list(rows[0])
    assert len(frame) == len(rows)
    for got, want in zip(frame.itertuples(index=False), rows, strict=True):
        assert [got.run, got.trial, got.metric, got.host, got.device] == [
            want["run"],
            want["trial"],
            want["metric"],
            want["host"],
            want["device"],
        ]
        # CSV writes repr(float): exact round trip
        assert (got.t, got.elapsed_s, got.value) == (
            float(want["t"]),
            float(want["elapsed_s"]),
            float(want["value"]),
        )


def test_load_equals_the_export_csv(tmp_path: Path) -> None:
    url = _store(tmp_path / "s.db")
    frame = tunescope.load("r", store=url)
    rows = _export(url)
    _same(frame, rows)
    assert set(frame["trial"]) == {"a", "b"} and set(frame["device"]) == {"", "0", "1"}
    assert set(frame["host"]) == {"node-a", "node-b", "node-z"}
    two = frame[(frame["trial"] == "b") & (frame["device"] == "0")]
    assert set(two["host"]) == {"node-b", "node-z"}
    assert str(frame["value"].dtype) == "float64"
    # by id, one trial, some metrics: the same as export's --trial and --metric
    with open_store(url, create=False) as st:
        run_id = st.get_run("r").id
    only = tunescope.load(run_id, store=url, trial="b", metrics=["gpu.mem"])
    _same(only, _export(url, "--trial", "b", "--metric", "gpu.mem"))
    assert set(only["trial"]) == {"b"} and set(only["metric"]) == {"gpu.mem"}
    two = tunescope.load("r", store=url, metrics=("cpu.util", "gpu.mem"))
    assert len(two) == len(frame)


def test_load_reads_the_store_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _store(tmp_path / "env.db")
    monkeypatch.setenv("TUNESCOPE_STORE", url)
    assert len(tunescope.load("r", metrics="cpu.util")) == 2 * (CHUNK_SAMPLES + 40)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    url = _store(tmp_path / "s.db")
    with pytest.raises(ConfigError, match=r"unknown metric 'gpu\.nope'"):
        tunescope.load("r", store=url, metrics=["cpu.util", "gpu.nope"])
    with pytest.raises(NotFound, match="has no trial 'zz'"):
        tunescope.load("r", store=url, trial="zz")
    with pytest.raises(NotFound):
        tunescope.load("no-such-run", store=url)
    missing = tmp_path / "missing.db"
    with pytest.raises(NotFound, match="no store at"):
        tunescope.load("r", store=str(missing))
    assert not missing.exists()  # never created


def test_without_pandas_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _store(tmp_path / "s.db")
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(ImportError) as err:
        tunescope.load("r", store=url)
    assert str(err.value) == "tunescope.load needs pandas: pip install 'tunescope[pandas]'"
