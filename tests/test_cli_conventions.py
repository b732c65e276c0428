"""The command line's conventions, run as a user runs it (the real `tunescope`, a subprocess):
`run` leaves the command's options to the command, listings speak JSON and CSV, `report`
gates CI with --fail-on, `--out -` is stdout, objective values and directions are shown."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import cli
from tunescope.store import Store, open_store

T0 = 1_700_000_000.0
GIB = 1024.0**3
H100 = 81559 * 1024.0**2


def _put(st: Store, tid: int, metric: str, values: Any, device: str | None = None) -> None:
    sid = st.series(tid, metric, device).id
    st.append_samples([(sid, T0 + 1 + k, float(v)) for k, v in enumerate(values)])


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Run 'gate': trial 'idle-gpu' (GPU under-used: moderate; right-size: low) and 'quiet'
    (no finding)."""
    path = str(tmp_path_factory.mktemp("gate") / "store.db")
    with open_store(path) as st:
        run = st.ensure_run("gate", start=T0)
        a = st.create_trial(run.id, "idle-gpu", {"lr": 0.001}, start=T0, interval=1.0)
        _put(st, a.id, "cpu.util", np.full(120, 35.0))
        _put(st, a.id, "cpu.mem", np.full(120, 3 * GIB))
        _put(st, a.id, "gpu.util", np.full(120, 45.0), "0")
        _put(st, a.id, "gpu.mem", np.full(120, 60 * GIB), "0")
        _put(st, a.id, "gpu.mem.total", np.full(120, H100), "0")
        b = st.create_trial(run.id, "quiet", {}, start=T0, interval=1.0)
        _put(st, b.id, "cpu.util", np.full(60, 90.0))
        for tid in (a.id, b.id):
            st.update_trial(tid, state="completed", end=T0 + 120)
    return path


ARGV = "import sys; print('ARGV', sys.argv[1:])"


def test_run_gives_everything_from_the_command_on_to_the_command(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    p = cli("run", "--run", "x", "--store", db, sys.executable, "-c", ARGV, "--run", "foo")
    assert p.returncode == 0, p.stderr
    assert "ARGV ['--run', 'foo']" in p.stdout
    # with --, and options tunescope also has (--help, --store) after the command
    q = cli("run", "--store", db, "--run", "x", "--", sys.executable, "-c", ARGV, "--help")
    assert q.returncode == 0 and "ARGV ['--help']" in q.stdout, q.stderr
    r = cli("run", "--store", db, "--run", "x", sys.executable, "-c", ARGV, "--store", "y")
    assert r.returncode == 0 and "ARGV ['--store', 'y']" in r.stdout, r.stderr
    with open_store(db) as st:
        assert [x.name for x in st.list_runs()] == ["x"]  # the child's --run foo not taken
        assert len(st.list_trials(st.get_run("x").id)) == 3


RUN_KEYS = [
    "id",
    "run",
    "state",
    "trials",
    "start",
    "end",
    "duration_s",
    "ram_peak_bytes",
    "vram_peak_bytes",
]
TRIAL_KEYS = [
    "run",
    "id",
    "trial",
    "state",
    "start",
    "end",
    "duration_s",
    "cpu_util_peak_pct",
    "cpu_util_mean_pct",
    "ram_peak_bytes",
    "ram_mean_bytes",
    "gpu_util_peak_pct",
    "gpu_util_mean_pct",
    "vram_peak_bytes",
    "vram_mean_bytes",
    "optimizer_steps",
    "evaluations",
    "checkpoints",
    "data_wait_pct",
    "objective",
    "direction",
    "params",
]


def test_runs_and_trials_as_table_json_and_csv(gate: str) -> None:
    table = cli("runs", "--store", gate)
    assert table.stdout.splitlines()[0].split() == [
        *["run", "state", "trials", "start", "duration", "peak", "RAM", "peak", "VRAM"]
    ]
    assert table.stdout == cli("runs", "--store", gate, "--format", "table").stdout
    (run,) = json.loads(cli("runs", "--store", gate, "--format", "json").stdout)
    assert list(run) == RUN_KEYS
    assert (run["run"], run["state"], run["trials"]) == ("gate", "completed", 2)
    assert run["vram_peak_bytes"] == 60 * GIB and run["ram_peak_bytes"] == 3 * GIB
    assert (run["start"], run["end"], run["duration_s"]) == (T0, T0 + 120, 120.0)
    rows = list(csv.reader(io.StringIO(cli("runs", "--store", gate, "--format", "csv").stdout)))
    assert rows[0] == RUN_KEYS and rows[1][:4] == ["1", "gate", "completed", "2"]
    assert float(rows[1][RUN_KEYS.index("vram_peak_bytes")]) == 60 * GIB

    t_table = cli("trials", "gate", "--store", gate)
    assert t_table.returncode == 0, t_table.stderr
    head = t_table.stdout.splitlines()[0]
    assert head.split("  ")[0] == "trial" and "VRAM peak/mean" in head and "objective" in head
    assert "60.00 GiB / 60.00 GiB" in t_table.stdout and "lr=0.001" in t_table.stdout
    trials = json.loads(cli("trials", "gate", "--store", gate, "--format", "json").stdout)
    assert [list(t) for t in trials] == [TRIAL_KEYS, TRIAL_KEYS]
    idle, quiet = trials
    assert (idle["trial"], idle["gpu_util_peak_pct"], idle["cpu_util_mean_pct"]) == (
        "idle-gpu",
        45.0,
        35.0,
    )
    assert idle["params"] == {"lr": 0.001} and idle["duration_s"] == 120.0
    assert (quiet["vram_peak_bytes"], quiet["objective"], quiet["direction"]) == (None, [], [])
    c = list(
        csv.DictReader(io.StringIO(cli("trials", "1", "--store", gate, "--format", "csv").stdout))
    )
    assert [list(r) for r in c] == [TRIAL_KEYS, TRIAL_KEYS]
    assert c[0]["params"] == '{"lr": 0.001}' and c[1]["vram_peak_bytes"] == ""
    assert float(c[0]["gpu_util_peak_pct"]) == 45.0


def test_an_empty_store_lists_no_runs_in_every_format(tmp_path: Path) -> None:
    db = str(tmp_path / "e.db")
    with open_store(db):
        pass
    assert cli("runs", "--store", db).stdout == "no runs yet\n"
    assert json.loads(cli("runs", "--store", db, "--format", "json").stdout) == []
    assert cli("runs", "--store", db, "--format", "csv").stdout == ",".join(RUN_KEYS) + "\n"


@pytest.mark.parametrize(
    ("args", "code", "hits"),
    [
        (["--fail-on", "high"], 0, 0),
        (["--fail-on", "moderate"], 1, 1),
        (["--fail-on", "low"], 1, 2),
        (["--fail-on", "low", "--trial", "quiet"], 0, 0),
        ([], 0, 0),
    ],
)
def test_report_fail_on_gates_ci_and_still_reports(
    gate: str, args: list[str], code: int, hits: int
) -> None:
    p = cli("report", "gate", "--store", gate, *args)
    assert p.returncode == code, p.stderr
    assert p.stdout.startswith("tunescope report: run 'gate'")  # the report, gate or not
    if code:
        assert p.stderr.splitlines() == [
            f"tunescope: {hits} finding(s) at severity {args[1]} or above (--fail-on): exit 1"
        ]
    else:
        assert p.stderr == ""


def test_report_fail_on_writes_the_file_before_failing(gate: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = cli(
        "report",
        "gate",
        "--store",
        gate,
        "--format",
        "json",
        "--out",
        str(out),
        "--fail-on",
        "moderate",
    )
    assert p.returncode == 1
    doc = json.loads(out.read_text())
    assert doc["trials"][0]["findings"][0]["severity"] == "moderate"


def test_out_dash_is_stdout_and_html_needs_no_file(gate: str, tmp_path: Path) -> None:
    plain = cli("export", "gate", "--store", gate, cwd=tmp_path)
    dash = cli("export", "gate", "--store", gate, "--out", "-", cwd=tmp_path)
    assert dash.returncode == 0 and dash.stdout == plain.stdout
    assert dash.stdout.startswith("run,trial,metric,host,device,t,elapsed_s,value\n")
    js = cli("export", "gate", "--store", gate, "--format", "json", "--out", "-", cwd=tmp_path)
    assert len(json.loads(js.stdout)["samples"]) == 120 * 5 + 60
    text = cli("report", "gate", "--store", gate, "--out", "-", cwd=tmp_path)
    assert text.stdout == cli("report", "gate", "--store", gate).stdout
    assert text.stdout.startswith("tunescope report: run 'gate'") and text.stderr == ""
    for extra in ([], ["--out", "-"]):
        page = cli("report", "gate", "--store", gate, "--format", "html", *extra, cwd=tmp_path)
        assert page.returncode == 0, page.stderr
        assert page.stdout.startswith("<!doctype html>") and page.stdout.count("<img ") == 2
        assert page.stderr == ""  # no "wrote -"
    assert list(tmp_path.iterdir()) == []  # never a file named -


def _study(optuna: Any, db: str, direction: str) -> Any:
    from tunescope.integrations.optuna import track

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", -10.0, 10.0)
        return (x - 2) ** 2

    study = optuna.create_study(
        study_name="search", direction=direction, sampler=optuna.samplers.RandomSampler(seed=1)
    )
    study.optimize(track(objective, store=db, sampler=False), n_trials=2)
    return study


@pytest.mark.ml
def test_objective_and_direction_of_a_real_optuna_study(tmp_path: Path, optuna: Any) -> None:
    db = str(tmp_path / "o.db")
    study = _study(optuna, db, "maximize")
    values = [t.value for t in study.trials]
    trials = json.loads(cli("trials", "search", "--store", db, "--format", "json").stdout)
    assert [t["objective"] for t in trials] == [[v] for v in values]
    assert [t["direction"] for t in trials] == [["maximize"], ["maximize"]]
    table = cli("trials", "search", "--store", db).stdout
    assert f"{values[0]:.6g} (maximize)" in table and f"{values[1]:.6g} (maximize)" in table
    rep = json.loads(cli("report", "search", "--store", db, "--format", "json").stdout)
    assert [(t["objective"], t["direction"]) for t in rep["trials"]] == [
        ([v], ["maximize"]) for v in values
    ]
    text = cli("report", "search", "--store", db).stdout
    assert f"  objective: {values[1]:.6g} (maximize)\n" in text
    page = cli("report", "search", "--store", db, "--format", "html").stdout
    assert f", objective {values[0]:.6g} (maximize), params" in page


@pytest.mark.ml
def test_a_minimizing_multi_objective_study_shows_each_direction(
    tmp_path: Path, optuna: Any
) -> None:
    from tunescope.integrations.optuna import track

    db = str(tmp_path / "m.db")
    study = optuna.create_study(study_name="pareto", directions=["minimize", "maximize"])

    def objective(trial: Any) -> tuple[float, float]:
        a = trial.suggest_float("a", 0.0, 1.0)
        return a, 1.0 - a

    study.optimize(track(objective, store=db, sampler=False), n_trials=1)
    (t,) = json.loads(cli("trials", "pareto", "--store", db, "--format", "json").stdout)
    assert t["objective"] == pytest.approx(study.trials[0].values)
    assert t["direction"] == ["minimize", "maximize"]
    a, b = study.trials[0].values
    assert f"{a:.6g}, {b:.6g} (minimize, maximize)" in cli("trials", "pareto", "--store", db).stdout
