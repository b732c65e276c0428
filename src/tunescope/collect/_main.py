"""The sampler process: ``python -m tunescope.collect --trial-key KEY --pid PID`` (watch
mode) or ``... --trial-key KEY --status-fd N --exec -- CMD`` (run mode). The protocol with
the processes that start it is ``tunescope/_protocol.py``.

Start-up: the first sample is taken as soon as the arguments are read (and, in run mode, the
command started); the store (with numpy) and the GPU library load afterwards in a thread of
their own while the sampler samples on schedule, keeping its samples until the writer exists.
GPU values start at the sample after the GPU library opened.

The store comes from ``$TUNESCOPE_STORE`` (never the command line: it may hold a password),
the trial's spec from ``$TUNESCOPE_SAMPLER_SPEC``. SIGINT, SIGHUP and SIGQUIT are ignored:
Ctrl-C and a closing terminal reach the whole process group, and the sampler must outlive the
training to record its end (its launchers start it in a process group of its own, too). In
watch mode SIGTERM stops it in order, like ``stop``; in run mode it stops nothing while the
command lives (systemd's stop signals every process of the unit: the command gets its own
SIGTERM, and the sampler records how it ended).

How the sampler ends a trial: in run mode, with the command's exit code (completed on 0, else
failed), whoever else died; in watch mode, on ``exit CODE`` the same way, on ``end JSON`` with
the end the launcher handed over (written only if the trial is still running: the launcher
writes it too), and when the root process ends without a ``stop``: with its exit code when the
sampler saw it a zombie nobody had reaped yet, else ``failed`` (either only if no one recorded
another end first). A root that the kernel's OOM killer ended (``Root.oom``) ends ``failed``
with ``out of memory (killed by the kernel)``. After a ``stop`` it leaves the state alone.
Then it *lingers*: it gives the store up to ``$TUNESCOPE_LINGER`` seconds (default
:data:`LINGER_S`) to take what it holds, spools what is left, and, once the store is back,
replays the spool files other processes released (a training that ended while the store was
away hands its last batches over that way).

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
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import IO, TYPE_CHECKING

import tunescope._clock as _clock
import tunescope._protocol as protocol
from tunescope._env import ENV_LINGER, ENV_SAMPLER_SPEC, ENV_STORE, ENV_STORE_FILE
from tunescope._once import Once
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

if TYPE_CHECKING:
    from tunescope.collect._gpu import GpuBackend
    from tunescope.store import Batch, Store, TrialEnd, TrialSpec, Writer

__all__ = ["LINGER_S", "main", "parser"]

HANDOVER_WAIT_S = 1.5
"""Watch mode: how long, once stopped, the sampler waits for the launcher to close its stdin
(after the ``batch`` lines it may hand over within its 0.8 s of leaving)."""
LINGER_S = 120.0
"""Longest a sampler waits, after its trial ended, for the store to take what it holds."""

EXIT_WORD_WAIT_S = 1.0
"""Watch mode: how long, once the root ended, the sampler waits for ``exit CODE`` on stdin."""

FLUSH_EVERY_S = 1.0
"""How often the sampler hands its samples to the writer."""

READY_WAIT_S = 1.0
"""How long the first sample may take to land before ``ready`` is said anyway."""


def parser() -> argparse.ArgumentParser:
    """The sampler's command line."""
    p = argparse.ArgumentParser(
        prog=f"python -m {protocol.MODULE}",
        description="Sample a trial's process tree (and its GPUs) into the tunescope store "
        f"${ENV_STORE} names, until '{protocol.STOP}' on stdin or the end of the trial's "
        "root process.",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument(protocol.TRIAL_KEY, metavar="KEY", help="key of the trial to record")
    who.add_argument(
        protocol.TRIAL_ID, metavar="ID", type=int, help="id of a trial already in the store"
    )
    p.add_argument(
        protocol.ROOT_PID,
        metavar="PID",
        type=int,
        help="root process of the trial (watch mode); its descendants are watched too",
    )
    p.add_argument(
        protocol.INTERVAL,
        metavar="S",
        type=float,
        default=1.0,
        help=f"seconds between samples (default 1.0, at least {MIN_INTERVAL})",
    )
    p.add_argument(
        protocol.GAP_SINCE,
        metavar="T",
        type=float,
        default=None,
        help="this sampler replaces one that died, last seen alive at epoch T",
    )
    p.add_argument(
        protocol.NODE,
        action="store_true",
        help="node sampler: sample this node's part of a multi-node trial; the primary "
        "sampler (node rank 0) records the trial's end and events, this one neither",
    )
    p.add_argument(
        protocol.STATUS_FD,
        metavar="FD",
        type=int,
        default=None,
        help=f"run mode: file descriptor for '{protocol.PID} N' and '{protocol.EXIT} CODE' lines",
    )
    p.add_argument(
        protocol.STDERR_FD,
        metavar="FD",
        type=int,
        default=None,
        help="run mode: file descriptor the command's stderr goes to",
    )
    p.add_argument(
        protocol.FOREGROUND,
        action="store_true",
        help="run mode: make the command's process group the terminal's foreground group",
    )
    p.add_argument(
        protocol.EXEC,
        dest="run_mode",
        action="store_true",
        help="run mode: start the command that follows (after --) and record it",
    )
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(the sampler's own arguments, the command after ``--exec [--]`` or None)."""
    args = list(argv)
    if protocol.EXEC not in args:
        return args, None
    i = args.index(protocol.EXEC)
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
        v = float(os.environ.get(ENV_LINGER, ""))
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
    _clock.start()  # the trial's anchor, from the launcher's environment (see _clock)
    status = _Status(args.status_fd)
    stop = StopSignal()
    root: Root
    if command:  # run mode: the command first, before anything slow
        if spawned is None:
            try:
                spawned = spawn(
                    command,
                    args.stderr_fd,
                    os.environ,
                    ENV_SAMPLER_SPEC,
                    foreground=args.foreground,
                )
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
        if command and not root.ended():  # run mode: the command's end is ours to record
            log("sigterm", "SIGTERM: going on until the command ends, to record its end")
            return
        stop.request(protocol.STOP)

    signal.signal(signal.SIGTERM, _on_term)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but "ready" may reach the real stdout
    if not command:
        StdinWatch(0, stop, log).start()
    # The first sample before anything slow: the store (numpy) and the GPU library load in a
    # thread of their own while the samples go on on schedule (kept, not flushed, till then),
    # so a trial has its first sample within tens of milliseconds of its start.
    sampler = Sampler(
        _NoStoreYet(),
        args.trial_key or "",
        root.pid,
        args.interval,
        log=log,
        gap_since=None if args.node else args.gap_since,
        note_starved=not args.node,
    )
    sampler.flush_every = math.inf
    sampler.sample()
    loading = _Loading(args.trial_key, args.trial, root.pid, log, logger)
    loading.create = args.gap_since is None  # a restarted sampler's store was there before
    loading.start()
    sampler.run(loading.done, root)
    loading.join()
    if loading.crashed is not None:
        raise loading.crashed
    if loading.failed is not None:
        logger.error("cannot start: %s", loading.failed)
        if loading.writer is not None:
            loading.writer.close(0.0)
        return _ended_early(root, status, protocol.EXIT_CANNOT_START)
    writer, url = loading.writer, loading.url
    assert writer is not None and loading.key is not None
    sampler.sink, sampler.key = writer, loading.key
    stop.attach(writer)  # what the training hands over when it leaves
    sampler.flush_every = FLUSH_EVERY_S
    if loading.gpu is not None:
        sampler.add_gpu(loading.gpu)  # from the next sample on
    sampler.flush()
    if not command:  # the SDK waits for "ready"; the samples go on meanwhile, on schedule
        threading.Thread(
            target=_say_ready, args=(writer, out), name="tunescope-ready", daemon=True
        ).start()
    sampler.run(stop.event, root)
    if not command:
        _await_word(stop)
    end = None if args.node else _how_it_ended(stop, root)
    if command and root.code is not None:
        status.say(f"{protocol.EXIT} {root.code}")  # tunescope run exits now; we write on
    sampler.finish(end)
    if not command:
        _await_eof(stop)
    _linger(writer, url, logger)
    return 0


def _say_ready(writer: Writer, out: IO[str]) -> None:
    """Say ``ready`` once the first samples landed, or after :data:`READY_WAIT_S` (a store
    that is away): from a thread of its own, so that the wait never holds the sampling."""
    writer.flush(READY_WAIT_S)
    with contextlib.suppress(OSError, ValueError):
        out.write(protocol.READY + "\n")
        out.flush()


class _Loading(threading.Thread):
    """Loads what the sampler needs past its first sample, while it samples: the store
    (with numpy), the trial's key (from the store, for ``--trial ID``), its writer, the GPU
    backend (the NVML library). :attr:`done` is set at the end; :attr:`failed` says why the
    sampler cannot start, if it cannot."""

    def __init__(
        self, key: str | None, trial: int | None, pid: int, log: Once, logger: logging.Logger
    ) -> None:
        super().__init__(name="tunescope-loading", daemon=True)
        self._args = (key, trial, pid)
        self._log = log
        self._logger = logger
        self.done = threading.Event()
        self.failed: TunescopeError | None = None
        self.crashed: BaseException | None = None
        self.url = ""
        self.key: str | None = None
        self.writer: Writer | None = None
        self.gpu: GpuBackend | None = None
        self.create = True
        """Whether the writer may create the store; a restarted sampler's may not: the store
        was there when its trial began, and one that went away is not made anew, empty."""

    def run(self) -> None:
        try:
            self._load()
        except TunescopeError as exc:
            self.failed = exc
        except BaseException as exc:  # a bug: the main thread raises it
            self.crashed = exc
        finally:
            self.done.set()

    def _load(self) -> None:
        from tunescope.store import TrialSpec, Writer, resolve_url

        key, trial, pid = self._args
        self.url = url = resolve_url(None)
        spec: TrialSpec | None = None
        raw = os.environ.get(ENV_SAMPLER_SPEC)
        if raw:
            try:
                spec = TrialSpec.from_json(raw)
            except ValueError as exc:
                self._logger.error("ignoring a bad %s: %s", ENV_SAMPLER_SPEC, exc)
        self.key = key = key or _key_of(url, trial or 0)
        self.writer = Writer(
            url,
            spec=spec if spec and spec.key == key else None,
            name="sampler",
            log=self._log,
            store_factory=_opener(self.create, os.environ.get(ENV_STORE_FILE) or None),
        )
        from tunescope.collect._gpu import open_gpu_backend

        self.gpu = open_gpu_backend(pid, log=self._log)


def _opener(create: bool, expected: str | None) -> Callable[[str], Store] | None:
    """How the sampler's writer opens the store: the default (creating it) when it may
    create one and was told no file; else one that exists, and, for ``expected`` (the trial's
    SQLite file, ``DEVICE:INODE``: see ``tunescope/_protocol.py``), that file and no other
    (StoreUnavailable: the writer spools and tries again)."""
    if create and expected is None:
        return None

    def open_existing(url: str) -> Store:
        from tunescope.errors import StoreUnavailable
        from tunescope.store import display, file_id, open_store

        st = open_store(url, create=False)
        if expected is not None and file_id(url) != expected:
            st.close()
            raise StoreUnavailable(
                f"{display(url)} is not the store file this trial began in (it was deleted "
                "or replaced); the sampler keeps its data in its spool"
            )
        return st

    return open_existing


class _NoStoreYet:
    """The first sample's sink until the store is opened: never written to (the first flush
    comes after the writer replaced it)."""

    def put(self, batch: Batch) -> None:  # pragma: no cover - a bug if reached
        raise AssertionError("the sampler flushed before its store was opened")


def _key_of(url: str, trial_id: int) -> str:
    from tunescope.store import open_store

    with open_store(url, create=False) as st:
        return st.get_trial(trial_id).key


def _ended_early(root: Root, status: _Status, code: int) -> int:
    """The sampler cannot record; in run mode the command still runs to its end."""
    if root.child:
        while root.ended_at is None:
            time.sleep(0.05)
        status.say(f"{protocol.EXIT} {root.code}")
    return code


def _await_word(stop: StopSignal) -> None:
    """Watch mode, the root ended: a launcher that reaped it (``tunescope run``'s wrapper)
    says ``exit CODE`` right after; wait up to :data:`EXIT_WORD_WAIT_S` for that word, unless
    stdin closed (the root held it: nobody is left to say anything)."""
    deadline = time.monotonic() + EXIT_WORD_WAIT_S
    while stop.reason is None and not stop.eof and time.monotonic() < deadline:
        stop.event.wait(0.02)


def _await_eof(stop: StopSignal) -> None:
    """Watch mode, stopped: the launcher may still hand over ``batch`` lines (what its writer
    could not keep as it left) before it closes stdin; wait up to :data:`HANDOVER_WAIT_S` for
    that, so that they reach the writer before it is closed."""
    deadline = time.monotonic() + HANDOVER_WAIT_S
    while not stop.eof and time.monotonic() < deadline:
        time.sleep(0.02)


def _how_it_ended(stop: StopSignal, root: Root) -> TrialEnd | None:
    import dataclasses

    from tunescope.store import TrialEnd

    now = _clock.now()
    if stop.reason == protocol.STOP:
        return None
    if stop.reason == protocol.END:
        return stop.end
    end: TrialEnd | None = None
    code: int | None = None
    if stop.reason == protocol.EXIT and stop.code is not None:
        code = stop.code
        end = end_of(code, now)
    elif root.child and root.code is not None:
        code = root.code
        end = end_of(code, root.ended_at or now)
    elif root.ended():  # the root ended without a stop: killed, crashed or exited
        code = root.code  # seen as a zombie, when it was
        t = root.ended_at or now
        if code is not None:
            end = dataclasses.replace(end_of(code, t), only_if_running=True)
        else:
            end = TrialEnd("failed", t, failure_message(root.pid), only_if_running=True)
    if end is not None and end.state == "failed" and root.oom.killed(code):
        # the OOM killer's kill is a SIGKILL: its code, also when another process (the
        # training's launcher) reaped it before this sampler saw it a zombie
        end = dataclasses.replace(end, error=protocol.OOM_KERNEL, exit_code=128 + signal.SIGKILL)
    return end


def _linger(writer: Writer, url: str, logger: logging.Logger) -> None:
    """Give the store until the linger deadline to take what this sampler holds, then replay
    what other processes left in the spool (see the module doc)."""
    from tunescope.store import open_store, replay

    deadline = time.monotonic() + linger_s()
    if not writer.close(max(0.0, deadline - time.monotonic())):
        logger.warning(
            "the store did not take everything in time; what is left waits in the spool "
            "(tunescope sync writes it)"
        )
        return
    try:
        with open_store(url, create=False) as st:  # never a new store where one went away
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
