"""`tunescope run -- CMD`: run any command as a trial, with no change to its code.

The wrapper is transparent: it exits with the command's code (128 + N after signal N), never
leaves the command without a parent waiting for it, and never holds it up for the store.

Processes: the wrapper starts the sampler in run mode (``--exec``), which starts the command
first thing and is its parent, so the command's end and exit code are recorded whoever else
dies; the sampler reports ``pid N`` and ``exit CODE`` on a pipe (``tunescope/_protocol.py``).
The wrapper is a child subreaper: if the sampler dies, the command becomes the wrapper's
child, the wrapper starts a watch-mode sampler on it (the gap is recorded) and reaps the
command itself. If the wrapper dies, the sampler goes on and records the command's real end.

When no sampler is left to record the command's end (the samplers kept dying past their
restarts, or none could start), the wrapper writes it itself once the command ended: the
exit code is recorded whatever happened to the samplers (a write bounded like a trial's
exit, :data:`~tunescope.record.EXIT_WAIT_S`; what the store does not take by then is spooled).
It exits with the command's code in every case.

Signals: the command runs in a process group of its own, made the terminal's foreground
group when the wrapper was (``--foreground``, see ``tunescope/_protocol.py``), and the
samplers in groups of their own. So the terminal's Ctrl-C, Ctrl-\\ and window signals reach
the command alone, and whatever reaches the wrapper (a ``kill`` of its pid, a SIGTERM to its
process group from systemd, Slurm or ``timeout``, a hang-up of the terminal it leads) reached
nothing else: the wrapper forwards each to the command's group once. A group signal never
stops a sampler, which records the command's end. Once the command ended, the wrapper takes
the terminal's foreground back before it exits.

Waiting: the wrapper sleeps until something happens, in one ``select`` on a ``signalfd`` of
those signals (they stay blocked, so they wait for it as they would for ``sigtimedwait``), the
sampler's status pipe and ``pidfd`` descriptors of the processes it waits for (the sampler;
after a sampler died, the command and its new sampler). While the command is its own child,
it also wakes every :data:`~tunescope.collect.OomWatch.OOM_EVERY_S` to read the command's OOM
counter. Where Linux gives no ``signalfd`` or ``pidfd`` (before 5.3), it polls every
:data:`POLL_S` instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, Any

import tunescope._protocol as protocol
from tunescope import _clock
from tunescope._env import ENV_SAMPLER_SPEC
from tunescope._names import default_run_name
from tunescope.collect import OomWatch, end_of, give_terminal, spawn, terminal_is_ours
from tunescope.errors import ConfigError, Conflict, NotFound, StoreError, StoreUnavailable
from tunescope.record import (
    ENTER_WAIT_S,
    EXIT_WAIT_S,
    MAX_RESTARTS,
    Background,
    Job,
    SamplerHandle,
    check_mode,
    find_job,
    held_since,
    job_key,
    own_group,
    sampler_env,
    start_sampler,
    trial_env,
)
from tunescope.store import (
    Batch,
    TrialEnd,
    TrialSpec,
    Writer,
    absolute_url,
    new_key,
    open_store,
    os_user,
    project_of,
    redact,
)

__all__ = ["parse_params", "run_command"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.05
"""Seconds between the loop's turns where it cannot sleep on descriptors (see the module doc)."""
MAX_PARAM_DEPTH = 32
"""How deeply a --param value's lists and objects may nest."""


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``K=V`` pairs into a dict; V is read as JSON when it parses (numbers, true, null,
    lists), else kept as a string. A malformed item raises ConfigError naming it."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"malformed --param {item!r}: expected KEY=VALUE")
        key = key.strip()
        if key in out:
            raise ConfigError(f"--param {key!r} given twice")
        too_deep = ConfigError(f"--param {key}: nested more than {MAX_PARAM_DEPTH} levels deep")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        except RecursionError:  # deeper than the decoder goes
            raise too_deep from None
        if _deeper_than(value, MAX_PARAM_DEPTH):
            raise too_deep
        if not _finite(value):
            raise ConfigError(f"--param {key}={raw}: not a finite number (NaN and infinity)")
        out[key] = value
    return out


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``levels`` deep."""
    if not isinstance(value, (list, dict)):
        return False
    if levels == 0:
        return True
    items = value if isinstance(value, list) else value.values()
    return any(_deeper_than(v, levels - 1) for v in items)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _subreaper() -> bool:
    """Become the parent of any orphan among our descendants (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _create_trial(url: str, spec: TrialSpec, job: Job | None) -> tuple[int, str]:
    """Create the trial; a ``--trial`` name its run already has is refused (Conflict). In a
    multi-node ``job`` the trial another node created is joined, while it runs; one that
    ended is refused (the job id was used before)."""
    with open_store(url) as st:
        if job is not None:
            with contextlib.suppress(NotFound):
                known = st.trial_by_key(spec.key)
                if known.state != "running":
                    raise ConfigError(
                        f"job {job.id!r} already recorded trial {known.name!r} of run "
                        f"{spec.run!r} ({known.state}): give another --job-id, --run or --trial"
                    )
                return known.id, known.name
        if spec.name is not None:
            with contextlib.suppress(NotFound):
                taken = st.find_trial(st.get_run(spec.run, project=spec.project).id, spec.name)
                raise Conflict(f"run {spec.run!r} already has a trial named {taken.name!r}")
        tid = st.write(Batch(spec.key, spec=spec))
        return tid, st.get_trial(tid).name


def run_command(
    cmd: Sequence[str],
    *,
    run: str | None,
    trial: str | None,
    params: Sequence[str],
    store: str | None,
    interval: float,
    job_id: str | None = None,
    node_rank: int | None = None,
) -> int:
    """Run ``cmd`` as a trial; returns its exit code (128 + N when killed by signal N).

    Everything that can be checked is checked before anything is written: the parameters,
    the command, the interval and the store (a store that does not answer within
    ENTER_WAIT_S is not waited for: the command starts and its data is spooled). With
    ``$TUNESCOPE_MODE=disabled`` the process becomes ``cmd`` once the parameters, interval
    and command are checked: nothing is recorded and the exit code is the command's own.

    In a multi-node job (``job_id``, ``node_rank``: see ``record/_job.py``) every node's
    command records into one trial whose key the nodes derive alike; the node of rank 0
    records its end, the others sample their node only."""
    if not cmd:
        raise ConfigError("no command given: use tunescope run [OPTIONS] [--] CMD [ARGS...]")
    parsed = parse_params(params)
    if not (math.isfinite(interval) and 0.1 <= interval <= 3600):
        raise ConfigError(f"--interval {interval} is out of range: use 0.1 to 3600 seconds")
    if shutil.which(cmd[0]) is None:
        raise ConfigError(f"command not found: {cmd[0]}")
    if check_mode() == "disabled":  # $TUNESCOPE_MODE=disabled: just the command, as if unwrapped
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvp(cmd[0], list(cmd))
    job = find_job(cmd, job_id=job_id, node_rank=node_rank)
    url = absolute_url(store)
    run_name = run or default_run_name(os.path.basename(cmd[0]), None if job is None else job.id)
    if not run_name.strip():
        raise ConfigError("--run must not be empty")
    project = project_of(url)
    spec = TrialSpec(
        key=new_key() if job is None else job_key(project, run_name, job.id, trial or ""),
        run=run_name,
        name=trial,
        params=parsed,
        host=socket.gethostname(),
        start=_clock.start(),  # the trial's anchor, inherited by the sampler and CMD
        interval=interval,
        project=project,
        os_user=os_user(),
    )
    # the wrapper takes its signals with sigwait (see _Wrapper.run): a thread of its own that
    # did not block them could take one first, and its default action end the wrapper
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:  # the thread keeps the mask it starts with
        probe = Background(lambda: _create_trial(url, spec, job), "tunescope-run-probe")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    probe.wait(ENTER_WAIT_S)
    err = probe.error
    if isinstance(err, ConfigError):
        raise err
    if isinstance(err, StoreError) and not isinstance(err, StoreUnavailable):
        raise err  # a store that can never take this trial: bad input, nothing started
    where = "" if job is None else f" (job {job.id}, node {job.node_rank})"
    if probe.value is not None:
        tid, name = probe.value
        print(
            f"tunescope: run {run_name!r} trial {name!r}{where} -> {redact(url)}",
            file=sys.stderr,
        )
    else:
        tid = None
        why = err if err is not None else f"no answer within {ENTER_WAIT_S:g} s"
        print(
            f"tunescope: run {run_name!r} -> {redact(url)}: the store does not answer ({why}); "
            "the command starts, its data waits in the spool until the store is back",
            file=sys.stderr,
        )
    env = sampler_env(
        spec, url, {**os.environ, **trial_env(url, run_name, spec.key, interval, trial_id=tid)}
    )
    node = job is not None and not job.primary
    return _Wrapper(cmd, url, spec, env, node=node).run()


class _Signals:
    """The signals the wrapper forwards, as descriptors to sleep on. They stay blocked in
    the wrapper's thread; one pending for the process is read from a ``signalfd(2)`` (as
    ``sigtimedwait`` takes it). A thread that does not block them (one a library started
    before the wrapper did: OpenBLAS's, when numpy is imported) would end the wrapper by
    their default action: a handler that does nothing is set for each, and a signal
    delivered there is read from Python's wakeup descriptor (``signal.set_wakeup_fd``).
    :meth:`close` puts the handlers back. Where there is no ``signalfd``, ``sigfd`` is -1."""

    _INFO = 128  # sizeof(struct signalfd_siginfo); ssi_signo is its first uint32

    def __init__(self, signals: Sequence[int]) -> None:
        self.sigfd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            mask = ctypes.create_string_buffer(128)  # a sigset_t, filled by libc
            libc.sigemptyset(mask)
            for sig in signals:
                libc.sigaddset(mask, int(sig))
            fd = int(libc.signalfd(-1, mask, os.O_NONBLOCK | os.O_CLOEXEC))
            self.sigfd = fd if fd >= 0 else -1
        except (OSError, AttributeError):
            pass
        self.wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wake: int | None = None
        self._old: dict[int, Any] = {}
        try:  # the main thread only (as the CLI runs it)
            self._old_wake = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
            self._old = {sig: signal.signal(sig, _ignore) for sig in signals}
        except ValueError:
            pass

    def fds(self) -> list[int]:
        return [fd for fd in (self.sigfd, self.wake_r) if fd >= 0]

    def take(self) -> list[int]:
        """The signals that came since the last call, taken."""
        got: list[int] = []
        while self.sigfd >= 0:
            try:
                data = os.read(self.sigfd, 8 * self._INFO)
            except OSError:  # BlockingIOError: none left
                break
            for at in range(0, len(data) - self._INFO + 1, self._INFO):
                got.append(int.from_bytes(data[at : at + 4], sys.byteorder))
            if len(data) < 8 * self._INFO:
                break
        while True:
            try:
                data = os.read(self.wake_r, 512)
            except OSError:
                break
            got.extend(data)  # one byte a signal: its number
            if len(data) < 512:
                break
        return got

    def close(self) -> None:
        for sig, old in self._old.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, old)
        if self._old_wake is not None:
            signal.set_wakeup_fd(self._old_wake)
        for fd in (self.sigfd, self.wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.sigfd = self.wake_r = self._wake_w = -1


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler of :class:`_Signals` (the signal is read from the wakeup
    descriptor)."""


def _forward(child: int, sig: int) -> None:
    """Send ``sig`` to the command's process group (its own: see ``collect/_spawn.py``),
    else to the command alone (it left that group)."""
    try:
        os.killpg(child, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, sig)


class _Wrapper:
    """Starts the sampler in run mode and supervises it until the command ends. ``node``:
    its samplers are node samplers (a multi-node trial's node other than rank 0)."""

    def __init__(
        self,
        cmd: Sequence[str],
        url: str,
        spec: TrialSpec,
        env: dict[str, str],
        *,
        node: bool = False,
    ):
        self.cmd = list(cmd)
        self.url = url
        self.spec = spec
        self.env = env
        self.node = node
        self.child: int | None = None
        self.code: int | None = None
        self.watcher: SamplerHandle | None = None
        self.restarts = 0
        self.alive_at = _clock.now()
        self.gave_up_at: float | None = None
        """When the last sampler was last seen alive, once no more are started: the end
        written here records the gap from then on, as a restarted sampler would."""
        self.log: IO[bytes] | None = None
        self._buf = b""
        self._pending_signals: list[int] = []
        self.foreground = False
        """Whether the wrapper was the terminal's foreground group (the command is made so)."""
        self.oom: OomWatch | None = None
        """The command's OOM watch, once it is the wrapper's child (a sampler died)."""
        self.status_r = -1
        self._status_open = False
        self._sigs: _Signals | None = None
        self._pidfds: dict[int, int] = {}
        self._adopted = True
        """Whether the command, once a sampler died, is the wrapper's child (else its end is
        polled for: a pidfd would stay readable while its zombie waits for another parent)."""

    def run(self) -> int:
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        reaper = _subreaper()
        self.foreground = terminal_is_ours()
        self._sigs = _Signals(_SIGNALS)
        try:
            sampler = self._start_sampler()
            while self.code is None:
                self._signals(sampler)
                if sampler is not None:
                    self._read_status()
                    if self.code is None and sampler.poll() is not None:
                        self._read_status(final=True)
                        if self.code is None:
                            self._sampler_died(sampler.returncode, reaper)
                        sampler = None
                elif self.child is not None:
                    self._reap_child()
                    self._supervise_watcher()
            if self.foreground:
                give_terminal(os.getpgrp())
            # the run-mode sampler said the code and goes on to record it (unless it already
            # failed: it could not open the store)
            recorded = sampler is not None and sampler.poll() in (None, 0)
            if self.watcher is not None:
                recorded = self.watcher.send_exit(self.code)
            if not recorded:
                self._record_end(self.code)
            return self.code
        finally:
            self._sigs.close()
            for fd in self._pidfds.values():
                if fd >= 0:
                    os.close(fd)
            self._pidfds.clear()
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            self._say_sampler_log()

    def _record_end(self, code: int) -> None:
        """No sampler is left to record the command's end: write it here, bounded (see the
        module doc). Node wrappers never end the trial."""
        if self.node:
            return
        end = end_of(code, _clock.now())
        if end.state == "failed" and self.oom is not None and self.oom.killed(code):
            end = TrialEnd(end.state, end.t, protocol.OOM_KERNEL, exit_code=code)
        gap: tuple[tuple[Any, ...], ...] = ()
        if self.gave_up_at is not None and end.t > self.gave_up_at:
            why = f"sampler gave up after {self.restarts} restarts"
            gap = (
                ("sampler_gap", self.gave_up_at, why, None, end.t - self.gave_up_at, None, None),
            )
        try:
            writer = Writer(self.url, spec=self.spec, name="tunescope run")
            writer.put(Batch(self.spec.key, spec=self.spec, events=gap, end=end))
            kept = writer.close(EXIT_WAIT_S) or writer.left_in_spool
        except Exception as exc:  # never in the way of the exit code
            kept = False
            print(f"tunescope: cannot write the command's end ({exc})", file=sys.stderr)
        if not kept:
            print(
                f"tunescope: the command's end (exit code {code}) was not kept: no sampler "
                "was left, and neither the store nor the spool took it",
                file=sys.stderr,
            )

    # ------------------------------------------------------------------ starting
    def _start_sampler(self) -> subprocess.Popen[bytes] | None:
        r, w = os.pipe()
        os.set_blocking(r, False)
        self.status_r = r
        self._status_open = True
        err = os.dup(2)
        self.log = tempfile.TemporaryFile(prefix="tunescope-run-")  # noqa: SIM115
        args = protocol.sampler_command(
            self.spec.key,
            self.spec.interval,
            status_fd=w,
            stderr_fd=err,
            node=self.node,
            foreground=self.foreground,
            command=self.cmd,
        )
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(
                args,
                pass_fds=(w, err),
                stderr=self.log,
                env=self.env,
                **own_group(),  # type: ignore[call-overload]
            )
        except OSError as exc:
            print(f"tunescope: cannot start the sampler ({exc}); running without", file=sys.stderr)
            self._start_alone()
            return None
        finally:
            os.close(w)
            os.close(err)
        return proc

    def _start_alone(self) -> None:
        """Start the command ourselves (the sampler could not start it)."""
        try:
            self.child = spawn(
                self.cmd, None, self.env, ENV_SAMPLER_SPEC, foreground=self.foreground
            )
        except OSError as exc:
            print(f"tunescope: could not start {self.cmd[0]}: {exc}", file=sys.stderr)
            self.code = 127
        if self.child is not None:
            self.oom = OomWatch(self.child)
            self._start_watcher()

    def _start_watcher(self, gap_since: float | None = None) -> None:
        assert self.child is not None
        self.watcher = start_sampler(
            self.url, self.spec, self.child, self.spec.interval, gap_since=gap_since, node=self.node
        )

    # ------------------------------------------------------------------ the loop
    def _pidfd(self, pid: int) -> int:
        """A ``pidfd`` of ``pid`` (readable once it ended), kept; -1 where there is none."""
        fd = self._pidfds.get(pid)
        if fd is None:
            try:
                fd = os.pidfd_open(pid)
            except (OSError, AttributeError):  # Linux before 5.3; a pid gone or not ours
                fd = -1
            self._pidfds[pid] = fd
        return fd

    def _sleep(self, sampler: subprocess.Popen[bytes] | None) -> None:
        """Sleep until a signal, a status line or the end of a process waited for, or the
        OOM watch's next read, is due (see the module doc)."""
        assert self._sigs is not None
        fds = self._sigs.fds()
        timeout: float | None = None
        waited: list[int] = []
        if sampler is not None:
            if self._status_open:
                fds.append(self.status_r)
            waited.append(sampler.pid)
        elif self.child is not None:
            if self._adopted:
                waited.append(self.child)
            else:
                timeout = POLL_S
            if self.watcher is not None:
                waited.append(self.watcher.pid)
            if self.oom is not None:
                timeout = OomWatch.OOM_EVERY_S
        else:
            timeout = POLL_S
        for pid in waited:
            fd = self._pidfd(pid)
            if fd < 0:
                timeout = POLL_S
            else:
                fds.append(fd)
        with contextlib.suppress(InterruptedError):
            select.select(fds, [], [], timeout)

    def _signals(self, sampler: subprocess.Popen[bytes] | None) -> None:
        assert self._sigs is not None
        if self._sigs.sigfd >= 0:
            self._sleep(sampler)
            got = self._sigs.take()
        else:
            info = signal.sigtimedwait(_SIGNALS, POLL_S)
            got = ([] if info is None else [info.si_signo]) + self._sigs.take()
        for sig in got:
            # The command is in a group of its own: nothing the wrapper got reached it. Forward.
            if self.child is None:
                self._pending_signals.append(sig)
            else:
                _forward(self.child, sig)

    def _read_status(self, final: bool = False) -> None:
        while True:
            try:
                chunk = os.read(self.status_r, 4096)
            except BlockingIOError:
                return
            except OSError:
                return
            if not chunk:  # the sampler's end of the pipe is closed: nothing more comes
                self._status_open = False
                return
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            for line in lines:
                word, _, arg = line.decode(errors="replace").partition(" ")
                if word == protocol.PID and arg.isdigit():
                    self.child = int(arg)
                    for sig in self._pending_signals:
                        _forward(self.child, sig)
                    self._pending_signals.clear()
                elif word == protocol.EXIT and arg.lstrip("-").isdigit():
                    self.code = int(arg)
            if not final:
                self.alive_at = _clock.now()

    def _sampler_died(self, returncode: int | None, reaper: bool) -> None:
        """The run-mode sampler ended before the command: the command is now our child."""
        print(
            f"tunescope: the sampler died (code {returncode}); the command goes on, "
            "watched by a new sampler",
            file=sys.stderr,
        )
        if self.child is None:  # it never started the command
            self._start_alone()
            return
        if not reaper:
            print("tunescope: cannot adopt the command (no subreaper)", file=sys.stderr)
        self.oom = OomWatch(self.child)
        self.restarts += 1
        self._start_watcher(gap_since=held_since(self.alive_at, self.spec.start))

    def _reap_child(self) -> None:
        assert self.child is not None
        if self.oom is not None:
            self.oom.check()
        try:
            pid, status = os.waitpid(self.child, os.WNOHANG)
        except ChildProcessError:  # not ours (no subreaper): poll for its end
            self._adopted = False
            try:
                os.kill(self.child, 0)
            except ProcessLookupError:
                self.code = 1
            except PermissionError:
                pass
            return
        if pid:
            self.code = protocol.exit_code_of(status)

    def _supervise_watcher(self) -> None:
        w = self.watcher
        if w is None or self.code is not None:
            return
        if w.poll() is None:
            self.alive_at = _clock.now()
            return
        if self.restarts >= MAX_RESTARTS:
            self.watcher = None
            self.gave_up_at = held_since(self.alive_at, self.spec.start)
            print("tunescope: the sampler keeps dying; hardware series stop", file=sys.stderr)
            return
        self.restarts += 1
        self._start_watcher(gap_since=held_since(self.alive_at, self.spec.start))

    def _say_sampler_log(self) -> None:
        """What the sampler said so far (warnings about the store, the spool)."""
        f = self.log
        if f is None:
            return
        with contextlib.suppress(OSError):
            size = os.fstat(f.fileno()).st_size
            text = os.pread(f.fileno(), min(size, 4000), max(0, size - 4000))
            for line in text.decode(errors="replace").strip().splitlines()[-5:]:
                print(line, file=sys.stderr)
        with contextlib.suppress(OSError):
            f.close()
