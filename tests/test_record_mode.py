"""``$TUNESCOPE_MODE=disabled`` makes the SDK and ``tunescope run`` no-ops, and a recording run
says once on stderr where it records (``$TUNESCOPE_QUIET`` silences it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tunescope.record as ts
from cli_helpers import cli, one_line_error

# A real training loop run twice in a fresh interpreter, once through every SDK hook with
# TUNESCOPE_MODE=disabled and once without tunescope: what it reports is compared by the test.
_TRAIN = textwrap.dedent(
    """
    import json, os, sys, threading
    import psutil, torch
    from torch import nn
    import tunescope.record as ts
    from tunescope.record import _state
    import optuna
    from tunescope.integrations import distributed
    from tunescope.integrations.optuna import track
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def train(sdk):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        data = [(x, x.sum(dim=1, keepdim=True)) for x in torch.randn(20, 16, 8)]
        seen = {}
        def loop(trial):
            loader = trial.watch(data) if trial is not None else data
            seen["same_loader"] = loader is data
            for k, (x, y) in enumerate(loader):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad(); loss.backward(); opt.step()
                if trial is not None:
                    trial.log(step=k, loss=loss.item())
            if trial is not None:
                with trial.evaluation():
                    model(data[0][0])
                trial.checkpoint(sys.argv[1], name="adapter")
                trial.mark("done")
                seen["threads"] = sorted(t.name for t in threading.enumerate())
                seen["children"] = len(psutil.Process().children(recursive=True))
                seen["current"] = ts.current_trial() is not None
                seen["recording"] = trial.recording
            return loss.item()
        if not sdk:
            return loop(None), seen
        with ts.run("disabled", store=sys.argv[2], interval=0.2) as run:
            with run.trial(params={"lr": 1e-2}) as trial:
                loss = loop(trial)
        with distributed.trial(run="ddp", store=sys.argv[2]) as dt:
            seen["ddp_recording"] = dt.recording
        study = optuna.create_study()
        study.optimize(track(lambda t: t.suggest_float("x", 0, 1), store=sys.argv[2]), n_trials=2)
        seen["optuna_trials"] = len(study.trials)
        return loss, seen

    before = sorted(t.name for t in threading.enumerate())
    loss_sdk, seen = train(True)
    loss_plain, _ = train(False)
    print(json.dumps({
        "before": before, "loss_sdk": loss_sdk, "loss_plain": loss_plain,
        "hook": _state.hook_installed(), **seen,
    }))
    """
)


@pytest.mark.ml
def test_disabled_mode_runs_a_real_training_loop_unchanged_and_records_nothing(
    tmp_path: Path, spool: Path
) -> None:
    db = tmp_path / "never.db"
    (tmp_path / "adapter").mkdir()
    env = {**os.environ, "TUNESCOPE_MODE": "disabled", "TUNESCOPE_STORE": str(db)}
    env.pop("TUNESCOPE_TRIAL_KEY", None)
    p = subprocess.run(
        [sys.executable, "-c", _TRAIN, str(tmp_path / "adapter"), str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["loss_sdk"] == got["loss_plain"]  # the same training, bit for bit
    assert got["same_loader"] is True  # watch() gave the loader itself back
    assert got["threads"] == got["before"]  # no flusher, probe or writer thread
    assert got["children"] == 0  # no sampler
    assert got["hook"] is False  # no optimizer hook installed
    assert got["current"] is False and got["recording"] is False
    assert got["ddp_recording"] is False
    assert got["optuna_trials"] == 2
    assert not db.exists()
    assert sorted(tmp_path.iterdir()) == [tmp_path / "adapter"]  # no store, no -wal, no spool
    assert not spool.exists() or not any(spool.rglob("*"))
    assert "tunescope" not in p.stderr  # nothing to say: nothing is recorded


def test_unknown_mode_warns_once_and_records(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TUNESCOPE_MODE", "offline-ish")
    monkeypatch.setenv("TUNESCOPE_QUIET", "1")
    with ts.run("odd-mode", store=sqlite_url, sampler=False) as run, run.trial() as t:
        assert t.recording
    with ts.run("odd-mode", store=sqlite_url, sampler=False):
        pass
    warned = [r for r in caplog.records if "TUNESCOPE_MODE" in r.getMessage()]
    assert len(warned) == 1 and "'offline-ish' is not a mode" in warned[0].getMessage()


def test_tunescope_run_disabled_just_runs_the_command(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    code = "import os, sys; print('out', os.environ.get('TUNESCOPE_TRIAL_KEY')); sys.exit(7)"
    p = cli(
        "run",
        "--store",
        str(db),
        "--",
        sys.executable,
        "-c",
        code,
        env={"TUNESCOPE_MODE": "disabled"},
        cwd=tmp_path,
    )
    assert p.returncode == 7, p.stderr
    assert p.stdout == "out None\n" and p.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_tunescope_run_refuses_an_unknown_mode(tmp_path: Path) -> None:
    p = cli(
        "run",
        "--store",
        str(tmp_path / "x.db"),
        "--",
        sys.executable,
        "-c",
        "print('ran')",
        env={"TUNESCOPE_MODE": "Disabled-ish"},
        cwd=tmp_path,
    )
    one_line_error(p, "$TUNESCOPE_MODE='Disabled-ish' is not a mode: use enabled or disabled")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- the start line
def test_a_run_says_once_where_it_records_and_how_to_look(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNESCOPE_QUIET", raising=False)
    for _ in range(2):  # the same run twice in one process: said once
        with ts.run("said-once", store=sqlite_url, sampler=False) as run, run.trial():
            pass
    err = capsys.readouterr().err
    path = sqlite_url.removeprefix("sqlite:///")
    line = (
        f"tunescope: recording run 'said-once' into sqlite:///{path}; "
        f"view: tunescope ui --store sqlite:///{path}\n"
    )
    assert err.count("tunescope: recording run") == 1
    assert line in err


def test_the_start_line_never_shows_a_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNESCOPE_QUIET", raising=False)
    url = "postgresql://alice:s3cret-pw@127.0.0.1:1/db?sslmode=disable"  # nobody listens
    r = ts.run("with-password", store=url, sampler=False)
    assert r.recording
    err = capsys.readouterr().err
    assert "s3cret" not in err
    shown = "postgresql://alice@127.0.0.1:1/db?sslmode=disable"
    assert (
        f"tunescope: recording run 'with-password' into {shown}; "
        f"view: tunescope ui --store '{shown}'\n"
    ) in err


def test_an_http_store_points_at_its_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNESCOPE_QUIET", raising=False)
    ts.run("team", store="http://127.0.0.1:1/vision", sampler=False)  # nobody listens
    err = capsys.readouterr().err
    assert (
        "tunescope: recording run 'team' into http://127.0.0.1:1/vision; "
        "view: http://127.0.0.1:1/\n"
    ) in err


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_quiet_silences_the_start_line(
    value: str,
    sqlite_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TUNESCOPE_QUIET", value)
    with ts.run(f"quiet-{value}", store=sqlite_url, sampler=False) as run, run.trial() as t:
        assert t.recording
    assert "tunescope" not in capsys.readouterr().err
