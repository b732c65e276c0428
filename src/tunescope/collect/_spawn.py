"""Run mode's first step, before anything slow is imported: start the command.

``python -m tunescope.collect ... --exec -- CMD`` makes the sampler the command's parent (see
``tunescope/_protocol.py``). The command must not wait for the sampler's imports, so
``__main__`` calls :func:`spawn_from_argv` first thing; it uses nothing but ``os`` (and the
protocol's words, which import nothing).

The command runs in a process group of its own (a signal to the launcher's group, such as
``timeout``'s or Slurm's, does not reach it twice: ``tunescope run`` forwards what it gets).
With ``foreground``, the group is made the controlling terminal's foreground group, so that
the terminal's Ctrl-C and Ctrl-\\ reach the command alone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence

import tunescope._protocol as protocol

__all__ = [
    "CHILD_DEFAULT_SIGNALS",
    "give_terminal",
    "let_go_of_stdio",
    "spawn",
    "spawn_from_argv",
    "terminal_is_ours",
]

CHILD_DEFAULT_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGPIPE,
    signal.SIGXFSZ,
)
"""Signals the command gets back at their default (the sampler ignores some of them)."""


def spawn(
    command: Sequence[str],
    stderr_fd: int | None,
    env: Mapping[str, str],
    env_drop: str,
    *,
    foreground: bool = False,
) -> int:
    """Start ``command`` (searched on PATH) with the signals it would have had from a shell,
    its stderr on ``stderr_fd`` when given, and ``env`` less ``env_drop``, in a process group
    of its own, made the terminal's foreground group with ``foreground`` (see the module
    doc)."""
    actions: list[tuple[int, int, int]] = []
    if stderr_fd is not None:
        os.set_inheritable(stderr_fd, False)
        actions.append((os.POSIX_SPAWN_DUP2, stderr_fd, 2))
    env = {k: v for k, v in env.items() if k != env_drop}
    pid = os.posix_spawnp(
        command[0],
        list(command),
        env,
        file_actions=actions,
        setpgroup=0,
        setsigdef=CHILD_DEFAULT_SIGNALS,
        setsigmask=(),
    )
    if foreground:
        give_terminal(pid)
    return pid


def give_terminal(pgid: int) -> bool:
    """Make ``pgid`` the controlling terminal's foreground process group (SIGTTOU blocked
    meanwhile, as a background caller needs); True if done. A command that already tried to
    read the terminal and was stopped for it (SIGTTIN) is continued."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    old = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTTOU,))
    try:
        os.tcsetpgrp(fd, pgid)
        done = True
    except OSError:
        done = False
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(fd)
    if done:
        try:
            with open(f"/proc/{pgid}/stat", "rb") as f:
                raw = f.read()
            if raw[raw.rfind(b")") + 2 :].split()[:1] == [b"T"]:
                os.killpg(pgid, signal.SIGCONT)
        except (OSError, IndexError):
            pass
    return done


def terminal_is_ours() -> bool:
    """Whether this process's group is its controlling terminal's foreground group (a
    launcher started in the foreground of a terminal), False without a terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def let_go_of_stdio(stderr_fd: int | None) -> None:
    """Run mode, once the command is started: the sampler keeps none of the terminal's or the
    pipes' ends it was given for the command (its stdin, stdout and that stderr), so that a
    reader of the command's output sees its end when the command ends, not when the sampler
    has finished writing."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        os.dup2(null, 1)
    finally:
        os.close(null)
    if stderr_fd is not None:
        try:
            os.close(stderr_fd)
        except OSError:
            pass


def _value(argv: Sequence[str], name: str) -> int | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            try:
                return int(argv[i + 1])
            except ValueError:
                return None
        if a.startswith(name + "="):
            try:
                return int(a.split("=", 1)[1])
            except ValueError:
                return None
    return None


def spawn_from_argv(argv: Sequence[str], env_drop: str) -> int | OSError | None:
    """In run mode (``--exec`` in ``argv``), start the command and say ``pid N`` on the
    status descriptor; the pid, the OSError that prevented it, or None outside run mode."""
    if protocol.EXEC not in argv:
        return None
    own = list(argv[: list(argv).index(protocol.EXEC)])
    rest = list(argv[list(argv).index(protocol.EXEC) + 1 :])
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        return None
    status = _value(own, protocol.STATUS_FD)
    stderr_fd = _value(own, protocol.STDERR_FD)
    try:
        pid = spawn(rest, stderr_fd, os.environ, env_drop, foreground=protocol.FOREGROUND in own)
    except OSError as exc:
        return exc
    let_go_of_stdio(stderr_fd)
    if status is not None:
        try:
            os.write(status, f"{protocol.PID} {pid}\n".encode())
        except OSError:
            pass
    return pid
