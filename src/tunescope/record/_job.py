"""A multi-node job's identity, from which the nodes agree on one trial without talking.

``tunescope run -- CMD`` started on every node of a job (torchrun on each node, or under
Slurm's ``srun``) makes one trial of the whole job: every node derives the same trial key
from the job's identity (:func:`job_key`), and the node of rank 0 is the *primary*, whose
sampler records the trial's end; the others start *node samplers* (``tunescope/_protocol.py``).

The job id, first found of:

* ``--job-id`` (``tunescope run``'s option), then ``$TUNESCOPE_JOB_ID``: always a job;
* torchrun's ``--rdzv-id`` / ``--rdzv_id`` in the command, when its ``--nnodes`` allows more
  than one node (``"none"``, torchrun's default, is no id);
* ``$SLURM_JOB_ID`` with ``$SLURM_STEP_ID`` (one ``srun`` is one step), when the step spans
  more than one node (``$SLURM_STEP_NUM_NODES``, else ``$SLURM_NNODES``).

The node rank, first found of: ``--node-rank``, torchrun's ``--node-rank`` / ``--node_rank``
(or ``accelerate launch``'s ``--machine_rank``) in the command, ``$SLURM_NODEID``,
``$NODE_RANK``, ``$GROUP_RANK``. A job without one is
refused (ConfigError): two primaries would both end the trial.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tunescope._env import ENV_JOB_ID
from tunescope.errors import ConfigError
from tunescope.store import made_key

__all__ = ["Job", "find_job", "job_key"]

_NODE_VARS = ("SLURM_NODEID", "NODE_RANK", "GROUP_RANK")


@dataclass(frozen=True)
class Job:
    """A multi-node job: its id, where the id came from, and this node's rank."""

    id: str
    source: str
    node_rank: int

    @property
    def primary(self) -> bool:
        """Whether this node records the trial's end (node rank 0)."""
        return self.node_rank == 0


def job_key(project: str, run: str, job_id: str, ordinal: str = "") -> str:
    """The trial key every node of job ``job_id`` derives alike (32 hex digits);
    ``ordinal`` tells apart the trials of one job in one run (the trial's name)."""
    return made_key("\0".join(("tunescope-job", project, run, job_id, ordinal)))


def _launcher_args(command: Sequence[str]) -> list[str] | None:
    """The arguments of a torchrun command (``torchrun ...`` or ``python -m
    torch.distributed.run ...``) or of ``accelerate launch ...``, up to its script; None for
    another command."""
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]) == "torchrun":
        args = cmd[1:]
    elif len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] in ("torch.distributed.run", "torchrun"):
        args = cmd[3:]
    elif len(cmd) >= 2 and os.path.basename(cmd[0]) == "accelerate" and cmd[1] == "launch":
        args = cmd[2:]
    else:
        return None
    out: list[str] = []
    for a in args:
        if not a.startswith("-") and not (out and _wants_value(out[-1])):
            break  # the training script
        out.append(a)
    return out


def _wants_value(arg: str) -> bool:
    """Whether ``arg`` is a torchrun option whose value is the next argument."""
    flags = ("--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path")
    return arg.startswith("-") and "=" not in arg and arg not in flags


def _option(args: Sequence[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _int(value: str | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"{what} must be a whole number (got {value!r})") from None
    if n < 0:
        raise ConfigError(f"{what} must be 0 or more (got {n})")
    return n


def _many_nodes(nnodes: str | None) -> bool:
    """Whether torchrun's ``--nnodes`` (N or MIN:MAX) allows more than one node."""
    if not nnodes:
        return False
    try:
        return int(nnodes.split(":")[-1]) > 1
    except ValueError:
        return False


def find_job(
    command: Sequence[str] = (),
    *,
    job_id: str | None = None,
    node_rank: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Job | None:
    """The multi-node job ``command`` runs in (see the module doc), or None outside one.
    Raises ConfigError for a job without a node rank, or a malformed one."""
    env = os.environ if env is None else env
    targs = _launcher_args(command) or []
    found: tuple[str, str] | None = None
    if job_id is not None:
        if not job_id.strip():
            raise ConfigError("--job-id must not be empty")
        found = (job_id, "--job-id")
    elif env.get(ENV_JOB_ID, "").strip():
        found = (env[ENV_JOB_ID], ENV_JOB_ID)
    else:
        rdzv = _option(targs, "--rdzv-id", "--rdzv_id")
        if rdzv and rdzv != "none" and _many_nodes(_option(targs, "--nnodes")):
            found = (rdzv, "torchrun --rdzv-id")
        elif env.get("SLURM_JOB_ID"):
            nodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or "1"
            if _many_nodes(nodes):
                step = env.get("SLURM_STEP_ID")
                found = (env["SLURM_JOB_ID"] + (f".{step}" if step else ""), "SLURM_JOB_ID")
    if found is None:
        if node_rank is not None:
            raise ConfigError(f"--node-rank needs a job id: give --job-id or ${ENV_JOB_ID}")
        return None
    rank = node_rank
    if rank is None:
        names = ("--node-rank", "--node_rank", "--machine_rank", "--machine-rank")
        rank = _int(_option(targs, *names), "the launcher's --node-rank")
    for var in _NODE_VARS:
        if rank is None:
            rank = _int(env.get(var), f"${var}")
    if rank is None:
        raise ConfigError(
            f"job {found[0]!r} (from {found[1]}) runs on several nodes but this node's rank is "
            "unknown: give --node-rank (0 on the node that records the trial's end)"
        )
    return Job(found[0], found[1], rank)
