"""Two nodes on one machine: each "node" runs in its own UTS and PID namespaces (its own host
name and process tree), torchrun ``--nnodes 2`` with one gloo DDP rank per node, one node
slowed by extra CPU work every step. The job records one trial holding both nodes' series, its
optimizer steps once, its end once both nodes are done, and a straggler finding naming the
slow node; through ``tunescope run`` on each node, through the SDK alone, and through
``tunescope run`` on the first node only with the SDK in the script (the other node's rank
gets the trial from rank 0 rather than waiting for it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from http_helpers import free_port
from tunescope.analyze import findings_for_trial
from tunescope.collect._loop import STARVED
from tunescope.store import open_store

pytestmark = [pytest.mark.ml, pytest.mark.slow]

STEPS = 40
SLOW = "node-b"

TRAIN = """
    import os, socket, sys, time
    import torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import tunescope.record as ts
    import tunescope.integrations.distributed as tsd

    store, how, steps, slow = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def train():
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        burn = socket.gethostname() == slow
        for k in range(steps):
            if burn:  # the straggler: CPU work the other node waits for, every step
                end = time.perf_counter() + 0.1
                while time.perf_counter() < end:
                    pass
            x = torch.randn(16, 8)
            loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()

    if how in ("sdk", "head"):  # rank 0 opens (or joins) the trial, node 1's rank joins it
        with tsd.trial(run="mn", name="ddp", store=store, interval=0.2):
            dist.init_process_group("gloo")
            train()
    else:  # under tunescope run on each node: the ranks join through the environment
        dist.init_process_group("gloo")
        assert ts.current_trial() is not None
        train()
    dist.destroy_process_group()
"""

NODE = """
    import os, socket, subprocess, sys

    socket.sethostname(sys.argv[1])
    code = subprocess.call(sys.argv[2:])
    while True:  # the node's PID 1: samplers outlive the command; wait for every orphan
        try:
            os.wait()
        except ChildProcessError:
            break
    sys.exit(code)
"""


def start_node(
    tmp_path: Path, name: str, rank: int, port: int, how: str, db: str
) -> subprocess.Popen[str]:
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--nproc-per-node",
        "1",
        str(tmp_path / "train.py"),
        db,
        how,
        str(STEPS),
        SLOW,
    ]
    tunescope = [sys.executable, "-m", "tunescope", "run", "--store", db, "--run", "mn"]
    if how == "cli":  # the job id alone; the node rank is torchrun's
        torchrun = [*tunescope, "--job-id", "job-1", "--interval", "0.2", "--", *torchrun]
    elif how == "head" and rank == 0:  # tunescope run on the first node only
        torchrun = [*tunescope, "--interval", "0.2", "--", *torchrun]
    unshare = ["unshare", "--uts", "--pid", "--fork", "--mount-proc"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNESCOPE_", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [*unshare, sys.executable, str(tmp_path / "node.py"), name, *torchrun],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("how", ["cli", "sdk", "head"])
def test_two_nodes_record_one_trial_with_both_hosts_and_name_the_straggler(
    tmp_path: Path, how: str
) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    (tmp_path / "node.py").write_text(textwrap.dedent(NODE))
    db = str(tmp_path / "mn.db")
    port = free_port()
    nodes = [start_node(tmp_path, n, k, port, how, db) for k, n in enumerate(("node-a", SLOW))]
    outs = [p.communicate(timeout=120)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[-3000:] for o in outs)

    with open_store(db) as st:
        (trial,) = st.list_trials(st.get_run("mn").id)
        assert trial.state == "completed"
        if how != "sdk":  # node 0's command, which ends once both nodes are done
            assert st.exit_code(trial.id) == 0
        assert set(st.hosts(trial.id)) == {"node-a", SLOW}
        cpu = {s.host: s for s in st.list_series(trial.id, "cpu.util")}
        assert set(cpu) == {"node-a", SLOW}
        for s in cpu.values():
            assert len(st.read_samples(s.id)[0]) >= 5, s.host
        # events once: rank 0's steps only, nothing from node b's sampler or rank
        assert st.count_events(trial.id, kinds=["optimizer_step"]) == STEPS
        # (a busy machine may add the primary sampler's "sampler starved" gaps: not events of
        # a rank, and a node sampler records none)
        assert len([e for e in st.all_events(trial.id) if e.name != STARVED]) == STEPS
        found = [f for f in findings_for_trial(st, trial) if f.rule == "straggler_node"]
    assert [f.evidence["host"] for f in found] == [SLOW], found
    means = found[0].evidence["host_means_pct"]
    assert means[SLOW] > means["node-a"]
