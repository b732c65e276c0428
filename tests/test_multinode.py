"""Multi-node trials: the job identity every node derives one trial key from, node samplers
that sample a node and never end the trial, and ``tunescope run`` on each node of a job."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import tunescope.record as ts
from cli_helpers import cli, one_line_error
from tunescope.errors import ConfigError
from tunescope.record import Job, find_job, job_key
from tunescope.store import Batch, Store, TrialSpec, open_store

TORCHRUN = ["torchrun", "--nnodes", "2", "--node-rank", "1", "--rdzv-id", "abc"]


# ---------------------------------------------------------------------- the job's identity
@pytest.mark.parametrize(
    ("command", "kwargs", "env", "job"),
    [
        (["python", "t.py"], {"job_id": "j7", "node_rank": 2}, {}, Job("j7", "--job-id", 2)),
        (
            ["python", "t.py"],
            {},
            {"TUNESCOPE_JOB_ID": "e1", "NODE_RANK": "1"},
            Job("e1", "TUNESCOPE_JOB_ID", 1),
        ),
        (
            ["python", "t.py"],
            {},
            {"TUNESCOPE_JOB_ID": "e1", "GROUP_RANK": "0"},
            Job("e1", "TUNESCOPE_JOB_ID", 0),
        ),
        ([*TORCHRUN, "train.py", "--node-rank", "0"], {}, {}, Job("abc", "torchrun --rdzv-id", 1)),
        (
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=1:4",
                "--rdzv_id=x",
                "--node_rank=3",
                "--master-addr",
                "10.0.0.1",
                "train.py",
            ],
            {},
            {},
            Job("x", "torchrun --rdzv-id", 3),
        ),
        (
            ["accelerate", "launch", "--num_machines", "2", "--machine_rank", "1", "t.py"],
            {"job_id": "acc"},
            {"NODE_RANK": "0"},
            Job("acc", "--job-id", 1),
        ),
        (
            ["python", "t.py"],
            {},
            {
                "SLURM_JOB_ID": "77",
                "SLURM_STEP_ID": "2",
                "SLURM_STEP_NUM_NODES": "4",
                "SLURM_NODEID": "3",
            },
            Job("77.2", "SLURM_JOB_ID", 3),
        ),
        (
            ["python", "t.py"],
            {"node_rank": 0},
            {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_NODEID": "1"},
            Job("77", "SLURM_JOB_ID", 0),
        ),
    ],
)
def test_the_job_and_the_node_rank_are_found_where_launchers_put_them(
    command: list[str], kwargs: dict[str, object], env: dict[str, str], job: Job
) -> None:
    assert find_job(command, env=env, **kwargs) == job  # type: ignore[arg-type]
    assert job.primary == (job.node_rank == 0)


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["python", "t.py"], {}),
        (["python", "t.py"], {"SLURM_JOB_ID": "5", "SLURM_NNODES": "1", "SLURM_NODEID": "0"}),
        (["torchrun", "--nnodes", "1", "--rdzv-id", "abc", "t.py"], {}),
        (["torchrun", "--nnodes", "2", "--rdzv-id", "none", "t.py"], {}),  # torchrun's default
        (["python", "t.py", "--rdzv-id", "abc", "--nnodes", "2"], {}),  # not torchrun's
    ],
)
def test_one_node_is_no_job(command: list[str], env: dict[str, str]) -> None:
    assert find_job(command, env=env) is None


@pytest.mark.parametrize(
    ("kwargs", "env", "needle"),
    [
        ({"job_id": "j"}, {}, "this node's rank is unknown: give --node-rank"),
        ({}, {"TUNESCOPE_JOB_ID": "j", "NODE_RANK": "x"}, "$NODE_RANK must be a whole number"),
        ({}, {"TUNESCOPE_JOB_ID": "j", "SLURM_NODEID": "-1"}, "$SLURM_NODEID must be 0 or more"),
        ({"node_rank": 1}, {}, "--node-rank needs a job id"),
        ({"job_id": " "}, {}, "--job-id must not be empty"),
    ],
)
def test_a_job_without_a_usable_node_rank_is_refused(
    kwargs: dict[str, object], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        find_job(["python", "t.py"], env=env, **kwargs)  # type: ignore[arg-type]
    assert needle in str(err.value)


def test_the_nodes_derive_one_key_per_project_run_job_and_trial() -> None:
    key = job_key("p", "r", "j", "t")
    assert key == job_key("p", "r", "j", "t") and len(key) == 32
    assert int(key, 16) >= 0
    others = {job_key("q", "r", "j", "t"), job_key("p", "s", "j", "t"), job_key("p", "r", "k", "t")}
    assert key not in others and len(others | {job_key("p", "r", "j", "u")}) == 4


# ---------------------------------------------------------------------- node samplers
def _spec(run: str = "mn") -> TrialSpec:
    return TrialSpec(
        key=ts.job_key("default", run, "j", ""), run=run, start=time.time(), interval=0.2
    )


def test_a_node_sampler_never_ends_the_trial_when_its_node_ends(sqlite_url: str, db: Store) -> None:
    """Watch mode: the root process of a node ends without a stop; an ordinary sampler would
    record the trial ``failed`` (test_record_process), a node sampler leaves it running."""
    spec = _spec()
    tid = db.write(Batch(spec.key, spec=spec))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    handle = ts.start_sampler(sqlite_url, spec, child.pid, 0.2, node=True, ready_timeout=20)
    assert handle is not None
    child.wait(10)
    assert handle.wait(30) == 0  # it saw its root end and exited by itself
    assert handle.proc.stdin is not None
    handle.proc.stdin.close()
    info = db.get_trial(tid)
    assert info.state == "running" and info.heartbeat is not None
    cpu = [s for s in db.list_series(tid) if s.metric == "cpu.util"]
    assert cpu and len(db.read_samples(cpu[0].id)[0]) >= 2
    assert db.count_events(tid) == 0


# the CLI runs as on a node outside any job: no job id, rank or store from this environment
NO_JOB = ("TUNESCOPE_", "SLURM_")


def test_tunescope_run_on_each_node_records_one_trial_ended_by_node_0(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    common = ("run", "--store", db, "--run", "job", "--interval", "0.2")
    # node 1 first, and it fails: the trial goes on, its exit code is the command's
    node = cli(
        *common,
        "--job-id",
        "j1",
        "--node-rank",
        "1",
        "--",
        sys.executable,
        "-c",
        "import time, sys; time.sleep(0.6); sys.exit(3)",
        drop=NO_JOB,
    )
    assert node.returncode == 3, node.stderr
    assert "(job j1, node 1)" in node.stderr
    with open_store(db) as st:
        (trial,) = st.list_trials(st.get_run("job").id)
        assert trial.state == "running"
    # node 0, told by $TUNESCOPE_JOB_ID and $NODE_RANK, joins it and ends it
    primary = cli(
        *common,
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(0.6)",
        env={"TUNESCOPE_JOB_ID": "j1", "NODE_RANK": "0"},
        drop=NO_JOB,
    )
    assert primary.returncode == 0, primary.stderr
    with open_store(db) as st:
        (again,) = st.list_trials(st.get_run("job").id)
        assert again.id == trial.id and again.state == "completed"
        assert again.key == job_key("default", "job", "j1", "")
    # the same job id again names a trial that ended: refused before anything starts
    marker = tmp_path / "started"
    late = cli(
        *common, "--job-id", "j1", "--node-rank", "1", "--", "touch", str(marker), drop=NO_JOB
    )
    line = one_line_error(late, "job 'j1' already recorded trial")
    assert "give another --job-id" in line and not marker.exists()


def test_node_rank_without_a_job_is_bad_input(tmp_path: Path) -> None:
    p = cli("run", "--store", str(tmp_path / "t.db"), "--node-rank", "1", "--", "true", drop=NO_JOB)
    one_line_error(p, "--node-rank needs a job id")
    assert not (tmp_path / "t.db").exists()
