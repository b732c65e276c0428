"""The sampler's protocol, written once for both of its sides: the launchers (the SDK's
trials, ``tunescope run``, the distributed integration) and the sampler process
(``python -m tunescope.collect``). Neither side imports the other; both import this.

Watch mode (the SDK's trials): the sampler samples the process tree of ``--pid``.

* stdin, lines: ``stop`` asks for an orderly stop (a final sample, the writes; the trial's
  state is left alone). ``exit CODE`` says the root process ended with CODE (``tunescope
  run``'s wrapper, when a sampler it restarted watches a command it reaped): the sampler ends
  the trial accordingly and stops. End of input alone is not a stop: the sampler keeps
  sampling while the root process lives, and ends the trial ``failed`` when the root ends
  without a ``stop`` (once the root ended, while stdin is still open, it waits up to a second
  for the ``exit CODE`` of a launcher that reaped it).
* stdout: one line, ``ready``, once the first sample is taken (and written, when the store
  answers within a second). Nothing else is ever written there.

Run mode (``tunescope run``): ``--exec`` makes the sampler start the command itself, so that
it is the command's parent and knows its exit code whoever else dies. Its status goes to the
file descriptor ``--status-fd``: ``pid N`` once the command is started, ``exit CODE`` once
it ended (CODE as a shell gives it: 128 + N after signal N).

Node samplers (``--node``, either mode): a multi-node trial has one sampler per node; the
one on node rank 0 is the primary and behaves as above; the others sample their node only and
never end the trial (``exit CODE``, the root's end and the command's exit leave its state
alone) nor record events.

Environment: the store URL (password included) comes in ``TUNESCOPE_STORE`` and never on
the command line; the trial's spec (to create it if the store has not seen it yet) in
:data:`ENV_SPEC`.

Exit codes: 0 after a stop, 1 when the sampler cannot start, 2 for bad arguments.
"""

from __future__ import annotations

__all__ = [
    "ENV_SPEC",
    "EXIT",
    "EXIT_BAD_ARGS",
    "EXIT_CANNOT_START",
    "MODULE",
    "NODE",
    "PID",
    "READY",
    "STOP",
    "exit_code_of",
]

MODULE = "tunescope.collect"
READY = "ready"
STOP = "stop"
EXIT = "exit"
PID = "pid"
NODE = "--node"
ENV_SPEC = "TUNESCOPE_SAMPLER_SPEC"
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
