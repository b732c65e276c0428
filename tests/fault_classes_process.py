"""The process-side fault classes of the matrix (tests/fault_matrix.py): the training killed by
the kernel's OOM killer in a real memory cgroup, a CUDA out-of-memory error leaving its trial,
the trial's clock stepped by +10 and -10 min and skewed 2 min behind, and a signal reaching
`tunescope run` by terminal (Ctrl-C), by process group (SIGTERM), by hang-up. Each is one
:class:`fault_matrix.Fault`; the store plays no part in most, so they run on SQLite, and the
skew, whose ``running`` is judged on the store's clock, on every store.

How a training that never finishes its work is counted (the OOM classes): the fault strikes
at the top of one of its steps (:data:`STEP_SHIM`, a ``sitecustomize`` on the PYTHONPATH of
the training's processes, run in the training's main thread when it gets SIGUSR1: a line
trace stops it at the loop's first line, where no mark or log is half made). There it writes
what the training made and how long its calls held (:data:`fault_helpers.TRAINING`'s own
figures), then the step runs out of memory. Every mark and scalar made must be kept; leaving
the trial is not measured (it never leaves).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from fault_helpers import TRAINING, memory_cgroup, sample_times, samplers_of, shimmed
from fault_matrix import Cell, End, Fault, SignalByPid
from tunescope._protocol import OOM_CUDA, OOM_KERNEL
from tunescope.store import open_store

STEP_SHIM = '''
"""A fault at a training step, for tests (tests/fault_classes_process.py): on SIGUSR1 the
main thread of a process running fault_helpers.TRAINING stops at the first line of its loop
($TS_STEP_LINE), writes what it made to $TS_STEP_MADE, then runs out of memory as
$TS_STEP_FAULT says: "kernel" (moves itself into the memory cgroup $TS_STEP_CGROUP and
allocates until the kernel kills it) or "cuda" (torch.cuda.OutOfMemoryError leaves the
trial, as from a `with run.trial()` block)."""
import json, os, signal, sys, time

_LINE = int(os.environ.get("TS_STEP_LINE") or 0)


def _strike(frame):
    g = frame.f_globals
    made = {k: g[k] for k in ("marks", "enter_run", "enter")}
    made["longest_call"] = g["longest"]
    with open(os.environ["TS_STEP_MADE"], "w") as f:
        json.dump(made, f)
    if os.environ["TS_STEP_FAULT"] == "kernel":
        with open(os.path.join(os.environ["TS_STEP_CGROUP"], "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(1.5)  # the step's first part: the sampler reads the process's new cgroup
        held = []
        while True:
            held.append(b"x" * (1 << 20))
            time.sleep(0.01)
    import torch

    err = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    g["trial"].__exit__(type(err), err, None)  # the with block's end, the error passing
    raise err


def _trace(frame, event, arg):
    if event == "line" and frame.f_code.co_filename == "<string>" and frame.f_lineno == _LINE:
        frame.f_trace = None
        sys.settrace(None)
        _strike(frame)
    return _trace


def _at_step(signum, frame):
    while frame.f_back is not None:
        frame = frame.f_back
    frame.f_trace = _trace
    frame.f_trace_lines = True
    sys.settrace(lambda *a: None)  # tracing on for this thread; only the loop's frame traced


if os.environ.get("TS_STEP_FAULT") and _LINE:
    signal.signal(signal.SIGUSR1, _at_step)
'''

CUDA_MESSAGE = "CUDA out of memory. Tried to allocate 80.00 GiB"


def _loop_line() -> int:
    """The line of :data:`fault_helpers.TRAINING` that begins a step (as ``-c`` numbers it)."""
    return TRAINING.split("\n").index("    a = now()") + 1


def _sent(cell: Cell) -> bool:
    return bool(cell.stash.get("sent"))


# ---------------------------------------------------------------------- out of memory
class _OutOfMemory(Fault):
    """A training step runs out of memory (see the module doc); ``kind``: "kernel" or
    "cuda"."""

    kind: ClassVar[str] = ""
    stores = ("sqlite",)
    phases = ("middle", "across-end")  # a step that runs: from the start on, or the last

    def around(self, cell: Cell) -> contextlib.AbstractContextManager[None]:
        return self._around(cell)

    @contextlib.contextmanager
    def _around(self, cell: Cell) -> Iterator[None]:
        shim = cell.folder / "step-shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(STEP_SHIM, encoding="utf-8")
        path = cell.env.get("PYTHONPATH", "")
        cell.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), path) if p)
        cell.env.update(
            TS_STEP_FAULT=self.kind,
            TS_STEP_LINE=str(_loop_line()),
            TS_STEP_MADE=str(cell.folder / "made.json"),
        )
        with contextlib.ExitStack() as stack:
            if self.kind == "kernel":
                cgroup = stack.enter_context(memory_cgroup(64 << 20))
                cell.env["TS_STEP_CGROUP"] = str(cgroup)
            yield

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.proc is not None
        cell.stash["sent"] = cell.proc.poll() is None
        if _sent(cell):
            cell.proc.send_signal(signal.SIGUSR1)

    def heal(self, cell: Cell, phase: str) -> None:
        pass

    def finish(self, cell: Cell) -> dict[str, Any]:
        assert cell.proc is not None
        _out, err = cell.proc.communicate(timeout=120)
        made = cell.folder / "made.json"
        assert made.exists(), f"the fault never struck a step (rc {cell.proc.returncode}): {err}"
        result: dict[str, Any] = json.loads(made.read_text())
        result.update(leave=None, stderr=err, rc=cell.proc.returncode)
        cell.stash["stderr"] = err
        return result


class OomKilled(_OutOfMemory):
    """The training moves itself into a 64 MiB memory cgroup (v2, else v1) at a step and
    allocates there until the kernel's OOM killer ends it with SIGKILL; its sampler, outside,
    records the end: failed, out of memory (killed by the kernel), code 137."""

    name = "training OOM-killed"
    kind = "kernel"

    def end(self, cell: Cell, phase: str) -> End:
        return End("failed", OOM_KERNEL, 128 + signal.SIGKILL)

    def misses(self, cell: Cell, phase: str) -> list[str]:
        rc = cell.proc.returncode if cell.proc is not None else None
        return [] if rc == -signal.SIGKILL else [f"the training ended {rc}, not SIGKILL"]


class CudaOom(_OutOfMemory):
    """``torch.cuda.OutOfMemoryError`` raised at a step leaves the trial (as from its
    ``with`` block) and the process: failed, out of memory (CUDA) and the error (the
    allocator's peak where CUDA ran: not on a CPU machine, nor here, where it never did)."""

    name = "CUDA OOM"
    kind = "cuda"

    def end(self, cell: Cell, phase: str) -> End:
        return End("failed", f"{OOM_CUDA}; OutOfMemoryError: {CUDA_MESSAGE}", None)

    def misses(self, cell: Cell, phase: str) -> list[str]:
        rc = cell.proc.returncode if cell.proc is not None else None
        err = str(cell.stash.get("stderr", ""))
        if rc == 1 and f"OutOfMemoryError: {CUDA_MESSAGE}" in err:
            return []
        return [f"the training ended {rc} without the error: {err[-300:]}"]


# ---------------------------------------------------------------------- the clock
SLACK_S = 0.5
"""Seconds a stored time may lie outside this test's own readings of the true clock around
the cell (the stamps are taken inside them; this covers a process's start and float sums)."""


class _Clock(Fault):
    """The wall clock of the trial's processes (the training and the sampler it starts) runs
    off by ``skew`` s from their start and by ``step`` s more once applied, by
    :data:`fault_helpers.SHIM` on their PYTHONPATH (the system clock is never touched). Its
    own targets: every sample, mark and scalar, the start and the end lie within the cell's
    true span less the skew, in the order taken; the stepped clock was read in at least two
    processes (the training and its sampler) where it was stepped while the training ran.
    After the end only the sampler lives, and once started it reads no wall clock (its times
    are the trial's anchor plus ``time.monotonic()``): that step shows nowhere, as it should.
    At the start, the step comes as soon as the training is inside its trial (its anchor
    taken, its sampler starting)."""

    stores = ("sqlite",)
    before_start = False
    step: ClassVar[float] = 0.0
    skew: ClassVar[float] = 0.0

    def around(self, cell: Cell) -> contextlib.AbstractContextManager[None]:
        return self._around(cell)

    @contextlib.contextmanager
    def _around(self, cell: Cell) -> Iterator[None]:
        env, step_file, proofs = shimmed(cell.folder, self.skew)
        names = ("PYTHONPATH", "TS_SHIM_SKEW", "TS_SHIM_STEP", "TS_SHIM_PROOF")
        cell.env.update({k: env[k] for k in names})
        cell.stash.update(step_file=step_file, proofs=proofs, lo=time.time())
        yield

    def apply(self, cell: Cell, phase: str) -> None:
        if self.step:
            cell.stash["step_file"].write_text(repr(self.step), encoding="utf-8")

    def heal(self, cell: Cell, phase: str) -> None:
        pass  # a step stays: the clock does not come back

    def note(self, cell: Cell) -> str:
        return f"shim in {len(os.listdir(cell.stash['proofs']))} processes"

    def misses(self, cell: Cell, phase: str) -> list[str]:
        out = []
        proved = len(os.listdir(cell.stash["proofs"]))
        if proved < 2 and (self.skew or phase != "after-end"):
            out.append(f"the clock was off in {proved} processes only")
        lo = cell.stash["lo"] + self.skew - SLACK_S
        hi = time.time() + self.skew + SLACK_S
        with open_store(cell.url, create=False) as st:
            info = st.trial_by_key(cell.key)
            t = sample_times(st, info.id, "cpu.procs")
            ev = st.events(info.id, lo - 1e4, hi + 1e4, kinds=["mark"], limit=10**6).events
            loss = st.scalars(info.id, "loss")
        assert ev is not None
        end = info.end if info.end is not None else hi
        if not lo <= info.start < end <= hi:
            out.append(f"the trial's span {info.start:.1f}-{end:.1f} is not in {lo:.1f}-{hi:.1f}")
        marks = sorted((int(e.name[1:]), e.t) for e in ev if e.name.startswith("m"))
        steps = sorted((s.step, s.t) for s in loss if s.step is not None)
        for what, times in (("marks", marks), ("scalars", steps)):
            at = [x for _k, x in times]
            if any(b < a for a, b in itertools.pairwise(at)):
                out.append(f"{what} out of the order they were made in")
            if at and not (info.start - SLACK_S <= at[0] and at[-1] <= end + SLACK_S):
                out.append(f"{what} outside the trial's span")
        if t and not (lo <= t[0] and t[-1] <= hi):
            out.append(f"samples at {t[0]:.1f}-{t[-1]:.1f}, not in {lo:.1f}-{hi:.1f}")
        return out


class ClockStepForward(_Clock):
    name = "clock stepped +10 min"
    step = 600.0


class ClockStepBack(_Clock):
    name = "clock stepped -10 min"
    step = -600.0


class ClockSkewed(_Clock):
    """The trial's processes run 2 min behind from the start; a reader with the true clock
    reads the trial ``running`` while it runs (``lost`` is judged on the store's clock)."""

    name = "clock skewed -2 min"
    stores = ("sqlite", "postgresql", "http")
    phases = ("start",)
    skew = -120.0

    def heal(self, cell: Cell, phase: str) -> None:  # 1.5 s into the trial
        states = []
        for _ in range(3):
            with open_store(cell.url, create=False) as st:
                states.append(st.trial_by_key(cell.key).state)
            time.sleep(0.3)
        cell.stash["states"] = states

    def misses(self, cell: Cell, phase: str) -> list[str]:
        states = cell.stash.get("states", [])
        out = [] if states == ["running"] * 3 else [f"read {states} while it ran"]
        return out + super().misses(cell, phase)


# ---------------------------------------------------------------------- signals
class SignalByGroup(SignalByPid):
    """SIGTERM to the process group `tunescope run` leads (systemd's stop, Slurm's scancel,
    `timeout`): the command, in a group of its own, gets it once (forwarded); the sampler is
    not in the group and is still alive half a second later."""

    name = "signal by process group"

    def popen(self, cell: Cell, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cell.env,
            process_group=0,  # the wrapper leads a group, as a shell's job or a unit's process
        )

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.proc is not None
        samplers = samplers_of(cell.key)
        try:
            os.killpg(cell.proc.pid, signal.SIGTERM)
            cell.stash["sent"] = True
        except ProcessLookupError:  # the group is gone with the wrapper
            cell.stash["sent"] = False
        if cell.stash["sent"]:
            time.sleep(0.5)
            cell.stash["spared"] = [p for p in samplers if p in samplers_of(cell.key)]
            cell.stash["samplers"] = samplers

    def note(self, cell: Cell) -> str:
        spared = len(cell.stash.get("spared", []))
        return (
            f"{super().note(cell)}, samplers spared {spared}/{len(cell.stash.get('samplers', []))}"
        )

    def misses(self, cell: Cell, phase: str) -> list[str]:
        out = super().misses(cell, phase)
        if cell.stash.get("sent") and cell.stash["spared"] != cell.stash["samplers"]:
            out.append("a sampler stopped with the group")
        return out


class _Terminal(SignalByPid):
    """`tunescope run` started as a shell starts a job in a terminal of its own (a pty: it
    leads the session, the terminal is its controlling one, its stdin; its output goes to
    pipes the cell reads)."""

    def popen(self, cell: Cell, argv: list[str]) -> subprocess.Popen[str]:
        import fcntl
        import pty
        import termios

        master, slave = pty.openpty()

        def take_terminal() -> None:  # in the child: after setsid, the pty becomes its own
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            p = subprocess.Popen(
                argv,
                stdin=slave,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=cell.env,
                start_new_session=True,
                preexec_fn=take_terminal,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        cell.stash["master"] = master
        return p

    def close(self, cell: Cell) -> None:
        """Close the terminal's master side (a hang-up, while anyone holds the terminal)."""
        master = cell.stash.pop("master", None)
        if master is not None:
            os.close(master)

    def finish(self, cell: Cell) -> dict[str, Any]:
        try:
            return super().finish(cell)
        finally:
            self.close(cell)


class SignalByTerminal(_Terminal):
    """Ctrl-C typed into the terminal: the command's group is the terminal's foreground group,
    so the SIGINT reaches the command alone, once."""

    name = "signal by terminal"
    sig = signal.SIGINT

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.proc is not None
        cell.stash["sent"] = cell.proc.poll() is None
        if cell.stash["sent"]:
            os.write(cell.stash["master"], b"\x03")  # as typed


class SignalByHangup(_Terminal):
    """The terminal hangs up (its master side closes): the kernel sends SIGHUP to the session
    leader, the wrapper, which forwards it to the command, once."""

    name = "signal by hang-up"
    sig = signal.SIGHUP

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.proc is not None
        cell.stash["sent"] = cell.proc.poll() is None
        self.close(cell)


PROCESS_CLASSES: list[Fault] = [
    OomKilled(),
    CudaOom(),
    ClockStepForward(),
    ClockStepBack(),
    ClockSkewed(),
    SignalByTerminal(),
    SignalByGroup(),
    SignalByHangup(),
]
"""The process-side classes, in the order the matrix runs them."""
