"""The sampler's protocol, written once for both of its sides: the launchers (the SDK's
trials, ``tunescope run``, the distributed integration) and the sampler process
(``python -m tunescope.collect``). Neither side imports the other; both import this: the
words below are its constants, and :func:`sampler_command` writes the sampler's command line,
which the sampler's parser reads with the same option names.

Watch mode (the SDK's trials): the sampler samples the process tree of ``--pid``.

* stdin, lines: ``stop`` asks for an orderly stop (a final sample, the writes; the trial's
  state is left alone). ``end JSON`` is a stop that hands over how the launcher's trial
  ended (``{"state", "t", "error", "exit_code"}``): the sampler writes it with its final
  batch, changing nothing if the trial has ended by then (the launcher writes it too: the
  end is kept by whichever of them can keep it). After ``stop`` or ``end`` the launcher may
  send ``batch JSON`` lines (a ``Batch`` as ``Batch.to_json`` writes it; at most 48 KiB in
  all): what its writer could keep neither in the store nor in the spool as it left; the
  sampler writes them with its own, and keeps them in memory until the store is back; then
  it closes stdin. ``exit CODE`` says the root process ended
  with CODE (``tunescope run``'s wrapper, when a sampler it restarted watches a command it
  reaped): the sampler ends the trial accordingly and stops. End of input alone is not a
  stop: the sampler keeps sampling while the root process lives (an ``exec()`` keeps it
  alive as the new program), and ends the trial ``failed`` when the root ends without a
  ``stop`` (once the root ended, while stdin is still open, it waits up to a second for the
  ``exit CODE`` of a launcher that reaped it).
* stdout: one line, ``ready``, once the first sample is taken (and written, when the store
  answers within a second). Nothing else is ever written there.

Run mode (``tunescope run``): ``--exec`` makes the sampler start the command itself, so that
it is the command's parent and knows its exit code whoever else dies. Its status goes to the
file descriptor ``--status-fd``: ``pid N`` once the command is started, ``exit CODE`` once
it ended (CODE as a shell gives it: 128 + N after signal N). The command runs in a process
group of its own; with ``--foreground`` (the launcher was the terminal's foreground group)
that group is made the terminal's foreground group, so that the terminal's signals reach the
command alone. A SIGTERM does not stop a run-mode sampler while the command lives (systemd
signals every process of a unit): it goes on and records the command's end.

Samplers run in process groups of their own, so that a signal to the training's group
(``timeout``, Slurm, a shell's job control) never stops the one process that records how the
training ended.

How a trial ended, in words both sides use (:data:`OOM_KERNEL`, :data:`OOM_CUDA`): the
kernel's OOM killer ended the root (the ``oom_kill`` counter of its memory cgroup rose and it
died of SIGKILL), or ``torch.cuda.OutOfMemoryError`` ended the trial.

Node samplers (``--node``, either mode): a multi-node trial has one sampler per node; the
one on node rank 0 is the primary and behaves as above; the others sample their node only and
never end the trial (``exit CODE``, the root's end and the command's exit leave its state
alone) nor record events.

Environment: the store URL (password included) comes in ``TUNESCOPE_STORE`` and never on
the command line; the trial's spec (to create it if the store has not seen it yet) in
``TUNESCOPE_SAMPLER_SPEC``; for a SQLite store, the file the trial began in (``DEVICE:INODE``,
when there was one at the start) in ``TUNESCOPE_STORE_FILE``: the sampler then writes into that
file or none, never creating a new store at the path (one deleted before the sampler came up,
under load) nor writing into another put there; it spools instead (their names:
``tunescope/_env.py``).

Exit codes: 0 after a stop, 1 when the sampler cannot start, 2 for bad arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BATCH",
    "END",
    "EXEC",
    "EXIT",
    "EXIT_BAD_ARGS",
    "EXIT_CANNOT_START",
    "FOREGROUND",
    "GAP_SINCE",
    "INTERVAL",
    "MODULE",
    "NODE",
    "OOM_CUDA",
    "OOM_KERNEL",
    "PID",
    "READY",
    "ROOT_PID",
    "STATUS_FD",
    "STDERR_FD",
    "STOP",
    "TRIAL_ID",
    "TRIAL_KEY",
    "exit_code_of",
    "sampler_command",
]

MODULE = "tunescope.collect"

# the words: the sampler's stdout, the launcher's stdin lines, run mode's status lines
READY = "ready"
STOP = "stop"
END = "end"
BATCH = "batch"
EXIT = "exit"
PID = "pid"

# the sampler's options (:func:`sampler_command` writes its command line)
TRIAL_KEY = "--trial-key"
TRIAL_ID = "--trial"
ROOT_PID = "--pid"
INTERVAL = "--interval"
GAP_SINCE = "--gap-since"
NODE = "--node"
STATUS_FD = "--status-fd"
STDERR_FD = "--stderr-fd"
FOREGROUND = "--foreground"
EXEC = "--exec"

OOM_KERNEL = "out of memory (killed by the kernel)"
OOM_CUDA = "out of memory (CUDA)"
EXIT_CANNOT_START = 1
EXIT_BAD_ARGS = 2


def exit_code_of(status: int) -> int:
    """A ``waitpid`` status as a shell reports it: the exit code, or 128 + N for signal N."""
    import os

    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 1


def sampler_command(
    key: str,
    interval: float,
    *,
    pid: int | None = None,
    gap_since: float | None = None,
    status_fd: int | None = None,
    stderr_fd: int | None = None,
    node: bool = False,
    foreground: bool = False,
    command: Sequence[str] | None = None,
    module: str = MODULE,
) -> list[str]:
    """The sampler's command line (this interpreter's ``-m`` ``module``) for the trial of
    ``key``: watch mode with ``pid`` (a replacement sampler with ``gap_since``), run mode with
    ``command`` (its status on ``status_fd``, its stderr on ``stderr_fd``); ``node``: a node
    sampler; ``foreground``: see the module doc. ``module`` is for tests."""
    import sys

    cmd = [sys.executable, "-m", module, TRIAL_KEY, key]
    if pid is not None:
        cmd += [ROOT_PID, str(pid)]
    cmd += [INTERVAL, repr(float(interval))]
    if gap_since is not None:
        cmd += [GAP_SINCE, repr(float(gap_since))]
    if status_fd is not None:
        cmd += [STATUS_FD, str(status_fd)]
    if stderr_fd is not None:
        cmd += [STDERR_FD, str(stderr_fd)]
    if node:
        cmd.append(NODE)
    if foreground:
        cmd.append(FOREGROUND)
    if command is not None:
        cmd += [EXEC, "--", *command]
    return cmd
