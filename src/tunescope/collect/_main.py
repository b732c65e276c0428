"""The sampler process: ``python -m tunescope.collect --trial-key KEY --pid PID`` (watch
mode) or ``... --trial-key KEY --status-fd N --exec -- CMD`` (run mode). The protocol with
the processes that start it is ``tunescope/_protocol.py``.

The store comes from ``$TUNESCOPE_STORE`` (never the command line: it may hold a password),
the trial's spec from ``$TUNESCOPE_SAMPLER_SPEC``. SIGINT, SIGHUP and SIGQUIT are ignored:
Ctrl-C and a closing terminal reach the whole process group, and the sampler must outlive the
training to record its end; SIGTERM stops it in order, like ``stop``.

How the sampler ends a trial: in run mode, with the command's exit code (completed on 0, else
failed), whoever else died; in watch mode, on ``exit CODE`` the same way, and when the root
process ends without a ``stop``: ``failed`` (if no one recorded another end first). After a
``stop`` it leaves the state alone. Then it *lingers*: it gives the store up to
``$TUNESCOPE_LINGER`` seconds (default :data:`LINGER_S`) to take what it holds, spools what is
left, and, once the store is back, replays the spool files other processes released (a
training that ended while the store was away hands its last batches over that way).

A *node sampler* (``--node``) samples one node of a multi-node trial (its samples and
heartbeats, under its host name) and never ends the trial nor records events: the primary
sampler, on node rank 0, does both once for the whole job. In run mode it still reports the
command's exit code on the status descriptor.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

import tunescope._protocol as protocol
from tunescope._once import Once
from tunescope.collect._gpu import GpuBackend, open_gpu_backend
from tunescope.collect._loop import (
    MIN_INTERVAL,
    Root,
    Sampler,
    StdinWatch,
    StopSignal,
    end_of,
    failure_message,
)
from tunescope.collect._once import LOGGER_NAME
from tunescope.collect._spawn import let_go_of_stdio, spawn
from tunescope.errors import TunescopeError
from tunescope.store import TrialEnd, TrialSpec, Writer, open_store, replay, resolve_url

__all__ = ["LINGER_S", "main", "parser"]

LINGER_S = 120.0
"""Longest a sampler waits, after its trial ended, for the store to take what it holds."""

READY_WAIT_S = 1.0
"""How long the first sample may take to land before ``ready`` is said anyway."""


def parser() -> argparse.ArgumentParser:
    """The sampler's command line."""
    p = argparse.ArgumentParser(
        prog="python -m tunescope.collect",
        description="Sample a trial's process tree (and its GPUs) into the tunescope store "
        "$TUNESCOPE_STORE names, until 'stop' on stdin or the end of the trial's root process.",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--trial-key", metavar="KEY", help="key of the trial to record")
    who.add_argument("--trial", metavar="ID", type=int, help="id of a trial already in the store")
    p.add_argument(
        "--pid",
        metavar="PID",
        type=int,
        help="root process of the trial (watch mode); its descendants are watched too",
    )
    p.add_argument(
        "--interval",
        metavar="S",
        type=float,
        default=1.0,
        help=f"seconds between samples (default 1.0, at least {MIN_INTERVAL})",
    )
    p.add_argument(
        "--gap-since",
        metavar="T",
        type=float,
        default=None,
        help="this sampler replaces one that died, last seen alive at epoch T",
    )
    p.add_argument(
        "--node",
        action="store_true",
        help="node sampler: sample this node's part of a multi-node trial; the primary "
        "sampler (node rank 0) records the trial's end and events, this one neither",
    )
    p.add_argument(
        "--status-fd",
        metavar="FD",
        type=int,
        default=None,
        help="run mode: file descriptor for 'pid N' and 'exit CODE' lines",
    )
    p.add_argument(
        "--stderr-fd",
        metavar="FD",
        type=int,
        default=None,
        help="run mode: file descriptor the command's stderr goes to",
    )
    p.add_argument(
        "--exec",
        dest="run_mode",
        action="store_true",
        help="run mode: start the command that follows (after --) and record it",
    )
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(the sampler's own arguments, the command after ``--exec [--]`` or None)."""
    args = list(argv)
    if "--exec" not in args:
        return args, None
    i = args.index("--exec")
    rest = args[i + 1 :]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return [*args[: i + 1]], rest


def _setup_logging(label: str) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"tunescope sampler ({label}): %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for name in ("tunescope.store",):  # the writer's messages, in the same place
        other = logging.getLogger(name)
        other.addHandler(handler)
        other.setLevel(logging.INFO)
        other.propagate = False
    return logger


class _Status:
    """Run mode's status lines to ``tunescope run``; a closed reader is ignored."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        if fd is not None:
            os.set_inheritable(fd, False)

    def say(self, line: str) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.fd, line.encode() + b"\n")


def linger_s() -> float:
    """$TUNESCOPE_LINGER, else :data:`LINGER_S`."""
    try:
        v = float(os.environ.get("TUNESCOPE_LINGER", ""))
        return v if math.isfinite(v) and v >= 0 else LINGER_S
    except ValueError:
        return LINGER_S


def main(argv: Sequence[str] | None = None, spawned: int | OSError | None = None) -> int:
    """Run the sampler process; returns its exit code (see the module doc). ``spawned``: in
    run mode, what ``__main__`` got starting the command (its pid, or why it could not)."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # tunescope run blocks some; undo that
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(own)
    if not math.isfinite(args.interval) or args.interval < MIN_INTERVAL:
        parser().error(
            f"--interval must be at least {MIN_INTERVAL} seconds (got {args.interval:g})"
        )
    if bool(command) == (args.pid is not None):
        parser().error("give either --pid (watch mode) or --exec -- CMD (run mode)")
    status = _Status(args.status_fd)
    stop = StopSignal()
    root: Root
    if command:  # run mode: the command first, before anything slow
        if spawned is None:
            try:
                spawned = spawn(command, args.stderr_fd, os.environ, protocol.ENV_SPEC)
            except OSError as exc:
                spawned = exc
            if isinstance(spawned, int):
                status.say(f"{protocol.PID} {spawned}")
                let_go_of_stdio(args.stderr_fd)
        if isinstance(spawned, OSError):
            print(f"tunescope: could not start {command[0]}: {spawned}", file=sys.stderr)
            status.say(f"{protocol.EXIT} 127")
            return protocol.EXIT_CANNOT_START
        root = Root(spawned, child=True, stop=stop)
    else:
        root = Root(args.pid)
    logger = _setup_logging(f"trial {(args.trial_key or str(args.trial))[:8]}")
    log = Once(logger)

    def _on_term(signum: int, frame: FrameType | None) -> None:
        stop.request("stop")

    signal.signal(signal.SIGTERM, _on_term)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but "ready" may reach the real stdout
    if not command:
        StdinWatch(0, stop, log).start()
    url = resolve_url(None)
    spec: TrialSpec | None = None
    raw = os.environ.get(protocol.ENV_SPEC)
    if raw:
        try:
            spec = TrialSpec.from_json(raw)
        except ValueError as exc:
            logger.error("ignoring a bad %s: %s", protocol.ENV_SPEC, exc)
    try:
        key = args.trial_key or _key_of(url, args.trial)
    except TunescopeError as exc:
        logger.error("cannot start: %s", exc)
        return _ended_early(root, status, protocol.EXIT_CANNOT_START)
    writer = Writer(url, spec=spec if spec and spec.key == key else None, name="sampler", log=log)
    try:
        gpu: GpuBackend | None = open_gpu_backend(root.pid, log=log)
        sampler = Sampler(
            writer,
            key,
            root.pid,
            args.interval,
            gpu=gpu,
            log=log,
            gap_since=None if args.node else args.gap_since,
        )
    except TunescopeError as exc:
        logger.error("cannot start: %s", exc)
        writer.close(0.0)
        return _ended_early(root, status, protocol.EXIT_CANNOT_START)
    sampler.sample()
    sampler.flush()
    writer.flush(READY_WAIT_S)
    if not command:
        with contextlib.suppress(OSError):
            out.write(protocol.READY + "\n")
            out.flush()
    sampler.run(stop.event, root)
    end = None if args.node else _how_it_ended(stop, root)
    if command and root.code is not None:
        status.say(f"{protocol.EXIT} {root.code}")  # tunescope run exits now; we write on
    sampler.finish(end)
    _linger(writer, url, logger)
    return 0


def _key_of(url: str, trial_id: int) -> str:
    with open_store(url, create=False) as st:
        return st.get_trial(trial_id).key


def _ended_early(root: Root, status: _Status, code: int) -> int:
    """The sampler cannot record; in run mode the command still runs to its end."""
    if root.child:
        while root.ended_at is None:
            time.sleep(0.05)
        status.say(f"{protocol.EXIT} {root.code}")
    return code


def _how_it_ended(stop: StopSignal, root: Root) -> TrialEnd | None:
    now = time.time()
    if stop.reason == "stop":
        return None
    if stop.reason == "exit" and stop.code is not None:
        return end_of(stop.code, now)
    if root.child and root.code is not None:
        return end_of(root.code, root.ended_at or now)
    if root.ended():  # the root ended without a stop: killed or crashed
        return TrialEnd(
            "failed", root.ended_at or now, failure_message(root.pid), only_if_running=True
        )
    return None


def _linger(writer: Writer, url: str, logger: logging.Logger) -> None:
    """Give the store until the linger deadline to take what this sampler holds, then replay
    what other processes left in the spool (see the module doc)."""
    deadline = time.monotonic() + linger_s()
    if not writer.close(max(0.0, deadline - time.monotonic())):
        logger.warning(
            "the store did not take everything in time; what is left waits in the spool "
            "(tunescope sync writes it)"
        )
        return
    try:
        with open_store(url) as st:
            stats = replay(url, st.write, deadline=deadline)
    except TunescopeError as exc:
        logger.info("replaying the spool left for later (%s)", exc)
        return
    if stats.written or stats.rejected:
        logger.info(
            "replayed %d spooled batch(es) from %d file(s); %d rejected",
            stats.written,
            stats.files_done,
            stats.rejected,
        )
