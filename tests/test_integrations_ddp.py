"""torchrun / DDP: a real two-process torchrun (gloo, CPU) of a tiny DDP model records one
trial that holds both ranks' processes, with the events that are the same on every rank
written once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tunescope.record as ts
from http_helpers import free_port
from tunescope.store import Store, TrialInfo

STEPS = 10

TRAIN = """
    import json, os, sys, time
    import torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import tunescope.record as ts
    import tunescope.integrations.distributed as tsd

    store, out, how = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])

    def train(trial):
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for k in range(1, steps + 1):
            x = torch.randn(16, 8)
            loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
            trial.log(step=k, loss=loss.item())
        with trial.evaluation():
            time.sleep(0.3)
        info = {"pid": os.getpid(), "trial": trial.id, "replica": trial.replica}
        with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
            json.dump(info, f)
        time.sleep(0.5)  # a few samples of the training processes
        dist.barrier()

    if how == "before-init":  # the trial first, through torchrun's agent store
        with tsd.trial(run="ddp", name="tiny", params={"lr": 0.1}, store=store,
                       interval=0.2) as trial:
            dist.init_process_group("gloo")
            train(trial)
    elif how == "after-init":  # over the process group (no agent store named)
        dist.init_process_group("gloo")
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        with tsd.trial(run="ddp", name="tiny", params={"lr": 0.1}, store=store,
                       interval=0.2) as trial:
            train(trial)
    else:  # under `tunescope run`: the plain SDK in every rank
        dist.init_process_group("gloo")
        train(ts.current_trial())
    dist.destroy_process_group()
"""


def torchrun(script: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(script),
        *args,
    ]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNESCOPE_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(TRAIN))
    (tmp_path / "out").mkdir()
    return p


def ranks(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads((tmp_path / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]


def check_one_trial(db: Store, info: TrialInfo, tmp_path: Path) -> None:
    r0, r1 = ranks(tmp_path)
    assert r0["trial"] == r1["trial"] == info.id
    assert (r0["replica"], r1["replica"]) == (False, True)
    assert {r0["pid"], r1["pid"]} <= set(info.pids)  # both ranks' processes are the trial's
    ev = db.events(info.id, 0.0, time.time() + 60, limit=100_000).events
    assert ev is not None
    # written once, by rank 0
    assert [e.step for e in ev if e.kind == "optimizer_step"] == list(range(1, STEPS + 1))
    assert len([e for e in ev if e.kind == "evaluation"]) == 1
    assert [s.step for s in db.scalars(info.id, "loss")] == list(range(1, STEPS + 1))
    for metric in ("cpu.util", "cpu.mem"):
        (series,) = db.list_series(info.id, metric)
        extent = db.series_extent(series.id)
        assert extent is not None and extent[2] >= 2, (metric, extent)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["before-init", "after-init"])
def test_torchrun_ranks_share_one_trial(
    how: str, sqlite_url: str, db: Store, script: Path, tmp_path: Path
) -> None:
    run(torchrun(script, sqlite_url, str(tmp_path / "out"), how, str(STEPS)))
    (info,) = db.list_trials(db.get_run("ddp").id)
    assert (info.name, info.params, info.state) == ("tiny", {"lr": 0.1}, "completed")
    check_one_trial(db, info, tmp_path)


@pytest.mark.slow
def test_under_tunescope_run_every_rank_joins(
    sqlite_url: str, db: Store, script: Path, tmp_path: Path
) -> None:
    tunescope = [sys.executable, "-m", "tunescope", "run", "--store", sqlite_url]
    tunescope += ["--run", "cli-ddp", "--interval", "0.2", "--"]
    run(tunescope + torchrun(script, sqlite_url, str(tmp_path / "out"), "cli", str(STEPS)))
    (info,) = db.list_trials(db.get_run("cli-ddp").id)
    assert info.state == "completed"
    check_one_trial(db, info, tmp_path)


def test_one_process_alone_is_an_ordinary_trial(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunescope.integrations import distributed as tsd

    for k in ("RANK", "WORLD_SIZE", ts.ENV_TRIAL_KEY):
        monkeypatch.delenv(k, raising=False)
    with tsd.trial(run="alone", params={"k": 1}, store=sqlite_url, sampler=False) as trial:
        assert trial.recording and not trial.attached and not trial.replica
        trial.mark("here")
    with (
        pytest.raises(RuntimeError, match="boom"),
        tsd.trial(run="alone", store=sqlite_url, sampler=False),
    ):
        raise RuntimeError("boom")
    states = [(t.params, t.state, t.error) for t in db.list_trials(db.get_run("alone").id)]
    assert states == [({"k": 1}, "completed", None), ({}, "failed", "RuntimeError: boom")]


@pytest.mark.ml
def test_a_rank_other_than_0_joins_as_a_replica(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the SDK does in rank 1 of a trial: records none of the events and scalars that
    rank 0 records too, and leaves the trial's state alone."""
    import torch

    info = db.create_trial(db.ensure_run("ranks").id, "shared")
    for k, v in ts.trial_env(sqlite_url, "ranks", info.key, 1.0).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RANK", "1")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.run() as run, run.trial() as trial:
        assert trial.attached and trial.replica and trial.recording
        assert not trial.auto_optimizer_steps
        trial.auto_optimizer_steps = True  # a replica stays without steps
        for batch in trial.watch([torch.ones(1, 2)] * 3):
            model(batch).sum().backward()
            opt.step()
            trial.optimizer_step(1)
            trial.log(step=1, loss=1.0)
        with trial.evaluation():
            trial.mark("m")
        trial.checkpoint(sqlite_url)
    monkeypatch.setenv("RANK", "0")
    with ts.run() as run, run.trial() as trial:  # rank 0 records
        assert not trial.replica
        opt.step()
    got = db.events(info.id, 0.0, time.time() + 60).events
    assert got is not None
    assert [(e.kind, e.step) for e in got] == [("optimizer_step", 1)]
    assert db.scalars(info.id) == []
    assert db.get_trial(info.id).state == "running"


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({}, 0),
        ({"RANK": "3", "LOCAL_RANK": "1"}, 3),  # torchrun
        ({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, 1),  # Lightning's launcher, first node
        ({"LOCAL_RANK": "0", "NODE_RANK": "1", "WORLD_SIZE": "4"}, 1),  # another node: > 0
    ],
)
def test_rank_from_the_environment(
    env: dict[str, str], rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunescope.integrations import distributed as tsd

    for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert tsd.rank() == rank
    assert tsd.world_size() == int(env.get("WORLD_SIZE", "1"))
